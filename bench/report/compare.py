"""The comparison's report: the section of docs/benchmarks.md that `python -m bench compare`
(`bench.measure.bench_compare`) writes from its results, and its charts in docs/img/
(`bench.report.charts`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report import charts
from bench.systems.kraft_cluster import BENCH_PROPERTIES
from bench.systems.peers import ROOT

BEGIN = "<!-- BEGIN COMPARISON: python -m bench compare -->"
END = "<!-- END COMPARISON -->"
IMG = ROOT / "docs" / "img"


def _f(v: Any, nd: int = 2) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.{nd}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _met(v: bool | None) -> str:
    return "not measured" if v is None else ("**met**" if v else "**not met**")


def targets_table(targets: list[dict[str, Any]]) -> list[str]:
    """Markdown rows of the targets table."""
    lines = ["| target | limit | measured | measured / limit | status | note |",
             "| --- | ---: | ---: | ---: | --- | --- |"]
    for t in targets:
        lim = f"{t['op']} {_f(t['limit'])} {t['unit']}" if t["limit"] is not None else "—"
        meas = f"{_f(t['measured'])} {t['unit']}" if t["measured"] is not None else "—"
        ratio = _f(t.get("ratio_measured_to_target"), 3)
        lines.append(f"| {t['name']} | {lim} | {meas} | {ratio} | {_met(t['met'])} | {t.get('note', '')} |")
    return lines


def _cpu(r: dict[str, Any]) -> str:
    cpu = (r.get("cpu") or {}).get("cpu_s") or {}
    return " / ".join(f"{k} {v}" for k, v in cpu.items())


def render_markdown(res: dict[str, Any]) -> str:
    """The comparison section (between BEGIN and END markers), charts written to docs/img/."""
    imgs = charts.all_charts(res, IMG)
    mi = res.get("machine", {})
    busy = mi.get("busy", {})
    L = [BEGIN, "", "## kraft-quorum vs PySyncObj, etcd and Kafka's TestRaftServer (`python -m bench compare`)", "",
         f"Mode **{res.get('mode')}**, one invocation, {res.get('timings_s', {}).get('total')} s. "
         f"Machine: {mi.get('nproc')} cores ({mi.get('cpu')}), {mi.get('memory_gib')} GiB, kernel "
         f"{mi.get('kernel')}, Python {mi.get('python')} (`{mi.get('python_executable')}`; PySyncObj "
         f"on `{mi.get('peers_python_executable')}`), data on {mi.get('workdir_fs')}. "
         f"Versions: {mi.get('versions', {}).get('etcd')}; {mi.get('versions', {}).get('peers_venv')}; "
         f"kraft-quorum: {(res.get('kraft_source') or {}).get('source', mi.get('versions', {}).get('kraft_commit'))}.", "",
         f"Machine load: {busy.get('windows')} measured windows, {busy.get('windows_not_quiet_before')} "
         f"started on a busy machine (worst {busy.get('worst_util_pct_before')} % CPU before a window); "
         f"largest CPU used by processes outside the benchmark during one window: "
         f"{busy.get('max_other_cpu_s_in_a_window')} CPU-s; whole run {busy.get('whole_run_util_pct')} % "
         "of both cores.", "", "### How it is measured", "",
         "- Same machine, same invocation, systems one after another per scenario (kraft-quorum "
         "first). 3 voters on 127.0.0.1, fsync on (PySyncObj has no fsync at all: it runs with its "
         "mmap journal), 1000 keys, 100-byte values, closed loop with N outstanding writes, 1 s "
         "warm-up then the measured window; throughput counts acknowledgements inside the window.",
         "- Clients: `kraft-quorum` through its binary client protocol (`KvClient.send` with a "
         "callback per write, up to 8 pipelined connections to the leader, uvloop) from a separate "
         "process; `kraft-quorum-http` through its HTTP API (`PUT /v1/kv/{key}`, aiohttp, "
         "keep-alive, one connection per outstanding write) from a separate process; etcd through "
         "its native gRPC API (Python grpc.aio, etcd3 0.12.0 stubs) from a separate process; "
         "PySyncObj has no client protocol, so its writer runs inside the leader's process (no "
         "network hop, no client process: an advantage for PySyncObj).",
         "- PySyncObj twice: `pysyncobj` = its default (`appendEntriesUseBatch=True`, entries go "
         "out on a 0.1 s tick: high throughput, ~100 ms latency) and `pysyncobj-nobatch` (low "
         "latency). The best peer for the ratio is the best of all of them.",
         "- Every window records CPU seconds per process (servers, client, proxy) from "
         "/proc/<pid>/stat and how busy the machine was before it (bounded wait for < 15 % CPU) and "
         "during it (CPU of processes outside the benchmark): all in docs/benchmarks.json.",
         "- Nodes run with their defaults unless a scenario says otherwise (kraft-quorum: election "
         "timeout 1 s, fetch timeout 2 s, adaptive append linger capped at 25 ms; etcd: heartbeat 100 ms, election "
         "1 s). One setting of kraft-quorum's is not its default: "
         + ", ".join(f"`{k}={v}`" for k, v in BENCH_PROPERTIES.items())
         + " (followers write the records they fetch with `O_DIRECT | O_DSYNC` into "
         "preallocated segment space; off by default like Kafka's `log.preallocate`; "
         "docs/journal/perf-27-write-through.md).", "", "### Targets", ""]
    L += targets_table(res.get("targets", []))
    L += ["", "### 1. Throughput (closed loop, acknowledged writes/s)", "",
          "| system | best writes/s | at outstanding | p50 / p99 at best (ms) | sweep: writes/s by outstanding |",
          "| --- | ---: | ---: | ---: | --- |"]
    for name, s in ((res.get("throughput") or {}).get("systems") or {}).items():
        lat = s.get("latency_at_best") or {}
        sweep = " · ".join(f"{k}: {_f(v.get('ops_per_s'))}" for k, v in (s.get("sweep") or {}).items())
        L.append(f"| {name} {s.get('version', '')} | {_f(s.get('best_ops_per_s'))} | {s.get('best_inflight', '—')} "
                 f"| {_f(lat.get('p50_ms'))} / {_f(lat.get('p99_ms'))} | {sweep or s.get('error', '')} |")
    L += ["", "CPU seconds per process in each window are in docs/benchmarks.json "
          "(`compare.throughput.systems.<name>.sweep.<n>.cpu`)."]
    L += ["", "### 2. Sequential commit latency (one write at a time)", "",
          "| system | writes/s | p50 ms | p99 ms | p99.9 ms | CPU-s in the window |",
          "| --- | ---: | ---: | ---: | ---: | --- |"]
    for name, s in ((res.get("latency") or {}).get("systems") or {}).items():
        lat = s.get("latency") or {}
        L.append(f"| {name} | {_f(s.get('ops_per_s'))} | {_f(lat.get('p50_ms'), 3)} | {_f(lat.get('p99_ms'), 3)} "
                 f"| {_f(lat.get('p999_ms'), 3)} | {_cpu(s) or s.get('error', '')} |")
    for name, s in ((res.get("latency") or {}).get("systems") or {}).items():
        fl = s.get("log_flush")
        if fl:
            parts = [f"{k} ({v['role']}) {_f(v['mean_ms'], 3)} ms over {v['flushes']:,}" for k, v in fl.items()]
            L.append(f"\n- {name}: each node's log fsyncs in that window and its warm-up "
                     f"(`kraft_log_flush_seconds`; the leader's timed from its start until seen done), "
                     f"mean: {'; '.join(parts)}. A write waits for the leader's and one follower's.")
    probed = {name: s["disk_probe"] for name, s in ((res.get("latency") or {}).get("systems") or {}).items()
              if isinstance(s.get("disk_probe"), dict)}
    if probed:
        first = next(iter(probed.values()))
        parts = [f"{name} p50 {_f(d.get('p50_ms'), 3)} / p99 {_f(d.get('p99_ms'), 3)} ms"
                 for name, d in probed.items()]
        L.append(f"\n- The disk alone just before each system's window ({first.get('n')} appends of "
                 f"{first.get('bytes')} bytes, each followed by `fdatasync`, in a scratch file on the "
                 f"same filesystem): {'; '.join(parts)}. kraft-quorum and etcd fsync every write on "
                 "this disk, so its phase moves both.")
    floors = {name: s["floor_probe"] for name, s in ((res.get("latency") or {}).get("systems") or {}).items()
              if isinstance(s.get("floor_probe"), dict)}
    if floors:
        parts = [f"{name} {d['error']}" if d.get("error") else
                 f"{name} p50 {_f(d.get('p50_ms'), 3)} / p99 {_f(d.get('p99_ms'), 3)} ms"
                 for name, d in floors.items()]
        n = next(iter(floors.values())).get("n")
        L.append("\n- The latency floor just before each system's window (`bench.measure.latency_floor`: a "
                 "write's hops and fsyncs through four processes on loopback with no work between "
                 f"them, {f'{n:,}' if isinstance(n, int) else '?'} writes after warm-up): "
                 f"{'; '.join(parts)}. What a system's p50 adds to it is its own work.")
    L += ["", "### 3. Failover", "",
          "| system | fault | trials | p50 ms | p99 ms | max ms | failed trials |",
          "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, s in ((res.get("failover") or {}).get("systems") or {}).items():
        for kind in ("kill9", "partition"):
            k = s.get(kind)
            if not isinstance(k, dict):
                continue
            rec = k.get("recovery") or {}
            L.append(f"| {name} | {'kill -9 of the leader' if kind == 'kill9' else 'silent partition of the leader'} "
                     f"| {rec.get('n', 0) + k.get('failed_trials', 0)} | {_f(rec.get('p50_ms'), 0)} "
                     f"| {_f(rec.get('p99_ms'), 0)} | {_f(rec.get('max_ms'), 0)} | {k.get('failed_trials', k.get('error', ''))} |")
    for n in (res.get("failover") or {}).get("notes", []):
        L.append(f"\n- {n}")
    k4 = res.get("kip1166") or {}
    L += ["", "### 4. KIP-1166: leader acknowledgement -> visible on a follower", "",
          f"Loopback RTT (64 B, asyncio <-> asyncio): p50 {_f((k4.get('rtt') or {}).get('p50_ms'), 3)} ms, "
          f"p99 {_f((k4.get('rtt') or {}).get('p99_ms'), 3)} ms.", "",
          "| system / mode | samples | p50 ms | p99 ms | max ms |", "| --- | ---: | ---: | ---: | ---: |"]
    for name, s in (k4.get("systems") or {}).items():
        modes = {m: v for m, v in s.items() if isinstance(v, dict) and "latency" in v} if name == "kraft-quorum" \
            else {"": s}
        for mode, v in modes.items():
            lat = v.get("latency") or {}
            L.append(f"| {name} {mode.replace('_', ' ')} | {lat.get('n', 0)} | {_f(lat.get('p50_ms'), 3)} "
                     f"| {_f(lat.get('p99_ms'), 3)} | {_f(lat.get('max_ms'), 3)} |")
    for n in k4.get("notes", []):
        L.append(f"\n- {n}")
    sn = ((res.get("snapshot") or {}).get("systems") or {}).get("kraft-quorum") or {}
    rs = ((res.get("restart") or {}).get("systems") or {}).get("kraft-quorum") or {}
    L += ["", "### 5. Snapshot catch-up of a new voter", "",
          "| system | state loaded | snapshot size | download (first chunk request -> file complete) | MB/s | install (load into state machine) | process start -> caught up | AddRaftVoter |",
          "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
          f"| kraft-quorum | {_f(((res.get('snapshot') or {}).get('params') or {}).get('state_bytes', 0) / 1e6, 0)} MB "
          f"(loaded at {_f((sn.get('load') or {}).get('mb_per_s'), 1)} MB/s) | {_f((sn.get('snapshot_installed_bytes') or 0) / 1e6, 0)} MB "
          f"| {_f(sn.get('snapshot_transfer_s'), 2)} s | {_f(sn.get('mb_per_s'), 1)} | {_f(sn.get('snapshot_install_s'), 2)} s "
          f"| {_caught(sn, res)} "
          f"| {'ok' if (sn.get('add_voter') or {}).get('ok') else (sn.get('add_voter') or {}).get('output', sn.get('error', '—'))} |"]
    ec = ((res.get("snapshot") or {}).get("systems") or {}).get("etcd") or {}
    if ec:
        j = ec.get("join") or {}
        L.append(f"| etcd (learner) | loaded at {_f((ec.get('load') or {}).get('mb_per_s'), 1)} MB/s "
                 f"| db {_f((j.get('learner_db_bytes') or 0) / 1e6, 0)} MB | — "
                 f"| {_f(ec.get('mb_per_s_whole_catch_up'), 1)} (whole catch-up) | — "
                 f"| {_f(ec.get('time_to_caught_up_s'), 2)} s | {j.get('error', ec.get('error', 'learner'))} |")
    st = sn.get("new_node_status") or {}
    if sn and sn.get("caught_up") is False:
        L.append(f"\nThe new kraft-quorum node did not become ready: its /v1/status at the end was "
                 f"role={st.get('role')} epoch={st.get('epoch')} leader={st.get('leader_id')} "
                 f"voters={st.get('voters')} kraft_version={st.get('kraft_version')} "
                 f"applied={st.get('applied_offset')} (leader high watermark "
                 f"{st.get('leader_high_watermark')}). Last lines of its log:\n")
        L.append("```")
        L += [ln[:220] for ln in sn.get("new_node_log_tail") or []]
        L.append("```")
    for n in (res.get("snapshot") or {}).get("notes", []):
        L.append(f"\n- {n}")
    disk = rs.get("disk") or {}
    L += ["", "### 6. Restart of a node holding the log plus a snapshot", "",
          f"kraft-quorum on disk: log {_f(disk.get('log_bytes', 0) / 1e6, 0)} MB, snapshot "
          f"{_f(disk.get('snapshot_bytes', 0) / 1e6, 0)} MB.", "",
          "| system | restart after | process start -> ready (s) | of which until storage opened (kraft: log recovered + snapshot loaded) (s) |",
          "| --- | --- | ---: | ---: |"]
    for how in ("kill9", "sigterm"):
        r = rs.get(how) or {}
        L.append(f"| kraft-quorum | {how} | {_f(r.get('ready_s'), 2)} | {_f(r.get('storage_open_s'), 2)} |")
    er = ((res.get("restart") or {}).get("systems") or {}).get("etcd") or {}
    for how in ("kill9", "sigterm"):
        r = er.get(how) or {}
        if r:
            L.append(f"| etcd (data dir {_f((r.get('data_dir_bytes') or 0) / 1e6, 0)} MB) | {how} "
                     f"| {_f(r.get('ready_s'), 2)} | — |")
    if rs.get("error"):
        L.append(f"\nError: {rs['error']}")
    L += kafka_raft_section(res.get("kafka_raft"))
    if imgs:
        L += ["", "### Charts", ""]
        for pth in imgs:
            L.append(f"![{pth.stem}](img/{pth.name})")
    L += ["", END]
    return "\n".join(L)


def _lat(lat: dict[str, Any] | None, keys: tuple[str, ...]) -> str:
    lat = lat or {}
    return " / ".join(_f(lat.get(k), 2) for k in keys)


def _other(level: dict[str, Any]) -> str:
    other = (level.get("cpu") or {}).get("other_cpu_s")
    return f"; others {other}" if other is not None else ""


def kafka_raft_section(kr: dict[str, Any] | None) -> list[str]:
    """Section 7: kraft-quorum beside Apache Kafka's TestRaftServer (`bench.measure.kafka_raft`);
    nothing when the run has no such part."""
    if not kr:
        return []
    L = ["", "### 7. Apache Kafka's own raft benchmark (`kafka.tools.TestRaftServer`) beside "
         "kraft-quorum", ""]
    if kr.get("error"):
        return [*L, f"Not measured: {kr['error']}"]
    p = kr.get("params") or {}
    systems = kr.get("systems") or {}
    kinfo = (systems.get("kafka-raft") or {}).get("info") or {}
    L += [f"Mode **{kr.get('mode')}**, {kr.get('date_utc')}, {kr.get('took_s')} s "
          f"(`python -m bench kafka-raft`, or this scenario of `python -m bench compare`). "
          f"{kinfo.get('version', 'TestRaftServer')}, 3 voters on 127.0.0.1 (static "
          f"`controller.quorum.voters`, Kafka's defaults: append linger 25 ms, election timeout "
          f"1 s, fetch timeout 2 s), JVM `{kinfo.get('config', {}).get('jvm', '?')}`; kraft-quorum "
          "3 voters with the settings above, its binary client in a separate process.", "",
          f"- Same records: {kr.get('record_size')} bytes each (a PUT of a 100-byte value in "
          "kraft-quorum's log; TestRaftServer's `--record-size`). Same load: open loop at a "
          "fixed offered rate (TestRaftServer's `--throughput`, its own load shape; kraft-quorum's "
          "driver sends the writes due each millisecond whatever the answers), so both carry "
          "the same offered load and a rate one cannot carry shows as committed < offered. "
          "Commit = a majority of voters with the record written and fsynced (TestRaftServer: "
          "its leader flushes after each batch it writes, a voter after each Fetch answer).",
          f"- Per rate: kraft-quorum {p.get('kraft_warmup_s')} s warm-up, TestRaftServer "
          f"{p.get('warmup_s')} s after its leader's first commit (a new JVM, one cluster per "
          f"rate), then a window of {p.get('duration_s')} s. "
          + (f"The last rate, {_f(p.get('capacity_rate'))}/s, is there for their throughput, "
             "meant to be more than either carries, with a short window (TestRaftServer "
             f"{p.get('capacity_warmup_s')} s warm-up, both {p.get('capacity_duration_s')} s): "
             "TestRaftServer bounds neither its unanswered appends nor their batches, so its "
             "leader's heap fills at a rate it cannot carry; kraft-quorum's driver drops what "
             "is due past 20,000 unanswered writes. " if p.get("capacity_rate") else "")
          + "Committed/s: kraft-quorum the answers "
          "in the window; TestRaftServer its leader's high watermark at both ends of the window "
          "(a Fetch of an observer), its own printed figure beside it.",
          "- Latency: kraft-quorum from its client's send to the answer (a commit plus one "
          "loopback round trip and the state machine's apply), ns clock; TestRaftServer from "
          "`scheduleAppend` to the committed batch in its own process, in whole ms, as it prints "
          "it (p75, p99, p99.9; it computes no p50, so its p50 is at most its p75). Its line covers "
          "its last two 30-s metric samples: `span` is the part of its run (s after the first "
          "commit) the percentiles cover.", "",
          "| offered records/s | kraft-quorum committed/s | kraft-quorum p50 / p75 / p99 / p99.9 ms "
          "| kraft-quorum CPU-s (others: processes outside the benchmark) | TestRaftServer "
          "committed/s (printed) | TestRaftServer p75 / p99 / p99.9 ms (span s) | TestRaftServer "
          "CPU-s |",
          "| ---: | ---: | ---: | --- | ---: | ---: | --- |"]
    kl = (systems.get("kraft-quorum") or {}).get("levels") or {}
    fl = (systems.get("kafka-raft") or {}).get("levels") or {}
    rates = [*(p.get("rates") or []), *([p["capacity_rate"]] if p.get("capacity_rate") else [])]
    for rate in rates or sorted({int(r) for r in (*kl, *fl)}):
        k, f = kl.get(str(rate)) or {}, fl.get(str(rate)) or {}
        kind = " (capacity)" if "capacity" in (k.get("kind"), f.get("kind")) else ""
        held = f" ({_f(k.get('held_back'))} not sent: over 20,000 outstanding)" if k.get("held_back") else ""
        pr = f.get("printed") or {}
        span = pr.get("histogram_span_s")
        L.append(f"| {_f(rate)}{kind} | {_f(k.get('committed_per_s'))}{held}{k.get('error', '')} "
                 f"| {_lat(k.get('latency'), ('p50_ms', 'p75_ms', 'p99_ms', 'p999_ms')) if k.get('latency') else '—'} "
                 f"| {_cpu(k)}{_other(k)} | {_f(f.get('committed_per_s'))} ({_f(pr.get('records_per_s'))})"
                 f"{' ' + f['error'] if f.get('error') else ''} "
                 f"| {_lat(f.get('latency'), ('p75_ms', 'p99_ms', 'p999_ms')) if f.get('latency') else '—'}"
                 f"{f' ({span[0]}-{span[1]})' if span else ''} | {_cpu(f)}{_other(f)} |")
    summ = kr.get("summary") or {}
    L += ["", "| system | throughput (most committed/s at any rate) | CPU µs per committed record "
          "there (per process) | highest rate carried (committed >= 99 % of offered, < 0.5 s "
          "behind at the end) | p99 at the first rate | failover after kill -9 of the leader: "
          "trials, p50 / p99 / max ms |", "| --- | ---: | --- | ---: | ---: | --- |"]
    for name, sm in summ.items():
        fo = sm.get("failover") or {}
        lat = sm.get("latency") or {}
        per = dict(sm.get("cpu_us_per_record") or {})
        every = per.pop("all", None)
        each = " / ".join(f"{k} {v}" for k, v in per.items())
        floor = ", all it was offered: at least this" if sm.get("at_rate") is not None \
            and sm.get("at_rate") == sm.get("highest_rate_carried") else ""
        L.append(f"| {name} | {_f(sm.get('throughput_per_s'))} (offered {_f(sm.get('at_rate'))}{floor}) "
                 f"| {_f(every, 1)}{f' ({each})' if each else ''} "
                 f"| {_f(sm.get('highest_rate_carried'))} | {_f(lat.get('p99_ms'))} ms at "
                 f"{_f(sm.get('latency_rate'))}/s | {fo.get('n', 0)}: {_f(fo.get('p50_ms'), 0)} / "
                 f"{_f(fo.get('p99_ms'), 0)} / {_f(fo.get('max_ms'), 0)} |")
    L += ["", "- Failover: TestRaftServer from the kill to its new leader's own log line of its "
          "first commit in the new epoch (ms timestamps); kraft-quorum the first acknowledgement of "
          "a write sent after the kill (16 outstanding, as in section 3), which comes after the "
          "commit. Each system with its defaults: both have a 2 s fetch timeout.",
          "- Machine load: every window's CPU seconds per process and the CPU used by other "
          "processes (`other_cpu_s`) are in docs/benchmarks.json (`compare.kafka_raft`)."]
    worst = max((lv.get("cpu") or {}).get("other_cpu_s", 0) for side in systems.values()
                for lv in (side.get("levels") or {}).values() if isinstance(lv, dict)) \
        if systems else 0
    L.append(f"  Largest CPU used by processes outside the benchmark in one window: {worst} CPU-s.")
    return L


def _caught(sn: dict[str, Any], res: dict[str, Any]) -> str:
    if sn.get("time_to_caught_up_s") is not None:
        return f"{_f(sn.get('time_to_caught_up_s'), 2)} s"
    if sn.get("caught_up") is False:
        limit = (res.get("params") or {}).get("catchup_timeout_s")
        return f"not ready within {_f(limit, 0)} s"
    return "—"


def write_markdown(res: dict[str, Any], md_path: Path) -> None:
    """Insert or replace the comparison section in docs/benchmarks.md."""
    block = render_markdown(res)
    text = md_path.read_text() if md_path.exists() else "# Benchmarks\n\n"
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    else:
        gen = "<!-- BEGIN GENERATED: make bench -->"
        if gen in text:
            i = text.index(gen)
            text = text[:i] + block + "\n\n" + text[i:]
        else:
            text = text.rstrip("\n") + "\n\n" + block + "\n"
    md_path.write_text(text)
