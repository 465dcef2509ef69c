"""The entrypoint of every sandbox container: `python -m kraft_sandbox.launch PROGRAM ARGS`.

The kubelet runs a container's command with a `bin/` directory first on `PATH` whose
`kraft`, `kraft-operator`, `kopf` and `kraft-sandbox` are shims to this launcher (the image's
entrypoints mapped to the installed programs). Before it calls the program's console-script
function in this same process, the launcher gives the process what a pod's network
namespace would:

- cluster DNS: `socket.getaddrinfo` answers names from the sandbox's hosts file
  (`SANDBOX_HOSTS`, see `kraft_sandbox.dns`) with the search path of the
  pod's namespace (`SANDBOX_NAMESPACE`), and falls back to the system resolver for
  other names; `localhost` is the pod's own address;
- its own address (`SANDBOX_POD_IP`, a loopback address such as 127.42.0.7): a server
  bound to the wildcard address or to localhost binds to the pod's address instead (each
  pod can use the same ports, as in a cluster), and outgoing connections leave from it;
- the asyncio event loop: uvloop resolves names in libuv, past `socket.getaddrinfo`, so
  `kraft` runs with `kraft.event.loop=asyncio` (through its `KRAFT_KRAFT_EVENT_LOOP`
  override), and uvloop cannot be imported by any program (kopf's CLI would take it).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

from kraft_sandbox.dns import Resolver

WILDCARDS = {None, "", "0.0.0.0", "::", "localhost", "127.0.0.1", "::1"}


def install_dns(resolver: Resolver, pod_ip: str | None = None) -> Callable[[], None]:
    """Answer cluster names in `socket.getaddrinfo` from `resolver` (and `localhost` with
    `pod_ip` when given); returns a function that restores the previous resolver."""
    real_getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0,
                    flags: int = 0) -> list[Any]:
        name = host.decode() if isinstance(host, bytes) else host
        if pod_ip and name in ("localhost", "localhost."):
            return real_getaddrinfo(pod_ip, port, family, type, proto, flags)
        if isinstance(name, str) and name and not _is_ip(name):
            ips = resolver.lookup(name)
            if ips is not None:
                if not ips:
                    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
                out: list[Any] = []
                for ip in ips:
                    out.extend(real_getaddrinfo(ip, port, family, type, proto,
                                                flags | socket.AI_NUMERICHOST))
                return out
        return real_getaddrinfo(host, port, family, type, proto, flags)

    socket.getaddrinfo = getaddrinfo  # type: ignore[assignment]

    def restore() -> None:
        socket.getaddrinfo = real_getaddrinfo  # type: ignore[assignment]

    return restore


def install_address(pod_ip: str) -> None:
    """Bind servers on the wildcard address or localhost to `pod_ip`, and leave from it."""
    base = asyncio.base_events.BaseEventLoop
    real_create_server = base.create_server
    real_create_connection = base.create_connection

    async def create_server(self: Any, protocol_factory: Any, host: Any = None,
                            port: Any = None, **kw: Any) -> Any:
        if isinstance(host, (list, tuple)):
            host = [pod_ip if h in WILDCARDS else h for h in host]
        elif host in WILDCARDS:
            host = pod_ip
        return await real_create_server(self, protocol_factory, host, port, **kw)

    async def create_connection(self: Any, protocol_factory: Any, host: Any = None,
                                port: Any = None, **kw: Any) -> Any:
        if host in ("localhost", "127.0.0.1"):
            host = pod_ip
        if host is not None and kw.get("sock") is None and kw.get("local_addr") is None:
            kw["local_addr"] = (pod_ip, 0)
        return await real_create_connection(self, protocol_factory, host, port, **kw)

    base.create_server = create_server  # type: ignore[method-assign]
    base.create_connection = create_connection  # type: ignore[method-assign]


def install(pod_ip: str, resolver: Resolver) -> None:
    """Patch name resolution and binding for this process (see the module docstring)."""
    install_dns(resolver, pod_ip)
    install_address(pod_ip)


def _is_ip(text: str) -> bool:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, text)
            return True
        except OSError:
            continue
    return False


def _entrypoint(program: str) -> Callable[..., Any]:
    found = importlib.metadata.entry_points(group="console_scripts", name=program)
    for entry in found:
        fn: Callable[..., Any] = entry.load()
        return fn
    raise SystemExit(f"launch: no installed program named {program!r} (it runs a console "
                     "script of this environment, such as kraft, kraft-operator or kopf)")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m kraft_sandbox.launch PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    program, rest = os.path.basename(args[0]), args[1:]
    pod_ip = os.environ.get("SANDBOX_POD_IP")
    hosts = os.environ.get("SANDBOX_HOSTS")
    if hosts:  # in a pod, or `kraft-sandbox run` (cluster DNS, the machine's address)
        install_dns(Resolver(hosts, os.environ.get("SANDBOX_NAMESPACE", "default")), pod_ip)
    if pod_ip:
        install_address(pod_ip)
    if program == "kraft":
        os.environ["KRAFT_KRAFT_EVENT_LOOP"] = "asyncio"
    # uvloop resolves names in libuv, where the cluster DNS cannot answer: hide it from every
    # program (kraft's `auto` and kopf's CLI take asyncio's loop when it cannot be imported)
    sys.modules.setdefault("uvloop", None)  # type: ignore[arg-type]
    fn = _entrypoint(program)
    sys.argv = [program, *rest]
    try:
        result = fn(rest) if program == "kraft" else fn()
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    raise SystemExit(main())
