"""A hostile client: a separate process that attacks every port of every node of a loopback
quorum with bad input, for the process tests and the node soak.

It holds no credential and uses none of the node's code: Kafka frames are built here by hand
or, for Fetch and ApiVersions, with kafka-python's codecs (an independent encoder); the binary KV client protocol (`kraft.server.client_protocol`) and HTTP
(`kraft.server.http_api`) are written as raw bytes. `HostileClient` (the test's side) starts
`python -m tests.support.hostile` with a JSON config, stops it, and reads back what it sent.

The attacks, each a `kind` counted in the report (per port):

* controller listener (Kafka protocol): random garbage; size prefixes that are negative, past
  `socket.request.max.bytes`, or that lie (promise more than follows, then close); truncated
  frames then close; a valid header with a garbage body; unknown api keys and unsupported
  versions; a header whose client id overruns; Vote, BeginQuorumEpoch and EndQuorumEpoch with
  epoch 2**31-1 or negative epochs, replica ids of real voters, negative offsets; Fetch and
  FetchSnapshot with the same absurd values; the project's ForwardKv with a 30 KB key, a
  12 MiB value or lying lengths;
* binary KV client port: garbage, lengths too large or too small, truncated frames, keys that
  overrun the frame or are not UTF-8, unknown ops, 12 MiB PUTs, 30 KB keys, a pipeline of
  requests then a close without reading; a request answered, a quiet moment (a leader may lend
  the connection to its native lane then), and one bad frame of each of those variants in turn;
* admin HTTP port: garbage, headers or bodies trickled byte by byte and never finished, a body
  shorter than its Content-Length, 12 MiB PUTs (with a length and chunked), 30 KB keys, bad
  Content-Length and chunk sizes, bad CAS bodies, bad percent-encoding, a 100 KB header.

What it never sends: membership changes (AddRaftVoter, RemoveRaftVoter, UpdateRaftVoter,
UpdateFeatures) and well-formed Fetches that impersonate a voter with a plausible epoch.
Without authentication those can lose writes in any KRaft quorum; authentication is a concern
of its own. Garbage whose bytes happen to spell one of those api keys is changed first.

Plausible Votes, labelled `vote_plausible` and `prevote_plausible`, are sent at a low rate
(`vote_interval` seconds apart, none with `plausible_votes=False`): a Vote one epoch ahead,
either for a replica id that is no voter (with a long log: it may be granted, and costs an
election) or for a real voter with an empty log (never granted); a PreVote at the current
epoch. They cost availability, never data. A forged Vote for a real voter with a longer log
than that voter's own is never sent: Kafka's voters grant a candidate they voted for in an
epoch again without comparing logs, so under Kafka's rules the real voter's own request of
that epoch would win with a stale log.

Every write the attacks might get applied uses keys starting `hostile-`, apart from any
workload's keys. Targets must be loopback addresses; the run is bounded by `seconds` and
`max_attacks`, every connection by `io_timeout`. Each worker draws from its own
`random.Random` seeded from `seed`, so a run's choices repeat (their timing does not).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
MEMBERSHIP_API_KEYS = frozenset({57, 80, 81, 82})
"""UpdateFeatures, AddRaftVoter, RemoveRaftVoter, UpdateRaftVoter: never sent."""
SERVED_API_KEYS = (1, 18, 52, 53, 54, 55, 59, 60, 70)
FORWARD_KV_API_KEY = 32000
METADATA_TOPIC = "__cluster_metadata"
METADATA_TOPIC_ID = uuid.UUID(int=1)
BIG_VALUE_BYTES = 12 * 1024 * 1024
LONG_KEY_BYTES = 30_000
ABSURD_EPOCHS = (INT32_MAX, INT32_MAX, INT32_MAX, -1, -2, INT32_MIN)
ABSURD_OFFSETS = (-1, -2, -(2**63), -12345)
ROOT = Path(__file__).resolve().parents[2]

CONTROLLER, CLIENT, HTTP = "controller", "client", "http"


@dataclass(frozen=True)
class Target:
    """One node's addresses."""

    node_id: int
    host: str
    controller_port: int
    client_port: int
    http_port: int


def targets_of(nodes: Iterable[Any]) -> list[Target]:
    """Every port of every node (anything with `node_id`, `host`, `port`, `client_port` and
    `http_port`, such as a `LocalCluster`'s nodes)."""
    return [Target(n.node_id, n.host, n.port, n.client_port, n.http_port) for n in nodes]


@dataclass
class HostileReport:
    """What a run sent: attacks per kind, and per "kind outcome" (answered, closed, refused,
    timeout, reset, or the error code a Kafka answer carried)."""

    sent: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)
    attacks: int = 0
    seconds: float = 0.0
    max_epoch_seen: int = -1

    def summary(self) -> str:
        """One line per kind, for a test's printout."""
        lines = [f"hostile client: {self.attacks} attacks in {self.seconds:.1f} s, "
                 f"highest epoch seen {self.max_epoch_seen}"]
        for kind in sorted(self.sent):
            outs = ", ".join(f"{o.split(' ', 1)[1]} {n}" for o, n in sorted(self.outcomes.items())
                             if o.split(" ", 1)[0] == kind)
            lines.append(f"  {kind}: {self.sent[kind]} ({outs})")
        return "\n".join(lines)


