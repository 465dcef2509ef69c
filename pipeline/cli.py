"""The pipeline's subcommands for the `kraft` CLI's command table (`kraft audit`, `kraft export`).

`kraft.cli.main` imports this module as a plugin when it builds its parser; importing it
registers both subcommands in `kraft.cli.table.COMMANDS`. The import is cheap (argparse only):
Spark is imported when `kraft audit` runs, so `kraft` keeps working where the `pipeline`
extra (pyspark) is not installed.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

CommandSpec = tuple[
    str, str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]
]


def _configure_audit(p: argparse.ArgumentParser) -> None:
    from kraft_pipeline import audit_args

    audit_args.add_arguments(p)


def _run_audit(args: argparse.Namespace) -> int:
    from kraft_pipeline.audit import run_from_args

    return run_from_args(args)


def _configure_export(p: argparse.ArgumentParser) -> None:
    from kraft.storage.export import add_arguments

    add_arguments(p)


def _run_export(args: argparse.Namespace) -> int:
    from kraft.storage.export import run_from_args

    return run_from_args(args)


def commands() -> list[CommandSpec]:
    """(name, help, configure, handler) of each pipeline subcommand, for `kraft.cli.table.Command`."""
    return [
        ("audit", "check that every replica's log and snapshots agree (PySpark)",
         _configure_audit, _run_audit),
        ("export", "write a consistent bundle of a replica's segments and snapshots",
         _configure_export, _run_export),
    ]


def register_commands() -> None:
    """Add `audit` and `export` to the `kraft` CLI's command table."""
    from kraft.cli.table import Command, register

    for name, help_text, configure, handler in commands():
        register(Command(name, help_text, configure, handler))


register_commands()
