"""UpdateFeatures (api 57) as Kafka's controller answers it, for the features this node knows.

Kafka's `QuorumController.updateFeatures` and `FeatureControlManager.updateFeature` (4.x) take
a request's FeatureUpdates as one change: each update is checked in turn and the first one
refused refuses the whole request. The answer then carries that update's error as the
top-level error, its message behind "The update failed for all features since the following
feature had an error: ", and no per-feature results; a request that succeeds answers NONE
with one NONE result per FeatureUpdate (versions 0 and 1; version 2 has no results). A node
that is not the active controller answers NOT_CONTROLLER.

The features of this node: `kraft.version` (owned by the consensus core: an upgrade goes to
`RaftCore` as `UpdateKRaftVersionRequest`, which checks the voters and observers) and
`metadata.version`, which stays at the level `kraft format` wrote into bootstrap.checkpoint
(this quorum holds no metadata records a new level would change): an update to that level is
accepted and changes nothing, any other level is refused. Every other feature is one the
local controller does not support. Everything here is pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kraft.protocol import messages as w
from kraft.protocol.errors import ErrorCode

KRAFT_VERSION = "kraft.version"
METADATA_VERSION = "metadata.version"

UPGRADE = 1
SAFE_DOWNGRADE = 2
UNSAFE_DOWNGRADE = 3
"""Kafka's `FeatureUpdate.UpgradeType` codes (KIP-778); any other code is UNKNOWN."""

FAILED_PREFIX = "The update failed for all features since the following feature had an error: "
"""What Kafka's controller puts ahead of the refused feature's message."""

NOT_CONTROLLER_MESSAGE = "This node is not the active controller."


@dataclass(frozen=True, slots=True)
class FeatureState:
    """A feature this node knows: its finalized level and the levels it supports."""

    current: int
    min_supported: int
    max_supported: int


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    """One FeatureUpdate of a request: the level asked for and the upgrade type."""

    name: str
    level: int
    upgrade_type: int


@dataclass(frozen=True, slots=True)
class FeaturePlan:
    """What an accepted request needs done: a kraft.version upgrade for the core, or nothing."""

    kraft_version: int | None


class FeatureUpdateError(Exception):
    """The update that refuses the request: its error code and Kafka's message for it."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def updates_of(data: w.UpdateFeaturesRequestData, version: int) -> list[FeatureUpdate]:
    """The request's FeatureUpdates; version 0 has AllowDowngrade instead of UpgradeType
    (true means a safe downgrade, as Kafka reads it)."""
    out = []
    for u in data.feature_updates:
        if version == 0:
            kind = SAFE_DOWNGRADE if u.allow_downgrade else UPGRADE
        else:
            kind = u.upgrade_type
        out.append(FeatureUpdate(u.feature, u.max_version_level, kind))
    return out


def _invalid(name: str, level: int, reason: str) -> FeatureUpdateError:
    return FeatureUpdateError(ErrorCode.INVALID_UPDATE_VERSION,
                              f"Invalid update version {level} for feature {name}. {reason}")


def _check(update: FeatureUpdate, known: dict[str, FeatureState], node_id: int) -> int | None:
    """Kafka's checks of one update, in its order; returns the kraft.version level the core
    must upgrade to (None when there is nothing for it to do); raises FeatureUpdateError."""
    name, level, kind = update.name, update.level, update.upgrade_type
    if kind not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        raise _invalid(name, level, "The controller does not support the given upgrade type.")
    state = known.get(name)
    current = state.current if state is not None else 0
    if level < 0:
        raise _invalid(name, level, "A feature version cannot be less than 0.")
    if state is None or state.max_supported == 0:
        raise _invalid(name, level, f"Local controller {node_id} does not support this feature.")
    if not state.min_supported <= level <= state.max_supported:
        raise _invalid(name, level, f"Local controller {node_id} only supports versions "
                                    f"{state.min_supported}-{state.max_supported}")
    if level < current and kind == UPGRADE:
        raise _invalid(name, level, "Can't downgrade the version of this feature without "
                                    "setting the upgrade type to either safe or unsafe downgrade.")
    if level > current and kind != UPGRADE:
        raise _invalid(name, level, "Can't downgrade to a newer version.")
    if name == KRAFT_VERSION:
        if kind == UPGRADE:
            return level if level != current else None
        if level != current:
            raise _invalid(name, level, "Can't downgrade the version of this feature.")
        return None
    if name == METADATA_VERSION and level != current:
        raise FeatureUpdateError(
            ErrorCode.INVALID_UPDATE_VERSION,
            f"Invalid metadata.version {level}. This quorum holds no metadata records: its "
            f"metadata.version stays at the level it was formatted with ({current}).")
    return None


def plan_feature_updates(updates: list[FeatureUpdate], known: dict[str, FeatureState],
                         node_id: int) -> FeaturePlan:
    """Check every update (a feature named twice: the last one counts, as in Kafka's map);
    raises FeatureUpdateError for the first one refused."""
    last = {u.name: u for u in updates}
    target = None
    for update in last.values():
        level = _check(update, known, node_id)
        if level is not None:
            target = level
    return FeaturePlan(target)


def update_features_response(version: int, error_code: int, message: str | None,
                             features: tuple[str, ...]) -> w.UpdateFeaturesResponseData:
    """The answer: NONE with one NONE result per FeatureUpdate (versions 0-1), or a top-level
    error without results."""
    R = w.UpdateFeaturesResponseData
    results: list[Any] = []
    if error_code == ErrorCode.NONE and version <= 1:
        results = [R.UpdatableFeatureResult(name, 0, None) for name in features]
    return R(error_code=int(error_code), error_message=message, results=results)


def core_answer(error_code: ErrorCode, message: str | None) -> tuple[int, str | None]:
    """The top-level (code, message) for the core's answer to a kraft.version upgrade: a
    refusal is the failed feature's error, behind Kafka's prefix."""
    if error_code == ErrorCode.NONE:
        return int(ErrorCode.NONE), None
    if error_code in (ErrorCode.NOT_CONTROLLER, ErrorCode.NOT_LEADER_OR_FOLLOWER):
        return int(ErrorCode.NOT_CONTROLLER), NOT_CONTROLLER_MESSAGE
    return int(error_code), FAILED_PREFIX + (message or error_code.name)
