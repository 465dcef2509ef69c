"""ServerProperties: one model of server.properties for the node, `kraft format` and the
operator: Java properties syntax in, the same properties out, errors that name key and value."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.config.node import ConfigError, NodeConfig, build_config
from kraft.config.properties import parse_properties
from kraft.config.security import AUTHORIZER_KEYS, SSL_KEYS
from kraft.config.server_properties import (
    PropertyProblem,
    ServerProperties,
    ServerPropertiesError,
)
from kraft.storage.errors import StorageConfigError
from kraft.storage.format import format_storage
from kraft.storage.properties import write_server_properties

CLUSTER = "QF8mVzcRaw30atEJTDbDUQ"

TEXT = """\
# a controller, written by hand
! the other comment mark
node.id = 3
process.roles:controller
listeners CONTROLLER://[::1]:9093,PLAIN://0.0.0.0:9092
controller.listener.names=CONTROLLER
controller.quorum.bootstrap.servers=ctl-0.svc:9093,\\
    ctl-1.svc:9093 , \\
    ctl-2.svc:9093
metadata.log.dir=/var/lib/kraft/meta\\u00e9 dir
controller.quorum.election.timeout.ms=750
controller.quorum.auto.join.enable=TRUE
http.listener=0.0.0.0:8080
http.peers=1@[::1]:8080,2@h2:8080
kraft.log.flush.kernel=FALSE
# Kafka keys this project does not use are kept, as Kafka keeps them
num.network.threads=3
listener.security.protocol.map=CONTROLLER:PLAINTEXT
weird\\ key\\=x = a value with = and : and \\\\ and a tab\\t
"""


def test_parse_java_syntax_and_read_every_key() -> None:
    sp = ServerProperties.parse(TEXT, "server.properties")
    assert sp.node_id == 3 and sp.process_roles == ["controller"]
    assert [str(a) for a in sp.listeners] == ["CONTROLLER://[::1]:9093", "PLAIN://0.0.0.0:9092"]
    assert [str(b) for b in sp.bootstrap_servers] == ["ctl-0.svc:9093", "ctl-1.svc:9093",
                                                       "ctl-2.svc:9093"]
    assert sp.metadata_log_dir == "/var/lib/kraft/meta\u00e9 dir"
    assert sp.election_timeout_ms == 750 and sp.auto_join_enable is True
    assert sp.http_peers == {1: "[::1]:8080", 2: "h2:8080"}
    assert sp.flush_kernel == "off"
    assert sp.listener_security_protocol_map == "CONTROLLER:PLAINTEXT"
    assert sp.unknown_keys() == {"num.network.threads": "3",
                                 "weird key=x": "a value with = and : and \\ and a tab\t"}


def test_write_then_read_gives_the_same_properties(tmp_path: Path) -> None:
    sp = ServerProperties.parse(TEXT)
    rendered = sp.render(comment="rendered for pod ctl-3\nby the operator")
    assert rendered.startswith("# rendered for pod ctl-3\n# by the operator\n")
    # readable, as a pod's ConfigMap should be: values keep their ':' and '='
    assert "\nlisteners=CONTROLLER://[::1]:9093,PLAIN://0.0.0.0:9092\n" in rendered
    assert "\nmetadata.log.dir=/var/lib/kraft/meta\\u00E9 dir\n" in rendered
    again = ServerProperties.parse(rendered)
    assert again == sp
    assert again.to_properties() == sp.to_properties()
    path = tmp_path / "server.properties"
    write_server_properties(path, sp, comment="x")
    assert ServerProperties.read(path) == sp
    # every known key, defaults included, reads back to the same values
    full = sp.to_properties(include_defaults=True)
    assert set(ServerProperties.known_keys()) - set(full) == {
        "client.listener", "log.dir", *SSL_KEYS, *AUTHORIZER_KEYS}  # no defaults: not written
    assert ServerProperties.from_mapping(full).model_dump() == sp.model_dump()


def test_only_set_keys_are_written_and_values_are_kafka_text() -> None:
    sp = ServerProperties(**{"node.id": 1, "process.roles": "controller",
                             "controller.quorum.voters": "1@h1:9093,2@[::2]:9093",
                             "kraft.log.fsync": False})
    assert sp.to_properties() == {"node.id": "1", "process.roles": "controller",
                                  "controller.quorum.voters": "1@h1:9093,2@[::2]:9093",
                                  "kraft.log.fsync": "false"}
    merged = sp.with_overrides({"controller.quorum.append.linger.ms": 5})
    assert merged.append_linger_ms == 5 and merged.node_id == 1


def test_errors_name_each_bad_key_and_its_value() -> None:
    with pytest.raises(ServerPropertiesError) as bad:
        ServerProperties.parse("node.id=one\nprocess.roles=controller,wizard\n"
                               "listeners=CONTROLLER://h:70000\n"
                               "controller.quorum.fetch.timeout.ms=0\n", "pod-3.properties")
    text = str(bad.value)
    assert text.startswith("pod-3.properties: ")
    assert "node.id='one': not an integer" in text
    assert "process.roles='controller,wizard': unknown role 'wizard' (broker, controller)" in text
    assert "listeners='CONTROLLER://h:70000': entry 1 port: must be <= 65535" in text
    assert "controller.quorum.fetch.timeout.ms='0': must be >= 1" in text
    assert [p.key for p in bad.value.problems] == [
        "node.id", "process.roles", "listeners", "controller.quorum.fetch.timeout.ms"]
    with pytest.raises(ServerPropertiesError, match=r"node\.id: is required"):
        ServerProperties.parse("process.roles=controller\n")
    with pytest.raises(ServerPropertiesError, match=r"x.properties:2: malformed \\uXXXX"):
        ServerProperties.parse("node.id=1\nbad=\\u12\n", "x.properties")
    with pytest.raises(ServerPropertiesError, match="cannot read"):
        ServerProperties.read("/nonexistent/server.properties")


def test_validate_overrides_names_unknown_reserved_and_bad_keys() -> None:
    problems = ServerProperties.validate_overrides(
        {"controller.quorum.election.timeout": "500",
         "controller.quorum.fetch.timeout.ms": "soon",
         "node.id": "7",
         "controller.quorum.append.linger.ms": 5,
         "controller.quorum.auto.join.enable": True},
        reserved={"node.id", "listeners"})
    assert problems == [
        PropertyProblem(key="controller.quorum.election.timeout", value="500",
                        message="unknown key; did you mean "
                                "'controller.quorum.election.timeout.ms'?"),
        PropertyProblem(key="node.id", value="7", message="may not be overridden"),
        PropertyProblem(key="controller.quorum.fetch.timeout.ms", value="soon",
                        message="not an integer"),
    ]
    assert ServerProperties.validate_overrides({"kraft.lane.tick.ms": "5"}) == []
    assert str(problems[0]).startswith("controller.quorum.election.timeout='500': unknown key")


def test_the_node_and_format_know_the_same_keys(tmp_path: Path) -> None:
    assert NodeConfig.known_keys() == ServerProperties.known_keys()
    base = {"node.id": "1", "process.roles": "controller",
            "listeners": "CONTROLLER://127.0.0.1:9093", "controller.listener.names": "CONTROLLER",
            "controller.quorum.bootstrap.servers": "127.0.0.1:9093"}
    # Kafka's single-directory key: format and the node both read it
    node = build_config({**base, "log.dir": str(tmp_path / "one")}, {})
    assert node.metadata_dir == tmp_path / "one"
    format_storage({**base, "log.dir": str(tmp_path / "one")}, CLUSTER, standalone=True,
                   out=io.StringIO())
    assert (tmp_path / "one" / "meta.properties").exists()
    # a bad value of a key format does not itself use is still refused before writing
    with pytest.raises(StorageConfigError,
                       match=r"controller\.quorum\.election\.timeout\.ms='soon': not an integer"):
        format_storage({**base, "log.dir": str(tmp_path / "two"),
                        "controller.quorum.election.timeout.ms": "soon"}, CLUSTER,
                       standalone=True, out=io.StringIO())
    assert not (tmp_path / "two").exists()
    # unknown keys: format tolerates them (as Kafka), the node refuses a typo
    format_storage({**base, "log.dir": str(tmp_path / "three"), "num.io.threads": "8"},
                   CLUSTER, standalone=True, out=io.StringIO())
    with pytest.raises(ConfigError, match=r"num\.io\.threads"):
        build_config({**base, "log.dir": str(tmp_path / "three"), "num.io.threads": "8"}, {})


_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_TEXT.map(lambda k: "x." + k), _TEXT, max_size=6))
def test_any_key_and_value_survive_render_and_parse(extra: dict[str, str]) -> None:
    sp = ServerProperties.from_mapping({"node.id": "1", "process.roles": "controller", **extra})
    again = ServerProperties.parse(sp.render(comment="c\nd"))
    assert again.unknown_keys() == extra
    assert again == sp


def test_a_surrogate_pair_escape_is_one_character_as_in_java() -> None:
    assert parse_properties("k=\\uD83D\\uDE00 \\u00e9\n") == {"k": "\U0001F600 \u00e9"}
    sp = ServerProperties.from_mapping({"node.id": "1", "process.roles": "controller",
                                        "x.smile": "\U0001F600"})
    assert "x.smile=\\uD83D\\uDE00\n" in sp.render()


def test_the_node_names_the_key_a_typo_meant() -> None:
    props = {"node.id": "1", "process.roles": "controller",
             "listeners": "CONTROLLER://127.0.0.1:9093", "controller.listener.names": "CONTROLLER",
             "controller.quorum.voters": "1@127.0.0.1:9093", "metadata.log.dir": "/var/lib/kraft/x",
             "controller.quorum.fetch.timeout": "500"}
    with pytest.raises(ConfigError, match=r"unknown configuration key "
                       r"'controller\.quorum\.fetch\.timeout' \(did you mean "
                       r"'controller\.quorum\.fetch\.timeout\.ms'\?\)"):
        build_config(props, {})
