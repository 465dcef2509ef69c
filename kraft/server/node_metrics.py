"""The instruments a node's parts update: `NodeMetrics`, registered in the node's metrics
registry (`kraft.server.metrics.Registry`) and handed to the parts that set them.

Who sets what: the apply driver the high watermark, the applied offset and the snapshot
figures; the log service the log end offset; the KV front end the commit latency; the node its
elections; the log the fsync times (`observe_flush`, from the flusher thread too). The gauges
the node computes at scrape time (voters, observers, leader) are registered by the node
itself.
"""

from __future__ import annotations

import threading

from kraft.server.metrics import (
    DISK_LATENCY_BUCKETS,
    Counter,
    CounterFamily,
    Gauge,
    Histogram,
    Registry,
)


class NodeMetrics:
    """The node's instruments (see the module docstring), in the order they are rendered."""

    __slots__ = (
        "_log_flush_lock",
        "applied_offset",
        "commit_latency",
        "elections",
        "elections_won",
        "fetch_errors",
        "high_watermark",
        "log_end_offset",
        "log_flush",
        "raft_refused",
        "requests_refused",
        "snapshot_generation",
        "snapshot_load",
        "snapshot_size",
    )

    def __init__(self, r: Registry) -> None:
        self.high_watermark: Gauge = r.gauge("kraft_high_watermark", "High watermark")
        self.log_end_offset: Gauge = r.gauge("kraft_log_end_offset", "Log end offset")
        self.applied_offset: Gauge = r.gauge("kraft_applied_offset",
                                             "State machine applied offset")
        self.commit_latency: Histogram = r.histogram(
            "kraft_commit_latency_seconds", "Client write latency until committed and applied")
        self.elections: Counter = r.counter("kraft_elections_total",
                                            "Elections this node started")
        self.elections_won: Counter = r.counter("kraft_elections_won_total",
                                                "Times this node became leader")
        self.requests_refused: Counter = r.counter(
            "kraft_requests_refused_total",
            "Client requests refused for a key, value or record above its limit (nothing of "
            "them proposed)")
        self.raft_refused: CounterFamily = r.counter_family(
            "kraft_raft_refused_total",
            "Requests and answers of peers the consensus core refused or ignored, by kind "
            "(request_epoch, answer_epoch, live_leader, fetched_batches) and reason (the "
            "request or answer type); logged at a bounded rate",
            ("kind", "reason"))
        self.fetch_errors: Counter = r.counter(
            "kraft_fetch_errors_total",
            "Fetch answers whose records this follower refused (a batch that fails its CRC, "
            "is malformed or is above the batch limit); the fetch is retried")
        self.snapshot_size: Gauge = r.gauge("kraft_snapshot_size_bytes",
                                            "Size of the latest snapshot")
        self.snapshot_generation: Histogram = r.histogram("kraft_snapshot_generation_seconds",
                                                          "Time to write a snapshot")
        self.snapshot_load: Histogram = r.histogram(
            "kraft_snapshot_load_seconds", "Time to load a snapshot into the state machine")
        # The disk every commit waits for (etcd's wal_fsync_duration, Kafka's
        # LogFlushRateAndTimeMs): observed on the loop or on the flusher thread, hence the lock.
        self.log_flush: Histogram = r.histogram(
            "kraft_log_flush_seconds",
            "Time to fsync the log, per flush that wrote to disk (a kernel flush: from its "
            "start until its completion was seen)", DISK_LATENCY_BUCKETS)
        self._log_flush_lock = threading.Lock()

    def observe_flush(self, seconds: float) -> None:
        """One fsync of the log took `seconds` (from any thread)."""
        with self._log_flush_lock:
            self.log_flush.observe(seconds)
