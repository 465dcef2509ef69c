"""`kraft recover inspect | force-single-voter | reset-epoch`: recovery on a stopped node.

All work offline on the node's metadata directory (they take its lock, so a running node
makes them fail with exit code 5). See `kraft.storage.recover` for what they read and write
and docs/node.md, "Quorum loss recovery", for the procedure.

Exit codes: 0 done (or nothing to do), 1 failure (not formatted, corruption, I/O), 2 usage
or configuration error, 3 the directory is not the replica named (another node.id, or not
--directory-id), 4 not confirmed (force-single-voter without --yes and no terminal to
ask on, or a "no" answer; reset-epoch likewise), 5 the directory is locked (a node runs on it), 6 a static quorum
(kraft.version 0), which this cannot rewrite.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from kraft.cli.table import EXIT_OK, EXIT_USAGE, ErrorExits, report_error
from kraft.storage.errors import DirectoryLockedError, StorageConfigError

if TYPE_CHECKING:
    from kraft.config.node import NodeConfig
    from kraft.storage.quorum_state import QuorumStateData
    from kraft.storage.recover import ReplicaReport

EXIT_OTHER_REPLICA = 3
"""force-single-voter: the directory is another node's, or not the --directory-id named."""
EXIT_NOT_CONFIRMED = 4
"""force-single-voter: no --yes, and no terminal to confirm on (or the answer was not yes)."""
EXIT_LOCKED = 5
"""The metadata directory's lock is held: a node is running on it."""
EXIT_STATIC_QUORUM = 6
"""kraft.version 0: the voters are controller.quorum.voters, not a set in the log."""


