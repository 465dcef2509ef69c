"""`kraft sandbox ...`: the sandbox's command as a subcommand of `kraft`.

`kraft.cli.main` imports the modules named in its `PLUGIN_MODULES` when it builds its parser;
with this module among them, `kraft sandbox up` is `kraft-sandbox up`.
"""

from __future__ import annotations

import argparse

from kraft.cli.table import Command, register


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("args", nargs=argparse.REMAINDER,
                        help="up | fault KIND TARGET | pods | claims | env | run PROGRAM ARGS... "
                             "(see kraft-sandbox --help)")


def _run(args: argparse.Namespace) -> int:
    from kraft_sandbox.cli import main

    return main(list(args.args))


register(Command("sandbox", "run the sandbox: an emulated Kubernetes API and local nodes "
                            "running pods as kraft processes", _configure, _run))
