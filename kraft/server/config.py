"""Node configuration: Kafka-style properties plus `KRAFT_*` environment overrides.

A node reads one properties file (Java `.properties` syntax, parsed by
`kraft.storage.properties`), then
applies environment variables named `KRAFT_<KEY>` where `<KEY>` is the property name upper-cased
with dots turned into underscores (`KRAFT_NODE_ID=3` overrides `node.id`). Everything is
validated by a pydantic model; an unknown key or an invalid value raises `ConfigError` naming
the key (and, for an environment override, the variable it came from).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kraft.storage.properties import PropertiesSyntaxError, read_properties

ENV_PREFIX = "KRAFT_"


class ConfigError(ValueError):
    """A configuration key is unknown, missing or has an invalid value; the message names it."""


class ListenerAddress(BaseModel):
    """One `NAME://host:port` listener."""

    model_config = ConfigDict(frozen=True)

    name: str
    host: str
    port: int = Field(ge=0, le=65535)

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


class VoterAddress(BaseModel):
    """One `id@host:port` entry of `controller.quorum.voters`."""

    model_config = ConfigDict(frozen=True)

    node_id: int = Field(ge=0)
    host: str
    port: int = Field(ge=1, le=65535)


class HostPort(BaseModel):
    """A `host:port` pair (bootstrap servers, the admin HTTP listener)."""

    model_config = ConfigDict(frozen=True)

    host: str
    port: int = Field(ge=0, le=65535)

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def _split_host_port(text: str, what: str) -> tuple[str, int]:
    text = text.strip()
    if text.startswith("["):
        close = text.find("]")
        if close < 0 or text[close + 1 : close + 2] != ":":
            raise ValueError(f"{what} {text!r} is not [ipv6]:port")
        host, port_text = text[1:close], text[close + 2 :]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ValueError(f"{what} {text!r} has no :port")
    if not port_text.isdigit():
        raise ValueError(f"{what} {text!r} has a non-numeric port")
    return host, int(port_text)


def _csv(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(v).strip() for v in value if str(v).strip()]
    return [part.strip() for part in str(value).split(",") if part.strip()]


class NodeConfig(BaseModel):
    """The validated configuration of one kraft node (property names as aliases).

    Timeouts and intervals are milliseconds, as in Kafka. Either `controller.quorum.voters`
    (a static quorum, kraft.version 0) or `controller.quorum.bootstrap.servers` (a dynamic
    quorum, KIP-853) must be set.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    node_id: int = Field(alias="node.id", ge=0)
    process_roles: list[str] = Field(alias="process.roles")
    listeners: list[ListenerAddress] = Field(alias="listeners")
    advertised_listeners: list[ListenerAddress] = Field(default=[], alias="advertised.listeners")
    controller_listener_names: list[str] = Field(alias="controller.listener.names")
    listener_security_protocol_map: str = Field(
        default="", alias="listener.security.protocol.map"
    )
    quorum_voters: list[VoterAddress] = Field(default=[], alias="controller.quorum.voters")
    bootstrap_servers: list[HostPort] = Field(
        default=[], alias="controller.quorum.bootstrap.servers"
    )
    election_timeout_ms: int = Field(default=1000, alias="controller.quorum.election.timeout.ms", ge=1)
    election_backoff_max_ms: int = Field(
        default=1000, alias="controller.quorum.election.backoff.max.ms", ge=1
    )
    fetch_timeout_ms: int = Field(default=2000, alias="controller.quorum.fetch.timeout.ms", ge=1)
    request_timeout_ms: int = Field(default=2000, alias="controller.quorum.request.timeout.ms", ge=1)
    retry_backoff_ms: int = Field(default=20, alias="controller.quorum.retry.backoff.ms", ge=0)
    hw_linger_ms: int = Field(default=0, alias="kraft.fetch.hw.linger.ms", ge=0)
    """While writes stream in (each within this long of the last commit), a new high watermark
    waits up to this long to ride on the next records instead of completing the followers'
    parked fetches alone (KIP-1166); 0 completes them at once. A follower then learns a commit
    with the next write, or this long later when no write follows."""
    append_linger_ms: int = Field(default=25, alias="controller.quorum.append.linger.ms", ge=0)
    auto_join_enable: bool = Field(default=False, alias="controller.quorum.auto.join.enable")
    metadata_log_dir: str | None = Field(default=None, alias="metadata.log.dir")
    log_dirs: list[str] = Field(default=[], alias="log.dirs")
    segment_bytes: int = Field(default=1 << 30, alias="metadata.log.segment.bytes", ge=1024)
    snapshot_max_bytes_between: int = Field(
        default=20 * 1024 * 1024, alias="metadata.log.max.record.bytes.between.snapshots", ge=1
    )
    snapshot_interval_ms: int = Field(
        default=3_600_000, alias="metadata.log.max.snapshot.interval.ms", ge=0
    )
    http_listener: HostPort | None = Field(default=None, alias="http.listener")
    client_listener: HostPort | None = Field(default=None, alias="client.listener")
    """host:port of the binary pipelined KV client protocol (`kraft.server.client_protocol`)."""
    http_peers: dict[int, str] = Field(default={}, alias="http.peers")
    fsync: bool = Field(default=True, alias="kraft.log.fsync")
    flush_mode: Literal["auto", "inline", "thread"] = Field(default="auto",
                                                            alias="kraft.log.flush.mode")
    """`inline` (as Kafka's raft thread does): the event loop fsyncs the log once the events
    queued together were all handled (a client write and the followers' fetches: every answer
    is already on its way), so one fsync covers every append among them; `thread`: a flusher thread
    fsyncs while the loop goes on (no loop stall on a slow disk, but every flush costs thread
    hand-offs and GIL switches); `auto` (the default): a leader's append of at most
    `EARLY_FLUSH_MAX_RECORDS` records (a write made alone: its latency is what counts) is
    fsynced by the flusher thread from the moment it is written, so the fsync overlaps the
    answers to the followers' parked fetches instead of waiting for them; bigger appends (a
    loaded leader) and a follower's appends are flushed `inline`."""
    flush_kernel: Literal["auto", "uring", "aio", "off"] = Field(
        default="auto", alias="kraft.log.flush.kernel")
    """Who starts the fsyncs that `auto` and `thread` give the flusher thread. `auto` (the
    default, also `true`): the kernel through io_uring where the kernel and the seccomp profile
    allow it (`kraft.storage.uring`), else the thread; `uring`: the same, with a warning when it
    is not available; `aio`: the kernel through Linux native AIO (`kraft.storage.aio`; a process
    holding an AIO context takes ~30 ms longer to die after kill -9, so followers notice a
    killed leader that much later); `off` (also `false`): the flusher thread. Started by the
    kernel from the event loop, the sync begins at once rather than when the thread gets the
    GIL (sequential writes ~0.1 ms faster, docs/performance.md sections 16-17). Flushes that
    must also persist a new segment file or the leader-epoch checkpoint still run inline."""
    preallocate_bytes: int = Field(default=0, ge=0, le=1 << 30, alias="kraft.log.preallocate.bytes")
    """0 (the default, as Kafka's `log.preallocate=false`): segment files end at their last batch.
    Above 0: the active segment keeps this many zero-filled, synced bytes ahead of its end, and a
    follower writes the records it fetched there with `O_DIRECT | O_DSYNC` instead of writing
    them to the page cache and then calling `fdatasync` (no size change to journal, no page
    writeback to wait for: a sequential write ~0.08 ms faster on this project's test machines,
    docs/performance.md section 27). After a crash the active segment ends in up to this many
    zeros, which the next start trims; a roll and a clean shutdown leave no zeros. Rounded up
    to 4 KiB; falls back to the page cache where the filesystem refuses `O_DIRECT`; ignored
    with `kraft.log.fsync=false` (nothing is synced then)."""
    lane_follower: bool = Field(default=True, alias="kraft.lane.follower")
    """true (the default): a follower in the steady state of an epoch hands its fetches to the
    native lane (`kraft.server.follower_lane`, docs/native-lane.md step 2), a loop in C on a
    thread of its own that writes, syncs and acknowledges the leader's records without the
    interpreter, and reports to the core every `kraft.lane.tick.ms` and before a local read.
    false: the Python path does it all. Ignored (with a warning) where the extension was not
    built or with `kraft.log.fsync=false`."""
    lane_leader: bool = Field(default=True, alias="kraft.lane.leader")
    """true: a leader in the steady state of its epoch hands the binary client protocol's
    connection (when it is the only one), its voters' fetch connections and the active segment
    to the native lane (`kraft.server.leader_lane`, docs/native-lane.md step 3), a loop in C on
    a thread of its own that batches the PUTs, writes, replicates and syncs them, counts the
    voters' acknowledgements, and answers each PUT at its commit; it reports to the core every
    `kraft.lane.tick.ms` and before a local read. false (the default): the Python path does it
    all. Ignored (with a warning) where the extension was not built or with
    `kraft.log.fsync=false`."""
    lane_tick_ms: int = Field(default=2, ge=1, le=60_000, alias="kraft.lane.tick.ms")
    """How often, in ms, the node takes a running lane's progress into the core (a follower's:
    its log end, durable end, high watermark and fetch deadline; a leader's: its appends, the
    voters' rows and the high watermark; the apply follows). A check that finds nothing new
    doubles the period, up to 50 ms, until one finds progress again
    (`kraft.server.lane_tick`). A local read takes it at once whatever the period, and a
    follower's lane wakes the node for a new high watermark, or for records while the node's
    loop sleeps (docs/native-lane.md, "the bookkeeping tick")."""
    event_loop: Literal["auto", "asyncio", "uvloop"] = Field(default="auto", alias="kraft.event.loop")
    """`auto`: uvloop when it is installed (less CPU per request), else asyncio's loop."""

    @field_validator("process_roles", "controller_listener_names", "log_dirs", mode="before")
    @classmethod
    def _parse_csv(cls, value: Any) -> list[str]:
        return _csv(value)

    @field_validator("process_roles")
    @classmethod
    def _roles(cls, value: list[str]) -> list[str]:
        if value != ["controller"]:
            raise ValueError(f"only process.roles=controller is supported, got {','.join(value)!r}")
        return value

    @field_validator("listeners", "advertised_listeners", mode="before")
    @classmethod
    def _parse_listeners(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        out = []
        for item in _csv(value):
            name, sep, rest = item.partition("://")
            if not sep or not name:
                raise ValueError(f"listener {item!r} is not NAME://host:port")
            host, port = _split_host_port(rest, "listener")
            out.append({"name": name, "host": host, "port": port})
        return out

    @field_validator("quorum_voters", mode="before")
    @classmethod
    def _parse_voters(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        out = []
        for item in _csv(value):
            ident, sep, rest = item.partition("@")
            if not sep or not ident.strip().isdigit():
                raise ValueError(f"voter {item!r} is not id@host:port")
            host, port = _split_host_port(rest, "voter")
            if host == "0.0.0.0":
                raise ValueError(f"voter {item!r}: host 0.0.0.0 is not a reachable address")
            out.append({"node_id": int(ident), "host": host, "port": port})
        return out

    @field_validator("bootstrap_servers", mode="before")
    @classmethod
    def _parse_bootstrap(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        out = []
        for item in _csv(value):
            host, port = _split_host_port(item, "bootstrap server")
            out.append({"host": host, "port": port})
        return out

    @field_validator("http_listener", "client_listener", mode="before")
    @classmethod
    def _parse_http(cls, value: Any) -> Any:
        if isinstance(value, str):
            host, port = _split_host_port(value, "listener")
            return {"host": host, "port": port}
        return value

    @field_validator("http_peers", mode="before")
    @classmethod
    def _parse_http_peers(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        out: dict[int, str] = {}
        for item in _csv(value):
            ident, sep, rest = item.partition("@")
            if not sep or not ident.strip().isdigit():
                raise ValueError(f"http peer {item!r} is not id@host:port")
            host, port = _split_host_port(rest, "http peer")
            out[int(ident)] = f"{host}:{port}"
        return out

    @field_validator("auto_join_enable", "fsync", "lane_follower", "lane_leader", mode="before")
    @classmethod
    def _parse_bool(cls, value: Any) -> Any:
        if isinstance(value, str):
            low = value.strip().lower()
            if low not in ("true", "false"):
                raise ValueError(f"expected true or false, got {value!r}")
            return low == "true"
        return value

    @field_validator("flush_kernel", mode="before")
    @classmethod
    def _parse_engine(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return "auto" if value else "off"
        if isinstance(value, str):
            low = value.strip().lower()
            return {"true": "auto", "false": "off"}.get(low, low)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> NodeConfig:
        names = {listener.name for listener in self.listeners}
        if len(names) != len(self.listeners):
            raise ValueError("listeners: a listener name appears twice")
        if not self.controller_listener_names:
            raise ValueError("controller.listener.names: at least one name is required")
        first = self.controller_listener_names[0]
        if first not in names:
            raise ValueError(
                f"controller.listener.names: {first!r} is not one of listeners {sorted(names)}"
            )
        if not self.quorum_voters and not self.bootstrap_servers:
            raise ValueError(
                "one of controller.quorum.voters or controller.quorum.bootstrap.servers is required"
            )
        ids = [v.node_id for v in self.quorum_voters]
        if len(set(ids)) != len(ids):
            raise ValueError(f"controller.quorum.voters: duplicate node id in {ids}")
        if self.metadata_log_dir is None and not self.log_dirs:
            raise ValueError("metadata.log.dir (or log.dirs) is required")
        return self

    @property
    def controller_listener(self) -> ListenerAddress:
        """The bound listener raft uses (the first of controller.listener.names)."""
        name = self.controller_listener_names[0]
        return next(item for item in self.listeners if item.name == name)

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
    def metadata_dir(self) -> Path:
        """The metadata log directory (metadata.log.dir, else the first of log.dirs)."""
        return Path(self.metadata_log_dir if self.metadata_log_dir else self.log_dirs[0])


def known_keys() -> list[str]:
    """Every property name a node accepts."""
    return sorted(str(f.alias) for f in NodeConfig.model_fields.values())


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
        if key not in known:
            raise ConfigError(f"unknown configuration key {key!r}")
    try:
        return NodeConfig.model_validate(merged)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"]) if err["loc"] else ""
            key = loc.split(".")[0] if loc.split(".")[0] in known else loc
            # nested locations look like "listeners.0.port"; name the property
            for candidate in sorted(known, key=len, reverse=True):
                if loc == candidate or loc.startswith(candidate + "."):
                    key = candidate
                    break
            where = f" (from {origin[key]})" if key in origin else ""
            label = key or "configuration"
            problems.append(f"{label}{where}: {err['msg']}")
        raise ConfigError("invalid configuration: " + "; ".join(problems)) from None


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> NodeConfig:
    """Read a properties file and apply `KRAFT_*` overrides (from `os.environ` by default)."""
    try:
        props = read_properties(path)
    except PropertiesSyntaxError as exc:
        raise ConfigError(str(exc)) from None
    return build_config(props, os.environ if environ is None else environ)
