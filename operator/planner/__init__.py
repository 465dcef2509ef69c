"""The pure planner: (spec, observed state) -> the one next safe action.

`plan(spec, observed)` returns a `Plan`: the action, the conditions and a status merge-patch.
One module per operation (format, join, remove, replace_disk, replace_node, roll, scale,
recover, tls_migration); `context` holds the quorum arithmetic they share, `listeners` the
controller listeners' layouts. Nothing here does I/O or reads a clock: the handlers observe,
call `plan`, run the action, and observe again.
"""

from kraft_operator.planner.actions import (
    Action,
    AddVoter,
    AdvanceTlsMigration,
    ClearRecoveryAnnotation,
    CreatePod,
    CreatePVC,
    DeletePod,
    DeletePVC,
    ForceSingleVoter,
    FormatMode,
    RecordCluster,
    RemoveVoter,
    ReportDegraded,
    ResignLeader,
    Wait,
)
from kraft_operator.planner.context import majority, pod_spec_hash
from kraft_operator.planner.core import ConditionUpdate, Plan, plan

__all__ = [
    "Action", "AddVoter", "AdvanceTlsMigration", "ClearRecoveryAnnotation", "ConditionUpdate", "CreatePVC",
    "CreatePod", "DeletePVC", "DeletePod", "ForceSingleVoter", "FormatMode", "Plan",
    "RecordCluster", "RemoveVoter", "ReportDegraded", "ResignLeader", "Wait", "majority",
    "plan", "pod_spec_hash",
]
