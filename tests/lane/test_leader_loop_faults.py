"""The leader lane's C loop under the deterministic harness (tests/support/lane_harness.py):
a client's seeded PUTs delivered in pieces, one voter of three fetching (so every commit needs
the leader's own fdatasync), the C file layer's faults injected, a crash after each run, and
the simulator's invariants checked on what the recovery reads back."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraft.lane import native
from kraft.sim.invariants import InvariantViolation
from tests.support.lane_harness import Faults, LeaderOutcome, check_leader, run_leader

C = native()
pytestmark = pytest.mark.skipif(C is None, reason="kraft.lane._native was not built (no C compiler)")

SEEDS = range(50)
KINDS = {
    "none": (Faults(), set()),
    "fail_write": (Faults(fail_write=0.05), {"failed_writes"}),
    "tear_write": (Faults(tear_write=0.1), {"torn_writes", "short_writes"}),
    "fail_sync": (Faults(fail_sync=0.05), {"failed_syncs"}),
    "delay": (Faults(delay_us=200), {"delays"}),
    "all": (Faults(fail_write=0.02, tear_write=0.05, fail_sync=0.02, delay_us=100),
            {"failed_writes", "torn_writes", "short_writes", "failed_syncs", "delays"}),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_seed_keeps_the_invariants(tmp_path: Path, kind: str) -> None:
    faults, expected = KINDS[kind]
    totals: dict[str, int] = {"answered": 0}
    for seed in SEEDS:
        out = run_leader(seed, tmp_path / str(seed), faults)
        assert out.invariants.checks > 0
        totals["answered"] += len(out.answered)
        for key in ("writes", "failed_writes", "torn_writes", "short_writes", "failed_syncs",
                    "delays"):
            totals[key] = totals.get(key, 0) + int(out.counts[key])
    assert totals["writes"] > 0 and totals["answered"] > 0
    injected = {k for k, v in totals.items() if k not in ("writes", "answered") and v}
    assert injected == expected, totals


def _first(faults: Faults, counter: str, tmp_path: Path) -> LeaderOutcome:
    for seed in SEEDS:
        out = run_leader(seed, tmp_path / str(seed), faults)
        if out.counts[counter]:
            return out
    raise AssertionError(f"no seed injected {counter}")


@pytest.mark.parametrize(("faults", "counter", "error_at"), [
    (Faults(fail_write=0.05), "failed_writes", "write"),
    (Faults(tear_write=0.1), "torn_writes", "write"),
    (Faults(fail_sync=0.05), "failed_syncs", "fdatasync"),
])
def test_a_failed_write_or_sync_ends_the_loop_and_its_puts_are_not_answered(
        tmp_path: Path, faults: Faults, counter: str, error_at: str) -> None:
    out = _first(faults, counter, tmp_path)
    assert out.counts[counter] == 1
    assert (out.report["reason"], out.report["error_at"], out.report["error"]) == (
        "error", error_at, 5)
    # the PUTs of the failed batch were never answered: the answered ones are all durable
    assert len(out.answered) < len(out.puts)
    assert max(out.answered.values(), default=0) < out.recovered_end


def test_the_checks_catch_an_answered_put_lost_by_the_crash(tmp_path: Path) -> None:
    out = run_leader(5, tmp_path, Faults())
    assert out.answered
    out.synced_size = 0  # as if no fdatasync had covered the answered PUTs
    with pytest.raises(InvariantViolation, match="acknowledged_before_durable"):
        check_leader(out, tmp_path / "00000000000000000001.log", tmp_path)
    out = run_leader(5, tmp_path / "again", Faults())
    path = tmp_path / "again" / "00000000000000000001.log"
    path.write_bytes(path.read_bytes()[:-1])  # the last answered PUT's batch torn
    with pytest.raises(InvariantViolation, match="acknowledged_committed_lost"):
        check_leader(out, path, tmp_path / "again")