class HostileClient:
    """Runs the hostile client in its own process (the test's side).

    `start()` launches it; `stop()` ends it early (SIGTERM), `wait()` lets it finish; both
    return its `HostileReport`. Use it as a context manager so the process never outlives the
    test. `kinds` narrows the attacks to those named (default: all)."""

    def __init__(self, targets: list[Target], *, seed: int, seconds: float,
                 max_attacks: int = 100_000, concurrency: int = 4,
                 plausible_votes: bool = True, vote_interval: float = 3.0,
                 cluster_id: str | None = None, io_timeout: float = 1.0,
                 pause: tuple[float, float] = (0.005, 0.05),
                 kinds: list[str] | None = None, workdir: Path | None = None) -> None:
        for t in targets:
            if not ipaddress.ip_address(t.host).is_loopback:
                raise ValueError(f"hostile client targets loopback only, not {t.host}")
        self.config = {
            "targets": [asdict(t) for t in targets], "seed": seed, "seconds": seconds,
            "max_attacks": max_attacks, "concurrency": concurrency,
            "plausible_votes": plausible_votes, "vote_interval": vote_interval,
            "cluster_id": cluster_id, "io_timeout": io_timeout, "pause": list(pause),
            "kinds": kinds,
        }
        self._dir = Path(workdir or tempfile.mkdtemp(prefix="hostile-"))
        self._dir.mkdir(parents=True, exist_ok=True)
        self.report_path = self._dir / f"hostile-{seed}.json"
        self.log_path = self._dir / f"hostile-{seed}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Launch the process."""
        config = self._dir / f"hostile-{self.config['seed']}-config.json"
        config.write_text(json.dumps(self.config))
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.hostile", "--config", str(config),
                 "--report", str(self.report_path)],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)})

    @property
    def running(self) -> bool:
        """True while the process runs."""
        return self._proc is not None and self._proc.poll() is None

    def wait(self, timeout: float | None = None) -> HostileReport:
        """Wait for the run to end by itself (its `seconds` or `max_attacks`)."""
        assert self._proc is not None, "not started"
        limit = timeout if timeout is not None else float(self.config["seconds"]) + 30
        try:
            self._proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            return self.stop()
        return self._read()

    def stop(self, timeout: float = 15.0) -> HostileReport:
        """End the run now (it writes its report on SIGTERM)."""
        assert self._proc is not None, "not started"
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
        return self._read()

    def _read(self) -> HostileReport:
        assert self._proc is not None
        if not self.report_path.exists():
            raise AssertionError(f"hostile client exited {self._proc.returncode} without a "
                                 f"report; its output: {self.log_path}")
        return HostileReport(**json.loads(self.report_path.read_text()))

    def __enter__(self) -> HostileClient:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=10)


# ---------------------------------------------------------------------------------- encoding
# Kafka's primitive types (big-endian), written here rather than taken from the node.

def _i8(v: int) -> bytes:
    return struct.pack(">b", v)


def _i16(v: int) -> bytes:
    return struct.pack(">h", v)


def _i32(v: int) -> bytes:
    return struct.pack(">i", v)


def _i64(v: int) -> bytes:
    return struct.pack(">q", v)