def configure(p: argparse.ArgumentParser) -> None:
    """The `recover` subcommands and their flags."""
    subs = p.add_subparsers(dest="recover_command", metavar="COMMAND")
    i = subs.add_parser("inspect", help="what a stopped replica holds, to pick the survivor",
                        description="Print a stopped replica's identity, log end and last "
                                    "epoch, latest snapshot, quorum-state and latest voters set.")
    i.add_argument("--config", "-c", type=Path, default=None,
                   help="the node's server.properties (its metadata.log.dir is inspected)")
    i.add_argument("--dir", type=Path, default=None,
                   help="the metadata directory to inspect (instead of, or over, --config's)")
    i.add_argument("--json", action="store_true", help="one JSON object on stdout")
    f = subs.add_parser(
        "force-single-voter",
        help="make this stopped replica the only voter (quorum-loss recovery; loses data)",
        description="Append a voters set of this replica alone at a new epoch and reset "
                    "quorum-state, so the node leads by itself when started. Everything its "
                    "log holds becomes committed; what other replicas held beyond it is lost.")
    f.add_argument("--config", "-c", required=True, type=Path,
                   help="the node's server.properties (node.id, metadata.log.dir, listeners)")
    f.add_argument("--directory-id", default=None, metavar="UUID",
                   help="refuse (exit 3) unless this replica's directory id is UUID (the "
                        "incarnation the caller chose to recover from)")
    f.add_argument("--yes", "-y", action="store_true",
                   help="do it without asking (required when stdin is not a terminal)")
    f.add_argument("--json", action="store_true", help="one JSON object on stdout")
    r = subs.add_parser(
        "reset-epoch",
        help="move quorum-state back to a usable epoch (when it holds one at the epoch limit)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=RESET_EPOCH_DESCRIPTION)
    r.add_argument("--config", "-c", required=True, type=Path,
                   help="the node's server.properties (node.id, metadata.log.dir)")
    r.add_argument("--epoch", type=int, default=None, metavar="N",
                   help="the epoch to write (default: the highest epoch of this replica's "
                        "log and snapshots, and never below it). Give every voter the same N.")
    r.add_argument("--yes", "-y", action="store_true",
                   help="do it without asking (required when stdin is not a terminal)")
    r.add_argument("--json", action="store_true", help="one JSON object on stdout")


RESET_EPOCH_DESCRIPTION = """\
Rewrite this stopped replica's quorum-state to epoch N with no leader and no vote, keeping
everything else (its data_version, its log, its snapshots).

A node refuses to start from a quorum-state whose epoch is at or above the epoch limit
2147483647, and a replica at 2147483646 cannot start an election: from either no leader
can be elected again (a request naming 2147483647 is refused; earlier versions took one,
and any peer that reaches the controller listener may still name 2147483646). To recover
the quorum:

  1. stop EVERY voter of the quorum;
  2. run `kraft recover inspect -c server.properties` on each voter and take N, the
     highest "highest log epoch" over all of them;
  3. run `kraft recover reset-epoch -c server.properties --epoch N --yes` on each voter,
     with the same N everywhere;
  4. start them again; they elect a leader in epoch N + 1.

The same N on every voter matters: then no voter remembers a vote above N, and N is at
least every epoch any voter's log holds, so the next leader's epoch is new to every log and
no two leaders can share an epoch. N below this replica's log or snapshots is refused."""


def run(args: argparse.Namespace) -> int:
    """Run a `recover` subcommand; returns the exit code."""
    from kraft.config.node import ConfigError
    from kraft.storage.quorum_state import UnusableEpochError
    from kraft.storage.recover import ReplicaMismatchError, StaticQuorumError

    command = getattr(args, "recover_command", None)
    if command is None:
        print("kraft recover: error: give a command: inspect, force-single-voter or "
              "reset-epoch",
              file=sys.stderr)
        return EXIT_USAGE
    errors: ErrorExits = (
        (ConfigError, EXIT_USAGE, ""),
        (DirectoryLockedError, EXIT_LOCKED,
         ": stop the node first (kraft recover works on a stopped node)"),
        (StaticQuorumError, EXIT_STATIC_QUORUM, ""),
        (ReplicaMismatchError, EXIT_OTHER_REPLICA, ""),
        (UnusableEpochError, EXIT_USAGE, ""),
    )
    try:
        if command == "inspect":
            return _inspect(args)
        if command == "reset-epoch":
            return _reset_epoch(args)
        return _force(args)
    except Exception as exc:  # the table's errors end here; any other goes on up
        reported = report_error(exc, errors)
        if reported is None:
            raise
        return reported


def _inspect(args: argparse.Namespace) -> int:
    from kraft.storage.recover import inspect_replica

    directory: Path | None = args.dir
    node_id: int | None = None
    if args.config is not None:
        cfg = _load(args.config)
        node_id = cfg.node_id
        directory = directory or cfg.metadata_dir
    if directory is None:
        raise StorageConfigError("kraft recover inspect: give --config or --dir")
    report = inspect_replica(directory, expected_node_id=node_id)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print_report(report, sys.stdout)
    return EXIT_OK


def _load(config: Path) -> NodeConfig:
    from kraft.config.node import load_config

    if not config.is_file():
        raise StorageConfigError(f"--config {config}: no such file")
    return load_config(config)


def print_report(r: ReplicaReport, out: TextIO) -> None:
    """The human form of `kraft recover inspect`."""
    w = out.write
    w(f"replica {r.node_id} (directory id {r.directory_id or 'none'}) of cluster {r.cluster_id}\n")
    w(f"  directory:           {r.directory}\n")
    w(f"  kraft.version:       {r.kraft_version}"
      f"{' (static quorum: voters from controller.quorum.voters)' if r.kraft_version == 0 else ''}\n")
    if r.log_end_offset > r.log_start_offset:
        w(f"  log:                 offsets {r.log_start_offset}-{r.log_end_offset - 1} "
          f"(end offset {r.log_end_offset}), last epoch {r.last_epoch}\n")
    else:
        w(f"  log:                 empty, end offset {r.log_end_offset}, last epoch "
          f"{r.last_epoch}\n")
    if r.latest_snapshot is None:
        w("  latest snapshot:     none\n")
    else:
        w(f"  latest snapshot:     end offset {r.latest_snapshot.end_offset}, epoch "
          f"{r.latest_snapshot.epoch}\n")
    known = (f"every offset below {r.committed_at_least} is committed (covered by a snapshot)"
             if r.committed_at_least > 0 else "no offset is known committed")
    w(f"  high watermark:      unknown (not kept on disk); {known}\n")
    qs = r.quorum_state
    if qs is None:
        w("  quorum-state:        none\n")
    else:
        leader = qs.leader_id if qs.leader_id >= 0 else "none"
        voted = qs.voted_id if qs.voted_id >= 0 else "none"
        w(f"  quorum-state:        epoch {qs.leader_epoch}, leader {leader}, voted for {voted}"
          f"{unusable_note(qs)}\n")
    w(f"  highest epoch seen:  {r.max_epoch}\n")
    w(f"  highest log epoch:   {r.log_max_epoch} (in its log and snapshots; `kraft recover "
      "reset-epoch` goes no lower)\n")
    if r.voters is None:
        w("  voters:              none in the log or snapshots\n")
    else:
        v = r.voters
        where = "snapshot" if v.from_snapshot else f"offset {v.offset}"
        state = "committed" if v.committed else "committed or not (unknown)"
        w(f"  voters ({where}, {state}):\n")
        for voter in v.record.voters:
            eps = ", ".join(f"{e.name}://{e.host}:{e.port}" for e in voter.endpoints)
            mark = "  <- this replica" if (voter.voter_id, voter.voter_directory_id) == (
                r.node_id, r.directory_id) else ""
            w(f"    {voter.voter_id} directory {voter.voter_directory_id} {eps}{mark}\n")
    role = "the only voter" if r.is_only_voter else "a voter" if r.is_voter else "not a voter"
    w(f"  this replica:        {role}\n")


def unusable_note(qs: QuorumStateData) -> str:
    """A note for a quorum-state no node starts from: why, and the way out."""
    from kraft.storage.quorum_state import unusable_reason

    reason = unusable_reason(qs)
    return "" if reason is None else (f" (UNUSABLE: {reason}; see `kraft recover reset-epoch "
                                      "--help`)")


def _reset_epoch(args: argparse.Namespace) -> int:
    from kraft.storage.recover import (
        ReplicaMismatchError,
        inspect_replica,
        reset_epoch,
        reset_epoch_target,
    )

    cfg = _load(args.config)
    report = inspect_replica(cfg.metadata_dir)
    if report.node_id != cfg.node_id:
        raise ReplicaMismatchError(
            f"{report.directory}/meta.properties has node.id {report.node_id}, but "
            f"{args.config} has node.id {cfg.node_id}")
    target = reset_epoch_target(report, args.epoch)
    qs = report.quorum_state
    now = "none" if qs is None else f"epoch {qs.leader_epoch}, leader {qs.leader_id}, voted " \
                                    f"for {qs.voted_id}"
    print(f"replica {cfg.node_id}: quorum-state {now} -> epoch {target}, no leader, no vote.\n"
          "Every voter must be stopped and reset to this same epoch before any starts.",
          file=sys.stderr)
    if not args.yes and not _confirmed("rewrite quorum-state",
                                       f"reset replica {cfg.node_id} to epoch {target}"):
        return EXIT_NOT_CONFIRMED
    result = reset_epoch(cfg.metadata_dir, node_id=cfg.node_id, epoch=target)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(f"reset: replica {cfg.node_id}'s quorum-state is at epoch "
              f"{result.after.leader_epoch}, no leader, no vote.\n"
              "next: reset every other voter to the same epoch, then start them all.")
    return EXIT_OK


def _warning(r: ReplicaReport) -> str:
    from kraft.storage.recover import forced_epoch

    unknown = max(0, r.log_end_offset - r.committed_at_least)
    others = [v.voter_id for v in r.voters.record.voters if v.voter_id != r.node_id] \
        if r.voters is not None else []
    observer = "" if r.is_voter else (
        f"  * Replica {r.node_id} is NOT a voter of its latest voters set (an observer, or a "
        "removed voter): its log may lack records the voters committed.\n")
    return (
        "WARNING: kraft recover force-single-voter is quorum-loss recovery and loses data.\n"
        + observer +
        f"  * Replica {r.node_id} (directory {r.directory_id}) becomes the only voter, at epoch "
        f"{forced_epoch(r)}.\n"
        + (f"  * Once it leads, EVERY record of its log becomes committed: offsets "
           f"{r.committed_at_least}-{r.log_end_offset - 1} ({unknown} offsets) are not known "
           "to have been committed, and may hold writes that were never acknowledged.\n"
           if unknown else
           "  * Once it leads, everything its log holds becomes committed (all of it is "
           "known committed already).\n")
        + f"  * Records that the other replicas ({', '.join(map(str, others)) or 'none'}) held "
        "beyond this replica's log are lost for good, even acknowledged ones: recover from "
        "the replica with the longest log (highest last epoch, then highest end offset).\n"
        "  * Every other replica must be emptied and formatted again with `kraft format -N` "
        "(a new directory id) before it starts; it then joins as a new voter (auto-join or "
        "`kraft quorum add-controller`). Never start one on its old log.\n"
    )


def _confirmed(change: str, question: str) -> bool:
    """Whether a person typed `yes` to `question`; without a terminal, refused, with the way
    to go on (`--yes`). The question goes to stderr: stdout carries only the result (--json)."""
    if not sys.stdin.isatty():
        print(f"refusing: give --yes to {change} (no terminal to confirm on)", file=sys.stderr)
        return False
    print(f"Type 'yes' to {question}: ", end="", file=sys.stderr, flush=True)
    if sys.stdin.readline().strip() != "yes":
        print("not confirmed: nothing changed", file=sys.stderr)
        return False
    return True


def _log_change(message: str, *args: object) -> None:
    """One INFO line on stderr, as a node logs (key=value), for a change made to a replica."""
    from kraft.cli.node import LOG_FORMAT

    logger = logging.getLogger("kraft.recover")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        logger.info(message, *args)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _who() -> str:
    """Who ran a command that changed a replica: user@host (pid)."""
    import getpass
    import socket
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}(pid={os.getpid()})"


