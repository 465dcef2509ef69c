"""The node's `kraft` subcommands: `run`, `quorum ...` and `local`.

Importing this module registers them in `kraft.cli`'s command table; `kraft.cli` imports it
as a plugin when it builds its parser, so `kraft run ...` (or `python -m kraft run ...`) finds
them. `python -m kraft.server.cli_commands ARGS` works as well.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from kraft.cli import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, Command, register
from kraft.protocol.uuid import Uuid

log = logging.getLogger("kraft.server.cli")

LOG_FORMAT = "%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"


def setup_logging(level: str = "INFO") -> None:
    """Structured one-line logs on stderr."""
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), format=LOG_FORMAT,
                        stream=sys.stderr, force=True)


# ---------------------------------------------------------------- run


def _configure_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", required=True, type=Path, help="server.properties file")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")


async def run_node(config_path: Path) -> int:
    """Run one node until SIGTERM/SIGINT (graceful) or a fatal error."""
    from kraft.server.config import load_config
    from kraft.server.node import KraftNode

    cfg = load_config(config_path)
    node = KraftNode(cfg)
    await node.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    waiter = asyncio.ensure_future(node.wait_stopped())
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if waiter.done():
        stopper.cancel()
        exc = waiter.exception()
        await node.stop(graceful=False)
        return EXIT_FAILURE if exc is not None else EXIT_OK
    log.info("event=signal_received replica=%d action=graceful_stop", cfg.node_id)
    await node.stop(graceful=True)
    waiter.cancel()
    return EXIT_OK


def _event_loop_runner(choice: str = "auto") -> Callable[[Coroutine[Any, Any, int]], int]:
    """`uvloop.run` for `kraft.event.loop=uvloop`, or `auto` when uvloop is installed (less
    event-loop CPU per request), else `asyncio.run`."""
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                raise
        else:
            return uvloop.run
    return asyncio.run


def _event_loop_choice(config_path: Path) -> str:
    from kraft.server.config import load_config

    return load_config(config_path).event_loop


def _run_run(args: argparse.Namespace) -> int:
    from kraft.server.config import ConfigError

    setup_logging(args.log_level)
    try:
        return _event_loop_runner(_event_loop_choice(args.config))(run_node(args.config))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE


# ---------------------------------------------------------------- quorum


def _configure_quorum(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap-controller", default=None, metavar="HOST:PORT[,HOST:PORT]",
                   help="controllers to ask for the leader (DescribeCluster)")
    subs = p.add_subparsers(dest="quorum_command", metavar="COMMAND")
    d = subs.add_parser("describe", help="describe the quorum")
    mode = d.add_mutually_exclusive_group(required=True)
    mode.add_argument("--status", action="store_true")
    mode.add_argument("--replication", action="store_true")
    d.add_argument("--human-readable", action="store_true")
    a = subs.add_parser("add-controller", help="add the controller described by --config")
    a.add_argument("--config", "-c", required=True, type=Path,
                   help="the new controller's server.properties")
    a.add_argument("--dry-run", action="store_true")
    r = subs.add_parser("remove-controller", help="remove a controller")
    r.add_argument("--controller-id", "-i", required=True, type=int)
    r.add_argument("--controller-directory-id", "-d", required=True)
    r.add_argument("--dry-run", action="store_true")


def _run_quorum(args: argparse.Namespace) -> int:
    from kraft.server.quorum_admin import (
        QuorumAdminError,
        add_voter,
        describe_quorum,
        format_replication,
        format_status,
        parse_host_port,
        remove_voter,
    )
    from kraft.server.transport import RequestError

    if args.quorum_command is None:
        print("kraft quorum: a command is required (describe, add-controller, "
              "remove-controller)", file=sys.stderr)
        return EXIT_USAGE
    bootstrap_text = args.bootstrap_controller
    if args.quorum_command == "add-controller" and bootstrap_text is None:
        bootstrap_text = _bootstrap_from_config(args.config)
    if not bootstrap_text:
        print("kraft quorum: --bootstrap-controller is required", file=sys.stderr)
        return EXIT_USAGE
    try:
        bootstrap = [parse_host_port(x) for x in bootstrap_text.split(",") if x.strip()]
    except ValueError as exc:
        print(f"error: --bootstrap-controller: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.quorum_command == "describe":
            view, resp = asyncio.run(describe_quorum(bootstrap))
            if args.status:
                print(format_status(view, resp))
            else:
                print(format_replication(resp, args.human_readable))
            return EXIT_OK
        if args.quorum_command == "add-controller":
            node_id, directory_id, listeners = _controller_identity(args.config)
            endpoints = ", ".join(f"{n}://{h}:{p}" for n, h, p in listeners)
            if args.dry_run:
                print(f"DRY RUN of adding controller {node_id} with directory id "
                      f"{directory_id} and endpoints: {endpoints}")
                return EXIT_OK
            asyncio.run(add_voter(bootstrap, node_id, directory_id, listeners))
            print(f"Added controller {node_id} with directory id {directory_id} and "
                  f"endpoints: {endpoints}")
            return EXIT_OK
        directory = Uuid.parse(args.controller_directory_id)
        if args.dry_run:
            print(f"DRY RUN of removing  KRaft controller {args.controller_id} with directory "
                  f"id {directory}")
            return EXIT_OK
        asyncio.run(remove_voter(bootstrap, args.controller_id, directory))
        print(f"Removed  KRaft controller {args.controller_id} with directory id {directory}")
        return EXIT_OK
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (QuorumAdminError, RequestError, OSError, TimeoutError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILURE


def _controller_identity(config: Path) -> tuple[int, Uuid, list[tuple[str, str, int]]]:
    """(node id, directory id from meta.properties, controller endpoints) of a config file."""
    from kraft.server.config import load_config
    from kraft.storage.meta_properties import read_meta_properties

    cfg = load_config(config)
    meta = read_meta_properties(cfg.metadata_dir)
    if meta is None or meta.directory_id is None:
        raise ValueError(f"{cfg.metadata_dir} is not formatted (no meta.properties with a "
                         "directory.id); run kraft format first")
    listeners = [(a.name, a.host, a.port) for a in cfg.advertised_controller_listeners]
    return cfg.node_id, meta.directory_id, listeners


def _bootstrap_from_config(config: Path) -> str | None:
    from kraft.server.config import load_config

    cfg = load_config(config)
    if cfg.bootstrap_servers:
        return ",".join(str(b) for b in cfg.bootstrap_servers)
    if cfg.quorum_voters:
        return ",".join(f"{v.host}:{v.port}" for v in cfg.quorum_voters)
    return None


# ---------------------------------------------------------------- local


def _configure_local(p: argparse.ArgumentParser) -> None:
    p.add_argument("--voters", type=int, default=3, help="number of voters (default 3)")
    p.add_argument("--observers", type=int, default=0, help="number of observers (default 0)")
    p.add_argument("--dir", type=Path, default=None, help="where to keep the nodes' files "
                   "(default: a new temporary directory)")
    p.add_argument("--refresh", type=float, default=1.0, help="status refresh period, seconds")


def status_table(cluster: object) -> str:
    """One status table of a LocalCluster: role, epoch, high watermark, offsets, lag."""
    from kraft.server.local import LocalCluster

    assert isinstance(cluster, LocalCluster)
    statuses = {nid: cluster.status(nid, timeout=1.0) for nid in cluster.nodes}
    leader_leo = max((s["log_end_offset"] for s in statuses.values()
                      if s and s["role"] == "leader"), default=None)
    lines = [f"{'node':>4}  {'address':<16} {'role':<12} {'epoch':>5} {'leader':>6} "
             f"{'hw':>8} {'leo':>8} {'lag':>6}  voter"]
    for nid, s in statuses.items():
        node = cluster.nodes[nid]
        if s is None:
            state = "running" if node.alive else "stopped"
            lines.append(f"{nid:>4}  {node.host + ':' + str(node.port):<16} {state:<12}")
            continue
        lag = "-" if leader_leo is None else str(max(0, leader_leo - s["log_end_offset"]))
        lines.append(f"{nid:>4}  {node.host + ':' + str(node.port):<16} {s['role']:<12} "
                     f"{s['epoch']:>5} {s['leader_id']:>6} {s['high_watermark']:>8} "
                     f"{s['log_end_offset']:>8} {lag:>6}  {'yes' if s['is_voter'] else 'no'}")
    return "\n".join(lines)


def _run_local(args: argparse.Namespace) -> int:
    from kraft.server.local import LocalCluster

    if args.voters < 1 or args.observers < 0 or args.voters + args.observers > 200:
        print("error: --voters must be >= 1 and --observers >= 0", file=sys.stderr)
        return EXIT_USAGE
    base = args.dir if args.dir is not None else Path(tempfile.mkdtemp(prefix="kraft-local-"))
    cluster = LocalCluster(base, voters=args.voters, observers=args.observers)
    print(f"starting {args.voters} voters and {args.observers} observers in {base} "
          f"(cluster id {cluster.cluster_id}); Ctrl-C stops them all", flush=True)
    # The nodes run in their own sessions (a terminal's Ctrl-C reaches only this process), so
    # this process must see SIGINT and SIGTERM to stop them: installed explicitly, because a
    # process started in the background by a non-interactive shell inherits SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        cluster.start_all()
        for nid, node in cluster.nodes.items():
            print(f"  node {nid}: kafka {node.host}:{node.port}  http http://{node.http}  "
                  f"log {node.log_path}")
        while True:
            table = status_table(cluster)
            if sys.stdout.isatty():
                sys.stdout.write("\x1b[2J\x1b[H")
            print(time.strftime("%H:%M:%S"), flush=True)
            print(table, flush=True)
            time.sleep(args.refresh)
    except KeyboardInterrupt:
        print("\nstopping every node", flush=True)
    finally:
        with contextlib.suppress(KeyboardInterrupt):
            cluster.stop_all()
    return EXIT_OK


def register_commands() -> None:
    """Add run, quorum and local to the `kraft` command table."""
    register(Command("run", "run a KRaft controller node", _configure_run, _run_run))
    register(Command("quorum", "describe and change the quorum (like kafka-metadata-quorum)",
                     _configure_quorum, _run_quorum))
    register(Command("local", "run a quorum of local processes on loopback with a live status",
                     _configure_local, _run_local))


register_commands()


if __name__ == "__main__":
    from kraft.cli import main as cli_main

    sys.exit(cli_main(sys.argv[1:]))
