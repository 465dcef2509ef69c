"""The simulator's parts take the simulation through its host protocol (`kraft.sim.host`).

The drives, the faults and the ports use only what `SimHost` names, public members of
`Simulation`; no module of `kraft.sim` reads or writes a private attribute of another object
(as `tests/test_layers.py` checks for the node's parts and the lane); and the modules of
`kraft.sim` import each other without cycles, counting the imports made under TYPE_CHECKING
(which the import-linter contracts skip).
"""

from __future__ import annotations

import ast
from pathlib import Path

from kraft.sim.cluster import Simulation
from kraft.sim.host import SimHost
from kraft.sim.params import SimParams
from tests.support.source_checks import private_reaches

ROOT = Path(__file__).resolve().parents[2]
SIM = ROOT / "kraft" / "sim"
PARTS = ("lane_drive", "leader_drive", "faults", "ports")
"""The modules that take the simulation through `SimHost`."""



def _sim_imports(path: Path) -> set[str]:
    """The modules of `kraft.sim` that `path` imports, under TYPE_CHECKING too."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            if node.module == "kraft.sim":
                names.update(f"kraft.sim.{a.name}" for a in node.names)
    return {n.removeprefix("kraft.sim.") for n in names if n.startswith("kraft.sim.")}


def test_no_module_of_the_simulator_touches_a_private_attribute_of_another_object() -> None:
    found = [hit for path in sorted(SIM.glob("*.py")) for hit in private_reaches(path, private_imports_from="kraft")]
    assert found == [], found


def test_the_simulators_modules_import_each_other_without_cycles() -> None:
    graph = {p.stem: _sim_imports(p) for p in sorted(SIM.glob("*.py"))}
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str], done: set[str]) -> None:
        if module in path:
            cycles.append([*path[path.index(module):], module])
            return
        if module in done:
            return
        for dep in sorted(graph.get(module, ())):
            visit(dep, [*path, module], done)
        done.add(module)

    done: set[str] = set()
    for module in graph:
        visit(module, [], done)
    assert cycles == [], cycles


def test_the_drives_faults_and_ports_do_not_import_the_simulation() -> None:
    found = {part: _sim_imports(SIM / f"{part}.py") & {"cluster", "cli", "script"}
             for part in PARTS}
    assert found == {part: set() for part in PARTS}, found
    for part in PARTS:
        assert "host" in _sim_imports(SIM / f"{part}.py"), part


def _protocol_members() -> list[str]:
    tree = ast.parse((SIM / "host.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SimHost")
    members: list[str] = []
    for member in cls.body:
        if isinstance(member, ast.AnnAssign) and isinstance(member.target, ast.Name):
            members.append(member.target.id)
        elif isinstance(member, ast.FunctionDef):
            members.append(member.name)
    return members


def test_a_simulation_has_every_member_of_its_host_protocol() -> None:
    sim = Simulation(1, SimParams())
    host: SimHost = sim  # and mypy checks the types
    members = _protocol_members()
    assert members, "SimHost names nothing"
    missing = [name for name in members if not hasattr(host, name)]
    assert missing == [], missing
    assert all(not name.startswith("_") for name in members), members
