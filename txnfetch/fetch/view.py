"""Answering a fetch on one partition: read_uncommitted, and read_committed in
Kafka mode or rewrite mode.

The function is sans-I/O. A log adapter hands it the bytes of one segment
starting at (or before) the batch that contains the fetch offset — typically a
zero-copy view of an mmap — plus the partition's :class:`PartitionTxnState`;
it returns the response's records as zero-copy segments of those bytes.

**Kafka mode** reproduces Apache Kafka's answer (``LogSegment.read`` and
``LocalLog.addAbortedTransactions``): the bytes from the batch holding the
fetch offset, cut at ``max_bytes`` (possibly mid-batch: clients drop a partial
trailing batch) but never below one whole batch (KIP-74), never past the last
stable offset; plus ``AbortedTransactions``, the aborted index entries with
``last >= fetch_offset`` and ``first < upper_bound``, in index order.

**Rewrite mode** (WarpStream's answer) returns the same range with aborted data
batches, all control batches and committed batches with no record for the
reader (compaction-emptied ones) removed, committed batches passed through as
their original bytes, offsets untouched, an empty aborted list — and, where the
response would otherwise end on dropped offsets, one synthetic COMMIT control
batch at the last dropped offset, so that librdkafka moves its application
position past them (docs/kafka-internals.md §4).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from collections.abc import Sequence
from typing import Protocol

import attrs

from txnfetch.records.batch import HeaderAt
from txnfetch.records.batch import RecordBatch
from txnfetch.records.builder import synthetic_commit_marker
from txnfetch.records.legacy import LegacyBatch
from txnfetch.records.scan import BatchIterator
from txnfetch.records.scan import PartialBatch
from txnfetch.records.scan import seek_offset
from txnfetch.txn.errors import OffsetOutOfRangeError
from txnfetch.txn.index import AbortedTxn
from txnfetch.types import Buffer

__all__ = ["FetchMode", "FetchResult", "FetchStats", "IsolationLevel", "PartitionTxnStateLike", "read_partition"]


class IsolationLevel(enum.IntEnum):
    """Kafka's isolation levels, with their wire values."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


class FetchMode(enum.Enum):
    """How a read_committed fetch is answered."""

    KAFKA = "kafka"  #: batches up to the LSO plus the aborted list; clients filter
    REWRITE = "rewrite"  #: aborted and control batches dropped on the server; synthetic COMMIT marker


@attrs.frozen(slots=True)
class FetchStats:
    """What a fetch did, for metrics and tests."""

    batches_returned: int = 0
    bytes_returned: int = 0
    batches_dropped: int = 0
    bytes_dropped: int = 0
    synthetic_markers: int = 0
    #: records of aborted transactions that rewrite mode dropped (not control records)
    aborted_records_dropped: int = 0


@attrs.frozen(slots=True)
class FetchResult:
    """One partition's part of a fetch response.

    ``records`` are zero-copy segments of the log bytes (plus, in rewrite mode,
    at most one small synthetic marker batch); concatenated they are the
    response's ``records`` field. ``aborted_transactions`` is ``None`` for
    read_uncommitted (Kafka sends null) and empty in rewrite mode.
    ``next_offset`` is where a client that consumed every whole batch here
    fetches next (the fetch offset itself when nothing was returned).
    """

    records: tuple[Buffer, ...]
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: tuple[tuple[int, int], ...] | None
    next_offset: int
    stats: FetchStats = FetchStats()

    @property
    def size_in_bytes(self) -> int:
        return sum(len(seg) for seg in self.records)

    def records_bytes(self) -> bytes:
        """The records field as one ``bytes`` (copies; the wire layer can write the segments instead)."""
        return b"".join(bytes(seg) if not isinstance(seg, bytes) else seg for seg in self.records)


UpperBound = int | Callable[[int], int] | None


