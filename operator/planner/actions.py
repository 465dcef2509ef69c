"""The actions the planner can choose: each one step an executor runs and then re-observes."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class FormatMode(StrEnum):
    """How the init container formats an empty volume (a formatted one is left alone)."""

    INITIAL = "initial-controllers"  # a new quorum: --initial-controllers with every voter
    JOIN = "no-initial-controllers"  # a node joining a running quorum: --no-initial-controllers


@dataclass(frozen=True, slots=True)
class RecordCluster:
    """Record a new quorum's cluster id and initial voters (node id, directory id) in status,
    before any volume is formatted with them."""

    cluster_id: str
    initial_voters: tuple[tuple[int, str], ...]


@dataclass(frozen=True, slots=True)
class CreatePVC:
    """Create a node's volume claim, annotated with the directory id it is to be formatted with."""

    node_id: int
    directory_id: str


@dataclass(frozen=True, slots=True)
class DeletePVC:
    """Delete a node's volume claim (its data is gone or no longer wanted)."""

    node_id: int
    name: str


@dataclass(frozen=True, slots=True)
class CreatePod:
    """Create a node's pod on its existing claim. The init container formats the volume only if
    it is empty: with every initial voter (INITIAL) or to join (JOIN)."""

    node_id: int
    directory_id: str
    format_mode: FormatMode
    auto_join: bool
    spec_hash: str
    initial_voters: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True, slots=True)
class DeletePod:
    """Delete a node's pod (force: with grace period 0, for a pod on a Node that is gone)."""

    node_id: int
    name: str
    reason: str
    force: bool = False


@dataclass(frozen=True, slots=True)
class AddVoter:
    """AddRaftVoter for a caught-up observer."""

    node_id: int
    directory_id: str


@dataclass(frozen=True, slots=True)
class RemoveVoter:
    """RemoveRaftVoter; the voter's process is stopped or runs without auto-join."""

    node_id: int
    directory_id: str


@dataclass(frozen=True, slots=True)
class ResignLeader:
    """Ask the leader to resign (EndQuorumEpoch) so another voter takes over."""

    node_id: int


@dataclass(frozen=True, slots=True)
class ForceSingleVoter:
    """Quorum-loss recovery: rewrite the voter set to this one surviving replica (the one
    the recovery annotation names), so it can lead alone; the others re-join afterwards."""

    node_id: int
    directory_id: str


@dataclass(frozen=True, slots=True)
class ClearRecoveryAnnotation:
    """Remove the recovery annotation once the quorum answers again, so it cannot fire twice."""


@dataclass(frozen=True, slots=True)
class AdvanceTlsMigration:
    """A TLS migration's next phase (or its end) is recorded in status.tls: the pods roll to
    its layout (`kraft_operator.planner.tls_migration`). Carried out by the status write;
    its Event says which phase."""

    phase: int
    protocol: str
    """The protocol the quorum moves to (PLAINTEXT or SSL)."""
    complete: bool
    """The migration ends here (phase 3: done, or 0: turned back)."""
    message: str = ""


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing to do now; reconcile again later."""

    reason: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class ReportDegraded:
    """Nothing is safe to do: report it (a Warning Event) and wait for a person."""

    reason: str
    message: str = ""


Action = (
    RecordCluster | CreatePVC | DeletePVC | CreatePod | DeletePod | AddVoter | RemoveVoter
    | ResignLeader | ForceSingleVoter | ClearRecoveryAnnotation | AdvanceTlsMigration | Wait
    | ReportDegraded
)

MEMBERSHIP_ACTIONS = (AddVoter, RemoveVoter, ForceSingleVoter)
