"""The comparison with Apache Kafka's TestRaftServer (bench/systems/kafka_raft.py,
bench/measure/kafka_raft.py): its output and log read as Kafka 4.4.0 writes them (lines a
real run printed, in testdata/), the figures summed up, the targets and the report section;
then three real TestRaftServer JVMs: the leader found by the observer's Fetch, its high
watermark moving, and a kill -9 of the leader followed by a first commit in a higher epoch.
"""

from __future__ import annotations

import math
import time
from datetime import datetime
from pathlib import Path

import pytest

from bench.measure import kafka_raft as measure
from bench.measure.scenarios import evaluate_targets
from bench.report import compare
from bench.systems import kafka_raft
from bench.systems.kafka_raft import (
    RECORD_SIZE,
    first_commits,
    histogram_span,
    log_time,
    parse_report,
)

DATA = Path(__file__).parent / "testdata"


def test_the_records_are_the_size_of_a_kv_put_of_a_100_byte_value() -> None:
    from kraft.statemachine.kv import encode_put

    assert RECORD_SIZE == len(encode_put("k000000", b"v" * 100)) == 117


def test_the_report_lines_of_testraftserver_are_read_and_nothing_else() -> None:
    lines = (DATA / "testraftserver-4.4.0-stdout.txt").read_text().splitlines()
    reports = [r for r in (parse_report(line, at=float(i)) for i, line in enumerate(lines)) if r]
    assert [(r.at, r.bytes_per_s, r.p75_ms, r.p99_ms, r.p999_ms) for r in reports] == [
        (0.0, 3.90, 249.0, 249.0, 249.0),
        (2.0, 585406.14, 27.0, 103.0, 161.0),
        (3.0, 585333.27, 28.0, 138.0, 249.0)]
    assert reports[-1].records_per_s(117) == pytest.approx(5002.8, abs=0.1)


def test_words_for_no_value_and_a_decimal_comma_are_numbers() -> None:
    r = parse_report("Throughput (bytes/second): 0,00, Latency (ms): NaN p75 Infinity p99 "
                     "-Infinity p999")
    assert r is not None and r.bytes_per_s == 0.0 and math.isnan(r.p75_ms)
    assert r.p99_ms == math.inf and r.p999_ms == -math.inf


def test_the_first_commit_of_an_epoch_is_the_leaders_line_only() -> None:
    text = (DATA / "testraftserver-4.4.0-kafka.log").read_text()
    at = datetime(2026, 12, 2, 19, 27, 54, 84000).timestamp()
    assert first_commits(text) == [(2, 1, pytest.approx(at))]  # not the follower's line
    assert log_time("[2026-12-02 19:27:54,084] INFO x") == pytest.approx(at)
    assert log_time("\tat kafka.tools.TestRaftRequestHandler.handle") is None


def test_a_report_covers_the_current_30_s_sample_and_the_one_before() -> None:
    assert histogram_span(1000.0, 1020.0) == (1000.0, 1020.0)
    assert histogram_span(1000.0, 1059.9) == (1000.0, 1059.9)
    assert histogram_span(1000.0, 1060.0) == (1030.0, 1060.0)
    assert histogram_span(1000.0, 1089.0) == (1030.0, 1089.0)
    assert histogram_span(1000.0, 1095.0) == (1060.0, 1095.0)


def _level(rate: int, committed: float, p99: float, **extra: object) -> dict[str, object]:
    return {"rate": rate, "committed_per_s": committed, "latency": {"p99_ms": p99},
            "cpu": {"cpu_s": {"node1": 1.0}, "other_cpu_s": 0.5}, **extra}


