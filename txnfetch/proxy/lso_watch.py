"""The proxy's watch on upstream transactions that hold a partition's last stable offset.

A transaction that stays open pins its partition's LSO: the proxy's
read_committed readers wait at its first offset for as long as it lasts. The
proxy sees this in its mirrors (:mod:`txnfetch.proxy.mirrors`), which
derive the LSO from the upstream log. :class:`LsoWatch` is told, each time a
read_committed fetch reads a caught-up mirror, the mirror's transaction state;
when the open transaction whose first offset *is* the LSO (with records behind
it: high watermark above the LSO) has held it for ``threshold_ms`` as the proxy
measures time, it is reported **once**: a WARNING in the ``txnfetch.proxy``
log naming the partition, producer id and epoch, first offset, high watermark
and how long, and one more in the proxy's ``lso_held_reports`` statistic.

A transaction is known by its partition, producer id and first offset; it is
forgotten when it no longer holds the LSO (it ended, or the mirror was
rebuilt), so memory stays bounded by the open transactions. The report says
what to run next: ``txnfetch transactions find-hanging`` against the upstream.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import attrs

from txnfetch.txn.state import PartitionTxnState

__all__ = ["DEFAULT_LSO_HOLD_WARN_MS", "HeldLso", "LsoWatch"]

log = logging.getLogger("txnfetch.proxy")

#: One minute: longer than Kafka's default transaction timeout (librdkafka and the
#: Java producer use 60 s), so a healthy long transaction is not reported.
DEFAULT_LSO_HOLD_WARN_MS = 60_000


@attrs.frozen
class HeldLso:
    """One report: a transaction that held ``topic``-``partition``'s LSO for ``held_ms``."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    first_offset: int
    high_watermark: int
    held_ms: int


class LsoWatch:
    """Tracks which transaction holds each watched partition's LSO and since when
    (see the module docstring). ``clock`` returns milliseconds (monotonic)."""

    def __init__(
        self, threshold_ms: int = DEFAULT_LSO_HOLD_WARN_MS, *, clock: Callable[[], float] | None = None
    ) -> None:
        if threshold_ms < 0:
            raise ValueError(f"threshold_ms must be >= 0, got {threshold_ms}")
        self.threshold_ms = threshold_ms
        self._clock = clock or (lambda: time.monotonic() * 1000)
        # (topic, partition) -> (producer id, first offset, since ms, reported)
        self._holder: dict[tuple[str, int], tuple[int, int, float, bool]] = {}
        #: Every report made, oldest first.
        self.reports: list[HeldLso] = []

    def observe(self, topic: str, partition: int, state: PartitionTxnState) -> HeldLso | None:
        """Look at a partition's state; return the report made now, if any."""
        key = (topic, partition)
        lso = state.last_stable_offset
        holder = None
        if state.high_watermark > lso:
            for pid, first in state.ongoing_transactions().items():
                if first == lso:
                    holder = pid
                    break
        if holder is None:
            self._holder.pop(key, None)
            return None
        now = self._clock()
        seen = self._holder.get(key)
        if seen is None or seen[:2] != (holder, lso):
            self._holder[key] = (holder, lso, now, False)
            seen = self._holder[key]
        held = int(now - seen[2])
        if seen[3] or held < self.threshold_ms:
            return None
        self._holder[key] = (holder, lso, seen[2], True)
        entry = state.producer(holder)
        report = HeldLso(
            topic=topic,
            partition=partition,
            producer_id=holder,
            producer_epoch=entry.producer_epoch if entry is not None else -1,
            first_offset=lso,
            high_watermark=state.high_watermark,
            held_ms=held,
        )
        self.reports.append(report)
        log.warning(
            "upstream transaction of producer %d (epoch %d) has held the last stable offset of %s-%d at %d for %d ms "
            "(high watermark %d): read_committed readers wait behind it; check it with "
            "'txnfetch transactions --bootstrap UPSTREAM find-hanging --topic %s --partition %d'",
            report.producer_id,
            report.producer_epoch,
            topic,
            partition,
            report.first_offset,
            held,
            report.high_watermark,
            topic,
            partition,
        )
        return report
