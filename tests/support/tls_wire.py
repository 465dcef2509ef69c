"""A blocking Kafka-protocol client over TCP or TLS for tests that play a hostile peer: any
request, any certificate (or none), any claimed replica id; the answer decoded, or the
exception that ended the connection."""

from __future__ import annotations

import socket
import ssl
import struct
from pathlib import Path
from typing import Any

from kraft.protocol import messages as w
from kraft.protocol.api import ApiKey
from kraft.protocol.framing import RequestHeader, decode_response, encode_request
from kraft.protocol.uuid import Uuid
from kraft.raft import messages as m
from kraft.server.translate import request_to_wire
from tests.support.attacker import read_exact

TOPIC = "__cluster_metadata"
TOPIC_ID = Uuid.parse("AAAAAAAAAAAAAAAAAAAAAQ")


def client_context(truststore: Path | None, keystore: Path | None = None, *,
                   check_hostname: bool = True) -> ssl.SSLContext:
    """A client context trusting `truststore` (None: nothing), presenting `keystore`."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = check_hostname
    if truststore is not None:
        ctx.load_verify_locations(cafile=str(truststore))
    if keystore is not None:
        ctx.load_cert_chain(str(keystore))
    return ctx


class Wire:
    """One connection (TLS when `ctx` is given); `call` sends one request and reads its
    answer. Raises OSError (ssl.SSLError included) or ConnectionError when the peer refuses."""

    def __init__(self, host: str, port: int, ctx: ssl.SSLContext | None,
                 timeout: float = 10.0) -> None:
        raw = socket.create_connection((host, port), timeout=timeout)
        try:
            self.sock: socket.socket = raw if ctx is None else ctx.wrap_socket(
                raw, server_hostname=host)
        except BaseException:
            raw.close()
            raise
        self._corr = 0

    def call(self, api: ApiKey, version: int, body: object) -> Any:
        self._corr += 1
        frame = encode_request(RequestHeader(int(api), version, self._corr, "hostile"), body)
        self.sock.sendall(frame)
        (size,) = struct.unpack(">i", read_exact(self.sock, 4))
        header, data = decode_response(int(api), version, read_exact(self.sock, size))
        assert header.correlation_id == self._corr
        return data

    def peer_certificate(self) -> dict[str, Any]:
        assert isinstance(self.sock, ssl.SSLSocket)
        cert = self.sock.getpeercert()
        assert cert is not None
        return dict(cert)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


# ------------------------------------------------------------------ the requests


def api_versions() -> tuple[ApiKey, int, object]:
    return ApiKey.API_VERSIONS, 3, w.ApiVersionsRequestData(client_software_name="hostile",
                                                            client_software_version="1")


def describe_quorum() -> tuple[ApiKey, int, object]:
    D = w.DescribeQuorumRequestData
    return ApiKey.DESCRIBE_QUORUM, 2, D(topics=[D.TopicData(
        topic_name=TOPIC, partitions=[D.PartitionData(partition_index=0)])])


def remove_voter(cluster_id: str, voter: int, directory: Uuid) -> tuple[ApiKey, int, object]:
    return ApiKey.REMOVE_RAFT_VOTER, 0, w.RemoveRaftVoterRequestData(
        cluster_id=cluster_id, voter_id=voter, voter_directory_id=directory)


def add_voter(cluster_id: str, voter: int, host: str, port: int) -> tuple[ApiKey, int, object]:
    A = w.AddRaftVoterRequestData
    return ApiKey.ADD_RAFT_VOTER, 0, A(
        cluster_id=cluster_id, timeout_ms=5000, voter_id=voter,
        voter_directory_id=Uuid.random(),
        listeners=[A.Listener(name="CONTROLLER", host=host, port=port)])


def update_voter(cluster_id: str, epoch: int, voter: int, directory: Uuid, host: str,
                 port: int) -> tuple[ApiKey, int, object]:
    U = w.UpdateRaftVoterRequestData
    return ApiKey.UPDATE_RAFT_VOTER, 0, U(
        cluster_id=cluster_id, current_leader_epoch=epoch, voter_id=voter,
        voter_directory_id=directory,
        listeners=[U.Listener(name="CONTROLLER", host=host, port=port)],
        kraft_version_feature=U.KRaftVersionFeature(min_supported_version=0,
                                                    max_supported_version=1))


def update_features(level: int) -> tuple[ApiKey, int, object]:
    F = w.UpdateFeaturesRequestData
    return ApiKey.UPDATE_FEATURES, 1, F(feature_updates=[F.FeatureUpdateKey(
        feature="kraft.version", max_version_level=level, upgrade_type=1)])


def begin_epoch(cluster_id: str, epoch: int, leader: int, voter: int
                ) -> tuple[ApiKey, int, object]:
    B = w.BeginQuorumEpochRequestData
    return ApiKey.BEGIN_QUORUM_EPOCH, 1, B(
        cluster_id=cluster_id, voter_id=voter,
        topics=[B.TopicData(topic_name=TOPIC, partitions=[B.PartitionData(
            partition_index=0, leader_id=leader, leader_epoch=epoch)])],
        leader_endpoints=[B.LeaderEndpoint(name="CONTROLLER", host="127.0.0.1", port=1)])


def end_epoch(cluster_id: str, epoch: int, leader: int) -> tuple[ApiKey, int, object]:
    E = w.EndQuorumEpochRequestData
    return ApiKey.END_QUORUM_EPOCH, 1, E(
        cluster_id=cluster_id,
        topics=[E.TopicData(topic_name=TOPIC, partitions=[E.PartitionData(
            partition_index=0, leader_id=leader, leader_epoch=epoch)])],
        leader_endpoints=[E.LeaderEndpoint(name="CONTROLLER", host="127.0.0.1", port=1)])


def vote(cluster_id: str, epoch: int, candidate: int, last_offset: int,
         last_epoch: int) -> tuple[ApiKey, int, object]:
    V = w.VoteRequestData
    return ApiKey.VOTE, 2, V(cluster_id=cluster_id, voter_id=-1, topics=[V.TopicData(
        topic_name=TOPIC, partitions=[V.PartitionData(
            partition_index=0, replica_epoch=epoch, replica_id=candidate,
            last_offset_epoch=last_epoch, last_offset=last_offset)])])


def fetch(cluster_id: str, replica: int, directory: Uuid | None, epoch: int, offset: int,
          last_epoch: int) -> tuple[ApiKey, int, object]:
    req = m.FetchRequest(replica_id=replica, replica_directory_id=directory,
                         current_leader_epoch=epoch, fetch_offset=offset,
                         last_fetched_epoch=last_epoch, max_wait_ms=0)
    return ApiKey.FETCH, 17, request_to_wire(req, cluster_id, 17)
