"""The `kraft` command line: `main` builds its parser from the command table
(`kraft.cli.table`), where this module's commands (format, random-uuid, dump, recover), the
node's (`kraft.cli.node`) and the plugins' (`PLUGIN_MODULES`) register.

Exit codes: 0 success, 1 failure (e.g. corruption found, directory already formatted),
2 usage error (bad arguments, bad config key/value, bad uuid), 3 `format` found a directory
formatted for another cluster id or node id; `recover` adds 4 (not confirmed), 5 (the
directory is locked by a running node) and 6 (a static quorum, kraft.version 0).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

from kraft.cli.table import (
    COMMANDS,
    EXIT_BROKEN_PIPE,
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    STORAGE_ERRORS,
    Command,
    register,
    report_error,
)
from kraft.config.properties import PropertiesSyntaxError
from kraft.protocol.uuid import Uuid
from kraft.storage.errors import StorageConfigError, StorageError


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of exiting, so main() returns its code."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(f"{self.prog}: error: {message}")

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        # Some Python releases' argparse swallow every OSError here, so `kraft --help`
        # into a closed pipe or a full disk would exit 0 as if the help were read.
        if message:
            (file or sys.stderr).write(message)


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
    from kraft.config.properties import read_properties
    from kraft.storage.bootstrap import LATEST_PRODUCTION
    from kraft.storage.format import format_storage

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
    from kraft.cli.dump import dump

    report = dump(args.path, sys.stdout)
    if report.problems:
        for problem in report.problems:
            print(f"problem: {problem}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def _configure_recover(p: argparse.ArgumentParser) -> None:
    from kraft.cli.recover import configure

    configure(p)


def _run_recover(args: argparse.Namespace) -> int:
    from kraft.cli.recover import run

    return run(args)


register(Command("format", "format storage directories (like kafka-storage format)",
                 _configure_format, _run_format))
register(Command("random-uuid", "print a new random uuid (cluster or directory id)",
                 lambda p: None, _run_random_uuid))
register(Command("dump", "print the batches and records of log and snapshot files",
                 _configure_dump, _run_dump))
register(Command("recover", "recovery on a stopped node (inspect, force-single-voter, reset-epoch)",
                 _configure_recover, _run_recover))


# The packages outside `kraft` that register further subcommands when imported (the audit
# pipeline, the sandbox), loaded by name here and nowhere else: they may not be installed.
# They, and the node's commands, are imported when the parser is built, not when this module
# is, so `kraft format` never pays for aiohttp or pyspark imports it does not use.
PLUGIN_MODULES = ("kraft_pipeline.cli", "kraft_sandbox.kraft_command")


def load_plugins() -> None:
    """Import the node's commands and every plugin module so their subcommands join the
    table (missing plugins are skipped)."""
    import kraft.cli.node  # noqa: F401 (registers run, quorum and local)
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
    except OSError as exc:
        if not _writing_stdout_failed():
            raise
        _quiet_stdout()
        print(f"kraft: cannot write to standard output: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILURE


def _writing_stdout_failed() -> bool:
    """Whether standard output itself refuses writes (a full disk, an I/O error): the
    error just caught came from it rather than from a file a command opened."""
    try:
        sys.stdout.flush()
        os.write(sys.stdout.fileno(), b"")
    except (OSError, ValueError):
        return True
    return False


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
    except (StorageError, PropertiesSyntaxError) as exc:
        reported = report_error(exc, STORAGE_ERRORS)
        if reported is None:
            raise
        return reported


if __name__ == "__main__":
    sys.exit(main())
