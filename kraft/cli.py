"""The `kraft` command line: subcommands are registered in a table so others can add theirs.

Exit codes: 0 success, 1 failure (e.g. corruption found, directory already formatted),
2 usage error (bad arguments, bad config key/value, bad uuid), 3 `format` found a directory
formatted for another cluster id or node id; `recover` adds 4 (not confirmed), 5 (the
directory is locked by a running node) and 6 (a static quorum, kraft.version 0).

To add a subcommand elsewhere::

    from kraft.cli import Command, register
    register(Command("run", "start a node", configure=add_args, handler=run_main))
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kraft.protocol.uuid import Uuid
from kraft.storage.errors import (
    AlreadyFormattedError,
    FormattedForAnotherError,
    StorageConfigError,
    StorageError,
)

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_FORMATTED_FOR_ANOTHER = 3
"""`format`: a directory holds another cluster's (or node's) data."""
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a shell reports for a program stopped by a closed pipe."""

ErrorExits = tuple[tuple[type[BaseException], int, str], ...]
"""How a command's errors end it: (exception class, exit code, what to add to the message);
the first class the error is an instance of wins, so subclasses come first."""

STORAGE_ERRORS: ErrorExits = (
    (StorageConfigError, EXIT_USAGE, ""),
    (AlreadyFormattedError, EXIT_FAILURE, ""),
    (FormattedForAnotherError, EXIT_FORMATTED_FOR_ANOTHER, ""),
    (StorageError, EXIT_FAILURE, ""),
)
"""The errors every command may end with (the storage layer's)."""


def report_error(exc: BaseException, table: ErrorExits) -> int | None:
    """Print `error: <exc>` (with its entry's addition) for the first entry of `table` that
    `exc` is an instance of, and return that entry's exit code; None when none matches."""
    for kind, code, addition in table:
        if isinstance(exc, kind):
            print(f"error: {exc}{addition}", file=sys.stderr)
            return code
    return None


@dataclass(frozen=True, slots=True)
class Command:
    """One subcommand: its name, help, argument setup and handler (returns the exit code)."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace], int]


COMMANDS: dict[str, Command] = {}
"""The subcommand table, in registration order."""


def register(command: Command) -> Command:
    """Add (or replace) a subcommand in the table."""
    COMMANDS[command.name] = command
    return command


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of exiting, so main() returns its code."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(f"{self.prog}: error: {message}")


# ---------------------------------------------------------------------------- format


def _configure_format(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", required=True, type=Path, help="server.properties file")
    p.add_argument("--cluster-id", "-t", required=True, help="cluster id (from random-uuid)")
    p.add_argument("--ignore-formatted", "-g", action="store_true",
                   help="leave directories already formatted for this cluster and node as "
                        "they are and format the others (idempotent: an init container can "
                        "run it on every start); a directory formatted for another cluster "
                        "or node exits with code 3")
    p.add_argument("--release-version", "-r", default=None,
                   help="metadata.version to bootstrap (default 4.1-IV1)")
    p.add_argument("--feature", "-f", action="append", default=[], metavar="NAME=LEVEL",
                   help="feature level to bootstrap (repeatable)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--standalone", "-s", action="store_true",
                       help="single-voter dynamic quorum with this node as the voter")
    group.add_argument("--initial-controllers", "-I", metavar="ID@HOST:PORT:DIRID,...",
                       help="dynamic quorum with these initial voters")
    group.add_argument("--no-initial-controllers", "-N", action="store_true",
                       help="dynamic quorum; this node joins later")


def _run_format(args: argparse.Namespace) -> int:
    from kraft.storage.bootstrap import LATEST_PRODUCTION
    from kraft.storage.format import format_storage
    from kraft.storage.properties import read_properties

    config: Path = args.config
    if not config.is_file():
        raise StorageConfigError(f"--config {config}: no such file")
    props = read_properties(config)
    format_storage(
        props,
        args.cluster_id,
        standalone=args.standalone,
        initial_controllers=args.initial_controllers,
        no_initial_controllers=args.no_initial_controllers,
        ignore_formatted=args.ignore_formatted,
        release_version=args.release_version or LATEST_PRODUCTION,
        features=args.feature,
        out=sys.stdout,
        source=str(config),
    )
    return EXIT_OK


def _run_random_uuid(args: argparse.Namespace) -> int:
    print(Uuid.random())
    return EXIT_OK


def _configure_dump(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", type=Path,
                   help="a .log segment, a .checkpoint, a partition dir or a metadata dir")


def _run_dump(args: argparse.Namespace) -> int:
    from kraft.dump import dump

    report = dump(args.path, sys.stdout)
    if report.problems:
        for problem in report.problems:
            print(f"problem: {problem}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def _configure_recover(p: argparse.ArgumentParser) -> None:
    from kraft.recover_cli import configure

    configure(p)


def _run_recover(args: argparse.Namespace) -> int:
    from kraft.recover_cli import run

    return run(args)


register(Command("format", "format storage directories (like kafka-storage format)",
                 _configure_format, _run_format))
register(Command("random-uuid", "print a new random uuid (cluster or directory id)",
                 lambda p: None, _run_random_uuid))
register(Command("dump", "print the batches and records of log and snapshot files",
                 _configure_dump, _run_dump))
register(Command("recover", "recovery on a stopped node (inspect, force-single-voter, reset-epoch)",
                 _configure_recover, _run_recover))


# Modules that register further subcommands when imported (the node's run/quorum/local, the
# audit pipeline). They are imported when the parser is built, not when this module is, so
# `kraft format` never pays for aiohttp or pyspark imports it does not use.
PLUGIN_MODULES = (
    "kraft.server.cli_commands", "kraft_pipeline.cli", "kraft_sandbox.kraft_command",
)


def load_plugins() -> None:
    """Import every plugin module so its subcommands join the table (missing ones are skipped)."""
    for name in PLUGIN_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not name.startswith(exc.name):
                raise


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every registered subcommand."""
    load_plugins()
    parser = _Parser(prog="kraft", description="KRaft quorum node and tools")
    subs = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for cmd in COMMANDS.values():
        sub = subs.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        cmd.configure(sub)
        sub.set_defaults(_handler=cmd.handler)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 failure, 2 usage error, 3 a directory
    formatted for another cluster or node, 141 when the reader of standard output went away,
    as `kraft dump ... | head` does)."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # here, not at exit, so a closed pipe is seen below
        return code
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE


def _quiet_stdout() -> None:
    """Point standard output at /dev/null: the interpreter flushes it again at exit, and a
    write into the closed pipe there would print a traceback after all."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a file (replaced, closed): nothing to flush
        pass


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help
        return int(exc.code) if isinstance(exc.code, int) else EXIT_OK
    handler = getattr(args, "_handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        code: int = handler(args)
        return code
    except StorageError as exc:
        reported = report_error(exc, STORAGE_ERRORS)
        if reported is None:
            raise
        return reported


if __name__ == "__main__":
    sys.exit(main())
