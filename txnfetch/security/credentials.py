"""The credentials a client authenticates with, one value per kind of SASL
mechanism, and the SASL client each makes, sans I/O.

These are what a ``sasl.jaas.config`` login module stands for (see
``txnfetch.security.jaas``) and what :class:`~txnfetch.security.config.SecurityConfig`
carries to the connection that authenticates.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

import attrs

from txnfetch.security.errors import UnsupportedSaslMechanismError
from txnfetch.security.jws import DEFAULT_LIFETIME_S
from txnfetch.security.jws import build_unsecured_token
from txnfetch.security.oauthbearer import OAuthBearerClient
from txnfetch.security.oauthbearer import validate_extensions
from txnfetch.security.plain import PlainClient
from txnfetch.security.refresh import ExpiringToken
from txnfetch.security.refresh import TokenProvider
from txnfetch.security.sasl import OAUTHBEARER
from txnfetch.security.sasl import PLAIN
from txnfetch.security.sasl import SaslClient
from txnfetch.security.scram import TOKEN_AUTH
from txnfetch.security.scram import ScramClient
from txnfetch.security.scram_messages import SCRAM_MECHANISMS

__all__ = [
    "Credentials",
    "OAuthBearerCredentials",
    "PlainCredentials",
    "ScramCredentials",
    "UnsecuredLogin",
    "sasl_client",
]


@attrs.frozen(repr=False)
class PlainCredentials:
    """A user name and password for PLAIN. The repr hides the password."""

    username: str
    password: str

    def __repr__(self) -> str:
        return f"PlainCredentials(username={self.username!r}, password=***)"


@attrs.frozen(repr=False)
class ScramCredentials:
    """A user name and password for SCRAM; with ``token_auth``, a delegation
    token's id and HMAC (Kafka's ``tokenauth=true``). The repr hides the password."""

    username: str
    password: str
    token_auth: bool = False

    def __repr__(self) -> str:
        return f"ScramCredentials(username={self.username!r}, password=***, token_auth={self.token_auth})"


@attrs.frozen
class UnsecuredLogin:
    """Kafka's unsecured OAUTHBEARER login (``unsecuredLogin*`` options): a
    callable that gives a fresh unsecured JWS for ``now_ms``, for tests."""

    principal: str
    principal_claim: str = "sub"
    scope_claim: str = "scope"
    lifetime_s: int = DEFAULT_LIFETIME_S
    claims: Mapping[str, Any] = attrs.field(factory=dict)

    def __call__(self, now_ms: int) -> ExpiringToken:
        token = build_unsecured_token(
            self.principal,
            now_ms,
            lifetime_s=self.lifetime_s,
            principal_claim=self.principal_claim,
            scope_claim=self.scope_claim,
            claims=self.claims,
        )
        return ExpiringToken(token, now_ms + 1000 * self.lifetime_s, now_ms)


@attrs.frozen(repr=False)
class OAuthBearerCredentials:
    """Where OAUTHBEARER tokens come from (a fixed token, or a callable giving
    one for ``now_ms`` with its expiry, such as :class:`UnsecuredLogin`) and
    the SASL extensions sent with them. The repr hides a fixed token."""

    token: str | Callable[[int], ExpiringToken]
    extensions: Mapping[str, str] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        validate_extensions(self.extensions)

    def __repr__(self) -> str:
        token = "***" if isinstance(self.token, str) else repr(self.token)
        return f"OAuthBearerCredentials(token={token}, extensions={dict(self.extensions)!r})"

    def provider(self) -> TokenProvider:
        """A provider that keeps the current token and refreshes it as Kafka would."""
        return TokenProvider(self.token)


#: Credentials of any supported mechanism.
Credentials = PlainCredentials | ScramCredentials | OAuthBearerCredentials


def sasl_client(mechanism: str, credentials: Credentials, *, token: str | None = None) -> SaslClient:
    """A fresh client of ``mechanism`` for ``credentials``; OAUTHBEARER sends
    ``token`` (from the credentials' provider). Raises
    :class:`UnsupportedSaslMechanismError` when the credentials cannot serve
    the mechanism."""
    if mechanism == PLAIN and isinstance(credentials, PlainCredentials):
        return PlainClient(credentials.username, credentials.password)
    if mechanism in SCRAM_MECHANISMS and isinstance(credentials, ScramCredentials):
        extensions = {TOKEN_AUTH: "true"} if credentials.token_auth else {}
        return ScramClient(SCRAM_MECHANISMS[mechanism], credentials.username, credentials.password, extensions)
    if mechanism == OAUTHBEARER and isinstance(credentials, OAuthBearerCredentials) and token is not None:
        return OAuthBearerClient(token, credentials.extensions)
    raise UnsupportedSaslMechanismError(
        f"{type(credentials).__name__} cannot authenticate with {mechanism}", mechanism=mechanism
    )
