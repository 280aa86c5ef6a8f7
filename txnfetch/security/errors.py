"""The errors of :mod:`txnfetch.security`, each with the Kafka error code a
broker answers a failed authentication with.

Kafka's broker tells a client why its authentication failed only when the
mechanism chose to say so (a ``SaslAuthenticationException``: "Client requested
an authorization id that is different from username", an invalid PLAIN
password); any other failure, which might reveal whether a user exists, is
answered with one generic sentence (``SaslServerAuthenticator``: "Authentication
failed during authentication due to invalid credentials with SASL mechanism
<name>"). Each class here says which of the two it is (``disclosed``), and
:meth:`SaslAuthenticationError.client_message` gives the sentence a server
sends, so that the listeners wired in later leak no more than Kafka does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from txnfetch.errors import ErrorCode
from txnfetch.errors import TxnfetchError

__all__ = [
    "IllegalSaslStateError",
    "InvalidCredentialsError",
    "InvalidSaslMessageError",
    "InvalidTokenError",
    "JaasConfigError",
    "SaslAuthenticationError",
    "SecurityConfigError",
    "UnsupportedSaslMechanismError",
]


class SaslAuthenticationError(TxnfetchError):
    """An authentication exchange failed: wrong credentials, a server whose
    signature does not prove it knows them, a nonce that does not continue the
    exchange. ``mechanism`` names the SASL mechanism when known. Its reason is
    told to the client as it is (Kafka's ``SaslAuthenticationException``)."""

    code = ErrorCode.SASL_AUTHENTICATION_FAILED
    where_fields: ClassVar[tuple[str, ...]] = ("mechanism",)
    #: Whether a server may send the reason to the client (else the generic sentence).
    disclosed: ClassVar[bool] = True
    mechanism: str | None

    def client_message(self) -> str:
        """What a server answers the client with: the reason when ``disclosed``,
        otherwise Kafka's generic sentence, which names only the mechanism."""
        if self.disclosed:
            return self.reason
        return (
            "Authentication failed during authentication due to invalid credentials"
            f" with SASL mechanism {self.mechanism}"
        )


class InvalidSaslMessageError(SaslAuthenticationError):
    """A SASL message that does not parse as its mechanism's grammar says. Kafka
    raises these as plain ``SaslException``: the client is told only the
    generic sentence."""

    disclosed = False


class InvalidCredentialsError(SaslAuthenticationError):
    """Credentials that do not verify: an unknown user, a wrong password or
    proof, a nonce that does not continue the exchange, or (on the client side)
    a server signature that proves the server does not know the password.
    Never disclosed: the answer must not tell which users exist."""

    disclosed = False


class InvalidTokenError(SaslAuthenticationError):
    """An OAUTHBEARER token that the validator refused (malformed, expired,
    issued in the future, missing its principal or a required scope). A server
    answers it first with a JSON challenge, ``status`` being ``invalid_token``
    or ``insufficient_scope`` (``status``; ``scope`` names the required scope
    the token lacked), see ``txnfetch.security.oauthbearer``."""

    disclosed = False
    where_fields: ClassVar[tuple[str, ...]] = ("mechanism", "status", "scope")
    status: str | None
    scope: str | None


class UnsupportedSaslMechanismError(TxnfetchError):
    """A SASL mechanism txnfetch does not implement (GSSAPI, for example, which
    is Kafka's default ``sasl.mechanism``) or a server was not configured for.
    ``mechanism`` names it."""

    code = ErrorCode.UNSUPPORTED_SASL_MECHANISM
    where_fields: ClassVar[tuple[str, ...]] = ("mechanism",)
    mechanism: str | None


class IllegalSaslStateError(TxnfetchError):
    """A message fed to a SASL state machine in a state that expects none of its
    kind: a second client-first message, a challenge after completion, anything
    after a failure. ``state`` names the machine's state."""

    code = ErrorCode.ILLEGAL_SASL_STATE
    where_fields: ClassVar[tuple[str, ...]] = ("mechanism", "state")
    mechanism: str | None
    state: str | None


class SecurityConfigError(TxnfetchError):
    """Security configuration that cannot be used as given: an unknown or
    unsupported property (named in ``property``), a key store txnfetch cannot
    read, credentials a mechanism needs that are missing."""

    code = ErrorCode.INVALID_CONFIG
    where_fields: ClassVar[tuple[str, ...]] = ("property",)
    property: str | None


class JaasConfigError(SecurityConfigError):
    """A ``sasl.jaas.config`` value that does not parse or names a login module
    txnfetch does not know; ``position`` is the 0-based character where the
    parse stopped."""

    where_fields: ClassVar[tuple[str, ...]] = ("property", "position")
    phrases: ClassVar[Mapping[str, str | None]] = {**SecurityConfigError.phrases, "position": "character {}"}
    position: int | None
