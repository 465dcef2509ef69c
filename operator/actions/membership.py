"""Membership: AddRaftVoter and RemoveRaftVoter through kraft.admin.

A call whose goal is met already (`already_done`: the add or removal went through on an
earlier attempt whose answer was lost) is success. A retriable error (another change still
committing, a leader election, the observer not caught up) is tried again on a later
reconcile; the planner re-checks the live quorum before sending it again.
"""

from __future__ import annotations

from kraft_operator.actions.base import Env, Outcome
from kraft_operator.planner import AddVoter, RemoveVoter

from kraft.admin import AdminError, Endpoint, QuorumClient


def _client(env: Env) -> QuorumClient:
    return QuorumClient(env.bootstrap(), timeout_s=min(env.admin_timeout_s, 5.0),
                        cluster_id=env.observed.cluster_id, client_id="kraft-operator",
                        tls=env.admin_tls)


def _failed(what: str, exc: AdminError) -> Outcome:
    if exc.retriable:
        return Outcome(False, "MembershipChangeRetrying", f"{what}: {exc} (retried later)")
    return Outcome(False, "MembershipChangeFailed", f"{what}: {exc}", warning=True)


async def add_voter(action: AddVoter, env: Env) -> Outcome:
    what = f"AddRaftVoter {action.node_id}:{action.directory_id}"
    # the new voter's endpoints: every controller listener its pod binds (Kafka's
    # add-controller sends the controller's advertised listeners)
    endpoints = [Endpoint(listener=item.name, host=env.ref.host(action.node_id), port=item.port)
                 for item in env.ref.layout.listeners]
    try:
        async with _client(env) as admin:
            await admin.add_voter(action.node_id, action.directory_id, endpoints,
                                  timeout_s=env.admin_timeout_s)
    except AdminError as exc:
        if exc.already_done:
            return Outcome(True, "AddedVoter", f"{what}: already a voter")
        return _failed(what, exc)
    return Outcome(True, "AddedVoter", f"{what} committed")


async def remove_voter(action: RemoveVoter, env: Env) -> Outcome:
    what = f"RemoveRaftVoter {action.node_id}:{action.directory_id}"
    try:
        async with _client(env) as admin:
            await admin.remove_voter(action.node_id, action.directory_id,
                                     timeout_s=env.admin_timeout_s)
    except AdminError as exc:
        if exc.already_done:
            return Outcome(True, "RemovedVoter", f"{what}: already not a voter")
        return _failed(what, exc)
    return Outcome(True, "RemovedVoter", f"{what} committed")
