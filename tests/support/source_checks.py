"""Checks of the source read with `ast` (no imports), shared by the layering tests of kraft's
node parts (tests/test_layers.py), the simulator's parts (tests/sim/test_host.py) and the
sandbox (tests/sandbox/test_structure.py)."""

from __future__ import annotations

import ast
from pathlib import Path


def private_reaches(path: Path, private_imports_from: str | None = None) -> list[str]:
    """Where `path` reads or writes a private attribute of another object: `x._name` with `x`
    not `self` or `cls` (`self._node._name` is one); with `private_imports_from`, also where it
    imports a private name from a module under that package."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                and not node.attr.startswith("__"):
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
        elif (private_imports_from is not None and isinstance(node, ast.ImportFrom)
              and node.module and node.level == 0
              and node.module.startswith(private_imports_from + ".")):
            found += [f"{path.name}:{node.lineno}: imports {node.module}.{a.name}"
                      for a in node.names if a.name.startswith("_")]
    return found
