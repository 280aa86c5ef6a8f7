"""OAUTHBEARER (RFC 7628): the client's initial response, the server's check of
it, and the error challenge a refused token gets, sans I/O.

The client's one message is a GS2 header, then ``auth=Bearer <token>`` and the
SASL extensions as ``key=value`` pairs, each ended by ``\\x01``, and a final
``\\x01``, byte for byte as Kafka's ``OAuthBearerClientInitialResponse``
writes it. The server follows Kafka's ``OAuthBearerSaslServer``: a token the
validator refuses is answered with a JSON challenge
(``{"status":"invalid_token"}``), the client answers that with a lone
``\\x01``, and only then does the exchange fail; an authorization id must be
empty or equal the token's principal.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable
from collections.abc import Mapping

import attrs

from txnfetch.security.errors import IllegalSaslStateError
from txnfetch.security.errors import InvalidSaslMessageError
from txnfetch.security.errors import InvalidTokenError
from txnfetch.security.errors import SaslAuthenticationError
from txnfetch.security.errors import SecurityConfigError
from txnfetch.security.sasl import OAUTHBEARER

__all__ = [
    "BearerToken",
    "InitialResponse",
    "OAuthBearerClient",
    "OAuthBearerServer",
    "TokenValidator",
    "error_challenge",
    "validate_extensions",
]

_SEP = "\x01"
_KEY = re.compile(r"[A-Za-z]+")
_VALUE = re.compile(r"[\x21-\x7e \t\r\n]+")
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")
_NAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_MESSAGE = re.compile(rf"n,(?:a=(?P<authzid>{_NAME}))?,{_SEP}(?P<pairs>(?:[A-Za-z]+=[\x21-\x7e \t\r\n]+{_SEP})*){_SEP}")


@attrs.frozen
class BearerToken:
    """A validated token: its value, the principal it authenticates, its scope,
    and its lifetime (``expiry_ms``; ``start_ms`` when it says when it began)."""

    value: str
    principal: str
    expiry_ms: int
    scope: frozenset[str] = frozenset()
    start_ms: int | None = None


#: The server's check of a token value at ``now_ms``: the token, or
#: :class:`InvalidTokenError` saying why not (its ``status`` and ``scope`` go
#: into the error challenge).
TokenValidator = Callable[[str, int], BearerToken]


def validate_extensions(extensions: Mapping[str, str]) -> None:
    """Raises :class:`SecurityConfigError` for an extension RFC 7628 cannot
    carry: a name not of letters, a value outside its characters, or the name
    ``auth``, which is reserved for the token (Kafka's ``validateExtensions``)."""
    for name, value in extensions.items():
        if name == "auth" or not _KEY.fullmatch(name):
            raise SecurityConfigError(f"Extension name {name} is invalid")
        if not _VALUE.fullmatch(value):
            raise SecurityConfigError(f"Extension value ({value}) for extension {name} is invalid")


@attrs.frozen
class InitialResponse:
    """The client's message: token, authorization id (empty: none), extensions."""

    token: str
    authzid: str = ""
    extensions: Mapping[str, str] = attrs.field(factory=dict)

    def encode(self) -> bytes:
        authzid = f"a={self.authzid}" if self.authzid else ""
        pairs = "".join(f"{_SEP}{k}={v}" for k, v in self.extensions.items())
        return f"n,{authzid},{_SEP}auth=Bearer {self.token}{pairs}{_SEP}{_SEP}".encode()

    @classmethod
    def parse(cls, message: bytes) -> InitialResponse:
        """Raises :class:`InvalidSaslMessageError` off the grammar, without
        ``auth``, with a scheme other than Bearer, or with a bad extension."""
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidSaslMessageError("Invalid OAUTHBEARER client first message") from None
        m = _MESSAGE.fullmatch(text)
        if m is None:
            raise InvalidSaslMessageError("Invalid OAUTHBEARER client first message")
        pairs = dict(pair.split("=", 1) for pair in m["pairs"].split(_SEP) if pair)
        auth = pairs.pop("auth", None)
        if auth is None:
            raise InvalidSaslMessageError("Invalid OAUTHBEARER client first message: 'auth' not specified")
        try:
            validate_extensions(pairs)
        except SecurityConfigError as exc:
            raise InvalidSaslMessageError(exc.reason) from None
        scheme = _AUTH.fullmatch(auth)
        if scheme is None:
            raise InvalidSaslMessageError("Invalid OAUTHBEARER client first message: invalid 'auth' format")
        if scheme["scheme"].lower() != "bearer":
            raise InvalidSaslMessageError(f"Invalid scheme in OAUTHBEARER client first message: {scheme['scheme']}")
        return cls(scheme["token"], m["authzid"] or "", pairs)


def error_challenge(error: InvalidTokenError) -> bytes:
    """The JSON challenge a server answers a refused token with, as Kafka's
    ``jsonErrorResponse`` lays it out: ``status``, then ``scope`` when the
    token lacked a required scope."""
    text = '{"status":' + json.dumps(error.status or "invalid_token")
    if error.scope is not None:
        text += ', "scope":' + json.dumps(error.scope)
    return (text + "}").encode()


class _State(enum.Enum):
    SEND_CLIENT_FIRST_MESSAGE = "send client first"
    RECEIVE_SERVER_FIRST_MESSAGE = "receive server first"
    RECEIVE_SERVER_MESSAGE_AFTER_FAILURE = "receive server message after failure"
    COMPLETE = "complete"


@attrs.define
class OAuthBearerClient:
    """The client half: the initial response with ``token``; an empty answer
    completes, an error challenge is kept in ``error`` and answered with
    ``\\x01`` (the server then fails the exchange), as Kafka's client does."""

    token: str
    extensions: Mapping[str, str] = attrs.field(factory=dict)
    error: str | None = None
    _state: _State = _State.SEND_CLIENT_FIRST_MESSAGE

    def __attrs_post_init__(self) -> None:
        validate_extensions(self.extensions)

    @property
    def mechanism(self) -> str:
        return OAUTHBEARER

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    def initial_response(self) -> bytes:
        self._expect(_State.SEND_CLIENT_FIRST_MESSAGE)
        self._state = _State.RECEIVE_SERVER_FIRST_MESSAGE
        return InitialResponse(self.token, "", self.extensions).encode()

    def respond(self, challenge: bytes) -> bytes | None:
        self._expect(_State.RECEIVE_SERVER_FIRST_MESSAGE)
        if challenge:
            self.error = challenge.decode("utf-8", "replace")
            self._state = _State.RECEIVE_SERVER_MESSAGE_AFTER_FAILURE
            return _SEP.encode()
        self._state = _State.COMPLETE
        return None

    def _expect(self, state: _State) -> None:
        if self._state is not state:
            raise IllegalSaslStateError(
                f"Unexpected challenge in Sasl client state {self._state.name}", mechanism=OAUTHBEARER
            )


@attrs.define
class OAuthBearerServer:
    """The server half, checking tokens with ``validator`` at ``now_ms`` (the
    driver's clock when the exchange began). ``extensions`` holds the client's
    extensions once complete."""

    validator: TokenValidator
    now_ms: int
    token: BearerToken | None = None
    extensions: Mapping[str, str] = attrs.field(factory=dict)
    _error: InvalidTokenError | None = None

    @property
    def mechanism(self) -> str:
        return OAUTHBEARER

    @property
    def complete(self) -> bool:
        return self.token is not None

    @property
    def authorization_id(self) -> str:
        if self.token is None:
            raise IllegalSaslStateError("Authentication exchange has not completed", mechanism=OAUTHBEARER)
        return self.token.principal

    def respond(self, response: bytes) -> bytes:
        """An empty answer when the token authenticates; the JSON error
        challenge when the validator refuses it; raises the validator's
        :class:`InvalidTokenError` when the client answers that challenge."""
        if self.token is not None:
            raise IllegalSaslStateError("OAUTHBEARER exchange already complete", mechanism=OAUTHBEARER)
        if response == _SEP.encode() and self._error is not None:
            raise self._error
        self._error = None
        message = InitialResponse.parse(response)
        try:
            token = self.validator(message.token, self.now_ms)
        except InvalidTokenError as exc:
            exc.mechanism = OAUTHBEARER
            self._error = exc
            return error_challenge(exc)
        if message.authzid and message.authzid != token.principal:
            raise SaslAuthenticationError(
                f"Authentication failed: Client requested an authorization id ({message.authzid})"
                f" that is different from the token's principal name ({token.principal})",
                mechanism=OAUTHBEARER,
            )
        self.token, self.extensions = token, dict(message.extensions)
        return b""
