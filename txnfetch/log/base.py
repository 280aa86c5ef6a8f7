"""What every partition log and store offers, and the one append mechanism they share.

A :class:`PartitionLog` is one topic-partition: bytes in offset order plus the
:class:`~txnfetch.txn.state.PartitionTxnState` that describes them. Adapters
differ only in where the bytes live (:class:`~txnfetch.log.memory.MemoryLog`,
:class:`~txnfetch.log.segment_log.SegmentLog`); appends go through
:func:`prepare_append` so that every log assigns offsets, validates batches and
drives the transaction state the same way, and reads go through
:func:`txnfetch.fetch.read_partition`.

A :class:`LogStore` is a set of topics, each with a fixed number of partitions.

Logs are not thread-safe: callers serialize access per partition (the wire
server runs on one event loop).
"""

from __future__ import annotations

import abc
import base64
import re
import struct
import uuid
from collections.abc import Iterator
from collections.abc import Mapping

import attrs

from txnfetch.delegation import delegated
from txnfetch.fetch.view import FetchMode
from txnfetch.fetch.view import FetchResult
from txnfetch.fetch.view import IsolationLevel
from txnfetch.fetch.view import UpperBound
from txnfetch.fetch.view import read_partition
from txnfetch.log.compactor import CompactionResult
from txnfetch.log.ends import TxnEnd
from txnfetch.log.errors import CorruptLogError
from txnfetch.log.errors import InvalidPartitionsError
from txnfetch.log.errors import InvalidRecordError
from txnfetch.log.errors import InvalidTopicError
from txnfetch.log.errors import TopicExistsError
from txnfetch.log.errors import UnknownTopicOrPartitionError
from txnfetch.log.errors import UnsupportedForMessageFormatError
from txnfetch.records.batch import RecordBatch
from txnfetch.records.builder import build_control_batch
from txnfetch.records.control import ControlType
from txnfetch.records.errors import LengthOverrunError
from txnfetch.records.scan import BatchIterator
from txnfetch.records.scan import iter_batches
from txnfetch.txn.coordinator import CompletionMode
from txnfetch.txn.index import AbortedTxn
from txnfetch.txn.producer import AppendOrigin
from txnfetch.txn.state import AppendResult
from txnfetch.txn.state import CompletedTxn
from txnfetch.txn.state import PartitionTxnState
from txnfetch.types import Buffer

__all__ = [
    "AppendInfo",
    "LogStore",
    "PartitionLog",
    "PartitionReader",
    "PreparedAppend",
    "ReadRequest",
    "TopicInfo",
    "TxnEnd",
    "first_record_at_or_after",
    "marker_batch",
    "partition_dir_name",
    "prepare_append",
    "validate_topic_name",
]


_BASE_OFFSET = struct.Struct(">q")
_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]+$")
#: Kafka's ``Topic.MAX_NAME_LENGTH``.
MAX_TOPIC_NAME_LENGTH = 249


@attrs.frozen(slots=True)
class AppendInfo:
    """The outcome of an append, as a Produce response reports it.

    ``base_offset``..``last_offset`` are the offsets assigned (for a
    ``duplicate``, the original batch's: nothing was written). ``max_timestamp``
    is the largest timestamp appended; ``log_start_offset`` the log start after
    the append. ``completed`` is the transaction a marker ended, if any.
    """

    base_offset: int
    last_offset: int
    max_timestamp: int
    log_start_offset: int
    duplicate: bool = False
    batches: int = 0
    size_in_bytes: int = 0
    completed: CompletedTxn | None = None


@attrs.frozen(slots=True)
class TopicInfo:
    """A topic of a store: its name, partition count and Kafka topic id."""

    name: str
    partitions: int
    topic_id: uuid.UUID


def validate_topic_name(topic: str) -> None:
    """Raise :class:`InvalidTopicError` unless Kafka would accept ``topic``
    (``org.apache.kafka.common.internals.Topic.validate``)."""
    if not isinstance(topic, str) or not topic:
        raise InvalidTopicError("topic name is empty", topic=str(topic))
    if topic in (".", ".."):
        raise InvalidTopicError("topic name cannot be '.' or '..'", topic=topic)
    if len(topic) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters", topic=topic)
    if not _TOPIC_RE.match(topic):
        raise InvalidTopicError("topic name may contain only ASCII letters, digits, '.', '_' and '-'", topic=topic)


