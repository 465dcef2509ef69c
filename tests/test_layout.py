"""The repository layout keeps its promises: operator/ never shadows the standard library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_operator_folder_has_no_init_so_it_cannot_shadow_stdlib() -> None:
    assert not (ROOT / "operator" / "__init__.py").exists()


def test_python_started_at_repo_root_gets_stdlib_operator() -> None:
    # `python -m` puts the working directory first on sys.path: the stdlib must still win.
    code = "import operator, collections; print(operator.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert Path(out).name == "operator.py"
    assert Path(out).parent != ROOT


def test_operator_package_is_installed_as_kraft_operator() -> None:
    import kraft_operator.main

    assert Path(kraft_operator.main.__file__).parent == ROOT / "operator"


def test_sandbox_is_a_program_of_its_own_installed_as_kraft_sandbox() -> None:
    import kraft_sandbox.emulator

    assert Path(kraft_sandbox.emulator.__file__).parent == ROOT / "sandbox"
    assert not (ROOT / "operator" / "sandbox").exists()


MAX_PYTHON_LINES = 1200
MAX_C_LINES = 1500


def _tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.split()
    return [ROOT / name for name in out]


def test_no_module_is_over_1200_lines_and_no_c_file_over_1500() -> None:
    """A file past these is several concerns in one: split it by what each part does."""
    python = _tracked("*.py")
    c = _tracked("*.c", "*.h")
    assert python and c, "no tracked sources found: is this a git checkout?"
    too_long = [
        f"{path.relative_to(ROOT)}: {lines} lines"
        for paths, limit in ((python, MAX_PYTHON_LINES), (c, MAX_C_LINES))
        for path in paths
        if (lines := len(path.read_text().splitlines())) > limit
    ]
    assert too_long == [], too_long