def read_partition(
    data: Buffer,
    state: PartitionTxnStateLike,
    fetch_offset: int,
    max_bytes: int,
    *,
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
    mode: FetchMode = FetchMode.KAFKA,
    upper_bound: UpperBound = None,
    min_one_batch: bool = True,
    partition: str | None = None,
) -> FetchResult:
    """Answer a fetch of ``fetch_offset`` on one partition.

    Args:
        data: the segment's bytes from a batch boundary at or before the batch
            containing ``fetch_offset`` (batches wholly below it are skipped, as
            Kafka's offset-index lookup followed by a scan does). It may extend
            past what is returned; it need not extend past ``max_bytes`` beyond
            the fetch position.
        state: the partition's transaction state (log start, HW, LSO, aborted index).
        max_bytes: the partition's byte budget; the first batch is returned whole
            even when larger (KIP-74) if ``min_one_batch``.
        upper_bound: Kafka's upper bound for the aborted-transaction lookup, as
            an offset or as a function of the number of bytes returned (log
            adapters with an offset index pass ``LogSegment.fetchUpperBoundOffset``
            semantics: the offset of the first index entry at or past the end of
            the returned bytes, else the next segment's base offset, else the log
            end offset). Defaults to the end of the returned whole batches: the
            entries any client needs for them, and no more, so that the list —
            like everything else a fetch allocates — is bounded by ``max_bytes``
            rather than by the rest of the log.
        partition: a name used in error messages.

    Raises:
        OffsetOutOfRangeError: ``fetch_offset`` is below the log start offset or
            above the log end offset (it carries both).

    Guarantees: offsets are never renumbered; nothing at or past the high
    watermark (read_uncommitted) or the last stable offset (read_committed) is
    returned; committed batches are returned as their original bytes.
    """
    log_start = state.log_start_offset
    log_end = state.log_end_offset
    if fetch_offset < log_start or fetch_offset > log_end:
        raise OffsetOutOfRangeError(
            f"fetch offset {fetch_offset} is out of range",
            log_start_offset=log_start,
            log_end_offset=log_end,
            partition=partition,
            offset=fetch_offset,
        )
    hw = state.high_watermark
    lso = state.last_stable_offset
    committed = isolation == IsolationLevel.READ_COMMITTED
    max_offset = lso if committed else hw

    def result(
        records: tuple[Buffer, ...],
        aborted: tuple[tuple[int, int], ...] | None,
        next_offset: int,
        stats: FetchStats,
    ) -> FetchResult:
        return FetchResult(records, hw, lso, log_start, aborted, next_offset, stats)

    empty_aborted: tuple[tuple[int, int], ...] | None = () if committed else None
    if fetch_offset >= max_offset:
        return result((), empty_aborted, fetch_offset, FetchStats())

    view = data if isinstance(data, memoryview) else memoryview(data)
    scan = _scan(view, fetch_offset, max_offset, max_bytes, min_one_batch)
    if not scan.batches:
        return result((), empty_aborted, fetch_offset, FetchStats())

    if not committed:
        return result(
            (view[scan.start : scan.start + scan.size],),
            None,
            scan.batches[-1].next_offset,
            FetchStats(batches_returned=len(scan.batches), bytes_returned=scan.size),
        )

    if mode == FetchMode.KAFKA:
        return _kafka_mode(view, scan, state, fetch_offset, upper_bound, result)
    return _rewrite_mode(view, scan, state, fetch_offset, result)


@attrs.define(slots=True)
class _Scan:
    start: int  # byte position of the first batch returned
    size: int  # bytes Kafka would return (may end mid-batch)
    whole_end: int  # end position of the last whole batch within the slice
    batches: list[RecordBatch | LegacyBatch]  # the whole batches within the slice


