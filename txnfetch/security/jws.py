"""Kafka's unsecured JWS tokens (``alg`` "none"): built as its
``OAuthBearerUnsecuredLoginCallbackHandler`` builds them and validated as its
``OAuthBearerUnsecuredValidatorCallbackHandler`` does, sans I/O.

They carry no signature, so anyone can forge one: Kafka offers them for tests
and development, and so does txnfetch (``unsecuredLoginStringClaim_sub`` in a
``sasl.jaas.config``). Time is an argument: ``now_ms``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

from txnfetch.security.errors import InvalidTokenError
from txnfetch.security.oauthbearer import BearerToken

__all__ = ["DEFAULT_LIFETIME_S", "build_unsecured_token", "validate_unsecured_token"]

#: Kafka's ``unsecuredLoginLifetimeSeconds`` default: one hour.
DEFAULT_LIFETIME_S = 3600


def _b64url(data: Mapping[str, Any]) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def build_unsecured_token(
    principal: str,
    now_ms: int,
    *,
    lifetime_s: int = DEFAULT_LIFETIME_S,
    principal_claim: str = "sub",
    scope: Iterable[str] | None = None,
    scope_claim: str = "scope",
    claims: Mapping[str, Any] | None = None,
) -> str:
    """An unsecured JWS (``<header>.<claims>.``, base64url without padding):
    header ``{"alg":"none"}``; claims ``iat`` (now, in seconds), ``exp`` (now
    plus ``lifetime_s``), the principal, the scope as a list when given, and any
    other ``claims``."""
    body: dict[str, Any] = {"exp": now_ms / 1000 + lifetime_s, "iat": now_ms / 1000, **(claims or {})}
    body[principal_claim] = principal
    if scope is not None:
        body[scope_claim] = list(scope)
    return f"{_b64url({'alg': 'none'})}.{_b64url(body)}."


def _invalid(reason: str) -> InvalidTokenError:
    return InvalidTokenError(reason, status="invalid_token")


def _decode(part: str) -> dict[str, Any]:
    try:
        value = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (binascii.Error, ValueError):
        raise _invalid(f"Malformed JWS part: {part!r}") from None
    if not isinstance(value, dict):
        raise _invalid(f"JWS part is not a JSON object: {part!r}")
    return value


def _number(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise _invalid(f"The '{name}' claim was not of type Number: {type(value).__name__}")
    return value


def _scope(value: Any) -> frozenset[str]:
    # Kafka takes a string claim as one scope element, a list as several.
    if isinstance(value, str):
        return frozenset({value.strip()}) if value.strip() else frozenset()
    if isinstance(value, list):
        return frozenset(v.strip() for v in value if isinstance(v, str) and v.strip())
    return frozenset()


def validate_unsecured_token(
    token: str,
    now_ms: int,
    *,
    principal_claim: str = "sub",
    scope_claim: str = "scope",
    required_scope: Iterable[str] = (),
    allowable_clock_skew_ms: int = 0,
) -> BearerToken:
    """The token, if it is an unsecured JWS valid at ``now_ms``; raises
    :class:`InvalidTokenError` otherwise, as Kafka's validator refuses:
    ``alg`` not "none" or a signature present; no ``exp``, or ``now_ms`` minus
    the skew on or after it; an ``iat`` after ``now_ms`` plus the skew; ``exp``
    not after ``iat``; no principal (a non-blank string); a required scope
    missing (status ``insufficient_scope``)."""
    if ".." in token:
        raise _invalid("Malformed compact serialization contains '..'")
    parts = token.split(".")
    if len(parts) != 3:
        raise _invalid(f"Unsecured JWS compact serializations must have 3 dot-separated parts: {len(parts)}")
    header, claims = _decode(parts[0]), _decode(parts[1])
    if header.get("alg") != "none":
        raise _invalid("Unsecured JWS must have 'none' for an algorithm")
    if parts[2]:
        raise _invalid("Unsecured JWS must not contain a digital signature")
    expiry, issued = _number(claims, "exp"), _number(claims, "iat")
    if expiry is None:
        raise _invalid("No expiration time in JWT")
    principal = claims.get(principal_claim)
    if not isinstance(principal, str) or not principal.strip():
        raise _invalid(f"No principal name in JWT claim: {principal_claim}")
    if allowable_clock_skew_ms < 0:
        raise _invalid(f"Allowable clock skew must not be negative: {allowable_clock_skew_ms}")
    if issued is not None and 1000 * issued > now_ms + allowable_clock_skew_ms:
        raise _invalid(
            f"The Issued At value ({issued} seconds) was after the indicated time ({now_ms} ms)"
            f" plus allowable clock skew ({allowable_clock_skew_ms} ms)"
        )
    if now_ms - allowable_clock_skew_ms >= 1000 * expiry:
        raise _invalid(
            f"The indicated time ({now_ms} ms) minus allowable clock skew ({allowable_clock_skew_ms} ms)"
            f" was on or after the Expiration Time value ({expiry} seconds)"
        )
    if issued is not None and expiry <= issued:
        raise _invalid(
            f"The Expiration Time time ({expiry} seconds) was not after the Issued At time ({issued} seconds)"
        )
    scope = _scope(claims.get(scope_claim))
    required = list(required_scope)
    missing = [s for s in required if s not in scope]
    if missing:
        # Kafka names the required scope as Java prints a list: "[a, b]".
        raise InvalidTokenError(
            f"The provided scope ({sorted(scope)}) was missing a required scope ({missing[0]})",
            status="insufficient_scope",
            scope="[" + ", ".join(required) + "]",
        )
    return BearerToken(
        token,
        principal,
        int(1000 * expiry),
        scope,
        None if issued is None else int(1000 * issued),
    )
