"""`kraft audit` command line: bad input fails fast with a clear message, before any JVM."""

from __future__ import annotations

from pathlib import Path

import pytest
from kraft_pipeline.audit import main, parse_args
from kraft_pipeline.layout import AuditInputError, discover_replicas


def test_missing_input_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["--input", str(tmp_path / "nope"), "--output", str(tmp_path / "out")])
    assert rc == 2
    assert "no such file or directory" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_directory_that_is_not_a_metadata_dir(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "file.txt").write_text("x")
    rc = main(["--input", str(tmp_path / "junk"), "--output", str(tmp_path / "out")])
    assert rc == 2
    assert "not a KRaft metadata directory" in capsys.readouterr().err


def test_bad_options_exit_2(tmp_path: Path) -> None:
    for argv in (["--output", "x"], ["--input", "a", "--output", "x", "--voters", "1,b"],
                 ["--input", "a", "--output", "x", "--high-watermark", "-1"],
                 ["--input", "a", "--output", "x", "--conf", "novalue"]):
        with pytest.raises(SystemExit) as exc:
            parse_args(argv)
        assert exc.value.code == 2


def test_options_are_parsed() -> None:
    a = parse_args(["-i", "a", "b", "-o", "out", "--voters", "3,1", "--conf", "k=v=w",
                    "--driver-memory", "1g", "--high-watermark", "7"])
    assert a.input == ["a", "b"] and a.voters == [1, 3] and a.high_watermark == 7
    assert a.conf == {"k": "v=w", "spark.driver.memory": "1g"}


def test_discovery_accepts_partition_dir_and_parent(tmp_path: Path) -> None:
    from kraft_pipeline.synthetic import write_replica

    root = write_replica(tmp_path / "quorum" / "a", 7, [])
    for path in (root, root / "__cluster_metadata-0", tmp_path / "quorum"):
        [rep] = discover_replicas([str(path)])
        assert (rep.name, rep.node_id, rep.root) == ("node-7", 7, str(root.resolve()))
    with pytest.raises(AuditInputError):
        discover_replicas([])


def test_command_table_needs_no_spark() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from kraft.cli.main import build_parser\n"
        "a = build_parser().parse_args(['audit', '-i', 'x', '-o', 'y', '--voters', '1,2'])\n"
        "assert a.voters == '1,2' and a.output == 'y'\n"
        "build_parser().parse_args(['export', '--dir', 'd', '--output', 'o'])\n"
        "print('pyspark' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_run_from_args_reports_bad_option_values(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from kraft_pipeline.audit import run_from_args
    from kraft_pipeline.audit_args import add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["-i", str(tmp_path), "-o", str(tmp_path / "o"), "--voters", "x"])
    assert run_from_args(args) == 2
    assert "--voters" in capsys.readouterr().err


def test_kraft_cli_runs_audit_and_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import tarfile

    from kraft_pipeline.synthetic import History, write_replica

    from kraft.cli.main import main as kraft_main

    assert kraft_main(["audit", "--input", str(tmp_path / "nope"), "--output", "x"]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    h = History()
    h.leader_change(1, 1, [1])
    h.data(1, h.commands(5))
    root = write_replica(tmp_path / "n1", 1, [b.data for b in h.batches])
    assert kraft_main(["export", "--dir", str(root), "--output", str(tmp_path / "n1.tar")]) == 0
    with tarfile.open(tmp_path / "n1.tar") as tar:
        assert "node-1/bundle-manifest.json" in tar.getnames()
