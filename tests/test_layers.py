"""The import layers of `kraft`: the contracts in pyproject.toml ([tool.importlinter]) hold.

`lint-imports` checks that kraft's packages import only downwards (sim, server, admin,
statemachine, raft, storage, records, protocol: the simulator runs the node's effect executor,
`kraft.server.executor`) and that the modules of `kraft.storage`, `kraft.sim` and
`kraft.server` import each other without cycles (the node's parts take the node through
protocols, not by importing `kraft.server.node`). The one exception it cannot
see (a C extension) is pinned here: `kraft.storage` imports nothing of `kraft.raft` but the
native lane's module, from `kraft/storage/log.py`.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

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


def test_storage_imports_consensus_only_for_the_lane_in_the_log() -> None:
    found = {
        (str(path.relative_to(ROOT)), name)
        for path in sorted((ROOT / "kraft" / "storage").rglob("*.py"))
        for name in _imports(path)
        if name == "kraft.raft" or name.startswith("kraft.raft.")
    }
    assert found == {("kraft/storage/log.py", "kraft.raft._lane")}, found


NODE_PARTS = ("executor", "flusher", "apply_driver", "kv_front")


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
