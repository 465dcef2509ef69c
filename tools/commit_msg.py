"""Check commit messages against git's convention: a subject of at most 72 characters saying
what changed, then a blank line, then the why.

    python tools/commit_msg.py FILE              (git's commit-msg hook: .githooks/commit-msg)
    python tools/commit_msg.py --range A..B      (every commit in a range, e.g. before a push)

Exits 1 and names each message that breaks the convention. `make venv` points the checkout's
hooks at .githooks (git config core.hooksPath), so a commit made here is checked as it is made.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

MAX_SUBJECT = 72


def problems(message: str) -> list[str]:
    """What is wrong with one message (comment lines, as git strips them, ignored)."""
    lines = [line for line in message.splitlines() if not line.startswith("#")]
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines or not lines[0].strip():
        return ["the subject line is empty"]
    found = []
    subject = lines[0]
    if len(subject) > MAX_SUBJECT:
        found.append(f"the subject has {len(subject)} characters (at most {MAX_SUBJECT})")
    if subject.rstrip().endswith("."):
        found.append("the subject ends with a full stop")
    if len(lines) > 1 and lines[1].strip():
        found.append("the second line is not blank (a blank line separates subject and body)")
    return found


def _range(spec: str) -> list[tuple[str, str]]:
    out = subprocess.run(["git", "log", "--format=%H%x00%B%x00", spec], capture_output=True,
                         text=True, check=True).stdout
    parts = out.split("\x00")
    return [(parts[i].strip(), parts[i + 1]) for i in range(0, len(parts) - 1, 2)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", nargs="?", help="a commit message file (the hook's argument)")
    parser.add_argument("--range", help="a revision range, e.g. origin/main..HEAD")
    args = parser.parse_args(argv)
    if (args.file is None) == (args.range is None):
        parser.error("give a message FILE or --range, one of them")
    if args.file is not None:
        with open(args.file, encoding="utf-8") as f:
            messages = [("this commit", f.read())]
    else:
        messages = [(sha[:12], body) for sha, body in _range(args.range)]
    bad = 0
    for name, message in messages:
        for problem in problems(message):
            bad += 1
            print(f"{name}: {problem}: {message.splitlines()[0][:80] if message else ''}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
