"""Node configuration: Kafka properties, KRAFT_* overrides, errors that name the key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kraft.config.node import ConfigError, build_config, known_keys, load_config
from kraft.config.properties import parse_properties

BASE = {
    "node.id": "1",
    "process.roles": "controller",
    "listeners": "CONTROLLER://127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
    "controller.quorum.voters": "1@127.0.0.1:9093,2@127.0.0.2:9093,3@[::1]:9093",
    "metadata.log.dir": "/tmp/x",
}


def test_a_minimal_static_controller_config() -> None:
    cfg = build_config(BASE)
    assert cfg.node_id == 1
    assert [(v.node_id, v.host, v.port) for v in cfg.quorum_voters] == [
        (1, "127.0.0.1", 9093), (2, "127.0.0.2", 9093), (3, "::1", 9093)]
    assert cfg.controller_listener.port == 9093
    assert cfg.election_timeout_ms == 1000 and cfg.fetch_timeout_ms == 2000
    assert cfg.append_linger_ms == 25 and cfg.auto_join_enable is False
    # KIP-1166's rule is the default: a follower whose high watermark is stale is answered
    # at once; the linger is opt-in
    assert cfg.hw_linger_ms == 0
    assert build_config({**BASE, "kraft.fetch.hw.linger.ms": "2"}).hw_linger_ms == 2
    assert str(cfg.metadata_dir) == "/tmp/x"


def test_environment_overrides_win_and_are_named_in_errors() -> None:
    cfg = build_config(BASE, {"KRAFT_CONTROLLER_QUORUM_ELECTION_TIMEOUT_MS": "250",
                              "KRAFT_CONTROLLER_QUORUM_AUTO_JOIN_ENABLE": "true",
                              "PATH": "/bin"})
    assert cfg.election_timeout_ms == 250 and cfg.auto_join_enable is True
    with pytest.raises(ConfigError, match="KRAFT_NODE_ID"):
        build_config(BASE, {"KRAFT_NODE_ID": "one"})
    with pytest.raises(ConfigError, match="KRAFT_NO_SUCH_THING"):
        build_config(BASE, {"KRAFT_NO_SUCH_THING": "1"})


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("node.id", "-1", "node.id"),
        ("process.roles", "broker,controller", "process.roles"),
        ("listeners", "CONTROLLER://host", "listeners"),
        ("listeners", "CONTROLLER://h:70000", "listeners"),
        ("controller.quorum.voters", "1@0.0.0.0:9093", "controller.quorum.voters"),
        ("controller.quorum.voters", "x@h:1", "controller.quorum.voters"),
        ("controller.quorum.election.timeout.ms", "0", "controller.quorum.election.timeout.ms"),
        ("controller.quorum.auto.join.enable", "yes", "controller.quorum.auto.join.enable"),
        ("http.listener", "nowhere", "http.listener"),
        ("kraft.log.flush.kernel", "maybe", "kraft.log.flush.kernel"),
        ("kraft.fetch.hw.linger.ms", "-1", "kraft.fetch.hw.linger.ms"),
        ("kraft.log.preallocate.bytes", "-4096", "kraft.log.preallocate.bytes"),
        ("kraft.log.preallocate.bytes", "4MiB", "kraft.log.preallocate.bytes"),
        ("kraft.log.preallocate.bytes", str(2 << 30), "kraft.log.preallocate.bytes"),
        ("kraft.lane.follower", "yes", "kraft.lane.follower"),
        ("kraft.lane.tick.ms", "0", "kraft.lane.tick.ms"),
        ("kraft.lane.tick.ms", "60001", "kraft.lane.tick.ms"),
        ("some.unknown.key", "1", "some.unknown.key"),
    ],
)
def test_invalid_or_unknown_keys_are_errors_naming_the_key(key: str, value: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        build_config({**BASE, key: value})


@pytest.mark.parametrize(("value", "engine"), [(None, "auto"), ("true", "auto"), ("FALSE", "off"),
                                              ("uring", "uring"), (" AIO ", "aio"),
                                              ("off", "off")])
def test_the_flush_engine_choice(value: str | None, engine: str) -> None:
    """`kraft.log.flush.kernel`: io_uring where available by default; true and false (its
    values before it named an engine) mean `auto` and `off`."""
    props = dict(BASE) if value is None else {**BASE, "kraft.log.flush.kernel": value}
    assert build_config(props).flush_kernel == engine


def test_preallocation_is_off_unless_asked_for() -> None:
    """`kraft.log.preallocate.bytes`: 0 (segments end at their last batch, as Kafka's
    `log.preallocate=false`) unless set."""
    assert build_config(dict(BASE)).preallocate_bytes == 0
    props = {**BASE, "kraft.log.preallocate.bytes": "4194304"}
    assert build_config(props).preallocate_bytes == 4 << 20


def test_the_followers_lane_is_on_unless_turned_off() -> None:
    """`kraft.lane.follower`: true by default; `kraft.lane.tick.ms` 2 unless set."""
    cfg = build_config(dict(BASE))
    assert (cfg.lane_follower, cfg.lane_tick_ms) == (True, 2)
    cfg = build_config({**BASE, "kraft.lane.follower": "false", "kraft.lane.tick.ms": "5"})
    assert (cfg.lane_follower, cfg.lane_tick_ms) == (False, 5)


def test_missing_quorum_and_listener_mismatch_are_errors() -> None:
    props = dict(BASE)
    del props["controller.quorum.voters"]
    with pytest.raises(ConfigError, match=r"controller\.quorum\.voters or controller\.quorum\.bootstrap"):
        build_config(props)
    with pytest.raises(ConfigError, match=r"controller\.listener\.names"):
        build_config({**BASE, "controller.listener.names": "OTHER"})


def test_dynamic_quorum_with_bootstrap_servers_and_advertised_listeners() -> None:
    props = dict(BASE)
    del props["controller.quorum.voters"]
    props.update({"controller.quorum.bootstrap.servers": "127.0.0.1:9093,127.0.0.2:9093",
                  "advertised.listeners": "CONTROLLER://node1.example:9093",
                  "http.listener": "127.0.0.1:8080", "http.peers": "2@127.0.0.2:8080"})
    cfg = build_config(props)
    assert [str(b) for b in cfg.bootstrap_servers] == ["127.0.0.1:9093", "127.0.0.2:9093"]
    assert [a.host for a in cfg.advertised_controller_listeners] == ["node1.example"]
    assert cfg.http_peers == {2: "127.0.0.2:8080"}


def test_properties_file_syntax(tmp_path: Path) -> None:
    text = "# comment\n! also\nnode.id = 1\nprocess.roles:controller\nlisteners CONTROLLER\\://127.0.0.1\\:9093\n" \
           "controller.listener.names=CON\\\n    TROLLER\ncontroller.quorum.voters=1@127.0.0.1:9093\n" \
           "metadata.log.dir=/tmp/y\n"
    assert parse_properties(text)["controller.listener.names"] == "CONTROLLER"
    path = tmp_path / "server.properties"
    path.write_text(text)
    cfg = load_config(path, {})
    assert cfg.controller_listener.host == "127.0.0.1"
    assert "controller.quorum.voters" in known_keys()


def test_every_setting_docs_tuning_recommends_is_a_key_that_takes_the_value() -> None:
    """docs/tuning.md's table names settings and, where it gives one, a value: a renamed key or
    a value the parser refuses would send an operator a config that does not start."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "tuning.md").read_text()
    rows = [line.split(" | ") for line in doc.splitlines()
            if line.startswith("| `") and line.count(" | ") >= 2]
    assert len(rows) >= 5, "the settings table of docs/tuning.md was not found"
    keys = known_keys()
    for cells in rows:
        key = cells[0].removeprefix("| ").strip("`")
        assert key in keys, f"docs/tuning.md recommends {key!r}, which is not a node setting"
        value = re.match(r"`([^`]+)`", cells[1])
        if value is not None:
            build_config({**BASE, key: value.group(1)})


