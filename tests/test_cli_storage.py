"""`kraft format`, `kraft random-uuid`, `kraft dump`: output, exit codes, bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kraft.cli.main import main
from kraft.cli.table import COMMANDS, EXIT_BROKEN_PIPE
from kraft.protocol.uuid import Uuid
from kraft.records.batch import Record, build_batch
from kraft.records.control import LeaderChangeMessage, build_control_batch
from kraft.statemachine.kv import encode_cas, encode_delete, encode_put
from kraft.storage.log import SegmentedLog

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = "QF8mVzcRaw30atEJTDbDUQ"


def write_config(tmp_path: Path, extra: str = "") -> Path:
    cfg = tmp_path / "server.properties"
    cfg.write_text(
        "# a controller\n"
        "process.roles=controller\n"
        "node.id=1\n"
        "controller.listener.names=CONTROLLER\n"
        "listeners=CONTROLLER://:9093\n"
        "advertised.listeners=CONTROLLER://localhost:9093\n"
        f"log.dirs={tmp_path}/meta\n" + extra
    )
    return cfg


def test_subcommands_come_from_the_table() -> None:
    assert {"format", "random-uuid", "dump"} <= set(COMMANDS)


def test_random_uuid(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["random-uuid"]) == 0
    text = capsys.readouterr().out.strip()
    assert str(Uuid.parse(text)) == text


def test_format_standalone_then_refuse_then_ignore(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path)
    assert main(["format", "-c", str(cfg), "-t", CLUSTER, "--standalone"]) == 0
    assert capsys.readouterr().out == (
        f"Formatting dynamic metadata voter directory {tmp_path}/meta with metadata.version 4.1-IV1.\n"
    )
    assert main(["format", "-c", str(cfg), "-t", CLUSTER, "--standalone"]) == 1
    assert "already formatted" in capsys.readouterr().err
    assert main(["format", "-c", str(cfg), "-t", CLUSTER, "-s", "-g"]) == 0
    assert "All of the log directories are already formatted." in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "config_extra", "match"),
    [
        (["-t", CLUSTER], "", "controller.quorum.voters is not set"),
        (["--standalone"], "", "the following arguments are required: --cluster-id"),
        (["-t", "short", "-s"], "", "--cluster-id: invalid uuid 'short'"),
        (["-t", CLUSTER, "-s", "-N"], "", "not allowed with argument"),
        (["-t", CLUSTER, "-I", "1@h:9093"], "", "expected id@host:port:directoryId"),
        (["-t", CLUSTER, "-s"], "node.id=\\u00zz\n", "server.properties:8: malformed"),
        (["-t", CLUSTER, "-s"], "node.id=one\n", "node.id='one': not an integer"),
        (["-t", CLUSTER, "-s", "-r", "3.0"], "", "unknown release version"),
        (["-t", CLUSTER, "-s", "-r", "3.8-IV0"], "",
         "kraft.version could not be set to 1 because it depends on metadata.version level 21"),
    ],
)
def test_usage_errors_exit_2_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], config_extra: str,
    match: str,
) -> None:
    cfg = write_config(tmp_path, config_extra)
    assert main(["format", "-c", str(cfg), *args]) == 2
    assert match in capsys.readouterr().err
    assert not (tmp_path / "meta").exists()


def test_missing_config_file_and_no_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["format", "-c", str(tmp_path / "nope"), "-t", CLUSTER, "-s"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main([]) == 2
    assert main(["no-such-command"]) == 2


def test_dump_metadata_dir_and_segment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path)
    assert main(["format", "-c", str(cfg), "-t", CLUSTER, "-s"]) == 0
    pdir = tmp_path / "meta" / "__cluster_metadata-0"
    log = SegmentedLog.open(pdir)
    log.append(build_control_batch(0, 1, 5, [LeaderChangeMessage(1)]))
    log.append(build_batch(1, 1, [b"hello"], 6))
    log.close()
    capsys.readouterr()
    assert main(["dump", str(tmp_path / "meta")]) == 0
    out = capsys.readouterr().out
    assert "FeatureLevelRecord v0 name=metadata.version featureLevel=27" in out
    assert "KRaftVersionRecord(kraft_version=1" in out and "VotersRecord(" in out
    assert "offset=0 CreateTime=5 " in out and "LeaderChangeMessage(leader_id=1" in out
    assert "crc_valid=true" in out and "crc_valid=false" not in out
    assert main(["dump", str(pdir / "00000000000000000000.log")]) == 0
    seg = capsys.readouterr().out
    assert "batch base_offset=1 last_offset=1 epoch=1 records=1 control=false" in seg
    # A flipped bit shows up in the dump and makes it exit 1.
    data = bytearray((pdir / "00000000000000000000.log").read_bytes())
    data[-2] ^= 1
    (pdir / "00000000000000000000.log").write_bytes(bytes(data))
    assert main(["dump", str(pdir)]) == 1
    captured = capsys.readouterr()
    assert "crc_valid=false" in captured.out and "CRC mismatch" in captured.err


def test_dump_takes_zeros_after_a_segments_last_batch_as_preallocated_space(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """What a crash leaves with `kraft.log.preallocate.bytes`: the batches, then zeros. A
    segment's zeros are no problem; a torn batch before them, or zeros in a snapshot, are."""
    seg = tmp_path / "00000000000000000000.log"
    batches = build_batch(0, 1, [b"a"], 5) + build_batch(1, 1, [b"b"], 6)
    zeros = 8192 - len(batches)  # to the end of the second 4 KiB block
    seg.write_bytes(batches + bytes(zeros))
    assert main(["dump", str(seg)]) == 0
    out = capsys.readouterr().out
    assert "batch base_offset=1" in out
    assert f"{zeros} zero bytes from position {len(batches)}: preallocated space" in out
    seg.write_bytes(batches + bytes(100))  # not to a block's end: a torn tail
    assert main(["dump", str(seg)]) == 1
    assert "preallocated" not in capsys.readouterr().out
    seg.write_bytes(batches + build_batch(2, 1, [b"c"], 7)[:30] + bytes(zeros - 30))
    assert main(["dump", str(seg)]) == 1
    captured = capsys.readouterr()  # the cut batch's CRC fails over the zeros after it
    assert f"position={len(batches)} crc=" in captured.out and "crc_valid=false" in captured.out
    assert "CRC mismatch" in captured.err
    snap = tmp_path / "00000000000000000002-0000000001.checkpoint"
    snap.write_bytes(batches + bytes(zeros))
    assert main(["dump", str(snap)]) == 1
    assert "preallocated" not in capsys.readouterr().out


