"""`kraft kv`: get, put and delete one key through a node's HTTP port, with a bearer token and
TLS trust when the port asks for them (docs/security.md, "Clients").

    kraft kv --http 10.0.0.5:8080 --token-file ingest.token --http-cafile ca.pem put k v
    kraft kv --http 10.0.0.5:8080 --token-file dashboard.token --http-cafile ca.pem get k

`get` writes the value's bytes to standard output; `put` prints the committed offset,
`delete` whether the key existed. Any node takes the call (a follower forwards it to the
leader; a 307 to the leader is followed). A refusal (401, 403), a missing key (404) or any
other error answer prints the node's error to standard error and exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from urllib.parse import quote

from kraft.cli.table import EXIT_FAILURE, EXIT_OK, EXIT_USAGE


def configure(p: argparse.ArgumentParser) -> None:
    """The options of `kraft kv`."""
    from kraft.admin.http_credentials import add_arguments

    p.add_argument("--http", required=True, metavar="HOST:PORT",
                   help="a node's HTTP port (http.listener)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds (default 10)")
    add_arguments(p)
    ops = p.add_subparsers(dest="op", metavar="OP", required=True)
    get = ops.add_parser("get", help="write a key's value to standard output")
    get.add_argument("key")
    put = ops.add_parser("put", help="set a key (the value from the argument or standard input)")
    put.add_argument("key")
    put.add_argument("value", nargs="?", default=None,
                     help="the value (UTF-8); without it, standard input's bytes")
    delete = ops.add_parser("delete", help="delete a key")
    delete.add_argument("key")


def run(args: argparse.Namespace) -> int:
    """Run one `kraft kv` call; the exit code."""
    from kraft.admin.http_credentials import CredentialsError, from_arguments
    from kraft.cli.local import http_call

    try:
        creds = from_arguments(args)
    except CredentialsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    path = "/v1/kv/" + quote(args.key, safe="")
    body: bytes | None = None
    method = {"get": "GET", "put": "PUT", "delete": "DELETE"}[args.op]
    if args.op == "put":
        body = args.value.encode() if args.value is not None else sys.stdin.buffer.read()
    try:
        r = http_call(args.http, method, path, body, timeout=args.timeout, credentials=creds)
    except (OSError, ValueError) as exc:
        print(f"error: {args.http}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    if r.status != 200:
        try:
            detail = json.loads(r.body).get("error", "")
        except (ValueError, AttributeError):
            detail = r.body.decode(errors="replace").strip()
        print(f"error: {method} {args.key}: {r.status} {detail}".rstrip(), file=sys.stderr)
        return EXIT_FAILURE
    if args.op == "get":
        sys.stdout.buffer.write(r.body)
    elif args.op == "put":
        print(r.json()["offset"])
    else:
        print("existed" if r.json()["existed"] else "absent")
    return EXIT_OK
