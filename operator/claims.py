"""One operator acts on a KRaftQuorum at a time, whatever Lease elected it.

The operator's own Lease (`kraft_operator.lease`) keeps the replicas of one installation to
one active replica; two installations (say, the sandbox's operator and a Helm release, each
with a Lease of its own name or namespace) would both be active. So before a pass changes
anything it takes a claim on the object: a coordination.k8s.io Lease in the KRaftQuorum's
namespace named `NAME.kraftquorums.kraft.dev`, held by the operator's identity and owned by the
KRaftQuorum (deleted with it). A claim is taken by the LeaderElector's rule: created when
missing, renewed by its holder, taken over only once it has not changed for its duration as the
taker's own clock measures it, or at once when its holder released it. Its holder renews it at
every pass and every retry period in between (`keep`), and releases every claim on a clean stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from kraft_operator import models
from kraft_operator.kube import ApiError, Kube
from kraft_operator.lease import LeaderElector

log = logging.getLogger("kraft_operator.claims")

SUFFIX = f".{models.PLURAL}.{models.GROUP}"


def lease_name(name: str) -> str:
    """The claim Lease of the KRaftQuorum `name` (in its namespace)."""
    return f"{name}{SUFFIX}"


@dataclass(frozen=True, slots=True)
class Claim:
    """The outcome of taking a claim: `held` by this operator, or else `holder` ("" when not
    known: the Lease was created by another operator between this one's read and its write)."""

    held: bool
    holder: str
    lease: str


class Claims:
    """The claims of one operator on the KRaftQuorums it reconciles."""

    def __init__(self, kube: Kube, identity: str, *, lease_duration_s: float = 15.0,
                 renew_deadline_s: float = 10.0, retry_period_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kube, self.identity, self.clock = kube, identity, clock
        self.timing = {"lease_duration_s": lease_duration_s,
                       "renew_deadline_s": renew_deadline_s, "retry_period_s": retry_period_s}
        self.retry_period_s = retry_period_s
        self.renew_deadline_s = renew_deadline_s
        self._electors: dict[str, LeaderElector] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def _elector(self, namespace: str, name: str, uid: str) -> LeaderElector:
        key = f"{namespace}/{name}"
        elector = self._electors.get(key)
        if elector is None or (elector.owner or {}).get("uid") != uid:
            owner = {"apiVersion": models.API_VERSION, "kind": models.KIND, "name": name,
                     "uid": uid}
            elector = LeaderElector(self.kube, namespace, lease_name(name), self.identity,
                                    clock=self.clock, owner=owner, **self.timing)
            self._electors[key] = elector
        return elector

    async def take(self, namespace: str, name: str, uid: str) -> Claim:
        """Take or renew the claim on one KRaftQuorum (raises the API's errors)."""
        key = f"{namespace}/{name}"
        elector = self._elector(namespace, name, uid)
        async with self._locks.setdefault(key, asyncio.Lock()):
            was = elector.holder
            held = await elector.try_acquire_or_renew()
        if held and was != self.identity:
            log.info("event=claim_taken quorum=%s lease=%s identity=%s previous=%s", key,
                     elector.name, self.identity, was or "-")
        return Claim(held, elector.holder, f"{namespace}/{elector.name}")

    def held(self, namespace: str, name: str) -> bool:
        """Whether this operator held the claim at its last attempt, renewed in time."""
        elector = self._electors.get(f"{namespace}/{name}")
        if elector is None or not elector.held:
            return False
        return self.clock() - (elector.last_renewed or 0.0) < self.renew_deadline_s

    async def keep(self) -> None:
        """Renew every held claim each retry period, between the passes (which may take longer
        than a claim lasts); a claim not renewed within the renew deadline counts as lost."""
        while True:
            await asyncio.sleep(self.retry_period_s)
            for key, elector in list(self._electors.items()):
                if not elector.held:
                    continue
                ok = False
                try:
                    async with asyncio.timeout(self.renew_deadline_s):
                        async with self._locks.setdefault(key, asyncio.Lock()):
                            ok = elector.held and await elector.try_acquire_or_renew()
                except (ApiError, OSError, TimeoutError) as exc:
                    log.warning("event=claim_renew_failed quorum=%s error=%r", key, str(exc))
                if not ok and not self.held(*key.split("/", 1)):
                    elector.held = False
                    log.warning("event=claim_lost quorum=%s lease=%s identity=%s holder=%s",
                                key, elector.name, self.identity, elector.holder or "-")

    def forget(self, namespace: str, name: str) -> None:
        """Drop what is kept about a KRaftQuorum that is gone (its Lease goes with it)."""
        self._electors.pop(f"{namespace}/{name}", None)
        self._locks.pop(f"{namespace}/{name}", None)

    async def release(self) -> None:
        """Give every held claim up (on a clean stop), so another operator may act at once."""
        for key, elector in list(self._electors.items()):
            with contextlib.suppress(ApiError, OSError):
                async with self._locks.setdefault(key, asyncio.Lock()):
                    await elector.release()
