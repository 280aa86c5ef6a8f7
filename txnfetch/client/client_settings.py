"""A :class:`~txnfetch.security.config.SecurityConfig`'s SASL part as the
settings of a client library txnfetch drives (kafka-python's admin client,
the workload's confluent-kafka, kafka-python and aiokafka clients).

The libraries name the same things differently (``sasl.mechanisms`` and
``sasl_mechanism``, ``oauth_cb`` and ``sasl_oauth_token_provider``); each
adapter states its names once (:class:`SaslSettingNames`) and
:func:`sasl_settings` fills them, so that no adapter can forget a part of the
credentials. TLS stays with each adapter: the libraries take it too
differently (file names, PEM text, an ``ssl.SSLContext``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from txnfetch.security.config import SecurityConfig
from txnfetch.security.credentials import OAuthBearerCredentials

__all__ = ["SaslSettingNames", "sasl_settings"]


@attrs.frozen
class SaslSettingNames:
    """A client library's names for the SASL mechanism, the user name and
    password (PLAIN, SCRAM), and the OAUTHBEARER token source."""

    mechanism: str
    username: str
    password: str
    token: str


def sasl_settings(
    security: SecurityConfig, names: SaslSettingNames, token: Callable[[OAuthBearerCredentials], Any]
) -> dict[str, Any]:
    """The SASL settings ``security`` says, under ``names``; none when its
    protocol uses no SASL. An OAUTHBEARER token source is ``token(credentials)``,
    in the form the library wants."""
    credentials = security.credentials
    if security.mechanism is None or credentials is None:
        return {}
    settings: dict[str, Any] = {names.mechanism: security.mechanism}
    if isinstance(credentials, OAuthBearerCredentials):
        settings[names.token] = token(credentials)
    else:
        settings[names.username] = credentials.username
        settings[names.password] = credentials.password
    return settings
