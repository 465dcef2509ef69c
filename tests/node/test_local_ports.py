"""The ports a local quorum chooses are held against every other local quorum on the machine
(`kraft.cli.local.PortLocks`), from the choice until the quorum is closed."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from kraft.cli import local
from kraft.cli.local import LocalCluster, PortLocks, free_port
from tests.node.conftest import address_prefix

PREFIX = address_prefix()
HOST = PREFIX + "1"
"""Addresses of this module's own: the tests check which ports are free, and the quorums on
the users' default addresses hold theirs in the shared lock file, not in these tests' file."""


@pytest.fixture(autouse=True)
def private_lock_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own lock file: other test workers' quorums hold ports in the shared one."""
    path = tmp_path / "ports.lock"
    monkeypatch.setattr(local, "_LOCK_FILE", path)
    return path


def scripted_ports(monkeypatch: pytest.MonkeyPatch, ports: list[int]) -> None:
    """Every `random.Random()` made by `free_port` proposes `ports`, in order, again and again
    (as two choosers whose generators happen to agree)."""

    class Scripted:
        def __init__(self) -> None:
            self._next: Iterator[int] = iter(ports * 50)

        def randrange(self, start: int, stop: int) -> int:
            return next(self._next)

    monkeypatch.setattr(local.random, "Random", Scripted)


def bindable_ports(n: int, hosts: int = 1) -> list[int]:
    """`n` ports free on the first `hosts` addresses of PREFIX."""
    ports: list[int] = []
    while len(ports) < n:
        port = free_port(HOST, set(ports))
        if all(_bindable(f"{PREFIX}{i}", port) for i in range(2, hosts + 1)):
            ports.append(port)
    return ports


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def test_two_holders_conflict_and_one_holder_never_conflicts_with_itself() -> None:
    a, b = PortLocks(), PortLocks()
    try:
        assert a.take(21000) and a.take(21001) and a.take(21000)
        assert not b.take(21000) and not b.take(21001)
        assert b.take(21002) and not a.take(21002)
        a.release()
        assert b.take(21000) and b.take(21001)
        assert a.held == set() and b.held == {21000, 21001, 21002}
    finally:
        a.release()
        b.release()


def test_free_port_skips_a_port_another_quorum_holds_and_takes_it_into_hold(
        monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = bindable_ports(2)
    other = PortLocks()
    assert other.take(first)
    scripted_ports(monkeypatch, [first, second])
    mine = PortLocks()
    try:
        assert free_port(HOST) == second  # a check only: nothing is held after it
        assert free_port(HOST, hold=mine) == second
        assert mine.held == {second} and not other.take(second)
        other.release()
        assert free_port(HOST, hold=mine) == first  # `second` is mine already: never twice
    finally:
        mine.release()
        other.release()


def test_two_quorums_whose_choices_agree_get_disjoint_ports(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Both quorums' generators propose the same ports in the same order. The first takes
    nine of them (three nodes, three listeners each); the second must take the other nine."""
    candidates = bindable_ports(18, hosts=3)
    scripted_ports(monkeypatch, candidates)
    a = LocalCluster(tmp_path / "a", voters=3, address_prefix=PREFIX)
    b = LocalCluster(tmp_path / "b", voters=3, address_prefix=PREFIX)
    try:
        def ports(c: LocalCluster) -> set[int]:
            return {p for n in c.nodes.values() for p in (n.port, n.http_port, n.client_port)}

        assert ports(a) == set(candidates[:9])
        assert ports(b) == set(candidates[9:])
        a.close()  # a closed quorum gives its ports up
        c = LocalCluster(tmp_path / "c", voters=3, address_prefix=PREFIX)
        assert ports(c) == set(candidates[:9])
        c.close()
    finally:
        a.close()
        b.close()


def test_a_killed_holder_leaves_no_lock_behind(private_lock_file: Path) -> None:
    port = bindable_ports(1)[0]
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            from pathlib import Path
            from kraft.cli.local import PortLocks
            locks = PortLocks(Path({str(private_lock_file)!r}))
            print(locks.take({port}), flush=True)
            sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "True"
        mine = PortLocks()
        assert not mine.take(port)  # another process holds it
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        assert mine.take(port)
        mine.release()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=10)


def test_a_lock_the_kernel_refuses_leaves_the_port_only_checked_free(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A lock request the kernel rejects as invalid (here an unknown lock type) is not a
    conflict: the port is taken as without locks, and nothing is held in the file."""
    monkeypatch.setattr(local, "_F_WRLCK", 99)
    a, b = PortLocks(), PortLocks()
    try:
        assert a.take(21000) and b.take(21000)
        assert a.held == b.held == {21000}
    finally:
        a.release()
        b.release()


def test_a_closed_quorum_does_not_start_a_node_on_a_port_another_quorum_took(
        tmp_path: Path) -> None:
    a = LocalCluster(tmp_path / "a", voters=1, address_prefix=PREFIX)
    other = PortLocks()
    try:
        a.close()
        node = a.nodes[1]
        assert other.take(node.http_port)
        with pytest.raises(OSError, match=f"node 1's port {node.http_port} on {node.host} is "
                                          "held by another local quorum"):
            a.start(1)
        assert node.process is None
    finally:
        other.release()
        a.close()
