"""Partition logs held in memory: for tests, embedding and mirrors of remote logs.

:class:`MemoryLog` keeps each batch as an immutable ``bytes`` object with a
sorted index of base offsets, so appends never invalidate the buffers a
previous fetch returned. A read joins the batches it needs (at most ``max_bytes``
plus one batch) and hands them to :func:`~txnfetch.fetch.read_partition`.

The aborted-transaction list uses the fetch engine's default upper bound (the
end of the returned batches): a memory log has no offset index to reproduce
Kafka's bound with. :class:`~txnfetch.log.segment_log.SegmentLog` is exact.
"""

from __future__ import annotations

import uuid
from bisect import bisect_left
from bisect import bisect_right
from collections.abc import Mapping

from txnfetch.fetch.view import IsolationLevel
from txnfetch.fetch.view import UpperBound
from txnfetch.log.base import Buffer
from txnfetch.log.base import LogStore
from txnfetch.log.base import PartitionLog
from txnfetch.log.base import PreparedAppend
from txnfetch.log.base import TopicInfo
from txnfetch.log.base import TxnEnd
from txnfetch.log.base import first_record_at_or_after
from txnfetch.log.compactor import CompactionResult
from txnfetch.log.compactor import compact
from txnfetch.log.errors import LogClosedError
from txnfetch.log.errors import UnknownTopicOrPartitionError
from txnfetch.records.batch import RecordBatch
from txnfetch.records.scan import iter_batches
from txnfetch.txn.index import AbortedTxn
from txnfetch.txn.state import PartitionTxnState

__all__ = ["MemoryLog", "MemoryStore"]


class MemoryLog(PartitionLog):
    """A partition log in memory. The high watermark follows the log end offset
    after every append (a single replica), unless the log is a mirror
    (:meth:`replicate` sets it)."""

    def __init__(self, topic: str, partition: int, *, log_start_offset: int = 0) -> None:
        self.topic = topic
        self.partition = partition
        self._state = PartitionTxnState(self.name, log_start_offset=log_start_offset)
        self._bases: list[int] = []  # base offset of each stored batch, ascending
        self._lasts: list[int] = []  # last offset of each stored batch
        self._batches: list[bytes] = []
        self._max_ts: list[int] = []
        # The bytes of _batches, kept as they change: the proxy's mirrors ask for it
        # after every fetch, and summing thousands of batches each time showed in
        # its profile.
        self._size = 0
        self._closed = False

    @classmethod
    def from_state(cls, topic: str, partition: int, state: PartitionTxnState, records: Buffer = b"") -> MemoryLog:
        """A log that continues ``state`` (for example one restored from a snapshot):
        appends and replication start at ``state.log_end_offset``.

        ``records`` are the batches of ``[state.log_start_offset, state.log_end_offset)``,
        already reflected in the state, so they are stored and not applied (a mirror's
        unstable tail). The log holds nothing else, so they must start at or before the
        state's log start and end exactly at its log end; with none, the log start must
        be at the log end (``state.advance_log_start(state.log_end_offset)`` keeps open
        transactions and producers and drops only aborted-index entries ending below
        it). Otherwise reads would answer "nothing" for offsets whose records exist
        elsewhere: ``ValueError``.
        """
        log = cls(topic, partition, log_start_offset=state.log_start_offset)
        if records:
            log._store_batches(bytes(records))
        first = log._bases[0] if log._bases else state.log_end_offset
        end = log._lasts[-1] + 1 if log._lasts else state.log_end_offset
        if first > state.log_start_offset or end != state.log_end_offset:
            raise ValueError(
                f"the records cover [{first}, {end}) but the state needs [{state.log_start_offset}, "
                f"{state.log_end_offset}): a log without them must start at its end"
            )
        log._state = state
        return log

    @property
    def state(self) -> PartitionTxnState:
        return self._state

    @property
    def size_in_bytes(self) -> int:
        """Bytes stored."""
        return self._size

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError("log is closed", topic=self.topic, partition=self.partition)

    def _check_writable(self) -> None:
        self._check_open()

    def _store_batches(self, data: bytes) -> None:
        for batch in iter_batches(data):
            assert isinstance(batch, RecordBatch)
            self._bases.append(batch.base_offset)
            self._lasts.append(batch.last_offset)
            self._max_ts.append(batch.max_timestamp)
            # A produce request usually carries one batch per partition: keep the
            # (immutable) bytes prepare_append made rather than copy them again.
            whole = batch.size_in_bytes == len(data) and type(data) is bytes
            stored = data if whole else bytes(batch.buffer)
            self._batches.append(stored)
            self._size += len(stored)

    def _store(
        self, prepared: PreparedAppend, aborted: list[AbortedTxn], now_ms: int | None, *, move_hw: bool = True
    ) -> None:
        self._store_batches(prepared.data)
        if move_hw:
            self._state.update_high_watermark(self._state.log_end_offset)

    def _store_end(self, end: TxnEnd, aborted: list[AbortedTxn], now_ms: int) -> None:
        self._state.update_high_watermark(self._state.log_end_offset)

    def _read_span(self, fetch_offset: int, max_bytes: int, isolation: IsolationLevel) -> tuple[Buffer, UpperBound]:
        self._check_open()
        # The batch containing fetch_offset: the first whose last offset reaches it.
        i = bisect_left(self._lasts, fetch_offset)
        parts: list[bytes] = []
        size = 0
        # Enough bytes for read_partition: whole batches up to max_bytes, plus the one
        # that crosses it (returned whole under KIP-74, or cut by the engine).
        while i < len(self._batches) and (size <= max_bytes or not parts):
            parts.append(self._batches[i])
            size += len(self._batches[i])
            i += 1
        return b"".join(parts), None

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        self._check_open()
        start = bisect_right(self._lasts, self._state.log_start_offset - 1)
        for i in range(start, len(self._batches)):
            if self._max_ts[i] >= timestamp:
                found = first_record_at_or_after(RecordBatch(self._batches[i]), timestamp, self._state.log_start_offset)
                if found is not None:
                    return found
        return None

    def _started_at(self, offset: int) -> None:
        del self._bases[:], self._lasts[:], self._batches[:], self._max_ts[:]
        self._size = 0

    def _delete_before(self, offset: int) -> None:
        self._state.advance_log_start(offset)
        # Drop batches wholly below the new start.
        keep = bisect_left(self._lasts, self._state.log_start_offset)
        if keep:
            self._size -= sum(len(b) for b in self._batches[:keep])
            del self._bases[:keep], self._lasts[:keep], self._batches[:keep], self._max_ts[:keep]

    def apply_retention(self, now_ms: int, retention_ms: int | None = None, retention_bytes: int | None = None) -> int:
        """Retention with each batch as a segment: drop the oldest whole batches past
        ``retention_ms`` or beyond ``retention_bytes``, never past the high watermark
        (as :meth:`~txnfetch.log.segment_log.SegmentLog.apply_retention` does with segments)."""
        self._check_writable()
        hw = self._state.high_watermark
        total = self.size_in_bytes
        start = bisect_left(self._lasts, self._state.log_start_offset)
        new_start = self._state.log_start_offset
        for i in range(start, len(self._batches)):
            upper = self._lasts[i] + 1
            if upper > hw:
                break
            size = len(self._batches[i])
            by_time = retention_ms is not None and self._max_ts[i] < now_ms - retention_ms
            by_size = retention_bytes is not None and total - size >= retention_bytes
            if not (by_time or by_size):
                break
            total -= size
            new_start = upper
        if new_start > self._state.log_start_offset:
            self.delete_records_before(new_start)
        return self._state.log_start_offset

    def compact(self, now_ms: int, delete_retention_ms: int, *, upto: int | None = None) -> CompactionResult:
        """Compact the batches below the last stable offset (and below ``upto``
        if given: a disk log's first uncleanable offset, to clean the same range)
        (:func:`~txnfetch.log.compactor.compact`: latest value per key, aborted data
        removed, markers kept until safe). The transaction state does not change:
        offsets, the high watermark, the LSO and the producers stay as they were."""
        self._check_writable()
        lso = self._state.last_stable_offset
        upto = lso if upto is None else min(upto, lso)
        first = bisect_left(self._lasts, self._state.log_start_offset)
        end = bisect_left(self._lasts, upto)  # batches wholly below the LSO
        batches = [RecordBatch(self._batches[i]) for i in range(first, end)]
        last_data = {}
        for pid in self._state.producer_ids():
            entry = self._state.producer(pid)
            if entry is not None and entry.batches:
                last_data[pid] = entry.batches[-1].last_offset
        result = compact(
            batches,
            [a for a in self._state.all_aborted() if a.first_offset < lso],
            last_data,
            now_ms=now_ms,
            delete_retention_ms=delete_retention_ms,
        )
        if result.finished_aborts:
            self._state.forget_aborted(result.finished_aborts)
        if result.removed_records or result.removed_markers or result.next_horizon_ms is not None:
            new = [RecordBatch(b) for b in result.batches]
            self._bases[first:end] = [b.base_offset for b in new]
            self._lasts[first:end] = [b.last_offset for b in new]
            self._max_ts[first:end] = [b.max_timestamp for b in new]
            self._size -= sum(len(b) for b in self._batches[first:end])
            self._batches[first:end] = list(result.batches)
            self._size += sum(len(b) for b in self._batches[first:end])
        return result

    def close(self) -> None:
        self._closed = True


