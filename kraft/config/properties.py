"""Java `.properties` files, as Kafka reads server.properties and meta.properties (the
durable write is `kraft.storage.properties`).

Parsing follows `java.util.Properties.load`: `#`/`!` comment lines, keys ended by the first
unescaped `=`, `:` or whitespace, continuation lines ending in an odd number of backslashes,
and the escapes `\\t \\n \\r \\f \\uXXXX` (any other escaped character stands for itself).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from pathlib import Path

_WS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class PropertiesSyntaxError(ValueError):
    """A properties file that cannot be parsed; names the file and line (a usage error: the
    CLI exits with code 2)."""


def _logical_lines(text: str, source: str) -> list[tuple[int, str]]:
    """Join continuation lines; returns (first physical line number, logical line)."""
    out: list[tuple[int, str]] = []
    physical = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    i = 0
    while i < len(physical):
        start = i + 1
        line = physical[i].lstrip(_WS)
        i += 1
        if not line or line[0] in "#!":
            continue
        while True:
            trailing = len(line) - len(line.rstrip("\\"))
            if trailing % 2 == 0:
                break
            line = line[:-1]
            if i >= len(physical):
                break
            line += physical[i].lstrip(_WS)
            i += 1
        out.append((start, line))
    return out


def _unescape(raw: str, source: str, lineno: int) -> str:
    out: list[str] = []
    i = 0
    while i < len(raw):
        c = raw[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        i += 1
        if i >= len(raw):
            break
        c = raw[i]
        if c == "u":
            hexdigits = raw[i + 1 : i + 5]
            if len(hexdigits) != 4 or any(h not in "0123456789abcdefABCDEF" for h in hexdigits):
                raise PropertiesSyntaxError(
                    f"{source}:{lineno}: malformed \\uXXXX escape {raw[i - 1 : i + 5]!r}"
                )
            out.append(chr(int(hexdigits, 16)))
            i += 5
            continue
        out.append(_ESCAPES.get(c, c))
        i += 1
    text = "".join(out)
    if any("\ud800" <= ch <= "\udfff" for ch in text):
        # `\uD83D\uDE00` is one character to Java (UTF-16): join surrogate pairs
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return text


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """Parse properties text; later duplicates win (as in Java). Raises PropertiesSyntaxError."""
    result: dict[str, str] = {}
    for lineno, line in _logical_lines(text, source):
        i = 0
        while i < len(line):
            c = line[i]
            if c == "\\":
                i += 2
                continue
            if c in "=:" or c in _WS:
                break
            i += 1
        key_raw = line[:i]
        rest = line[i:].lstrip(_WS)
        if rest[:1] in ("=", ":") and (i >= len(line) or line[i] in _WS or line[i] in "=:"):
            rest = rest[1:].lstrip(_WS)
        result[_unescape(key_raw, source, lineno)] = _unescape(rest, source, lineno)
    return result


def read_properties(path: Path | str) -> dict[str, str]:
    """Read and parse a properties file (UTF-8, as Kafka's Utils.loadProps with a Reader)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise PropertiesSyntaxError(f"{p}: not UTF-8 text ({exc})") from None
    return parse_properties(text, str(p))


def _escape(text: str, *, is_key: bool) -> str:
    out: list[str] = []
    for idx, c in enumerate(text):
        if c == "\\":
            out.append("\\\\")
        elif c in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[c])
        elif c in "=:#!":
            out.append("\\" + c)
        elif c == " " and (is_key or idx == 0):
            out.append("\\ ")
        elif ord(c) < 0x20 or ord(c) > 0x7E:
            out.append(f"\\u{ord(c):04X}")
        else:
            out.append(c)
    return "".join(out)


def format_properties(props: Mapping[str, str], comment: str | None = "") -> str:
    """Render properties like `Properties.store`: `#comment`, `#date`, then sorted `k=v` lines."""
    lines: list[str] = []
    if comment is not None:
        lines.append("#" + comment)
        now = datetime.datetime.now(datetime.UTC)
        lines.append("#" + now.strftime("%a %b %d %H:%M:%S UTC %Y"))
    for key in sorted(props):
        lines.append(f"{_escape(key, is_key=True)}={_escape(props[key], is_key=False)}")
    return "\n".join(lines) + "\n"
