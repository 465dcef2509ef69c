"""Options of `kraft audit` (argparse only, so the `kraft` CLI can list them without Spark)."""

from __future__ import annotations

import argparse


class UsageError(ValueError):
    """A bad option value (the message names the option)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the audit's options to a parser (used by `kraft audit` and `python -m`)."""
    p.add_argument("--input", "-i", nargs="+", required=True, metavar="DIR",
                   help="replica metadata directories, or folders holding them")
    p.add_argument("--output", "-o", required=True, metavar="DIR",
                   help="where to write tables/, summary.json, report.html")
    p.add_argument("--master", default=None,
                   help="Spark master URL (default: the spark-submit master, else local[*])")
    p.add_argument("--high-watermark", type=int, default=None, metavar="N",
                   help="use N as the committed end offset instead of deriving it")
    p.add_argument("--voters", default=None, metavar="IDS",
                   help="comma-separated voter node ids (default: latest KRaftVoters record)")
    p.add_argument("--driver-memory", default=None, help="spark.driver.memory (default 2g)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Spark setting, repeatable")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when the audit finds committed divergence, a failed snapshot "
                        "check or a corrupt batch")
    p.add_argument("--no-report", action="store_true", help="skip report.html and charts")


def check_arguments(args: argparse.Namespace) -> argparse.Namespace:
    """Validate and normalise parsed options; raises UsageError naming the bad option."""
    if args.high_watermark is not None and args.high_watermark < 0:
        raise UsageError("--high-watermark must be >= 0")
    if isinstance(args.voters, str):
        try:
            args.voters = sorted({int(v) for v in args.voters.split(",") if v.strip()})
        except ValueError:
            raise UsageError(f"--voters {args.voters!r}: expected comma-separated integers") from None
    if isinstance(args.conf, list):
        conf: dict[str, str] = {}
        for item in args.conf:
            if "=" not in item:
                raise UsageError(f"--conf {item!r}: expected KEY=VALUE")
            k, v = item.split("=", 1)
            conf[k.strip()] = v
        if args.driver_memory:
            conf["spark.driver.memory"] = args.driver_memory
        args.conf = conf
    return args


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The audit's command line; exits with status 2 on bad options (argparse style)."""
    p = argparse.ArgumentParser(
        prog="kraft audit",
        description="Check that the logs and snapshots of every replica of a KRaft quorum agree.",
    )
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return check_arguments(args)
    except UsageError as exc:
        p.error(str(exc))
        raise  # unreachable: p.error exits
