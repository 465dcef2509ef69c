"""The sandbox's modules hold together through public interfaces: only the emulator
(`kraft_sandbox.emulator`) works on its own store; every other module (the kubelet, the
scheduler, the controllers, the volume binder, the runtime, the command line) reads and writes
the objects through the emulator's public methods and reads no private attribute of another
object. No module grows past 1,200 lines."""

from __future__ import annotations

from pathlib import Path

from tests.support.source_checks import private_reaches

ROOT = Path(__file__).resolve().parents[2]
SANDBOX = ROOT / "sandbox"
MAX_LINES = 1200



def test_no_sandbox_module_but_the_emulator_reaches_into_another_object() -> None:
    modules = sorted(p for p in SANDBOX.glob("*.py") if p.name != "emulator.py")
    assert len(modules) > 10, modules
    found = [hit for path in modules for hit in private_reaches(path)]
    assert found == [], found


def test_a_reach_into_another_object_is_reported(tmp_path: Path) -> None:
    """The check above could not pass by accident."""
    module = tmp_path / "m.py"
    module.write_text("def f(api, self):\n    api._get(1)\n    self.api._store = 2\n"
                      "    self._ok = api.read_object(3)\n")
    assert sorted(private_reaches(module)) == ["m.py:2: api._get", "m.py:3: self.api._store"]


def test_no_sandbox_module_is_over_1200_lines() -> None:
    long = {p.name: n for p in SANDBOX.glob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}, long
