"""docs/architecture.md names only what exists: every module, path and class it mentions; so do
docs/performance.md and docs/native-lane.md for modules and paths (their dotted settings, such
as `kraft.lane.tick.ms`, are `ServerProperties` keys).

The page is a map; a module renamed or moved without the map following would send a reader to
nothing. Checked statically (no imports), from the source tree:

- a dotted name `kraft.x.y` (or `kraft_operator.x`, `kraft_pipeline.x`, `kraft_sandbox.x`)
  resolves to a package,
  a module or the C extension's sources, then to names defined at the top of that module;
- a path `kraft/...`, `operator/...`, `pipeline/...`, `sandbox/...`, `tests/...`, `tools/...`,
  `bench/...` or `docs/...` exists;
- a backticked `Name` or `Class.member` in CamelCase is a class (with that member) defined
  somewhere in `kraft/`, `operator/`, `pipeline/` or `sandbox/`.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = {"kraft": ROOT / "kraft", "kraft_operator": ROOT / "operator",
            "kraft_pipeline": ROOT / "pipeline", "kraft_sandbox": ROOT / "sandbox"}
SOURCE_DIRS = ("kraft", "operator", "pipeline", "sandbox")

DOTTED = re.compile(r"(?<![\w./-])(kraft(?:_operator|_pipeline|_sandbox)?)((?:\.[A-Za-z_]\w*)+)")
PATH = re.compile(
    r"(?<![\w./-])((?:kraft|operator|pipeline|sandbox|tests|tools|bench|docs)/[\w./-]*)")
BACKTICKED = re.compile(r"`([^`\n]+)`")
CLASS_REF = re.compile(r"^([A-Z]\w*)(?:\.([A-Za-z_]\w*))?$")


def _top_level_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def resolve_dotted(package: str, parts: list[str]) -> str | None:
    """None when `package.parts` names a module (and top-level names in it), else what is
    missing."""
    here = PACKAGES[package]
    for i, part in enumerate(parts):
        if (here / part).is_dir():
            here = here / part
            continue
        if (here / f"{part}.py").is_file():
            module = here / f"{part}.py"
        elif (here / f"{part}.pyi").is_file() and (here / "csrc").is_dir():
            # a C extension: its stub beside the folder of its C sources (csrc/), where its
            # names are the quoted names of the method and type tables
            rest = parts[i + 1:]
            sources = "".join(c.read_text() for c in sorted((here / "csrc").glob("*.c")))
            if rest and f'"{rest[0]}"' not in sources:
                return f"{rest[0]!r} is not defined in {(here / 'csrc').relative_to(ROOT)}"
            return None
        else:
            init = here / "__init__.py"
            if init.is_file() and part in _top_level_names(init):
                return None
            return f"no module or package {part!r} in {here.relative_to(ROOT)}"
        rest = parts[i + 1:]
        if rest and rest[0] not in _top_level_names(module):
            return f"{rest[0]!r} is not defined in {module.relative_to(ROOT)}"
        return None
    return None


@cache
def _classes() -> dict[str, set[str]]:
    """Every class defined under the source folders, with the names its body defines."""
    found: dict[str, set[str]] = {}
    for folder in SOURCE_DIRS:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.ClassDef):
                    members = found.setdefault(node.name, set())
                    for item in node.body:
                        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef
                                      | ast.ClassDef):
                            members.add(item.name)
                        elif isinstance(item, ast.AnnAssign) and isinstance(
                                item.target, ast.Name):
                            members.add(item.target.id)
    return found


@cache
def _settings() -> frozenset[str]:
    """The keys of server.properties that `ServerProperties` knows (its field aliases)."""
    source = (ROOT / "kraft" / "config" / "server_properties.py").read_text()
    return frozenset(re.findall(r'alias="([^"]+)"', source))


def problems(text: str, *, classes: bool = True) -> list[str]:
    """Everything `text` names that does not exist, one line each (backticked class names too,
    unless `classes` is False)."""
    found: list[str] = []
    for m in DOTTED.finditer(text):
        name = m.group(1) + m.group(2)
        if name in _settings():
            continue
        why = resolve_dotted(m.group(1), m.group(2)[1:].split("."))
        if why:
            found.append(f"{name}: {why}")
    for m in PATH.finditer(text):
        path = m.group(1).rstrip(".")
        if "NN" in path:  # a pattern such as docs/journal/perf-NN-*.md
            continue
        if not (ROOT / path).exists():
            found.append(f"{path}: no such file or folder")
    if not classes:
        return sorted(set(found))
    defined = _classes()
    for m in BACKTICKED.finditer(text):
        ref = CLASS_REF.match(m.group(1))
        if not ref:
            continue
        cls, member = ref.groups()
        if cls not in defined:
            found.append(f"{m.group(1)}: no class {cls} in {', '.join(SOURCE_DIRS)}")
        elif member and member not in defined[cls]:
            found.append(f"{m.group(1)}: class {cls} defines no {member}")
    return sorted(set(found))


def test_every_module_path_and_class_named_in_the_architecture_page_exists() -> None:
    text = DOC.read_text()
    assert DOTTED.search(text) and PATH.search(text), "the page names no module at all"
    assert problems(text) == []


@pytest.mark.parametrize("page", ["performance.md", "native-lane.md"])
def test_every_module_and_path_named_in_the_write_path_pages_exists(page: str) -> None:
    assert problems((ROOT / "docs" / page).read_text(), classes=False) == []


def test_a_setting_is_not_taken_for_a_module_but_a_wrong_one_is_reported() -> None:
    assert problems("`kraft.lane.tick.ms`", classes=False) == []
    assert problems("`kraft.lane.tick.writes`", classes=False)


@pytest.mark.parametrize("wrong", [
    "`kraft.raft.ballots`",             # no such module
    "`kraft.server.node.NoSuchThing`",  # no such name in a module
    "`kraft.lane._native.NoSuchShell`",  # no such name in the C module
    "`kraft/lane/nothing/`",            # no such folder
    "`RaftCore.no_such_method`",        # no such method
    "`NoSuchClass`",                    # no such class
    "`kraft_operator.planner.nothing`",  # no such module under the operator
])
def test_a_name_that_does_not_exist_is_reported(wrong: str) -> None:
    assert problems(f"the layers: {wrong}"), wrong


def test_names_that_exist_pass() -> None:
    text = ("`kraft.lane._native` `kraft.lane._native.scan_appended` `kraft/lane/csrc/codec.c` "
            "`kraft.server.node.KraftNode` "
            "`kraft_sandbox.kubelet` `kraft.admin.QuorumClient` `RaftCore.handle` "
            "`operator/planner/` `docs/native-lane.md`")
    assert problems(text) == []
