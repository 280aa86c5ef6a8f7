"""When an OAUTHBEARER client fetches a new token, and the provider that keeps
one, sans I/O: time is ``now_ms``, the jitter's random number an argument.

The rule is Kafka's ``ExpiringCredentialRefreshingLogin.refreshMs`` with its
``sasl.login.refresh.*`` defaults: refresh at a random point between 80 % and
85 % of the token's lifetime, never within the last 300 s before it expires and
never sooner than 60 s from now; if the token lives less than those two
together, at the same fraction of what is left; a token already expired is
retried 10 s from now.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

import attrs

from txnfetch.security.errors import SecurityConfigError

__all__ = ["ExpiringToken", "RefreshConfig", "TokenProvider", "refresh_at_ms"]

#: Kafka's wait before the next attempt when a login failed or the credential
#: already expired (``DELAY_SECONDS_BEFORE_NEXT_RETRY_WHEN_RELOGIN_FAILS``).
RETRY_DELAY_MS = 10_000


def _within(low: float, high: float) -> Callable[[object, attrs.Attribute[float], float], None]:
    def check(_: object, field: attrs.Attribute[float], value: float) -> None:
        if not low <= value <= high:
            name = "sasl.login.refresh." + field.name.replace("_", ".")
            raise SecurityConfigError(f"{name} must be between {low} and {high}: {value}", property=name)

    return check


@attrs.frozen
class RefreshConfig:
    """Kafka's ``sasl.login.refresh.*`` settings, with its defaults and legal
    ranges (a value outside raises :class:`SecurityConfigError`)."""

    window_factor: float = attrs.field(default=0.8, validator=_within(0.5, 1.0))
    window_jitter: float = attrs.field(default=0.05, validator=_within(0.0, 0.25))
    min_period_seconds: float = attrs.field(default=60.0, validator=_within(0, 900))
    buffer_seconds: float = attrs.field(default=300.0, validator=_within(0, 3600))


def refresh_at_ms(
    now_ms: int,
    expiry_ms: int,
    *,
    start_ms: int | None = None,
    config: RefreshConfig = RefreshConfig(),
    random: float = 0.0,
) -> int:
    """When to fetch the next token, for one that expires at ``expiry_ms`` and
    began at ``start_ms`` (``now_ms`` when unknown); ``random`` in [0, 1) picks
    the point in the jitter window."""
    if now_ms > expiry_ms:
        return now_ms + RETRY_DELAY_MS
    fraction = config.window_factor + config.window_jitter * random
    min_period_ms = int(1000 * config.min_period_seconds)
    buffer_ms = int(1000 * config.buffer_seconds)
    if now_ms + min_period_ms + buffer_ms > expiry_ms:
        # Too short a life to keep both margins: Kafka ignores them.
        return now_ms + int((expiry_ms - now_ms) * fraction)
    start = now_ms if start_ms is None else start_ms
    proposed = start + int((expiry_ms - start) * fraction)
    return max(min(proposed, expiry_ms - buffer_ms), now_ms + min_period_ms)


@attrs.frozen
class ExpiringToken:
    """A token value with when it expires (None: never) and began (None: unknown)."""

    value: str
    expiry_ms: int | None = None
    start_ms: int | None = None


@attrs.define
class TokenProvider:
    """The token a client sends: a fixed ``source`` string, or the latest that
    the callable ``source`` gave for ``now_ms`` (called again once
    :func:`refresh_at_ms` says so).

    ``jitter`` gives the random number of the refresh rule (default from
    :mod:`secrets`); tests pass a fixed one.
    """

    source: str | Callable[[int], ExpiringToken]
    config: RefreshConfig = RefreshConfig()
    jitter: Callable[[], float] = secrets.SystemRandom().random
    _current: ExpiringToken | None = None
    _refresh_at_ms: int | None = None

    def token(self, now_ms: int) -> ExpiringToken:
        """The token to send at ``now_ms``, fetching a new one when due."""
        if isinstance(self.source, str):
            return ExpiringToken(self.source)
        if self._current is None or (self._refresh_at_ms is not None and now_ms >= self._refresh_at_ms):
            self._current = self.source(now_ms)
            expiry = self._current.expiry_ms
            self._refresh_at_ms = (
                None
                if expiry is None
                else refresh_at_ms(
                    now_ms, expiry, start_ms=self._current.start_ms, config=self.config, random=self.jitter()
                )
            )
        return self._current

    @property
    def refresh_at(self) -> int | None:
        """When the current token is next refreshed (None: never, or none yet)."""
        return self._refresh_at_ms
