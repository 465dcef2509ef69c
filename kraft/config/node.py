"""Node configuration: Kafka-style properties plus `KRAFT_*` environment overrides.

The keys and their values are those of `kraft.config.server_properties.ServerProperties`
(the one model of `server.properties`, shared with `kraft format` and the operator);
`NodeConfig` adds what a
node needs to run: no unknown key (a typo would otherwise be silently ignored), the
`controller` role only, a controller listener that exists, and a quorum to join.

A node reads one properties file (Java `.properties` syntax), then applies environment
variables named `KRAFT_<KEY>` where `<KEY>` is the property name upper-cased with dots turned
into underscores (`KRAFT_NODE_ID=3` overrides `node.id`). An unknown key or an invalid value
raises `ConfigError` naming the key (and, for an environment override, the variable it came
from).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import ConfigDict, ValidationError, field_validator, model_validator

from kraft.config.http_security import http_security
from kraft.config.properties import PropertiesSyntaxError, read_properties
from kraft.config.security import (
    AuthorizerSettings,
    SslSettings,
    authorizer_settings,
    is_listener_security_key,
    listener_key,
    ssl_settings,
)
from kraft.config.server_properties import (
    NO_SASL,
    SERVED_PROTOCOLS,
    HostPort,
    ListenerAddress,
    ServerProperties,
    VoterAddress,
    problems_of,
    security_key_problem,
)

__all__ = [
    "ENV_PREFIX",
    "ConfigError",
    "HostPort",
    "ListenerAddress",
    "NodeConfig",
    "VoterAddress",
    "build_config",
    "env_overrides",
    "known_keys",
    "load_config",
]

ENV_PREFIX = "KRAFT_"


class ConfigError(ValueError):
    """A configuration key is unknown, missing or has an invalid value; the message names it."""


class NodeConfig(ServerProperties):
    """The validated configuration of one kraft node (property names as aliases).

    Either `controller.quorum.voters` (a static quorum, kraft.version 0) or
    `controller.quorum.bootstrap.servers` (a dynamic quorum, KIP-853) must be set.
    """

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)
    """Extra keys are allowed only as `listener.name.<l>.ssl.*` (checked in `_consistent`;
    `build_config` names any other unknown key first)."""

    @field_validator("process_roles")
    @classmethod
    def _roles(cls, value: list[str]) -> list[str]:
        if value != ["controller"]:
            raise ValueError(f"only process.roles=controller is supported, got {','.join(value)!r}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> NodeConfig:
        if not self.listeners:
            raise ValueError("listeners: at least one listener is required")
        names = {listener.name for listener in self.listeners}
        if len(names) != len(self.listeners):
            raise ValueError("listeners: a listener name appears twice")
        if not self.controller_listener_names:
            raise ValueError("controller.listener.names: at least one name is required")
        for name in self.controller_listener_names:
            # Kafka's KafkaConfig: a controller's controller.listener.names must only contain
            # values appearing in listeners (each one is bound)
            if name not in names:
                raise ValueError(
                    f"controller.listener.names: {name!r} is not one of listeners "
                    f"{sorted(names)} (a controller binds every controller listener)")
        if len(set(self.controller_listener_names)) != len(self.controller_listener_names):
            raise ValueError("controller.listener.names: a listener name appears twice")
        for listener in self.listeners:
            protocol = self.security_protocol(listener.name)
            if protocol is None:
                raise ValueError(f"listener.security.protocol.map: no security protocol is "
                                 f"defined for listener {listener.name}")
            if protocol not in SERVED_PROTOCOLS:
                raise ValueError(f"listener.security.protocol.map: listener {listener.name} "
                                 f"asks for {protocol}, but {NO_SASL}")
        for key in self.model_extra or {}:
            if not is_listener_security_key(key):
                raise ValueError(f"unknown configuration key {key!r}")
            lname = key.split(".")[2]
            if lname not in {item.name.lower() for item in self.listeners}:
                raise ValueError(f"{key}: no listener named {lname!r} in listeners")
        for listener in self.controller_listeners:
            ssl = self.listener_ssl(listener.name)
            if ssl is None:
                continue
            where = listener_key(listener.name, "ssl.keystore.location")
            if not ssl.has_keystore:
                raise ValueError(f"{where}: an SSL controller listener needs a keystore (or "
                                 "ssl.keystore.key with ssl.keystore.certificate.chain)")
            if ssl.truststore_location is None and ssl.truststore_certificates is None:
                raise ValueError(f"{listener_key(listener.name, 'ssl.truststore.location')}: "
                                 "an SSL controller listener needs a truststore (the CA its "
                                 "peers' certificates chain to)")
        if not self.quorum_voters and not self.bootstrap_servers:
            raise ValueError(
                "one of controller.quorum.voters or controller.quorum.bootstrap.servers is required"
            )
        ids = [v.node_id for v in self.quorum_voters]
        if len(set(ids)) != len(ids):
            raise ValueError(f"controller.quorum.voters: duplicate node id in {ids}")
        if self.metadata_directory is None:
            raise ValueError("metadata.log.dir (or log.dirs) is required")
        http_security(self)  # the HTTP port's TLS and token keys, checked together
        return self

    @property
    def controller_listener(self) -> ListenerAddress:
        """The controller listener this node speaks to its peers with (the first of
        controller.listener.names, as Kafka's RaftManager picks it): its protocol and TLS
        settings are those of every connection the node opens, and a peer's endpoint of
        that name is the one dialled."""
        name = self.controller_listener_names[0]
        return next(item for item in self.listeners if item.name == name)

    @property
    def controller_listeners(self) -> list[ListenerAddress]:
        """Every controller listener, in the order of controller.listener.names: the node
        binds each one with its own protocol and TLS settings (several during a migration
        between PLAINTEXT and SSL, docs/security.md)."""
        by_name = {item.name: item for item in self.listeners}
        return [by_name[name] for name in self.controller_listener_names if name in by_name]

    @property
    def advertised_controller_listeners(self) -> list[ListenerAddress]:
        """The controller listeners as peers should reach them (advertised overrides bound)."""
        out = []
        advertised = {a.name: a for a in self.advertised_listeners}
        for name in self.controller_listener_names:
            bound = next((item for item in self.listeners if item.name == name), None)
            chosen = advertised.get(name, bound)
            if chosen is not None:
                out.append(chosen)
        return out

    @property
    def controller_ssl(self) -> SslSettings | None:
        """The TLS settings of the listener the node dials its peers with (the first
        controller listener) when it is mapped to SSL, else None (PLAINTEXT)."""
        return self.listener_ssl(self.controller_listener.name)

    def listener_ssl(self, name: str) -> SslSettings | None:
        """The TLS settings of listener `name` when it is mapped to SSL, else None
        (`listener.name.<name>.ssl.*` over the bare `ssl.*` keys, as Kafka resolves them)."""
        if self.security_protocol(name) != "SSL":
            return None
        return ssl_settings(self.to_properties(), name)

    @property
    def authorizer(self) -> AuthorizerSettings:
        """Who may do what on the controller listener (`kraft.config.security`)."""
        return authorizer_settings(self.to_properties())

    @property
    def metadata_dir(self) -> Path:
        """The metadata log directory (metadata.log.dir, else the first of log.dirs)."""
        found = self.metadata_directory
        assert found is not None  # checked by _consistent
        return found


def known_keys() -> list[str]:
    """Every property name a node accepts."""
    return NodeConfig.known_keys()


def env_overrides(environ: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Map `KRAFT_*` variables to (property name, variable name); unknown ones raise."""
    by_env = {ENV_PREFIX + key.upper().replace(".", "_"): key for key in known_keys()}
    out: dict[str, tuple[str, str]] = {}
    for var, value in environ.items():
        if not var.startswith(ENV_PREFIX):
            continue
        key = by_env.get(var)
        if key is None:
            raise ConfigError(f"unknown configuration variable {var} (no such property)")
        out[key] = (value, var)
    return out


def build_config(
    properties: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> NodeConfig:
    """Validate `properties` with `environ`'s `KRAFT_*` overrides applied on top."""
    merged: dict[str, str] = dict(properties)
    origin: dict[str, str] = {}
    for key, (value, var) in env_overrides(environ or {}).items():
        merged[key] = value
        origin[key] = var
    known = set(known_keys())
    for key in merged:
        security = security_key_problem(key)
        if security is not None:
            where = f" (from {origin[key]})" if key in origin else ""
            raise ConfigError(f"configuration key {security}{where}")
        if key not in known and not is_listener_security_key(key):
            near = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigError(f"unknown configuration key {key!r}{hint}")
    try:
        return NodeConfig.model_validate(merged)
    except ValidationError as exc:
        problems = []
        for problem in problems_of(exc, merged):
            where = f" (from {origin[problem.key]})" if problem.key in origin else ""
            problems.append(f"{problem}{where}")
        raise ConfigError("invalid configuration: " + "; ".join(problems)) from None


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> NodeConfig:
    """Read a properties file and apply `KRAFT_*` overrides (from `os.environ` by default)."""
    try:
        props = read_properties(path)
    except PropertiesSyntaxError as exc:
        raise ConfigError(str(exc)) from None
    return build_config(props, os.environ if environ is None else environ)

