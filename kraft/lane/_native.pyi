"""Types of the C extension `kraft.lane._native` (kraft/lane/csrc/): the native lane's rules,
the same as `kraft.lane.rules`'s, input for input."""

from collections.abc import Sequence

from kraft.lane.rules import LaneAnswer, LaneFetch
from kraft.protocol.uuid import Uuid
from kraft.raft.lease import LeaseVoter
from kraft.raft.messages import FetchedBatch

MAX_VOTERS: int

class LeaderLane:
    epoch: int
    epoch_start: int
    log_start: int
    log_end: int
    durable: int
    high_watermark: int | None
    matched: tuple[int, ...]
    def __init__(self, epoch: int, epoch_start: int, log_start: int, log_end: int, durable: int,
                 high_watermark: int | None, voters: Sequence[LeaseVoter]) -> None: ...
    def fetch(self, replica_id: int, directory_id: Uuid | None, fetch_offset: int,
              last_fetched_epoch: int, current_leader_epoch: int,
              max_wait_ms: int) -> LaneFetch | None: ...
    def appended(self, base_offset: int, last_offset: int, epoch: int) -> bool: ...
    def persisted(self, end_offset: int) -> None: ...

class FollowerLane:
    epoch: int
    leader_id: int
    fetch_correlation: int
    log_end: int
    high_watermark: int | None
    leader_high_watermark: int | None
    def __init__(self, epoch: int, leader_id: int, fetch_correlation: int, log_end: int,
                 high_watermark: int | None) -> None: ...
    def answer(self, correlation_id: int, error: int, leader_id: int, leader_epoch: int,
               high_watermark: int, diverging: bool, snapshot: bool,
               batches: Sequence[FetchedBatch]) -> LaneAnswer | None: ...

def read_fetch_answer(
    frame: bytes | bytearray | memoryview, correlation_id: int
) -> tuple[int, int, int, int, tuple[tuple[int, int, int, int, int], ...]] | None: ...
def crc32c(data: bytes | bytearray | memoryview) -> int: ...
def scan_appended(
    data: bytes | bytearray | memoryview, expected: int, last_epoch: int, max_batch: int
) -> tuple[list[tuple[int, int, int, int, int]], int] | None: ...
def fetch_request(
    version: int, correlation_id: int, client_id: str | None, cluster_id: str, replica_id: int,
    directory_id: Uuid | None, max_wait_ms: int, max_bytes: int, current_leader_epoch: int,
    fetch_offset: int, last_fetched_epoch: int, high_watermark: int | None,
) -> bytes: ...
def time_follower_step(frame: bytes | bytearray | memoryview, correlation_id: int, epoch: int,
                       log_end: int, iterations: int) -> float: ...

class FollowerShell:
    done_fd: int
    news_fd: int
    def __init__(self, sock: int, log_fd: int, write_pos: int, lane: FollowerLane,
                 last_epoch: int, next_correlation: int, version: int, client_id: str | None,
                 cluster_id: str, replica_id: int, directory_id: Uuid | None, max_wait_ms: int,
                 max_bytes: int, write_limit: int = ...) -> None: ...
    def start(self) -> None: ...
    def stop(self) -> dict[str, object]: ...
    def progress(self) -> tuple[int, int, int, int | None, int, int, int | None]: ...
    def waiting(self, flag: bool, /) -> None: ...

def read_fetch_request(
    frame: bytes | bytearray | memoryview, cluster_id: str
) -> tuple[int, int, int, bytes | None, int, int, int, int, int, int | None] | None: ...
def fetch_answer(correlation_id: int, leader_id: int, leader_epoch: int, high_watermark: int,
                 log_start: int, records: bytes | bytearray | memoryview) -> bytes: ...
def value_batch(base_offset: int, epoch: int, values: Sequence[bytes],
                timestamp_ms: int) -> bytes: ...
def read_puts(buffer: bytes | bytearray | memoryview) -> tuple[int, list[tuple[int, bytes]]]: ...
def put_answer(request_id: int, offset: int) -> bytes: ...

class LeaderShell:
    done_fd: int
    def __init__(self, client: int, voters: Sequence[tuple[int, int]], log_fd: int,
                 write_pos: int, lane: LeaderLane, leader_id: int, cluster_id: str,
                 log_start: int, timestamp_ms: int) -> None: ...
    def start(self) -> None: ...
    def stop(self) -> dict[str, object]: ...
