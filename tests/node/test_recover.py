"""Quorum-loss recovery with real processes: two of three voters lose their disks, the
survivor is forced to be the only voter with `kraft recover force-single-voter`, leads alone
with every acknowledged key, and the other two re-join as new voters by auto-join."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kraft.admin.errors import AdminError
from kraft.admin.models import ZERO_DIRECTORY_ID
from kraft.cli.local import LocalCluster, http_call
from kraft.cli.main import main
from kraft.cli.quorum import describe_quorum
from kraft.storage.format import format_storage
from kraft.storage.properties import write_properties


def recover_process(*args: str) -> subprocess.CompletedProcess[str]:
    """`kraft recover ...` as a separate process (as an operator's executor or a person runs
    it), with no terminal on stdin."""
    return subprocess.run([sys.executable, "-m", "kraft", "recover", *args],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)


def recover(*args: str) -> subprocess.CompletedProcess[str]:
    """`kraft recover ...` run by `kraft.cli.main` in this process (a new interpreter per call
    costs a second or two of imports on a busy machine), stdin not a terminal."""
    out, err = io.StringIO(), io.StringIO()
    stdin = sys.stdin
    sys.stdin = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["recover", *args])
    finally:
        sys.stdin = stdin
    return subprocess.CompletedProcess(["kraft", "recover", *args], code, out.getvalue(),
                                       err.getvalue())


async def voters_of(cluster: LocalCluster, ids: list[int]) -> dict[int, str | None]:
    """The leader's voters set (id -> directory id); {} while no leader answers."""
    try:
        resp = await describe_quorum([(cluster.nodes[i].host, cluster.nodes[i].port)
                                      for i in ids])
    except (AdminError, OSError, TimeoutError):
        return {}
    return {r.replica_id: None if r.directory_id == ZERO_DIRECTORY_ID else r.directory_id
            for r in resp.voters}


