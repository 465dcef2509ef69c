"""One simulated replica (`SimNode`: its disk survives restarts, everything else does not) and
the endpoint it listens on."""

from __future__ import annotations

from dataclasses import dataclass, field

from kraft.raft.config import RaftConfig
from kraft.raft.core import RaftCore
from kraft.raft.events import Event
from kraft.raft.messages import Endpoint
from kraft.server.executor import EffectExecutor
from kraft.sim.disk import SimDisk

LISTENER = "CONTROLLER"


@dataclass(slots=True)
class SimNode:
    """One simulated replica: its disk survives restarts, everything else does not."""

    node_id: int
    disk: SimDisk
    config: RaftConfig
    core: RaftCore | None = None
    incarnation: int = 0
    timer_at: int | None = None
    flush_pending: bool = False
    applied_to: int = 0
    last_hw: int = -1
    partials: dict[object, bytearray] = field(default_factory=dict)
    immediate: list[Event] = field(default_factory=list)
    acked_end: int = 0
    """Largest FetchOffset this disk sent (an acknowledgement that the log below is durable)."""
    outstanding: dict[int, int] = field(default_factory=dict)
    """Requests sent and not answered yet (correlation id -> node), with `connections`."""
    executor: EffectExecutor | None = None
    """The node's effect executor over this replica's `SimPorts` (made at the first use)."""


def endpoint(node_id: int) -> Endpoint:
    """The listener of replica `node_id` (its host is `node<id>`)."""
    return Endpoint(LISTENER, f"node{node_id}", 9093)