def test_snapshot_retention_settings_default_to_kafkas() -> None:
    cfg = build_config(dict(BASE))
    assert (cfg.retention_max_bytes, cfg.retention_max_ms) == (104_857_600, 604_800_000)
    assert cfg.retention_check_interval_ms == 60_000
    assert cfg.fetch_snapshot_max_bytes == 8 * 1024 * 1024
    cfg = build_config({**BASE, "metadata.max.retention.bytes": "-1",
                        "metadata.max.retention.ms": "1000",
                        "controller.quorum.fetch.snapshot.max.bytes": "4096"})
    assert (cfg.retention_max_bytes, cfg.retention_max_ms) == (-1, 1000)
    assert cfg.fetch_snapshot_max_bytes == 4096
    with pytest.raises(ConfigError, match=re.escape("metadata.max.retention.bytes")):
        build_config({**BASE, "metadata.max.retention.bytes": "lots"})
    with pytest.raises(ConfigError, match=re.escape("controller.quorum.fetch.snapshot.max.bytes")):
        build_config({**BASE, "controller.quorum.fetch.snapshot.max.bytes": "0"})


@pytest.mark.parametrize(
    ("extra", "named", "says"),
    [
        ({"listener.security.protocol.map": "CONTROLLER:SSL"},
         "listener.name.controller.ssl.keystore.location", "needs a keystore"),
        ({"listener.security.protocol.map": "CONTROLLER:SSL",
          "ssl.keystore.location": "/k.pem"},
         "listener.name.controller.ssl.truststore.location", "needs a truststore"),
        ({"listener.security.protocol.map": "CONTROLLER:SASL_SSL"},
         "listener.security.protocol.map", "asks for SASL_SSL"),
        ({"listener.security.protocol.map": "CONTROLLER:TLS"}, "listener.security.protocol.map",
         "unknown security protocol 'TLS'"),
        ({"listener.security.protocol.map": "CONTROLLER"}, "listener.security.protocol.map",
         "not LISTENER_NAME:SECURITY_PROTOCOL"),
        ({"listener.security.protocol.map": "OTHER:PLAINTEXT"}, "listener.security.protocol.map",
         "no security protocol is defined for listener CONTROLLER"),
        ({"listeners": "SSL://127.0.0.1:9093", "controller.listener.names": "SSL"},
         "listener.name.ssl.ssl.keystore.location", "needs a keystore"),
        ({"listener.name.controller.ssl.keystore.type": "JKS"},
         "listener.name.controller.ssl.keystore.type", "only PEM"),
        ({"listener.name.other.ssl.client.auth": "required"},
         "listener.name.other.ssl.client.auth", "no listener named 'other'"),
        ({"listener.name.controller.sasl.enabled.mechanisms": "PLAIN"},
         "listener.name.controller.sasl.enabled.mechanisms", "SASL is not implemented"),
        ({"ssl.client.auth": "always"}, "ssl.client.auth", "not one of required"),
        ({"ssl.endpoint.identification.algorithm": "ldap"},
         "ssl.endpoint.identification.algorithm", "not https or empty"),
        ({"ssl.enabled.protocols": "TLSv1.1"}, "ssl.enabled.protocols", "'TLSv1.1'"),
        ({"ssl.principal.mapping.rules": "RULE:^CN=(.*$/$1/"}, "ssl.principal.mapping.rules",
         "rule pattern"),
        ({"ssl.principal.mapping.rules": "RULES:x/y/"}, "ssl.principal.mapping.rules",
         "invalid rule"),
        ({"ssl.keystore.key": "-----BEGIN PRIVATE KEY-----"}, "ssl.keystore.certificate.chain",
         "is required"),
        ({"ssl.truststore.certificates": "not pem"}, "ssl.truststore.certificates",
         "is not PEM text"),
        ({"super.users": "User:a,User:b"}, "", ""),
        ({"super.users": "alice"}, "super.users", "User:name"),
        ({"kraft.authorizer.node.principal.pattern": "CN=node-"},
         "kraft.authorizer.node.principal.pattern", "needs one group"),
        ({"sasl.enabled.mechanisms": "PLAIN"}, "sasl.enabled.mechanisms",
         "SASL is not implemented"),
    ],
)
def test_security_keys_that_cannot_be_served_are_refused(extra: dict[str, str], named: str,
                                                         says: str) -> None:
    """Fail closed: SASL, a listener asked to speak SSL without its keystore and truststore,
    or a TLS or authorizer key with a bad value stops the node at start with the key named,
    instead of being served as plaintext or without the check asked for."""
    if not named:  # a DN holds commas: principals are split on semicolons, as Kafka does
        assert build_config({**BASE, **extra}).authorizer.super_users == {"User:a,User:b"}
        return
    with pytest.raises(ConfigError) as caught:
        build_config({**BASE, **extra})
    assert named in str(caught.value) and says in str(caught.value)


