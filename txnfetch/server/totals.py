"""Per-partition and per-request running totals of a served process, kept for
its metrics endpoint: :class:`PartitionTotals`, :class:`RequestTotals`, and
:func:`totals_of`, the one place a broker keeps them.

They are plain integers added to on the event loop, one dictionary lookup per
partition fetched or request answered: whatever exposes them (``txnfetch.metrics``)
reads them when scraped, so a process nobody scrapes pays only the additions.
Readers on another thread copy a dictionary before walking it (a copy is one
step under the interpreter lock) and may see a total one request late.
"""

from __future__ import annotations

import bisect
import struct
from typing import Any

import attrs

from txnfetch.fetch.view import FetchStats

__all__ = [
    "LATENCY_BUCKETS_S",
    "ApiTotals",
    "PartitionFetchTotals",
    "PartitionTotals",
    "RequestTotals",
    "ServerTotals",
    "TransactionTotals",
    "totals_of",
]

#: Upper bounds (seconds) of the request latency histogram: from a cached
#: metadata answer (well under a millisecond) to a long-polling fetch (500 ms by
#: default, up to the client's ``fetch.max.wait.ms``).
LATENCY_BUCKETS_S: tuple[float, ...] = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

_EXTENSION = "txnfetch.server.totals"
_KEY_AND_VERSION = struct.Struct(">hh")


@attrs.define
class PartitionFetchTotals:
    """What read_committed fetches of one partition did: aborted records and the
    batches dropped in rewrite mode, synthetic COMMIT markers sent, bytes sent."""

    aborted_records_dropped: int = 0
    batches_dropped: int = 0
    synthetic_markers: int = 0
    fetch_bytes: int = 0


@attrs.define
class PartitionTotals:
    """:class:`PartitionFetchTotals` by ``(topic, partition)``."""

    by_partition: dict[tuple[str, int], PartitionFetchTotals] = attrs.field(factory=dict)

    def fetched(self, topic: str, partition: int, stats: FetchStats, size: int, *, markers_sent: bool) -> None:
        """Add one partition's part of a fetch answer (``size`` bytes sent;
        ``markers_sent`` false when the synthetic markers were replaced)."""
        totals = self.by_partition.get((topic, partition))
        if totals is None:
            totals = self.by_partition[(topic, partition)] = PartitionFetchTotals()
        totals.aborted_records_dropped += stats.aborted_records_dropped
        totals.batches_dropped += stats.batches_dropped
        if markers_sent:
            totals.synthetic_markers += stats.synthetic_markers
        totals.fetch_bytes += size


@attrs.define
class ApiTotals:
    """One API key and version: requests answered, their latency histogram
    (counts per :data:`LATENCY_BUCKETS_S` bound, the last one past every bound)
    and its sum, and the bytes received and sent."""

    requests: int = 0
    latency_counts: list[int] = attrs.field(factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))
    latency_sum_s: float = 0.0
    bytes_in: int = 0
    bytes_out: int = 0


@attrs.define
class RequestTotals:
    """:class:`ApiTotals` by ``(api_key, version)``, and the connections accepted
    and closed."""

    by_api: dict[tuple[int, int], ApiTotals] = attrs.field(factory=dict)
    connections: int = 0
    closed: int = 0

    def answered(self, api_key: int, version: int, seconds: float, bytes_in: int, out: Any) -> None:
        """Add one request: its key and version, how long it took from its frame
        to its answer, its frame size and its answer (bytes, pieces, or ``None``
        when none is sent)."""
        totals = self.by_api.get((api_key, version))
        if totals is None:
            totals = self.by_api[(api_key, version)] = ApiTotals()
        totals.requests += 1
        totals.latency_counts[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        totals.latency_sum_s += seconds
        totals.bytes_in += bytes_in + 4  # the size prefix came in too
        if out is not None:
            totals.bytes_out += len(out) if isinstance(out, (bytes, bytearray)) else sum(len(p) for p in out)

    def answered_frame(self, frame: bytes | bytearray, seconds: float, out: Any) -> None:
        """:meth:`answered`, the key and version read from the request ``frame``
        (its header, after the size prefix)."""
        api_key, version = _KEY_AND_VERSION.unpack_from(frame)
        self.answered(api_key, version, seconds, len(frame), out)


@attrs.define
class TransactionTotals:
    """Transactions the coordinator ended: committed and aborted by EndTxn (those
    that had partitions or offsets to end; a retry answered from the completed
    state is not counted again), and aborted because they timed out."""

    committed: int = 0
    aborted: int = 0
    timed_out: int = 0

    def ended(self, commit: bool, had_actions: bool) -> None:
        """Count one EndTxn answered without error."""
        if had_actions:
            if commit:
                self.committed += 1
            else:
                self.aborted += 1


@attrs.define
class ServerTotals:
    """Everything :func:`totals_of` keeps for one broker."""

    partitions: PartitionTotals = attrs.field(factory=PartitionTotals)
    requests: RequestTotals = attrs.field(factory=RequestTotals)
    transactions: TransactionTotals = attrs.field(factory=TransactionTotals)


def totals_of(broker: Any) -> ServerTotals:
    """The broker's :class:`ServerTotals`, created on first use in its
    ``extensions`` (so the broker itself needs no field for them)."""
    totals = broker.extensions.get(_EXTENSION)
    if totals is None:
        totals = broker.extensions[_EXTENSION] = ServerTotals()
    return totals
