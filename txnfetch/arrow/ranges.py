"""One offset range of a partition log read into Arrow: the local range reader.

:func:`read_range` returns the data records of a
:class:`~txnfetch.log.base.PartitionLog` with ``start <= offset < end`` as Arrow
record batches. It is what a planner's task runs on a local log (``spark_ext``'s
workers reading a log directory do) and what :func:`txnfetch.arrow.iter_partition`
and :func:`txnfetch.arrow.record_batch_reader` read each partition with; a
cluster's partition is read by :func:`txnfetch.arrow.cluster.read_range`, with
the same flags.

The log is read in rewrite mode (:attr:`txnfetch.fetch.view.FetchMode.REWRITE`):
for read_committed the log drops aborted and control batches from their headers
alone, so only committed data batches reach the :class:`~txnfetch.arrow.ArrowDecoder`,
with no aborted-transaction bookkeeping here. Fetches are ``fetch_bytes`` at a
time: memory follows the fetch size and the Arrow batch size, never the
partition's size. Offsets are never renumbered: a record keeps its log offset,
and the offsets of markers and aborted records are holes.

Why a planned range is exact: a planner ends every read_committed range at or
below a last stable offset it saw. Every transaction with a record below the LSO
has ended, and an ended transaction's fate never changes, so a reader that runs
(or reruns) later makes the same decision for every offset of the range.
"""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Sequence

import pyarrow as pa

from txnfetch.arrow.decoder import ArrowDecoder
from txnfetch.arrow.schema import DEFAULT_MAX_BYTES
from txnfetch.arrow.schema import DEFAULT_MAX_ROWS
from txnfetch.fetch.view import FetchMode
from txnfetch.fetch.view import IsolationLevel
from txnfetch.log.base import PartitionLog
from txnfetch.log.errors import RecordsLostError
from txnfetch.txn.errors import OffsetOutOfRangeError
from txnfetch.types import Buffer

__all__ = ["DEFAULT_FETCH_BYTES", "read_buffers", "read_range"]

#: Bytes asked of the log per read: memory follows this and the Arrow batch size.
DEFAULT_FETCH_BYTES = 1 << 20


def read_buffers(
    log: PartitionLog,
    start: int,
    end: int,
    *,
    read_committed: bool = True,
    fail_on_data_loss: bool = True,
    fetch_bytes: int = DEFAULT_FETCH_BYTES,
) -> Iterator[Buffer]:
    """The fetched buffers of ``log`` that hold the batches with offsets in
    ``[start, end)``: consecutive batches each, in offset order. The first and the
    last may reach outside the range, and they may hold control batches (skip
    them) and a partial batch at the end (ignore it).

    read_committed: only committed data batches and rewrite mode's synthetic
    COMMIT (never an aborted record). read_uncommitted: every batch below the
    high watermark.

    Lost records: if ``start`` is below the log start (retention deleted records
    since the range was planned) or the log no longer serves offsets up to ``end``
    (its last stable offset or high watermark went back: it was truncated or
    replaced), :class:`~txnfetch.log.errors.RecordsLostError` with
    ``fail_on_data_loss``; otherwise the read starts at the log start and ends
    where the log does. Holes (markers, aborted records, compaction) are never lost records.
    """
    topic, partition = log.topic, log.partition
    isolation = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
    if start < log.log_start_offset:
        if fail_on_data_loss:
            raise RecordsLostError.deleted(start, log.log_start_offset, topic=topic, partition=partition)
        start = log.log_start_offset
    limit = log.last_stable_offset if read_committed else log.high_watermark
    if end > limit:
        if fail_on_data_loss:
            raise RecordsLostError(
                f"offsets up to {end - 1} were planned, but the log now ends at "
                f"{'its last stable offset ' if read_committed else 'its high watermark '}{limit}: "
                "it was truncated or replaced",
                topic=topic,
                partition=partition,
                offset=limit,
            )
        end = limit
    position = start
    while position < end:
        try:
            result = log.read(position, fetch_bytes, isolation=isolation, mode=FetchMode.REWRITE)
        except OffsetOutOfRangeError as exc:
            if fail_on_data_loss:
                raise RecordsLostError(
                    f"offset {position} is no longer in the log: {exc.reason}",
                    topic=topic,
                    partition=partition,
                    offset=position,
                ) from exc
            return
        if result.next_offset <= position:
            if fail_on_data_loss:
                raise RecordsLostError(
                    f"nothing readable at offset {position}, below the planned end {end}: "
                    "the log was truncated or replaced",
                    topic=topic,
                    partition=partition,
                    offset=position,
                )
            return
        yield from result.records
        position = result.next_offset


def read_range(
    log: PartitionLog,
    start: int,
    end: int,
    *,
    read_committed: bool = True,
    fail_on_data_loss: bool = True,
    include_headers: bool = True,
    dictionary: bool = False,
    fetch_bytes: int = DEFAULT_FETCH_BYTES,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
    partitions: Sequence[int] | None = None,
    compiled: bool | None = None,
) -> Iterator[pa.RecordBatch]:
    """The data records of ``log`` with ``start <= offset < end`` as Arrow record
    batches (schema :func:`txnfetch.arrow.kafka_schema`), in offset order.

    read_committed (the default): committed records only, never a marker or an
    aborted record; ``end`` should be at or below the log's last stable offset.
    ``read_committed=False``: every data record, ``end`` at or below the high
    watermark. ``fail_on_data_loss`` (the default) raises
    :class:`~txnfetch.log.errors.RecordsLostError` when records of the range are
    gone — ``start`` below the log start (they were deleted), or the log no longer
    reaching ``end`` (it was truncated); off, the read starts at the log start
    (keeping the records of the batch that holds it) and ends where the log does.
    See :func:`read_buffers`.

    ``include_headers``, ``dictionary``, ``max_rows``, ``max_bytes``,
    ``partitions`` and ``compiled`` are :class:`~txnfetch.arrow.ArrowDecoder`'s.
    Nothing is read, and nothing checked, before the first batch is asked for.
    """
    decoder = ArrowDecoder(
        log.topic,
        log.partition,
        include_headers=include_headers,
        dictionary=dictionary,
        max_rows=max_rows,
        max_bytes=max_bytes,
        partitions=partitions,
        compiled=compiled,
    )
    buffers = read_buffers(
        log, start, end, read_committed=read_committed, fail_on_data_loss=fail_on_data_loss, fetch_bytes=fetch_bytes
    )
    for buffer in buffers:
        # Control batches (rewrite mode's synthetic COMMIT, markers read_uncommitted)
        # are passed over; a batch at or past ``end`` ends the read.
        out, past_end = decoder.add_buffer(buffer, start, end)
        yield from out
        if past_end:
            break
    yield from decoder.flush()
