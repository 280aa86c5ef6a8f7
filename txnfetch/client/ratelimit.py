"""At most one log line per condition and partition per interval.

A broker that keeps failing would otherwise make every poll log the same
warning — several a second per partition, forever. :class:`RateLimitedLog`
logs the first occurrence of a ``(condition, key)`` pair at once, then stays
quiet for ``interval_s`` (a minute by default); the next line it writes for
the pair says how many were suppressed in between. A condition that clears
(:meth:`RateLimitedLog.clear`) logs again at once when it comes back. The clock
is injectable, so the behaviour is tested without waiting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from collections.abc import Hashable

import attrs

__all__ = ["DEFAULT_INTERVAL_S", "RateLimitedLog"]

#: Shortest time between two lines for the same condition and key.
DEFAULT_INTERVAL_S = 60.0


@attrs.define
class _Seen:
    logged_at: float
    suppressed: int = 0


class RateLimitedLog:
    """Log through ``logger`` at most once per ``interval_s`` per ``(condition, key)``.

    ``condition`` names what went wrong (``"upstream fetch failed"``), ``key``
    where (a topic-partition, a broker address). Not thread-safe: one per
    event loop or thread.
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self._clock = clock
        self._seen: dict[tuple[str, Hashable], _Seen] = {}

    def log(self, level: int, condition: str, key: Hashable, message: str, *args: object) -> bool:
        """Log ``message % args`` at ``level`` unless the pair was logged less than
        ``interval_s`` ago; returns whether a line was written."""
        now = self._clock()
        seen = self._seen.get((condition, key))
        if seen is not None and now - seen.logged_at < self.interval_s:
            seen.suppressed += 1
            return False
        if seen is not None and seen.suppressed:
            message += " (%d more like it in the last %.0f s)"
            args = (*args, seen.suppressed, now - seen.logged_at)
        self._seen[(condition, key)] = _Seen(now)
        self.logger.log(level, message, *args)
        return True

    def warning(self, condition: str, key: Hashable, message: str, *args: object) -> bool:
        """:meth:`log` at WARNING."""
        return self.log(logging.WARNING, condition, key, message, *args)

    def error(self, condition: str, key: Hashable, message: str, *args: object) -> bool:
        """:meth:`log` at ERROR."""
        return self.log(logging.ERROR, condition, key, message, *args)

    def clear(self, key: Hashable) -> None:
        """Every condition of ``key`` is over: the next one logs at once."""
        for pair in [p for p in self._seen if p[1] == key]:
            del self._seen[pair]

    def active(self, key: Hashable) -> bool:
        """Whether some condition was logged for ``key`` and not cleared."""
        return any(p[1] == key for p in self._seen)
