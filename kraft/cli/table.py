"""The `kraft` command table: subcommands register here, and `kraft.cli.main` builds its
parser from it (this module imports no command, so every command module can import it).

Exit codes: 0 success, 1 failure (e.g. corruption found, directory already formatted),
2 usage error (bad arguments, bad config key/value, bad uuid), 3 `format` found a directory
formatted for another cluster id or node id; `recover` adds 4 (not confirmed), 5 (the
directory is locked by a running node) and 6 (a static quorum, kraft.version 0).

To add a subcommand elsewhere::

    from kraft.cli.table import Command, register
    register(Command("run", "start a node", configure=add_args, handler=run_main))
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

from kraft.config.properties import PropertiesSyntaxError
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
    (PropertiesSyntaxError, EXIT_USAGE, ""),
    (StorageConfigError, EXIT_USAGE, ""),
    (AlreadyFormattedError, EXIT_FAILURE, ""),
    (FormattedForAnotherError, EXIT_FORMATTED_FOR_ANOTHER, ""),
    (StorageError, EXIT_FAILURE, ""),
)
"""The errors every command may end with (the storage layer's, and a properties file that
cannot be parsed)."""


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
