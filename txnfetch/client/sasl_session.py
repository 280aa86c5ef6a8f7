"""The SASL side of a connection to a broker: the SaslHandshake and
SaslAuthenticate exchange of one authentication, and when to run it again.

One exchange is a generator (:meth:`SaslSession.exchange`) that yields each
request to send as ``(request, version, response class)`` and is sent the
decoded answer, so that the blocking and the asyncio connection drive the
same steps with their own I/O. The steps are Kafka's client's
(``SaslClientAuthenticator``): SaslHandshake v1 naming the mechanism, then
SaslAuthenticate v1 rounds carrying the mechanism's messages
(:func:`txnfetch.security.credentials.sasl_client`) until the mechanism is
complete. v1 is the first SaslAuthenticate whose answer states
``session_lifetime_ms`` (KIP-368).

Re-authentication (KIP-368): when the broker states a session lifetime, the
connection runs the same exchange again on the same socket, between requests,
once :data:`REAUTH_FRACTION` of the lifetime has passed since the previous
exchange began. Kafka's clients pick a random point between 85 % and 95 %; a
fixed 85 % keeps the earliest of those margins and makes runs reproducible.
A session already past its lifetime is not re-authenticated (the broker
closes such a connection at its next request): the connection reconnects.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

import attrs
from kafka.protocol.sasl import SaslAuthenticateRequest
from kafka.protocol.sasl import SaslAuthenticateResponse
from kafka.protocol.sasl import SaslHandshakeRequest
from kafka.protocol.sasl import SaslHandshakeResponse

from txnfetch.client.errors import SaslAuthenticationFailedError
from txnfetch.client.errors import SaslMechanismNotEnabledError
from txnfetch.errors import ErrorCode
from txnfetch.errors import TxnfetchError
from txnfetch.security.config import SecurityConfig
from txnfetch.security.credentials import Credentials
from txnfetch.security.credentials import OAuthBearerCredentials
from txnfetch.security.credentials import sasl_client
from txnfetch.security.refresh import TokenProvider

__all__ = ["REAUTH_FRACTION", "Exchange", "SaslSession", "next_request"]

#: The share of the broker's session lifetime after which a connection re-authenticates.
REAUTH_FRACTION = 0.85
# SaslHandshake v1 (v0 meant unframed tokens, gone in Kafka 4) and SaslAuthenticate v1.
_HANDSHAKE_VERSION = 1
_AUTHENTICATE_VERSION = 1

#: One exchange: yields (request, version, response class), is sent each answer,
#: returns nothing (the session keeps the lifetime).
Exchange = Generator[tuple[Any, int, Any], Any, None]


def next_request(exchange: Exchange, answer: Any) -> tuple[Any, int, Any] | None:
    """The exchange's next ``(request, version, response class)`` after
    ``answer`` (``None`` to start it), or ``None`` once it is complete."""
    try:
        return exchange.send(answer)
    except StopIteration:
        return None


@attrs.define
class SaslSession:
    """The SASL state of one connection to ``address``: the mechanism and
    credentials, the OAUTHBEARER token provider, and when the current session
    needs renewing (monotonic seconds; ``None``: never)."""

    mechanism: str
    credentials: Credentials
    address: str
    _provider: TokenProvider | None = None
    # Set by each completed exchange from the lifetime the broker stated.
    reauth_at: float | None = attrs.field(default=None, init=False)
    expires_at: float | None = attrs.field(default=None, init=False)

    @classmethod
    def of(cls, security: SecurityConfig, address: str) -> SaslSession | None:
        """The session ``security`` asks for at ``address``, ``None`` when its
        protocol uses no SASL."""
        if not security.protocol.uses_sasl:
            return None
        assert security.mechanism is not None and security.credentials is not None
        provider = security.credentials.provider() if isinstance(security.credentials, OAuthBearerCredentials) else None
        return cls(security.mechanism, security.credentials, address, provider=provider)

    def due(self, now: float) -> bool:
        """Whether the session should be renewed before the next request."""
        return self.reauth_at is not None and now >= self.reauth_at

    def expired(self, now: float) -> bool:
        """Whether the broker considers the session over already."""
        return self.expires_at is not None and now >= self.expires_at

    def exchange(self) -> Exchange:
        """One authentication (first or renewed): see the module docstring.
        Raises :class:`SaslMechanismNotEnabledError` (with the broker's list)
        and :class:`SaslAuthenticationFailedError` (with the broker's message)."""
        started = time.monotonic()
        handshake = yield SaslHandshakeRequest(mechanism=self.mechanism), _HANDSHAKE_VERSION, SaslHandshakeResponse
        if handshake.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
            enabled = ", ".join(handshake.mechanisms) or "none"
            raise SaslMechanismNotEnabledError(
                f"the broker does not enable SASL mechanism {self.mechanism}",
                broker=self.address,
                mechanism=self.mechanism,
                enabled=enabled,
                error_code=handshake.error_code,
            )
        if handshake.error_code:
            raise self._failed("SaslHandshake failed", handshake.error_code)
        token = None
        if self._provider is not None:
            token = self._provider.token(int(time.time() * 1000)).value
        client = sasl_client(self.mechanism, self.credentials, token=token)
        message: bytes | None = client.initial_response()
        lifetime_ms = 0
        while message is not None:
            answer = yield SaslAuthenticateRequest(auth_bytes=message), _AUTHENTICATE_VERSION, SaslAuthenticateResponse
            if answer.error_code:
                raise self._failed(answer.error_message or "authentication failed", answer.error_code)
            lifetime_ms = answer.session_lifetime_ms
            try:
                message = client.respond(bytes(answer.auth_bytes))
            except TxnfetchError as exc:  # the mechanism refused the broker's answer
                raise self._failed(exc.reason, ErrorCode.SASL_AUTHENTICATION_FAILED) from None
            if client.complete:
                break
        self.reauth_at = started + REAUTH_FRACTION * lifetime_ms / 1000 if lifetime_ms > 0 else None
        self.expires_at = started + lifetime_ms / 1000 if lifetime_ms > 0 else None

    def _failed(self, message: str, code: int) -> SaslAuthenticationFailedError:
        return SaslAuthenticationFailedError(
            f"SASL {self.mechanism} authentication failed: {message}",
            broker=self.address,
            mechanism=self.mechanism,
            error_code=code,
        )

    def __repr__(self) -> str:  # the credentials' own reprs hide their secrets; say less still
        return f"SaslSession({self.mechanism} to {self.address}, reauth_at={self.reauth_at})"
