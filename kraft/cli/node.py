"""The node's `kraft` subcommands: `run`, `quorum ...` and `local`.

Importing this module registers them in the command table (`kraft.cli.table`);
`kraft.cli.main` imports it when it builds its parser, so `kraft run ...` (or `python -m kraft
run ...`) finds them. What `kraft quorum` asks and prints is `kraft.cli.quorum`; the quorum
of local processes is `kraft.cli.local`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import ssl
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from kraft.cli.table import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, Command, register
from kraft.protocol.uuid import Uuid

log = logging.getLogger("kraft.cli.node")

LOG_FORMAT = "%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"


def setup_logging(level: str = "INFO") -> None:
    """Structured one-line logs on stderr."""
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), format=LOG_FORMAT,
                        stream=sys.stderr, force=True)
    logging.getLogger("aiohttp.server").addFilter(BadHttpRequestFilter())


class BadHttpRequestFilter(logging.Filter):
    """aiohttp logs a request it cannot parse (a bad request line, header, length or chunk,
    from a broken or hostile client) as an error with a traceback, after answering it 400 and
    closing its connection, and so a request whose client went away before sending all of
    its body: nothing in the node failed either time. Such a record becomes one warning line
    naming the peer and what was wrong (`event=bad_http_request`, `event=http_client_gone`);
    other records pass as they are. Of each event, the first `burst` of every `interval_s`
    are logged; the next one after the interval first says how many were left out, so a
    flood of bad requests writes a bounded number of lines."""

    def __init__(self, burst: int = 10, interval_s: float = 60.0) -> None:
        super().__init__()
        self.burst = burst
        self.interval_s = interval_s
        self._windows: dict[str, list[float]] = {}  # event -> [start, logged, left out]

    def _let_through(self, event: str) -> tuple[bool, int]:
        """Whether this record of `event` is logged, and how many were left out before it."""
        now = time.monotonic()
        w = self._windows.get(event)
        left_out = 0
        if w is None or now - w[0] >= self.interval_s:
            left_out = int(w[2]) if w is not None else 0
            w = self._windows[event] = [now, 0, 0]
        if w[1] < self.burst:
            w[1] += 1
            return True, left_out
        w[2] += 1
        return False, 0

    def filter(self, record: logging.LogRecord) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError

        exc = record.exc_info[1] if record.exc_info else None
        if not str(record.msg).startswith("Error handling request"):
            return True
        if isinstance(exc, HttpProcessingError):
            event = "bad_http_request"
        elif isinstance(exc, ConnectionResetError):
            event = "http_client_gone"
        else:
            return True
        logged, left_out = self._let_through(event)
        if not logged:
            return False
        peer = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
        record.msg = f"event={event} peer=%s error=%r" + (
            f" not_logged_before={left_out}" if left_out else "")
        record.args = (peer, " ".join(str(exc).split())[:300])
        record.exc_info = None
        record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


# ---------------------------------------------------------------- run


def _configure_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", required=True, type=Path, help="server.properties file")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")


async def run_node(config_path: Path) -> int:
    """Run one node until SIGTERM/SIGINT (graceful) or a fatal error."""
    from kraft.config.node import load_config
    from kraft.server.connection_limits import raise_open_files_limit, socket_budget
    from kraft.server.node import KraftNode

    cfg = load_config(config_path)
    open_files = raise_open_files_limit()
    logging.getLogger("kraft.server.connections").info(
        "event=open_files_limit soft=%d listener_sockets_budget=%d", open_files,
        socket_budget(open_files))
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
    from kraft.config.node import load_config

    return load_config(config_path).event_loop


def _run_run(args: argparse.Namespace) -> int:
    from kraft.config.http_security import HttpSecurityError
    from kraft.config.node import ConfigError
    from kraft.config.tls import TlsMaterialError

    setup_logging(args.log_level)
    try:
        return _event_loop_runner(_event_loop_choice(args.config))(run_node(args.config))
    except (ConfigError, TlsMaterialError, HttpSecurityError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE


# ---------------------------------------------------------------- quorum


def _configure_quorum(p: argparse.ArgumentParser) -> None:
    # The options of kafka-metadata-quorum (MetadataQuorumCommand), checked by hand in
    # `_run_quorum` so that the errors carry Kafka's messages.
    p.add_argument("--bootstrap-server", default=None, metavar="HOST:PORT[,HOST:PORT]",
                   help="nodes of the quorum to connect to (every node serves the Kafka "
                        "protocol; the same as --bootstrap-controller here)")
    p.add_argument("--bootstrap-controller", default=None, metavar="HOST:PORT[,HOST:PORT]",
                   help="controllers to ask for the leader (DescribeCluster)")
    p.add_argument("--command-config", default=None, type=Path, metavar="FILE",
                   help="client properties; for add-controller, the new controller's "
                        "server.properties")
    subs = p.add_subparsers(dest="quorum_command", metavar="COMMAND", parser_class=type(p))
    d = subs.add_parser("describe", help="describe the metadata quorum")
    d.add_argument("--status", action="store_true", help="a short summary of the quorum")
    d.add_argument("--replication", action="store_true",
                   help="the replication state of every voter and observer")
    d.add_argument("--human-readable", action="store_true",
                   help="with --replication: timestamps as 'N ms ago'")
    d.add_argument("--show-endpoints", action="store_true",
                   help="with --replication: an extra Endpoints column (not in Kafka's tool)")
    a = subs.add_parser("add-controller", help="add the controller whose server.properties is "
                                               "--command-config")
    a.add_argument("--config", "-c", default=None, type=Path, dest="controller_config",
                   help="the same as the global --command-config (an older spelling)")
    a.add_argument("--dry-run", action="store_true")
    r = subs.add_parser("remove-controller", help="remove a controller")
    r.add_argument("--controller-id", "-i", required=True, type=int)
    r.add_argument("--controller-directory-id", "-d", required=True)
    r.add_argument("--dry-run", action="store_true")


class QuorumUsageError(ValueError):
    """`kraft quorum` was given options that do not go together (exit 2)."""


def _command_properties(args: argparse.Namespace) -> tuple[dict[str, str], Path | None]:
    """The --command-config properties (and the file), checked for what a client here can do."""
    from kraft.config.properties import PropertiesSyntaxError, read_properties

    path: Path | None = args.command_config
    alias: Path | None = getattr(args, "controller_config", None)
    if alias is not None:
        if path is not None and path != alias:
            raise QuorumUsageError(f"add-controller --config {alias} and --command-config "
                                   f"{path} name different files: give one")
        path = alias
    if path is None:
        return {}, None
    if not path.is_file():
        raise QuorumUsageError(f"--command-config: properties file {path} does not exist")
    try:
        props = read_properties(path)
    except PropertiesSyntaxError as exc:
        raise QuorumUsageError(f"--command-config: {exc}") from None
    return props, path


def _command_tls(props: dict[str, str], path: Path | None) -> Callable[[], ssl.SSLContext] | None:
    """The TLS of --command-config (security.protocol=SSL and the ssl.* client keys)."""
    from kraft.config.security import SecurityConfigError
    from kraft.config.tls import TlsMaterialError, client_contexts

    try:
        contexts = client_contexts(props)
    except (SecurityConfigError, TlsMaterialError) as exc:
        raise QuorumUsageError(f"--command-config {path}: {exc}") from None
    return None if contexts is None else contexts.client_context


def _bootstrap(args: argparse.Namespace, props: dict[str, str],
               config: Path | None) -> list[tuple[str, int]]:
    from kraft.config.address import parse_host_port

    if args.bootstrap_server is not None and args.bootstrap_controller is not None:
        raise QuorumUsageError("You cannot specify both --bootstrap-controller and "
                               "--bootstrap-server.")
    flag = "--bootstrap-server" if args.bootstrap_server is not None else "--bootstrap-controller"
    text = args.bootstrap_server if args.bootstrap_server is not None else args.bootstrap_controller
    if text is None and args.quorum_command == "add-controller" and config is not None:
        flag, text = f"the bootstrap servers of {config}", _bootstrap_from_properties(props)
    if text is None:
        raise QuorumUsageError("You must specify either --bootstrap-controller or "
                               "--bootstrap-server.")
    try:
        addresses = [parse_host_port(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise QuorumUsageError(f"{flag}: {exc}") from None
    if not addresses:
        raise QuorumUsageError(f"{flag}: no HOST:PORT given")
    return addresses


def _check_describe(args: argparse.Namespace) -> None:
    if args.status and args.replication:
        raise QuorumUsageError("Only one of --status or --replication should be specified "
                               "with describe sub-command")
    if not args.status and not args.replication:
        raise QuorumUsageError("One of --status or --replication must be specified with "
                               "describe sub-command")
    if args.status and args.human_readable:
        raise QuorumUsageError("The option --human-readable is only supported along with "
                               "--replication")
    if args.status and args.show_endpoints:
        raise QuorumUsageError("The option --show-endpoints is only supported along with "
                               "--replication")


def _run_quorum(args: argparse.Namespace) -> int:
    from kraft.admin.errors import AdminError
    from kraft.cli.quorum import (
        QuorumOutputError,
        add_voter,
        describe_quorum,
        format_replication,
        format_status,
        remove_voter,
    )

    if args.quorum_command is None:
        print("kraft quorum: a command is required (describe, add-controller, "
              "remove-controller)", file=sys.stderr)
        return EXIT_USAGE
    try:
        props, config = _command_properties(args)
        tls = _command_tls(props, config)
        if args.quorum_command == "describe":
            _check_describe(args)
        if args.quorum_command == "add-controller" and config is None:
            raise QuorumUsageError("You must supply the configuration file of the controller "
                                   "you are adding when using add-controller "
                                   "(--command-config FILE).")
        bootstrap = _bootstrap(args, props, config)
    except QuorumUsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.quorum_command == "describe":
            quorum = asyncio.run(describe_quorum(bootstrap, tls=tls))
            if args.status:
                print(format_status(quorum))
            else:
                print(format_replication(quorum, args.human_readable,
                                         endpoints=args.show_endpoints), end="")
            return EXIT_OK
        if args.quorum_command == "add-controller":
            assert config is not None
            node_id, directory_id, listeners = controller_identity(props, str(config))
            endpoints = ", ".join(f"{n}://[{h}]:{p}" if ":" in h else f"{n}://{h}:{p}"
                                  for n, h, p in listeners)
            if args.dry_run:
                print(f"DRY RUN of adding controller {node_id} with directory id "
                      f"{directory_id} and endpoints: {endpoints}")
                return EXIT_OK
            asyncio.run(add_voter(bootstrap, node_id, directory_id, listeners, tls=tls))
            print(f"Added controller {node_id} with directory id {directory_id} and "
                  f"endpoints: {endpoints}")
            return EXIT_OK
        if args.controller_id < 0:
            raise QuorumUsageError(f"Invalid negative --controller-id: {args.controller_id}")
        try:
            directory = Uuid.parse(args.controller_directory_id)
        except ValueError as exc:
            raise QuorumUsageError(f"Failed to parse --controller-directory-id: {exc}") from None
        if args.dry_run:
            print(f"DRY RUN of removing  KRaft controller {args.controller_id} with directory "
                  f"id {directory}")
            return EXIT_OK
        asyncio.run(remove_voter(bootstrap, args.controller_id, directory, tls=tls))
        print(f"Removed  KRaft controller {args.controller_id} with directory id {directory}")
        return EXIT_OK
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (AdminError, QuorumOutputError, OSError, TimeoutError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILURE


def controller_identity(props: dict[str, str],
                        source: str) -> tuple[int, Uuid, list[tuple[str, str, int]]]:
    """(node id, directory id from meta.properties, controller endpoints) of a controller's
    server.properties, read as kafka-metadata-quorum add-controller reads them: node.id,
    process.roles with controller, metadata.log.dir (else the first of log.dirs), and for
    each of controller.listener.names its listener (advertised.listeners over listeners; no
    host means localhost). Raises ValueError naming what is missing."""
    from kraft.storage.errors import StorageConfigError, StorageError
    from kraft.storage.format import server_config
    from kraft.storage.meta_properties import read_meta_properties

    try:
        cfg = server_config(props, source)
    except StorageConfigError as exc:
        raise ValueError(f"{exc}. Is this a valid controller configuration file?") from None
    if not cfg.is_controller:
        raise ValueError(f"{source}: process.roles did not contain 'controller'. Is this a "
                         "valid controller configuration file?")
    if not cfg.controller_listener_names:
        raise ValueError(f"{source}: controller.listener.names was not found. Is this a valid "
                         "controller configuration file?")
    listeners = []
    for name in cfg.controller_listener_names:
        address = cfg.advertised_listeners.get(name, cfg.listeners.get(name))
        if address is None:
            raise ValueError(f"{source}: Cannot find information about controller listener "
                             f"name: {name}")
        listeners.append((name, address[0] or "localhost", address[1]))
    try:
        meta = read_meta_properties(cfg.metadata_log_dir)
    except StorageError as exc:
        raise ValueError(f"Unable to read meta.properties from {cfg.metadata_log_dir}: "
                         f"{exc}") from None
    if meta is None:
        raise ValueError(f"Unable to read meta.properties from {cfg.metadata_log_dir} (run "
                         "kraft format first)")
    if meta.directory_id is None:
        raise ValueError(f"No directory id found in {cfg.metadata_log_dir}")
    return cfg.node_id, meta.directory_id, listeners


def _bootstrap_from_properties(props: dict[str, str]) -> str | None:
    servers = props.get("controller.quorum.bootstrap.servers", "").strip()
    if servers:
        return servers
    voters = [v.split("@", 1)[1] for v in props.get("controller.quorum.voters", "").split(",")
              if "@" in v]
    return ",".join(voters) or None


# ---------------------------------------------------------------- local


def _configure_local(p: argparse.ArgumentParser) -> None:
    p.add_argument("--voters", type=int, default=3, help="number of voters (default 3)")
    p.add_argument("--observers", type=int, default=0, help="number of observers (default 0)")
    p.add_argument("--dir", type=Path, default=None, help="where to keep the nodes' files "
                   "(default: a new temporary directory)")
    p.add_argument("--refresh", type=float, default=1.0, help="status refresh period, seconds")


def status_table(cluster: object) -> str:
    """One status table of a LocalCluster: role, epoch, high watermark, offsets, lag."""
    from kraft.cli.local import LocalCluster

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
    from kraft.cli.local import LocalCluster

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


def _configure_kv(p: argparse.ArgumentParser) -> None:
    from kraft.cli.kv import configure

    configure(p)


def _run_kv(args: argparse.Namespace) -> int:
    from kraft.cli.kv import run

    return run(args)


def register_commands() -> None:
    """Add run, quorum, local and kv to the `kraft` command table."""
    register(Command("run", "run a KRaft controller node", _configure_run, _run_run))
    register(Command("quorum", "describe and change the quorum (like kafka-metadata-quorum)",
                     _configure_quorum, _run_quorum))
    register(Command("local", "run a quorum of local processes on loopback with a live status",
                     _configure_local, _run_local))
    register(Command("kv", "get, put or delete a key through a node's HTTP port",
                     _configure_kv, _run_kv))


register_commands()

