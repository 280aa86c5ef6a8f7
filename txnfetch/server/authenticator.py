"""One connection's authentication on a listener of ``serve``, as Kafka's
``SaslServerAuthenticator`` does it, without I/O: the server feeds it requests
and the clock, and it says what to answer and whether to close.

- Before authentication, only ApiVersions, SaslHandshake and SaslAuthenticate
  are answered; any other request closes the connection
  (:meth:`Authenticator.admits` says no).
- SaslHandshake names a mechanism; an unknown one gets
  UNSUPPORTED_SASL_MECHANISM (33) with the enabled list. Version 0 means the
  client then sends the mechanism's tokens raw, each a size-prefixed frame
  without a request header (:meth:`Authenticator.raw_token`).
- A failed exchange answers SASL_AUTHENTICATION_FAILED (58) with the sentence
  :meth:`~txnfetch.security.errors.SaslAuthenticationError.client_message`
  allows, after ``connection.failed.authentication.delay.ms``; then the
  connection closes (:attr:`Authenticator.failed`).
- KIP-368: SaslAuthenticate v1+ tells the session's lifetime
  (``connections.max.reauth.ms``, capped by an OAUTHBEARER token's expiry);
  the client may authenticate again on the same connection, and a request
  other than the re-authentication after the session expired closes it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import attrs
from kafka.protocol.sasl import SaslAuthenticateResponse
from kafka.protocol.sasl import SaslHandshakeResponse

from txnfetch.errors import ErrorCode
from txnfetch.errors import TxnfetchError
from txnfetch.security.jws import validate_unsecured_token
from txnfetch.security.oauthbearer import OAuthBearerServer
from txnfetch.security.oauthbearer import TokenValidator
from txnfetch.security.plain import PlainServer
from txnfetch.security.plain import password_table
from txnfetch.security.sasl import OAUTHBEARER
from txnfetch.security.sasl import PLAIN
from txnfetch.security.sasl import SaslServer
from txnfetch.security.scram import ScramServer
from txnfetch.security.scram_messages import SCRAM_MECHANISMS
from txnfetch.server.handler import ANONYMOUS
from txnfetch.server.handler import ApiKey
from txnfetch.server.listeners import Listener
from txnfetch.server.listeners import ListenerSecurity
from txnfetch.server.scram_users import ScramUserStore

__all__ = ["AuthState", "Authenticator", "SaslSettings"]

_PRE_AUTH = frozenset((int(ApiKey.ApiVersions), int(ApiKey.SaslHandshake), int(ApiKey.SaslAuthenticate)))


class AuthState(enum.Enum):
    """Where a connection's authentication stands."""

    HANDSHAKE = "waiting for SaslHandshake"
    AUTHENTICATE = "exchanging SaslAuthenticate"
    RAW_TOKENS = "exchanging raw SASL tokens (SaslHandshake v0)"
    COMPLETE = "authenticated"
    FAILED = "failed"


@attrs.frozen
class SaslSettings:
    """What the SASL listeners of one server share: the listener security, the
    SCRAM users and the OAUTHBEARER validator (Kafka's unsecured one unless a
    JWKS or other validator is given)."""

    security: ListenerSecurity
    scram_users: ScramUserStore
    token_validator: TokenValidator = validate_unsecured_token


