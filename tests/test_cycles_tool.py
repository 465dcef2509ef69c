"""tools/cycles.py finds what it claims to: components of a graph, C files that call each
other (through their object files' symbols), and imports under TYPE_CHECKING."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("cycles", ROOT / "tools" / "cycles.py")
assert _spec is not None and _spec.loader is not None
cycles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cycles)


def test_components_of_more_than_one_node_and_self_loops_are_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}, "f": set()}
    assert cycles.strongly_connected(graph) == [["a", "b", "c"], ["e"]]
    assert cycles.strongly_connected({"a": {"b"}, "b": set()}) == []


@pytest.mark.skipif(shutil.which("cc") is None or shutil.which("nm") is None,
                    reason="needs a C compiler and nm")
def test_two_c_files_calling_each_other_are_a_cycle(tmp_path: Path) -> None:
    folder = tmp_path / "kraft" / "lane" / "csrc"
    folder.mkdir(parents=True)
    (folder / "one.c").write_text("int two(int);\nint one(int x) { return x ? two(x - 1) : 0; }\n")
    (folder / "two.c").write_text("int one(int);\nint two(int x) { return one(x); }\n")
    (folder / "three.c").write_text("int one(int);\nint three(void) { return one(3); }\n")
    graph, where = cycles.c_graph(tmp_path)
    assert cycles.strongly_connected(graph) == [["kraft/lane/csrc/one.c", "kraft/lane/csrc/two.c"]]
    assert where[("kraft/lane/csrc/one.c", "kraft/lane/csrc/two.c")].endswith("calls two (kraft/lane/csrc/two.c)")
    (folder / "two.c").write_text("int two(int x) { return x; }\n")
    graph, _ = cycles.c_graph(tmp_path)
    assert cycles.strongly_connected(graph) == []


def test_an_import_under_type_checking_closes_a_cycle(tmp_path: Path) -> None:
    package = tmp_path / "cyclepkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from cyclepkg import b\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cyclepkg import a\n")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import importlib.util as u; "
            "s = u.spec_from_file_location('c', sys.argv[2]); m = u.module_from_spec(s); "
            "s.loader.exec_module(m); m.PACKAGES = ('cyclepkg',); "
            "g, _ = m.python_graph(); print(m.strongly_connected(g))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path), str(ROOT / "tools" / "cycles.py")],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[['cyclepkg.a', 'cyclepkg.b']]", out
