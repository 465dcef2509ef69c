"""UpdateFeatures (api 57) over a real socket to real `kraft run` processes, the requests
encoded and the answers decoded by kafka-python (an independent implementation), as
`kafka-features --bootstrap-controller` sends them: several FeatureUpdates at once (what
`upgrade --release-version` sends), validate-only, the downgrade types, unknown features, and
a node that is not the leader."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import pytest

from kraft.cli.local import LocalCluster, LocalNode
from kraft.protocol import messages as w
from kraft.protocol.api import ApiKey
from kraft.protocol.errors import ErrorCode
from kraft.protocol.framing import RequestHeader, decode_response, encode_request
from kraft.protocol.uuid import Uuid

kp = pytest.importorskip("kafka.protocol.admin.cluster")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
PREFIX = "The update failed for all features since the following feature had an error: "
MV = 27  # what `kraft format` writes by default (4.1-IV1)


def _recv(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        assert chunk, "connection closed"
        buf += chunk
    return buf


def update_features(node: LocalNode, version: int, updates: list[tuple[str, int, int]],
                    validate_only: bool = False, corr: int = 11) -> Any:
    """One UpdateFeatures request, as kafka-python encodes it; its decoded answer."""
    R = kp.UpdateFeaturesRequest
    request = R(timeout_ms=30000, validate_only=validate_only, feature_updates=[
        R.FeatureUpdateKey(feature=name, max_version_level=level,
                           allow_downgrade=kind != UPGRADE, upgrade_type=kind)
        for name, level, kind in updates])
    request.with_header(correlation_id=corr, client_id="kafka-features")
    with socket.create_connection((node.host, node.port), timeout=60) as s:
        s.sendall(request.encode(version=version, header=True, framed=True))
        size = struct.unpack(">i", _recv(s, 4))[0]
        data = _recv(s, size)
    response = kp.UpdateFeaturesResponse.decode(data, version=version, header=True)
    assert response.header.correlation_id == corr
    return response


def finalized(node: LocalNode) -> dict[str, int]:
    """The finalized features ApiVersions (v4) reports."""
    frame = encode_request(RequestHeader(int(ApiKey.API_VERSIONS), 4, 3, "t"),
                           w.ApiVersionsRequestData("t", "1"))
    with socket.create_connection((node.host, node.port), timeout=60) as s:
        s.sendall(frame)
        size = struct.unpack(">i", _recv(s, 4))[0]
        _, resp = decode_response(int(ApiKey.API_VERSIONS), 4, _recv(s, size))
    assert isinstance(resp, w.ApiVersionsResponseData)
    return {f.name: f.max_version_level for f in resp.finalized_features}


def _started(clusters: Callable[..., LocalCluster], observers: int = 0) -> LocalCluster:
    c = clusters(3, observers=observers, static=True)
    c.start_all()
    c.wait_for_leader(60)
    for nid in c.nodes:
        c.wait_ready(nid, 60)
    return c


def _until_accepted(send: Callable[[], Any], timeout: float = 60) -> Any:
    """Voters report their supported kraft.version range (UpdateRaftVoter) soon after they
    follow a leader; until then an upgrade is refused. Retried as an operator would."""
    deadline = time.monotonic() + timeout
    while True:
        response = send()
        if response.error_code == 0 or time.monotonic() > deadline:
            return response
        time.sleep(0.3)


def test_update_features_as_kafkas_controller_answers_it(
    clusters: Callable[..., LocalCluster],
) -> None:
    c = _started(clusters)
    leader = c.nodes[c.wait_for_leader(60)]
    follower = next(n for nid, n in c.nodes.items() if n is not leader)
    assert finalized(leader) == {"metadata.version": MV}  # kraft.version 0 is not listed

    # a node that is not the active controller says so, for the whole request
    r = update_features(follower, 1, [("kraft.version", 1, UPGRADE)])
    assert (r.error_code, r.results) == (ErrorCode.NOT_CONTROLLER, [])

    # `kafka-features upgrade --release-version 4.1 --dry-run`: metadata.version and
    # kraft.version together, validate-only; each FeatureUpdate gets its result (v1)
    release = [("metadata.version", MV, UPGRADE), ("kraft.version", 1, UPGRADE)]
    r = _until_accepted(lambda: update_features(leader, 1, release, validate_only=True))
    assert r.error_code == 0, r.error_message
    assert [(x.feature, x.error_code) for x in r.results] == [("metadata.version", 0),
                                                              ("kraft.version", 0)]
    assert "kraft.version" not in finalized(leader)  # validate-only wrote nothing

    # a feature this node does not know refuses the whole request (nothing changes)
    r = update_features(leader, 1, [("kraft.version", 1, UPGRADE), ("group.version", 1, UPGRADE)])
    assert r.error_code == ErrorCode.INVALID_UPDATE_VERSION and r.results == []
    assert r.error_message == (PREFIX + "Invalid update version 1 for feature group.version. "
                               f"Local controller {leader.node_id} does not support this feature.")
    assert "kraft.version" not in finalized(leader)

    # Kafka's per-feature checks, each refusing the request with its message
    refusals = [
        ([("metadata.version", 34, UPGRADE)],
         f"Invalid update version 34 for feature metadata.version. Local controller "
         f"{leader.node_id} only supports versions 20-33"),
        ([("metadata.version", 26, UPGRADE)],
         "Invalid update version 26 for feature metadata.version. Can't downgrade the version "
         "of this feature without setting the upgrade type to either safe or unsafe downgrade."),
        ([("kraft.version", 1, SAFE_DOWNGRADE)],
         "Invalid update version 1 for feature kraft.version. Can't downgrade to a newer "
         "version."),
        ([("kraft.version", 1, 9)],
         "Invalid update version 1 for feature kraft.version. The controller does not support "
         "the given upgrade type."),
        ([("kraft.version", -1, UPGRADE)],
         "Invalid update version -1 for feature kraft.version. A feature version cannot be "
         "less than 0."),
    ]
    for updates, message in refusals:
        r = update_features(leader, 2, updates)
        assert (r.error_code, r.error_message) == (ErrorCode.INVALID_UPDATE_VERSION,
                                                   PREFIX + message), updates

    # the upgrade itself, at version 2 (no per-feature results); answered once committed
    r = _until_accepted(lambda: update_features(leader, 2, release))
    assert (r.error_code, r.error_message) == (0, None)
    for node in c.nodes.values():
        deadline = time.monotonic() + 30
        while finalized(node).get("kraft.version") != 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert finalized(node) == {"kraft.version": 1, "metadata.version": MV}

    # kraft.version cannot go back, whatever the downgrade type; the same level is fine
    for kind in (SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        r = update_features(leader, 1, [("kraft.version", 0, kind)])
        assert (r.error_code, r.error_message) == (
            ErrorCode.INVALID_UPDATE_VERSION,
            PREFIX + "Invalid update version 0 for feature kraft.version. Can't downgrade the "
                     "version of this feature.")
    r = update_features(leader, 0, [("kraft.version", 1, UPGRADE), ("metadata.version", MV, UPGRADE)])
    assert r.error_code == 0 and [x.feature for x in r.results] == ["kraft.version",
                                                                   "metadata.version"]
    # version 0: AllowDowngrade=true is a safe downgrade
    r = update_features(leader, 0, [("kraft.version", 0, SAFE_DOWNGRADE)])
    assert r.error_message.endswith("Can't downgrade the version of this feature.")


def test_advertised_metadata_version_range_is_what_format_can_bootstrap() -> None:
    from kraft.protocol.api import SUPPORTED_FEATURES
    from kraft.storage.bootstrap import METADATA_VERSIONS

    levels = METADATA_VERSIONS.values()
    assert SUPPORTED_FEATURES["metadata.version"] == (min(levels), max(levels))


def test_a_feature_named_twice_counts_once_with_its_last_level() -> None:
    from kraft.server.features import FeatureState, FeatureUpdate, plan_feature_updates

    known = {"kraft.version": FeatureState(0, 0, 1)}
    plan = plan_feature_updates([FeatureUpdate("kraft.version", 5, UPGRADE),
                                 FeatureUpdate("kraft.version", 1, UPGRADE)], known, 1)
    assert plan.kraft_version == 1
    assert plan_feature_updates([FeatureUpdate("kraft.version", 0, UPGRADE)], known,
                                1).kraft_version is None


def register(node: LocalNode, controller_id: int, lo: int, hi: int) -> w.ControllerRegistrationResponseData:
    """A ControllerRegistration (api 70) naming a supported kraft.version range."""
    C = w.ControllerRegistrationRequestData
    body = C(controller_id=controller_id, incarnation_id=Uuid.random(), zk_migration_ready=False,
             listeners=[C.Listener("CONTROLLER", node.host, 1, 0)],
             features=[C.Feature("kraft.version", lo, hi)])
    frame = encode_request(RequestHeader(int(ApiKey.CONTROLLER_REGISTRATION), 0, 5, "t"), body)
    with socket.create_connection((node.host, node.port), timeout=60) as s:
        s.sendall(frame)
        size = struct.unpack(">i", _recv(s, 4))[0]
        _, resp = decode_response(int(ApiKey.CONTROLLER_REGISTRATION), 0, _recv(s, size))
    assert isinstance(resp, w.ControllerRegistrationResponseData)
    return resp


def test_the_upgrade_checks_the_range_every_observer_registered(
    clusters: Callable[..., LocalCluster],
) -> None:
    c = _started(clusters, observers=1)  # node 4 fetches as an observer
    leader = c.nodes[c.wait_for_leader(60)]
    follower = next(n for nid, n in c.nodes.items() if n is not leader and nid != 4)
    upgrade = [("kraft.version", 1, UPGRADE)]
    # the observer registers itself once it caught up; until then (and until the voters
    # reported theirs) the upgrade is refused
    r = _until_accepted(lambda: update_features(leader, 1, upgrade, validate_only=True))
    assert r.error_code == 0, r.error_message
    # observer 4 now says it only supports kraft.version 0: the upgrade is refused
    assert register(leader, 4, 0, 0).error_code == 0
    r = update_features(leader, 1, upgrade)
    assert (r.error_code, r.error_message) == (
        ErrorCode.INVALID_UPDATE_VERSION,
        PREFIX + "Invalid update version 1 for feature kraft.version. Observer 4 only supports "
                 "versions 0-0")
    assert "kraft.version" not in finalized(leader)
    # a registration goes to the active controller only
    assert register(follower, 4, 0, 1).error_code == ErrorCode.NOT_CONTROLLER
    assert register(leader, 4, 0, 1).error_code == 0
    r = update_features(leader, 1, upgrade)
    assert r.error_code == 0, r.error_message
    deadline = time.monotonic() + 30
    while finalized(c.nodes[4]).get("kraft.version") != 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert finalized(c.nodes[4])["kraft.version"] == 1
