"""One active operator replica: leader election through a coordination.k8s.io/v1 Lease.

As controller-runtime's leader election does: a replica acquires the Lease before it handles
anything, renews it every `retry_period_s`, and stops at once (the process exits) when it
could not renew within `renew_deadline_s`; another replica takes the Lease over once it has
not changed for `lease_duration_s` as that replica's own clock measures it (so clocks of
different machines never have to agree). kopf's peering would only pause the other
replicas; a Lease is what keeps two from acting at the same time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kraft_operator.kube import ApiError, Conflict, Kube, NotFound

log = logging.getLogger("kraft_operator.lease")

API = "coordination.k8s.io/v1"
PLURAL = "leases"


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseLost(Exception):
    """The Lease could not be renewed in time: another replica may act now."""


class LeaderElector:
    """Acquire, renew and release one Lease (see the module docstring)."""

    def __init__(self, kube: Kube, namespace: str, name: str, identity: str, *,
                 lease_duration_s: float = 15.0, renew_deadline_s: float = 10.0,
                 retry_period_s: float = 2.0, clock: Callable[[], float] = time.monotonic,
                 owner: dict[str, Any] | None = None) -> None:
        """`owner`: an owner reference put on the Lease when this replica creates it (so it
        is deleted with its owner)."""
        if not retry_period_s < renew_deadline_s < lease_duration_s:
            raise ValueError("need retry period < renew deadline < lease duration, got "
                             f"{retry_period_s} / {renew_deadline_s} / {lease_duration_s}")
        self.kube, self.namespace, self.name, self.identity = kube, namespace, name, identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self.clock = clock
        self.owner = owner
        self.held = False
        self.last_renewed: float | None = None
        self._seen: tuple[Any, float] | None = None  # (the record, when it last changed here)

    def _spec(self, transitions: int, acquire_time: str | None = None) -> dict[str, Any]:
        now = _micro_time()
        return {"holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, round(self.lease_duration_s)),
                "acquireTime": acquire_time or now, "renewTime": now,
                "leaseTransitions": transitions}

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this replica holds the Lease afterwards."""
        try:
            lease = await self.kube.get(API, PLURAL, self.namespace, self.name)
        except NotFound:
            try:
                metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
                if self.owner is not None:
                    metadata["ownerReferences"] = [self.owner]
                await self.kube.create(API, PLURAL, self.namespace, {
                    "apiVersion": API, "kind": "Lease", "metadata": metadata,
                    "spec": self._spec(0)})
            except Conflict:
                return False
            return self._won()
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), lease["metadata"].get("resourceVersion"))
        now = self.clock()
        if self._seen is None or self._seen[0] != record:
            self._seen = (record, now)
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            new = self._spec(transitions, spec.get("acquireTime"))
        else:
            duration = float(spec.get("leaseDurationSeconds") or self.lease_duration_s)
            if holder and now - self._seen[1] < duration:
                self.held = False
                return False
            new = self._spec(transitions + 1)
        patch = {"metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]},
                 "spec": new}
        try:
            await self.kube.patch(API, PLURAL, self.namespace, self.name, patch)
        except (Conflict, NotFound):
            self.held = False
            return False
        if holder != self.identity:
            log.info("event=lease_acquired lease=%s/%s identity=%s previous=%s",
                     self.namespace, self.name, self.identity, holder or "-")
        return self._won()

    @property
    def holder(self) -> str:
        """The holder the last attempt saw ("" when none, or not known yet)."""
        if self.held:
            return self.identity
        return self._seen[0][0] if self._seen else ""

    def _won(self) -> bool:
        self.held = True
        self.last_renewed = self.clock()
        return True

    async def acquire(self) -> None:
        """Wait until this replica holds the Lease."""
        waiting_logged = False
        while True:
            try:
                if await self.try_acquire_or_renew():
                    return
            except ApiError as exc:
                log.warning("event=lease_error lease=%s/%s error=%r", self.namespace,
                            self.name, str(exc))
            except OSError as exc:
                log.warning("event=lease_error lease=%s/%s error=%r", self.namespace,
                            self.name, str(exc))
            if not waiting_logged:
                holder = self._seen[0][0] if self._seen else "?"
                log.info("event=lease_waiting lease=%s/%s identity=%s holder=%s",
                         self.namespace, self.name, self.identity, holder)
                waiting_logged = True
            await asyncio.sleep(self.retry_period_s)

    async def keep(self) -> None:
        """Renew until the Lease is lost; then raise LeaseLost."""
        while True:
            await asyncio.sleep(self.retry_period_s)
            ok = False
            try:
                async with asyncio.timeout(self.renew_deadline_s):  # (cancellable on 3.11)
                    ok = await self.try_acquire_or_renew()
            except (ApiError, OSError, TimeoutError) as exc:
                log.warning("event=lease_renew_failed lease=%s/%s error=%r", self.namespace,
                            self.name, str(exc))
            if ok:
                continue
            held_for = self.clock() - (self.last_renewed or 0.0)
            if not self.held or held_for >= self.renew_deadline_s:
                self.held = False
                raise LeaseLost(f"lease {self.namespace}/{self.name} lost by {self.identity}")

    async def release(self) -> None:
        """Give the Lease up (on a clean stop), so another replica takes over at once."""
        if not self.held:
            return
        self.held = False
        with contextlib.suppress(ApiError, OSError):
            lease = await self.kube.get(API, PLURAL, self.namespace, self.name)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                await self.kube.patch(API, PLURAL, self.namespace, self.name, {
                    "metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]},
                    "spec": {"holderIdentity": None, "renewTime": _micro_time()}})
                log.info("event=lease_released lease=%s/%s identity=%s", self.namespace,
                         self.name, self.identity)
