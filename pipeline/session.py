"""Building the SparkSession the audit runs on, with settings sized for a small machine.

Defaults fit 2 cores and 24 GiB: `local[*]`, 2 GiB driver heap (in local mode the driver is
the executor), 2 shuffle partitions, no UI and no console progress bars. Under spark-submit the
master and any `--conf` given there win: this module only fills in what is unset.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
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
    # Batch rows carry the batch's bytes: cap the Arrow batches between the JVM and Python
    # by size, not only by row count.
    "spark.sql.execution.arrow.maxBytesPerBatch": str(16 * 1024 * 1024),
}

JVM_OUTPUT = "jvm.log"
"""The driver JVM's own stdout and stderr (and its Python workers'), under the log directory."""

LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.append = false
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
"""


def build_session(
    master: str | None = None,
    app_name: str = "kraft-audit",
    conf: dict[str, str] | None = None,
    log_dir: str | os.PathLike[str] | None = None,
) -> Any:
    """Get or create the SparkSession and register the `kraft` data source on it.

    `master` overrides everything; otherwise a master set by spark-submit is kept, and
    `local[*]` is used when none is set. Python workers run the driver's interpreter
    (PYSPARK_PYTHON defaults to `sys.executable`) so they import the same kraft packages; on
    a cluster, install kraft-quorum[pipeline] in the executors' image or ship it with
    `--py-files` (see docs/audit.md).

    With `log_dir`, a driver JVM started here writes Spark's own log (warnings, errors with
    their Java stack traces) to `log_dir/spark.log` instead of the terminal, its garbage
    collections to `log_dir/gc.log` (the heap before and after each one), and whatever it or
    the Python workers it starts print themselves (the JVM's last words when it dies, a
    worker's traceback) to `log_dir/jvm.log` (JVM_OUTPUT).
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
    settings = {**DEFAULT_CONF, **(conf or {})}
    from pyspark import SparkContext

    jvm_output: Path | None = None  # set when this call launches the driver JVM
    if log_dir is not None and SparkContext._active_spark_context is None:
        log_path = Path(log_dir).resolve() / "spark.log"
        jvm_output = log_path.with_name(JVM_OUTPUT)
        props = log_path.with_name("log4j2.properties")
        props.write_text(LOG4J2.format(path=log_path))
        option = (f"-Dlog4j2.configurationFile=file:{props} "
                  f"-Xlog:gc:file={log_path.with_name('gc.log')}")
        key = "spark.driver.extraJavaOptions"
        earlier = (conf or {}).get(key) or existing.get(key, None)
        settings[key] = f"{earlier} {option}" if earlier else option
    for key, value in settings.items():
        if (conf and key in conf) or not existing.contains(key) or key == (
            "spark.driver.extraJavaOptions"
        ):
            builder = builder.config(key, value)
    with _child_output_to(jvm_output) if jvm_output else contextlib.nullcontext():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    log.info("event=spark_session master=%s version=%s", chosen, spark.version)
    return spark


@contextlib.contextmanager
def _child_output_to(path: Path) -> Iterator[None]:
    """Point file descriptors 1 and 2 at `path` (emptied: one file per JVM, as for its other
    logs) while the driver JVM is launched, so the JVM (and the Python workers it forks later)
    inherit the file instead of the terminal.

    PySpark starts the JVM with the parent's stdout and stderr; there is no option to give it
    others. This process's own output goes back to the terminal as soon as the JVM is up.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with path.open("wb") as f:
            os.dup2(f.fileno(), 1)
            os.dup2(f.fileno(), 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)
