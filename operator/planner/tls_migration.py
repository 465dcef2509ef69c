"""TLS migration: a running quorum moved between PLAINTEXT and TLS by three rolls, as Kafka's
controllers are (docs/security.md, "Moving a running quorum between PLAINTEXT and TLS").

A quorum runs on one controller listener, recorded in status.tls (its name, port and
protocol; a new quorum starts on CONTROLLER, port 9093, with the protocol its spec asks for).
When spec.tls.enabled asks for the other protocol, a second listener joins it on the other
port (CONTROLLER on 9093, CONTROLLER_SSL or CONTROLLER_PLAINTEXT on 9094) and the pods are
rolled through the layouts of the migration's phases (status.tls.migration.phase), one roll
each, by the ordinary rollout (one pod at a time, the leader last after it resigns):

  phase 0   the old listener alone
  phase 1   both, the old one first: every node accepts both and dials the old protocol
  phase 2   both, the new one first: every node dials the new protocol, and still accepts
            the old one from the nodes not rolled yet
  phase 3   the new listener alone: the migration is complete

A node binds every listener of its layout and dials its peers with the first one's protocol,
at the endpoint of that name (kraft.config.node). A phase starts only once the roll of the
one before is done and the quorum is healthy: every wanted node a caught-up voter on a
current, ready pod, and (kraft.version 1) every voter's published endpoints (UpdateRaftVoter)
exactly the listeners of that layout, so the next roll's dialling finds them. The authorizer
is on only in a layout whose one listener is TLS: during the migration a peer may dial
plaintext, and a plaintext peer is User:ANONYMOUS. A spec that turns back mid-way walks the
phases back. The layout is part of the pods' spec hash, so each phase is a roll.
"""

from __future__ import annotations

from typing import Any

from kraft_operator.observed import PLAINTEXT, SSL, ListenerState, TlsMigration
from kraft_operator.planner.actions import AdvanceTlsMigration, Wait
from kraft_operator.planner.context import Context, Decision
from kraft_operator.planner.listeners import (
    HOME_PORT,
    PHASE_TEXT,
    PHASES,
    Layout,
    layout_of,
    listener_for,
    other_listener,
    tls_status,
)

REASON = "MigratingTls"


def _not_settled(ctx: Context, layout: Layout) -> str | None:
    """Why the roll to `layout` is not done yet (None: done, the quorum healthy)."""
    if ctx.quorum is None or ctx.leader_id is None:
        return "the quorum has no leader"
    ids = {v.replica_id for v in ctx.voters}
    if ids != set(ctx.desired_ids):
        return f"the voters are {sorted(ids)}, not {list(ctx.desired_ids)}"
    lagging = sorted(v.replica_id for v in ctx.voters if not ctx.healthy(v))
    if lagging:
        return f"voters {lagging} are not caught up on running pods"
    for pod in sorted(ctx.pods.values(), key=lambda p: p.node_id):
        if pod.deleting or pod.spec_hash != ctx.desired_hash or not pod.ready:
            return f"{pod.name} does not run the current spec, ready, yet"
    if (ctx.quorum.kraft_version or 0) >= 1:
        wanted = set(layout.names)
        for voter in sorted(ctx.voters, key=lambda v: v.replica_id):
            published = {e.listener for e in voter.endpoints}
            if published != wanted:
                return (f"voter {voter.replica_id} publishes {sorted(published)}, not "
                        f"{sorted(wanted)} yet (UpdateRaftVoter)")
    return None


def step(ctx: Context) -> Decision | None:
    """The migration's next phase (or its end) once the roll of this one is done; None when
    the quorum runs on the protocol its spec wants and nothing migrates."""
    state = ctx.obs.listeners
    mig = state.migration
    now_layout = layout_of(state)
    if mig is None:
        if state.steady.ssl == state.wanted_ssl:
            return None
        target, phase, started = other_listener(state.steady), 0, ctx.now
    else:
        target, phase, started = mig.target, mig.phase, mig.started_at
    goal = PHASES if state.wanted_ssl == target.ssl else 0
    waiting = _not_settled(ctx, now_layout)
    direction = "to TLS" if target.ssl else "to PLAINTEXT"
    if waiting is not None:
        return Decision(Wait("TlsMigrationWaiting", f"the migration {direction} waits: "
                             f"{waiting}"), REASON)
    if mig is not None and phase == goal:
        steady = target if goal == PHASES else state.steady
        done = ListenerState(steady, None, state.wanted_ssl)
        what = (f"the quorum runs on {steady.name} ({steady.protocol}, port {steady.port}) "
                f"alone; the migration {direction} is complete" if goal == PHASES else
                f"the migration {direction} is undone: the quorum runs on {steady.name} "
                f"({steady.protocol}, port {steady.port}) alone again")
        return Decision(AdvanceTlsMigration(goal, steady.protocol, True, what), REASON,
                        message=what, extra_status={"tls": tls_status(done)})
    nxt = phase + (1 if goal > phase else -1)
    moved = ListenerState(state.steady, TlsMigration(target, nxt, started), state.wanted_ssl)
    layout = layout_of(moved)
    what = (f"TLS migration {direction}, phase {nxt} of {PHASES}: {PHASE_TEXT[nxt]} "
            f"(listeners {', '.join(layout.names)}; the pods roll to it)")
    return Decision(AdvanceTlsMigration(nxt, target.protocol, False, what), REASON,
                    message=what, extra_status={"tls": tls_status(moved)})


def unformed(ctx: Context) -> dict[str, Any] | None:
    """A quorum nothing was formatted for yet (no pod, no voter ever known) takes the
    protocol its spec wants at once: status.tls's new record, None when it has it."""
    state = ctx.obs.listeners
    if ctx.quorum is not None or ctx.obs.last_known_voters or ctx.pods:
        return None
    if state.steady.ssl == state.wanted_ssl and state.migration is None:
        return None
    protocol = SSL if state.wanted_ssl else PLAINTEXT
    return tls_status(ListenerState(listener_for(protocol, HOME_PORT), None, state.wanted_ssl))
