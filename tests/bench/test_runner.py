"""`python -m bench` (bench/__main__.py): a benchmark that fails is reported and keeps its
previous figures, and the others are still run and written."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

import bench.__main__ as runner


def _module(name: str, result: dict[str, object] | None) -> types.ModuleType:
    mod = types.ModuleType(f"bench.bench_{name}")

    def run() -> dict[str, object]:
        if result is None:
            raise RuntimeError("the export it needs is gone")
        return result

    mod.run = run  # type: ignore[attr-defined]
    return mod


def test_a_failing_benchmark_keeps_its_previous_figures_and_the_rest_are_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "bench.bench_zzok", _module("zzok", {"rate": 2.0}))
    monkeypatch.setitem(sys.modules, "bench.bench_zzbad", _module("zzbad", None))
    monkeypatch.setattr(runner, "discover", lambda: ["zzbad", "zzok"])
    monkeypatch.setattr(runner, "DOCS", tmp_path)
    monkeypatch.setattr(runner, "ROOT", tmp_path)
    (tmp_path / "benchmarks.json").write_text(json.dumps(
        {"machine": {}, "results": {"zzbad": {"rate": 1.0}, "zzok": {"rate": 1.0}}}))
    assert runner.main([]) == 1
    results = json.loads((tmp_path / "benchmarks.json").read_text())["results"]
    assert results == {"zzbad": {"rate": 1.0}, "zzok": {"rate": 2.0}}
    assert "| rate | 2.000 |" in (tmp_path / "benchmarks.md").read_text()