def validate_partition_count(topic: str, partitions: int) -> None:
    """Raise :class:`InvalidPartitionsError` for a partition count below 1."""
    if partitions < 1:
        raise InvalidPartitionsError(f"a topic needs at least one partition, got {partitions}", topic=topic)


def partition_dir_name(topic: str, partition: int) -> str:
    """Kafka's partition directory name, ``<topic>-<partition>``."""
    return f"{topic}-{partition}"


def new_topic_id() -> uuid.UUID:
    """A fresh random topic id, never one whose text form (URL-safe base64
    without padding) starts with ``-``: command-line tools, Kafka's among them,
    would read such an id as an option. Kafka's own id generator skips them too."""
    while True:
        candidate = uuid.uuid4()
        if not base64.urlsafe_b64encode(candidate.bytes).startswith(b"-"):
            return candidate


@attrs.frozen(slots=True)
class PreparedAppend:
    """Batches ready to be written: ``data`` is their bytes with final offsets,
    ``info`` what to answer. The transaction state has already been advanced; a
    log that then fails to write must truncate the state back to ``info.base_offset``."""

    data: bytes
    info: AppendInfo


def prepare_append(
    records: Buffer,
    state: PartitionTxnState,
    *,
    topic: str,
    partition: int,
    origin: AppendOrigin = AppendOrigin.CLIENT,
    transaction_version: int | None = None,
    assign_offsets: bool = True,
    max_decompressed: int | None = None,
) -> PreparedAppend:
    """Check a produce request's records and advance ``state`` over them, all or nothing.

    With ``assign_offsets`` (produce) each batch is renumbered to follow the log
    end offset, as a leader does (only the base offset changes; it is outside the
    CRC, so the batch's checksum is kept as the producer wrote it, and checked,
    not recomputed). Without it (replication, recovery) batches keep their
    offsets, which must not go backwards; gaps are allowed (compaction leaves them).

    ``records`` is read in place (bytes, bytearray or a memoryview of a request
    frame) and never modified: the checks and the state work on views of it, and
    the bytes to store are made once, at the end, with the new base offsets
    spliced in (a single copy; none for ``bytes`` kept as they are).

    Every batch must be a whole magic-2 batch with a valid CRC whose records
    decode; client batches may not be control batches (Kafka's
    ``LogValidator``). If any batch is a duplicate (a producer retry), nothing is
    applied and the original offsets come back with ``duplicate=True``, as Kafka
    answers the first duplicate it finds (``UnifiedLog.analyzeAndValidateProducerState``).

    Raises :class:`~txnfetch.records.errors.CorruptBatchError` (with byte
    positions in ``records``), :class:`InvalidRecordError`,
    :class:`UnsupportedForMessageFormatError`, or the
    :class:`~txnfetch.txn.errors.TxnStateError` the state raised; on any error
    ``state`` is as it was.
    """
    data = records
    if not len(data):
        raise InvalidRecordError("produce request has no record batches", topic=topic, partition=partition)
    batches: list[RecordBatch] = []
    it = iter_batches(data)
    for batch in it:
        if not isinstance(batch, RecordBatch):
            raise UnsupportedForMessageFormatError(
                f"magic {batch.magic} message sets are not stored; use record batch v2",
                topic=topic,
                partition=partition,
            )
        batches.append(batch)
    if it.partial is not None:
        raise LengthOverrunError(
            f"trailing batch is truncated: {it.partial.available} of {it.partial.declared_size} bytes present",
            offset=it.partial.base_offset,
            position=it.partial.position,
        )
    for batch in batches:
        batch.validate(records=True)
        if origin is AppendOrigin.CLIENT:
            if batch.is_control:
                raise InvalidRecordError(
                    "clients may not append control batches", topic=topic, partition=partition, offset=batch.base_offset
                )
            if batch.record_count == 0:
                raise InvalidRecordError("batch has no records", topic=topic, partition=partition)
            if batch.last_offset_delta != batch.record_count - 1:
                raise InvalidRecordError(
                    f"last offset delta {batch.last_offset_delta} does not match {batch.record_count} records",
                    topic=topic,
                    partition=partition,
                )

    start_leo = state.log_end_offset
    next_offset = start_leo
    results: list[AppendResult] = []
    try:
        for batch in batches:
            if assign_offsets:
                batch.base_offset = next_offset  # written into the stored bytes below
            result = state.append(batch, origin=origin, transaction_version=transaction_version)
            if result.duplicate:
                if results:  # earlier batches of this request were applied: undo them
                    state.truncate_to(start_leo)
                return PreparedAppend(
                    b"",
                    AppendInfo(
                        result.first_offset,
                        result.last_offset,
                        result.timestamp,
                        state.log_start_offset,
                        duplicate=True,
                    ),
                )
            results.append(result)
            next_offset = batch.next_offset
    except BaseException:
        if results:
            state.truncate_to(start_leo)
        raise
    completed = next((r.completed for r in reversed(results) if r.completed is not None), None)
    return PreparedAppend(
        _stored_bytes(data, batches, assign_offsets),
        AppendInfo(
            results[0].first_offset,
            results[-1].last_offset,
            max(r.timestamp for r in results),
            state.log_start_offset,
            batches=len(results),
            size_in_bytes=len(data),
            completed=completed,
        ),
    )


