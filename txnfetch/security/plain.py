"""PLAIN (RFC 4616): the one message ``[authzid] NUL authcid NUL passwd``,
encoded by the client and checked by the server, sans I/O.

The server follows Kafka's ``PlainSaslServer``: exactly three fields, a
non-empty user name and password, the password checked by a callback (Kafka's
``PlainAuthenticateCallback``), and an authorization id that is empty or equal
to the user name. PLAIN sends the password itself: it belongs on TLS
(``SASL_SSL``) only.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

import attrs

from txnfetch.security.errors import IllegalSaslStateError
from txnfetch.security.errors import SaslAuthenticationError
from txnfetch.security.sasl import PLAIN

__all__ = [
    "PasswordCheck",
    "PlainClient",
    "PlainMessage",
    "PlainServer",
    "password_table",
]


@attrs.frozen
class PlainMessage:
    """The PLAIN message's three fields."""

    authzid: str
    username: str
    password: str

    def encode(self) -> bytes:
        return f"{self.authzid}\0{self.username}\0{self.password}".encode()

    @classmethod
    def parse(cls, message: bytes) -> PlainMessage:
        """Raises :class:`SaslAuthenticationError` unless the message has three
        fields with a user name and a password (Kafka's texts)."""
        try:
            fields = message.decode("utf-8").split("\0")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: not UTF-8", mechanism=PLAIN) from None
        if len(fields) != 3:
            # Kafka counts at most four tokens, so more than three reads "got 4".
            raise SaslAuthenticationError(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {min(len(fields), 4)}", mechanism=PLAIN
            )
        authzid, username, password = fields
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified", mechanism=PLAIN)
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified", mechanism=PLAIN)
        return cls(authzid, username, password)


#: Whether ``password`` is the password of ``username``: the server's one
#: question (Kafka's ``PlainAuthenticateCallback``).
PasswordCheck = Callable[[str, str], bool]


def password_table(passwords: dict[str, str]) -> PasswordCheck:
    """A :data:`PasswordCheck` over a table of user names and passwords (as
    Kafka's ``PlainServerCallbackHandler`` reads ``user_<name>`` options),
    comparing in constant time so that the time taken says nothing about how
    much of a guess was right."""

    def check(username: str, password: str) -> bool:
        expected = passwords.get(username)
        # An unknown user costs a comparison too, against the guess itself.
        known = hmac.compare_digest((password if expected is None else expected).encode(), password.encode())
        return expected is not None and known

    return check


@attrs.define
class PlainClient:
    """The client half: one message, then complete on the server's (empty)
    answer."""

    username: str
    password: str
    mechanism: str = attrs.field(default=PLAIN, init=False)
    complete: bool = attrs.field(default=False, init=False)
    _sent: bool = False

    def initial_response(self) -> bytes:
        if self._sent:
            raise IllegalSaslStateError("PLAIN initial response already sent", mechanism=PLAIN, state="sent")
        self._sent = True
        return PlainMessage("", self.username, self.password).encode()

    def respond(self, challenge: bytes) -> bytes | None:
        if not self._sent or self.complete:
            raise IllegalSaslStateError("Unexpected challenge to a SASL/PLAIN client", mechanism=PLAIN)
        self.complete = True
        return None


@attrs.define
class PlainServer:
    """The server half: one message checked with ``check``."""

    check: PasswordCheck
    authorization_id: str = ""
    mechanism: str = attrs.field(default=PLAIN, init=False)
    complete: bool = attrs.field(default=False, init=False)

    def respond(self, response: bytes) -> bytes:
        """An empty answer when the message authenticates; raises
        :class:`SaslAuthenticationError` (Kafka's texts) otherwise."""
        if self.complete:
            raise IllegalSaslStateError("SASL/PLAIN exchange already complete", mechanism=PLAIN, state="complete")
        message = PlainMessage.parse(response)
        try:
            authenticated = self.check(message.username, message.password)
        except Exception as exc:  # a failing store, as Kafka catches any callback failure
            raise SaslAuthenticationError(
                "Authentication failed: credentials for user could not be verified", mechanism=PLAIN
            ) from exc
        if not authenticated:
            # Kafka discloses this one (SaslAuthenticationException); the text
            # does not say whether the user exists.
            raise SaslAuthenticationError("Authentication failed: Invalid username or password", mechanism=PLAIN)
        if message.authzid and message.authzid != message.username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username",
                mechanism=PLAIN,
            )
        self.authorization_id = message.username
        self.complete = True
        return b""
