"""report.html with PNG charts (matplotlib, Agg backend) from the audit's summary and tables."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd


def _save(fig: Any, out: Path, name: str) -> str:
    path = out / "charts" / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return f"charts/{name}.png"


def charts(out: Path, summary: dict[str, Any], tables: dict[str, pd.DataFrame]) -> dict[str, str]:
    """Draw every chart that has data; returns {chart name: relative PNG path}."""
    (out / "charts").mkdir(parents=True, exist_ok=True)
    made: dict[str, str] = {}

    reps = summary["replicas"]
    if reps:
        fig, ax = plt.subplots(figsize=(10, 0.6 * len(reps) + 1.4))
        names = sorted(reps)
        for i, name in enumerate(names):
            r = reps[name]
            start, end = r["log_start_offset"] or 0, r["log_end_offset"] or 0
            hw = r["high_watermark_used"]
            ax.barh(i, end - start, left=start, color="#9ecae1", label="log" if i == 0 else None)
            if hw is not None:
                ax.plot([hw, hw], [i - 0.4, i + 0.4], color="black",
                        label="high watermark used" if i == 0 else None)
            if r["first_divergence"]:
                ax.plot(r["first_divergence"]["offset"], i, "rx", markersize=10,
                        label="committed divergence")
            if r["first_uncommitted_divergence"]:
                ax.plot(r["first_uncommitted_divergence"]["offset"], i, "o", color="orange",
                        label="uncommitted divergence")
            for c in r["corrupt_batches"]:
                if c["base_offset"] is not None and c["source"] == "log":
                    ax.plot(c["base_offset"], i, "v", color="purple", label="corrupt batch")
        ax.set_yticks(range(len(names)), names)
        ax.set_xlabel("offset")
        ax.set_title("Replica logs")
        handles, labels = ax.get_legend_handles_labels()
        uniq = dict(zip(labels, handles))
        ax.legend(uniq.values(), uniq.keys(), fontsize=8, loc="upper left",
                  bbox_to_anchor=(1.01, 1.0))
        made["replicas"] = _save(fig, out, "replicas")

    tl = tables.get("workload_timeline")
    if tl is not None and len(tl):
        secs = float(tl["bucket_ms"].iloc[0]) / 1000.0
        fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 5), sharex=True)
        a1.plot(tl["bucket_start"], tl["records"] / secs)
        a1.set_ylabel("records/s")
        a2.plot(tl["bucket_start"], tl["bytes"] / secs / 1024, color="#31a354")
        a2.set_ylabel("KiB/s")
        a1.set_title(f"Committed workload ({secs:g}s buckets, reference replica)")
        made["workload"] = _save(fig, out, "workload")

    ep = tables.get("leader_epochs")
    if ep is not None and len(ep):
        fig, ax = plt.subplots(figsize=(9, 3.5))
        ax.step(ep["start_offset"], ep["epoch"], where="post")
        for r in ep.itertuples(index=False):
            if r.leader_id is not None and not pd.isna(r.leader_id):
                ax.annotate(f"L{int(r.leader_id)}", (r.start_offset, r.epoch), fontsize=7)
        ax.set_xlabel("offset")
        ax.set_ylabel("leader epoch")
        ax.set_title("Leader epochs over the log")
        made["epochs"] = _save(fig, out, "epochs")

    eh = tables.get("elections_per_hour")
    if eh is not None and len(eh):
        fig, ax = plt.subplots(figsize=(9, 3))
        ax.bar(range(len(eh)), eh["elections"])
        step = max(1, len(eh) // 12)
        ax.set_xticks(range(0, len(eh), step), [h[:13] for h in eh["hour"][::step]],
                      rotation=30, fontsize=7)
        ax.set_ylabel("leader changes")
        ax.set_title("Elections per hour (UTC)")
        made["elections"] = _save(fig, out, "elections")

    bs = tables.get("batch_sizes")
    if bs is not None and len(bs):
        fig, ax = plt.subplots(figsize=(9, 3))
        labels = [f"<{int(t) // 1024}K" if t and t >= 1024 else f"<{t}" for t in bs["bytes_to"]]
        ax.bar(range(len(bs)), bs["batches"])
        ax.set_xticks(range(len(bs)), labels, fontsize=8)
        ax.set_xlabel("batch size (bytes)")
        ax.set_ylabel("batches")
        ax.set_title("Data batch sizes")
        made["batch_sizes"] = _save(fig, out, "batch_sizes")

    tk = tables.get("top_keys")
    if tk is not None and len(tk):
        fig, ax = plt.subplots(figsize=(9, 0.3 * len(tk) + 1.2))
        ax.barh(range(len(tk)), tk["writes"])
        ax.set_yticks(range(len(tk)), [str(k)[:40] for k in tk["key"]], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("writes")
        ax.set_title("Most written keys")
        made["top_keys"] = _save(fig, out, "top_keys")
    return made


def _table(df: pd.DataFrame | None, limit: int = 200) -> str:
    if df is None or df.empty:
        return "<p><em>none</em></p>"
    shown = df.head(limit)
    note = f"<p>first {limit} of {len(df)} rows</p>" if len(df) > limit else ""
    return shown.to_html(index=False, border=0, classes="t", escape=True) + note


def write_report(out: Path, summary: dict[str, Any], tables: dict[str, pd.DataFrame]) -> Path:
    """Write OUT/report.html (and OUT/charts/*.png); returns the HTML path."""
    made = charts(out, summary, tables)
    hw = summary["high_watermark"]
    rows = []
    for name in sorted(summary["replicas"]):
        r = summary["replicas"][name]
        fd = r["first_divergence"]
        ud = r["first_uncommitted_divergence"]
        rows.append({
            "replica": name, "voter": r["is_voter"], "records read": r["records_read"],
            "log": f"[{r['log_start_offset']}, {r['log_end_offset']})",
            "HW used": r["high_watermark_used"],
            "committed divergence": (
                f"offset {fd['offset']} epoch {fd['epoch']} vs {fd['other_replica']} "
                f"epoch {fd['other_epoch']}" if fd else ""
            ),
            "uncommitted divergence": (
                f"offset {ud['offset']} epoch {ud['epoch']} vs {ud['other_replica']}"
                if ud else ""
            ),
            "corrupt batches": "; ".join(
                f"{c['kind']} at {Path(c['file']).name}:{c['position']}"
                for c in r["corrupt_batches"]
            ),
        })
    verdict = "CONSISTENT" if summary["consistent"] else "INCONSISTENT"
    color = "#2ca25f" if summary["consistent"] else "#de2d26"
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>kraft audit</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:1100px}"
        "table.t{border-collapse:collapse;font-size:13px}"
        "table.t td,table.t th{border:1px solid #ccc;padding:3px 6px}"
        "img{max-width:100%}</style></head><body>",
        "<h1>kraft audit</h1>",
        f"<p style='font-size:20px;color:{color}'><b>{verdict}</b> &mdash; "
        f"high watermark {hw['value']} ({html.escape(str(hw['rule']))}); voters "
        f"{hw['voters']} ({html.escape(str(hw['voters_from']))}), majority {hw['majority']}; "
        f"reference replica {html.escape(str(summary['reference_replica']))}</p>",
        f"<p>Generated {summary['generated_at']} from {len(summary['inputs'])} input path(s); "
        f"Spark {summary['spark']['version']} on {html.escape(summary['spark']['master'])}.</p>",
        "<h2>Replicas</h2>", _table(pd.DataFrame(rows)),
    ]
    if "replicas" in made:
        parts.append(f"<img src='{made['replicas']}' alt='replica logs'>")
    parts += ["<h2>Findings</h2>",
              _table(pd.DataFrame(summary["findings"])) if summary["findings"]
              else "<p>No snapshot findings.</p>"]
    parts += ["<h2>History</h2>"]
    for key in ("epochs", "elections"):
        if key in made:
            parts.append(f"<img src='{made[key]}' alt='{key}'>")
    parts += ["<h3>Leader epochs</h3>", _table(tables.get("leader_epochs")),
              "<h3>Voter sets</h3>", _table(tables.get("voter_changes")),
              "<h3>Gaps</h3>",
              f"<pre>{html.escape(json.dumps(summary['history']['gaps'], indent=2))}</pre>"]
    parts += ["<h2>Workload</h2>"]
    for key in ("workload", "batch_sizes", "top_keys"):
        if key in made:
            parts.append(f"<img src='{made[key]}' alt='{key}'>")
    parts += ["<h3>Key space</h3>",
              f"<pre>{html.escape(json.dumps(summary['workload'], indent=2, default=str))}</pre>",
              "<h3>Tables</h3><ul>"]
    parts += [f"<li>{html.escape(k)}: <code>{html.escape(v)}</code></li>"
              for k, v in summary["tables"].items()]
    parts.append("</ul></body></html>")
    path = out / "report.html"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