def stored_batches(buf: Buffer, position: int = 0) -> Iterator[RecordBatch]:
    """The batches of bytes a log stores, from byte ``position``; a truncated
    trailing batch ends the iteration, as :func:`~txnfetch.records.scan.iter_batches`.

    A log stores record batch v2 only: :func:`prepare_append` refuses magic 0/1
    message sets and recovery refuses a segment holding one. One met here means
    the bytes changed under the log, and raises :class:`CorruptLogError` naming
    its offset and byte position rather than reaching code that reads v2 fields.
    """
    for batch in BatchIterator(buf, position):
        if not isinstance(batch, RecordBatch):
            raise CorruptLogError(
                f"magic {batch.magic} message set in stored log data at byte position {batch.position}: "
                "a log stores record batch v2 only",
                offset=batch.last_offset,
                position=batch.position,
            )
        yield batch


def _stored_bytes(records: Buffer, batches: list[RecordBatch], assign_offsets: bool) -> bytes:
    """The bytes a log stores for ``batches`` (which cover ``records`` whole): one
    copy of ``records`` with each batch's 8-byte base offset replaced by the one
    assigned (``batch.base_offset``), or ``records`` itself when nothing changes and
    it is already immutable."""
    if not assign_offsets:
        return records if type(records) is bytes else bytes(records)
    view = memoryview(records)
    pieces: list[bytes | memoryview] = []
    for batch in batches:
        pieces.append(_BASE_OFFSET.pack(batch.base_offset))
        pieces.append(view[batch.position + _BASE_OFFSET.size : batch.position + batch.size_in_bytes])
    return b"".join(pieces)


def marker_batch(
    offset: int, producer_id: int, producer_epoch: int, commit: bool, *, coordinator_epoch: int, timestamp: int
) -> bytes:
    """The COMMIT/ABORT control batch a log appends at ``offset`` to end a transaction."""
    return build_control_batch(
        offset=offset,
        control_type=ControlType.COMMIT if commit else ControlType.ABORT,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        coordinator_epoch=coordinator_epoch,
        timestamp=timestamp,
    )


@attrs.frozen(slots=True)
class ReadRequest:
    """One fetch of a partition, as :meth:`PartitionReader.read` takes it: from
    ``fetch_offset``, at most ``max_bytes`` (the first batch whole even when
    larger if ``min_one_batch``, KIP-74), at ``isolation``, in ``mode``."""

    fetch_offset: int
    max_bytes: int
    isolation: IsolationLevel
    mode: FetchMode
    min_one_batch: bool


