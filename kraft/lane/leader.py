"""The leader's native lane in the node (docs/native-lane.md; `kraft.lane.leader`).

While a leader is in the steady state of its epoch, `LeaderLaneRunner` hands the binary client
protocol's connection, its voters' fetch connections and the active segment to
`kraft.lane._native.LeaderShell`, a loop on its own thread without the GIL. The loop turns the
client's PUTs into one batch per turn, writes it, sends it to the parked fetches, fdatasyncs it,
counts the voters' fetches as acknowledgements, moves the high watermark, and answers each PUT
once it is committed. Parked fetches are answered at their MaxWaitMs, and with the new high
watermark when they asked for it (KIP-1166, with `kraft.raft.hw.linger.ms` as the core keeps
it).

The core learns what the loop did from `LeaderLaneReport`s:
- a progress report at the bookkeeping tick (`kraft.lane.tick.ms`, backing off while the loop
  is quiet: `kraft.lane.ticker`), and before a local read, while the loop did
  something since the last one (the loop goes on): the segment's new batches are adopted by
  the log (`adopt_written`), and the core moves its log end, durable end, high watermark and
  the voters' rows, so the node applies what committed;
- a last report when the lane stops, before the core handles any other event. It hands back the
  parked fetches, which the voters' connections answer again when the core does; the PUTs not
  committed yet, which the node answers when they are applied, as its own writes; and every
  connection with its unread bytes.

The lane arms only when the core gives a lease (`RaftCore.leader_lease()`), everything appended
is durable with no flush in flight and no write of the node's own waiting, exactly one client
connection is open with nothing in flight, and each connected voter's connection holds nothing
but the fetch the core holds parked for it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from kraft.lane.host import ClientConnection, LaneHost, VoterConnection
from kraft.lane.rules import to_native
from kraft.lane.ticker import LaneTicker, stop_loop
from kraft.raft import events as ev
from kraft.raft import messages as m
from kraft.raft.leader import LeaderState, ParkedFetch
from kraft.storage.errors import StorageError

log = logging.getLogger("kraft.server.leader_lane")


@dataclass(slots=True)
class _Armed:
    """One armed lane: its loop, the lease, and the connections lent to it."""

    shell: Any
    epoch: int
    client: ClientConnection
    voters: dict[int, tuple[int, VoterConnection]]
    """Each voter's connection: (its connection id, the connection)."""
    keys: dict[int, m.ReplicaKey]
    reported_end: int
    """The log end offset the core was last told of."""
    reported_version: int = 0
    """The loop's publish count the core was last told of."""


