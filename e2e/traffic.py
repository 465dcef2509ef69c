"""KV traffic that runs through a whole scenario, and what is measured from it.

`Traffic` runs the project's KV workload (`tests.support.kvclient.KVWorkload`: several clients
doing put/get/cas/delete, every operation recorded) in a thread of its own, follows the pods
as they come and go (the addresses are refreshed from the API every second), watches the
leader through the nodes' `/v1/status`, and at the end reads every key once more and checks
the whole history with the project's linearizability checker: an acknowledged write that was
lost fails the check.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
import time
import urllib.request
from typing import Any

from e2e.backend import Backend
from kraft.admin.http_credentials import HttpCredentials
from tests.support.kvclient import KVWorkload, http_op, new_session
from tests.support.linearizability import CAS, DELETE, GET, PUT, Op, check_history

WRITES = (PUT, DELETE, CAS)


class Traffic:
    """KV clients on one quorum's pods for as long as the `with` body runs."""

    def __init__(self, backend: Backend, quorum: str, clients: int = 3, keys: int = 8,
                 seed: int = 0, credentials: HttpCredentials | None = None) -> None:
        """`credentials`: the token and TLS trust of every call to the pods' HTTP ports."""
        self.backend = backend
        self.credentials = credentials or HttpCredentials()
        self.quorum = quorum
        self.addresses: list[str] = []
        self._refresh()
        if not self.addresses:
            raise RuntimeError(f"no pod of {quorum} has an address")
        self.workload = KVWorkload(self.addresses, keys=keys, clients=clients, seed=seed,
                                   timeout=5.0, read_ratio=0.3, credentials=self.credentials)
        self.leaders: list[tuple[float, int, int]] = []
        """(time, leader id, epoch) each time the leader changed, as the nodes report it."""
        self.seen_before: list[float] = []
        """For each entry of `leaders`: when the leader before it was last seen, so the
        change happened between the two times."""
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._threads = [threading.Thread(target=self._run, daemon=True),
                         threading.Thread(target=self._follow, daemon=True)]
        self.started = self.stopped = 0.0
        self.result: dict[str, Any] = {}

    def _pods(self) -> list[dict[str, Any]]:
        got = self.backend.get("pods", "-l", f"app.kubernetes.io/instance={self.quorum}")
        return list((got or {}).get("items", []))

    def _refresh(self) -> None:
        found = self.backend.kv_addresses(self._pods())
        if found:
            self.addresses[:] = found

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self.workload.run())
        finally:
            loop.close()

    def _leader(self) -> tuple[int, int] | None:
        best = None
        for address in list(self.addresses):
            try:
                req = urllib.request.Request(self.credentials.url(address, "/v1/status"),
                                             headers=self.credentials.headers())
                with urllib.request.urlopen(req, timeout=1,
                                            context=self.credentials.ssl_context()) as r:
                    s = json.loads(r.read())
            except (OSError, ValueError):
                continue
            if s.get("role") == "leader" and (best is None or s["epoch"] > best[1]):
                best = (s["leader_id"], s["epoch"])
        return best

    def _follow(self) -> None:
        last_refresh = 0.0
        seen = time.monotonic()
        while not self._stop.wait(0.2):
            if time.monotonic() - last_refresh > 1.0:
                with contextlib.suppress(Exception):
                    self._refresh()
                last_refresh = time.monotonic()
            got = self._leader()
            if got is not None and (not self.leaders or self.leaders[-1][1:] != got):
                self.leaders.append((time.monotonic(), *got))
                self.seen_before.append(seen)
            if got is not None:
                seen = time.monotonic()

    def __enter__(self) -> Traffic:
        self.started = time.monotonic()
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = time.monotonic()
        self._stop.set()
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(self.workload.stop)
        for t in self._threads:
            t.join(timeout=60)

    def final_reads(self) -> None:
        """One linearizable read of every key (retried while no leader answers), recorded."""
        async def read_all() -> None:
            async with new_session(self.credentials) as session:
                for key in self.workload.keys:
                    for attempt in range(60):
                        address = self.addresses[attempt % len(self.addresses)]
                        call = time.monotonic()
                        out = await http_op(session, address, "GET", f"/v1/kv/{key}", None, 5.0,
                                            scheme=self.credentials.scheme)
                        if out.status in (200, 404):
                            self.workload.history.record(Op(
                                99, GET, key, call, time.monotonic(),
                                output=out.body if out.status == 200 else None))
                            break
                        await asyncio.sleep(0.5)
                    else:
                        raise RuntimeError(f"no linearizable read of {key} succeeded")

        self._refresh()
        asyncio.run(read_all())

    def check(self) -> dict[str, Any]:
        """Stop, read every key, check the history; the figures of the traffic."""
        self.stop()
        self.final_reads()
        ops = self.workload.history.ops
        result = check_history(ops)
        acked = sorted(o.ret for o in ops if o.kind in WRITES and o.ret is not None)
        windows = _gaps(acked, self.started, self.stopped)
        per_change = []
        for (at, leader, epoch), seen in zip(self.leaders[1:], self.seen_before[1:],
                                             strict=True):
            # the longest gap between acknowledged writes that overlaps the time in which
            # the change happened (the old leader last seen .. the new one first seen)
            points = [self.started, *acked, self.stopped]
            window = max((b - a for a, b in itertools.pairwise(points) if b >= seen and a <= at),
                         default=0.0)
            per_change.append({"leader": leader, "epoch": epoch, "window_s": round(window, 3)})
        rejected_writes = sum(1 for op, _ in self.workload.rejected if op.kind in WRITES)
        self.result = {
            "linearizable": result.ok,
            "check_detail": result.detail,
            "ops_checked": result.ops_checked,
            "writes_acknowledged": len(acked),
            "writes_unknown": sum(1 for o in ops if o.kind in WRITES and o.ret is None),
            "writes_refused": rejected_writes,
            "reads_verified": sum(1 for o in ops if o.kind == GET and o.ret is not None),
            "longest_window_without_ack_s": round(max(windows, default=0.0), 3),
            "leader_changes": max(len(self.leaders) - 1, 0),
            "window_per_leader_change": per_change,
            "traffic_s": round(self.stopped - self.started, 1),
        }
        return self.result


def _gaps(times: list[float], start: float, stop: float) -> list[float]:
    points = [start, *times, stop]
    return [b - a for a, b in itertools.pairwise(points)]