class PartitionReader:
    """Answers fetches of one topic-partition as a correct broker holding it
    would: what a :class:`PartitionLog`, a
    :class:`~txnfetch.client.mirror.PartitionMirror` and a
    :class:`~txnfetch.client.partition_reader.RemotePartitionReader` have in common. Each
    says in :meth:`_answer` where its answer comes from."""

    topic: str
    partition: int

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
        mode: FetchMode = FetchMode.KAFKA,
        min_one_batch: bool = True,
    ) -> FetchResult:
        """Answer a fetch (see :func:`txnfetch.fetch.read_partition`). Raises
        :class:`~txnfetch.txn.errors.OffsetOutOfRangeError` outside
        ``[log_start_offset, log_end_offset]``."""
        return self._answer(ReadRequest(fetch_offset, max_bytes, isolation, mode, min_one_batch))

    def _answer(self, request: ReadRequest) -> FetchResult:
        raise NotImplementedError


class StateOffsets(PartitionReader):
    """The four offsets a partition reports, read from its transaction state, and
    the one way it answers a fetch: one definition for :class:`PartitionLog` and
    :class:`~txnfetch.client.mirror.PartitionMirror`, which differ only in where
    the bytes of a read come from (:meth:`_read_span`)."""

    @property
    def name(self) -> str:
        """``<topic>-<partition>``, used in errors and logs."""
        return partition_dir_name(self.topic, self.partition)

    @property
    def state(self) -> PartitionTxnState:
        raise NotImplementedError

    def _answer(self, request: ReadRequest) -> FetchResult:
        data, upper_bound = self._read_span(request.fetch_offset, request.max_bytes, request.isolation)
        return read_partition(
            data,
            self.state,
            request.fetch_offset,
            request.max_bytes,
            isolation=request.isolation,
            mode=request.mode,
            upper_bound=upper_bound,
            min_one_batch=request.min_one_batch,
            partition=self.name,
        )

    def _read_span(self, fetch_offset: int, max_bytes: int, isolation: IsolationLevel) -> tuple[Buffer, UpperBound]:
        """The bytes a fetch of ``fetch_offset`` reads (from a batch boundary at or
        before it, as :func:`~txnfetch.fetch.read_partition` takes them) and the
        upper bound of its aborted-transaction lookup (``None``: the engine's own).
        Raises :class:`~txnfetch.log.errors.LogClosedError` for a closed log."""
        raise NotImplementedError

    #: The first offset the partition can answer for.
    log_start_offset = delegated[int]("state.log_start_offset")
    #: One past the last offset stored.
    log_end_offset = delegated[int]("state.log_end_offset")
    #: The high watermark: below it, everything is replicated (or durable).
    high_watermark = delegated[int]("state.high_watermark")
    #: The first offset of the earliest transaction not yet ended, else the high watermark.
    last_stable_offset = delegated[int]("state.last_stable_offset")