class LeaderLaneRunner:
    """Arms, ticks and stops one node's leader lane (`module` is `kraft.lane._native`; `host`
    the node, whose request frames the parked fetches come from and go back to)."""

    def __init__(self, host: LaneHost, module: ModuleType) -> None:
        self._host = host
        self._module = module
        self._armed: _Armed | None = None
        self._ticker: LaneTicker | None = None
        self._tick_s = host.lane_tick_ms / 1000
        self.ended = False
        """The loop ended on its own: the core loop takes its last report next."""
        self.arms = 0
        self.reports = 0
        self.stops: dict[str, int] = {}
        self.not_armed: dict[str, int] = {}
        self._not_armed = ""
        """The last arming failure logged (each distinct one is logged once in a row)."""

    def stats(self) -> dict[str, Any]:
        """What the lane has done (for the status page): times armed, reports taken by the
        core, stops by cause, why arming was passed over (by what was not ready), and whether
        it runs now."""
        return {"armed": self._armed is not None, "arms": self.arms, "reports": self.reports,
                "stops": dict(self.stops), "not_armed": dict(self.not_armed)}

    @property
    def armed(self) -> bool:
        """The loop runs (the core must take its report before any other event)."""
        return self._armed is not None

    # ------------------------------------------------------------------ arming

    def _why_not(self, why: str) -> None:
        self.not_armed[why] = self.not_armed.get(why, 0) + 1

    def try_arm(self) -> None:
        """Arm the lane if the core gives a lease and the connections are in a state to lend."""
        host = self._host
        core, dlog, loop = host.core, host.log, host.loop
        if (self._armed is not None or core is None or dlog is None or loop is None
                or not isinstance(core.state, LeaderState)):
            return
        # the cheap checks first: this runs after every event of a leader
        client = host.client_connection()
        if client is None:
            return  # none, or several: the lane serves one client connection
        if not client.lendable():
            return self._why_not("client")
        if host.busy():
            return self._why_not("busy")
        if dlog.flush_in_flight or dlog.durable_end_offset != dlog.log_end_offset:
            return self._why_not("log")
        lease = core.leader_lease()
        if lease is None or core.log.last_epoch() != lease.epoch:
            return
        if dlog.log_end_offset != lease.log_end:
            return self._why_not("log")
        s = core.state
        assert isinstance(s, LeaderState)
        parked = {p.source: p for p in s.parked}
        if len(parked) != len(s.parked):
            return self._why_not("parked")
        voters: dict[int, tuple[int, VoterConnection]] = {}
        keys: dict[int, m.ReplicaKey] = {}
        for v in lease.voters:
            if v.is_leader or v.key is None:
                continue
            connected = host.voter_connection(v.id)
            if connected is None:
                continue  # not connected: its fetch, when it comes, stops the lane
            peer, proto = connected
            p = parked.get(v.id)
            if not proto.lendable(1 if p is not None else 0):
                return self._why_not("voter")
            if p is not None:
                waiting_frame = host.parked_frame(p.correlation_id)
                if waiting_frame is None or waiting_frame[0] != peer:
                    return self._why_not("voter_parked")
            voters[v.id] = connected
            keys[v.id] = v.key
        if any(rid not in voters for rid in parked):
            return self._why_not("parked_elsewhere")  # an observer's fetch, or another conn's
        active = dlog.segments[-1]
        C = self._module
        # what the loop starts from: each voter's row and parked fetch, nothing changed yet
        rows: dict[int, tuple[int, int, int, int, int] | None] = {}
        waiting: dict[int, tuple[int, bytes, int, bool]] = {}
        for rid in voters:
            row = s.progress.get(keys[rid])
            rows[rid] = None if row is None else (row.end_offset, row.last_fetch_ms,
                                                  row.last_caught_up_ms, row.prev_fetch_ms,
                                                  row.prev_fetch_leader_end)
            p = parked.get(rid)
            if p is not None:
                waiting_frame = host.parked_frame(p.correlation_id)
                assert waiting_frame is not None
                _peer, version, corr = waiting_frame
                frame = host.encode_fetch(p.request, version, corr)
                if frame is None:
                    return self._why_not("voter_parked")
                waiting[rid] = (corr, frame, p.deadline, p.request.high_watermark is not None)
        # lend: from here on the sockets are the loop's
        for p in core.lend_parked():
            host.lend_frame(p.correlation_id)
        setup: list[tuple[Any, ...]] = []
        for rid, (_peer, proto) in voters.items():
            fd, unread = proto.lend()
            setup.append((fd, rid, rows[rid], waiting.get(rid), unread))
        client_fd, client_unread = client.lend()
        try:
            shell = C.LeaderShell(
                client_fd, setup, active.fd, active.size, to_native(lease, C), s.leader_id,
                host.cluster_id, lease.log_start, int(time.time() * 1000),
                linger_ms=core.config.hw_linger_ms, hw_advanced_ms=s.hw_advanced_at,
                writes_streaming=s.writes_streaming, client_unread=client_unread,
                write_limit=max(dlog.segment_bytes, active.size),
                max_frame=host.max_request_bytes)
            version = shell.version()
            shell.start()
        except (OSError, ValueError, RuntimeError, TypeError) as exc:
            # the next arming is tried at once: say each distinct failure once
            if str(exc) != self._not_armed:
                self._not_armed = str(exc)
                log.warning("event=leader_lane_not_armed replica=%d error=%r",
                            host.node_id, str(exc))
            # nothing ran: the parked fetches are the core's again, the connections theirs
            s.parked.extend(self._give_back(
                voters, client, [(rid, u, waiting.get(rid)) for _fd, rid, _r, _w, u in setup],
                client_unread, [], -1))
            return
        self._not_armed = ""
        self._armed = _Armed(shell, lease.epoch, client, voters, keys, lease.log_end, version)
        loop.add_reader(shell.done_fd, self._ended)
        self._ticker = LaneTicker(loop, self._tick_s, self._tick)
        self.arms += 1
        log.debug("event=leader_lane_armed replica=%d epoch=%d voters=%s log_end=%d",
                  host.node_id, lease.epoch, sorted(voters), lease.log_end)

    # ------------------------------------------------------------------ ticks

    def _tick(self) -> bool:
        """The bookkeeping tick: hands the loop's progress on, if any (True)."""
        if self._armed is None or not self.has_progress():
            return False
        self._host.wake_for_lane()
        return True

    def _ended(self) -> None:
        """The loop ended on its own (a handover, a peer closing, a failure)."""
        if self._armed is not None:
            loop = self._host.loop
            assert loop is not None
            loop.remove_reader(self._armed.shell.done_fd)
            self.ended = True
            self._host.wake_for_lane()

    def has_progress(self) -> bool:
        """The running loop did something the core has not been told of."""
        a = self._armed
        return a is not None and a.shell.version() != a.reported_version

    def progress_report(self) -> ev.LeaderLaneReport | None:
        """What the running loop did since the last report (None: nothing new)."""
        a = self._armed
        if a is None:
            return None
        p = a.shell.progress()
        if int(p["version"]) == a.reported_version:
            return None
        return self._report(a, p, armed=True)

    def stop_report(self, cause: str) -> ev.LeaderLaneReport | None:
        """Stop the loop, if armed, and return its last report (the core must handle it
        before anything else); the connections go back at once."""
        a = self._armed
        if a is None:
            return None
        self._armed = None
        self.ended = False
        host = self._host
        r = stop_loop(host.loop, a.shell, (a.shell.done_fd,), self._ticker, self.stops, cause)
        self._ticker = None
        reason = str(r["reason"])
        if reason == "error" and r["error_at"] in ("write", "fdatasync"):
            self._adopt(int(r["write_pos"]), int(r["durable"]), None)
            raise StorageError(f"the leader lane's {r['error_at']} failed: error {r['error']}"
                               " (the log can no longer be trusted; stopping)")
        if reason == "error":
            log.warning("event=leader_lane_stopped replica=%d reason=error at=%s error=%s",
                        host.node_id, r["error_at"], r["error"])
        report = self._report(a, r, armed=False)
        parked = self._give_back(a.voters, a.client, r["parked"], bytes(r["client_unread"]),
                                 [(int(i), int(o)) for i, o in r["pending"]], a.epoch)
        if reason == "error":
            # an answer may have been cut short on one of them: none can be trusted to be at a
            # frame's boundary (the peers reconnect; a PUT not answered is then unknown to them)
            for _peer, proto in a.voters.values():
                proto.close()
            if a.client.transport is not None:
                a.client.transport.close()
        log.debug("event=leader_lane_stopped replica=%d reason=%s cause=%s batches=%s",
                  host.node_id, reason, cause, r["batches"])
        return ev.LeaderLaneReport(
            report.epoch, report.appended, report.appended_bytes, report.durable_end,
            report.high_watermark, report.voters, report.hw_advanced_ms,
            report.writes_streaming, (), tuple(parked), False)

    def _report(self, a: _Armed, p: dict[str, Any], armed: bool) -> ev.LeaderLaneReport:
        log_end = int(p["log_end"])
        self._adopt(int(p["write_pos"]), int(p["durable"]), log_end)
        appended = tuple((int(b), int(e)) for b, e in p["appended"])
        if appended and appended[0][0] != a.reported_end:
            raise StorageError(f"the leader lane reported batches from {appended[0][0]}, but "
                               f"the log was told of records up to {a.reported_end}")
        a.reported_end = log_end
        a.reported_version = int(p["version"])
        voters = tuple(ev.VoterFetched(a.keys[rid], end, last, caught, prev_end)
                       for rid, end, last, caught, prev_end in p["voters"] if rid in a.keys)
        self.reports += 1
        return ev.LeaderLaneReport(a.epoch, appended, int(p["appended_bytes"]),
                                   int(p["durable"]), p["high_watermark"], voters,
                                   int(p["hw_advanced_ms"]), bool(p["writes_streaming"]), (),
                                   (), armed)

    def _adopt(self, write_pos: int, durable: int, log_end: int | None) -> None:
        dlog = self._host.log
        assert dlog is not None
        end = dlog.adopt_written(write_pos, durable)
        if log_end is not None and end != log_end:
            raise StorageError(f"the leader lane wrote up to offset {log_end}, but its bytes "
                               f"in the segment end at {end}")

    def _give_back(self, voters: dict[int, tuple[int, VoterConnection]],
                   client: ClientConnection,
                   parked: list[Any], client_unread: bytes, pending: list[tuple[int, int]],
                   epoch: int) -> list[ParkedFetch]:
        """The connections back to their transports, each with its unread bytes; the parked
        fetches as the core's again (returned: the node answers each on its connection when
        the core does); the PUTs not committed as the node's own writes, answered once
        applied."""
        host = self._host
        assert host.loop is not None
        out: list[ParkedFetch] = []
        for rid, unread, pt in parked:
            connected = voters.get(rid)
            if connected is None:
                continue
            peer, proto = connected
            reply = None
            if pt is not None:
                _corr, frame, deadline, _has_hw = pt
                got = host.take_back_frame(frame, peer)
                if got is None:  # pragma: no cover - the loop keeps what it read and took
                    raise StorageError("the leader lane handed back a fetch it cannot read")
                key, req, reply = got
                out.append(ParkedFetch(rid, key, req, int(deadline)))
            proto.give_back(bytes(unread), reply)
        replies = client.give_back(client_unread, pending)
        for (_rid, offset), reply_ in zip(pending, replies, strict=True):
            host.await_commit(int(offset), epoch, reply_)
        return out

    def close(self) -> None:
        """The node stops: end the loop and keep what it wrote (no report: the core is gone)."""
        a = self._armed
        if a is None:
            return
        self._armed = None
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
        loop = self._host.loop
        if loop is not None:
            loop.remove_reader(a.shell.done_fd)
        r = a.shell.stop()
        try:
            self._adopt(int(r["write_pos"]), int(r["durable"]), None)
        except StorageError as exc:
            log.warning("event=leader_lane_close_failed replica=%d error=%r",
                        self._host.node_id, str(exc))
