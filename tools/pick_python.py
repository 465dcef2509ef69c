"""Choose the interpreter that `make` builds `.venv/` with: the fastest CPython >= 3.11 here.

CPython builds differ in speed by a quarter or more on the same machine. A build made with
profile-guided and link-time optimisation (distribution packages, the official container
images) runs the node's Python 10-30 % faster than a plain `./configure && make` build (pyenv's
default). A sequential commit does a few hundred microseconds of Python on two nodes, so the
build shows in its latency (docs/journal/perf-31-interpreter-build.md). The configuration variables do
not say reliably whether a build was optimised (Debian's does not record it), so each
candidate runs a short fixed workload, and the fastest one wins.

    python3 tools/pick_python.py [--verbose] [CANDIDATE ...]

Prints the chosen interpreter's path on stdout. Without candidates, it tries `python3` and
`python3.11` ... `python3.14` on PATH, and the same names in /usr/bin and /usr/local/bin.
A candidate is usable when it runs, is CPython >= 3.11, and has `venv` and `ensurepip` (what
`python -m venv` needs). With `--verbose`, it says on stderr what each candidate measured, and
why any was skipped. When no candidate is usable, it exits 1 and names each one with its reason.
When the fastest is within 3 % of the first usable candidate, the first is kept, so the choice
does not flip on noise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from typing import NamedTuple

NAMES = ["python3"] + [f"python3.{minor}" for minor in range(11, 15)]
DIRS = ["/usr/bin", "/usr/local/bin"]
MARGIN = 0.03
PROBE_TIMEOUT_S = 60.0

# Runs inside each candidate: identity, then the best of 7 timings of a workload of the kinds
# of work the node does (attribute access on slotted objects, small dicts, bytes and ints,
# calls).
PROBE = r"""
import json, platform, sys, time
ok = sys.version_info >= (3, 11) and platform.python_implementation() == "CPython"
missing = []
for mod in ("venv", "ensurepip"):
    try:
        __import__(mod)
    except Exception:
        missing.append(mod)
class Msg:
    __slots__ = ("offset", "epoch", "payload")
    def __init__(self, offset, epoch, payload):
        self.offset, self.epoch, self.payload = offset, epoch, payload
def work(n):
    seen = {}
    total = 0
    for i in range(n):
        m = Msg(i, i >> 4, i.to_bytes(8, "big"))
        seen[m.offset & 255] = m
        total += m.epoch + len(m.payload) + int.from_bytes(m.payload[4:], "big")
    return total + len(seen)
best = float("inf")
if ok and not missing:
    work(2000)
    for _ in range(7):
        t = time.perf_counter()
        work(20000)
        best = min(best, time.perf_counter() - t)
print(json.dumps({"executable": sys.executable, "version": platform.python_version(),
                  "ok": ok, "missing": missing, "seconds": best}))
"""


class Measured(NamedTuple):
    executable: str
    version: str
    seconds: float


def default_candidates() -> list[str]:
    found = []
    for name in NAMES:
        path = shutil.which(name)
        if path:
            found.append(path)
    for d in DIRS:
        for name in NAMES:
            path = os.path.join(d, name)
            if os.access(path, os.X_OK):
                found.append(path)
    return found


def probe(candidate: str) -> tuple[Measured | None, str]:
    """(measurement, "") for a usable candidate, else (None, why not)."""
    try:
        out = subprocess.run([candidate, "-c", PROBE], capture_output=True, text=True,
                             timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"does not run ({exc})"
    if out.returncode != 0:
        first = next((line for line in out.stderr.splitlines() if line.strip()), "")
        return None, f"exited {out.returncode}: {first.strip()[:200]}"
    try:
        got = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return None, f"printed no measurement: {out.stdout.strip()[-200:]!r}"
    if not got.get("ok"):
        return None, f"is Python {got.get('version')}, not CPython >= 3.11"
    if got.get("missing"):
        return None, f"lacks {', '.join(got['missing'])} (needed by python -m venv)"
    return Measured(str(got["executable"]), str(got["version"]), float(got["seconds"])), ""


def pick(candidates: list[str], say: bool = False) -> str:
    """The chosen interpreter's path; SystemExit(1) naming every candidate when none is usable."""
    def tell(text: str) -> None:
        if say:
            print(text, file=sys.stderr)

    usable: list[Measured] = []
    refused: list[str] = []
    seen: set[str] = set()
    for cand in candidates:
        got, why = probe(cand)
        if got is None:
            refused.append(f"{cand}: {why}")
            tell(f"pick_python: skipped {cand}: {why}")
            continue
        exe = os.path.realpath(got.executable)
        if exe in seen:
            continue
        seen.add(exe)
        usable.append(got)
        tell(f"pick_python: {got.executable} (Python {got.version}): workload "
             f"{got.seconds * 1000:.1f} ms")
    if not usable:
        raise SystemExit("pick_python: no usable interpreter (CPython >= 3.11 with venv and "
                         "ensurepip) among: " + ("; ".join(refused) or "no candidates"))
    first = usable[0]
    best = min(usable, key=lambda g: g.seconds)
    if best.seconds > first.seconds * (1 - MARGIN):
        best = first
    tell(f"pick_python: chose {best.executable}")
    return best.executable


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="pick_python.py",
        description="Print the fastest CPython >= 3.11 interpreter with venv and ensurepip.")
    parser.add_argument("candidates", nargs="*", help="interpreters to try (default: PATH, "
                        "/usr/bin, /usr/local/bin)")
    parser.add_argument("--verbose", action="store_true",
                        help="say on stderr what each candidate measured")
    args = parser.parse_args(argv)
    print(pick(args.candidates or default_candidates(), say=args.verbose))


if __name__ == "__main__":
    main()