def _result() -> dict[str, object]:
    rates = [5_000, 100_000]
    res: dict[str, object] = {
        "mode": "full", "params": {"rates": rates, "warmup_s": 30.0, "duration_s": 55.0,
                                   "kraft_warmup_s": 5.0, "capacity_rate": 400_000,
                                   "capacity_warmup_s": 15.0, "capacity_duration_s": 10.0},
        "record_size": 117,
        "systems": {
            "kraft-quorum": {"levels": {
                "5000": _level(5_000, 5_000.0, 1.4), "100000": _level(100_000, 99_500.0, 9.0),
                "400000": _level(400_000, 110_000.0, 800.0, held_back=900_000, kind="capacity")},
                "failover": {"recovery": {"n": 2, "p50_ms": 150.0, "p99_ms": 190.0,
                                          "max_ms": 190.0}}},
            "kafka-raft": {"info": {"version": "Apache Kafka 4.4.0 kafka.tools.TestRaftServer",
                                    "config": {"jvm": "-Xmx1G"}},
                           "levels": {
                "5000": _level(5_000, 4_999.0, 31.0, printed={"records_per_s": 5001.0,
                                                              "histogram_span_s": [30.0, 84.2]}),
                "100000": _level(100_000, 116_000.0, 249.0, behind_at_end_s=2.5),
                "400000": _level(400_000, 240_000.0, 250.0, kind="capacity")},
                "failover": {"recovery": {"n": 2, "p50_ms": 2600.0, "p99_ms": 3100.0,
                                          "max_ms": 3100.0}}}}}
    res["summary"] = measure.summarize(res, rates)
    return res


def test_the_summary_takes_the_most_committed_and_the_highest_rate_carried() -> None:
    s = _result()["summary"]
    assert isinstance(s, dict)
    assert s["kraft-quorum"]["throughput_per_s"] == 110_000.0
    assert s["kraft-quorum"]["at_rate"] == 400_000
    assert s["kraft-quorum"]["highest_rate_carried"] == 100_000  # 99.5 % of it
    # more than offered in the window, catching up: 2.5 s of the rate still behind at its end
    assert s["kafka-raft"]["highest_rate_carried"] == 5_000
    assert s["kafka-raft"]["latency"] == {"p99_ms": 31.0}
    assert s["kafka-raft"]["failover"]["p99_ms"] == 3100.0
    assert s["kafka-raft"]["cpu_us_per_record"] is None  # its capacity window has no wall time
    assert measure.cpu_per_record({"committed_per_s": 1000.0, "cpu": {
        "wall_s": 10.0, "cpu_s": {"node1": 0.05, "client": 0.02}}}) == {
            "all": 7.0, "node1": 5.0, "client": 2.0}


def test_the_targets_compare_kraft_with_testraftserver() -> None:
    targets = {t["name"]: t for t in evaluate_targets({"kafka_raft": _result()})}
    tp = targets["commit throughput vs Kafka's TestRaftServer"]
    assert (tp["limit"], tp["measured"], tp["met"]) == (240_000.0, 110_000.0, False)
    assert tp["ratio_measured_to_target"] == pytest.approx(0.458, abs=0.001)
    p99 = targets["commit latency p99 vs Kafka's TestRaftServer at 5,000 records/s"]
    assert (p99["limit"], p99["measured"], p99["met"]) == (31.0, 1.4, True)
    assert not any("TestRaftServer" in name for name in
                   (t["name"] for t in evaluate_targets({})))  # no run, no such target
    missing = {t["name"]: t for t in evaluate_targets({"kafka_raft": {"error": "no jars"}})}
    assert not any("TestRaftServer" in name for name in missing)


