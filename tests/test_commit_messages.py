"""Commit messages follow git's convention (tools/commit_msg.py): the checker's rules, and the
project's history since the convention was adopted."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the first commit made under the convention came after this one
ADOPTED_AFTER = "fc54ee0"

_spec = importlib.util.spec_from_file_location("commit_msg", ROOT / "tools" / "commit_msg.py")
assert _spec is not None and _spec.loader is not None
commit_msg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(commit_msg)


def test_a_short_subject_a_blank_line_and_a_body_pass() -> None:
    assert commit_msg.problems("Move the commands into kraft/cli\n\nWhy it moved.\n") == []
    assert commit_msg.problems("Move the commands into kraft/cli\n") == []


@pytest.mark.parametrize(("message", "problem"), [
    ("x" * 73 + "\n", "73 characters"),
    ("Fix the flusher.\n", "full stop"),
    ("Fix the flusher\nbecause it broke\n", "second line is not blank"),
    ("\n\nbody only\n", "subject line is empty"),
    ("# only a comment\n", "subject line is empty"),
])
def test_each_break_of_the_convention_is_named(message: str, problem: str) -> None:
    found = commit_msg.problems(message)
    assert any(problem in p for p in found), found


def test_the_hook_refuses_a_bad_message_file(tmp_path: Path) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.write_text("Rename the KV client\n\nIt had the admin client's name.\n")
    bad.write_text("Rename the KV client because it had the admin client's name and nobody knew\n")
    hook = [sys.executable, str(ROOT / "tools" / "commit_msg.py")]
    assert subprocess.run([*hook, str(good)], capture_output=True).returncode == 0
    done = subprocess.run([*hook, str(bad)], capture_output=True, text=True)
    assert done.returncode == 1 and "characters" in done.stdout


def test_the_history_since_the_convention_follows_it() -> None:
    known = subprocess.run(["git", "cat-file", "-e", f"{ADOPTED_AFTER}^{{commit}}"], cwd=ROOT,
                           capture_output=True)
    if known.returncode != 0:
        pytest.skip(f"{ADOPTED_AFTER} is not in this clone (a shallow clone)")
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "commit_msg.py"),
                           "--range", f"{ADOPTED_AFTER}..HEAD"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
