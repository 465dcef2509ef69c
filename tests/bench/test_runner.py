"""`python -m bench` (bench/__main__.py): a benchmark that fails is reported and keeps its
previous figures, and the others are still run and written."""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import pytest

import bench.__main__ as runner


def _module(name: str, result: dict[str, object] | None) -> types.ModuleType:
    mod = types.ModuleType(f"bench.measure.bench_{name}")

    def run() -> dict[str, object]:
        if result is None:
            raise RuntimeError("the export it needs is gone")
        return result

    mod.run = run  # type: ignore[attr-defined]
    return mod


def test_a_failing_benchmark_keeps_its_previous_figures_and_the_rest_are_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "bench.measure.bench_zzok", _module("zzok", {"rate": 2.0}))
    monkeypatch.setitem(sys.modules, "bench.measure.bench_zzbad", _module("zzbad", None))
    monkeypatch.setattr(runner, "discover", lambda: ["zzbad", "zzok"])
    monkeypatch.setattr(runner, "DOCS", tmp_path)
    monkeypatch.setattr(runner, "ROOT", tmp_path)
    (tmp_path / "benchmarks.json").write_text(json.dumps(
        {"machine": {}, "results": {"zzbad": {"rate": 1.0}, "zzok": {"rate": 1.0}}}))
    assert runner.main([]) == 1
    results = json.loads((tmp_path / "benchmarks.json").read_text())["results"]
    assert results == {"zzbad": {"rate": 1.0}, "zzok": {"rate": 2.0}}
    assert "| rate | 2.000 |" in (tmp_path / "benchmarks.md").read_text()


@pytest.mark.parametrize("argv, code, said", [
    (["--help"], 0, "usage: python -m bench"),
    (["--qiuck"], 2, "unrecognized arguments: --qiuck"),
    (["zzok", "--seconds", "3"], 2, "unrecognized arguments: --seconds 3"),
    (["zzok", "zzko"], 2, "unknown benchmark(s): zzko; have: zzok"),
])
def test_help_a_bad_flag_or_an_unknown_name_run_nothing_and_write_nothing(
        argv: list[str], code: int, said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    ran: list[str] = []
    mod = _module("zzok", {"rate": 2.0})
    mod.run = lambda: ran.append("zzok") or {"rate": 2.0}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "bench.measure.bench_zzok", mod)
    monkeypatch.setattr(runner, "discover", lambda: ["zzok"])
    monkeypatch.setattr(runner, "DOCS", tmp_path)
    monkeypatch.setattr(runner, "ROOT", tmp_path)
    monkeypatch.setenv("BENCH_QUICK", "")  # restored (unset) after the test
    monkeypatch.delenv("BENCH_QUICK")
    assert runner.main(argv) == code
    out = capsys.readouterr()
    assert said in out.out + out.err
    assert ran == [] and list(tmp_path.iterdir()) == []


def test_names_and_quick_are_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str | None] = []
    mod = _module("zzok", {"rate": 2.0})
    mod.run = lambda: seen.append(os.environ.get("BENCH_QUICK")) or {"rate": 3.0}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "bench.measure.bench_zzok", mod)
    monkeypatch.setitem(sys.modules, "bench.measure.bench_zzother", _module("zzother", None))
    monkeypatch.setattr(runner, "discover", lambda: ["zzok", "zzother"])
    monkeypatch.setattr(runner, "DOCS", tmp_path)
    monkeypatch.setattr(runner, "ROOT", tmp_path)
    monkeypatch.setenv("BENCH_QUICK", "")  # restored (unset) after the test
    monkeypatch.delenv("BENCH_QUICK")
    assert runner.main(["zzok", "--quick"]) == 0
    assert seen == ["1"]
    results = json.loads((tmp_path / "benchmarks.json").read_text())["results"]
    assert results == {"zzok": {"rate": 3.0}}
