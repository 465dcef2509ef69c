"""Leader election through a coordination.k8s.io Lease, against the emulated API with a
clock the test moves: one holder at a time, expiry judged by the waiting replica's own clock,
takeover, renewal, loss, release."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kraft_operator.kube import Kube
from kraft_operator.lease import LeaderElector, LeaseLost
from kraft_sandbox.apiserver import serve
from kubernetes import client


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def kube() -> AsyncIterator[Kube]:
    async with serve() as api:
        cfg = client.Configuration()
        cfg.host = api.url
        yield Kube(client.ApiClient(cfg))


def elector(kube: Kube, who: str, clock: Clock) -> LeaderElector:
    return LeaderElector(kube, "default", "op", who, lease_duration_s=15,
                         renew_deadline_s=10, retry_period_s=0.01, clock=clock)


async def holder(kube: Kube) -> str | None:
    lease = await kube.get("coordination.k8s.io/v1", "leases", "default", "op")
    return lease["spec"].get("holderIdentity")


async def test_one_holder_and_takeover_only_after_expiry_on_the_waiters_clock(
        kube: Kube) -> None:
    clock_a, clock_b = Clock(), Clock()
    a, b = elector(kube, "a", clock_a), elector(kube, "b", clock_b)
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    assert await holder(kube) == "a"
    clock_b.now += 14  # b has not seen the lease change for 14 s: not expired yet
    assert not await b.try_acquire_or_renew()
    assert await a.try_acquire_or_renew()  # a renews: b's count starts again
    clock_b.now += 14
    assert not await b.try_acquire_or_renew()
    clock_b.now += 16  # now unchanged for 16 s as b measures it
    assert await b.try_acquire_or_renew()
    lease = await kube.get("coordination.k8s.io/v1", "leases", "default", "op")
    assert lease["spec"]["holderIdentity"] == "b"
    assert lease["spec"]["leaseTransitions"] == 1
    assert not await a.try_acquire_or_renew()  # a sees b holding it
    assert a.held is False


async def test_keep_raises_once_the_lease_is_taken(kube: Kube) -> None:
    clock_a, clock_b = Clock(), Clock()
    a, b = elector(kube, "a", clock_a), elector(kube, "b", clock_b)
    await a.acquire()
    await b.try_acquire_or_renew()
    clock_b.now += 20
    assert await b.try_acquire_or_renew()
    with pytest.raises(LeaseLost):
        await a.keep()


async def test_release_hands_over_at_once(kube: Kube) -> None:
    a, b = elector(kube, "a", Clock()), elector(kube, "b", Clock())
    await a.acquire()
    assert not await b.try_acquire_or_renew()
    await a.release()
    assert await holder(kube) is None
    assert await b.try_acquire_or_renew()


def test_timings_must_nest() -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaderElector(None, "default", "op", "a", lease_duration_s=5,  # type: ignore[arg-type]
                      renew_deadline_s=6, retry_period_s=1)