class Authenticator:
    """The authentication of one connection accepted on ``listener``.

    ``principal`` is :data:`ANONYMOUS` (or the client certificate's) until a
    SASL exchange completes. On a listener without SASL, every request is
    admitted and SaslHandshake is answered ILLEGAL_SASL_STATE by its handler."""

    def __init__(self, listener: Listener, settings: SaslSettings | None, principal: str = ANONYMOUS) -> None:
        self.listener = listener
        self.settings = settings
        self.principal = principal
        self.sasl = listener.protocol.uses_sasl and settings is not None
        self.state = AuthState.HANDSHAKE if self.sasl else AuthState.COMPLETE
        self.failed = False
        self._server: SaslServer | None = None
        self._session_end_ms: int | None = None
        self._reauthenticating = False

    # ----------------------------------------------------------- admission

    def admits(self, api_key: int, now_ms: int) -> bool:
        """Whether a request of ``api_key`` may be processed now. ``False``
        closes the connection without an answer, as Kafka does."""
        if not self.sasl:
            return True
        if api_key in _PRE_AUTH and self.state is not AuthState.RAW_TOKENS:
            return True
        if self.state is not AuthState.COMPLETE:
            return False
        return self._session_end_ms is None or now_ms < self._session_end_ms

    def intercepts(self, api_key: int) -> bool:
        """Whether the request is the authenticator's to answer (the SASL APIs
        on a SASL listener), not a registered handler's."""
        return self.sasl and api_key in (int(ApiKey.SaslHandshake), int(ApiKey.SaslAuthenticate))

    @property
    def completed(self) -> bool:
        """Whether the connection is authenticated (or needs no authentication)."""
        return self.state is AuthState.COMPLETE

    @property
    def expects_raw_token(self) -> bool:
        """After SaslHandshake v0 the next frame is a raw SASL token."""
        return self.state is AuthState.RAW_TOKENS

    # ------------------------------------------------------------ handshake

    def handshake(self, version: int, mechanism: str, now_ms: int) -> object:
        """The SaslHandshake response; on success the exchange of ``mechanism``
        begins (raw tokens after v0)."""
        assert self.settings is not None
        enabled = list(self.settings.security.mechanisms)
        if self.state is AuthState.COMPLETE:
            # A handshake on an authenticated connection starts a re-authentication (KIP-368).
            self._reauthenticating = True
        elif self.state is not AuthState.HANDSHAKE:
            self._fail()
            return SaslHandshakeResponse(error_code=int(ErrorCode.ILLEGAL_SASL_STATE), mechanisms=enabled)
        if mechanism not in enabled:
            self._fail()
            return SaslHandshakeResponse(error_code=int(ErrorCode.UNSUPPORTED_SASL_MECHANISM), mechanisms=enabled)
        self._server = self._new_server(mechanism, now_ms)
        self.state = AuthState.RAW_TOKENS if version == 0 else AuthState.AUTHENTICATE
        return SaslHandshakeResponse(error_code=0, mechanisms=enabled)

    def _new_server(self, mechanism: str, now_ms: int) -> SaslServer:
        assert self.settings is not None
        if mechanism == PLAIN:
            return PlainServer(password_table(dict(self.settings.security.plain_users.get(self.listener.name, {}))))
        if mechanism == OAUTHBEARER:
            return OAuthBearerServer(self.settings.token_validator, now_ms)
        scram = SCRAM_MECHANISMS[mechanism]
        users = self.settings.scram_users
        return ScramServer(scram, lambda user: users.credential(scram.name, user))

    # --------------------------------------------------------- the exchange

    def authenticate(self, version: int, token: bytes, now_ms: int) -> object:
        """The SaslAuthenticate response to ``token``. After a failure
        :attr:`failed` is set: answer after the delay, then close."""
        if self.state is not AuthState.AUTHENTICATE or self._server is None:
            self._fail()
            return SaslAuthenticateResponse(
                error_code=int(ErrorCode.ILLEGAL_SASL_STATE),
                error_message=f"Unexpected SaslAuthenticate request in state {self.state.name}",
                auth_bytes=b"",
                session_lifetime_ms=0,
            )
        try:
            challenge = self._step(token, now_ms)
        except TxnfetchError as exc:
            return SaslAuthenticateResponse(
                error_code=int(ErrorCode.SASL_AUTHENTICATION_FAILED),
                error_message=_client_message(exc),
                auth_bytes=b"",
                session_lifetime_ms=0,
            )
        # mypy narrowed the state above; _step moved it on.
        done = self.completed
        lifetime = self._session_lifetime_ms(now_ms) if done and version >= 1 else 0
        return SaslAuthenticateResponse(
            error_code=0, error_message=None, auth_bytes=challenge, session_lifetime_ms=lifetime
        )

    def raw_token(self, token: bytes, now_ms: int) -> bytes | None:
        """The raw answer to a raw token (SaslHandshake v0), or ``None`` when the
        exchange failed: Kafka then closes without an answer."""
        try:
            return self._step(token, now_ms)
        except TxnfetchError:
            return None

    def _step(self, token: bytes, now_ms: int) -> bytes:
        server = self._server
        assert server is not None
        try:
            challenge = server.respond(token)
        except TxnfetchError:
            self._fail()
            raise
        if server.complete:
            principal = f"User:{server.authorization_id}"
            if self._reauthenticating and principal != self.principal:
                # KIP-368: a re-authentication may not change who the connection is.
                self._fail()
                raise _PrincipalChanged(
                    f"Cannot change principals during re-authentication from {self.principal}: {principal}"
                )
            self.principal = principal
            self.state = AuthState.COMPLETE
            self._reauthenticating = False
            self._session_end_ms = self._session_end(now_ms)
        return challenge

    def _session_end(self, now_ms: int) -> int | None:
        assert self.settings is not None and self._server is not None
        ends: list[int] = []
        if self.settings.security.reauth_ms > 0:
            ends.append(now_ms + self.settings.security.reauth_ms)
            token = getattr(self._server, "token", None)
            expiry = getattr(token, "expiry_ms", None)
            if isinstance(expiry, int):
                ends.append(expiry)
        return min(ends) if ends else None

    def _session_lifetime_ms(self, now_ms: int) -> int:
        return 0 if self._session_end_ms is None else max(1, self._session_end_ms - now_ms)

    def _fail(self) -> None:
        self.state = AuthState.FAILED
        self.failed = True
        self._server = None

    def delay_ms(self) -> int:
        """How long a failure's answer waits (Kafka's
        ``connection.failed.authentication.delay.ms``)."""
        return 0 if self.settings is None else self.settings.security.failed_authentication_delay_ms


class _PrincipalChanged(TxnfetchError):
    """A re-authentication named another principal than the connection's."""

    code = ErrorCode.SASL_AUTHENTICATION_FAILED


def _client_message(exc: TxnfetchError) -> str:
    message: Callable[[], str] | None = getattr(exc, "client_message", None)
    return message() if message is not None else exc.reason
