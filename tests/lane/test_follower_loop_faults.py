"""The follower lane's C loop under the deterministic harness (tests/support/lane_harness.py):
seeded streams of batches delivered in pieces, the C file layer's faults injected, a crash
after each run, and the simulator's invariants checked on what the recovery reads back."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraft.lane import native
from kraft.sim.invariants import InvariantViolation
from tests.support.lane_harness import Faults, Outcome, check, run_follower

C = native()
pytestmark = pytest.mark.skipif(C is None, reason="kraft.lane._native was not built (no C compiler)")

SEEDS = range(50)
KINDS = {
    "none": Faults(),
    "fail_write": Faults(fail_write=0.05),
    "tear_write": Faults(tear_write=0.1),
    "fail_sync": Faults(fail_sync=0.05),
    "delay": Faults(delay_us=200),
    "all": Faults(fail_write=0.02, tear_write=0.05, fail_sync=0.02, delay_us=100),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_seed_keeps_the_invariants(tmp_path: Path, kind: str) -> None:
    totals: dict[str, int] = {}
    for seed in SEEDS:
        out = run_follower(seed, tmp_path / str(seed), KINDS[kind])
        assert out.invariants.checks > 0
        for key in ("writes", "failed_writes", "torn_writes", "short_writes", "failed_syncs",
                    "delays"):
            totals[key] = totals.get(key, 0) + int(out.counts[key])
    assert totals["writes"] > 0
    injected = {k: v for k, v in totals.items() if k != "writes" and v}
    expected = {
        "none": set(),
        "fail_write": {"failed_writes"},
        "tear_write": {"torn_writes", "short_writes"},
        "fail_sync": {"failed_syncs"},
        "delay": {"delays"},
        "all": {"failed_writes", "torn_writes", "short_writes", "failed_syncs", "delays"},
    }[kind]
    assert set(injected) == expected, totals


def _first_seed_with(kind: Faults, counter: str, tmp_path: Path) -> tuple[int, Outcome]:
    for seed in SEEDS:
        out = run_follower(seed, tmp_path / str(seed), kind)
        if out.counts[counter]:
            return seed, out
    raise AssertionError(f"no seed injected {counter}")


def test_a_failed_write_ends_the_loop_and_nothing_after_it_is_acknowledged(
        tmp_path: Path) -> None:
    _seed, out = _first_seed_with(Faults(fail_write=0.05), "failed_writes", tmp_path)
    assert out.counts["failed_writes"] == 1
    report = out.report
    assert (report["reason"], report["error_at"], report["error"]) == ("error", "write", 5)
    # the records of the failed answer were not acknowledged: the last ack is what was synced
    assert out.recovered_end >= max(out.acks, default=0)
    assert report["log_end"] == max(out.acks, default=0)


def test_a_torn_write_leaves_a_tail_recovery_drops_and_a_short_count_is_finished(
        tmp_path: Path) -> None:
    _seed, torn = _first_seed_with(Faults(tear_write=0.1), "torn_writes", tmp_path / "t")
    assert (torn.report["reason"], torn.report["error_at"]) == ("error", "write")
    # a short count: the loop writes the rest and goes on (no error, the run ends as scripted)
    _seed, short = _first_seed_with(Faults(tear_write=0.1), "short_writes", tmp_path / "s")
    assert short.counts["syncs"] >= short.counts["short_writes"]


def test_a_failed_fdatasync_ends_the_loop_and_acknowledges_nothing_after_it(
        tmp_path: Path) -> None:
    _seed, out = _first_seed_with(Faults(fail_sync=0.05), "failed_syncs", tmp_path)
    report = out.report
    assert out.counts["failed_syncs"] == 1
    assert (report["reason"], report["error_at"], report["error"]) == ("error", "fdatasync", 5)
    assert report["log_end"] == max(out.acks, default=0)
    # the records written before the failed sync were never acknowledged
    assert report["write_pos"] <= out.synced_size


def test_the_same_seed_injects_the_same_faults(tmp_path: Path) -> None:
    kind = KINDS["all"]
    a = run_follower(7, tmp_path / "a", kind)
    b = run_follower(7, tmp_path / "b", kind)
    keys = ("writes", "syncs", "failed_writes", "torn_writes", "short_writes", "failed_syncs")
    assert [a.counts[k] for k in keys] == [b.counts[k] for k in keys]
    assert (a.acks, a.sent, a.report["reason"]) == (b.acks, b.sent, b.report["reason"])


def test_the_production_path_has_no_faults_installed() -> None:
    assert C is not None
    assert C.io_fault_counts()["installed"] is False
    with pytest.raises(ValueError, match="fail_write"):
        C.io_faults(1, fail_write=1.5)
    with pytest.raises(ValueError, match="must not exceed 1"):
        C.io_faults(1, fail_write=0.6, tear_write=0.6)
    assert C.io_fault_counts()["installed"] is False


def test_the_checks_catch_an_acknowledgement_beyond_the_synced_bytes(tmp_path: Path) -> None:
    # what a loop that acknowledged before its fdatasync (or past a failed one) would leave:
    # acknowledgements naming bytes no successful sync covered
    out = run_follower(3, tmp_path, Faults())
    assert out.acks and max(out.acks) > 0
    out.synced_size = 0
    with pytest.raises(InvariantViolation, match="acknowledged_before_durable"):
        check(out, tmp_path / "00000000000000000000.log", tmp_path)


def test_the_checks_catch_an_acknowledged_record_lost_or_changed(tmp_path: Path) -> None:
    out = run_follower(4, tmp_path, Faults())
    path = tmp_path / "00000000000000000000.log"
    data = path.read_bytes()
    path.write_bytes(data[:len(data) - 1])  # the last acknowledged batch torn
    with pytest.raises(InvariantViolation, match="torn_tail_after_durable"):
        check(out, path, tmp_path)
    changed = bytearray(data)
    changed[-1] ^= 1  # the last acknowledged batch's bytes changed: its CRC fails
    path.write_bytes(bytes(changed))
    with pytest.raises(InvariantViolation, match="torn_tail_after_durable"):
        check(out, path, tmp_path)
