"""The import layers of `kraft`: the contracts in pyproject.toml ([tool.importlinter]) hold.

`lint-imports` checks that kraft's packages import only downwards (cli; sim and admin;
server, statemachine, lane, raft, storage, config, records, protocol: the simulator runs the
node's effect executor, `kraft.server.executor`) and that the modules of `kraft.storage`,
`kraft.lane`, `kraft.sim`, `kraft.server`, `kraft.cli`, `kraft.config` and `kraft.admin`
import each other without cycles (the node's parts take the
node through protocols, not by importing `kraft.server.node`). Those protocols name public
members only, and no part touches a private attribute of the node: what they share has public
owners (`kraft.server.event_queue`, `kraft.server.writes`, `kraft.server.node_metrics`). What it cannot see (an import
of the lane's C extension, `kraft.lane._native`) is checked here from the source: the
consensus core and storage name nothing of the lane, and storage nothing of the consensus
core (the node hands the log the lane's C scan: `SegmentedLog.use_native_scan`). The
benchmarks' kinds import downwards too: bench/measure, bench/report, bench/systems.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from tests.support.source_checks import private_reaches

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    # this checkout's `kraft`, whatever is installed
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [str(lint), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout, done.stdout


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _imported_from(package: str, prefixes: tuple[str, ...]) -> set[tuple[str, str]]:
    return {
        (str(path.relative_to(ROOT)), name)
        for path in sorted((ROOT / "kraft" / package).rglob("*.py"))
        for name in _imports(path)
        if any(name == p or name.startswith(p + ".") for p in prefixes)
    }


def test_storage_imports_neither_consensus_nor_the_lane() -> None:
    assert _imported_from("storage", ("kraft.raft", "kraft.lane")) == set()


def test_the_consensus_core_never_imports_the_lane() -> None:
    assert _imported_from("raft", ("kraft.lane",)) == set()


def _lane_imports(path: Path) -> set[str]:
    """What `path` imports of `kraft.lane`: its modules, and the names taken from the package."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("kraft.lane."))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("kraft.lane."):
                found.add(node.module)
            elif node.module == "kraft.lane":
                found.update(f"kraft.lane.{a.name}" for a in node.names)
    return found


def test_outside_the_lane_only_its_interface_is_imported() -> None:
    """The node, the simulator and the benchmarks import `kraft.lane`'s public names only
    (`__all__` of kraft/lane/__init__.py), never its modules (the lane's own tests may)."""
    import kraft.lane

    public = {f"kraft.lane.{name}" for name in kraft.lane.__all__}
    found = {
        (str(path.relative_to(ROOT)), name)
        for folder in ("kraft", "bench")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if not path.is_relative_to(ROOT / "kraft" / "lane")
        for name in _lane_imports(path) - public
    }
    assert found == set(), found


BENCH_KINDS = ("measure", "report", "systems")
"""bench/'s subpackages, each importing only those after it: the measurements write their
report, and both run the systems (kraft-quorum's own quorum, PySyncObj, etcd)."""


def test_the_benchmarks_import_downwards_by_kind() -> None:
    found: set[tuple[str, str]] = set()
    for i, kind in enumerate(BENCH_KINDS):
        above = {f"bench.{k}" for k in BENCH_KINDS[: i + 1] if k != kind}
        for path in sorted((ROOT / "bench" / kind).rglob("*.py")):
            found |= {(str(path.relative_to(ROOT)), name) for name in _imports(path)
                      if any(name == a or name.startswith(a + ".") for a in above)}
    assert found == set(), found
    loose = sorted(p.name for p in (ROOT / "bench").iterdir()
                   if p.is_file() and p.name not in ("__init__.py", "__main__.py"))
    assert loose == [], f"bench/ keeps only its runner; sort these by kind: {loose}"


NODE_PARTS = ("executor", "flusher", "apply_driver", "kv_front", "peers")


def test_the_node_parts_take_the_node_through_protocols() -> None:
    # not even under TYPE_CHECKING: each part names what it uses of the node in a Protocol
    for part in NODE_PARTS:
        path = ROOT / "kraft" / "server" / f"{part}.py"
        assert "kraft.server.node" not in _imports(path), path


