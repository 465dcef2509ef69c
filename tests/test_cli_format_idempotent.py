"""`kraft format --ignore-formatted` as an init container runs it: formats what is empty,
leaves this cluster's formatted directories alone (again and again), and refuses a directory
formatted for another cluster id or node id with exit code 3, writing nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kraft.cli.main import main
from kraft.cli.table import EXIT_FORMATTED_FOR_ANOTHER
from kraft.protocol.uuid import Uuid
from kraft.storage.meta_properties import read_meta_properties

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = "QF8mVzcRaw30atEJTDbDUQ"
OTHER = "r1hUMf4HRdCgQuEY_NbKoQ"


def _config(tmp_path: Path, node_id: int = 1) -> Path:
    cfg = tmp_path / f"server-{node_id}.properties"
    cfg.write_text(
        "process.roles=controller\n"
        f"node.id={node_id}\n"
        "controller.listener.names=CONTROLLER\n"
        "listeners=CONTROLLER://:9093\n"
        "advertised.listeners=CONTROLLER://ctl-1.example:9093\n"
        f"metadata.log.dir={tmp_path}/meta\n"
        f"log.dirs={tmp_path}/data\n"
    )
    return cfg


def _files(tmp_path: Path) -> dict[Path, bytes]:
    """Every file of the two storage directories, with its bytes."""
    return {p: p.read_bytes() for base in ("meta", "data")
            for p in sorted((tmp_path / base).rglob("*")) if p.is_file()}


def _initial(directory_id: Uuid) -> list[str]:
    return ["--initial-controllers", f"1@ctl-1.example:9093:{directory_id}"]


def test_ignore_formatted_formats_once_then_does_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = _config(tmp_path)
    dir_id = Uuid.random()
    args = ["format", "-c", str(cfg), "-t", CLUSTER, "-g", *_initial(dir_id)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"Formatting dynamic metadata voter directory {tmp_path}/meta" in out
    assert f"Formatting data directory {tmp_path}/data" in out
    meta = read_meta_properties(tmp_path / "meta")
    assert meta is not None and meta.directory_id == dir_id
    before = _files(tmp_path)
    for _ in range(2):  # the init container runs on every start of the pod
        assert main(args) == 0
        assert capsys.readouterr().out == "All of the log directories are already formatted.\n"
        assert _files(tmp_path) == before


@pytest.mark.parametrize("ignore", [["-g"], []])
def test_another_cluster_id_is_refused_with_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ignore: list[str],
) -> None:
    cfg = _config(tmp_path)
    assert main(["format", "-c", str(cfg), "-t", OTHER, "-s"]) == 0
    before = _files(tmp_path)
    capsys.readouterr()
    code = main(["format", "-c", str(cfg), "-t", CLUSTER, "-s", *ignore])
    assert code == EXIT_FORMATTED_FOR_ANOTHER == 3
    err = capsys.readouterr().err
    assert f"{tmp_path}/meta/meta.properties is formatted for cluster {OTHER}, not {CLUSTER}" \
        in err
    assert _files(tmp_path) == before


def test_another_node_id_is_refused_with_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["format", "-c", str(_config(tmp_path, 1)), "-t", CLUSTER, "-s"]) == 0
    before = _files(tmp_path)
    capsys.readouterr()
    code = main(["format", "-c", str(_config(tmp_path, 2)), "-t", CLUSTER, "-s", "-g"])
    assert code == 3
    assert "is formatted for node 1, not node.id 2" in capsys.readouterr().err
    assert _files(tmp_path) == before


def test_a_mismatch_anywhere_leaves_the_empty_directories_unformatted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = _config(tmp_path)
    assert main(["format", "-c", str(cfg), "-t", OTHER, "-s"]) == 0
    shutil.rmtree(tmp_path / "meta")  # a replaced metadata disk next to a foreign data disk
    code = main(["format", "-c", str(cfg), "-t", CLUSTER, "-N", "-g"])
    assert code == 3
    assert "data/meta.properties is formatted for cluster" in capsys.readouterr().err
    assert not (tmp_path / "meta").exists()


def test_a_replaced_empty_disk_is_formatted_with_a_new_directory_id(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    assert main(["format", "-c", str(cfg), "-t", CLUSTER, "-g", *_initial(Uuid.random())]) == 0
    old = read_meta_properties(tmp_path / "meta")
    data_before = (tmp_path / "data" / "meta.properties").read_bytes()
    shutil.rmtree(tmp_path / "meta")
    (tmp_path / "meta").mkdir()  # the new volume, empty
    assert main(["format", "-c", str(cfg), "-t", CLUSTER, "-g", "-N"]) == 0
    new = read_meta_properties(tmp_path / "meta")
    assert old is not None and new is not None
    assert (new.cluster_id, new.node_id) == (CLUSTER, 1)
    assert new.directory_id is not None and new.directory_id != old.directory_id
    assert (tmp_path / "data" / "meta.properties").read_bytes() == data_before


def test_the_exit_codes_of_the_real_command(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "kraft", "format", "-c", str(cfg), *args],
                              capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)

    first = run("-t", CLUSTER, "-s", "-g")
    assert first.returncode == 0, first.stderr
    again = run("-t", CLUSTER, "-s", "-g")
    assert again.returncode == 0, again.stderr
    assert again.stdout == "All of the log directories are already formatted.\n"
    foreign = run("-t", OTHER, "-s", "-g")
    assert foreign.returncode == 3
    assert foreign.stderr.startswith(f"error: {tmp_path}/meta/meta.properties is formatted "
                                     f"for cluster {CLUSTER}, not {OTHER}")
