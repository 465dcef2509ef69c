"""Which module runs which action."""

from __future__ import annotations

from kraft_operator.actions import (
    membership,
    pods,
    quorum_recovery,
    report,
    tls_migration,
    volumes,
)
from kraft_operator.actions.base import Env, Outcome
from kraft_operator.planner import (
    Action,
    AddVoter,
    AdvanceTlsMigration,
    ClearRecoveryAnnotation,
    CreatePod,
    CreatePVC,
    DeletePod,
    DeletePVC,
    ForceSingleVoter,
    RecordCluster,
    RemoveVoter,
    ReportDegraded,
    ResignLeader,
    Wait,
)


async def execute(action: Action, env: Env) -> Outcome | None:
    """Run one action; None for one that does nothing (Wait)."""
    match action:
        case Wait():
            return None
        case RecordCluster():
            return report.record_cluster(action)
        case ReportDegraded():
            return report.degraded(action)
        case CreatePVC():
            return await volumes.create_pvc(action, env)
        case DeletePVC():
            return await volumes.delete_pvc(action, env)
        case CreatePod():
            return await pods.create_pod(action, env)
        case DeletePod():
            return await pods.delete_pod(action, env)
        case ResignLeader():
            return await pods.resign_leader(action, env)
        case AddVoter():
            return await membership.add_voter(action, env)
        case RemoveVoter():
            return await membership.remove_voter(action, env)
        case ForceSingleVoter():
            return await quorum_recovery.force_single_voter(action, env)
        case ClearRecoveryAnnotation():
            return await quorum_recovery.clear_annotation(env)
        case AdvanceTlsMigration():
            return tls_migration.advance(action)
    raise TypeError(f"no executor for {action!r}")
