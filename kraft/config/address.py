"""HOST:PORT: the one parser of an address for the whole project (listeners, voters,
bootstrap servers, command-line flags, the operator's own listener)."""

from __future__ import annotations


def parse_host_port(text: str, what: str | None = None, *,
                    need_host: bool = False) -> tuple[str, int]:
    """Parse `HOST:PORT` or `[IPv6]:PORT` (surrounding whitespace ignored; an IPv6 host
    without brackets ends at the last colon) into (host without brackets, port).

    The host may be empty (every interface, as in a listener's `://:9093`) unless
    `need_host`. The port is digits; its range is the caller's to check (the configuration
    model names the key and the bound). Raises ValueError naming the bad text, after `what`
    when given (e.g. "voter 'x' is not HOST:PORT")."""
    stripped = text.strip()
    if stripped.startswith("["):
        close = stripped.find("]")
        ok = close > 0 and stripped[close + 1 : close + 2] == ":"
        host, port_text = (stripped[1:close], stripped[close + 2 :]) if ok else ("", "")
    else:
        host, sep, port_text = stripped.rpartition(":")
        ok = bool(sep)
    if not ok or not port_text.isdigit() or (need_host and not host):
        shown = f"{text!r} is not HOST:PORT"
        raise ValueError(f"{what} {shown}" if what else shown)
    return host, int(port_text)
