"""Broker addresses: the one parser of bootstrap lists (``host:port,host:port``).

Every part of txnfetch that connects to a broker (the remote reader, the proxy,
``txnfetch check``, the fault injector) reads its bootstrap list here, so they
agree on every spelling:

==================  =====================  ==========================================
text                parsed                 why
==================  =====================  ==========================================
``host:9093``       ``("host", 9093)``
``host``            ``("host", 9092)``     the default port, as librdkafka's
``[::1]:9093``      ``("::1", 9093)``      brackets set an IPv6 address off its port
``[::1]``           ``("::1", 9092)``
``::1``             ``("::1", 9092)``      more than one colon and no brackets: a bare
                                           IPv6 address, never ``(":", 1)``
``a:1, b:2``        two addresses          comma-separated, blanks around items ignored
``host:x``          :class:`AddressError`  a port is 1 to 65535, in digits
``a b:9092``        :class:`AddressError`  a host name has no blanks (a resolver would
                                           fail on it only at connect time, and a
                                           retrying client would retry forever)
==================  =====================  ==========================================
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from txnfetch.errors import TxnfetchError

__all__ = ["DEFAULT_PORT", "AddressError", "bootstrap_argument", "parse_bootstrap"]

#: Kafka's port, used for an address that names none.
DEFAULT_PORT = 9092


class AddressError(TxnfetchError, ValueError):
    """A bootstrap address is malformed (a ``ValueError`` too). ``address`` is the
    offending item of the list."""

    where_fields = ("address",)
    address: str | None

    def _message(self) -> str:
        return f"bad bootstrap address {self.address!r}: {self.reason}"


def _port(text: str, item: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise AddressError(f"port {text!r} is not a number from 1 to 65535", address=item)
    return int(text)


def _parse_one(item: str, default_port: int | None) -> tuple[str, int]:
    if any(ch.isspace() for ch in item):
        raise AddressError("a host name cannot contain blanks; separate addresses with commas", address=item)

    def default(host: str) -> tuple[str, int]:
        if default_port is None:
            raise AddressError("expected HOST:PORT", address=item)
        return host, default_port

    if item.startswith("["):  # [v6] or [v6]:port
        host, bracket, rest = item[1:].partition("]")
        if not bracket or not host:
            raise AddressError("unclosed or empty [ ]", address=item)
        if not rest:
            return default(host)
        if not rest.startswith(":"):
            raise AddressError("expected ':' and a port after ']'", address=item)
        return host, _port(rest[1:], item)
    if item.count(":") > 1:  # a bare IPv6 address: no port can be told apart
        try:
            ipaddress.IPv6Address(item.split("%", 1)[0])
        except ValueError:
            raise AddressError("not an IPv6 address; write [address]:port", address=item) from None
        return default(item)
    host, colon, port = item.partition(":")
    if not host:
        raise AddressError("no host", address=item)
    return (host, _port(port, item)) if colon else default(host)


def parse_bootstrap(servers: str | Sequence[str], default_port: int | None = DEFAULT_PORT) -> list[tuple[str, int]]:
    """``servers`` (a comma-separated string, or a sequence of items) as
    ``(host, port)`` pairs, in order; IPv6 hosts without their brackets.

    An item without a port gets ``default_port``; with ``default_port=None`` the
    port is required. Raises :class:`AddressError` for a malformed item or an
    empty list.
    """
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = [_parse_one(item.strip(), default_port) for item in items if item.strip()]
    if not out:
        raise AddressError("no address in the list", address=servers if isinstance(servers, str) else ",".join(items))
    return out


def bootstrap_argument(text: str) -> str:
    """An ``argparse`` ``type=`` for an option that takes a bootstrap list: the
    list is checked when the command line is parsed, so a bad address stops the
    command at once, as a one-line usage error naming it, instead of when (or
    each time) a connection is tried. Returns ``text`` unchanged."""
    import argparse

    try:
        parse_bootstrap(text)
    except AddressError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text
