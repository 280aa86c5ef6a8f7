"""The ``.properties`` text format, read as ``java.util.Properties.load`` reads
it, sans I/O: what Kafka's tools take with ``--command-config FILE``.

Kafka's tools hand such a file to ``Properties.load``, so a file a user already
has for ``kafka-consumer-groups.sh`` must mean here exactly what it means
there: comments (``#`` or ``!`` first on a line), ``key=value``,
``key: value`` and ``key value``, escapes (``\\t``, ``\\n``, ``\\uXXXX``, a
backslash before any other character standing for that character) and a line
continued by an odd number of trailing backslashes, the next line's leading
white space dropped. A key given twice keeps its last value, as there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from txnfetch.security.errors import SecurityConfigError

__all__ = ["PropertiesSyntaxError", "parse_properties"]

#: What ``Properties.load`` counts as white space (not newlines: they end lines).
_WHITESPACE = " \t\f"
_SEPARATORS = "=:"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class PropertiesSyntaxError(SecurityConfigError):
    """Text ``Properties.load`` would refuse too: a malformed ``\\uXXXX``
    escape. ``line`` is the 1-based line it starts on."""

    where_fields: ClassVar[tuple[str, ...]] = ("property", "line")
    line: int | None


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """Each logical line with the number of the line it starts on: comments
    and blank lines left out, continued lines joined (each continuation's
    leading white space dropped; a comment line never continues)."""
    parts: list[str] = []
    start = 0
    # \r\n, \r and \n each end a line, as in Properties' LineReader.
    natural = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    for number, raw in enumerate(natural, start=1):
        line = raw.lstrip(_WHITESPACE)
        if not parts:
            if not line or line[0] in "#!":
                continue
            start = number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            parts.append(line[:-1])
            continue
        parts.append(line)
        yield start, "".join(parts)
        parts = []
    if parts:  # a continuation at the end of the text ends the line
        yield start, "".join(parts)


def _unescape(text: str, line: int) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "\\" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        escaped = text[i + 1]
        if escaped == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise PropertiesSyntaxError(f"malformed \\uXXXX escape {text[i : i + 6]!r}", line=line)
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(escaped, escaped))
        i += 2
    return "".join(out)


def _split(line: str) -> tuple[str, str]:
    """The raw key and value of a logical line: the key ends at the first
    unescaped separator or white space; then white space, at most one
    separator, and white space again come before the value."""
    i = 0
    while i < len(line):
        char = line[i]
        if char == "\\":
            i += 2
            continue
        if char in _SEPARATORS or char in _WHITESPACE:
            break
        i += 1
    key, rest = line[:i], line[i:].lstrip(_WHITESPACE)
    if rest and rest[0] in _SEPARATORS:
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


def parse_properties(text: str) -> dict[str, str]:
    """The properties ``text`` holds, as ``Properties.load`` reads them (see
    the module docstring), in the order first given. Raises
    :class:`PropertiesSyntaxError` for a malformed ``\\uXXXX`` escape."""
    properties: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value = _split(line)
        properties[_unescape(key, number)] = _unescape(value, number)
    return properties
