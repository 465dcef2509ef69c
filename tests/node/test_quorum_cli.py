"""`kraft quorum` takes kafka-metadata-quorum's options and prints its output (no server
needed here; the real quorum is asked in test_node_basics and test_membership)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from kraft.admin.models import ZERO_DIRECTORY_ID, Endpoint, QuorumInfo, ReplicaInfo
from kraft.cli.main import main
from kraft.cli.quorum import QuorumOutputError, format_replication
from kraft.cli.table import EXIT_USAGE
from kraft.storage.format import format_storage
from kraft.storage.meta_properties import read_meta_properties

D1 = "AAAAAAAAAAAAAAAAAAAAAQ"
D2 = "AAAAAAAAAAAAAAAAAAAAAg"
NOW = 1_700_000_010_000


def _replica(replica_id: int, directory_id: str, leo: int, fetch: int | None,
             caught_up: int | None, host: str | None = None) -> ReplicaInfo:
    return ReplicaInfo(
        replica_id=replica_id, directory_id=directory_id, log_end_offset=leo,
        last_fetch_timestamp_ms=fetch, last_caught_up_timestamp_ms=caught_up,
        endpoints=[Endpoint(listener="CONTROLLER", host=host, port=9093)] if host else [],
        lag=0, caught_up=True)


def _response(voters: list[ReplicaInfo] | None = None) -> QuorumInfo:
    return QuorumInfo(
        cluster_id="c", leader_id=2, leader_epoch=5, high_watermark=40, kraft_version=1,
        voters=voters if voters is not None else [
            _replica(1, D1, 38, NOW - 70, NOW - 900, "h1"),
            _replica(2, D2, 41, NOW, NOW, "h2")],
        observers=[_replica(7, ZERO_DIRECTORY_ID, 45, None, None)],
    )


def test_replication_table_is_kafkas_exactly() -> None:
    # ToolsUtils.prettyPrintTable: every cell padded to its column and followed by a tab;
    # the leader first, then the other voters, then the observers; Lag not clamped at 0.
    assert format_replication(_response(), now_ms=NOW) == (
        "NodeId\tDirectoryId           \tLogEndOffset\tLag\tLastFetchTimestamp\t"
        "LastCaughtUpTimestamp\tStatus  \t\n"
        "2     \tAAAAAAAAAAAAAAAAAAAAAg\t41          \t0  \t1700000010000     \t"
        "1700000010000        \tLeader  \t\n"
        "1     \tAAAAAAAAAAAAAAAAAAAAAQ\t38          \t3  \t1700000009930     \t"
        "1700000009100        \tFollower\t\n"
        "7     \tAAAAAAAAAAAAAAAAAAAAAA\t45          \t-4 \t-1                \t"
        "-1                   \tObserver\t\n"
    )


def test_replication_human_readable_and_our_endpoints_column() -> None:
    lines = format_replication(_response(), human_readable=True, now_ms=NOW).splitlines()
    assert [c.strip() for c in lines[2].split("\t")[4:6]] == ["70 ms ago", "900 ms ago"]
    assert [c.strip() for c in lines[3].split("\t")[4:6]] == ["-1", "-1"]
    with_eps = format_replication(_response(), now_ms=NOW, endpoints=True).splitlines()
    assert with_eps[0].split("\t")[7].strip() == "Endpoints"
    assert with_eps[1].split("\t")[7].strip() == "CONTROLLER://h2:9093"
    future = _response([_replica(2, D2, 41, NOW + 5, NOW)])
    with pytest.raises(QuorumOutputError, match="possible drift in system clock"):
        format_replication(future, human_readable=True, now_ms=NOW)


def _controller(tmp_path: Path) -> Path:
    props = {
        "process.roles": "controller", "node.id": "4",
        "controller.listener.names": "CONTROLLER",
        "listeners": "CONTROLLER://:9093",
        "advertised.listeners": "CONTROLLER://node4.example:9093",
        "metadata.log.dir": str(tmp_path / "meta"),
        "controller.quorum.bootstrap.servers": "node1.example:9093",
    }
    format_storage(props, "QF8mVzcRaw30atEJTDbDUQ", no_initial_controllers=True,
                   out=io.StringIO())
    cfg = tmp_path / "controller.properties"
    cfg.write_text("".join(f"{k}={v}\n" for k, v in props.items())
                   + "request.timeout.ms=30000\n")  # an Admin client key: not an error
    return cfg


def test_add_controller_reads_the_controller_from_command_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = _controller(tmp_path)
    meta = read_meta_properties(tmp_path / "meta")
    assert meta is not None
    assert main(["quorum", "--bootstrap-controller", "127.0.0.1:1", "--command-config",
                 str(cfg), "add-controller", "--dry-run"]) == 0
    assert capsys.readouterr().out == (
        f"DRY RUN of adding controller 4 with directory id {meta.directory_id} and "
        "endpoints: CONTROLLER://node4.example:9093\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bootstrap-server", "h:1", "--bootstrap-controller", "h:1", "describe", "--status"],
         "You cannot specify both --bootstrap-controller and --bootstrap-server."),
        (["describe", "--status"],
         "You must specify either --bootstrap-controller or --bootstrap-server."),
        (["--bootstrap-server", "h:1", "describe", "--status", "--replication"],
         "Only one of --status or --replication should be specified with describe sub-command"),
        (["--bootstrap-server", "h:1", "describe"],
         "One of --status or --replication must be specified with describe sub-command"),
        (["--bootstrap-controller", "h:1", "describe", "--status", "--human-readable"],
         "The option --human-readable is only supported along with --replication"),
        (["--bootstrap-controller", "h:1", "describe", "--status", "--show-endpoints"],
         "The option --show-endpoints is only supported along with --replication"),
        (["--bootstrap-controller", "h:1", "add-controller"],
         "You must supply the configuration file of the controller you are adding"),
        (["--bootstrap-controller", "h:1", "--command-config", "{missing}", "describe",
          "--status"], "does not exist"),
        (["--bootstrap-controller", "h:1", "--command-config", "{sasl}", "describe",
          "--status"], "security.protocol: SASL_SSL is not supported"),
        (["--bootstrap-controller", "h:1", "--command-config", "{ssl}", "describe",
          "--status"], "ssl.truststore.location: cannot load the trusted certificates"),
        (["--bootstrap-controller", "nohost", "describe", "--status"],
         "--bootstrap-controller: 'nohost' is not HOST:PORT"),
        (["--bootstrap-controller", "h:1", "remove-controller", "-i", "-3", "-d",
          "AAAAAAAAAAAAAAAAAAAAAQ"], "Invalid negative --controller-id: -3"),
        (["--bootstrap-controller", "h:1", "remove-controller", "-i", "3", "-d", "nope"],
         "Failed to parse --controller-directory-id"),
    ],
)
def test_bad_options_get_kafkas_messages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str,
) -> None:
    ssl = tmp_path / "ssl.properties"
    ssl.write_text(f"security.protocol=SSL\nssl.truststore.location={tmp_path / 'no-ca.pem'}\n")
    sasl = tmp_path / "sasl.properties"
    sasl.write_text("security.protocol=SASL_SSL\n")
    argv = [a.format(missing=tmp_path / "nope.properties", ssl=ssl, sasl=sasl) for a in args]
    assert main(["quorum", *argv]) == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_add_controller_config_alias_and_bootstrap_from_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    # Ours, kept for older scripts: `add-controller --config FILE` with no bootstrap option
    # takes the controller's controller.quorum.bootstrap.servers.
    cfg = _controller(tmp_path)
    assert main(["quorum", "add-controller", "--config", str(cfg), "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("DRY RUN of adding controller 4 ")
    other = tmp_path / "other.properties"
    other.write_text(cfg.read_text())
    assert main(["quorum", "--command-config", str(other), "add-controller", "--config",
                 str(cfg)]) == EXIT_USAGE
    assert "name different files" in capsys.readouterr().err


def test_an_advertised_name_that_does_not_resolve_is_named_with_where_it_came_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """From outside a cluster, the leader's advertised cluster DNS name cannot be reached: the
    error names that host and port, that DescribeCluster of the bootstrap controller gave it,
    and where such a name resolves (it said only `[Errno -2] Name or service not known`)."""
    from kraft.cli.local import LocalCluster
    from tests.node.conftest import FAST_TIMEOUTS, address_prefix

    cluster = LocalCluster(tmp_path, voters=1, properties=FAST_TIMEOUTS,
                           address_prefix=address_prefix())
    node = cluster.nodes[1]
    advertised = "kq-0.kq.default.svc"
    node.overrides["advertised.listeners"] = f"CONTROLLER://{advertised}:{node.port}"
    try:  # the voters set names the advertised listener, as the operator's pods have it
        format_storage(cluster.write_config(node), cluster.cluster_id,
                       initial_controllers=f"1@{advertised}:{node.port}:{node.directory_id}",
                       out=io.StringIO())
        cluster.start(1)
        cluster.wait_for_leader()
        bootstrap = f"{node.host}:{node.port}"
        assert main(["quorum", "--bootstrap-controller", bootstrap, "describe", "--status"]) == 1
        err = capsys.readouterr().err
        assert f"{advertised}:{node.port}" in err, err
        assert "does not resolve" in err and f"DescribeCluster of {bootstrap}" in err, err
        assert "kraft-sandbox run" in err, err
    finally:
        cluster.close()


def test_a_bootstrap_controller_that_does_not_resolve_is_named(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["quorum", "--bootstrap-controller", "nowhere.invalid:9093", "describe",
                 "--status"]) == 1
    err = capsys.readouterr().err
    assert "nowhere.invalid:9093" in err and "does not resolve" in err, err
