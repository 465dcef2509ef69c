"""`ServerProperties`: the one model of `server.properties` (every key a node or `kraft format`
knows), its reader and its writer.

Reading follows Java's `Properties.load` (`kraft.config.properties`: `#`/`!` comments, `=`,
`:` or whitespace between key and value, backslash escapes and continuation lines). Every
known key is checked on its own (its type and range); what a node needs to run as a whole
(a controller listener that exists, a quorum to join) is checked by `kraft run`
(`kraft.config.node`). Keys the model does not know are kept as they are, as Kafka keeps
them (it only warns): `unknown_keys()` lists them and the writer writes them back.
For a user's overrides (an operator resource's `config`), `validate_overrides` names every
unknown key and every bad value instead.

Errors name the key and the value: `ServerPropertiesError.problems` holds one
`PropertyProblem(key, value, message)` per problem.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from kraft.config.address import parse_host_port
from kraft.config.properties import (
    PropertiesSyntaxError,
    parse_properties,
    read_properties,
)
from kraft.config.security import (
    SecurityConfigError,
    authorizer_settings,
    is_listener_security_key,
    ssl_settings,
)

ROLES = ("broker", "controller")
"""The values of `process.roles` Kafka knows (a kraft node runs `controller` only)."""


class ListenerAddress(BaseModel):
    """One `NAME://host:port` listener."""

    model_config = ConfigDict(frozen=True)

    name: str
    host: str
    port: int = Field(ge=0, le=65535)

    def __str__(self) -> str:
        return f"{self.name}://{_host(self.host)}:{self.port}"


class VoterAddress(BaseModel):
    """One `id@host:port` entry of `controller.quorum.voters`."""

    model_config = ConfigDict(frozen=True)

    node_id: int = Field(ge=0)
    host: str
    port: int = Field(ge=1, le=65535)

    def __str__(self) -> str:
        return f"{self.node_id}@{_host(self.host)}:{self.port}"


class HostPort(BaseModel):
    """A `host:port` pair (bootstrap servers, the admin HTTP listener)."""

    model_config = ConfigDict(frozen=True)

    host: str
    port: int = Field(ge=0, le=65535)

    def __str__(self) -> str:
        return f"{_host(self.host)}:{self.port}"


def _host(host: str) -> str:
    """A host as written in an address: an IPv6 literal in brackets."""
    return f"[{host}]" if ":" in host else host


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
"""Kafka's security protocols (`listener.security.protocol.map`'s values)."""

SERVED_PROTOCOLS = ("PLAINTEXT", "SSL")
"""The security protocols a kraft node's listeners implement (SASL is not implemented)."""

UNSERVED_KEY_PREFIXES = ("sasl.", "listener.name.")
"""Keys that configure what a node does not implement (SASL, `listener.name.<l>.sasl.*` and
any other per-listener key but the TLS ones): refused by name, so that security asked for is
never silently dropped."""

NO_SASL = ("SASL is not implemented: a listener speaks PLAINTEXT or SSL (a node refuses to "
           "start rather than serve without the security asked for)")


def security_key_problem(key: str) -> str | None:
    """Why `key` cannot be used (it configures SASL, or a per-listener setting other than
    TLS), or None for any other key."""
    if is_listener_security_key(key):
        return None
    if key.startswith(UNSERVED_KEY_PREFIXES):
        return f"{key}: {NO_SASL}"
    return None


OVERRIDE_SECURITY_PREFIXES = ("ssl.", "sasl.", "security.", "listener.name.", "super.users",
                              "kraft.authorizer.")
"""Keys a user's overrides (an operator resource's `config`) may not set: the nodes' TLS
and authorization come with the certificates the operator mounts, which it does not
issue yet."""

NO_OPERATOR_TLS = ("TLS and SASL are not implemented by the operator yet: its quorums speak "
                   "PLAINTEXT (a node serves TLS from its own server.properties, "
                   "docs/security.md)")


def _parse_protocol_map(value: str) -> dict[str, str]:
    """`NAME:PROTOCOL,...` as a mapping; a malformed entry or an unknown protocol raises."""
    out: dict[str, str] = {}
    for item in _csv(value):
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip(), protocol.strip().upper()
        if not sep or not name or not protocol:
            raise ValueError(f"entry {item!r} is not LISTENER_NAME:SECURITY_PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"listener {name}: unknown security protocol {protocol!r} "
                             f"(Kafka's are {', '.join(SECURITY_PROTOCOLS)})")
        if name in out:
            raise ValueError(f"listener {name} appears twice")
        out[name] = protocol
    return out