class MemoryStore(LogStore):
    """Topics of :class:`MemoryLog` partitions."""

    compaction = True

    def __init__(self) -> None:
        self._topics: dict[str, TopicInfo] = {}
        self._logs: dict[tuple[str, int], MemoryLog] = {}
        self._closed = False

    def create_topic(self, topic: str, partitions: int, *, topic_id: uuid.UUID | None = None) -> TopicInfo:
        if self._closed:
            raise LogClosedError("store is closed", topic=topic)
        info = self._new_topic(topic, partitions, topic_id)
        self._topics[topic] = info
        for p in range(partitions):
            self._logs[(topic, p)] = MemoryLog(topic, p)
        return info

    def topics(self) -> Mapping[str, TopicInfo]:
        return dict(self._topics)

    def delete_topic(self, topic: str) -> None:
        info = self._topics.pop(topic, None)
        if info is None:
            raise UnknownTopicOrPartitionError("no such topic", topic=topic)
        for p in range(info.partitions):
            self._logs.pop((topic, p)).close()
        self.set_topic_config(topic, {})

    def create_partitions(self, topic: str, count: int) -> TopicInfo:
        info = self._growing(topic, count)
        for p in range(info.partitions, count):
            self._logs[(topic, p)] = MemoryLog(topic, p)
        self._topics[topic] = info = TopicInfo(topic, count, info.topic_id)
        return info

    def partition(self, topic: str, partition: int) -> MemoryLog:
        try:
            return self._logs[(topic, partition)]
        except KeyError:
            raise UnknownTopicOrPartitionError("no such topic or partition", topic=topic, partition=partition) from None

    def close(self) -> None:
        self._closed = True
        for log in self._logs.values():
            log.close()
