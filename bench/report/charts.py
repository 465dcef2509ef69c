"""PNG charts of a comparison run (matplotlib, Agg backend) into docs/img/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

COLORS = {"kraft-quorum": "#1f77b4", "kraft-quorum-http": "#17becf", "etcd": "#2ca02c", "pysyncobj": "#ff7f0e",
          "pysyncobj-nobatch": "#d62728"}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def throughput_chart(res: dict[str, Any], out: Path) -> Path | None:
    """Acknowledged writes/s and p99 latency against outstanding requests, per system."""
    systems = (res.get("throughput") or {}).get("systems") or {}
    if not systems:
        return None
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    for name, s in systems.items():
        sweep = s.get("sweep") or {}
        xs = sorted(int(k) for k in sweep)
        if not xs:
            continue
        ys = [sweep[str(x)].get("ops_per_s", 0) for x in xs]
        p99 = [(sweep[str(x)].get("latency") or {}).get("p99_ms") for x in xs]
        c = COLORS.get(name)
        a1.plot(xs, ys, marker="o", label=name, color=c)
        a2.plot(xs, [v if v is not None else float("nan") for v in p99], marker="o", label=name, color=c)
    a1.set_xscale("log", base=2)
    a1.set_yscale("log")
    a1.set_xlabel("outstanding writes")
    a1.set_ylabel("acknowledged writes/s (log)")
    a1.set_title("Throughput (3 voters, 100 B values)")
    a1.axhline(50_000, ls="--", color="grey", lw=0.8)
    a1.legend(fontsize=8)
    a2.set_xscale("log", base=2)
    a2.set_yscale("log")
    a2.set_xlabel("outstanding writes")
    a2.set_ylabel("p99 latency (ms)")
    a2.set_title("Latency under that load")
    fig.tight_layout()
    path = out / "bench_throughput.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def latency_chart(res: dict[str, Any], out: Path) -> Path | None:
    """Sequential commit latency p50/p99/p99.9 per system (log scale)."""
    systems = (res.get("latency") or {}).get("systems") or {}
    rows = [(n, s.get("latency") or {}) for n, s in systems.items() if (s.get("latency") or {}).get("n")]
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.25
    for k, (q, label) in enumerate((("p50_ms", "p50"), ("p99_ms", "p99"), ("p999_ms", "p99.9"))):
        ax.bar([i + (k - 1) * width for i in range(len(rows))], [r[1].get(q, 0) for r in rows],
               width, label=label)
    ax.set_xticks(range(len(rows)), [r[0] for r in rows])
    ax.set_yscale("log")
    ax.set_ylabel("ms (log)")
    ax.set_title("Sequential commit latency (one write at a time)")
    ax.axhline(0.6, ls="--", color="grey", lw=0.8)
    ax.axhline(2.0, ls=":", color="grey", lw=0.8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "bench_latency.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def failover_chart(res: dict[str, Any], out: Path) -> Path | None:
    """Recovery time of every kill -9 trial (and partition trial) per system."""
    systems = (res.get("failover") or {}).get("systems") or {}
    series = []
    for name, s in systems.items():
        for kind in ("kill9", "partition"):
            trials = (s.get(kind) or {}).get("trials") or []
            vals = [t["recovery_s"] * 1000 for t in trials if t.get("recovery_s") is not None]
            if vals:
                series.append((f"{name}\n{kind}", vals, COLORS.get(name)))
    if not series:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, (_, vals, c) in enumerate(series):
        ax.scatter([i] * len(vals), vals, alpha=0.6, color=c)
        ax.hlines(sorted(vals)[len(vals) // 2], i - 0.3, i + 0.3, color="black")
    ax.set_xticks(range(len(series)), [s[0] for s in series], fontsize=8)
    ax.set_ylabel("ms until a write commits again")
    ax.set_title("Failover: every trial (bar = median)")
    ax.axhline(300, ls="--", color="grey", lw=0.8)
    fig.tight_layout()
    path = out / "bench_failover.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def visibility_chart(res: dict[str, Any], out: Path) -> Path | None:
    """Follower-visible commit latency p50/p99 (KIP-1166 sent / not sent, peers)."""
    k = (res.get("kip1166") or {}).get("systems") or {}
    rows = []
    for mode, s in (k.get("kraft-quorum") or {}).items():
        if isinstance(s, dict) and (s.get("latency") or {}).get("n"):
            rows.append((f"kraft\n{mode.replace('_', ' ')}", s["latency"]))
    for name, s in k.items():
        if name != "kraft-quorum" and isinstance(s, dict) and (s.get("latency") or {}).get("n"):
            rows.append((name, s["latency"]))
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 4))
    w = 0.35
    ax.bar([i - w / 2 for i in range(len(rows))], [r[1].get("p50_ms", 0) for r in rows], w, label="p50")
    ax.bar([i + w / 2 for i in range(len(rows))], [r[1].get("p99_ms", 0) for r in rows], w, label="p99")
    ax.set_xticks(range(len(rows)), [r[0] for r in rows], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("ms (log)")
    ax.set_title("Leader ack -> visible on a follower")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "bench_kip1166.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def catchup_chart(res: dict[str, Any], out: Path) -> Path | None:
    """New-voter catch-up and restart times per system (seconds)."""
    snap = (res.get("snapshot") or {}).get("systems") or {}
    rst = (res.get("restart") or {}).get("systems") or {}
    rows: list[tuple[str, float, str | None]] = []
    for name, s in snap.items():
        if isinstance(s, dict) and s.get("time_to_caught_up_s") is not None:
            rows.append((f"{name}\nnew voter caught up", s["time_to_caught_up_s"], COLORS.get(name)))
    for name, s in rst.items():
        for how in ("kill9", "sigterm"):
            r = s.get(how) if isinstance(s, dict) else None
            if isinstance(r, dict) and r.get("ready_s") is not None:
                rows.append((f"{name}\nrestart ({how})", r["ready_s"], COLORS.get(name)))
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.bar(range(len(rows)), [r[1] for r in rows], color=[r[2] for r in rows])
    ax.set_xticks(range(len(rows)), [r[0] for r in rows], fontsize=7)
    ax.set_ylabel("seconds")
    ax.set_title("Catch-up of a new voter and restart (process start -> ready)")
    ax.axhline(5.0, ls="--", color="grey", lw=0.8)
    fig.tight_layout()
    path = out / "bench_catchup_restart.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def all_charts(res: dict[str, Any], out: Path) -> list[Path]:
    """Every chart that has data; returns the written paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for fn in (throughput_chart, latency_chart, failover_chart, visibility_chart, catchup_chart):
        try:
            p = fn(res, out)
        except Exception as exc:  # a chart must never lose the run's numbers
            print(f"!! chart {fn.__name__} failed: {exc!r}", flush=True)
            p = None
        if p is not None:
            paths.append(p)
    return paths
