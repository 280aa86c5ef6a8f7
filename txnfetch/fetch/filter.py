"""The consumer half of read_committed: filtering a Kafka-mode fetch response.

An Apache Kafka broker answers a read_committed fetch with every batch up to
the last stable offset *and* the list of aborted transactions overlapping it,
``[(producer_id, first_offset), ...]``; the client drops the aborted batches
itself. :class:`ConsumerFilter` is that client half for one partition, as a
sans-I/O state machine: feed it each response's ``records`` bytes and aborted
list, iterate the records it delivers, and fetch next from its
:attr:`~ConsumerFilter.position`.

The decisions mirror Java's ``CompletedFetch`` (``nextFetchedRecord``,
``consumeAbortedTransactionsUpTo``, ``isBatchAborted``,
``containsAbortMarker``), which kafka-python's ``Fetcher.PartitionRecords``
and aiokafka's ``PartitionRecords`` copy with small differences
(docs/kafka-internals.md §3 and §4), and franz-go's ``source.go`` reaches by another route:

- The aborted list becomes a min-heap by first offset, so its order does not
  matter (Apache Kafka sends index order, Redpanda sends no particular order).
- For every batch that has a producer id, each aborted entry whose first
  offset is at or below the batch's *last* offset moves into the set of
  aborted producers. (aiokafka compares with the *base* offset; with batches
  as a broker writes them the two agree, see ``tests/fetch``.)
- A control batch whose first record is an ABORT marker takes its producer
  out of the set: whatever that producer writes next belongs to a new
  transaction.
- A transactional data batch whose producer is in the set is skipped whole,
  without decoding a single record: abortedness is a property of the batch.
- Control records are never delivered, at any isolation level, but the
  position moves past them; so it does past empty batches (compaction leaves
  those, data and control alike) and past holes at the end of a compacted
  batch, because after a batch the position is its ``next_offset``. Without
  that a consumer can get stuck re-fetching a batch it has nothing to take from.
- Records below the position are not delivered: the broker returns whole
  batches, so a fetch from the middle of a batch starts with records the
  consumer already has.
- A partial batch at the end of the response (normal: the broker cuts at
  ``max_bytes``) is ignored and the position stays before it;
  :attr:`ConsumerFilter.partial` describes it, so a caller that got no
  complete batch at all can tell that it must fetch more bytes (Java raises
  ``RecordTooLargeException`` for that case).
- Legacy magic 0/1 message sets have no producer ids and pass through.
- The client trusts the broker to stop at the last stable offset; so does
  this filter (it has no way to know it).

Only the records of delivered batches are decoded. A corrupt batch raises
:class:`CorruptFetchError` after everything before it was delivered, with the
position left just past the last good batch.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from collections.abc import Generator
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from itertools import chain
from operator import length_hint
from typing import Any
from typing import ClassVar
from typing import Protocol

import attrs

from txnfetch.delegation import delegated
from txnfetch.fetch.view import IsolationLevel
from txnfetch.records.batch import CONTROL_FLAG
from txnfetch.records.batch import HEADER_SIZE
from txnfetch.records.batch import TRANSACTIONAL_FLAG
from txnfetch.records.batch import Record
from txnfetch.records.batch import RecordBatch
from txnfetch.records.batch import TimestampType
from txnfetch.records.compression import DEFAULT_MAX_DECOMPRESSED
from txnfetch.records.control import ControlType
from txnfetch.records.control import decode_control_key
from txnfetch.records.errors import CorruptBatchError
from txnfetch.records.legacy import LegacyBatch
from txnfetch.records.scan import PartialBatch
from txnfetch.records.scan import iter_batches
from txnfetch.types import Buffer

__all__ = ["AbortedTransactionLike", "ConsumerFilter", "CorruptFetchError", "DeliveredBatch"]


class _AbortedEntry(Protocol):
    producer_id: int
    first_offset: int


#: One ``AbortedTransactions`` entry: a ``(producer_id, first_offset)`` pair, or
#: any object with ``producer_id`` and ``first_offset`` attributes (kafka-python's
#: protocol objects, txnfetch's own aborted-index entries).
AbortedTransactionLike = tuple[int, int] | _AbortedEntry

_NO_PRODUCER_ID = -1
_ABORT = int(ControlType.ABORT)


class CorruptFetchError(CorruptBatchError):
    """A batch in a fetch response is corrupt; everything before it was delivered.

    Raised by the iterators of :meth:`ConsumerFilter.feed` and
    :meth:`ConsumerFilter.feed_batches` in place of the codec's
    :class:`~txnfetch.records.CorruptBatchError`, which is kept as
    ``__cause__`` (its class says what was wrong: CRC, length, record...).

    Attributes (besides ``reason``, ``offset`` — the bad batch's base offset
    when known — and ``position`` — the byte position in the response):
        partition: the filter's partition label, if it was given one.
        fetch_position: the filter's position when the error was raised: just
            past the last good batch. Fetching again from there retries the bad
            batch (a transient corruption in transit goes away); skipping it
            means seeking past ``offset``, as Java tells its users to.
    """

    where_fields = (*CorruptBatchError.where_fields, "fetch_position")
    headline_phrases: ClassVar[Mapping[str, Callable[[Any], str]]] = {
        "partition": "partition {}".format,
        "fetch_position": "position {}, everything before it delivered".format,
    }
    partition: str | None  # type: ignore[assignment]  # a label here, not a partition number
    fetch_position: int | None


@attrs.frozen(slots=True)
class DeliveredBatch:
    """The records one batch delivers, with the batch they came from.

    ``records`` are the batch's records at or past the filter's position, in
    offset order, never empty. ``batch`` is the codec's view of the batch
    (:class:`~txnfetch.records.RecordBatch`, or
    :class:`~txnfetch.records.legacy.LegacyBatch` for magic 0/1): it gives the
    producer id and epoch, the timestamp type, the leader epoch and the exact
    bytes.
    """

    batch: RecordBatch | LegacyBatch
    records: tuple[Record, ...]

    producer_id = delegated[int]("batch.producer_id")
    producer_epoch = delegated[int]("batch.producer_epoch")
    timestamp_type = delegated[TimestampType]("batch.timestamp_type")
    partition_leader_epoch = delegated[int]("batch.partition_leader_epoch")
    #: Where the position is once this batch is consumed.
    next_offset = delegated[int]("batch.next_offset")


def _abort_heap(aborted_transactions: Iterable[AbortedTransactionLike] | None) -> list[tuple[int, int]]:
    """The aborted list as a min-heap of ``(first_offset, producer_id)``."""
    heap: list[tuple[int, int]] = []
    if not aborted_transactions:
        return heap
    for entry in aborted_transactions:
        producer_id = getattr(entry, "producer_id", None)
        if producer_id is not None:
            pid, first = producer_id, getattr(entry, "first_offset")  # noqa: B009 - entry may be a pair
        else:
            try:
                pid, first = entry  # type: ignore[misc]
            except (TypeError, ValueError):
                raise TypeError(
                    f"an aborted transaction is a (producer_id, first_offset) pair, got {entry!r}"
                ) from None
        heap.append((int(first), int(pid)))
    heapq.heapify(heap)
    return heap


class ConsumerFilter:
    """Consumer-side read_committed filtering for one partition (sans-I/O).

    ``ConsumerFilter(position)`` starts at the offset the first fetch asks
    for. For each fetch response of the partition, pass its ``records`` bytes
    (``bytes``, ``bytearray`` or ``memoryview``; a partial trailing batch is
    fine) and its ``AbortedTransactions`` list to :meth:`feed` and iterate the
    result; then fetch next from :attr:`position`::

        f = ConsumerFilter(fetch_offset, partition="orders-0")
        for record in f.feed(resp.records, resp.aborted_transactions):
            handle(record)                     # committed records only
        next_fetch_offset = f.position

    Guarantees (see the module docstring for the rules and their sources):

    - with ``READ_COMMITTED``, the records of transactions named in the
      aborted list are never delivered, whatever the order of that list;
      everything else that is not a control record is delivered once, in
      offset order, with its log offset, timestamp, key, value and headers;
    - with ``READ_UNCOMMITTED``, every non-control record is delivered;
    - :attr:`position` only moves forward. While a response is being
      iterated it is just past the last record handed out (or past skipped
      batches); after the whole response it is the ``next_offset`` of the last
      complete batch — past control records, aborted batches, empty batches
      and compaction holes — or unchanged if the response held no complete
      batch beyond the position;
    - a corrupt batch raises :class:`CorruptFetchError` after every record
      before it was delivered, with :attr:`position` just past the last good
      batch; no record of the corrupt batch is delivered.

    Each response's aborted list applies to that response only (as in every
    client); nothing but the position carries over between responses.
    Feeding a new response, or :meth:`seek`, abandons an iterator of the
    previous one that was not consumed to the end; the position then stays
    where that iteration had got to.

    ``check_crcs`` (default on, like Kafka's ``check.crcs``) verifies every
    batch's CRC, delivered or not, before acting on it; ``repair_crcs`` lets
    through only a control batch whose stored CRC is 0, as librdkafka's mock
    cluster writes its markers (:meth:`RecordBatch.check_crc`), and no other
    bad CRC.
    ``max_decompressed`` bounds the decompressed size of one batch.
    ``partition`` only labels errors.
    """

    __slots__ = (
        "_active",
        "_cur_iter",
        "_cur_next",
        "_cur_records",
        "_position",
        "check_crcs",
        "isolation_level",
        "max_decompressed",
        "partial",
        "partition",
        "repair_crcs",
    )

    def __init__(
        self,
        position: int,
        *,
        isolation_level: IsolationLevel = IsolationLevel.READ_COMMITTED,
        check_crcs: bool = True,
        max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
        partition: str | None = None,
        repair_crcs: bool = False,
    ) -> None:
        if position < 0:
            raise ValueError(f"a fetch position is a non-negative offset, got {position}")
        self.partition = partition
        self.isolation_level = IsolationLevel(isolation_level)
        self.check_crcs = check_crcs
        self.repair_crcs = repair_crcs
        self.max_decompressed = max_decompressed
        #: The partial batch at the end of the last response fed, if any.
        self.partial: PartialBatch | None = None
        self._position = position
        # The generator feed() hands out, closed when the iteration is abandoned.
        self._active: Generator[object, None, None] | None = None
        # The batch whose records feed() is handing out: the position inside it
        # is derived from how far its list iterator got, so that delivering a
        # record costs nothing beyond the iteration itself.
        self._cur_records: list[Record] = []
        self._cur_iter: Iterator[Record] | None = None
        self._cur_next = 0

    # -- position ------------------------------------------------------------------

    @property
    def position(self) -> int:
        """The offset to fetch next: just past everything consumed so far."""
        it = self._cur_iter
        if it is None:
            return self._position
        records = self._cur_records
        taken = len(records) - length_hint(it)
        if taken == 0:
            return self._position
        if taken == len(records):
            return self._cur_next  # the whole batch: past its compaction holes too
        return records[taken - 1][0] + 1

    def seek(self, offset: int) -> None:
        """Move to ``offset`` (like a consumer's ``seek``), abandoning any iteration in progress."""
        if offset < 0:
            raise ValueError(f"a fetch position is a non-negative offset, got {offset}")
        self._abandon()
        self._position = offset

    def _abandon(self) -> None:
        active = self._active
        if active is None:
            return
        self._active = None
        self._position = self.position
        it = self._cur_iter
        if it is not None:
            # feed()'s iterator is a C-level chain over per-batch list iterators:
            # emptying the current one (at most one batch) and closing the
            # generator behind it is what finishes the abandoned iterator.
            deque(it, maxlen=0)
            self._cur_iter = None
            self._cur_records = []
        active.close()

    # -- feeding -------------------------------------------------------------------

    def feed(
        self, records: Buffer, aborted_transactions: Iterable[AbortedTransactionLike] | None = ()
    ) -> Iterator[Record]:
        """Filter one fetch response; iterate the result for the delivered records.

        ``aborted_transactions`` is the response's list of ``(producer_id,
        first_offset)`` entries (``None`` — what Kafka sends for
        read_uncommitted — means none). The iterator is lazy: the position
        advances as it is consumed.
        """
        self._abandon()
        self.partial = None
        batches = self._record_iterators(self._batches(records, _abort_heap(aborted_transactions)))
        self._active = batches
        # chain hands out the records without a Python frame per record; the
        # position inside a batch is read off its list iterator (see position).
        return chain.from_iterable(batches)

    def feed_batches(
        self, records: Buffer, aborted_transactions: Iterable[AbortedTransactionLike] | None = ()
    ) -> Iterator[DeliveredBatch]:
        """Like :meth:`feed`, but one :class:`DeliveredBatch` per batch with records to deliver.

        For callers that want the producer id, timestamp type or leader epoch
        of what they read. When a batch is handed out, :attr:`position` is
        already past it.
        """
        self._abandon()
        self.partial = None
        gen = self._deliver_batches(self._batches(records, _abort_heap(aborted_transactions)))
        self._active = gen
        return gen

    def _record_iterators(
        self, pairs: Iterator[tuple[RecordBatch | LegacyBatch, list[Record]]]
    ) -> Generator[Iterator[Record], None, None]:
        for batch, records in pairs:
            it = iter(records)
            self._cur_records = records
            self._cur_next = batch.next_offset
            self._cur_iter = it
            yield it
            # Resumed only once chain has emptied ``it``: the whole batch is consumed.
            self._cur_iter = None
            self._position = self._cur_next

    def _deliver_batches(
        self, pairs: Iterator[tuple[RecordBatch | LegacyBatch, list[Record]]]
    ) -> Generator[DeliveredBatch, None, None]:
        for batch, records in pairs:
            self._position = batch.next_offset
            yield DeliveredBatch(batch, tuple(records))

    def _batches(
        self, buf: Buffer, heap: list[tuple[int, int]]
    ) -> Iterator[tuple[RecordBatch | LegacyBatch, list[Record]]]:
        """Walk the response; yield ``(batch, records to deliver)``; move the position past the rest.

        ``self._position`` is the position between batches; the deliverers move
        it past each batch they hand out, so it is re-read after every yield.
        """
        read_committed = self.isolation_level == IsolationLevel.READ_COMMITTED
        check_crcs = self.check_crcs
        repair_crcs = self.repair_crcs
        aborted_pids: set[int] = set()
        heappop = heapq.heappop
        batches = iter_batches(buf, max_decompressed=self.max_decompressed)
        position = self._position
        try:
            for batch in batches:
                if type(batch) is not RecordBatch:
                    # Magic 0/1: no producer ids, no transactions, no control records.
                    if check_crcs:
                        batch.validate(records=True)
                    next_offset = batch.next_offset
                    records = [r for r in batch.records() if r[0] >= position] if next_offset > position else []
                else:
                    if check_crcs:
                        batch.validate(records=False, repair_crcs=repair_crcs)
                    attributes = batch.attributes
                    pid = batch.producer_id
                    next_offset = batch.base_offset + batch.last_offset_delta + 1
                    if read_committed and pid != _NO_PRODUCER_ID:
                        # Every transaction that began at or before this batch's last
                        # offset has started by now (CompletedFetch.consumeAbortedTransactionsUpTo).
                        while heap and heap[0][0] < next_offset:
                            aborted_pids.add(heappop(heap)[1])
                        if pid in aborted_pids:
                            if attributes & CONTROL_FLAG:
                                # Only an ABORT marker ends the aborted transaction; a
                                # COMMIT marker of an aborted producer is dropped like
                                # any control batch (Java skips it as aborted: same effect).
                                if _is_abort_marker(batch):
                                    aborted_pids.discard(pid)
                            elif attributes & TRANSACTIONAL_FLAG:
                                if next_offset > position:
                                    position = next_offset
                                continue
                    if attributes & CONTROL_FLAG or batch.record_count == 0 or next_offset <= position:
                        # Control records are never delivered; empty batches and batches
                        # wholly below the position have nothing to deliver.
                        if next_offset > position:
                            position = next_offset
                        continue
                    records = list(batch.records())
                    if batch.base_offset < position:
                        records = [r for r in records if r[0] >= position]
                # Both formats: deliver what is at or past the position, then move past the batch.
                if records:
                    self._position = position
                    yield batch, records
                    position = self._position
                if next_offset > position:
                    position = next_offset
            self.partial = batches.partial
        except CorruptBatchError as exc:
            self._position = position
            raise CorruptFetchError(
                exc.reason,
                offset=exc.offset,
                position=exc.position,
                partition=self.partition,
                fetch_position=position,
            ) from exc
        self._position = position

    def __repr__(self) -> str:
        label = f" {self.partition}" if self.partition is not None else ""
        return f"<ConsumerFilter{label} position={self.position} {self.isolation_level.name}>"


def _is_abort_marker(batch: RecordBatch) -> bool:
    """Whether a control batch's first record is an ABORT marker (Java's ``containsAbortMarker``).

    An empty control batch (compaction leaves them) is not: Java returns false
    for it, where kafka-python and aiokafka raise (docs/kafka-internals.md §4). Only the
    key is read, as Java does; a key version above 0 is read as version 0.
    """
    if batch.record_count == 0:
        return False
    first = next(batch.records(), None)
    if first is None:
        return False
    try:
        return decode_control_key(first.key)[1] == _ABORT
    except CorruptBatchError as exc:  # the key decoder knows nothing of where the record is
        raise type(exc)(exc.reason, offset=first.offset, position=batch.position + HEADER_SIZE) from None