def _uvarint(v: int) -> bytes:
    out = bytearray()
    while True:
        byte = v & 0x7F
        v >>= 7
        if v:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _compact_str(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    b = s.encode()
    return _uvarint(len(b) + 1) + b


def _str(s: str | None) -> bytes:
    if s is None:
        return _i16(-1)
    b = s.encode()
    return _i16(len(b)) + b


def _bytes32(b: bytes | None) -> bytes:
    return _i32(-1) if b is None else _i32(len(b)) + b


def _compact_array(items: list[bytes]) -> bytes:
    return _uvarint(len(items) + 1) + b"".join(items)


NO_TAGS = b"\x00"


def _uuid(u: uuid.UUID | None) -> bytes:
    return (u or uuid.UUID(int=0)).bytes


def request_header(api_key: int, version: int, correlation_id: int, *, flexible: bool,
                   client_id: str = "hostile") -> bytes:
    """Request header v2 (flexible) or v1."""
    head = _i16(api_key) + _i16(version) + _i32(correlation_id) + _str(client_id)
    return head + NO_TAGS if flexible else head


def frame(body: bytes) -> bytes:
    """A Kafka frame: int32 size then the bytes."""
    return _i32(len(body)) + body


def vote_request(*, version: int, cluster_id: str | None, voter_id: int, epoch: int,
                 candidate_id: int, last_epoch: int, last_offset: int,
                 pre_vote: bool = False) -> bytes:
    """A Vote request body (versions 0-2, all flexible)."""
    part = _i32(0) + _i32(epoch) + _i32(candidate_id)
    if version >= 1:
        part += _uuid(uuid.uuid4()) + _uuid(None)
    part += _i32(last_epoch) + _i64(last_offset)
    if version >= 2:
        part += b"\x01" if pre_vote else b"\x00"
    part += NO_TAGS
    topic = _compact_str(METADATA_TOPIC) + _compact_array([part]) + NO_TAGS
    head = _compact_str(cluster_id) + (_i32(voter_id) if version >= 1 else b"")
    return head + _compact_array([topic]) + NO_TAGS


def _endpoints(host: str, port: int) -> bytes:
    return _compact_array([_compact_str("CONTROLLER") + _compact_str(host)
                           + struct.pack(">H", port) + NO_TAGS])


def begin_quorum_epoch_request(*, cluster_id: str | None, voter_id: int, leader_id: int,
                               epoch: int, host: str, port: int) -> bytes:
    """A BeginQuorumEpoch v1 request body (flexible)."""
    part = _i32(0) + _uuid(None) + _i32(leader_id) + _i32(epoch) + NO_TAGS
    topic = _compact_str(METADATA_TOPIC) + _compact_array([part]) + NO_TAGS
    return (_compact_str(cluster_id) + _i32(voter_id) + _compact_array([topic])
            + _endpoints(host, port) + NO_TAGS)


def end_quorum_epoch_request(*, cluster_id: str | None, leader_id: int, epoch: int,
                             candidates: list[int], host: str, port: int) -> bytes:
    """An EndQuorumEpoch v1 request body (flexible)."""
    cands = [_i32(c) + _uuid(None) + NO_TAGS for c in candidates]
    part = _i32(0) + _i32(leader_id) + _i32(epoch) + _compact_array(cands) + NO_TAGS
    topic = _compact_str(METADATA_TOPIC) + _compact_array([part]) + NO_TAGS
    return (_compact_str(cluster_id) + _compact_array([topic]) + _endpoints(host, port)
            + NO_TAGS)


def fetch_snapshot_request(*, replica_id: int, max_bytes: int, epoch: int, end_offset: int,
                           snapshot_epoch: int, position: int) -> bytes:
    """A FetchSnapshot v1 request body (flexible; no cluster id tag)."""
    snap = _i64(end_offset) + _i32(snapshot_epoch) + NO_TAGS
    part = _i32(0) + _i32(epoch) + snap + _i64(position) + NO_TAGS
    topic = _compact_str(METADATA_TOPIC) + _compact_array([part]) + NO_TAGS
    return _i32(replica_id) + _i32(max_bytes) + _compact_array([topic]) + NO_TAGS


def fetch_request(correlation_id: int, *, replica_id: int, epoch: int, fetch_offset: int,
                  last_fetched_epoch: int, max_wait_ms: int, max_bytes: int,
                  version: int = 17) -> bytes:
    """A whole Fetch frame, encoded by kafka-python (an independent codec)."""
    from kafka.protocol.consumer import FetchRequest as F

    part = F.FetchTopic.FetchPartition(
        partition=0, current_leader_epoch=epoch, fetch_offset=fetch_offset,
        last_fetched_epoch=last_fetched_epoch, log_start_offset=-1, partition_max_bytes=0)
    replica: dict[str, Any] = (
        {"replica_state": F.ReplicaState(replica_id=replica_id, replica_epoch=-1)}
        if version >= 15 else {"replica_id": replica_id})
    req = F[version](
        **replica, max_wait_ms=max_wait_ms, min_bytes=0, max_bytes=max_bytes,
        isolation_level=0, session_id=0, session_epoch=-1,
        topics=[F.FetchTopic(topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID,
                             partitions=[part])],
        forgotten_topics_data=[], rack_id="")
    req.with_header(correlation_id=correlation_id, client_id="hostile")
    return bytes(req.encode(header=True, framed=True))


def api_versions_request(correlation_id: int) -> bytes:
    """A whole ApiVersions v3 frame, encoded by kafka-python."""
    from kafka.protocol.metadata import ApiVersionsRequest

    req = ApiVersionsRequest[3](client_software_name="hostile", client_software_version="1")
    req.with_header(correlation_id=correlation_id, client_id="hostile")
    return bytes(req.encode(header=True, framed=True))


def forward_kv_request(*, cluster_id: str, op: int, key: bytes, value: bytes | None,
                       key_length: int | None = None, value_length: int | None = None) -> bytes:
    """A ForwardKv v0 body (the project's own api: int16 strings, int32 bytes); the lengths
    may lie."""
    klen = len(key) if key_length is None else key_length
    if value is None:
        val = _i32(-1 if value_length is None else value_length)
    else:
        val = _i32(len(value) if value_length is None else value_length) + value
    return (_str(cluster_id) + _i8(op) + _i16(klen) + key + val + _i32(-1) + _i32(5000))


CLIENT_HEAD = struct.Struct(">IIBH")  # length, id, op, key length
CLIENT_ANSWER = struct.Struct(">IIBqi")  # length, id, status, offset, leader id


def client_request(request_id: int, op: int, key: bytes, value: bytes = b"") -> bytes:
    """A binary KV protocol request frame (kraft.server.client_protocol's layout)."""
    return CLIENT_HEAD.pack(7 + len(key) + len(value), request_id, op, len(key)) + key + value


def _defuse(data: bytes) -> bytes:
    """Garbage that reads as a membership request's header is changed (never sent)."""
    if len(data) >= 6 and struct.unpack_from(">h", data, 4)[0] in MEMBERSHIP_API_KEYS:
        data = data[:4] + b"\x7f" + data[5:]
    return data


# ---------------------------------------------------------------------------------- attacks

Step = tuple[bytes, float]
"""Bytes to write, then seconds to wait."""


class Attacker:
    """Runs the attacks (the hostile process's side)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.targets = [Target(**t) for t in config["targets"]]
        self.voter_ids = [t.node_id for t in self.targets]
        self.seed = int(config["seed"])
        self.seconds = float(config["seconds"])
        self.max_attacks = int(config["max_attacks"])
        self.concurrency = int(config["concurrency"])
        self.plausible_votes = bool(config["plausible_votes"])
        self.vote_interval = float(config["vote_interval"])
        self.cluster_id: str | None = config.get("cluster_id")
        self.io_timeout = float(config["io_timeout"])
        self.pause = tuple(config["pause"])
        self.sent: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.attacks = 0
        self.epochs: dict[int, int] = {}
        self.max_epoch_seen = -1
        self._corr = 0
        self._variants: dict[int, str] = {}
        """Which variant of its kind the attack under way is, by its worker's rng (a kind
        with variants names it here, and the report counts outcomes per variant)."""
        self._turns: dict[int, int] = {}
        """The next variant each worker sends (they take turns)."""
        self._stop = asyncio.Event()
        self._started = time.monotonic()
        kinds: list[tuple[str, str, int, Callable[[random.Random, Target],
                                                  Awaitable[list[Step]]]]] = [
            # kind, port, weight, the bytes it sends
            ("kafka_garbage", CONTROLLER, 6, self._kafka_garbage),
            ("kafka_size_negative", CONTROLLER, 3, self._kafka_size_negative),
            ("kafka_size_huge", CONTROLLER, 3, self._kafka_size_huge),
            ("kafka_size_lies", CONTROLLER, 3, self._kafka_size_lies),
            ("kafka_truncated", CONTROLLER, 4, self._kafka_truncated),
            ("kafka_garbage_body", CONTROLLER, 8, self._kafka_garbage_body),
            ("kafka_unknown_api", CONTROLLER, 3, self._kafka_unknown_api),
            ("kafka_bad_version", CONTROLLER, 3, self._kafka_bad_version),
            ("kafka_bad_header", CONTROLLER, 3, self._kafka_bad_header),
            ("kafka_valid_then_garbage", CONTROLLER, 2, self._kafka_valid_then_garbage),
            ("vote_forged_epoch", CONTROLLER, 8, self._vote_forged),
            ("begin_epoch_forged", CONTROLLER, 6, self._begin_epoch_forged),
            ("end_epoch_forged", CONTROLLER, 5, self._end_epoch_forged),
            ("fetch_forged", CONTROLLER, 6, self._fetch_forged),
            ("fetch_snapshot_forged", CONTROLLER, 3, self._fetch_snapshot_forged),
            ("forward_long_key", CONTROLLER, 2, self._forward_long_key),
            ("forward_big_value", CONTROLLER, 1, self._forward_big_value),
            ("forward_lying_lengths", CONTROLLER, 3, self._forward_lying),
            ("client_garbage", CLIENT, 5, self._client_garbage),
            ("client_length_huge", CLIENT, 3, self._client_length_huge),
            ("client_length_short", CLIENT, 3, self._client_length_short),
            ("client_truncated", CLIENT, 3, self._client_truncated),
            ("client_key_overrun", CLIENT, 3, self._client_key_overrun),
            ("client_key_not_utf8", CLIENT, 2, self._client_key_not_utf8),
            ("client_unknown_op", CLIENT, 3, self._client_unknown_op),
            ("client_put_12mib", CLIENT, 1, self._client_put_big),
            ("client_key_30kb", CLIENT, 3, self._client_long_key),
            ("client_pipeline_close", CLIENT, 2, self._client_pipeline_close),
            ("client_idle_then_bad", CLIENT, 4, self._client_idle_then_bad),
            ("http_garbage", HTTP, 4, self._http_garbage),
            ("http_slow_headers", HTTP, 2, self._http_slow_headers),
            ("http_slow_body", HTTP, 2, self._http_slow_body),
            ("http_short_body", HTTP, 3, self._http_short_body),
            ("http_put_12mib", HTTP, 1, self._http_put_big),
            ("http_put_12mib_chunked", HTTP, 1, self._http_put_big_chunked),
            ("http_key_30kb", HTTP, 3, self._http_long_key),
            ("http_bad_length", HTTP, 3, self._http_bad_length),
            ("http_bad_chunks", HTTP, 2, self._http_bad_chunks),
            ("http_bad_cas", HTTP, 3, self._http_bad_cas),
            ("http_bad_path", HTTP, 3, self._http_bad_path),
            ("http_huge_header", HTTP, 2, self._http_huge_header),
        ]
        only = config.get("kinds")
        if only is not None:
            unknown = set(only) - {k for k, _, _, _ in kinds}
            if unknown:
                raise ValueError(f"unknown attack kinds {sorted(unknown)}")
            kinds = [k for k in kinds if k[0] in only]
        self.kinds = kinds
        self._weights = [w for _, _, w, _ in kinds]
        self.plausible = [("vote_plausible", CONTROLLER, 1, self._vote_plausible),
                          ("prevote_plausible", CONTROLLER, 1, self._prevote_plausible)]
        """Sent one at a time, `vote_interval` apart (`_plausible_votes`)."""

    # ------------------------------------------------------------------ running

    def stop(self) -> None:
        """Finish the attacks under way and end."""
        self._stop.set()

    async def run(self) -> None:
        """Attack until `seconds` pass, `max_attacks` are sent or `stop()`."""
        deadline = self._started + self.seconds
        tasks = [asyncio.ensure_future(self._worker(random.Random(f"{self.seed}-{i}"), deadline))
                 for i in range(self.concurrency if self.kinds else 0)]
        tasks.append(asyncio.ensure_future(self._watch_epochs(deadline)))
        if self.plausible_votes:
            tasks.append(asyncio.ensure_future(
                self._plausible_votes(random.Random(f"{self.seed}-votes"), deadline)))
        stopped = asyncio.ensure_future(self._stop.wait())
        finished = asyncio.ensure_future(asyncio.wait(tasks))
        await asyncio.wait([finished, stopped], return_when=asyncio.FIRST_COMPLETED)
        if not finished.done():  # stopped: a second for the attacks under way, then they end
            await asyncio.wait(tasks, timeout=1.0)
        for task in [*tasks, stopped, finished]:
            task.cancel()
        await asyncio.gather(*tasks, stopped, finished, return_exceptions=True)

    def report(self) -> HostileReport:
        """What was sent so far."""
        return HostileReport(sent=dict(self.sent), outcomes=dict(self.outcomes),
                             attacks=self.attacks, seconds=time.monotonic() - self._started,
                             max_epoch_seen=self.max_epoch_seen)

    def _done(self, deadline: float) -> bool:
        return (self._stop.is_set() or time.monotonic() >= deadline
                or self.attacks >= self.max_attacks)

    async def _worker(self, rng: random.Random, deadline: float) -> None:
        while not self._done(deadline):
            kind, port, _, build = rng.choices(self.kinds, self._weights)[0]
            await self._one(kind, port, build, rng)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), rng.uniform(*self.pause))

    async def _plausible_votes(self, rng: random.Random, deadline: float) -> None:
        """One plausible Vote or PreVote every `vote_interval` seconds, the first after one."""
        turn = 0
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.vote_interval)
            if self._done(deadline):
                return
            kind, port, _, build = self.plausible[turn % len(self.plausible)]
            turn += 1
            await self._one(kind, port, build, rng)

    async def _one(self, kind: str, port: str,
                   build: Callable[[random.Random, Target], Awaitable[list[Step]]],
                   rng: random.Random) -> None:
        target = rng.choice(self.targets)
        self.attacks += 1
        self.sent[kind] += 1
        try:
            outcome = await self._attack(kind, port, target, build, rng)
        except Exception as exc:  # a bug here: counted and shown, and the attacks go on
            traceback.print_exc()
            outcome = f"hostile client error {type(exc).__name__}"
        variant = self._variants.pop(id(rng), None)
        self.outcomes[f"{kind} {variant + ': ' if variant else ''}{outcome}"] += 1

    async def _watch_epochs(self, deadline: float) -> None:
        """Each node's epoch from its /v1/status (for plausible Votes and the report)."""
        while not self._done(deadline):
            for t in self.targets:
                status = await self._status(t)
                if status is not None:
                    self.epochs[t.node_id] = int(status.get("epoch", -1))
                    self.max_epoch_seen = max(self.max_epoch_seen, self.epochs[t.node_id])
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), 0.5)

    async def _status(self, t: Target) -> dict[str, Any] | None:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(t.host, t.http_port), self.io_timeout)
        except (OSError, TimeoutError):
            return None
        try:
            writer.write(f"GET /v1/status HTTP/1.1\r\nHost: {t.host}\r\n"
                         "Connection: close\r\n\r\n".encode())
            data = await asyncio.wait_for(reader.read(), self.io_timeout)
            head, _, body = data.partition(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                return None
            parsed: dict[str, Any] = json.loads(body)
            return parsed
        except (OSError, TimeoutError, ValueError):
            return None
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _attack(self, kind: str, port: str, t: Target,
                      build: Callable[[random.Random, Target], Awaitable[list[Step]]],
                      rng: random.Random) -> str:
        number = {CONTROLLER: t.controller_port, CLIENT: t.client_port, HTTP: t.http_port}[port]
        steps = await build(rng, t)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(t.host, number), self.io_timeout)
        except ConnectionRefusedError:
            return "refused"  # the node is down
        except TimeoutError:
            return "connect timeout"  # frozen, its backlog full
        except OSError as exc:
            return f"connect {type(exc).__name__}"
        try:
            for data, wait in steps:
                if data:
                    writer.write(data)
                    await asyncio.wait_for(writer.drain(), self.io_timeout * 4)
                if wait:
                    await asyncio.sleep(wait)
            if port == CONTROLLER:
                return await self._read_kafka(kind, reader)
            if port == CLIENT:
                first = await self._read_client(reader)
                if kind != "client_idle_then_bad" or not first.startswith("status"):
                    return first
                return f"{first}, then {await self._read_client(reader)}"
            answer = await asyncio.wait_for(reader.read(256), self.io_timeout)
            if not answer:
                return "closed"
            return "http " + answer.split(b"\r\n", 1)[0].decode(errors="replace")[9:12]
        except TimeoutError:
            return "timeout"
        except (ConnectionError, OSError):
            return "reset"
        finally:
            writer.close()
            with contextlib.suppress(OSError, TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), 1)

    async def _read_kafka(self, kind: str, reader: asyncio.StreamReader) -> str:
        """The first answer's error codes (top level, first partition), or what happened."""
        try:
            size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4),
                                                              self.io_timeout))[0]
            if size < 0:
                return f"answered a size of {size}"
            body = await asyncio.wait_for(reader.readexactly(min(size, 1 << 20)),
                                          self.io_timeout)
        except asyncio.IncompleteReadError as exc:
            return "closed" if not exc.partial else "answered short"
        return ("answered " + kafka_errors(kind, body)).strip()

    async def _read_client(self, reader: asyncio.StreamReader) -> str:
        try:
            head = await asyncio.wait_for(reader.readexactly(CLIENT_ANSWER.size),
                                          self.io_timeout)
        except asyncio.IncompleteReadError:
            return "closed"
        _, _, status, _, _ = CLIENT_ANSWER.unpack(head)
        return f"status {status}"

    def _corr_id(self) -> int:
        self._corr += 1
        return self._corr

    def _epoch(self, node_id: int | None = None) -> int:
        """The highest epoch seen (of `node_id`, when given and seen), within int32 (a node
        past it failed already)."""
        seen = self.epochs.get(node_id) if node_id is not None else None
        return min(seen if seen is not None else max(self.epochs.values(), default=1),
                   INT32_MAX)

    def _voter_or_other(self, rng: random.Random) -> int:
        return rng.choice([*self.voter_ids, *self.voter_ids, -1, 0, 9999, INT32_MAX, INT32_MIN])

    def _kafka(self, api_key: int, version: int, body: bytes, *, flexible: bool) -> bytes:
        return frame(request_header(api_key, version, self._corr_id(), flexible=flexible) + body)

    # ------------------------------------------------------------------ controller listener

    async def _kafka_garbage(self, rng: random.Random, t: Target) -> list[Step]:
        return [(_defuse(rng.randbytes(rng.randrange(1, 4096))), 0.0)]

    async def _kafka_size_negative(self, rng: random.Random, t: Target) -> list[Step]:
        size = rng.choice([-1, -2, INT32_MIN, -rng.randrange(1, 2**31)])
        return [(_i32(size) + rng.randbytes(rng.randrange(0, 64)), 0.0)]

    async def _kafka_size_huge(self, rng: random.Random, t: Target) -> list[Step]:
        size = rng.choice([INT32_MAX, 100 * 1024 * 1024 + 1, rng.randrange(2**27, 2**31)])
        return [(_i32(size) + rng.randbytes(rng.randrange(0, 256)), 0.0)]

    async def _kafka_size_lies(self, rng: random.Random, t: Target) -> list[Step]:
        # more promised than follows (within the limit), then a pause and a close
        size = rng.choice([64, 4096, 1 << 20, 50 * 1024 * 1024])
        head = request_header(52, 2, self._corr_id(), flexible=True)
        return [(_i32(size) + head + rng.randbytes(rng.randrange(0, 32)),
                 rng.uniform(0.0, 0.5))]

    async def _kafka_truncated(self, rng: random.Random, t: Target) -> list[Step]:
        whole = self._kafka(52, 2, vote_request(
            version=2, cluster_id=None, voter_id=t.node_id, epoch=INT32_MAX,
            candidate_id=rng.choice(self.voter_ids), last_epoch=INT32_MAX,
            last_offset=2**62), flexible=True)
        return [(whole[:rng.randrange(1, len(whole))], 0.0)]

    async def _kafka_garbage_body(self, rng: random.Random, t: Target) -> list[Step]:
        api = rng.choice([*SERVED_API_KEYS, FORWARD_KV_API_KEY])
        top = {1: 18, 18: 4, 52: 2, 53: 1, 54: 1, 55: 2, 59: 1, 60: 2, 70: 0}.get(api, 0)
        version = rng.randrange(0, top + 1) if api != 1 else rng.randrange(4, 19)
        flexible = {1: version >= 12, 18: version >= 3, 53: version >= 1,
                    54: version >= 1}.get(api, api != FORWARD_KV_API_KEY)
        return [(self._kafka(api, version, rng.randbytes(rng.randrange(0, 512)),
                             flexible=flexible), 0.0)]

    async def _kafka_unknown_api(self, rng: random.Random, t: Target) -> list[Step]:
        api = rng.choice([rng.randrange(-32768, 32768), 0, 3, 99, 32767, -1])
        while api in MEMBERSHIP_API_KEYS or api in SERVED_API_KEYS or api == FORWARD_KV_API_KEY:
            api = rng.randrange(100, 32000)
        return [(self._kafka(api, rng.randrange(0, 20), rng.randbytes(rng.randrange(0, 64)),
                             flexible=rng.random() < 0.5), 0.0)]

    async def _kafka_bad_version(self, rng: random.Random, t: Target) -> list[Step]:
        api = rng.choice(SERVED_API_KEYS)
        version = rng.choice([-1, -32768, 99, 32767, 19 if api == 1 else 5])
        return [(self._kafka(api, version, rng.randbytes(rng.randrange(0, 64)),
                             flexible=True), 0.0)]

    async def _kafka_bad_header(self, rng: random.Random, t: Target) -> list[Step]:
        # a client id longer than the frame, or negative other than -1; or a header cut short
        api = rng.choice([18, 52, 55])
        client_len = rng.choice([30000, 32767, -2, -32768])
        body = _i16(api) + _i16(0) + _i32(self._corr_id()) + _i16(client_len) + b"hostile"
        if rng.random() < 0.3:
            body = body[:rng.randrange(0, 8)]
        return [(frame(body), 0.0)]

    async def _kafka_valid_then_garbage(self, rng: random.Random, t: Target) -> list[Step]:
        return [(api_versions_request(self._corr_id())
                 + frame(_defuse(_i16(18) + rng.randbytes(rng.randrange(0, 128)))), 0.0)]

    async def _vote_forged(self, rng: random.Random, t: Target) -> list[Step]:
        version = rng.choice([0, 1, 2, 2])
        epoch = rng.choice(ABSURD_EPOCHS)
        body = vote_request(
            version=version, cluster_id=None, voter_id=rng.choice([t.node_id, -1, 12345]),
            epoch=epoch, candidate_id=self._voter_or_other(rng),
            last_epoch=rng.choice([epoch, INT32_MAX, -1, 0]),
            last_offset=rng.choice([*ABSURD_OFFSETS, 2**62, 2**63 - 1, 0]),
            pre_vote=rng.random() < 0.3)
        return [(self._kafka(52, version, body, flexible=True), 0.0)]

    async def _begin_epoch_forged(self, rng: random.Random, t: Target) -> list[Step]:
        body = begin_quorum_epoch_request(
            cluster_id=None, voter_id=rng.choice([t.node_id, -1]),
            leader_id=self._voter_or_other(rng), epoch=rng.choice(ABSURD_EPOCHS),
            host=t.host, port=rng.choice([t.controller_port, 1, 65535]))
        return [(self._kafka(53, 1, body, flexible=True), 0.0)]

    async def _end_epoch_forged(self, rng: random.Random, t: Target) -> list[Step]:
        body = end_quorum_epoch_request(
            cluster_id=None, leader_id=self._voter_or_other(rng),
            epoch=rng.choice(ABSURD_EPOCHS),
            candidates=rng.sample(self.voter_ids, rng.randrange(0, len(self.voter_ids) + 1)),
            host=t.host, port=t.controller_port)
        return [(self._kafka(54, 1, body, flexible=True), 0.0)]

    async def _fetch_forged(self, rng: random.Random, t: Target) -> list[Step]:
        replica = self._voter_or_other(rng)
        if replica in self.voter_ids:
            # as a real voter: only with an absurd epoch (a plausible one is never forged)
            epoch = rng.choice(ABSURD_EPOCHS)
            offset = rng.choice([*ABSURD_OFFSETS, 0])
        else:
            epoch = rng.choice([*ABSURD_EPOCHS, self._epoch()])
            offset = rng.choice([*ABSURD_OFFSETS, 0, 2**62])
        data = fetch_request(
            self._corr_id(), replica_id=replica, epoch=epoch, fetch_offset=offset,
            last_fetched_epoch=rng.choice([INT32_MAX, -1, -5, 0]),
            max_wait_ms=rng.choice([-1, 0, 500, INT32_MAX]),
            max_bytes=rng.choice([-1, 0, INT32_MAX, 8 << 20]),
            version=rng.choice([12, 13, 15, 17]))
        return [(data, 0.0)]

    async def _fetch_snapshot_forged(self, rng: random.Random, t: Target) -> list[Step]:
        body = fetch_snapshot_request(
            replica_id=self._voter_or_other(rng), max_bytes=rng.choice([-1, 0, INT32_MAX]),
            epoch=rng.choice([*ABSURD_EPOCHS, self._epoch()]),
            end_offset=rng.choice([*ABSURD_OFFSETS, 2**62, 0]),
            snapshot_epoch=rng.choice(ABSURD_EPOCHS), position=rng.choice(ABSURD_OFFSETS))
        return [(self._kafka(59, 1, body, flexible=True), 0.0)]

    def _forward(self, body: bytes) -> bytes:
        return self._kafka(FORWARD_KV_API_KEY, 0, body, flexible=False)

    async def _forward_long_key(self, rng: random.Random, t: Target) -> list[Step]:
        key = b"hostile-" + b"k" * LONG_KEY_BYTES
        return [(self._forward(forward_kv_request(
            cluster_id=self.cluster_id or "", op=rng.choice([0, 1, 2]), key=key,
            value=b"v")), 0.0)]

    async def _forward_big_value(self, rng: random.Random, t: Target) -> list[Step]:
        key = f"hostile-big-{rng.randrange(10**6)}".encode()
        return [(self._forward(forward_kv_request(
            cluster_id=self.cluster_id or "", op=1, key=key,
            value=rng.randbytes(64) * (BIG_VALUE_BYTES // 64))), 0.0)]

    async def _forward_lying(self, rng: random.Random, t: Target) -> list[Step]:
        key = f"hostile-lie-{rng.randrange(10**6)}".encode()
        body = forward_kv_request(
            cluster_id=self.cluster_id or "", op=rng.choice([1, 3, 7, -1]), key=key,
            value=b"x" * 16, key_length=rng.choice([-5, 32767, len(key) + 3]),
            value_length=rng.choice([-7, INT32_MAX, 1000, INT32_MIN]))
        return [(self._forward(body), 0.0)]

    async def _vote_plausible(self, rng: random.Random, t: Target) -> list[Step]:
        epoch = min(self._epoch() + 1, INT32_MAX)
        if rng.random() < 0.5:  # a replica that is no voter, with a long log: may be granted
            candidate, last_epoch, last_offset = 900 + rng.randrange(50), epoch - 1, 2**40
        else:  # a real voter with an empty log: never granted
            candidate = rng.choice([v for v in self.voter_ids if v != t.node_id]
                                   or self.voter_ids)
            last_epoch, last_offset = 0, 0
        body = vote_request(version=2, cluster_id=self.cluster_id, voter_id=t.node_id,
                            epoch=epoch, candidate_id=candidate, last_epoch=last_epoch,
                            last_offset=last_offset)
        return [(self._kafka(52, 2, body, flexible=True), 0.0)]

    async def _prevote_plausible(self, rng: random.Random, t: Target) -> list[Step]:
        epoch = self._epoch(t.node_id)
        body = vote_request(version=2, cluster_id=self.cluster_id, voter_id=t.node_id,
                            epoch=epoch, candidate_id=rng.choice(self.voter_ids),
                            last_epoch=epoch, last_offset=2**40, pre_vote=True)
        return [(self._kafka(52, 2, body, flexible=True), 0.0)]

    # ------------------------------------------------------------------ binary client port

    async def _client_garbage(self, rng: random.Random, t: Target) -> list[Step]:
        return [(rng.randbytes(rng.randrange(1, 4096)), 0.0)]

    async def _client_length_huge(self, rng: random.Random, t: Target) -> list[Step]:
        length = rng.choice([2**32 - 1, 2**31, 16 * 1024 * 1024 + 1, rng.randrange(2**25, 2**32)])
        return [(struct.pack(">I", length) + rng.randbytes(rng.randrange(0, 64)), 0.0)]

    async def _client_length_short(self, rng: random.Random, t: Target) -> list[Step]:
        length = rng.randrange(0, 7)
        return [(struct.pack(">I", length) + rng.randbytes(16), 0.0)]

    async def _client_truncated(self, rng: random.Random, t: Target) -> list[Step]:
        whole = client_request(1, 1, b"hostile-cut", rng.randbytes(rng.randrange(1, 2048)))
        return [(whole[:rng.randrange(1, len(whole))], rng.uniform(0, 0.3))]

    async def _client_key_overrun(self, rng: random.Random, t: Target) -> list[Step]:
        key = b"hostile-overrun"
        head = CLIENT_HEAD.pack(7 + len(key), 2, rng.choice([1, 2, 3, 4]),
                                rng.choice([len(key) + 1, 65535, 4097]))
        return [(head + key, 0.0)]

    async def _client_key_not_utf8(self, rng: random.Random, t: Target) -> list[Step]:
        key = b"hostile-\xff\xfe" + rng.randbytes(4)
        return [(client_request(3, rng.choice([1, 2, 3, 4]), key, b"v"), 0.0)]

    async def _client_unknown_op(self, rng: random.Random, t: Target) -> list[Step]:
        op = rng.choice([0, 5, 6, 127, 255])
        return [(client_request(4, op, b"hostile-op", b"v"), 0.0)]

    async def _client_put_big(self, rng: random.Random, t: Target) -> list[Step]:
        key = f"hostile-big-{rng.randrange(10**6)}".encode()
        return [(client_request(5, 1, key, rng.randbytes(64) * (BIG_VALUE_BYTES // 64)), 0.0)]

    async def _client_long_key(self, rng: random.Random, t: Target) -> list[Step]:
        key = b"hostile-" + b"k" * LONG_KEY_BYTES
        return [(client_request(6, rng.choice([1, 2, 3, 4]), key, b"v"), 0.0)]

    async def _client_pipeline_close(self, rng: random.Random, t: Target) -> list[Step]:
        frames = b"".join(client_request(i, 4, b"hostile-pipe") for i in range(200))
        return [(frames, 0.0)]

    async def _client_idle_then_bad(self, rng: random.Random, t: Target) -> list[Step]:
        # a well-behaved connection first, then quiet: a leader whose only client connection
        # it is may lend it to its native lane (kraft.lane.leader), whose loop then reads the
        # bad frame that follows
        key = b"hostile-lane"
        variants: dict[str, Callable[[], bytes]] = {
            "length_huge": lambda: struct.pack(">I", rng.choice([2**32 - 1, 16 * 1024 * 1024 + 1])),
            "length_short": lambda: struct.pack(">I", rng.randrange(0, 7)) + rng.randbytes(8),
            "key_overrun": lambda: CLIENT_HEAD.pack(7 + len(key), 9, 1, 65535) + key,
            "key_not_utf8": lambda: client_request(9, 1, b"hostile-\xff\xfe", b"v"),
            "unknown_op": lambda: client_request(9, rng.choice([0, 5, 255]), key, b"v"),
            "key_30kb": lambda: client_request(9, 1, b"hostile-" + b"k" * LONG_KEY_BYTES, b"v"),
            "put_12mib": lambda: client_request(9, 1, key,
                                                rng.randbytes(64) * (BIG_VALUE_BYTES // 64)),
            "garbage": lambda: rng.randbytes(rng.randrange(1, 512)),
        }
        # each in turn (from a random one), so that a few attacks cover them all
        turn = self._turns.get(id(rng), rng.randrange(len(variants)))
        self._turns[id(rng)] = turn + 1
        name = sorted(variants)[turn % len(variants)]
        self._variants[id(rng)] = name
        bad = variants[name]()
        return [(client_request(8, 4, key), rng.uniform(0.2, 1.0)), (bad, 0.0)]

    # ------------------------------------------------------------------ admin HTTP port

    async def _http_garbage(self, rng: random.Random, t: Target) -> list[Step]:
        return [(rng.randbytes(rng.randrange(1, 4096)), 0.0)]

    async def _http_slow_headers(self, rng: random.Random, t: Target) -> list[Step]:
        text = f"GET /v1/kv/hostile-slow HTTP/1.1\r\nHost: {t.host}\r\nX-Slow: ".encode()
        return [(bytes([b]), rng.uniform(0.02, 0.1)) for b in text[:rng.randrange(5, len(text))]]

    async def _http_slow_body(self, rng: random.Random, t: Target) -> list[Step]:
        head = (f"PUT /v1/kv/hostile-slow HTTP/1.1\r\nHost: {t.host}\r\n"
                "Content-Length: 1000\r\n\r\n").encode()
        return [(head, 0.0)] + [(b"x", rng.uniform(0.05, 0.2)) for _ in range(10)]

    async def _http_short_body(self, rng: random.Random, t: Target) -> list[Step]:
        head = (f"PUT /v1/kv/hostile-short HTTP/1.1\r\nHost: {t.host}\r\n"
                f"Content-Length: {rng.choice([100, 100000, 2**30])}\r\n\r\n").encode()
        return [(head + b"y" * rng.randrange(0, 99), rng.uniform(0, 0.3))]

    async def _http_put_big(self, rng: random.Random, t: Target) -> list[Step]:
        head = (f"PUT /v1/kv/hostile-big-{rng.randrange(10**6)} HTTP/1.1\r\nHost: {t.host}\r\n"
                f"Content-Length: {BIG_VALUE_BYTES}\r\n\r\n").encode()
        return [(head + rng.randbytes(64) * (BIG_VALUE_BYTES // 64), 0.0)]

    async def _http_put_big_chunked(self, rng: random.Random, t: Target) -> list[Step]:
        head = (f"PUT /v1/kv/hostile-big-{rng.randrange(10**6)} HTTP/1.1\r\nHost: {t.host}\r\n"
                "Transfer-Encoding: chunked\r\n\r\n").encode()
        chunk = b"%x\r\n" % (1 << 20) + rng.randbytes(64) * ((1 << 20) // 64) + b"\r\n"
        return [(head + chunk * (BIG_VALUE_BYTES >> 20) + b"0\r\n\r\n", 0.0)]

    async def _http_long_key(self, rng: random.Random, t: Target) -> list[Step]:
        method = rng.choice(["PUT", "GET", "DELETE"])
        key = "hostile-" + "k" * LONG_KEY_BYTES
        return [(f"{method} /v1/kv/{key} HTTP/1.1\r\nHost: {t.host}\r\nContent-Length: 1\r\n"
                 "\r\nv".encode(), 0.0)]

    async def _http_bad_length(self, rng: random.Random, t: Target) -> list[Step]:
        length = rng.choice(["-1", "99999999999999999999999", "abc", "1, 2", "0x10"])
        return [(f"PUT /v1/kv/hostile-len HTTP/1.1\r\nHost: {t.host}\r\n"
                 f"Content-Length: {length}\r\n\r\nvalue".encode(), 0.0)]

    async def _http_bad_chunks(self, rng: random.Random, t: Target) -> list[Step]:
        size = rng.choice([b"zz", b"-5", b"ffffffffffffffffffff", b"10;" + b"e" * 9000])
        return [(f"PUT /v1/kv/hostile-chunk HTTP/1.1\r\nHost: {t.host}\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n".encode() + size + b"\r\nabc\r\n", 0.0)]

    async def _http_bad_cas(self, rng: random.Random, t: Target) -> list[Step]:
        body = rng.choice([b"{", b"[]", b'{"expected": 5, "value": "!!"}',
                           b'{"expected": null, "value": "not base64 @@"}',
                           b'{"value": null}', rng.randbytes(64),
                           b'{"expected": "' + b"A" * 40000 + b'", "value": "QQ=="}'])
        return [(f"POST /v1/kv/hostile-cas/cas HTTP/1.1\r\nHost: {t.host}\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body, 0.0)]

    async def _http_bad_path(self, rng: random.Random, t: Target) -> list[Step]:
        path = rng.choice(["/v1/kv/hostile-%ff%fe", "/v1/kv/hostile-%00", "/v1/kv/%",
                           "/v1/kv/hostile-%zz", "/v1/kv/", "/v1/kv//x",
                           "/v1/kv/hostile-a?stale=%ff", "/../../etc/passwd", "*"])
        method = rng.choice(["GET", "PUT", "DELETE", "BREW"])
        return [(f"{method} {path} HTTP/1.1\r\nHost: {t.host}\r\nContent-Length: 1\r\n\r\nv"
                 .encode(), 0.0)]

    async def _http_huge_header(self, rng: random.Random, t: Target) -> list[Step]:
        return [(f"GET /v1/status HTTP/1.1\r\nHost: {t.host}\r\nX-Big: {'h' * 100_000}\r\n\r\n"
                 .encode(), 0.0)]


ANSWER_LAYOUT = {
    # kind: (response header bytes, bytes before the top-level error, topics follow the error)
    "vote_forged_epoch": (5, 0, True), "vote_plausible": (5, 0, True),
    "prevote_plausible": (5, 0, True), "kafka_truncated": (5, 0, True),
    "begin_epoch_forged": (5, 0, True), "end_epoch_forged": (5, 0, True),
    "fetch_forged": (5, 4, False), "fetch_snapshot_forged": (5, 4, False),
    "forward_long_key": (4, 0, False), "forward_big_value": (4, 0, False),
    "forward_lying_lengths": (4, 0, False), "kafka_valid_then_garbage": (4, 0, False),
}
"""Where the error codes of an answer to each kind are, to count them."""


def kafka_errors(kind: str, body: bytes) -> str:
    """`err=<top>` of an answer (and `/<partition>` for Vote, BeginQuorumEpoch and
    EndQuorumEpoch: one topic, one partition); best effort."""
    layout = ANSWER_LAYOUT.get(kind)
    if layout is None:
        return ""
    pos, skip, topics = layout
    try:
        pos += skip
        top = struct.unpack_from(">h", body, pos)[0]
        pos += 2
        if topics and body[pos] == 2:  # one topic
            pos += 1
            pos += body[pos]  # the name's compact length is its size + 1
            if body[pos] == 2:  # one partition: its index, then its error
                part = struct.unpack_from(">h", body, pos + 1 + 4)[0]
                return f"err={top}/{part}"
        return f"err={top}"
    except (IndexError, struct.error):
        return "err=?"


# ---------------------------------------------------------------------------------- process

async def _main(config: dict[str, Any], report_path: Path) -> None:
    attacker = Attacker(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, attacker.stop)
    try:
        await attacker.run()
    finally:
        tmp = report_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(attacker.report())))
        tmp.replace(report_path)


def main(argv: list[str] | None = None) -> None:
    """`python -m tests.support.hostile --config FILE --report FILE`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, type=Path)
    parser.add_argument("--report", required=True, type=Path)
    args = parser.parse_args(argv)
    config = json.loads(args.config.read_text())
    asyncio.run(_main(config, args.report))


if __name__ == "__main__":
    main()
