"""The node's effect executor (`kraft.server.executor`) keeps the core's ordering contract, and
the simulator, which runs that same executor, catches it when it does not.

- Recording ports: the quorum state is durable before the vote that depends on it is sent
  (the persist port suspends, as the node's does on its file thread), committed records are
  applied before a state change and exactly up to a snapshot's offset before it is taken (and
  before each kind of effect, what rule 4 says), and the clients' answers and the flush come
  after the list.
- Mutation: an executor that sends before it persists the quorum state is caught by the
  simulator's `vote_durable_before_send` invariant within a few seeds.
"""

from __future__ import annotations

import asyncio
import inspect
import textwrap

import pytest

import kraft.server.executor as executor_module
from kraft.protocol.errors import ErrorCode
from kraft.raft import effects as fx
from kraft.raft.messages import OffsetAndEpoch, VoteResponse
from kraft.server.executor import EffectExecutor, run_now
from kraft.sim.cluster import run_seed
from kraft.sim.params import SimParams


class Recording:
    """Every port at once, writing what it is asked, in order, to `seen`."""

    def __init__(self, applied: int = 0) -> None:
        self.seen: list[str] = []
        self.applied = applied
        self.target = applied

    # LogPort
    def append_records(self, e: fx.AppendRecords) -> bool:
        self.seen.append(f"append {e.base_offset}")
        return True

    def append_control(self, e: fx.AppendControl) -> None:
        self.seen.append(f"control {e.base_offset}")

    def append_fetched(self, e: fx.AppendFetched) -> None:
        self.seen.append("fetched")

    def truncate_to(self, e: fx.TruncateTo) -> None:
        self.seen.append(f"truncate {e.end_offset}")

    def advance_log_start(self, offset: int) -> None:
        self.seen.append(f"log start {offset}")

    async def persist_quorum_state(self, e: fx.PersistQuorumState) -> None:
        self.seen.append(f"persist voted={e.voted_id} begins")
        await asyncio.sleep(0)  # on a file thread in the node: the loop runs meanwhile
        self.seen.append(f"persist voted={e.voted_id} durable")

    def effects_done(self, appended: bool, flush_later: bool) -> None:
        self.seen.append(f"done appended={appended} flush={flush_later}")

    # NetworkPort
    def send_request(self, e: fx.SendRequest) -> None:
        self.seen.append(f"send request to {e.destination}")

    def send_response(self, e: fx.SendResponse) -> None:
        self.seen.append(f"send {type(e.response).__name__} to {e.destination}")

    def send_fetch_response(self, e: fx.SendFetchResponse) -> None:
        self.seen.append(f"send fetch response to {e.destination}")

    def send_fetch_snapshot_response(self, e: fx.SendFetchSnapshotResponse) -> None:
        self.seen.append("send fetch snapshot response")

    def send_api_versions(self, e: fx.SendApiVersions) -> None:
        self.seen.append("api versions")

    # ApplyPort
    def behind(self) -> bool:
        return self.target > self.applied

    def apply_committed(self) -> None:
        self.apply_to(self.target)

    def apply_to(self, offset: int) -> None:
        offset = min(offset, self.target)
        if offset > self.applied:
            self.seen.append(f"apply to {offset}")
            self.applied = offset

    def committed(self, high_watermark: int) -> None:
        self.seen.append(f"committed {high_watermark}")
        self.target = max(self.target, high_watermark)

    # SnapshotPort
    def create_snapshot(self, e: fx.CreateSnapshot) -> None:
        self.seen.append(f"snapshot at {e.snapshot_id.offset} applied={self.applied}")

    def delete_snapshot(self, e: fx.DeleteSnapshot) -> None:
        self.seen.append("delete snapshot")

    def measure_retention(self) -> None:
        self.seen.append("measure")

    def write_snapshot_chunk(self, e: fx.WriteSnapshotChunk) -> None:
        self.seen.append("chunk")

    async def install_snapshot(self, e: fx.InstallSnapshot) -> None:
        self.seen.append("install")

    def abort_snapshot_download(self, e: fx.AbortSnapshotDownload) -> None:
        self.seen.append("abort")

    # ClientPort and NodePort
    def append_accepted(self, e: fx.AppendAccepted) -> None:
        self.seen.append("accepted")

    def append_rejected(self, e: fx.AppendRejected) -> None:
        self.seen.append("rejected")

    def append_committed(self, e: fx.AppendCommitted) -> None:
        self.seen.append("append committed")

    def state_changed(self, e: fx.StateChanged) -> None:
        self.seen.append(f"state {e.state} applied={self.applied}")

    def fetch_adopted(self, e: fx.FetchAdopted) -> None:
        self.seen.append("adopted")

    def answers_out(self) -> None:
        self.seen.append("answers out")


def executor(ports: Recording) -> EffectExecutor:
    return EffectExecutor(ports, ports, ports, ports, ports, ports)


GRANT = fx.SendResponse(2, 7, VoteResponse(ErrorCode.NONE, -1, 5, True))
VOTE = fx.PersistQuorumState(leader_id=-1, leader_epoch=5, voted_id=2, voted_directory_id=None)


