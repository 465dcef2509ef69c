"""Api keys, the version range and flexible threshold of each api, and what this node serves.

`API_SPECS` covers every api this package can encode and decode; `SERVED_APIS` is the list a
KRaft controller built on this package advertises in its ApiVersions response, and
`SUPPORTED_FEATURES` the feature ranges it advertises (`kraft.version` 0..1, which a Java
leader checks before adding a voter).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kraft.protocol import messages as m
from kraft.protocol.errors import ErrorCode, UnsupportedVersionError
from kraft.protocol.schema import message_spec

__all__ = [
    "API_SPECS",
    "SERVED_APIS",
    "SUPPORTED_FEATURES",
    "ApiKey",
    "ApiSpec",
    "api_spec",
    "api_versions_response",
]


class ApiKey(enum.IntEnum):
    """Kafka api keys implemented here."""

    FETCH = 1
    API_VERSIONS = 18
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    UPDATE_FEATURES = 57
    FETCH_SNAPSHOT = 59
    DESCRIBE_CLUSTER = 60
    CONTROLLER_REGISTRATION = 70
    ADD_RAFT_VOTER = 80
    REMOVE_RAFT_VOTER = 81
    UPDATE_RAFT_VOTER = 82


@dataclass(frozen=True)
class ApiSpec:
    """One api: its key, version range, first flexible version and body classes."""

    key: ApiKey
    name: str
    min_version: int
    max_version: int
    first_flexible_version: int
    request_class: type
    response_class: type

    def supports(self, version: int) -> bool:
        """True when `version` is within the supported range."""
        return self.min_version <= version <= self.max_version

    def is_flexible(self, version: int) -> bool:
        """True when `version` uses compact encodings and tagged fields (KIP-482)."""
        return version >= self.first_flexible_version

    def request_header_version(self, version: int) -> int:
        """Request header v2 for flexible api versions, otherwise v1."""
        return 2 if self.is_flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        """Response header v1 for flexible api versions, otherwise v0.

        ApiVersions responses always use header v0 (KIP-511), so that a client can read the
        correlation id and error whatever version the server answered with.
        """
        if self.key == ApiKey.API_VERSIONS:
            return 0
        return 1 if self.is_flexible(version) else 0


def _spec(key: ApiKey, name: str, request: type, response: type) -> ApiSpec:
    req = message_spec(name + "Request")
    return ApiSpec(
        key=key,
        name=name,
        min_version=req.valid.lo,
        max_version=req.valid.hi,
        first_flexible_version=req.flexible.lo,
        request_class=request,
        response_class=response,
    )


API_SPECS: dict[ApiKey, ApiSpec] = {
    s.key: s
    for s in (
        _spec(ApiKey.FETCH, "Fetch", m.FetchRequestData, m.FetchResponseData),
        _spec(ApiKey.API_VERSIONS, "ApiVersions", m.ApiVersionsRequestData,
              m.ApiVersionsResponseData),
        _spec(ApiKey.VOTE, "Vote", m.VoteRequestData, m.VoteResponseData),
        _spec(ApiKey.BEGIN_QUORUM_EPOCH, "BeginQuorumEpoch", m.BeginQuorumEpochRequestData,
              m.BeginQuorumEpochResponseData),
        _spec(ApiKey.END_QUORUM_EPOCH, "EndQuorumEpoch", m.EndQuorumEpochRequestData,
              m.EndQuorumEpochResponseData),
        _spec(ApiKey.DESCRIBE_QUORUM, "DescribeQuorum", m.DescribeQuorumRequestData,
              m.DescribeQuorumResponseData),
        _spec(ApiKey.UPDATE_FEATURES, "UpdateFeatures", m.UpdateFeaturesRequestData,
              m.UpdateFeaturesResponseData),
        _spec(ApiKey.FETCH_SNAPSHOT, "FetchSnapshot", m.FetchSnapshotRequestData,
              m.FetchSnapshotResponseData),
        _spec(ApiKey.DESCRIBE_CLUSTER, "DescribeCluster", m.DescribeClusterRequestData,
              m.DescribeClusterResponseData),
        _spec(ApiKey.CONTROLLER_REGISTRATION, "ControllerRegistration",
              m.ControllerRegistrationRequestData, m.ControllerRegistrationResponseData),
        _spec(ApiKey.ADD_RAFT_VOTER, "AddRaftVoter", m.AddRaftVoterRequestData,
              m.AddRaftVoterResponseData),
        _spec(ApiKey.REMOVE_RAFT_VOTER, "RemoveRaftVoter", m.RemoveRaftVoterRequestData,
              m.RemoveRaftVoterResponseData),
        _spec(ApiKey.UPDATE_RAFT_VOTER, "UpdateRaftVoter", m.UpdateRaftVoterRequestData,
              m.UpdateRaftVoterResponseData),
    )
}
"""Every api this package encodes and decodes, with its full version range."""

_BY_INT: dict[int, ApiSpec] = {int(k): v for k, v in API_SPECS.items()}

SERVED_APIS: tuple[ApiSpec, ...] = tuple(sorted(API_SPECS.values(), key=lambda s: s.key))
"""What a KRaft controller built on this package answers (all of API_SPECS)."""

SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {"kraft.version": (0, 1),
                                                  "metadata.version": (20, 33)}
"""Feature name -> (min, max) supported level, advertised in ApiVersions. metadata.version:
the levels `kraft format --release-version` can bootstrap (3.8-IV0 to 4.4-IV2)."""


def api_spec(api_key: int, api_version: int | None = None) -> ApiSpec:
    """The spec of `api_key`; raises UnsupportedVersionError for an unknown key, or when
    `api_version` is given and outside the supported range."""
    spec = _BY_INT.get(api_key)
    if spec is None:
        raise UnsupportedVersionError(
            f"unknown api key {api_key}", api_key=api_key, api_version=api_version
        )
    if api_version is not None and not spec.supports(api_version):
        raise UnsupportedVersionError(
            f"{spec.name} v{api_version} is not supported "
            f"(versions {spec.min_version}-{spec.max_version})",
            api_key=api_key,
            api_version=api_version,
        )
    return spec


def api_versions_response(
    version: int,
    *,
    error_code: int = ErrorCode.NONE,
    throttle_time_ms: int = 0,
    finalized_features: dict[str, int] | None = None,
    finalized_features_epoch: int = -1,
) -> m.ApiVersionsResponseData:
    """Build this node's ApiVersions response body for a request of `version`.

    Lists every served api and `SUPPORTED_FEATURES`. Like Kafka, features whose minimum is 0
    are only listed for v4+ (older clients reject a minimum of 0), and finalized features at
    level 0 are left out. For an UNSUPPORTED_VERSION answer pass `version=0` (KIP-511).
    """
    features = [
        m.ApiVersionsResponseData.SupportedFeatureKey(name, lo, hi)
        for name, (lo, hi) in sorted(SUPPORTED_FEATURES.items())
        if version >= 4 or lo > 0
    ]
    finalized = [
        m.ApiVersionsResponseData.FinalizedFeatureKey(name, level, level)
        for name, level in sorted((finalized_features or {}).items())
        if level > 0
    ]
    return m.ApiVersionsResponseData(
        error_code=int(error_code),
        api_keys=[
            m.ApiVersionsResponseData.ApiVersion(int(s.key), s.min_version, s.max_version)
            for s in SERVED_APIS
        ],
        throttle_time_ms=throttle_time_ms if version >= 1 else 0,
        supported_features=features if version >= 3 else [],
        finalized_features_epoch=finalized_features_epoch if version >= 3 else -1,
        finalized_features=finalized if version >= 3 else [],
    )