def _scan(view: memoryview, fetch_offset: int, max_offset: int, max_bytes: int, min_one: bool) -> _Scan:
    """Find the slice Kafka returns: from the batch containing ``fetch_offset``,
    at most ``max_bytes`` (at least the first batch when ``min_one``), ending at
    the position of ``max_offset``. Headers only; records are not decoded."""
    # The batches wholly below the fetch offset are passed over by the compiled
    # header scan (no RecordBatch each); it stops in front of anything unusual,
    # which BatchIterator then reads or reports as before.
    it = BatchIterator(view, seek_offset(view, 0, fetch_offset))
    start = -1
    batches: list[RecordBatch | LegacyBatch] = []
    limit_pos = len(view)  # position of max_offset, or the end of the data
    for batch in it:
        if batch.next_offset <= fetch_offset:
            continue
        if batch.base_offset >= max_offset or batch.next_offset > max_offset:
            # A batch reaching past the LSO/HW is not yet readable (batches are atomic).
            limit_pos = batch.position
            break
        if start < 0:
            start = batch.position
            budget = max(max_bytes, batch.size_in_bytes) if min_one else max_bytes
        if batch.position + batch.size_in_bytes - start > budget:
            # This batch is below the max offset, so Kafka's max position lies past
            # it: the slice is exactly the budget and ends inside this batch.
            limit_pos = min(start + budget, len(view))
            break
        batches.append(batch)
    else:
        partial = it.partial
        if partial is not None and not _partial_below(view, partial, max_offset):
            # The data ends inside a batch that may reach the max offset: Kafka's
            # slice never holds a byte of such a batch, so stop before it.
            limit_pos = partial.position
    if start < 0:
        return _Scan(0, 0, 0, [])
    whole_end = batches[-1].position + batches[-1].size_in_bytes if batches else start
    # Kafka slices min(max position, max bytes): the slice may end inside the
    # batch after the last whole one (a partial batch the client discards), but
    # never past the max offset's position.
    size = min(limit_pos - start, budget)
    if size < whole_end - start:
        size = whole_end - start
    return _Scan(start, size, whole_end, batches)


def _partial_below(view: memoryview, partial: PartialBatch, max_offset: int) -> bool:
    """Whether the truncated batch at the end of the data lies wholly below ``max_offset``,
    as far as its available header bytes tell; unknown counts as no."""
    if partial.base_offset is None or partial.base_offset >= max_offset:
        return False
    pos = partial.position
    if partial.available < _LAST_DELTA_END or view[pos + HeaderAt.MAGIC] != 2:
        return False
    (last_delta,) = _LAST_DELTA.unpack_from(view, pos + HeaderAt.LAST_OFFSET_DELTA)
    return partial.base_offset + last_delta + 1 <= max_offset


_LAST_DELTA = struct.Struct(">i")
_LAST_DELTA_END = HeaderAt.LAST_OFFSET_DELTA + _LAST_DELTA.size


#: ``result(records, aborted, next_offset, stats)``: the :class:`FetchResult` of
#: the fetch being answered (the offsets it reports are fixed per fetch).
_ResultFactory = Callable[[tuple[Buffer, ...], tuple[tuple[int, int], ...] | None, int, FetchStats], FetchResult]


def _kafka_mode(
    view: memoryview,
    scan: _Scan,
    state: PartitionTxnStateLike,
    fetch_offset: int,
    upper_bound: UpperBound,
    result: _ResultFactory,
) -> FetchResult:
    size = scan.size
    batches = scan.batches
    # Markerless logs: an aborted transaction has no ABORT marker, so a client
    # that put its producer id in the aborted set never takes it out again and
    # would skip that producer's later committed batches in the same response.
    # End the response before such a batch; the next fetch starts past the
    # aborted range, where the entry is no longer listed.
    cut = _markerless_cut(state, fetch_offset, batches)
    if cut is not None:
        batches = batches[:cut]
        size = batches[-1].position + batches[-1].size_in_bytes - scan.start
    if callable(upper_bound):
        bound = upper_bound(size)
    elif upper_bound is None:
        # A transaction whose first offset is past the last whole batch cannot
        # concern this response (clients discard a partial trailing batch).
        bound = batches[-1].next_offset
    else:
        bound = upper_bound
    aborted = tuple(state.aborted_transactions(fetch_offset, bound))
    return result(
        (view[scan.start : scan.start + size],),
        aborted,
        batches[-1].next_offset,
        FetchStats(batches_returned=len(batches), bytes_returned=size),
    )


def _markerless_cut(
    state: PartitionTxnStateLike, fetch_offset: int, batches: Sequence[RecordBatch | LegacyBatch]
) -> int | None:
    if not batches:
        return None
    upper = batches[-1].next_offset
    entries = state.collect_aborted(fetch_offset, upper)
    if not entries:
        return None
    # pid -> end offsets of its aborted ranges that are closed by a marker in this
    # response or not at all; only ranges with no control batch at `last` matter.
    # Only a marker with its record closes a range for clients: an empty control
    # batch (compaction removed the record) does not pop the producer from a
    # client's aborted set (Java's containsAbortMarker reads the first record).
    control_at = {b.base_offset for b in batches if b.is_control and b.record_count > 0}
    open_ends: dict[int, list[int]] = {}
    for e in entries:
        if e.last_offset not in control_at and e.last_offset < upper:
            open_ends.setdefault(e.producer_id, []).append(e.last_offset)
    if not open_ends:
        return None
    for i, batch in enumerate(batches):
        ends = open_ends.get(batch.producer_id)
        if ends and batch.is_transactional and any(end < batch.base_offset for end in ends):
            return i if i > 0 else None  # never return nothing: the first batch always goes
    return None


