"""`bootstrap.checkpoint`: the metadata records `kafka-storage format` seeds a cluster with.

The file is a record-batch file laid out like a snapshot with id (0, 0): a SnapshotHeader
control batch, one data batch of metadata records, a SnapshotFooter control batch. Each data
record's value is a framed metadata record (section 3.2 of the wire facts):
`uvarint frame version (1) | uvarint apiKey | uvarint record version | body`. We write only
FeatureLevelRecord (apiKey 12, version 0: Name compact string, FeatureLevel int16, empty
tagged fields).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from kraft.protocol.errors import MalformedInputError, TruncatedInputError
from kraft.protocol.primitives import decode_uvarint, encode_uvarint
from kraft.records.snapshot_format import build_snapshot, read_snapshot
from kraft.storage.durability import atomic_write
from kraft.storage.errors import StorageConfigError
from kraft.storage.layout import BOOTSTRAP_CHECKPOINT

FRAME_VERSION = 1
FEATURE_LEVEL_RECORD_API_KEY = 12
METADATA_VERSION_FEATURE = "metadata.version"
KRAFT_VERSION_FEATURE = "kraft.version"

METADATA_RECORD_NAMES = {
    0: "RegisterBrokerRecord", 1: "UnregisterBrokerRecord", 2: "TopicRecord",
    3: "PartitionRecord", 4: "ConfigRecord", 5: "PartitionChangeRecord",
    6: "AccessControlEntryRecord", 7: "RemoveAccessControlEntryRecord",
    8: "FenceBrokerRecord", 9: "UnfenceBrokerRecord", 10: "RemoveTopicRecord",
    11: "DelegationTokenRecord", 12: "FeatureLevelRecord", 13: "ClientQuotaRecord",
    14: "ProducerIdsRecord", 15: "BrokerRegistrationChangeRecord", 16: "RemoveFeatureLevelRecord",
    17: "NoOpRecord", 18: "UserScramCredentialRecord", 19: "RemoveUserScramCredentialRecord",
    20: "RegisterControllerRecord", 21: "BeginTransactionRecord", 22: "AbortTransactionRecord",
    23: "EndTransactionRecord", 24: "RemoveDelegationTokenRecord", 25: "ZkMigrationStateRecord",
}
"""apiKey -> metadata record type name (for `kraft dump`)."""

# Kafka's MetadataVersion levels for the releases a 4.1 node can bootstrap.
METADATA_VERSIONS: dict[str, int] = {
    "3.8-IV0": 20, "3.9-IV0": 21,
    "4.0-IV0": 22, "4.0-IV1": 23, "4.0-IV2": 24, "4.0-IV3": 25,
    "4.1-IV0": 26, "4.1-IV1": 27,
    "4.2-IV0": 28, "4.2-IV1": 29, "4.3-IV0": 30,
    "4.4-IV0": 31, "4.4-IV1": 32, "4.4-IV2": 33,
}
"""Kafka's production metadata.version levels from 3.8 (the first with kraft.version 1) to 4.4
(org.apache.kafka.server.common.MetadataVersion of Kafka 4.4.0)."""
LATEST_PRODUCTION = "4.1-IV1"
"""The 4.1 default `--release-version` (metadata.version level 27)."""
KRAFT_VERSION_1_MIN_LEVEL = METADATA_VERSIONS["3.9-IV0"]
"""The lowest metadata.version level kraft.version 1 (dynamic quorums, KIP-853) depends on."""


def metadata_version_level(release: str) -> tuple[str, int]:
    """("4.1-IV1", 27) for "4.1-IV1" or "4.1" (a bare release means its latest IV)."""
    if release in METADATA_VERSIONS:
        return release, METADATA_VERSIONS[release]
    matches = [name for name in METADATA_VERSIONS if name.split("-")[0] == release]
    if matches:
        name = matches[-1]
        return name, METADATA_VERSIONS[name]
    raise StorageConfigError(
        f"unknown release version {release!r}; known: {', '.join(METADATA_VERSIONS)}"
    )


@dataclass(frozen=True, slots=True)
class FeatureLevelRecord:
    """A finalized feature level (metadata record apiKey 12, version 0)."""

    name: str
    feature_level: int

    def encode(self) -> bytes:
        """Framed record value: frame version, apiKey, version, then the flexible body."""
        name = self.name.encode("utf-8")
        if not -32768 <= self.feature_level <= 32767:
            raise ValueError(f"feature level {self.feature_level} does not fit an int16")
        return (
            encode_uvarint(FRAME_VERSION)
            + encode_uvarint(FEATURE_LEVEL_RECORD_API_KEY)
            + encode_uvarint(0)
            + encode_uvarint(len(name) + 1)
            + name
            + self.feature_level.to_bytes(2, "big", signed=True)
            + encode_uvarint(0)
        )


def decode_metadata_frame(value: bytes) -> tuple[int, int, int]:
    """(apiKey, record version, position of the body) of a framed metadata record value."""
    frame, pos = decode_uvarint(value, 0)
    if frame != FRAME_VERSION:
        raise MalformedInputError(f"metadata record frame version {frame}, expected 1")
    api_key, pos = decode_uvarint(value, pos)
    version, pos = decode_uvarint(value, pos)
    return api_key, version, pos


def decode_feature_level(value: bytes) -> FeatureLevelRecord:
    """Decode a framed FeatureLevelRecord value (version 0)."""
    api_key, _version, pos = decode_metadata_frame(value)
    if api_key != FEATURE_LEVEL_RECORD_API_KEY:
        raise MalformedInputError(f"apiKey {api_key} is not FeatureLevelRecord (12)")
    n, pos = decode_uvarint(value, pos)
    if n == 0 or pos + n - 1 + 2 > len(value):
        raise TruncatedInputError("FeatureLevelRecord: name or level cut short")
    name = value[pos : pos + n - 1].decode("utf-8")
    pos += n - 1
    level = int.from_bytes(value[pos : pos + 2], "big", signed=True)
    return FeatureLevelRecord(name, level)


def bootstrap_checkpoint_bytes(
    features: list[FeatureLevelRecord], *, timestamp_ms: int | None = None
) -> bytes:
    """The bytes of a bootstrap.checkpoint holding these feature levels."""
    now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    return build_snapshot(0, now, [[f.encode() for f in features]], timestamp_ms=now)


def write_bootstrap_checkpoint(
    log_dir: Path | str, features: list[FeatureLevelRecord], *, timestamp_ms: int | None = None
) -> Path:
    """Write `<dir>/bootstrap.checkpoint` atomically and durably; returns the path."""
    path = Path(log_dir) / BOOTSTRAP_CHECKPOINT
    atomic_write(path, bootstrap_checkpoint_bytes(features, timestamp_ms=timestamp_ms))
    return path


def read_bootstrap_checkpoint(path: Path | str) -> list[FeatureLevelRecord]:
    """Validate a bootstrap.checkpoint and return its FeatureLevelRecords."""
    contents = read_snapshot(Path(path).read_bytes())
    out: list[FeatureLevelRecord] = []
    for value in contents.values():
        if value is not None and decode_metadata_frame(value)[0] == FEATURE_LEVEL_RECORD_API_KEY:
            out.append(decode_feature_level(value))
    return out
