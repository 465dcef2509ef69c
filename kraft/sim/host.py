"""What the simulator's parts use of the simulation that hosts them (`SimHost`).

The follower and leader drives (`kraft.sim.lane_drive`, `kraft.sim.leader_drive`), the byte
and disk faults (`kraft.sim.faults`) and the ports of a replica's effect executor
(`kraft.sim.ports`) take their `kraft.sim.cluster.Simulation` through this protocol: its
clock, its random stream, its invariants, its replicas and network state, and the public
methods that queue work on its event queue or hand an event to a replica. None of them
imports `kraft.sim.cluster`, and none touches a private attribute of the simulation.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Protocol

from kraft.raft.effects import Effect, SendRequest
from kraft.raft.events import Event
from kraft.raft.messages import Endpoint
from kraft.sim.invariants import Invariants
from kraft.sim.node import SimNode
from kraft.sim.params import SimParams


class SimHost(Protocol):
    """The simulation as its drives, faults and ports see it."""

    seed: int
    params: SimParams
    now: int
    """The simulated clock (ms)."""
    rng: random.Random
    """The run's random stream: each draw from it is part of what a seed reproduces."""
    inv: Invariants
    nodes: dict[int, SimNode]
    stats: dict[str, int]
    trace: Callable[[str], None] | None
    """Where trace lines go (None: no trace, and none is rendered)."""
    connections: bool
    """A request to a crashed replica is refused, and a crash fails those in flight to it."""
    blocked: set[tuple[int, int]]
    """The cut paths (sender, receiver)."""
    loss: float
    """Share of the messages the network loses."""
    healed_at: int | None
    """When every fault was healed (None: still in the fault phase)."""
    elections: int
    """Leaders elected so far."""

    def note(self, node: int, what: str, detail: object) -> None:
        """One line of the trace, when tracing."""
        ...

    def count(self, name: str) -> None:
        """Count one more of `name` in the run's stats."""
        ...

    def execute(self, n: SimNode, effects: list[Effect]) -> None:
        """Carry out `effects` of replica `n` with its effect executor."""
        ...

    def deliver_core(self, n: SimNode, event: Event) -> None:
        """Hand `event` to `n`'s core now (the lanes' reports), and carry out its effects."""
        ...

    def deliver_later(self, n: SimNode, at: int, event: Event) -> None:
        """`event` reaches `n`'s core at `at`, unless `n` restarted meanwhile."""
        ...

    def crash(self, n: SimNode) -> None:
        """`n`'s process dies: what it did not flush is lost."""
        ...

    def schedule_flush(self, n: SimNode) -> None:
        """Flush `n`'s log soon (1-8 ms), unless a flush is already due."""
        ...

    def check_durable_majority(self, n: SimNode, hw: int) -> None:
        """Leader `n` claims its log committed below `hw`: a majority must hold it durably."""
        ...

    def append_committed(self, append_id: int) -> None:
        """A client's append was answered as committed."""
        ...

    def lane_sync_later(self, n: SimNode, token: int) -> None:
        """The sync a follower's lane started completes 1-8 ms from now."""
        ...

    def leader_lane_later(self, n: SimNode, what: str, token: int, at: int) -> None:
        """The leader lane's sync completes, or its parked fetches' timer fires, at `at`."""
        ...

    def fetch_adopted(self, n: SimNode, correlation_id: int) -> None:
        """`n`'s core took its follower lane's fetch in flight as request `correlation_id`."""
        ...

    def piece_later(self, at: int, dst: int, payload: object, incarnation: int) -> None:
        """A piece of a byte stream reaches replica `dst` at `at`, if it is still
        `incarnation` (`kraft.sim.faults`)."""
        ...

    def route(self, dest: int, endpoints: tuple[Endpoint, ...]) -> int:
        """The replica a request goes to (a bootstrap request names only endpoints)."""
        ...

    def connect(self, n: SimNode, dst: int, e: SendRequest) -> bool:
        """With `connections`: False when `dst` has crashed and refuses; else True."""
        ...

    def send(self, src: int, dst: int, event: Event) -> None:
        """Put a message on the simulated network."""
        ...

    def api_versions(self, n: SimNode, target: int) -> None:
        """`n` asks replica `target` for its kraft.version range; the answer comes later."""
        ...
