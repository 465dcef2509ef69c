"""Prometheus metrics of the operator (not of the quorums: each kraft node serves its own).

- `kraft_operator_reconciles_total{result}`: reconcile passes (ok, error);
- `kraft_operator_actions_total{action,reason,outcome}`: actions run (done, pending, failed);
- `kraft_operator_errors_total{stage}`: errors by where they happened;
- `kraft_operator_heal_seconds`: from a quorum leaving Ready (or its creation) until it is
  Ready again;
- `kraft_operator_reconcile_seconds`: how long one pass takes;
- `kraft_operator_leader`: 1 while this replica holds the Lease.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]


class Metrics:
    """The operator's metrics in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.reconciles = Counter("kraft_operator_reconciles", "Reconcile passes",
                                  ["result"], registry=r)
        self.actions = Counter("kraft_operator_actions", "Actions run",
                               ["action", "reason", "outcome"], registry=r)
        self.errors = Counter("kraft_operator_errors", "Errors", ["stage"], registry=r)
        self.heal = Histogram("kraft_operator_heal_seconds",
                              "Seconds from a quorum leaving Ready until Ready again",
                              buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800),
                              registry=r)
        self.duration = Histogram("kraft_operator_reconcile_seconds",
                                  "Seconds one reconcile pass takes", registry=r)
        self.leader = Gauge("kraft_operator_leader", "1 while this replica holds the Lease",
                            registry=r)
        self._unready_since: dict[str, float] = {}

    def track_ready(self, uid: str, ready: bool, now: float | None = None) -> float | None:
        """Note a quorum's Ready state; the time it took to heal when it just became Ready."""
        now = time.monotonic() if now is None else now
        if not ready:
            self._unready_since.setdefault(uid, now)
            return None
        since = self._unready_since.pop(uid, None)
        if since is None:
            return None
        took = now - since
        self.heal.observe(took)
        return took

    def forget(self, uid: str) -> None:
        self._unready_since.pop(uid, None)

    def render(self) -> bytes:
        return generate_latest(self.registry)