def test_the_shared_executor_imports_only_the_core_effects() -> None:
    # the simulator runs it: it must bring in no socket, file or thread of the runtime
    path = ROOT / "kraft" / "server" / "executor.py"
    own = {name for name in _imports(path) if name == "kraft" or name.startswith("kraft.")}
    assert own == {"kraft.raft"}, own



def _reaches_into(path: Path) -> list[str]:
    """Where `path` reads or writes a private attribute of another object, names the node's
    class, or imports the server."""
    found = private_reaches(path)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Name) and node.id == "KraftNode":
            found.append(f"{path.name}:{node.lineno}: {node.id}")
        elif isinstance(node, ast.alias) and node.name.split(".")[-1] == "KraftNode":
            found.append(f"{path.name}: imports {node.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and (
                node.module == "kraft.server" or node.module.startswith("kraft.server.")):
            found.append(f"{path.name}:{node.lineno}: from {node.module}")
    return found


NODE_STATE = ("lane_host", "event_queue", "writes", "node_metrics")
"""The lanes' host, and the state the node shares with its parts: the core's event queue, the
writes in hand, the metrics."""


def test_the_node_parts_touch_no_private_attribute_of_the_node() -> None:
    """What the node's parts share with it (its event queue, the writes in hand, the metrics,
    the flush due) has a public owner: no part reads or writes a private attribute of the node
    (`self._node._waiting`) or of any other object."""
    found = [hit for part in NODE_PARTS + NODE_STATE
             for hit in private_reaches(ROOT / "kraft" / "server" / f"{part}.py")]
    assert found == [], found


def _is_typing_protocol(cls: ast.ClassDef) -> bool:
    return any(ast.unparse(b).split("[")[0] in ("Protocol", "typing.Protocol")
               for b in cls.bases)


def test_no_protocol_names_a_private_member() -> None:
    """A `typing.Protocol` of `kraft` (what one part uses of another) names public members only:
    what a part takes from another is that one's interface, not its internals."""
    found: list[str] = []
    for path in sorted((ROOT / "kraft").rglob("*.py")):
        for cls in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(cls, ast.ClassDef) and _is_typing_protocol(cls)):
                continue
            for member in cls.body:
                if isinstance(member, ast.AnnAssign) and isinstance(member.target, ast.Name):
                    name = member.target.id
                elif isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef):
                    name = member.name
                else:
                    continue
                if name.startswith("_") and not name.startswith("__"):
                    found.append(f"{path.relative_to(ROOT)}:{member.lineno}: "
                                 f"{cls.name}.{name}")
    assert found == [], found


def test_the_lane_takes_the_node_through_its_host_interface() -> None:
    """The lane's runners use the node only through `kraft.lane.LaneHost`: no module of the
    lane touches another object's private attribute, names the node's class, or imports the
    server (not even for its types)."""
    found = [hit for path in sorted((ROOT / "kraft" / "lane").glob("*.py"))
             for hit in _reaches_into(path)]
    assert found == [], found


def _type_checking_imports(path: Path) -> list[str]:
    """The imports `path` makes under `if TYPE_CHECKING:` (hidden from the contracts)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING",
                                                                    "typing.TYPE_CHECKING"):
            found += [f"{path.relative_to(ROOT)}:{n.lineno}" for n in ast.walk(node)
                      if isinstance(n, ast.Import | ast.ImportFrom)]
    return found


def test_the_node_parts_and_the_lane_import_nothing_for_types_only() -> None:
    """The contracts skip imports made under TYPE_CHECKING; `kraft.server` and `kraft.lane` make
    none (each part names what it uses of another in a Protocol), so the check for cycles among
    their modules sees every import they make."""
    found = [hit for package in ("server", "lane")
             for path in sorted((ROOT / "kraft" / package).glob("*.py"))
             for hit in _type_checking_imports(path)]
    assert found == [], found


def test_no_import_cycle_but_the_cores_and_no_c_files_calling_each_other() -> None:
    """`make cycles` (tools/cycles.py) over every package, imports under TYPE_CHECKING
    counted, and over the C files: the one cycle allowed is that of kraft.raft's rule
    modules."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "cycles.py"), "--allow", "kraft.raft"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(allowed): kraft.raft.core" in done.stdout, done.stdout
