"""`bench.measure.write_path`: the steps of a write lined up across the leader and the followers (a
chain built from synthetic steps, and one short traced run of a real quorum)."""

from __future__ import annotations

from array import array
from pathlib import Path

import pytest

from bench.measure import write_path
from bench.measure.write_path import CHAIN, chains, load, names, summarize

US = 1000


def _leader(t0: int) -> list[tuple[str, int]]:
    return [("client_read", t0), ("core", t0 + 20 * US), ("append", t0 + 40 * US),
            ("appended", t0 + 60 * US), ("flush_submit", t0 + 61 * US),
            ("flush_submitted", t0 + 90 * US), ("answer_written", t0 + 110 * US),
            ("answer_written", t0 + 150 * US),
            # the second follower's fetch comes first in time but after the first's sent
            ("request_read", t0 + 700 * US), ("core", t0 + 720 * US), ("apply", t0 + 750 * US),
            ("client_answer", t0 + 780 * US)]


def _follower(t0: int, read: int, written: int, through: bool = True) -> list[tuple[str, int]]:
    out = [("response_read", t0 + read * US), ("decode", t0 + (read + 5) * US),
           ("decoded", t0 + (read + 40) * US), ("core", t0 + (read + 50) * US),
           ("append", t0 + (read + 60) * US)]
    if through:
        out += [("write", t0 + (read + 70) * US), ("written", t0 + written * US)]
    else:
        out += [("appended", t0 + (read + 70) * US), ("sync", t0 + (read + 75) * US),
                ("synced", t0 + written * US)]
    out += [("request_sent", t0 + (written + 50) * US)]
    return out


def test_chain_follows_the_follower_that_acknowledges_first() -> None:
    leader, fa, fb = [], [], []
    for n in range(5):
        t0 = 10_000_000 + n * 2_000_000
        leader += _leader(t0)
        fa += _follower(t0, read=200, written=650)  # reads first, acknowledges second
        fb += _follower(t0, read=260, written=600, through=False)
    rows = chains(leader, [fa, fb])
    assert len(rows) == 5
    row = rows[0]
    assert row[0] == 0
    # the follower that sent its fetch first (fb, at 650 us) is the chain's
    assert row[6] == 260  # its records read
    assert row[9] == 260 + 60  # not written through: the append is the write's start
    assert row[10] == 600  # ... and the inline fsync's end its durable point
    assert row[11] == 650
    assert row[12] == 700 and row[15] == 780
    assert row["other_write_us"] == 650 - 270  # fa's written-through write
    table = summarize(rows)
    assert [s["name"] for s in table] == [name for _, _, name in CHAIN]
    assert table[5]["since_request_us"] == 110 and table[5]["since_previous_us"] == 20
    assert all(s["writes"] == 5 for s in table)


def _in_order(row: dict[object, float]) -> bool:
    times = [row[i] for i in range(len(CHAIN)) if i in row]
    return times == sorted(times)


def test_the_leader_side_is_the_read_that_committed_and_its_follower_sent_before_it() -> None:
    t0 = 10_000_000
    leader = [(s, t) for s, t in _leader(t0) if t - t0 < 700 * US]
    leader += [("request_read", t0 + 300 * US), ("core", t0 + 320 * US),  # an empty fetch
               ("request_read", t0 + 700 * US), ("core", t0 + 720 * US),  # the commit
               ("apply", t0 + 750 * US), ("client_answer", t0 + 780 * US),
               ("request_read", t0 + 900 * US), ("core", t0 + 920 * US)]  # fb's, too late
    leader.sort(key=lambda e: e[1])
    fa = _follower(t0, read=200, written=600)  # sends at 650
    fb = _follower(t0, read=180, written=800)  # sends at 850, after the commit
    rows = chains(leader, [fb, fa])
    assert len(rows) == 1
    row = rows[0]
    assert row[11] == 650 and row[12] == 700 and row[13] == 720
    assert row[14] == 750 and row[15] == 780
    assert row["other_write_us"] == 800 - 250  # fb's write
    assert _in_order(row)
    # with fa's steps lost (a trace cut short), fb did not commit the write: no row
    assert chains(leader, [fb]) == []
    # ... also when fb's acknowledgement is read between the commit and the answer, and the
    # core step handling it comes after the answer, before a later write's apply
    fb = _follower(t0, read=180, written=710)  # sends at 760
    racing = [(s, t) for s, t in leader if t - t0 < 780 * US and s != "client_answer"]
    racing += [("request_read", t0 + 770 * US), ("client_answer", t0 + 780 * US),
               ("core", t0 + 790 * US), ("client_read", t0 + 1_000 * US),
               ("apply", t0 + 1_500 * US)]
    racing.sort(key=lambda e: e[1])
    assert chains(racing, [fb]) == []


