"""tools/pick_python.py: the interpreter `make` builds .venv/ with (the fastest usable CPython).

The choice among builds of different speeds is checked with small executables that answer the
probe the way interpreters of known speed would; the probe itself runs for real on this
interpreter.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("pick_python", ROOT / "tools" / "pick_python.py")
assert _spec is not None and _spec.loader is not None
pick_python = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pick_python)


def fake(tmp_path: Path, name: str, seconds: float, *, version: str = "3.11.9", ok: bool = True,
         missing: tuple[str, ...] = ()) -> str:
    """An executable that answers the probe as an interpreter taking `seconds` would."""
    path = tmp_path / name
    answer = json.dumps({"executable": str(path), "version": version, "ok": ok,
                         "missing": list(missing), "seconds": seconds})
    path.write_text(f"#!/bin/sh\necho '{answer}'\n")
    path.chmod(0o755)
    return str(path)


def test_the_probe_runs_on_a_real_interpreter_and_names_it() -> None:
    assert pick_python.pick([sys.executable]) == sys.executable
    got, why = pick_python.probe(sys.executable)
    assert why == "" and got is not None
    assert got.seconds > 0 and got.version == ".".join(map(str, sys.version_info[:3]))


def test_the_fastest_build_wins(tmp_path: Path) -> None:
    slow = fake(tmp_path, "python-plain", 0.0107)
    fast = fake(tmp_path, "python-pgo-lto", 0.0068)
    assert pick_python.pick([slow, fast]) == fast
    assert pick_python.pick([fast, slow]) == fast


def test_a_difference_within_the_noise_keeps_the_first(tmp_path: Path) -> None:
    first = fake(tmp_path, "python-a", 0.0100)
    second = fake(tmp_path, "python-b", 0.0098)
    assert pick_python.pick([first, second]) == first


def test_unusable_candidates_are_skipped_and_named_when_none_is_left(tmp_path: Path) -> None:
    old = fake(tmp_path, "python3.10", 0.001, version="3.10.13", ok=False)
    no_venv = fake(tmp_path, "python-noenv", 0.001, missing=("ensurepip",))
    usable = fake(tmp_path, "python-ok", 0.02)
    missing = str(tmp_path / "nowhere")
    assert pick_python.pick([old, no_venv, missing, usable]) == usable
    with pytest.raises(SystemExit) as exc:
        pick_python.pick([old, no_venv, missing])
    text = str(exc.value)
    assert "3.10.13, not CPython >= 3.11" in text
    assert "lacks ensurepip" in text
    assert f"{missing}: does not run" in text


def test_the_command_line_prints_the_choice_and_reports_on_stderr(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slow = fake(tmp_path, "python-plain", 0.0107)
    fast = fake(tmp_path, "python-pgo-lto", 0.0068)
    pick_python.main(["--verbose", slow, fast])
    out, err = capsys.readouterr()
    assert out.strip() == fast
    assert "workload 10.7 ms" in err and "workload 6.8 ms" in err and f"chose {fast}" in err


def test_the_default_candidates_include_python3_on_path_and_in_usr_bin(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`python3` on PATH comes first (the choice the Makefile made before), then the versioned
    names; /usr/bin is searched whatever PATH says."""
    here = Path(fake(tmp_path, "python3", 0.01))
    Path(fake(tmp_path, "python3.12", 0.01))
    monkeypatch.setenv("PATH", str(tmp_path))
    found = pick_python.default_candidates()
    assert found[:2] == [str(here), str(tmp_path / "python3.12")]
    usr = [p for p in found if p.startswith("/usr/bin/")]
    assert usr == [p for p in (f"/usr/bin/{n}" for n in pick_python.NAMES) if os.access(p, os.X_OK)]
