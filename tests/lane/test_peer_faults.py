"""The lane's C loops when their peers fail (tests/support/lane_harness.py, `PeerFaults`): a
peer that closes its socket in the middle of a frame, one that resets the connection, frames
held back and then released, and a stale frame delivered late. The loop must end cleanly and
hand the connection back as it stands, and the invariants of the file faults' runs still hold
after the crash (nothing acknowledged that is not durable, the logs agree, no committed record
lost). The long run of the same is `make soak` (`python -m tests.support.lane_harness`)."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import pytest

from kraft.lane import native
from kraft.sim.invariants import InvariantViolation
from tests.support.lane_harness import (
    Faults,
    Outcome,
    PeerFaults,
    check,
    check_leader,
    main,
    run_follower,
    run_leader,
)

C = native()
pytestmark = pytest.mark.skipif(C is None, reason="kraft.lane._native was not built (no C compiler)")

SEEDS = range(12)
PEERS = {
    "close": PeerFaults(close=0.2),
    "reset": PeerFaults(reset=0.2),
    "late": PeerFaults(late=0.3),
    "stale": PeerFaults(stale=0.2),
}
FOLLOWER_SEGMENT = "00000000000000000000.log"
LEADER_SEGMENT = "00000000000000000001.log"


@pytest.mark.parametrize("kind", list(PEERS))
def test_the_follower_loop_ends_cleanly_when_its_leader_fails(tmp_path: Path, kind: str) -> None:
    ends: Counter[tuple[str, str]] = Counter()
    held = 0
    for seed in SEEDS:
        out = run_follower(seed, tmp_path / str(seed), Faults(), peers=PEERS[kind])
        assert out.invariants.checks > 0
        held += out.held
        if out.peer_fault is not None:
            assert out.peer_fault.kind == kind
            ends[(str(out.report["reason"]), str(out.report["error_at"]))] += 1
    if kind == "late":
        assert held >= len(SEEDS)  # answers were held back, and the runs went on
        return
    # every seed injected it (the stream has 24 answers), and it ended the loop as it should
    want = ("handover", "") if kind == "stale" else ("closed", "")
    assert ends == Counter({want: len(SEEDS)}), ends


@pytest.mark.parametrize("kind", list(PEERS))
def test_the_leader_loop_ends_cleanly_when_a_client_or_voter_fails(tmp_path: Path,
                                                                   kind: str) -> None:
    peers: Counter[str] = Counter()
    held = answered = 0
    for seed in SEEDS:
        out = run_leader(seed, tmp_path / str(seed), Faults(), peers=PEERS[kind])
        assert out.invariants.checks > 0
        held += out.held
        answered += len(out.answered)
        if out.peer_fault is not None:
            assert out.peer_fault.kind == kind
            peers[out.peer_fault.peer] += 1
            assert out.report["reason"] in ("closed", "handover", "error"), out.report
    assert answered > 0
    if kind == "late":
        assert held >= len(SEEDS)
    elif kind == "stale":
        assert peers["voter"] >= len(SEEDS) // 2, peers
    else:  # the client's connection and voter 2's both
        assert peers["client"] > 0 and peers["voter"] > 0, peers


def test_peer_and_file_faults_together_keep_the_invariants(tmp_path: Path) -> None:
    files = Faults(fail_write=0.02, tear_write=0.05, fail_sync=0.02, delay_us=50)
    peers = PeerFaults(close=0.04, reset=0.04, late=0.1, stale=0.03)
    injected: Counter[str] = Counter()
    for seed in SEEDS:
        for out in (run_follower(seed, tmp_path / f"f{seed}", files, peers=peers),
                    run_leader(seed, tmp_path / f"l{seed}", files, peers=peers)):
            assert out.invariants.checks > 0
            injected["peer"] += out.peer_fault is not None
            injected["file"] += int(out.counts["failed_writes"] + out.counts["torn_writes"]
                                    + out.counts["failed_syncs"]) > 0
    assert injected["peer"] > 0 and injected["file"] > 0, injected


def test_the_same_seed_makes_the_same_peer_faults(tmp_path: Path) -> None:
    peers = PeerFaults(close=0.05, reset=0.05, late=0.2, stale=0.05)
    for seed in (3, 8):
        a = run_follower(seed, tmp_path / f"a{seed}", Faults(), peers=peers)
        b = run_follower(seed, tmp_path / f"b{seed}", Faults(), peers=peers)
        assert (a.peer_fault, a.held, a.acks, a.sent, a.report["reason"]) == (
            b.peer_fault, b.held, b.acks, b.sent, b.report["reason"])
        la = run_leader(seed, tmp_path / f"la{seed}", Faults(), peers=peers)
        lb = run_leader(seed, tmp_path / f"lb{seed}", Faults(), peers=peers)
        assert (la.peer_fault, la.held, la.puts, la.report["reason"]) == (
            lb.peer_fault, lb.held, lb.puts, lb.report["reason"])


def test_a_run_without_peer_faults_is_the_run_it_was_before_them(tmp_path: Path) -> None:
    # the peers draw from a stream of their own: a seed's run without peer faults is the one
    # the harness made before they existed (recorded then: the follower's acknowledgements and
    # a digest of the leader's batches; a digest of the client's PUTs)
    a = run_follower(5, tmp_path / "f", Faults(tear_write=0.1))
    assert a.acks == [7, 10, 14, 22, 23, 34, 40, 42, 51, 54, 58, 58, 60]
    assert hashlib.sha256(b"".join(a.sent)).hexdigest()[:16] == "3516439dd5833e28"
    leader = run_leader(5, tmp_path / "l", Faults())
    puts = repr(sorted(leader.puts.items())).encode()
    assert (len(leader.puts), hashlib.sha256(puts).hexdigest()[:16]) == (34, "78b0d292ee101c7a")


# ---------------------------------------------------------------- the checks can fail


def _faulted_follower(tmp_path: Path, kind: str) -> tuple[Outcome, Path]:
    out = run_follower(1, tmp_path, Faults(), peers=PEERS[kind])
    assert out.peer_fault is not None and out.peer_fault.kind == kind
    return out, tmp_path / FOLLOWER_SEGMENT


def test_the_checks_catch_a_close_that_loses_the_unread_bytes(tmp_path: Path) -> None:
    out, path = _faulted_follower(tmp_path, "close")
    assert out.report["unread"]
    out.report = {**out.report, "unread": b""}
    with pytest.raises(InvariantViolation, match="peer_fault_hands_back"):
        check(out, path, tmp_path)


def test_the_checks_catch_a_reset_taken_for_an_error(tmp_path: Path) -> None:
    out, path = _faulted_follower(tmp_path, "reset")
    out.report = {**out.report, "reason": "error", "error_at": "recv"}
    with pytest.raises(InvariantViolation, match="peer_fault_hands_back"):
        check(out, path, tmp_path)


def test_the_checks_catch_a_stale_answer_taken(tmp_path: Path) -> None:
    out, path = _faulted_follower(tmp_path, "stale")
    # what a loop that took the stale answer would report: its frame consumed, the loop going on
    out.report = {**out.report, "reason": "stopped", "unread": b""}
    with pytest.raises(InvariantViolation, match="peer_fault_hands_back"):
        check(out, path, tmp_path)


def test_the_checks_catch_an_acknowledgement_while_the_answer_was_held(tmp_path: Path) -> None:
    out = run_follower(2, tmp_path, Faults(), peers=PEERS["late"])
    assert out.held > 0
    out.noise = ["answer 3 held back: sent 90 bytes"]
    with pytest.raises(InvariantViolation, match="acked_without_answer"):
        check(out, tmp_path / FOLLOWER_SEGMENT, tmp_path)


def test_the_checks_catch_a_put_answered_before_its_voter_fetched(tmp_path: Path) -> None:
    out = run_leader(2, tmp_path, Faults(), peers=PEERS["late"])
    assert out.held > 0 and out.commits
    rid, offset, _acked = out.commits[-1]
    out.commits[-1] = (rid, offset, offset)  # as if answered before voter 2 fetched past it
    with pytest.raises(InvariantViolation, match="commit_without_quorum"):
        check_leader(out, tmp_path / LEADER_SEGMENT, tmp_path)


def test_the_checks_catch_a_cut_put_taken_by_the_leader(tmp_path: Path) -> None:
    for seed in SEEDS:
        out = run_leader(seed, tmp_path / str(seed), Faults(), peers=PEERS["close"])
        if out.peer_fault is not None and out.peer_fault.peer == "client":
            break
    else:
        raise AssertionError("no seed closed the client's connection")
    assert out.peer_fault.unread
    out.report = {**out.report, "client_unread": b""}
    with pytest.raises(InvariantViolation, match="peer_fault_hands_back"):
        check_leader(out, tmp_path / str(seed) / LEADER_SEGMENT, tmp_path / str(seed))
    out.report = {**out.report, "client_unread": out.peer_fault.unread,
                  "pending": out.report["pending"] + [(10_000, 99)]}
    with pytest.raises(InvariantViolation, match="peer_fault_hands_back"):
        check_leader(out, tmp_path / str(seed) / LEADER_SEGMENT, tmp_path / str(seed))


def test_the_soak_runs_seeds_and_names_a_failing_one(capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["--seeds", "4", "--start", "40"]) == 0
    assert "4 seeds from 40" in capsys.readouterr().out
    import tests.support.lane_harness as harness

    def broken(*args: object, **kwargs: object) -> None:
        raise InvariantViolation("acknowledged_before_durable: made up")
    monkeypatch.setattr(harness, "run_leader", broken)
    assert main(["--seed", "41"]) == 1
    text = capsys.readouterr().out
    assert "VIOLATION leader seed 41" in text and "--seed 41" in text