def test_plaintext_listeners_by_map_or_by_default_are_accepted() -> None:
    assert build_config(BASE).security_protocol("CONTROLLER") == "PLAINTEXT"
    cfg = build_config({**BASE, "listener.security.protocol.map": "CONTROLLER:plaintext"})
    assert cfg.security_protocol("CONTROLLER") == "PLAINTEXT"
    assert cfg.controller_ssl is None and not cfg.authorizer.enabled


def test_listener_prefixed_ssl_keys_win_over_the_bare_ones() -> None:
    cfg = build_config({**BASE, "listener.security.protocol.map": "CONTROLLER:SSL",
                        "ssl.keystore.location": "/bare.pem",
                        "listener.name.controller.ssl.keystore.location": "/prefixed.pem",
                        "ssl.truststore.location": "/ca.pem", "ssl.client.auth": "required",
                        "ssl.endpoint.identification.algorithm": ""})
    ssl = cfg.controller_ssl
    assert ssl is not None
    assert ssl.keystore_location == "/prefixed.pem" and ssl.truststore_location == "/ca.pem"
    assert ssl.key_of("ssl.keystore.location") == "listener.name.controller.ssl.keystore.location"
    assert ssl.client_auth == "required" and not ssl.endpoint_identification


def test_kraft_run_refuses_an_ssl_listener_with_a_keystore_it_cannot_read(
        tmp_path: Path) -> None:
    """The whole command: `kraft run` on a file asking for SSL with a missing keystore exits
    2 with the key named and never listens."""
    import subprocess
    import sys
    conf = tmp_path / "server.properties"
    conf.write_text("\n".join(f"{k}={v}" for k, v in {
        **BASE, "metadata.log.dir": str(tmp_path / "meta"),
        "listener.security.protocol.map": "CONTROLLER:SSL",
        "listener.name.controller.ssl.keystore.location": str(tmp_path / "missing.pem"),
        "listener.name.controller.ssl.truststore.location": str(tmp_path / "ca.pem"),
    }.items()) + "\n")
    done = subprocess.run([sys.executable, "-m", "kraft", "run", "-c", str(conf)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "listener.name.controller.ssl" in done.stderr and "cannot load" in done.stderr
    assert not (tmp_path / "meta").exists()


def test_connection_limits_default_to_kafkas_and_name_a_bad_value() -> None:
    cfg = build_config(dict(BASE))
    assert cfg.socket_request_max_bytes == 104_857_600
    assert (cfg.max_connections, cfg.max_connections_per_ip) == (2_147_483_647, 2_147_483_647)
    assert cfg.max_connections_per_ip_overrides == {}
    assert cfg.connections_max_idle_ms == 600_000
    assert cfg.socket_buffered_max_bytes == 128 * 1024 * 1024
    cfg = build_config({**BASE, "max.connections.per.ip.overrides": "10.0.0.1:5, [::1]:0",
                        "connections.max.idle.ms": "-1"})
    assert cfg.max_connections_per_ip_overrides == {"10.0.0.1": 5, "::1": 0}
    assert cfg.connections_max_idle_ms == -1
    with pytest.raises(ConfigError, match=r"max\.connections\.per\.ip\.overrides.*host:count"):
        build_config({**BASE, "max.connections.per.ip.overrides": "10.0.0.1"})
    with pytest.raises(ConfigError, match=r"socket\.request\.max\.bytes"):
        build_config({**BASE, "socket.request.max.bytes": "0"})


MIGRATING = {
    **BASE,
    "listeners": "CONTROLLER://127.0.0.1:9093,CONTROLLER_SSL://127.0.0.1:9094",
    "controller.listener.names": "CONTROLLER_SSL,CONTROLLER",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,CONTROLLER_SSL:SSL",
    "listener.name.controller_ssl.ssl.keystore.location": "/node.pem",
    "listener.name.controller_ssl.ssl.truststore.location": "/ca.pem",
    "listener.name.controller_ssl.ssl.client.auth": "required",
}
"""Midway through a migration to TLS: both listeners bound, TLS dialled."""


def test_several_controller_listeners_each_with_its_protocol_the_first_dialled() -> None:
    cfg = build_config(MIGRATING)
    assert [(a.name, a.port) for a in cfg.controller_listeners] == [
        ("CONTROLLER_SSL", 9094), ("CONTROLLER", 9093)]
    assert cfg.controller_listener.name == "CONTROLLER_SSL"
    assert cfg.listener_ssl("CONTROLLER") is None
    tls = cfg.listener_ssl("CONTROLLER_SSL")
    assert tls is not None and tls.client_auth == "required"
    assert cfg.controller_ssl == tls  # what the node dials with
    assert [a.name for a in cfg.advertised_controller_listeners] == ["CONTROLLER_SSL",
                                                                     "CONTROLLER"]
    # the other way round: plaintext dialled, the TLS listener still served
    back = build_config({**MIGRATING, "controller.listener.names": "CONTROLLER,CONTROLLER_SSL"})
    assert back.controller_ssl is None and back.listener_ssl("CONTROLLER_SSL") is not None


@pytest.mark.parametrize(("extra", "says"), [
    ({"controller.listener.names": "CONTROLLER_SSL,OTHER"}, "'OTHER' is not one of listeners"),
    ({"controller.listener.names": "CONTROLLER,CONTROLLER"}, "appears twice"),
    # the second controller listener is SSL too: it needs its own keystore and truststore
    ({"listener.name.controller_ssl.ssl.keystore.location": ""},
     "listener.name.controller_ssl.ssl.keystore.location"),
    ({"controller.listener.names": "CONTROLLER,CONTROLLER_SSL",
      "listener.name.controller_ssl.ssl.truststore.location": ""},
     "listener.name.controller_ssl.ssl.truststore.location"),
])
def test_every_controller_listener_is_checked(extra: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)):
        build_config({**MIGRATING, **extra})