async def test_a_vote_is_durable_before_the_grant_is_sent() -> None:
    ports = Recording()
    await executor(ports).execute([VOTE, GRANT])
    assert ports.seen == ["persist voted=2 begins", "persist voted=2 durable",
                          "send VoteResponse to 2", "answers out",
                          "done appended=False flush=False"]


async def test_committed_records_are_applied_before_a_state_change_and_a_snapshot() -> None:
    ports = Recording(applied=10)
    await executor(ports).execute([
        fx.Committed(20),
        fx.AppendRecords(30, 5, (b"x",), 0),
        fx.CreateSnapshot(OffsetAndEpoch(5, 15), None, 1),
        fx.StateChanged("follower", 6, 3),
    ])
    assert ports.seen == [
        "committed 20",  # the target only: nothing applied yet
        "append 30",
        "apply to 15", "snapshot at 15 applied=15",  # exactly to the snapshot's offset
        "apply to 20", "state follower applied=20",  # everything committed, then the change
        "answers out", "done appended=True flush=True",
    ]


AHEAD = fx.Committed(20)
"""Committed up to 20 with 10 applied: what each effect below gets applied before it."""


@pytest.mark.parametrize(("effect", "seen"), [
    (fx.AppendRecords(30, 5, (b"x",), 0), ["append 30"]),
    (fx.AdvanceLogStart(15), ["apply to 15", "log start 15"]),
    (fx.CreateSnapshot(OffsetAndEpoch(epoch=5, offset=15), None, 1),
     ["apply to 15", "snapshot at 15 applied=15"]),
    (fx.TruncateTo(25), ["apply to 20", "truncate 25"]),
    (VOTE, ["apply to 20", "persist voted=2 begins", "persist voted=2 durable"]),
    (fx.InstallSnapshot(OffsetAndEpoch(epoch=5, offset=40)), ["apply to 20", "install"]),
    (fx.AppendRejected(1, ErrorCode.NOT_LEADER_OR_FOLLOWER, 2, 6), ["apply to 20", "rejected"]),
], ids=lambda v: type(v).__name__ if not isinstance(v, list) else "")
async def test_what_is_applied_before_each_effect(effect: fx.Effect, seen: list[str]) -> None:
    ports = Recording(applied=10)
    await executor(ports).execute([AHEAD, effect])
    assert ports.seen[1:-2] == seen


def test_an_effect_applied_up_to_its_offset_is_not_also_applied_later() -> None:
    # one table says what is applied before an effect: one that applies exactly up to its
    # offset must not be in the set carried out with nothing applied
    assert executor_module.APPLY_UP_TO
    assert executor_module.APPLY_LATER_OK.isdisjoint(executor_module.APPLY_UP_TO)


def test_the_simulator_runs_the_executor_to_its_end_at_once() -> None:
    class Suspending(Recording):
        async def persist_quorum_state(self, e: fx.PersistQuorumState) -> None:
            await asyncio.sleep(0)

    with pytest.raises(RuntimeError, match="suspended"):
        run_now(executor(Suspending()).execute([VOTE]))

    class AtOnce(Recording):
        async def persist_quorum_state(self, e: fx.PersistQuorumState) -> None:
            self.seen.append("persist")

    ports = AtOnce()
    run_now(executor(ports).execute([VOTE, GRANT]))
    assert ports.seen[:2] == ["persist", "send VoteResponse to 2"]


def send_before_persist(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutation: the executor writes the quorum state after the rest of the list."""
    src = textwrap.dedent(inspect.getsource(EffectExecutor.execute))
    for old, new in (
        ("flush_later = False  #", "late = []\n    flush_later = False  #"),
        ("await log.persist_quorum_state(e)  # durable before anything after it",
         "late.append(e)"),
        ("self.clients.answers_out()",
         "self.clients.answers_out()\n    for q in late:\n        await log.persist_quorum_state(q)"),
    ):
        assert old in src, old
        src = src.replace(old, new, 1)
    namespace: dict[str, object] = {}
    exec(src, vars(executor_module), namespace)
    monkeypatch.setattr(EffectExecutor, "execute", namespace["execute"])


async def test_the_recording_ports_see_a_send_before_persist_mutation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    send_before_persist(monkeypatch)
    ports = Recording()
    await executor(ports).execute([VOTE, GRANT])
    assert ports.seen.index("send VoteResponse to 2") < ports.seen.index(
        "persist voted=2 durable")


def test_the_simulator_catches_an_executor_that_sends_before_it_persists(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for seed in range(3):  # the correct executor: no violation on these seeds
        assert run_seed(seed, SimParams(lane_shadow=False)).ok
    send_before_persist(monkeypatch)
    violation = None
    for seed in range(20):
        result = run_seed(seed, SimParams(lane_shadow=False))
        if not result.ok:
            violation = result.violation
            break
    assert violation is not None and "vote_durable_before_send" in violation, violation
