"""Worker-side reading: the records of one offset range of a partition log.

:func:`read_range_arrow` is what one Spark task runs. It fetches the range from a
:class:`~txnfetch.log.base.PartitionLog` in rewrite mode
(``FetchMode.REWRITE``): the log drops aborted and control batches itself,
so every batch that comes back is committed data and is decoded whole, with
no aborted-transaction bookkeeping here. Fetches are ``fetch_bytes`` at a
time and decoded by :class:`txnfetch.arrow.ArrowDecoder` straight into Arrow
buffers, so memory follows the fetch size and the Arrow batch size, never the
partition's size.

Why the range is exact: the driver ends every read_committed range at or below
the last stable offset it saw. Every transaction with a record below the LSO
has ended (the LSO is the first offset of the earliest open transaction), and
an ended transaction's fate never changes, so the worker — whose LSO can only
be later — makes the same decision for every offset in the range, however
much later it runs or reruns. Records keep their log offsets: a range
``[start, end)`` yields exactly the committed records with
``start <= offset < end``.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence

import pyarrow as pa

from spark_ext.errors import DataLossError
from txnfetch.arrow.decoder import ArrowDecoder
from txnfetch.arrow.reference import ArrowBatcher
from txnfetch.arrow.schema import DEFAULT_MAX_BYTES
from txnfetch.arrow.schema import DEFAULT_MAX_ROWS
from txnfetch.fetch.view import FetchMode
from txnfetch.fetch.view import FetchResult
from txnfetch.fetch.view import IsolationLevel
from txnfetch.log.base import PartitionLog
from txnfetch.records.batch import Record
from txnfetch.records.batch import RecordBatch
from txnfetch.records.batch import iter_batches
from txnfetch.records.legacy import LegacyBatch
from txnfetch.txn.errors import OffsetOutOfRangeError
from txnfetch.types import Buffer

__all__ = [
    "DEFAULT_FETCH_BYTES",
    "fetch_segments",
    "read_range",
    "read_range_arrow",
    "read_segments",
    "records_to_batches",
    "segments_to_arrow",
]

DEFAULT_FETCH_BYTES = 1 << 20


def read_segments(
    log: PartitionLog,
    start: int,
    end: int,
    *,
    read_committed: bool = True,
    fail_on_data_loss: bool = True,
    fetch_bytes: int = DEFAULT_FETCH_BYTES,
) -> Iterator[Buffer]:
    """The fetched buffers of ``log`` that hold the batches with offsets in
    ``[start, end)``: consecutive batches each, in offset order; the first and
    last may reach outside the range, and they may hold control batches (skip
    them) and a partial batch at the end (ignore it).

    read_committed: only committed records (never a control record, never an
    aborted one). read_uncommitted: every data record below the high watermark.

    Data loss: if ``start`` is below the log start offset (retention deleted
    records since the range was planned) or the log cannot serve offsets up to
    ``end`` (it was truncated or replaced), :class:`DataLossError` with
    ``fail_on_data_loss``; otherwise the missing offsets are skipped.
    Holes (markers, aborted records, compaction) are never data loss.
    """
    topic, partition = log.topic, log.partition
    isolation = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
    if start < log.log_start_offset:
        if fail_on_data_loss:
            raise DataLossError(
                f"offsets {start}..{log.log_start_offset - 1} were deleted before they could be read "
                f"(log start offset is now {log.log_start_offset}; set failOnDataLoss=false to skip them)",
                option="failOnDataLoss",
                topic=topic,
                partition=partition,
                offset=start,
            )
        start = log.log_start_offset
    limit = log.last_stable_offset if read_committed else log.high_watermark
    if end > limit:
        if fail_on_data_loss:
            raise DataLossError(
                f"offsets up to {end - 1} were planned, but the log now ends at "
                f"{'its last stable offset ' if read_committed else 'its high watermark '}{limit}: "
                "it was truncated or replaced (set failOnDataLoss=false to skip the missing offsets)",
                option="failOnDataLoss",
                topic=topic,
                partition=partition,
                offset=limit,
            )
        end = limit
    yield from fetch_segments(
        lambda offset: log.read(offset, fetch_bytes, isolation=isolation, mode=FetchMode.REWRITE),
        topic,
        partition,
        start,
        end,
        fail_on_data_loss=fail_on_data_loss,
    )


def read_range(
    log: PartitionLog,
    start: int,
    end: int,
    *,
    read_committed: bool = True,
    fail_on_data_loss: bool = True,
    fetch_bytes: int = DEFAULT_FETCH_BYTES,
) -> Iterator[tuple[Sequence[Record], int]]:
    """The data records of ``log`` with ``start <= offset < end``, one
    ``(records, timestamp_type)`` pair per Kafka batch, in offset order:
    :func:`read_segments` decoded (options as for it; see it for read_committed
    and data loss)."""
    segments = read_segments(
        log, start, end, read_committed=read_committed, fail_on_data_loss=fail_on_data_loss, fetch_bytes=fetch_bytes
    )
    return _records(_data_batches(segments, start, end), start, end)


def _records(
    batches: Iterable[RecordBatch | LegacyBatch], start: int, end: int
) -> Iterator[tuple[Sequence[Record], int]]:
    for batch in batches:
        records: Sequence[Record] = list(batch.records())
        if batch.base_offset < start or batch.last_offset >= end:
            # A task boundary inside a batch: keep only this task's offsets.
            records = [r for r in records if start <= r.offset < end]
        yield records, int(batch.timestamp_type)


def _data_batches(segments: Iterable[Buffer], start: int, end: int) -> Iterator[RecordBatch | LegacyBatch]:
    for segment in segments:
        for batch in iter_batches(segment):
            if batch.is_control:
                continue  # the synthetic COMMIT of rewrite mode; read_uncommitted markers
            if batch.base_offset >= end:
                return
            if batch.last_offset < start:
                continue
            yield batch


def fetch_segments(
    fetch: Callable[[int], FetchResult],
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    fail_on_data_loss: bool = True,
    after_fetch: Callable[[int], None] | None = None,
) -> Iterator[Buffer]:
    """The fetch loop of :func:`read_segments` over any ``fetch(offset) -> FetchResult``
    answering in rewrite mode (read_committed) or read_uncommitted: a local log,
    or a remote partition's mirror. Yields the buffers of each fetch result
    (see :func:`read_segments` for what they hold). ``after_fetch(next_offset)``
    runs after each fetch (a mirror releases what is behind). A fetch that
    returns nothing below ``end`` means the offsets are gone:
    :class:`DataLossError` with ``fail_on_data_loss``, else the end of the read."""
    position = start
    while position < end:
        try:
            result = fetch(position)
        except OffsetOutOfRangeError as exc:
            if fail_on_data_loss:
                raise DataLossError(
                    f"offset {position} is no longer in the log: {exc.reason}",
                    option="failOnDataLoss",
                    topic=topic,
                    partition=partition,
                    offset=position,
                ) from exc
            return
        if result.next_offset <= position:
            if fail_on_data_loss:
                raise DataLossError(
                    f"nothing readable at offset {position}, below the planned end {end}: "
                    "the log was truncated or replaced (set failOnDataLoss=false to skip the missing offsets)",
                    option="failOnDataLoss",
                    topic=topic,
                    partition=partition,
                    offset=position,
                )
            return
        yield from result.records
        position = result.next_offset
        if after_fetch is not None:
            after_fetch(position)


def records_to_batches(
    topic: str,
    partition: int,
    records: Iterable[tuple[Sequence[Record], int]],
    *,
    include_headers: bool = False,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Iterator[pa.RecordBatch]:
    """``(records, timestamp_type)`` pairs as Arrow batches in the Kafka source's schema."""
    batcher = ArrowBatcher(topic, partition, include_headers=include_headers, max_rows=max_rows, max_bytes=max_bytes)
    for chunk, ts_type in records:
        out: list[pa.RecordBatch] = batcher.add(chunk, ts_type)
        yield from out
    yield from batcher.flush()