@pytest.mark.slow
async def test_quorum_lost_then_recovered_from_the_survivor(
    clusters: Callable[..., LocalCluster],
) -> None:
    cluster = clusters(3, properties={"controller.quorum.auto.join.enable": "true"})
    await asyncio.to_thread(cluster.start_all)
    survivor = await asyncio.to_thread(cluster.wait_for_leader, 60)
    acked: dict[str, bytes] = {}
    for i in range(20):
        r = await asyncio.to_thread(cluster.put, f"k{i}", f"v{i}".encode(), survivor)
        assert r.status == 200, r.body
        acked[f"k{i}"] = f"v{i}".encode()
    lost = [n for n in cluster.nodes if n != survivor]
    old_dirs = {n: str(cluster.nodes[n].directory_id) for n in cluster.nodes}
    for n in lost:  # two disks gone: no majority is left
        await asyncio.to_thread(cluster.kill, n, signal.SIGKILL)
        await asyncio.to_thread(cluster.wipe, n)
    try:
        r = await asyncio.to_thread(http_call, cluster.nodes[survivor].http, "PUT",
                                    "/v1/kv/lost", b"never", 3.0)
        status = r.status
    except OSError:  # no answer: nothing committed it
        status = None
    assert status != 200, "a write committed without a majority"

    node = cluster.nodes[survivor]
    config = str(node.config_path)
    # while it runs, its directory is locked: nothing is touched
    locked = await asyncio.to_thread(recover, "force-single-voter", "-c", config, "--yes")
    assert locked.returncode == 5 and "locked" in locked.stderr, locked.stderr
    await asyncio.to_thread(cluster.kill, survivor, signal.SIGKILL)

    inspected = await asyncio.to_thread(recover, "inspect", "-c", config, "--json")
    assert inspected.returncode == 0, inspected.stderr
    report = json.loads(inspected.stdout)
    assert (report["node_id"], report["directory_id"]) == (survivor, old_dirs[survivor])
    assert report["cluster_id"] == cluster.cluster_id and report["kraft_version"] == 1
    assert report["log_end_offset"] >= len(acked) and report["last_epoch"] >= 1
    assert sorted(v["id"] for v in report["voters"]["voters"]) == [1, 2, 3]
    assert report["is_voter"] and not report["is_only_voter"]
    human = await asyncio.to_thread(recover, "inspect", "--dir", str(node.dir))
    assert human.returncode == 0 and f"replica {survivor} " in human.stdout, human.stderr

    refused = await asyncio.to_thread(recover, "force-single-voter", "-c", config)
    assert refused.returncode == 4, refused.stderr
    assert "WARNING" in refused.stderr and "--yes" in refused.stderr
    assert f"offsets 0-{report['log_end_offset'] - 1} " in refused.stderr  # none known committed
    assert "never acknowledged" in refused.stderr
    assert json.loads((await asyncio.to_thread(
        recover, "inspect", "-c", config, "--json")).stdout) == report  # nothing changed

    forced = await asyncio.to_thread(recover_process, "force-single-voter", "-c", config, "--yes",
                                     "--directory-id", report["directory_id"], "--json")
    assert forced.returncode == 0, forced.stderr
    result = json.loads(forced.stdout)
    assert result["changed"] and result["epoch"] == report["max_epoch"] + 1
    again = await asyncio.to_thread(recover, "force-single-voter", "-c", config)
    assert again.returncode == 0 and "nothing to do" in again.stdout, again.stderr

    await asyncio.to_thread(cluster.start, survivor)
    assert await asyncio.to_thread(cluster.wait_for_leader, 30, None, [survivor]) == survivor
    for key, value in acked.items():
        r = await asyncio.to_thread(cluster.get, key, survivor)
        assert (r.status, r.body) == (200, value), key
    r = await asyncio.to_thread(cluster.put, "after", b"recovery", survivor)
    assert r.status == 200, r.body
    assert await voters_of(cluster, [survivor]) == {survivor: old_dirs[survivor]}

    for n in lost:  # empty disks: formatted anew (new directory ids), joining by auto-join
        await asyncio.to_thread(cluster.format, n, join_later=True)
        assert str(cluster.nodes[n].directory_id) != old_dirs[n]
        await asyncio.to_thread(cluster.start, n)
    expected = {n: str(cluster.nodes[n].directory_id) for n in cluster.nodes}
    deadline = time.monotonic() + 40
    voters = await voters_of(cluster, [survivor])
    while voters != expected and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        voters = await voters_of(cluster, [survivor])
    assert voters == expected
    for n in lost:
        await asyncio.to_thread(cluster.wait_ready, n, 30)
        for key, value in {**acked, "after": b"recovery"}.items():
            r = await asyncio.to_thread(http_call, cluster.nodes[n].http, "GET",
                                        f"/v1/kv/{key}?stale=true")
            assert (r.status, r.body) == (200, value), (n, key)


def test_static_quorum_is_refused_with_guidance(tmp_path: Path) -> None:
    meta = tmp_path / "meta"
    config = tmp_path / "server.properties"
    props = {
        "node.id": "1", "process.roles": "controller",
        "listeners": "CONTROLLER://127.0.0.1:19093", "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": "1@127.0.0.1:19093,2@127.0.0.2:19093,3@127.0.0.3:19093",
        "metadata.log.dir": str(meta),
    }
    write_properties(config, props)
    format_storage(props, "QF8mVzcRaw30atEJTDbDUQ", out=io.StringIO())
    out = recover("force-single-voter", "-c", str(config), "--yes")
    assert out.returncode == 6, out.stderr
    assert "static quorum" in out.stderr and "controller.quorum.voters" in out.stderr
    assert not (meta / "__cluster_metadata-0" / "quorum-state").exists()
    inspected = recover("inspect", "-c", str(config), "--json")
    assert json.loads(inspected.stdout)["kraft_version"] == 0
