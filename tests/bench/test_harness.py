"""Pure parts of the comparison harness (no peers, no clusters): percentiles, CPU accounting,
target evaluation, markdown rendering, the ApiVersions Fetch cap and the log-time parser."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.measure.scenarios import Target, disk_probe, evaluate_targets, floor_probe, flush_window
from bench.report import compare
from bench.systems.kraft_cluster import cap_api_versions, flush_metric, log_event_time
from bench.systems.peers import (
    cpu_delta,
    free_port,
    parse_machine_stat,
    parse_proc_stat_cpu,
    pct,
    summarize_ns,
    summarize_s,
)
from kraft.cli.local import PortLocks


def test_peer_ports_are_outside_the_ephemeral_range_never_handed_out_twice_and_held() -> None:
    import socket

    low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(not low <= p <= high for p in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))  # free when handed out
    other = PortLocks()  # another run, or a local quorum, cannot choose them
    assert not any(other.take(p) for p in ports)
    other.release()


def test_percentile_nearest_rank() -> None:
    vals = list(range(1, 101))
    assert pct(vals, 50) == 50
    assert pct(vals, 99) == 99
    assert pct(vals, 99.9) == 100
    assert pct(vals, 0) == 1
    assert math.isnan(pct([], 50))
    assert pct([7], 99.9) == 7


def test_summaries_are_in_milliseconds() -> None:
    s = summarize_ns([1_000_000, 2_000_000, 3_000_000, 4_000_000])
    assert s["n"] == 4
    assert s["p50_ms"] == 2.0
    assert s["max_ms"] == 4.0
    assert s["mean_ms"] == 2.5
    assert summarize_ns([]) == {"n": 0}
    assert summarize_s([0.25])["p99_ms"] == 250.0


def test_proc_stat_parse_handles_spaces_and_parens_in_comm() -> None:
    fields = ["S"] + ["0"] * 10 + ["250", "150"] + ["0"] * 30
    text = "1234 (odd (name) x) " + " ".join(fields)
    assert parse_proc_stat_cpu(text, clk_tck=100) == pytest.approx(4.0)


def test_machine_stat_and_cpu_delta() -> None:
    busy, total = parse_machine_stat("cpu  100 0 50 800 50 0 0 0 0 0")
    assert (busy, total) == (150, 1000)
    r = cpu_delta({"a": 1.0, "b": 2.0}, {"a": 3.0, "b": 2.5}, (150, 1000), (550, 1200), 2.0,
                  clk_tck=100)
    assert r["cpu_s"] == {"a": 2.0, "b": 0.5}
    assert r["machine_util_pct"] == 200.0 or r["machine_util_pct"] == pytest.approx(200.0)
    assert r["other_cpu_s"] == pytest.approx(4.0 - 2.5)


def _result(kraft_tp: float = 60_000, peer_tp: float = 30_000, p50: float = 0.5,
            p99: float = 1.5, fo_p99: float = 250) -> dict:
    return {
        "throughput": {"systems": {"kraft-quorum": {"best_ops_per_s": kraft_tp},
                                   "kraft-quorum-linger0": {"best_ops_per_s": kraft_tp * 10},
                                   "etcd": {"best_ops_per_s": peer_tp},
                                   "pysyncobj": {"best_ops_per_s": peer_tp / 2}}},
        "latency": {"systems": {"kraft-quorum": {"latency": {"p50_ms": p50, "p99_ms": p99}}}},
        "kip1166": {"rtt": {"p50_ms": 0.1},
                    "systems": {"kraft-quorum": {"field_sent": {"latency": {"p99_ms": 0.9}}}}},
        "failover": {"systems": {"kraft-quorum": {
            "kill9": {"recovery": {"p99_ms": fo_p99}},
            "partition": {"fetch_timeout_ms": 2000, "recovery": {"max_ms": 2500}}}}},
        "snapshot": {"systems": {"kraft-quorum": {"mb_per_s": 150.0,
                                                  "snapshot_installed_bytes": 900_000_000}}},
        "restart": {"systems": {"kraft-quorum": {"disk": {"log_bytes": 1 << 30},
                                                 "kill9": {"ready_s": 4.0},
                                                 "sigterm": {"ready_s": 3.0}}}},
    }


def test_targets_met_and_ratios() -> None:
    t = {x["name"]: x for x in evaluate_targets(_result())}
    assert t["throughput"]["met"] is True
    assert t["throughput"]["ratio_measured_to_target"] == 1.2
    assert t["throughput vs best peer"]["measured"] == 2.0
    assert t["throughput vs best peer"]["met"] is True
    assert t["sequential commit latency p50"]["met"] is True
    assert t["follower-visible commit p99 (KIP-1166)"]["limit"] == pytest.approx(1.1)
    assert t["follower-visible commit p99 (KIP-1166)"]["met"] is True
    assert t["silent partition of the leader, max over trials"]["limit"] == 3000
    assert t["snapshot transfer"]["met"] is False
    assert t["restart with ~1 GiB of log"]["measured"] == 4.0
    assert t["restart with ~1 GiB of log"]["met"] is True


def test_targets_not_met_and_missing() -> None:
    t = {x["name"]: x for x in evaluate_targets(_result(kraft_tp=20_000, p50=1.2, fo_p99=900))}
    assert t["throughput"]["met"] is False
    assert t["throughput vs best peer"]["met"] is False
    assert t["sequential commit latency p50"]["ratio_measured_to_target"] == 2.0
    assert t["failover after kill -9 of the leader, p99"]["met"] is False
    empty = {x["name"]: x for x in evaluate_targets({})}
    assert all(x["met"] is None for x in empty.values())
    assert Target("x", "<=", 1.0, None, "ms").met is None


def test_markdown_and_json_render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compare, "IMG", tmp_path / "img")
    res = _result()
    res["targets"] = evaluate_targets(res)
    res["throughput"]["systems"]["kraft-quorum"].update(
        sweep={"16": {"ops_per_s": 1000.0, "latency": {"p99_ms": 3.0}}}, best_inflight=16,
        latency_at_best={"p50_ms": 1.0, "p99_ms": 3.0})
    res["machine"] = {"nproc": 2, "busy": {"windows": 3}}
    res["latency"]["systems"]["kraft-quorum"]["log_flush"] = {
        "node1": {"role": "follower", "flushes": 5200, "mean_ms": 0.291},
        "node2": {"role": "leader", "flushes": 5200, "mean_ms": 0.412}}
    res["latency"]["systems"]["kraft-quorum"]["disk_probe"] = {"n": 500, "p50_ms": 0.0951,
                                                               "p99_ms": 0.1312, "bytes": 187}
    res["latency"]["systems"]["kraft-quorum"]["floor_probe"] = {"n": 2800, "p50_ms": 0.4312,
                                                                "p99_ms": 0.7719}
    res["latency"]["systems"].setdefault("etcd", {})["floor_probe"] = {
        "error": "bench.measure.latency_floor exited 1: x"}
    md = compare.render_markdown(res)
    assert md.startswith(compare.BEGIN) and md.endswith(compare.END)
    assert ("no work between them, 2,800 writes after warm-up): kraft-quorum p50 0.431 / p99 0.772 "
            "ms; etcd bench.measure.latency_floor exited 1: x. What a system's p50 adds" in md)
    assert "node1 (follower) 0.291 ms over 5,200; node2 (leader) 0.412 ms over 5,200" in md
    assert ("(500 appends of 187 bytes, each followed by `fdatasync`, in a scratch file on the same "
            "filesystem): kraft-quorum p50 0.095 / p99 0.131 ms." in md)
    assert "| throughput | >= 50,000 writes/s | 60,000 writes/s | 1.200 | **met** |" in md
    assert "**not met**" in md  # the snapshot target
    assert (tmp_path / "img" / "bench_throughput.png").exists()
    json.dumps(res)  # JSON-ready
    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmarks\n\nintro\n\n<!-- BEGIN GENERATED: make bench -->\nx\n"
                    "<!-- END GENERATED: make bench -->\n")
    compare.write_markdown(res, page)
    compare.write_markdown(res, page)  # replaces, never duplicates
    text = page.read_text()
    assert text.count(compare.BEGIN) == 1
    assert text.index(compare.BEGIN) < text.index("<!-- BEGIN GENERATED")


def test_cap_api_versions_lowers_fetch_only() -> None:
    from kraft.protocol.api import api_versions_response
    from kraft.protocol.framing import decode_response, encode_response

    body = api_versions_response(3)
    frame = encode_response(18, 3, 42, body)[4:]
    capped = cap_api_versions(frame, 3, 17)
    header, out = decode_response(18, 3, capped)
    assert header.correlation_id == 42
    before = {k.api_key: k.max_version for k in body.api_keys}
    after = {k.api_key: k.max_version for k in out.api_keys}
    assert after[1] == min(before[1], 17)
    assert {k: v for k, v in after.items() if k != 1} == {k: v for k, v in before.items() if k != 1}
    assert cap_api_versions(b"\x00\x01", 3, 17) == b"\x00\x01"


def test_log_event_time(tmp_path: Path) -> None:
    log = tmp_path / "kraft.log"
    log.write_text("2026-11-22 01:00:00,100 level=INFO logger=x event=node_started replica=1\n"
                   "2026-11-22 01:00:02,350 level=INFO logger=x event=snapshot_installed bytes=5\n")
    a = log_event_time(log, "node_started")
    b = log_event_time(log, "snapshot_installed")
    assert a is not None and b is not None
    assert b - a == pytest.approx(2.25, abs=1e-6)
    assert log_event_time(log, "node_started", after=a + 10) is None
    assert log_event_time(tmp_path / "missing.log", "x") is None


def test_slow_trial_keeps_only_what_the_nodes_logged_during_it(tmp_path: Path) -> None:
    from bench.systems.kraft_cluster import KraftCluster

    c = KraftCluster(tmp_path / "kraft-proxied", proxied=True)
    assert c.slow_trial_limit_s("kill") == pytest.approx(0.3)
    fetch_s = int(c.lc.properties["controller.quorum.fetch.timeout.ms"]) / 1000
    assert c.slow_trial_limit_s("partition") == pytest.approx(fetch_s + 1.0)
    nodes = sorted(c.lc.nodes)
    for nid in nodes[:-1]:  # the last node has not logged anything yet
        path = c.lc.nodes[nid].log_path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"before the trial {nid}\n")
    marks = c._log_marks()
    assert marks[nodes[-1]] == 0
    for nid in nodes:
        c.lc.nodes[nid].log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(c.lc.nodes[nid].log_path, "a") as f:
            f.write(f"during the trial {nid}\n")
    kept = c._keep_trial_logs("partition", marks, {"recovery_s": 4.4, "old_leader": nodes[0]})
    assert kept.parent == tmp_path / "slow-trials"
    assert kept.name.startswith("kraft-proxied-partition-")
    for nid in nodes:
        assert (kept / f"node-{nid}.log").read_text() == f"during the trial {nid}\n"
    assert json.loads((kept / "trial.json").read_text())["recovery_s"] == 4.4
    # the cluster's own directory is deleted by the next run; the kept logs are not
    KraftCluster(tmp_path / "kraft-proxied", proxied=True)
    assert (kept / "trial.json").exists()


def test_the_workload_cycles_over_its_keys() -> None:
    from bench.systems.peers import NKEYS, key_of

    keys = [key_of(i) for i in range(2 * NKEYS)]
    assert keys[0] == "k000000" and keys[NKEYS - 1] == f"k{NKEYS - 1:06d}"
    assert keys[:NKEYS] == keys[NKEYS:] and len(set(keys)) == NKEYS


def test_flush_times_from_the_node_metric() -> None:
    """The count and sum are read from the node's own exposition text (its registry's
    histogram), and a node without the metric gives None."""
    from kraft.server.metrics import DISK_LATENCY_BUCKETS, Registry

    r = Registry()
    h = r.histogram("kraft_log_flush_seconds", "fsyncs", DISK_LATENCY_BUCKETS)
    r.histogram("kraft_commit_latency_seconds", "other")
    assert flush_metric(r.render()) == (0, 0.0)
    for seconds in (0.0002, 0.0003, 0.0007):
        h.observe(seconds)
    count, total = flush_metric(r.render()) or (0, 0.0)
    assert count == 3 and total == pytest.approx(0.0012)
    assert flush_metric("kraft_high_watermark 7\n") is None


def test_flush_window_per_node() -> None:
    before = {"node1": (10, 0.003), "node2": (10, 0.004)}
    after = {"node1": (110, 0.033), "node2": (10, 0.004), "node3": (50, 0.02)}
    w = flush_window(before, after, "node1")
    assert w["node1"] == {"role": "leader", "flushes": 100, "mean_ms": 0.3}
    assert w["node2"] == {"role": "follower", "flushes": 0, "mean_ms": None}
    assert w["node3"] == {"role": "follower", "flushes": 50, "mean_ms": 0.4}  # new since


def test_floor_probe_runs_the_floor_and_reads_its_json() -> None:
    """A real short run of `bench.measure.latency_floor`: the figures come back as numbers in order;
    a run that cannot succeed comes back as an error naming why, not as an exception."""
    r = floor_probe(writes=300)
    assert r["n"] == 100 and r["leader_sync"] == "thread" and r["work_us"] == [0] * 7
    assert 0 < r["p50_ms"] <= r["p90_ms"] <= r["p99_ms"]
    bad = floor_probe(writes=10)  # below the floor's minimum of 300
    assert bad["error"].startswith("bench.measure.latency_floor exited 2:")
    assert "--writes must be at least 300" in bad["error"]


def test_disk_probe_times_real_syncs_and_leaves_nothing(tmp_path: Path) -> None:
    """Each round is an append and an fdatasync of this filesystem, timed; the scratch file
    is gone afterwards, and a directory that does not exist yet is made."""
    where = tmp_path / "not-yet"
    r = disk_probe(where, rounds=40, size=187)
    assert r["n"] == 40 and r["bytes"] == 187
    assert 0 < r["min_ms"] <= r["p50_ms"] <= r["p99_ms"] <= r["max_ms"]
    assert list(where.iterdir()) == []


def test_recovery_counts_only_writes_sent_after_the_fault_landed() -> None:
    from bench.systems.peers import recovery_after

    # planned at 10.0, landed at 10.004: the write sent at 10.001 was the old leader's
    r = recovery_after({"acks_after": [(10.001, 10.002), (10.005, 10.210), (10.3, 10.25)]},
                       10.004)
    assert r == {"recovery_s": pytest.approx(0.206)}
    assert recovery_after({"acks_after": [(10.001, 10.002)]}, 10.004)["recovery_s"] is None
    assert recovery_after({}, 1.0)["recovery_s"] is None


def test_the_failover_load_runs_past_the_planned_moment_by_the_margin() -> None:
    import asyncio
    import time

    from bench.systems.peers import FAULT_MARGIN_S, failover_loop

    async def op(_i: int) -> None:
        await asyncio.sleep(0.002)

    kill_at = time.monotonic() + 0.05
    r = asyncio.run(failover_loop(op, 2, kill_at, max_s=5.0, after_s=0.01))
    sent = [s for s, _ in r["acks_after"]]
    assert min(sent) >= kill_at and max(sent) >= kill_at + FAULT_MARGIN_S
    assert max(sent) < kill_at + FAULT_MARGIN_S + 1.0 and r["acked_before_kill"] > 0
