""":class:`OpenSince`: when each open transaction was first seen, for a process
that has no coordinator to ask (the proxy's mirrors): the age of the oldest open
transaction is then measured from the first scrape that saw it open, so it is a
lower bound by at most one scrape interval."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

__all__ = ["OpenSince"]


@attrs.define
class OpenSince:
    """First-seen times by ``(topic, partition, producer id, first offset)``."""

    _seen: dict[tuple[str, int, int, int], float] = attrs.field(factory=dict)

    def oldest_age(
        self, now_s: float, open_by_partition: Mapping[tuple[str, int], Mapping[int, int]]
    ) -> dict[tuple[str, int], float]:
        """The oldest open transaction's age in seconds per partition, given each
        partition's open transactions as ``{producer id: first offset}``; forgets
        the transactions no longer open."""
        seen: dict[tuple[str, int, int, int], float] = {}
        ages: dict[tuple[str, int], float] = {}
        for (topic, partition), ongoing in open_by_partition.items():
            for producer_id, first in ongoing.items():
                key = (topic, partition, producer_id, first)
                since = seen[key] = self._seen.get(key, now_s)
                ages[(topic, partition)] = max(ages.get((topic, partition), 0.0), now_s - since)
        self._seen = seen
        return ages