def _force(args: argparse.Namespace) -> int:
    from kraft.protocol.uuid import Uuid
    from kraft.raft.messages import KRaftVersionRange
    from kraft.records.control import Endpoint, KRaftVersionFeature
    from kraft.storage.recover import (
        ReplicaMismatchError,
        check_forcible,
        force_single_voter,
        inspect_replica,
        same_voter,
        single_voter_record,
    )

    cfg = _load(args.config)
    endpoints = tuple(Endpoint(a.name, a.host, a.port)
                      for a in cfg.advertised_controller_listeners)
    supported = KRaftVersionRange()
    feature = KRaftVersionFeature(supported.min_supported, supported.max_supported)
    report = inspect_replica(cfg.metadata_dir)
    if report.node_id != cfg.node_id:
        raise ReplicaMismatchError(
            f"{report.directory}/meta.properties has node.id {report.node_id}, but "
            f"{args.config} has node.id {cfg.node_id}")
    wanted = None
    if args.directory_id is not None:
        try:
            wanted = Uuid.parse(args.directory_id)
        except ValueError as exc:
            raise StorageConfigError(f"--directory-id {args.directory_id!r}: {exc}") from None
        if report.directory_id != wanted:
            raise ReplicaMismatchError(
                f"{report.directory}/meta.properties has directory.id {report.directory_id}, "
                f"not {wanted}: this volume holds another incarnation of node {cfg.node_id}")
    check_forcible(report)
    assert report.directory_id is not None
    voter = single_voter_record(cfg.node_id, report.directory_id, endpoints, feature).voters[0]
    already = report.voters is not None and same_voter(report.voters.record, voter)
    if not already:
        print(_warning(report), file=sys.stderr, end="")
        if not args.yes and not _confirmed("force the voters set",
                                           f"make replica {cfg.node_id} the only voter"):
            return EXIT_NOT_CONFIRMED
    result = force_single_voter(cfg.metadata_dir, node_id=cfg.node_id, endpoints=endpoints,
                                kraft_version=feature, timestamp_ms=int(time.time() * 1000),
                                directory_id=wanted, segment_bytes=cfg.segment_bytes)
    if result.changed:
        _log_change("event=force_single_voter replica=%d directory_id=%s epoch=%d "
                    "voters_offset=%d by=%s", cfg.node_id, report.directory_id, result.epoch,
                    result.voters_offset, _who())
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    elif result.changed:
        print(f"forced: replica {cfg.node_id} (directory {report.directory_id}) is the only "
              f"voter, at epoch {result.epoch} (VotersRecord at offset {result.voters_offset}); "
              "quorum-state reset (no leader, no vote).\n"
              "next: start it (kraft run); it elects itself and serves its data. Then empty "
              "every other node's metadata directory, format it with `kraft format -N` and "
              "start it to join as a new voter.")
    else:
        print(f"nothing to do: replica {cfg.node_id} (directory {report.directory_id}) already "
              f"is the only voter of its latest voters set (offset {result.voters_offset}, "
              f"epoch {result.epoch}); its voters set is unchanged")
    return EXIT_OK
