"""Conversions between the core's voters sets and `kraft.records.control` records.

The core writes and reads control batches: a LeaderChange at the start of every epoch, and
KRaftVersion / Voters records for KIP-853. This module is the only place that knows the field
names of those record types.
"""

from __future__ import annotations

from kraft.protocol.uuid import Uuid
from kraft.raft.messages import KRaftVersionRange, ReplicaKey
from kraft.raft.voters import VoterNode, VoterSet
from kraft.records.control import (
    KRaftVersionFeature,
    KRaftVersionRecord,
    LeaderChangeMessage,
    LeaderChangeVoter,
    Voter,
    VotersRecord,
)


def leader_change(leader_id: int, voters: VoterSet, granting: frozenset[int]) -> LeaderChangeMessage:
    """The LeaderChange record a new leader writes first in its epoch (version 0: ids only)."""
    return LeaderChangeMessage(
        leader_id=leader_id,
        voters=tuple(LeaderChangeVoter(v.id) for v in voters.voters),
        granting_voters=tuple(LeaderChangeVoter(i) for i in sorted(granting)),
    )


def voters_record(voters: VoterSet) -> VotersRecord:
    """Encode a voters set as a KRaftVoters record (directory ids must be known)."""
    return VotersRecord(
        voters=tuple(
            Voter(
                voter_id=v.id,
                voter_directory_id=v.key.directory_id or Uuid.ZERO,
                endpoints=v.endpoints,
                kraft_version_feature=KRaftVersionFeature(
                    v.kraft_version.min_supported, v.kraft_version.max_supported
                ),
            )
            for v in voters.voters
        )
    )


def voters_from_record(record: VotersRecord) -> VoterSet:
    """Decode a KRaftVoters record into a voters set."""
    return VoterSet.of(
        [
            VoterNode(
                ReplicaKey(
                    v.voter_id,
                    None if v.voter_directory_id.is_zero() else v.voter_directory_id,
                ),
                tuple(v.endpoints),
                KRaftVersionRange(
                    v.kraft_version_feature.min_supported_version,
                    v.kraft_version_feature.max_supported_version,
                ),
            )
            for v in record.voters
        ]
    )


def kraft_version_record(version: int) -> KRaftVersionRecord:
    """The finalized kraft.version record."""
    return KRaftVersionRecord(kraft_version=version)


def scan_control(records: tuple[object, ...]) -> tuple[VoterSet | None, int | None]:
    """The voters set and kraft.version a control batch sets (None where it sets none)."""
    voters: VoterSet | None = None
    version: int | None = None
    for r in records:
        if isinstance(r, VotersRecord):
            voters = voters_from_record(r)
        elif isinstance(r, KRaftVersionRecord):
            version = r.kraft_version
    return voters, version