def _csv(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(v).strip() for v in value if str(v).strip()]
    return [part.strip() for part in str(value).split(",") if part.strip()]




class ServerProperties(BaseModel):
    """The properties of `server.properties`, typed (property names are the aliases).

    Timeouts and intervals are milliseconds, as in Kafka. Unknown keys are kept (see the
    module docstring). Build one with `read`, `parse`, `from_mapping` or the constructor
    with property names as keywords; write one with `to_properties`, `render` or `write`.
    """

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    node_id: int = Field(alias="node.id", ge=0)
    process_roles: list[str] = Field(alias="process.roles")
    listeners: list[ListenerAddress] = Field(default=[], alias="listeners")
    advertised_listeners: list[ListenerAddress] = Field(default=[], alias="advertised.listeners")
    controller_listener_names: list[str] = Field(default=[], alias="controller.listener.names")
    listener_security_protocol_map: str = Field(
        default="", alias="listener.security.protocol.map"
    )
    """`NAME:PROTOCOL,...` as in Kafka (`security_protocol` resolves a listener's). A node
    serves PLAINTEXT and SSL: `kraft run` refuses SASL_*, naming this key."""
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
    log_dir: str | None = Field(default=None, alias="log.dir")
    """Kafka's single-directory form; `log.dirs` wins when both are set."""
    segment_bytes: int = Field(default=1 << 30, alias="metadata.log.segment.bytes", ge=1024)
    snapshot_max_bytes_between: int = Field(
        default=20 * 1024 * 1024, alias="metadata.log.max.record.bytes.between.snapshots", ge=1
    )
    snapshot_interval_ms: int = Field(
        default=3_600_000, alias="metadata.log.max.snapshot.interval.ms", ge=0
    )
    fetch_snapshot_max_bytes: int = Field(
        default=8 * 1024 * 1024, ge=1, alias="controller.quorum.fetch.snapshot.max.bytes")
    """FetchSnapshot's MaxBytes: the most a follower asks for in one chunk of a snapshot
    download (Kafka 4.2, KIP-1219; 8 MiB as Kafka's fixed value before it)."""
    retention_max_bytes: int = Field(default=104_857_600, alias="metadata.max.retention.bytes")
    """Kafka's soft limit on the log plus its snapshots: while they hold more, the leader's
    retention check deletes the oldest snapshot and moves the log start up to the next one
    (never the latest snapshot, nor one a FetchSnapshot is reading; docs/raft.md,
    "Snapshot retention"). Negative: no limit."""
    retention_max_ms: int = Field(default=604_800_000, alias="metadata.max.retention.ms")
    """The same for age: a snapshot whose last record is older than this goes (while a newer
    snapshot exists). Negative: no limit."""
    retention_check_interval_ms: int = Field(
        default=60_000, ge=1, alias="kraft.metadata.retention.check.interval.ms")
    """How often the leader applies the two limits above (Kafka's fixed 60 s)."""
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
    GIL (sequential writes ~0.1 ms faster, docs/journal/perf-16-kernel-fsync-aio.md and perf-17-io-uring-fsync.md). Flushes that
    must also persist a new segment file or the leader-epoch checkpoint still run inline."""
    preallocate_bytes: int = Field(default=0, ge=0, le=1 << 30, alias="kraft.log.preallocate.bytes")
    """0 (the default, as Kafka's `log.preallocate=false`): segment files end at their last batch.
    Above 0: the active segment keeps this many zero-filled, synced bytes ahead of its end, and a
    follower writes the records it fetched there with `O_DIRECT | O_DSYNC` instead of writing
    them to the page cache and then calling `fdatasync` (no size change to journal, no page
    writeback to wait for: a sequential write ~0.08 ms faster on this project's test machines,
    docs/journal/perf-27-write-through.md). After a crash the active segment ends in up to this many
    zeros, which the next start trims; a roll and a clean shutdown leave no zeros. Rounded up
    to 4 KiB; falls back to the page cache where the filesystem refuses `O_DIRECT`; ignored
    with `kraft.log.fsync=false` (nothing is synced then)."""
    lane_follower: bool = Field(default=True, alias="kraft.lane.follower")
    """true (the default): a follower in the steady state of an epoch hands its fetches to the
    native lane (`kraft.lane.follower`, docs/native-lane.md), a loop in C on a
    thread of its own that writes, syncs and acknowledges the leader's records without the
    interpreter, and reports to the core every `kraft.lane.tick.ms` and before a local read.
    false: the Python path does it all. Ignored (with a warning) where the extension was not
    built or with `kraft.log.fsync=false`."""
    lane_leader: bool = Field(default=True, alias="kraft.lane.leader")
    """true (the default): a leader in the steady state of its epoch hands the binary client
    protocol's connection (when it is the only one), its voters' fetch connections and the
    active segment to the native lane (`kraft.lane.leader`, docs/native-lane.md), a loop in C on
    a thread of its own that batches the PUTs, writes, replicates and syncs them, counts the
    voters' acknowledgements, and answers each PUT at its commit; it reports to the core every
    `kraft.lane.tick.ms` and before a local read. false: the Python path does it all
    (docs/tuning.md, "The native lanes", has both measured). Ignored (with a warning) where the
    extension was not built or with `kraft.log.fsync=false`."""
    lane_tick_ms: int = Field(default=2, ge=1, le=60_000, alias="kraft.lane.tick.ms")
    """How often, in ms, the node takes a running lane's progress into the core (a follower's:
    its log end, durable end, high watermark and fetch deadline; a leader's: its appends, the
    voters' rows and the high watermark; the apply follows). A check that finds nothing new
    doubles the period, up to 50 ms, until one finds progress again
    (`kraft.lane.ticker`). A local read takes it at once whatever the period, and a
    follower's lane wakes the node for a new high watermark, or for records while the node's
    loop sleeps (docs/native-lane.md, "the bookkeeping tick")."""
    socket_request_max_bytes: int = Field(default=104_857_600, ge=1,
                                          alias="socket.request.max.bytes")
    """The largest request frame a listener takes (Kafka's name and default); a larger size
    prefix closes the connection before anything is allocated. The binary client protocol
    takes at most its own 16 MiB whatever this says."""
    max_connections: int = Field(default=2_147_483_647, ge=0, alias="max.connections")
    """The open connections of each listener (controller, binary client, admin HTTP); one
    more is closed at accept (Kafka's name and default, counted per listener as Kafka's
    `listener.name.<l>.max.connections`)."""
    max_connections_per_ip: int = Field(default=2_147_483_647, ge=0,
                                        alias="max.connections.per.ip")
    """The open connections of each listener from one address (Kafka's name and default)."""
    max_connections_per_ip_overrides: dict[str, int] = Field(
        default={}, alias="max.connections.per.ip.overrides")
    """`host:count` pairs, comma-separated: another per-address limit for these addresses."""
    connections_max_idle_ms: int = Field(default=600_000, alias="connections.max.idle.ms")
    """A connection with nothing read or written for this long (no request in flight, not
    lent to a native lane) is closed (Kafka's name and default); negative: never."""
    socket_buffered_max_bytes: int = Field(default=128 * 1024 * 1024, ge=1,
                                           alias="kraft.socket.buffered.max.bytes")
    """The bytes all connections of the node together may hold in request frames not
    complete yet; over it, the connection holding the most is closed."""
    http_max_connections: int = Field(default=1000, ge=1, alias="kraft.http.max.connections")
    """The admin HTTP server's open connections (below `max.connections` when that is lower)."""
    http_header_timeout_ms: int = Field(default=10_000, ge=1,
                                        alias="kraft.http.header.timeout.ms")
    """An HTTP request whose headers are not complete this long after its first byte is
    closed (a slow client cannot hold a connection by sending its headers a byte at a time)."""
    http_body_timeout_ms: int = Field(default=30_000, ge=1, alias="kraft.http.body.timeout.ms")
    """An HTTP request whose body has not all arrived this long after its headers is closed."""
    # The HTTP port's TLS and authentication (`kraft.config.http_security`, docs/security.md).
    http_ssl_keystore_type: str = Field(default="PEM", alias="kraft.http.ssl.keystore.type")
    """The keystore's format: PEM only (Kafka's `ssl.keystore.type=PEM`)."""
    http_ssl_keystore_location: str = Field(default="", alias="kraft.http.ssl.keystore.location")
    """A PEM file with the HTTP port's private key and certificate chain: set, the port speaks
    HTTPS only. Re-read for new connections when it changes (no restart)."""
    http_ssl_key_password: str = Field(default="", alias="kraft.http.ssl.key.password")
    """The password of an encrypted private key in the keystore."""
    http_ssl_truststore_type: str = Field(default="PEM", alias="kraft.http.ssl.truststore.type")
    """The truststore's format: PEM only."""
    http_ssl_truststore_location: str = Field(default="", alias="kraft.http.ssl.truststore.location")
    """A PEM file of the CAs that client certificates must chain to; re-read as the keystore."""
    http_ssl_client_auth: Literal["none", "requested", "required"] = Field(
        default="none", alias="kraft.http.ssl.client.auth")
    """Kafka's `ssl.client.auth` for the HTTP port: `requested` verifies a client certificate
    when one is sent (a request may carry a token instead, and the kubelet's probes need
    neither); `required` refuses a connection without one (probes fail too)."""
    http_auth_token_file: str = Field(default="", alias="kraft.http.auth.token.file")
    """Bearer tokens (`token,name,scope` lines, docs/security.md): set, every route but
    /healthz and /readyz needs a token or a client certificate of enough scope. Re-read when
    it changes, so tokens rotate without a restart."""
    http_auth_read_principals: str = Field(default="", alias="kraft.http.auth.read.principals")
    """Client certificate principals (`User:CN=...;User:...`) with the read scope."""
    http_auth_write_principals: str = Field(default="",
                                            alias="kraft.http.auth.write.principals")
    """Client certificate principals with the write scope (and read)."""
    http_auth_admin_principals: str = Field(default="",
                                            alias="kraft.http.auth.admin.principals")
    """Client certificate principals with the admin scope (export; and write, read)."""

    @field_validator("http_ssl_client_auth", mode="before")
    @classmethod
    def _lower_client_auth(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value  # as Kafka reads it
    event_loop: Literal["auto", "asyncio", "uvloop"] = Field(default="auto", alias="kraft.event.loop")
    """`auto`: uvloop when it is installed (less CPU per request), else asyncio's loop."""

    # ---- TLS (Kafka's names; `listener.name.<l>.ssl.*` wins, `kraft.config.security`)
    ssl_keystore_type: str | None = Field(default=None, alias="ssl.keystore.type")
    """PEM (the only type read: no JKS, no PKCS12)."""
    ssl_keystore_location: str | None = Field(default=None, alias="ssl.keystore.location")
    """A PEM file holding the private key and the certificate chain (leaf first); re-read
    for new connections when it changes."""
    ssl_keystore_password: str | None = Field(default=None, alias="ssl.keystore.password")
    """Accepted for Kafka's configuration; a PEM keystore has no store password (the key's
    is `ssl.key.password`)."""
    ssl_keystore_key: str | None = Field(default=None, alias="ssl.keystore.key")
    """The private key as inline PEM (with `ssl.keystore.certificate.chain`)."""
    ssl_keystore_certificate_chain: str | None = Field(
        default=None, alias="ssl.keystore.certificate.chain")
    """The certificate chain as inline PEM, leaf first."""
    ssl_key_password: str | None = Field(default=None, alias="ssl.key.password")
    """The password of an encrypted private key."""
    ssl_truststore_type: str | None = Field(default=None, alias="ssl.truststore.type")
    """PEM (the only type read)."""
    ssl_truststore_location: str | None = Field(default=None, alias="ssl.truststore.location")
    """A PEM file of the CA certificates a peer's certificate must chain to; re-read for new
    connections when it changes."""
    ssl_truststore_password: str | None = Field(default=None, alias="ssl.truststore.password")
    """Accepted for Kafka's configuration; a PEM truststore has no password."""
    ssl_truststore_certificates: str | None = Field(default=None,
                                                    alias="ssl.truststore.certificates")
    """The trusted CA certificates as inline PEM."""
    ssl_client_auth: str | None = Field(default=None, alias="ssl.client.auth")
    """required (a client without a certificate the truststore trusts is refused),
    requested (one is asked for, a client without one is served as User:ANONYMOUS) or none
    (Kafka's default)."""
    ssl_endpoint_identification_algorithm: str | None = Field(
        default=None, alias="ssl.endpoint.identification.algorithm")
    """https (when unset, as in Kafka): a node's outgoing connections check that the peer's
    certificate names the host they dialled (a DNS or IP SAN); empty: no host check."""
    ssl_enabled_protocols: str | None = Field(default=None, alias="ssl.enabled.protocols")
    """The versions a handshake may settle on (when unset: TLSv1.2,TLSv1.3)."""
    ssl_protocol: str | None = Field(default=None, alias="ssl.protocol")
    """Accepted for Kafka's configuration (TLSv1.3); `ssl.enabled.protocols` decides."""
    ssl_cipher_suites: str | None = Field(default=None, alias="ssl.cipher.suites")
    """OpenSSL cipher names for TLSv1.2 (TLSv1.3's suites are OpenSSL's defaults); empty:
    the defaults."""
    ssl_principal_mapping_rules: str | None = Field(default=None,
                                                    alias="ssl.principal.mapping.rules")
    """DEFAULT (the certificate's distinguished name, `User:CN=...,O=...`) or a list of
    `RULE:pattern/replacement/[LU]` as in Kafka."""

    # ---- authorization (docs/security.md: the static equivalent of Kafka's ACLs)
    super_users: str | None = Field(default=None, alias="super.users")
    """`User:name;User:other`: principals allowed every operation."""
    authorizer_cluster_action_principals: str | None = Field(
        default=None, alias="kraft.authorizer.cluster.action.principals")
    """Principals granted ClusterAction (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch,
    FetchSnapshot, UpdateRaftVoter, ControllerRegistration, forwarded KV calls): the nodes."""
    authorizer_alter_principals: str | None = Field(
        default=None, alias="kraft.authorizer.alter.principals")
    """Principals granted Alter (AddRaftVoter, RemoveRaftVoter, UpdateFeatures; implies
    Describe): the operators."""
    authorizer_describe_principals: str | None = Field(
        default=None, alias="kraft.authorizer.describe.principals")
    """Principals granted Describe (DescribeQuorum, DescribeCluster)."""
    authorizer_node_principal_pattern: str | None = Field(
        default=None, alias="kraft.authorizer.node.principal.pattern")
    """A regular expression whose first group, searched in a principal's name, is the node id
    that principal may claim in a request (default: an RDN `CN=node-<id>`)."""


    @field_validator("process_roles", "controller_listener_names", "log_dirs", mode="before")
    @classmethod
    def _parse_csv(cls, value: Any) -> list[str]:
        return _csv(value)

    @field_validator("process_roles")
    @classmethod
    def _known_roles(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError(f"at least one role is required ({', '.join(ROLES)})")
        for role in value:
            if role not in ROLES:
                raise ValueError(f"unknown role {role!r} ({', '.join(ROLES)})")
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
                raise ValueError(f"bad listener {item!r}: expected NAME://host:port")
            host, port = parse_host_port(rest, "listener")
            out.append({"name": name, "host": host, "port": port})
        return out

    @field_validator("listener_security_protocol_map")
    @classmethod
    def _check_protocol_map(cls, value: str) -> str:
        _parse_protocol_map(value)
        return value

    @model_validator(mode="after")
    def _security(self) -> Self:
        props = self.to_properties()
        try:
            for listener in self.listeners:
                ssl_settings(props, listener.name)
            authorizer_settings(props)
        except SecurityConfigError as exc:
            raise ValueError(str(exc)) from None
        return self

    def security_protocol(self, listener: str) -> str | None:
        """The security protocol of listener `listener`, as Kafka resolves it: the entry of
        `listener.security.protocol.map`; with no map set, a listener named after a protocol
        has that protocol and a controller listener is PLAINTEXT; None when nothing defines
        it (Kafka refuses such a listener)."""
        if self.listener_security_protocol_map.strip():
            return _parse_protocol_map(self.listener_security_protocol_map).get(listener)
        if listener in SECURITY_PROTOCOLS:
            return listener
        if listener in self.controller_listener_names:
            return "PLAINTEXT"
        return None

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
            host, port = parse_host_port(rest, "voter")
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
            host, port = parse_host_port(item, "bootstrap server")
            out.append({"host": host, "port": port})
        return out

    @field_validator("http_listener", "client_listener", mode="before")
    @classmethod
    def _parse_http(cls, value: Any) -> Any:
        if isinstance(value, str):
            host, port = parse_host_port(value, "listener")
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
            host, port = parse_host_port(rest, "http peer")
            out[int(ident)] = f"{_host(host)}:{port}"
        return out

    @field_validator("max_connections_per_ip_overrides", mode="before")
    @classmethod
    def _parse_ip_overrides(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        out: dict[str, int] = {}
        for item in _csv(value):
            host, sep, count = item.rpartition(":")
            if not sep or not host or not count.strip().isdigit():
                raise ValueError(f"override {item!r} is not host:count")
            out[host.strip().strip("[]")] = int(count)
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


    # ------------------------------------------------------------------ directories

    @property
    def log_directories(self) -> list[Path]:
        """The data directories: `log.dirs`, else `log.dir`, else none."""
        if self.log_dirs:
            return [Path(d) for d in self.log_dirs]
        return [Path(self.log_dir)] if self.log_dir else []

    @property
    def metadata_directory(self) -> Path | None:
        """The metadata log directory: `metadata.log.dir`, else the first data directory."""
        if self.metadata_log_dir:
            return Path(self.metadata_log_dir)
        dirs = self.log_directories
        return dirs[0] if dirs else None

    # ------------------------------------------------------------------ reading

    @classmethod
    def known_keys(cls) -> list[str]:
        """Every property name the model knows, sorted."""
        return sorted(str(f.alias) for f in cls.model_fields.values())

    @classmethod
    def from_mapping(cls, props: Mapping[str, object],
                     source: str = "server.properties") -> Self:
        """Validate property names and values (as a parsed file holds them; ints and bools
        are accepted and read as their text). Raises ServerPropertiesError naming every bad
        key and value, with `source` (a file name) in front."""
        values = {str(k): _text(v) for k, v in props.items()}
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise ServerPropertiesError(source, problems_of(exc, values)) from None

    @classmethod
    def parse(cls, text: str, source: str = "<properties>") -> Self:
        """Parse properties text (Java syntax) and validate it."""
        try:
            props = parse_properties(text, source)
        except PropertiesSyntaxError as exc:
            raise ServerPropertiesError(source, [PropertyProblem(key="", message=str(exc))],
                                        ) from None
        return cls.from_mapping(props, source)

    @classmethod
    def read(cls, path: str | Path) -> Self:
        """Read and validate a properties file (UTF-8)."""
        try:
            props = read_properties(path)
        except PropertiesSyntaxError as exc:
            raise ServerPropertiesError(str(path), [PropertyProblem(key="", message=str(exc))],
                                        ) from None
        except OSError as exc:
            raise ServerPropertiesError(str(path), [PropertyProblem(
                key="", message=f"cannot read: {exc.strerror or exc}")]) from None
        return cls.from_mapping(props, str(path))

    def unknown_keys(self) -> dict[str, str]:
        """The keys this model does not know, with their values (kept, as Kafka keeps them)."""
        return {k: str(v) for k, v in (self.model_extra or {}).items()}

    # ------------------------------------------------------------------ writing

    def to_properties(self, *, include_defaults: bool = False) -> dict[str, str]:
        """The properties as text values, keyed by property name: the keys that were set
        (every known key with `include_defaults`), then the unknown keys kept."""
        out: dict[str, str] = {}
        for name, info in type(self).model_fields.items():
            if not include_defaults and name not in self.model_fields_set:
                continue
            value = getattr(self, name)
            if value is None:
                continue
            if name == "max_connections_per_ip_overrides":  # Kafka's host:count, not id@address
                out[str(info.alias)] = ",".join(f"{_host(k)}:{v}" for k, v in value.items())
            else:
                out[str(info.alias)] = _render(value)
        out.update(self.unknown_keys())
        return out

    def render(self, comment: str | None = None) -> str:
        """The `server.properties` text: optional `#` comment lines, then sorted `key=value`
        lines escaped so that `parse` reads back the same properties."""
        lines = [f"# {line}".rstrip() for line in (comment or "").splitlines()]
        props = self.to_properties()
        lines += [f"{_escape(key, key=True)}={_escape(props[key], key=False)}"
                  for key in sorted(props)]
        return "\n".join(lines) + "\n"

    def with_overrides(self, overrides: Mapping[str, object],
                       source: str = "overrides") -> Self:
        """A copy with `overrides` applied on top, validated as a whole."""
        merged = {**self.to_properties(), **{str(k): _text(v) for k, v in overrides.items()}}
        return type(self).from_mapping(merged, source)

    @classmethod
    def validate_overrides(cls, overrides: Mapping[str, object], *,
                           reserved: Collection[str] = ()) -> list[PropertyProblem]:
        """Check user-given properties (e.g. an operator resource's `config`): every key
        that is unknown (with the nearest known key as a hint), `reserved` (set by the
        caller itself) or whose value is bad gets one problem. An empty list means valid."""
        known = set(cls.known_keys())
        problems: list[PropertyProblem] = []
        candidates: dict[str, str] = {}
        for raw_key, raw_value in overrides.items():
            key, value = str(raw_key), _text(raw_value)
            if key in reserved:
                problems.append(PropertyProblem(key=key, value=value,
                                                message="may not be overridden"))
            elif key.startswith(OVERRIDE_SECURITY_PREFIXES):
                problems.append(PropertyProblem(key=key, value=value, message=NO_OPERATOR_TLS))
            elif key not in known:
                near = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f"; did you mean {near[0]!r}?" if near else ""
                problems.append(PropertyProblem(key=key, value=value,
                                                message=f"unknown key{hint}"))
            else:
                candidates[key] = value
        base = {"node.id": "0", "process.roles": "controller", **candidates}
        try:
            cls.model_validate(base)
        except ValidationError as exc:
            problems += [p for p in problems_of(exc, base) if p.key in candidates]
        return problems


class PropertyProblem(BaseModel):
    """One bad property: its key ("" for the file as a whole), its value (None when the key
    is missing) and what is wrong."""

    model_config = ConfigDict(frozen=True)

    key: str
    value: str | None = None
    message: str

    def __str__(self) -> str:
        if not self.key:
            return self.message
        if self.value is None:
            return f"{self.key}: {self.message}"
        return f"{self.key}={self.value!r}: {self.message}"


class ServerPropertiesError(ValueError):
    """Properties that cannot be accepted; `problems` names each key and value."""

    def __init__(self, source: str, problems: list[PropertyProblem]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(str(p) for p in problems))


_CONTROL_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}


def _escape(text: str, *, key: bool) -> str:
    """Escape for a properties line. Unlike Java's `store`, a value keeps its `=`, `:`, `#`
    and `!` as they are (only a key's end and a line's start give them a meaning), so a
    rendered file stays readable: `listeners=CONTROLLER://0.0.0.0:9093`."""
    out: list[str] = []
    for i, c in enumerate(text):
        if c == "\\":
            out.append("\\\\")
        elif c in _CONTROL_ESCAPES:
            out.append(_CONTROL_ESCAPES[c])
        elif key and c in "=: #!":
            out.append("\\" + c)
        elif c == " " and i == 0:
            out.append("\\ ")
        elif ord(c) > 0xFFFF:  # as Java writes it: a UTF-16 surrogate pair
            pair = c.encode("utf-16-be")
            out.append(f"\\u{pair[:2].hex().upper()}\\u{pair[2:].hex().upper()}")
        elif ord(c) < 0x20 or ord(c) > 0x7E:
            out.append(f"\\u{ord(c):04X}")
        else:
            out.append(c)
    return "".join(out)


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _render(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(_render(v) for v in value)
    if isinstance(value, dict):
        return ",".join(f"{k}@{v}" for k, v in value.items())
    return str(value)


def _phrase(err: Mapping[str, Any]) -> str:
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    bounds = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=",
              "less_than": "<"}
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "unknown key"
    if kind in ("int_parsing", "int_from_float", "int_type"):
        return "not an integer"
    if kind in ("bool_parsing", "bool_type"):
        return "expected true or false"
    if kind in bounds:
        limit = next(iter(ctx.values()), "?")
        return f"must be {bounds[kind]} {limit}"
    if kind == "literal_error":
        return f"expected {ctx.get('expected', 'one of the allowed values')}"
    msg = str(err.get("msg", "invalid"))
    return msg.removeprefix("Value error, ")


def problems_of(exc: ValidationError, values: Mapping[str, str]) -> list[PropertyProblem]:
    """One PropertyProblem per pydantic error, named by property (nested places such as a
    listener's port are named after it)."""
    out: list[PropertyProblem] = []
    for err in exc.errors():
        loc = [str(part) for part in err["loc"]]
        key = loc[0] if loc else ""
        where = " ".join(f"entry {int(p) + 1}" if p.isdigit() else p for p in loc[1:])
        message = _phrase(err)
        out.append(PropertyProblem(key=key, value=values.get(key) if key else None,
                                   message=f"{where}: {message}" if where else message))
    return out