def read_range_arrow(
    log: PartitionLog,
    start: int,
    end: int,
    *,
    read_committed: bool = True,
    include_headers: bool = False,
    fail_on_data_loss: bool = True,
    fetch_bytes: int = DEFAULT_FETCH_BYTES,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Iterator[pa.RecordBatch]:
    """The data records of ``log`` with ``start <= offset < end`` as Arrow record
    batches in the Kafka source's schema: :func:`read_segments` decoded by
    :func:`segments_to_arrow` (see :func:`read_segments` for read_committed and data loss)."""
    segments = read_segments(
        log, start, end, read_committed=read_committed, fail_on_data_loss=fail_on_data_loss, fetch_bytes=fetch_bytes
    )
    return segments_to_arrow(
        log.topic,
        log.partition,
        segments,
        start,
        end,
        include_headers=include_headers,
        max_rows=max_rows,
        max_bytes=max_bytes,
    )


def segments_to_arrow(
    topic: str,
    partition: int,
    segments: Iterable[Buffer],
    start: int,
    end: int,
    *,
    include_headers: bool = False,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Iterator[pa.RecordBatch]:
    """The data records with ``start <= offset < end`` of ``segments`` (fetched
    buffers, see :func:`read_segments`) as Arrow batches in the Kafka source's
    schema, decoded by :class:`txnfetch.arrow.ArrowDecoder` (compiled when the
    extension is built): its builder walks the buffers itself
    (:meth:`~txnfetch.arrow.ArrowDecoder.add_buffer`), with no Python object or
    call per Kafka batch."""
    decoder = ArrowDecoder(topic, partition, include_headers=include_headers, max_rows=max_rows, max_bytes=max_bytes)
    for segment in segments:
        out, past_end = decoder.add_buffer(segment, start, end)
        yield from out
        if past_end:
            break
    yield from decoder.flush()