def test_python_dash_m_kraft(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kraft", "random-uuid"], cwd=ROOT, capture_output=True,
        text=True, check=True,
    )
    Uuid.parse(proc.stdout.strip())
    bad = subprocess.run(
        [sys.executable, "-m", "kraft", "format", "-c", str(tmp_path / "x")], cwd=ROOT,
        capture_output=True, text=True,
    )
    assert bad.returncode == 2


def test_dump_prints_keys_headers_payloads_and_kv_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    # What kafka-dump-log --print-data-log prints per record: offset, CreateTime, key and value
    # sizes, header keys, then the key (when there is one) and the payload, decoded.
    seg = tmp_path / "00000000000000000000.log"
    records = [
        Record(0, 11, b"user-1", encode_put("colour", b"blue"), (("trace", b"abc"),)),
        Record(0, 12, None, encode_delete("colour")),
        Record(0, 13, None, encode_cas("n", None, b"\x00\xff")),
        Record(0, 14, None, b"\x07\x07 not a command"),
    ]
    seg.write_bytes(build_batch(0, 3, records, 10)
                    + build_control_batch(4, 3, 15, [LeaderChangeMessage(2)]))
    assert main(["dump", str(seg)]) == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    assert ('offset=0 CreateTime=11 keySize=6 valueSize=20 headerKeys=[trace] key="user-1" '
            'headers=[trace="abc"] payload=PUT key="colour" value="blue"') in lines
    assert ('offset=1 CreateTime=12 keySize=-1 valueSize=12 headerKeys=[] '
            'payload=DELETE key="colour"') in lines
    assert 'offset=2 CreateTime=13 keySize=-1 valueSize=17 headerKeys=[] payload=CAS key="n" ' \
           'expected=null new=0x00ff' in lines
    assert any(line.startswith("offset=3 CreateTime=14 keySize=-1 valueSize=16 headerKeys=[] "
                               "payload=0x0707") for line in lines)
    control = next(line for line in lines if line.startswith("offset=4 "))
    assert "controlType=LEADER_CHANGE(2)" in control and "LeaderChangeMessage(leader_id=2" in control


def _big_log(tmp_path: Path) -> Path:
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(b"".join(build_batch(i * 100, 1, [encode_put(f"k{i}-{j}", b"v" * 40)
                                                       for j in range(100)], 5)
                             for i in range(30)))
    return seg


def test_dump_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    # `kraft dump ... | head -n 2`: far more than a pipe's buffer, the reader goes away early.
    seg = _big_log(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "kraft", "dump", str(seg)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(60)
    assert first.startswith(b"== segment")
    assert err == b"", err.decode()


@pytest.mark.parametrize(
    "args",
    [["random-uuid"], ["--help"], ["dump", "{seg}"], ["dump", "--help"],
     ["format", "-c", "{cfg}", "-t", CLUSTER, "-s"], ["quorum", "--help"],
     ["run", "--help"]],
)
def test_every_command_into_a_pipe_whose_reader_is_gone(tmp_path: Path, args: list[str]) -> None:
    seg = _big_log(tmp_path)
    cfg = write_config(tmp_path)
    argv = [a.format(seg=seg, cfg=cfg) for a in args]
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody will read: every write fails with EPIPE
    try:
        done = subprocess.run([sys.executable, "-m", "kraft", *argv], stdout=write_end,
                              stderr=subprocess.PIPE, cwd=ROOT, timeout=120)
    finally:
        os.close(write_end)
    assert done.stderr == b"", done.stderr.decode()
    assert done.returncode == EXIT_BROKEN_PIPE


@pytest.mark.parametrize("args", [["--help"], ["dump", "--help"], ["random-uuid"]])
def test_a_full_disk_under_standard_output_is_an_error(args: list[str]) -> None:
    with open("/dev/full", "wb") as full:
        done = subprocess.run([sys.executable, "-m", "kraft", *args], stdout=full,
                              stderr=subprocess.PIPE, cwd=ROOT, timeout=120)
    assert done.returncode == 1
    assert done.stderr.decode() == (
        "kraft: cannot write to standard output: No space left on device\n")
