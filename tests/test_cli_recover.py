"""`kraft recover inspect | force-single-voter`: the command line (exit codes, confirmation,
output) on a formatted directory, without a running node."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from kraft.cli.main import main
from kraft.protocol.uuid import Uuid
from kraft.storage.format import format_storage
from kraft.storage.loader import open_metadata_dir
from kraft.storage.properties import write_properties

CLUSTER = "QF8mVzcRaw30atEJTDbDUQ"


class Terminal(io.StringIO):
    """A stdin that says it is a terminal and answers with its text."""

    def isatty(self) -> bool:
        return True


def replica(tmp_path: Path) -> tuple[Path, Uuid]:
    """Node 1 of a formatted 3-voter dynamic quorum; returns its config and directory id."""
    config = tmp_path / "server.properties"
    props = {
        "node.id": "1", "process.roles": "controller",
        "listeners": "CONTROLLER://127.0.0.1:19093",
        "advertised.listeners": "CONTROLLER://node1.example:9093",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.bootstrap.servers": "node1.example:9093,node2.example:9093",
        "metadata.log.dir": str(tmp_path / "meta"),
    }
    write_properties(config, props)
    dir_id = Uuid.random()
    initial = f"1@node1.example:9093:{dir_id},2@node2.example:9093:{Uuid.random()}," \
              f"3@node3.example:9093:{Uuid.random()}"
    format_storage(props, CLUSTER, initial_controllers=initial, out=io.StringIO())
    return config, dir_id


def test_inspect_json_and_human(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, dir_id = replica(tmp_path)
    assert main(["recover", "inspect", "-c", str(config), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {
        "directory", "node_id", "directory_id", "cluster_id", "kraft_version",
        "log_start_offset", "log_end_offset", "last_epoch", "latest_snapshot", "high_watermark",
        "committed_at_least", "quorum_state", "max_epoch", "log_max_epoch", "voters", "is_voter",
        "is_only_voter",
    }
    assert (report["node_id"], report["directory_id"]) == (1, str(dir_id))
    assert main(["recover", "inspect", "--dir", str(tmp_path / "meta")]) == 0
    text = capsys.readouterr().out
    assert "high watermark:      unknown" in text and "<- this replica" in text


def test_inspect_needs_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recover", "inspect"]) == 2
    assert "--config or --dir" in capsys.readouterr().err
    assert main(["recover", "inspect", "--dir", str(tmp_path)]) == 1
    assert "not formatted" in capsys.readouterr().err


def test_force_asks_on_a_terminal_and_refuses_without_yes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    config, dir_id = replica(tmp_path)
    monkeypatch.setattr("sys.stdin", io.StringIO())
    assert main(["recover", "force-single-voter", "-c", str(config)]) == 4
    err = capsys.readouterr().err
    assert "WARNING" in err and "becomes committed" in err and "--yes" in err
    monkeypatch.setattr("sys.stdin", Terminal("no\n"))
    assert main(["recover", "force-single-voter", "-c", str(config)]) == 4
    assert "nothing changed" in capsys.readouterr().err
    with open_metadata_dir(tmp_path / "meta") as md:
        assert md.log.log_end_offset == 0 and md.quorum_state is None
    monkeypatch.setattr("sys.stdin", Terminal("yes\n"))
    assert main(["recover", "force-single-voter", "-c", str(config), "--json"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    # the change is one INFO line, as a node logs, saying who made it
    [line] = [x for x in err.splitlines() if "event=force_single_voter" in x]
    assert "level=INFO" in line and "replica=1" in line and " by=" in line
    assert result["changed"] and result["epoch"] == 1 and result["voters_offset"] == 0
    with open_metadata_dir(tmp_path / "meta") as md:
        latest = md.latest_voters
        assert latest is not None and latest.offset == 0
        [voter] = latest.record.voters  # type: ignore[union-attr]
        assert voter.voter_directory_id == dir_id
        # the advertised controller listener, as peers reach it
        assert [(e.name, e.host, e.port) for e in voter.endpoints] == [
            ("CONTROLLER", "node1.example", 9093)]
    # done: no confirmation needed to find there is nothing to do
    monkeypatch.setattr("sys.stdin", io.StringIO())
    assert main(["recover", "force-single-voter", "-c", str(config)]) == 0
    assert "nothing to do" in capsys.readouterr().out


def test_locked_directory_exits_5(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, _ = replica(tmp_path)
    with open_metadata_dir(tmp_path / "meta"):
        assert main(["recover", "force-single-voter", "-c", str(config), "--yes"]) == 5
        assert "stop the node first" in capsys.readouterr().err
        assert main(["recover", "inspect", "-c", str(config)]) == 5


def test_bad_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recover", "force-single-voter", "-c", str(tmp_path / "none"), "--yes"]) == 2
    config = tmp_path / "server.properties"
    write_properties(config, {"node.id": "x"})
    assert main(["recover", "force-single-voter", "-c", str(config), "--yes"]) == 2
    assert "node.id" in capsys.readouterr().err


def test_another_replica_exits_3_and_is_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    config, dir_id = replica(tmp_path)
    other = Uuid.random()
    assert main(["recover", "force-single-voter", "-c", str(config), "--yes",
                 "--directory-id", str(other)]) == 3
    assert f"not {other}" in capsys.readouterr().err
    assert main(["recover", "force-single-voter", "-c", str(config), "--yes",
                 "--directory-id", "nope"]) == 2
    text = config.read_text().replace("node.id=1", "node.id=2")
    config.write_text(text)
    assert main(["recover", "force-single-voter", "-c", str(config), "--yes"]) == 3
    assert "node.id 1" in capsys.readouterr().err
    with open_metadata_dir(tmp_path / "meta") as md:
        assert md.log.log_end_offset == 0 and md.quorum_state is None
    config.write_text(text.replace("node.id=2", "node.id=1"))
    assert main(["recover", "force-single-voter", "-c", str(config), "--yes",
                 "--directory-id", str(dir_id)]) == 0


# ---------------------------------------------------------------- reset-epoch

LIMIT = 2**31 - 1


def _forge_quorum_state(tmp_path: Path, epoch: int = LIMIT) -> Path:
    """quorum-state as a forged Vote left it before the epoch limit existed."""
    from kraft.storage.quorum_state import QuorumStateData, QuorumStateStore

    store = QuorumStateStore(tmp_path / "meta" / "__cluster_metadata-0")
    store.write(QuorumStateData(leader_epoch=epoch, leader_id=-1, voted_id=2,
                                voted_directory_id=Uuid.random()))
    return store.path


def _append_leader_batch(tmp_path: Path, epoch: int) -> None:
    from kraft.records.control import (
        LeaderChangeMessage,
        LeaderChangeVoter,
        build_control_batch,
    )

    with open_metadata_dir(tmp_path / "meta") as md:
        md.log.append(build_control_batch(md.log.log_end_offset, epoch, 0,
                                          [LeaderChangeMessage(1, (LeaderChangeVoter(1),), (LeaderChangeVoter(1),))]))
        md.log.flush()


def test_start_check_refuses_an_unusable_quorum_state_naming_file_epoch_and_command(
        tmp_path: Path) -> None:
    from kraft.storage.quorum_state import UnusableEpochError
    from kraft.storage.recover import check_startable

    replica(tmp_path)
    path = _forge_quorum_state(tmp_path)
    with open_metadata_dir(tmp_path / "meta") as md, \
            pytest.raises(UnusableEpochError) as exc:
        check_startable(md)
    text = str(exc.value)
    assert str(path) in text and str(LIMIT) in text and "kraft recover reset-epoch" in text
    _forge_quorum_state(tmp_path, -3)
    with open_metadata_dir(tmp_path / "meta") as md, \
            pytest.raises(UnusableEpochError, match="leaderEpoch -3"):
        check_startable(md)


def test_reset_epoch_moves_quorum_state_to_the_logs_highest_epoch(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from kraft.storage.recover import check_startable

    config, _ = replica(tmp_path)
    _append_leader_batch(tmp_path, 7)
    path = _forge_quorum_state(tmp_path)
    forged = path.read_text()
    # inspect leaves the unusable epoch out of "highest epoch seen", and says why
    assert main(["recover", "inspect", "-c", str(config)]) == 0
    text = capsys.readouterr().out
    assert "UNUSABLE" in text and "highest epoch seen:  7" in text
    assert "highest log epoch:   7" in text
    # not confirmed: nothing changes
    monkeypatch.setattr("sys.stdin", io.StringIO())
    assert main(["recover", "reset-epoch", "-c", str(config)]) == 4
    assert path.read_text() == forged
    # below the log's epoch, or at the limit: refused, nothing changes
    assert main(["recover", "reset-epoch", "-c", str(config), "--epoch", "3", "--yes"]) == 2
    assert "below epoch 7" in capsys.readouterr().err
    assert main(["recover", "reset-epoch", "-c", str(config), "--epoch", str(LIMIT),
                 "--yes"]) == 2
    assert path.read_text() == forged
    # locked by a running node
    with open_metadata_dir(tmp_path / "meta"):
        assert main(["recover", "reset-epoch", "-c", str(config), "--yes"]) == 5
    assert path.read_text() == forged
    # the default: the highest usable epoch, no leader, no vote
    assert main(["recover", "reset-epoch", "-c", str(config), "--yes", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["leader_epoch"], result["leader_id"], result["voted_id"]) == (7, -1, -1)
    assert result["quorum_state_before"]["leader_epoch"] == LIMIT
    stored = json.loads(path.read_text())
    assert stored == {"leaderId": -1, "leaderEpoch": 7, "votedId": -1,
                      "votedDirectoryId": str(Uuid.ZERO), "data_version": 1}
    with open_metadata_dir(tmp_path / "meta") as md:
        check_startable(md)  # a node starts from it
        assert md.log.log_end_offset == 1  # the log is untouched
    # an explicit, higher epoch (the highest over the voters)
    assert main(["recover", "reset-epoch", "-c", str(config), "--epoch", "12", "--yes"]) == 0
    assert json.loads(path.read_text())["leaderEpoch"] == 12


def test_reset_epoch_help_says_every_voter_gets_the_same_epoch(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recover", "reset-epoch", "--help"]) == 0
    out = capsys.readouterr().out
    assert "EVERY voter" in out and "same N" in out and "kraft recover inspect" in out


def test_reset_epoch_goes_below_a_usable_quorum_state_epoch_no_election_can_leave(
        tmp_path: Path) -> None:
    """A voter driven to 2**31 - 2, the last usable epoch, cannot start an election: by
    default reset-epoch takes it back to its log's epoch, not to the quorum-state's."""
    config, _ = replica(tmp_path)
    _append_leader_batch(tmp_path, 4)
    path = _forge_quorum_state(tmp_path, LIMIT - 1)
    assert main(["recover", "reset-epoch", "-c", str(config), "--yes"]) == 0
    stored = json.loads(path.read_text())
    assert (stored["leaderEpoch"], stored["leaderId"], stored["votedId"]) == (4, -1, -1)