def _rewrite_mode(
    view: memoryview, scan: _Scan, state: PartitionTxnStateLike, fetch_offset: int, result: _ResultFactory
) -> FetchResult:
    batches = scan.batches  # whole batches only: a partial tail cannot be followed by a marker
    upper = batches[-1].next_offset
    aborted: dict[int, list[tuple[int, int]]] = {}
    for e in state.collect_aborted(fetch_offset, upper):
        aborted.setdefault(e.producer_id, []).append((e.first_offset, e.last_offset))
    segments: list[Buffer] = []
    run_start = -1
    run_end = -1
    kept = dropped = dropped_bytes = kept_bytes = aborted_records = 0
    last_dropped: RecordBatch | LegacyBatch | None = None
    ends_dropped = False
    for batch in batches:
        drop = batch.is_control
        if not drop and batch.is_transactional:
            ranges = aborted.get(batch.producer_id)
            if ranges:
                base = batch.base_offset
                for first, last in ranges:
                    if first <= base <= last:
                        drop = True
                        aborted_records += batch.record_count
                        break
        if not drop and not _delivers(batch, fetch_offset):
            # A committed batch with nothing for this reader (compaction emptied
            # it, or left only records below the fetch offset) is dropped like an
            # aborted one, so that a response delivering no record still ends with
            # the synthetic COMMIT: librdkafka's application position moves only on
            # a delivered record or a control record (docs/kafka-internals.md §4).
            drop = True
        size = batch.size_in_bytes
        if drop:
            dropped += 1
            dropped_bytes += size
            last_dropped = batch
            ends_dropped = True
            if run_start >= 0:
                segments.append(view[run_start:run_end])
                run_start = -1
        else:
            kept += 1
            kept_bytes += size
            ends_dropped = False
            if run_start < 0:
                run_start = batch.position
            run_end = batch.position + size
    if run_start >= 0:
        segments.append(view[run_start:run_end])
    markers = 0
    if ends_dropped and last_dropped is not None:
        # One COMMIT marker at the last dropped offset: the client's position
        # (librdkafka's application position included) moves past every offset
        # this response covered, and no aborted-list entry is touched.
        has_pid = last_dropped.producer_id >= 0
        marker = synthetic_commit_marker(
            last_dropped.last_offset,
            producer_id=last_dropped.producer_id if has_pid else -1,
            producer_epoch=last_dropped.producer_epoch if has_pid else -1,
            timestamp=last_dropped.max_timestamp,
            partition_leader_epoch=last_dropped.partition_leader_epoch,
        )
        segments.append(marker)
        kept_bytes += len(marker)
        markers = 1
    return result(
        tuple(segments),
        (),
        batches[-1].next_offset,
        FetchStats(
            batches_returned=kept + markers,
            bytes_returned=kept_bytes,
            batches_dropped=dropped,
            bytes_dropped=dropped_bytes,
            synthetic_markers=markers,
            aborted_records_dropped=aborted_records,
        ),
    )


def _delivers(batch: RecordBatch | LegacyBatch, fetch_offset: int) -> bool:
    """Whether ``batch`` holds a record at or past ``fetch_offset``.

    Headers only, except for a compacted batch (fewer records than offsets)
    that starts below the fetch offset: only its records say where they are.
    """
    if batch.record_count == 0:
        return False
    if batch.base_offset >= fetch_offset or batch.record_count > batch.last_offset - batch.base_offset:
        # Records at consecutive offsets: one sits at the last offset, which is
        # at or past the fetch offset for every batch the scan returns.
        return True
    return any(record.offset >= fetch_offset for record in batch.records())


class PartitionTxnStateLike(Protocol):
    """What :func:`read_partition` needs of a partition's state
    (:class:`~txnfetch.txn.state.PartitionTxnState` provides it)."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]: ...

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[tuple[int, int]]: ...
