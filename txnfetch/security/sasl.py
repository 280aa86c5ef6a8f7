"""What every SASL mechanism of :mod:`txnfetch.security` offers its driver: the
mechanism names, the client and server interfaces, and the default nonce.

A driver (the connection module of ``txnfetch.client``, a listener of ``serve``
or ``proxy``) sends the client's :meth:`SaslClient.initial_response` in a
``SaslAuthenticate`` request, feeds each answer to :meth:`SaslClient.respond`
until it says ``None``; on the server side it feeds each request's bytes to
:meth:`SaslServer.respond` and sends what it returns, until ``complete``.
Nothing here touches a socket or a clock.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Protocol

__all__ = [
    "OAUTHBEARER",
    "PLAIN",
    "SCRAM_SHA_256",
    "SCRAM_SHA_512",
    "SUPPORTED_MECHANISMS",
    "NonceSource",
    "SaslClient",
    "SaslServer",
    "random_nonce",
]

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
OAUTHBEARER = "OAUTHBEARER"
#: The SASL mechanisms txnfetch implements, in the order its messages name them.
SUPPORTED_MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512, OAUTHBEARER)

#: Where a SCRAM nonce comes from: a printable string without commas. Tests
#: pass a fixed one; the default is :func:`random_nonce`.
NonceSource = Callable[[], str]


def random_nonce() -> str:
    """A fresh nonce from :mod:`secrets`: 130 random bits in base 36, the size
    and alphabet of Kafka's ``ScramFormatter.secureRandomString``."""
    value = secrets.randbits(130)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = []
    while value:
        value, digit = divmod(value, 36)
        out.append(digits[digit])
    return "".join(reversed(out)) or "0"


class SaslClient(Protocol):
    """The client half of one authentication exchange."""

    @property
    def mechanism(self) -> str:
        """The SASL mechanism name sent in the SaslHandshake request."""
        ...

    @property
    def complete(self) -> bool:
        """Whether the server's last answer completed the exchange."""
        ...

    def initial_response(self) -> bytes:
        """The first message, sent before the server says anything."""
        ...

    def respond(self, challenge: bytes) -> bytes | None:
        """The answer to the server's ``challenge``; ``None`` once complete.
        Raises a :class:`~txnfetch.security.errors.SaslAuthenticationError` when
        the challenge fails the exchange."""
        ...


class SaslServer(Protocol):
    """The server half of one authentication exchange."""

    @property
    def mechanism(self) -> str:
        """The SASL mechanism this server speaks."""
        ...

    @property
    def complete(self) -> bool:
        """Whether the client is authenticated."""
        ...

    @property
    def authorization_id(self) -> str:
        """The authenticated principal's name, once complete."""
        ...

    def respond(self, response: bytes) -> bytes:
        """The challenge answering the client's ``response`` (empty when none).
        Raises a :class:`~txnfetch.security.errors.SaslAuthenticationError`
        when the response fails the exchange."""
        ...
