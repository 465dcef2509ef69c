"""`quorum-state`: the election state that must survive a restart (KIP-595, KIP-853).

One line of JSON, written to `quorum-state.tmp`, fsynced and renamed over `quorum-state`
(Kafka's FileQuorumStateStore). `data_version` 1 (kraft.version >= 1) carries
`votedDirectoryId`; version 0 carried `clusterId`, `appliedOffset` and `currentVoters`, which
we read but only write when asked for version 0.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kraft.protocol.primitives import EPOCH_LIMIT
from kraft.protocol.uuid import Uuid
from kraft.storage.durability import atomic_write
from kraft.storage.errors import StorageError
from kraft.storage.layout import QUORUM_STATE

log = logging.getLogger(__name__)


class QuorumStateError(StorageError):
    """A quorum-state file that cannot be parsed or holds an unsupported version."""


class UnusableEpochError(StorageError):
    """A replica holds an epoch it cannot go on from (at or above the epoch limit, or a
    negative one): a node refuses to start on it; the message names the way out."""


RESET_EPOCH_HOWTO = (
    "With EVERY voter of the quorum stopped, run `kraft recover inspect -c <server.properties>` "
    "on each, take the highest \"highest log epoch\" N over them, and run `kraft recover "
    "reset-epoch -c <server.properties> --epoch N --yes` on each (see `kraft recover "
    "reset-epoch --help`)"
)
"""The recovery from a quorum-state epoch no replica may use, as the refusals name it."""


def unusable_reason(state: QuorumStateData) -> str | None:
    """Why a node cannot start from `state` (naming the field), None when it can."""
    if state.leader_epoch >= EPOCH_LIMIT:
        return (f"leaderEpoch {state.leader_epoch} is at or above the epoch limit "
                f"{EPOCH_LIMIT}: no election could ever follow it")
    if state.leader_epoch < -1:
        return f"leaderEpoch {state.leader_epoch} is negative (-1 means none)"
    for name, value in (("leaderId", state.leader_id), ("votedId", state.voted_id)):
        if value < -1:
            return f"{name} {value} is negative (-1 means none)"
    return None


def check_usable(state: QuorumStateData | None, path: Path | str) -> None:
    """Raise UnusableEpochError (naming the file, the field and the recovery command) when a
    node cannot start from `state`."""
    if state is None:
        return
    reason = unusable_reason(state)
    if reason is not None:
        raise UnusableEpochError(f"{path}: {reason}. {RESET_EPOCH_HOWTO}.")


@dataclass(frozen=True, slots=True)
class QuorumStateData:
    """The persisted election state. -1 means "none" for ids and epochs (Kafka's defaults)."""

    leader_epoch: int = -1
    leader_id: int = -1
    voted_id: int = -1
    voted_directory_id: Uuid | None = None
    data_version: int = 1
    current_voters: tuple[int, ...] | None = None
    """Only in data_version 0 (the static voter ids); None otherwise."""

    def __post_init__(self) -> None:
        if self.data_version not in (0, 1):
            raise ValueError(f"quorum-state data_version must be 0 or 1, got {self.data_version}")

    def to_json(self) -> str:
        """The exact one-line JSON Kafka writes for this data_version."""
        obj: dict[str, Any]
        if self.data_version == 1:
            obj = {
                "leaderId": self.leader_id,
                "leaderEpoch": self.leader_epoch,
                "votedId": self.voted_id,
                "votedDirectoryId": str(self.voted_directory_id or Uuid.ZERO),
                "data_version": 1,
            }
        else:
            obj = {
                "clusterId": "",
                "leaderId": self.leader_id,
                "leaderEpoch": self.leader_epoch,
                "votedId": self.voted_id,
                "appliedOffset": 0,
                "currentVoters": (
                    None
                    if self.current_voters is None
                    else [{"voterId": v} for v in self.current_voters]
                ),
                "data_version": 0,
            }
        return json.dumps(obj, separators=(",", ":"))

    @staticmethod
    def from_json(text: str, source: str = QUORUM_STATE) -> QuorumStateData:
        """Parse either data_version; raises QuorumStateError naming the file and field."""
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise QuorumStateError(f"{source}: not valid JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise QuorumStateError(f"{source}: expected a JSON object")

        def integer(key: str, default: int) -> int:
            value = obj.get(key, default)
            if not isinstance(value, int) or isinstance(value, bool):
                raise QuorumStateError(f"{source}: field {key!r} must be an integer, got {value!r}")
            return value

        version = integer("data_version", -1)
        if version not in (0, 1):
            raise QuorumStateError(f"{source}: unsupported data_version {obj.get('data_version')!r}")
        voted_dir: Uuid | None = None
        voters: tuple[int, ...] | None = None
        if version == 1:
            text_id = obj.get("votedDirectoryId", str(Uuid.ZERO))
            try:
                parsed = Uuid.parse(text_id) if isinstance(text_id, str) else None
            except ValueError as exc:
                raise QuorumStateError(f"{source}: votedDirectoryId: {exc}") from None
            if parsed is None:
                raise QuorumStateError(f"{source}: votedDirectoryId must be a string")
            voted_dir = None if parsed.is_zero() else parsed
        else:
            raw = obj.get("currentVoters")
            if raw is not None:
                if not isinstance(raw, list):
                    raise QuorumStateError(f"{source}: currentVoters must be a list or null")
                ids = []
                for entry in raw:
                    vid = entry.get("voterId") if isinstance(entry, dict) else None
                    if not isinstance(vid, int):
                        raise QuorumStateError(f"{source}: bad currentVoters entry {entry!r}")
                    ids.append(vid)
                voters = tuple(ids)
        return QuorumStateData(
            leader_epoch=integer("leaderEpoch", -1),
            leader_id=integer("leaderId", -1),
            voted_id=integer("votedId", -1),
            voted_directory_id=voted_dir,
            data_version=version,
            current_voters=voters,
        )


class QuorumStateStore:
    """Reads and durably replaces `<partition dir>/quorum-state`.

    Not thread-safe: the runtime calls it from one thread (its disk executor).
    """

    def __init__(self, partition_dir: Path | str) -> None:
        self.path = Path(partition_dir) / QUORUM_STATE

    def read(self) -> QuorumStateData | None:
        """The stored state, or None when no file exists yet."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        return QuorumStateData.from_json(text, str(self.path))

    def write(self, state: QuorumStateData) -> None:
        """Atomically replace the file and fsync it and its directory before returning."""
        atomic_write(self.path, state.to_json().encode("utf-8"))
        log.info(
            "event=quorum_state_written file=%s epoch=%d leader=%d voted=%d",
            self.path, state.leader_epoch, state.leader_id, state.voted_id,
        )

    def clear(self) -> None:
        """Delete the file (used by tests and when a directory is reformatted)."""
        self.path.unlink(missing_ok=True)