def test_a_flush_submitted_after_the_records_went_out_is_left_out_of_the_row() -> None:
    t0 = 10_000_000
    # the fsync waited for the one before it: submitted after both answers went out
    leader = [(s, t) if s != "flush_submitted" else (s, t0 + 400 * US) for s, t in _leader(t0)]
    leader.sort(key=lambda e: e[1])
    rows = chains(leader, [_follower(t0, 200, 600)])
    assert len(rows) == 1
    assert 4 not in rows[0] and rows[0][5] == 110
    assert _in_order(rows[0])
    assert "flush_submitted" not in [s["name"] for s in summarize(rows)]


def test_incomplete_and_overlong_writes_are_left_out() -> None:
    t0 = 5_000_000
    leader = _leader(t0)
    no_ack = [e for e in leader if e[0] != "request_read"]
    assert chains(no_ack, [_follower(t0, 200, 600)]) == []
    assert chains(leader, []) == []
    late = [(s, t if s != "client_answer" else t0 + 30_000 * US) for s, t in leader]
    assert chains(late, [_follower(t0, 200, 600)]) == []


def test_load_reads_the_hook_records(tmp_path: Path) -> None:
    step_names = names()
    assert "client_read" in step_names and "written" in step_names
    codes = {n: i for i, n in enumerate(step_names)}
    raw = array("q", [codes["written"], 30, codes["write"], 10, codes["core"]])  # a torn tail
    path = tmp_path / "steps.1.bin"
    raw.tofile(path.open("wb"))
    assert load(path, step_names) == [("write", 10), ("written", 30)]


def test_bad_flags_are_named() -> None:
    with pytest.raises(SystemExit):
        write_path.main(["--seconds", "0"])
    with pytest.raises(SystemExit):
        write_path.main(["--property", "no-equals-sign"])


# a quorum on 127.0.0.1-3, in the group tests/node/test_local_and_demo.py explains
@pytest.mark.xdist_group("default-loopback")
def test_a_traced_quorum_gives_every_step_in_order() -> None:
    summary = write_path.run(1.0, {})
    # one write at a time, so each acknowledged write (the write-in's too) has its own chain:
    # most are whole (how many the machine does in the second is not what is asserted)
    assert summary["writes_acknowledged"] > 0
    assert summary["writes_traced"] >= summary["writes_acknowledged"] // 2
    table = summary["steps"]
    # every step of the chain was seen (the benchmark's properties write through and use the
    # kernel's fsync), and each comes after the one before it
    assert [s["name"] for s in table] == [name for _, _, name in CHAIN]
    # every row is in order, so the medians of the steps every row has are too (the leader's
    # fsync is in a row only when it went before the records)
    since = [s["since_request_us"] for s in table if s["writes"] == summary["writes_traced"]]
    assert len(since) >= len(CHAIN) - 1
    assert since == sorted(since)
    assert all(s["since_previous_us"] >= 0 for s in table)
    assert summary["second_follower_write_us"] is not None
    assert "records read" in write_path.render(summary)