def test_the_report_section_shows_every_rate_and_why_a_run_is_missing() -> None:
    lines = compare.kafka_raft_section(_result())
    text = "\n".join(lines)
    assert "| 400,000 (capacity) | 110,000 (900,000 not sent: over 20,000 outstanding) |" in text
    assert "The last rate, 400,000/s, is there for their throughput" in text
    carried = _result()
    carried["summary"]["kafka-raft"]["highest_rate_carried"] = 400_000  # type: ignore[index]
    assert "(offered 400,000, all it was offered: at least this)" in "\n".join(
        compare.kafka_raft_section(carried))
    assert "| 5,000 | 5,000 | — / — / 1.40 / — | node1 1.0; others 0.5 | 4,999 (5,001) | — / 31.00 / — (30.0-84.2) |" in text
    assert ("| kafka-raft | 240,000 (offered 400,000) | — | 5,000 | 31.00 ms at 5,000/s "
            "| 2: 2,600 / 3,100 / 3,100 |") in text
    assert compare.kafka_raft_section(None) == []
    assert compare.kafka_raft_section({"error": "no jars: run `make kafka` first"})[-1] == \
        "Not measured: no jars: run `make kafka` first"


def test_missing_jars_name_make_kafka(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import kafka_launch

    with pytest.raises(kafka_launch.KafkaUnavailable, match=r"run `make kafka` first"):
        kafka_launch.cached_dist("4.4.0", cache=tmp_path)
    assert measure.main(["--kafka-version", "4.0.99", "--rates", "10"]) == 2
    assert "run `make kafka` first" in capsys.readouterr().err


def test_the_rates_run_with_long_windows_and_the_capacity_rate_last_with_a_short_one() -> None:
    p = measure.params_of(measure.parse(["--rates", "1000,2000", "--seconds", "20"]))
    assert p.levels() == [(1000, 30.0, 20.0, "latency"), (2000, 30.0, 20.0, "latency"),
                          (200_000, 15.0, 10.0, "capacity")]
    assert measure.params_of(measure.parse(["--capacity-rate", "0"])).levels()[-1][3] == "latency"
    quick = measure.params_of(measure.parse(["--quick"]))
    assert [lv[0] for lv in quick.levels()] == [5_000, 200_000] and quick.failover_trials == 1


@pytest.mark.parametrize(("args", "word"), [
    (["--rates", "5k"], "--rates"), (["--rates", "0"], "--rates"), (["--rates", "9,9"], "--rates"),
    (["--seconds", "0"], "--seconds"), (["--trials", "-1"], "--trials"),
    (["--rates", "9", "--capacity-rate", "9"], "--capacity-rate")])
def test_a_bad_option_is_named(args: list[str], word: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert measure.main(args) == 2
    assert word in capsys.readouterr().err


@pytest.mark.xdist_group("kafka-interop")
def test_three_testraftservers_commit_and_elect_again_after_kill_9(tmp_path: Path) -> None:
    from tests.support.kafka import NEWEST, SHORT_LIVED_JVM_OPTS, kafka_dist

    c = kafka_raft.KafkaRaftCluster(tmp_path / "kafka-raft", throughput=500, version=NEWEST,
                                    jvm_opts=SHORT_LIVED_JVM_OPTS, dist=kafka_dist(NEWEST))
    try:
        c.start(timeout=120)
        lead = c.wait_leader()
        assert lead.high_watermark is not None
        # a follower answers with the leader it follows (the one that fetched for the commit)
        others = [v for v in c.views() if v.asked != lead.leader_id]
        assert any((v.leader_id, v.epoch, v.high_watermark) == (lead.leader_id, lead.epoch, None)
                   for v in others), others
        deadline = time.monotonic() + 30
        later = c.leader_view()
        while later is not None and later.high_watermark == lead.high_watermark \
                and time.monotonic() < deadline:
            time.sleep(0.2)
            later = c.leader_view()
        assert later is not None and later.high_watermark > lead.high_watermark  # it writes
        assert c.first_commit(lead.leader_id, lead.epoch) is not None
        killed_at = c.kill(lead.leader_id)
        new = c.wait_leader(60, exclude=lead.leader_id)
        assert new.epoch > lead.epoch and new.leader_id != lead.leader_id
        committed_at = c.first_commit(new.leader_id, new.epoch)
        assert committed_at is not None and committed_at >= killed_at - 0.002
    finally:
        c.stop()
