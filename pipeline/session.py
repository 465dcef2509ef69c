"""Building the SparkSession the audit runs on, with settings sized for a small machine.

Defaults fit 2 cores and 24 GiB: `local[*]`, 2 GiB driver heap (in local mode the driver is
the executor), 2 shuffle partitions, no UI and no console progress bars. Under spark-submit the
master and any `--conf` given there win: this module only fills in what is unset.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[*]"
DEFAULT_CONF: dict[str, str] = {
    "spark.driver.memory": "2g",
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
}


def build_session(
    master: str | None = None,
    app_name: str = "kraft-audit",
    conf: dict[str, str] | None = None,
) -> Any:
    """Get or create the SparkSession and register the `kraft` data source on it.

    `master` overrides everything; otherwise a master set by spark-submit is kept, and
    `local[*]` is used when none is set. Python workers run the driver's interpreter
    (PYSPARK_PYTHON defaults to `sys.executable`) so they import the same kraft packages; on
    a cluster, install kraft-quorum[pipeline] in the executors' image or ship it with
    `--py-files` (see docs/audit.md).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from kraft_pipeline.datasource import register
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    existing = SparkConf()
    chosen = master or existing.get("spark.master", None) or DEFAULT_MASTER
    if chosen.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name).master(chosen)
    for key, value in {**DEFAULT_CONF, **(conf or {})}.items():
        if (conf and key in conf) or not existing.contains(key):
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    log.info("event=spark_session master=%s version=%s", chosen, spark.version)
    return spark
