"""List the import cycles of the project's Python packages and the call cycles of its C files.

    .venv/bin/python tools/cycles.py            (or `make cycles`)
    .venv/bin/python tools/cycles.py --allow kraft.raft

A cycle is a strongly connected component of more than one node:
- Python: modules of `kraft`, `kraft_operator`, `kraft_pipeline`, `kraft_sandbox` (those
  installed) and `bench`, joined by every import, those under `if TYPE_CHECKING:` and those
  inside functions included (the graph is grimp's, the library import-linter runs on). A
  package's `__init__` counts as a module of its own.
- C: the files of each extension's sources (setup.py's `LANE`), joined when one file calls a
  function defined in another. Each file is compiled on its own (`cc -c`, the extension's
  flags) and its defined and undefined symbols read with `nm`, so what counts is what the
  linker joins, not what a regular expression guesses.

It prints each cycle, its modules and one import (or call) that closes it, and exits 1 when a
cycle outside `--allow` is found, 0 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kraft", "kraft_operator", "kraft_pipeline", "kraft_sandbox", "bench")
C_FOLDERS = ("kraft/lane/csrc", "kraft/statemachine/csrc")


def strongly_connected(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The components of more than one node (or a node that reaches itself), each sorted
    (Tarjan's algorithm, iterative so deep graphs do not hit the recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterable[str]]] = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    found.append(sorted(component))
    return sorted(found)


def python_graph() -> tuple[dict[str, set[str]], dict[tuple[str, str], str]]:
    """Every module of the installed packages and what it imports of them, with the line of
    one import for each edge."""
    import grimp  # import-linter's graph builder (a dev dependency)

    present = [p for p in PACKAGES if importlib.util.find_spec(p) is not None]
    built = grimp.build_graph(*present, include_external_packages=False,
                              exclude_type_checking_imports=False, cache_dir=None)
    compiled = _extension_modules(present)
    graph: dict[str, set[str]] = {}
    where: dict[tuple[str, str], str] = {}
    for module in built.modules:
        graph[module] = set()
        for other in built.find_modules_directly_imported_by(module):
            details = built.get_import_details(importer=module, imported=other)
            # grimp sees no module in a compiled extension and names its package instead: an
            # import of the extension is an edge to the extension, a leaf, not to its package
            target = other
            for ext in compiled.get(other, ()):
                if details and all(f"{other}.{ext}" in d["line_contents"]
                                   or f"import {ext}" in d["line_contents"] for d in details):
                    target = f"{other}.{ext}"
            graph[module].add(target)
            graph.setdefault(target, set())
            if details:
                first = details[0]
                where[(module, target)] = f"{module}:{first['line_number']}: {first['line_contents']}"
    return graph, where


def _extension_modules(packages: Iterable[str]) -> dict[str, set[str]]:
    """The compiled extension modules of each package (a package's name to the names of its
    extensions), found as files with an extension suffix beside the package's modules."""
    found: dict[str, set[str]] = {}
    for name in packages:
        spec = importlib.util.find_spec(name)
        for location in (spec.submodule_search_locations or []) if spec else []:
            for path in Path(location).rglob("*"):
                for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                    if path.name.endswith(suffix):
                        package = ".".join((name, *path.relative_to(location).parent.parts))
                        found.setdefault(package, set()).add(path.name[: -len(suffix)])
    return found


def _compile_flags(root: Path) -> list[str]:
    paths = sysconfig.get_paths()
    return ["-std=c11", "-pthread", f"-I{paths['include']}", f"-I{root / 'kraft/lane/csrc'}"]


def _symbols(obj: Path) -> tuple[set[str], set[str]]:
    out = subprocess.run(["nm", "--defined-only", "-g", str(obj)], capture_output=True,
                         text=True, check=True).stdout
    defined = {line.split()[-1] for line in out.splitlines() if line.strip()}
    out = subprocess.run(["nm", "--undefined-only", str(obj)], capture_output=True,
                         text=True, check=True).stdout
    undefined = {line.split()[-1] for line in out.splitlines() if line.strip()}
    return defined, undefined


def c_graph(root: Path = ROOT) -> tuple[dict[str, set[str]], dict[tuple[str, str], str]]:
    """The C files of the extension, each joined to the files whose functions it calls."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None or shutil.which("nm") is None:
        raise SystemExit("cycles: the C check needs a C compiler (cc) and nm on PATH")
    sources = sorted(p for folder in C_FOLDERS for p in (root / folder).glob("*.c"))
    defined: dict[str, set[str]] = {}
    wanted: dict[str, set[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for source in sources:
            name = str(source.relative_to(root))
            obj = Path(tmp) / (source.stem + ".o")
            done = subprocess.run([cc, "-c", *_compile_flags(root), "-o", str(obj), str(source)],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"cycles: {name} does not compile:\n{done.stderr}")
            defined[name], wanted[name] = _symbols(obj)
    owner = {symbol: name for name, symbols in defined.items() for symbol in symbols}
    graph: dict[str, set[str]] = {name: set() for name in defined}
    where: dict[tuple[str, str], str] = {}
    for name, symbols in wanted.items():
        for symbol in sorted(symbols):
            other = owner.get(symbol)
            if other is not None and other != name:
                graph[name].add(other)
                where.setdefault((name, other), f"{name} calls {symbol} ({other})")
    return graph, where


def _closing_edge(component: list[str], graph: Mapping[str, set[str]],
                  where: Mapping[tuple[str, str], str]) -> list[str]:
    members = set(component)
    return [where.get((a, b), f"{a} -> {b}") for a in component
            for b in sorted(graph.get(a, set()) & members)]


def _allowed(component: list[str], allow: list[str]) -> bool:
    return any(all(m == a or m.startswith(a + ".") for m in component) for a in allow)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--allow", action="append", default=[], metavar="PACKAGE",
                        help="a package whose cycles among its own modules are known "
                             "(listed, but not a failure); may be given more than once")
    parser.add_argument("--python-only", action="store_true", help="skip the C files")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="the checkout whose C files and bench/ to read (default: this one); "
                             "the Python packages are those the running interpreter imports")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.root))  # `bench` is a folder of the checkout, not installed
    failed = 0
    checks = [("Python imports", python_graph)]
    if not args.python_only:
        checks.append(("C calls", lambda: c_graph(args.root)))
    for title, build in checks:
        graph, where = build()
        cycles = strongly_connected(graph)
        print(f"{title}: {len(graph)} nodes, {sum(len(v) for v in graph.values())} edges, "
              f"{len(cycles)} cycle(s)")
        for component in cycles:
            known = _allowed(component, args.allow)
            failed += not known
            print(f"  cycle of {len(component)}{' (allowed)' if known else ''}: "
                  + ", ".join(component))
            for line in _closing_edge(component, graph, where)[:12]:
                print(f"      {line}")
    if failed:
        print(f"{failed} cycle(s) outside --allow")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
