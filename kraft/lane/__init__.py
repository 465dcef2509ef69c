"""The native lane (docs/native-lane.md): an accelerator of the write path's steady state,
behind one boundary.

The consensus core (`kraft.raft`) leases the lane the steady state of one epoch
(`kraft.raft.lease`: `LeaderLease`, `FollowerLease`) and takes back the lane's work as events
(`LeaderLaneReport`, `FollowerLaneReport`). It never imports this package. Here:

- the lane's rules in plain Python (`LeaderLane`, `FollowerLane`, built from a lease; a leader's
  voters are the lease's own rows, `kraft.raft.lease.LeaseVoter`), and the same rules in C
  (`native()`, the extension `kraft.lane._native`, and `to_native`);
- the node's runners of the lane's loops (`FollowerLaneRunner`, `LeaderLaneRunner`), which arm
  the C loops under a lease, tick them (`kraft.lane.ticker`) and turn what they did into
  reports; they see the node only through `LaneHost` (`kraft.lane.host`: its core and log, its
  event loop and queue, and the connections it lends them: `FetchConnection`,
  `ClientConnection`, `VoterConnection`), which the node provides;
- the runners' turns on the node's core loop (`LaneArbiter`, `kraft.lane.arbiter`): before
  and after each event the core handles, after each step of applying, around the loop's
  sleep, and a local read's catch-up; it sees the node through `ArbiterHost`, a `LaneHost`
  with the fetch in flight and the apply;
- the C scan of an append (`append_scan`), which the node hands the log
  (`SegmentedLog.use_native_scan`): storage imports nothing of the lane.

The names below are the package's interface: the node, the simulator, the benchmarks and the
tests other than the lane's own import nothing else of it.
"""

from kraft.lane.arbiter import ArbiterHost, LaneArbiter
from kraft.lane.follower import FollowerLaneRunner
from kraft.lane.host import ClientConnection, FetchConnection, LaneHost, VoterConnection
from kraft.lane.leader import LeaderLaneRunner
from kraft.lane.rules import (
    FollowerLane,
    LaneAnswer,
    LaneFetch,
    LeaderLane,
    append_scan,
    native,
    to_native,
)

__all__ = [
    "ArbiterHost",
    "ClientConnection",
    "FetchConnection",
    "FollowerLane",
    "FollowerLaneRunner",
    "LaneAnswer",
    "LaneArbiter",
    "LaneFetch",
    "LaneHost",
    "LeaderLane",
    "LeaderLaneRunner",
    "VoterConnection",
    "append_scan",
    "native",
    "to_native",
]