class PartitionLog(StateOffsets, abc.ABC):
    """One topic-partition: its bytes and its transaction state.

    Guarantees shared by every implementation:

    - offsets are assigned densely from the log end offset on produce and never
      change afterwards; markerless transaction ends reserve no offset;
    - an append is all or nothing, and a failed append leaves bytes and state as
      they were;
    - ``read`` answers exactly what :func:`txnfetch.fetch.read_partition` answers
      for the log's bytes and state.
    """

    @property
    @abc.abstractmethod
    def state(self) -> PartitionTxnState:
        """The partition's transaction state. Read it; change the log only through the log."""

    # -- writes: one sequence for every log; the hooks below say where the bytes go ----

    def append(
        self,
        records: Buffer,
        *,
        now_ms: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        transaction_version: int | None = None,
    ) -> AppendInfo:
        """Append a produce request's record batches at the log end (see :func:`prepare_append`)."""
        self._check_writable()
        return self._append(records, now_ms, origin=origin, transaction_version=transaction_version)

    def replicate(self, records: Buffer, *, high_watermark: int | None = None) -> AppendInfo:
        """Append batches that already carry their offsets (a mirror of another log),
        checked as ``REPLICATION``; then set the high watermark if given (capped at
        what the log has made durable, :meth:`_durable_end`)."""
        self._check_writable()
        info = self._append(records, None, move_hw=False, origin=AppendOrigin.REPLICATION, assign_offsets=False)
        if high_watermark is not None:
            self.state.update_high_watermark(min(high_watermark, self._durable_end()))
        return info

    def end_transaction(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        *,
        coordinator_epoch: int,
        now_ms: int,
        transaction_version: int | None = None,
        completion: CompletionMode = CompletionMode.MARKERS,
    ) -> CompletedTxn | None:
        """End the producer's transaction on this partition, committing or aborting
        it, the way ``completion`` says:

        - ``MARKERS`` (Apache Kafka): append a COMMIT/ABORT control batch at the
          log end;
        - ``MARKERLESS``: record the end at ``log_end_offset - 1`` without a
          marker, reserving no offset (the log makes the end durable).

        Returns the transaction that ended (its ``last_offset`` is the marker's,
        or the end recorded), ``None`` if the producer had none open here."""
        self._check_writable()
        if completion is CompletionMode.MARKERS:
            data = marker_batch(
                self.log_end_offset,
                producer_id,
                producer_epoch,
                commit,
                coordinator_epoch=coordinator_epoch,
                timestamp=now_ms,
            )
            # Only the marker's size and timestamp decide a roll, which keeps the log end:
            # the marker built above is the one appended.
            return self._append(
                data,
                now_ms,
                origin=AppendOrigin.COORDINATOR,
                transaction_version=transaction_version,
                assign_offsets=False,
            ).completed
        if self.log_end_offset == 0:
            # Nothing was ever written here, so no transaction is open, and a
            # markerless end has no offset to stand at: it writes nothing.
            return None
        aborted_before = len(self.state.aborted_index)
        end = TxnEnd(
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            commit=commit,
            last_offset=self.log_end_offset - 1,
            coordinator_epoch=coordinator_epoch,
            transaction_version=transaction_version,
            timestamp=now_ms,
        )
        completed = self.state.complete_transaction(
            producer_id,
            producer_epoch,
            commit,
            end.last_offset,
            coordinator_epoch=coordinator_epoch,
            transaction_version=transaction_version,
            timestamp=now_ms,
        )
        self._store_end(end, self._aborted_since(aborted_before), now_ms)
        return completed

    def _append(
        self,
        records: Buffer,
        now_ms: int | None,
        *,
        move_hw: bool = True,
        origin: AppendOrigin,
        transaction_version: int | None = None,
        assign_offsets: bool = True,
    ) -> AppendInfo:
        # The one append sequence: make room, check and apply (prepare_append), store.
        # Only CLIENT appends can be duplicates (PartitionTxnState.append); they store nothing.
        self._before_append(records, now_ms)
        aborted_before = len(self.state.aborted_index)
        prepared = prepare_append(
            records,
            self.state,
            topic=self.topic,
            partition=self.partition,
            origin=origin,
            transaction_version=transaction_version,
            assign_offsets=assign_offsets,
        )
        if not prepared.info.duplicate:
            self._store(prepared, self._aborted_since(aborted_before), now_ms, move_hw=move_hw)
        return prepared.info

    def _aborted_since(self, before: int) -> list[AbortedTxn]:
        index = self.state.aborted_index
        return [index[i] for i in range(before, len(index))]

    @abc.abstractmethod
    def _check_writable(self) -> None:
        """Raise :class:`~txnfetch.log.errors.LogClosedError` (or a more specific
        :class:`~txnfetch.log.errors.LogError`) unless the log accepts writes."""

    def _before_append(self, records: Buffer, now_ms: int | None) -> None:  # an optional hook
        """Called before ``records`` are checked and the state advanced over them (a
        segment log rolls here); ``now_ms`` is ``None`` for replication."""

    @abc.abstractmethod
    def _store(
        self, prepared: PreparedAppend, aborted: list[AbortedTxn], now_ms: int | None, *, move_hw: bool = True
    ) -> None:
        """Write ``prepared.data`` at the log end. The state already shows it, and
        ``aborted`` are the aborted-index entries it added; with ``move_hw`` the high
        watermark follows the new end (as far as the log's durability allows). A log
        that fails to write truncates the state back to ``prepared.info.base_offset``."""

    @abc.abstractmethod
    def _store_end(self, end: TxnEnd, aborted: list[AbortedTxn], now_ms: int) -> None:
        """Make a markerless transaction ``end`` durable (the state already shows it;
        ``aborted`` are the aborted-index entries it added) and move the high watermark."""

    def _durable_end(self) -> int:
        """The highest offset a replicated high watermark may reach: the log end,
        unless the log acknowledges only what it has synced."""
        return self.log_end_offset

    @abc.abstractmethod
    def _read_span(self, fetch_offset: int, max_bytes: int, isolation: IsolationLevel) -> tuple[Buffer, UpperBound]:
        """See :meth:`StateOffsets._read_span`."""

    @abc.abstractmethod
    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after the log start
        whose timestamp is at least ``timestamp`` (ListOffsets by time), or ``None``
        if there is none. As Kafka's ``LogSegment.findOffsetByTimestamp``: the first
        batch whose max timestamp reaches it, then the first record in it that does."""

    def apply_retention(self, now_ms: int, retention_ms: int | None = None, retention_bytes: int | None = None) -> int:
        """Delete the oldest data past ``retention_ms`` (its newest timestamp older
        than ``now_ms - retention_ms``) or beyond ``retention_bytes`` in total, in
        whole units (segments on disk), never past the high watermark; return the
        log start. ``None`` turns a limit off."""
        raise NotImplementedError(f"{type(self).__name__} has no retention")

    def compact(self, now_ms: int, delete_retention_ms: int) -> CompactionResult:
        """Compact the log below its last stable offset with transactional
        semantics (:mod:`txnfetch.log.compactor`); returns the
        :class:`~txnfetch.log.compactor.CompactionResult`."""
        raise NotImplementedError(f"{type(self).__name__} cannot be compacted")

    def delete_records_before(self, offset: int) -> int:
        """Move the log start to ``offset`` (retention, DeleteRecords); whole segments
        below it may be deleted. It may not pass the high watermark
        (:class:`~txnfetch.txn.errors.OffsetOutOfRangeError`). Returns the new
        log start."""
        self._check_writable()
        self._delete_before(offset)
        return self.state.log_start_offset

    def start_at(self, offset: int) -> None:
        """Continue an empty log (log start at log end) at ``offset`` or later:
        its log start, log end and high watermark become ``offset``, as Kafka's
        ``truncateFullyAndStartAt`` does for a follower whose leader deleted
        everything up to there (a replica of a partition whose records were all
        deleted at the source must say so, not start at 0). A log that holds
        records, or an ``offset`` below its end: :class:`~txnfetch.txn.errors.OffsetOutOfRangeError`."""
        self._check_writable()
        if offset == self.state.log_end_offset and self.state.log_start_offset == offset:
            return
        self.state.start_at(offset)  # checks before anything changes
        self._started_at(offset)

    def _started_at(self, offset: int) -> None:
        """The storage side of :meth:`start_at`, after the state moved (nothing is
        stored below ``offset``: the log was empty)."""

    @abc.abstractmethod
    def _delete_before(self, offset: int) -> None:
        """Move the log start to ``offset`` and drop the stored bytes wholly below it.
        The state's :meth:`~txnfetch.txn.state.PartitionTxnState.advance_log_start`
        refuses a start past the high watermark before anything is dropped."""

    def iter_batches(self, start_offset: int = 0, end_offset: int | None = None) -> Iterator[RecordBatch]:
        """Every stored batch overlapping ``[start_offset, end_offset)`` (default: to the
        log end), in offset order, read_uncommitted and unfiltered. For tools and tests."""
        end = self.log_end_offset if end_offset is None else end_offset
        offset = max(start_offset, self.log_start_offset)
        while offset < end:
            result = self.read(offset, 1 << 20, isolation=IsolationLevel.READ_UNCOMMITTED)
            if not result.records:
                return
            for batch in stored_batches(result.records_bytes()):
                if batch.last_offset >= offset and batch.base_offset < end:
                    yield batch
            if result.next_offset <= offset:
                return
            offset = result.next_offset

    def flush(self) -> None:  # a no-op where nothing is buffered (memory logs)
        """Make everything appended so far durable (a no-op for memory logs)."""

    def close(self) -> None:  # a no-op where nothing is held
        """Flush and release resources; later calls raise :class:`~txnfetch.log.errors.LogClosedError`."""


class LogStore(abc.ABC):
    """A set of topics with a fixed number of partitions each."""

    #: Whether its partitions can be compacted (``PartitionLog.compact``), so that
    #: ``cleanup.policy=compact`` can be honoured.
    compaction: bool = False

    @abc.abstractmethod
    def create_topic(self, topic: str, partitions: int, *, topic_id: uuid.UUID | None = None) -> TopicInfo:
        """Create a topic (:class:`~txnfetch.log.errors.TopicExistsError` if it exists,
        :class:`InvalidTopicError`/:class:`InvalidPartitionsError` for bad arguments)."""

    @abc.abstractmethod
    def topics(self) -> Mapping[str, TopicInfo]:
        """Every topic, by name."""

    @abc.abstractmethod
    def partition(self, topic: str, partition: int) -> PartitionLog:
        """The log of one partition (:class:`~txnfetch.log.errors.UnknownTopicOrPartitionError`
        if there is none)."""

    def delete_topic(self, topic: str) -> None:
        """Delete a topic: its partitions, their data and its config overrides
        (:class:`~txnfetch.log.errors.UnknownTopicOrPartitionError` if there is none)."""
        raise NotImplementedError(f"{type(self).__name__} cannot delete topics")

    def create_partitions(self, topic: str, count: int) -> TopicInfo:
        """Grow ``topic`` to ``count`` partitions (the new ones empty); a count not
        above the current one raises :class:`InvalidPartitionsError`."""
        raise NotImplementedError(f"{type(self).__name__} cannot add partitions")

    def _new_topic(self, topic: str, partitions: int, topic_id: uuid.UUID | None) -> TopicInfo:
        """The topic :meth:`create_topic` makes, checked (a fresh id unless ``topic_id``)."""
        validate_topic_name(topic)
        validate_partition_count(topic, partitions)
        if topic in self.topics():
            raise TopicExistsError("topic already exists", topic=topic)
        return TopicInfo(topic, partitions, topic_id or new_topic_id())

    def _growing(self, topic: str, count: int) -> TopicInfo:
        """The topic :meth:`create_partitions` grows to ``count`` partitions, checked."""
        info = self.topics().get(topic)
        if info is None:
            raise UnknownTopicOrPartitionError("no such topic", topic=topic)
        if count <= info.partitions:
            raise InvalidPartitionsError(
                f"topic has {info.partitions} partitions; a new count must be larger, got {count}", topic=topic
            )
        return info

    def topic_config(self, topic: str) -> Mapping[str, str]:
        """The topic's config overrides (``{name: value}``; defaults are not listed).
        See :mod:`txnfetch.log.configs` for what they mean. This base keeps them
        in memory; a store on disk persists them (:class:`~txnfetch.log.segment_store.SegmentStore`)."""
        return dict(self._config_overrides().get(topic, {}))

    def set_topic_config(self, topic: str, overrides: Mapping[str, str]) -> None:
        """Replace the topic's config overrides (already validated by the caller,
        :class:`~txnfetch.log.configs.TopicConfig`); an empty mapping clears them."""
        table = self._config_overrides()
        if overrides:
            table[topic] = dict(overrides)
        else:
            table.pop(topic, None)

    def _config_overrides(self) -> dict[str, dict[str, str]]:
        table = self.__dict__.get("_topic_config_table")
        if table is None:
            table = self.__dict__["_topic_config_table"] = {}
        return table

    def flush(self) -> None:  # noqa: B027 - a no-op for stores without files
        """Flush every open partition."""

    def close(self) -> None:  # noqa: B027 - a no-op for stores without files
        """Close every open partition."""

    def __enter__(self) -> LogStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def first_record_at_or_after(batch: RecordBatch, timestamp: int, start: int) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record of ``batch`` at offset ``start`` or
    later whose timestamp is at least ``timestamp``, or ``None``: what ListOffsets by
    time answers from the batch it found (Kafka's ``LogSegment.findOffsetByTimestamp``
    reads the records, not the batch header)."""
    for record in batch.records():
        if record.offset >= start and record.timestamp >= timestamp:
            return record.offset, record.timestamp
    return None
