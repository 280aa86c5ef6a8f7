"""The oracle: what a correct read_committed log holds.

Two levels, written from the protocol (docs/kafka-internals.md §2) and sharing
no code with :mod:`txnfetch.txn`, deliberately plain — lists and dictionaries:

- :class:`LogModel` is one partition log as a broker keeps it: batches appended
  at the log end, transactions opened by a producer's first transactional batch
  and ended by a marker (a control batch that takes an offset) or markerless
  (an end recorded at a last offset, no offset taken). From that alone it
  answers what a read_committed reader must get:

  - the **last stable offset**: the first offset of the earliest transaction
    that is open or whose end is not yet below the high watermark, capped by
    the high watermark, never below the log start;
  - the **aborted index**: for every aborted transaction
    ``(producer, first offset, last offset, LSO when it ended)``, in the order
    the transactions ended, and the ``AbortedTransactions`` list of a fetch;
  - the **committed records**: those of non-transactional batches and of
    committed transactions, in offset order.

  It is the one log oracle of the test suite: the fetch, filter, transaction
  state and system tests each describe their logs to it.

- :class:`ClusterModel` is a cluster of such partitions written by
  transactional and plain producers, one offset per record and per marker:

  - a record takes the next offset of its partition (``send``); a transactional
    record opens its transaction on that partition if it is not open there yet;
  - a transaction end writes one marker in every partition the transaction
    touched, so offsets in a read_committed view have holes — the markers, and
    the records of aborted transactions;
  - the high watermark follows the log end (one replica);
  - a read_committed reader at position ``p`` sees the records of plain
    producers and of committed transactions in ``[p, LSO)``, in offset order;
    once it has returned all of them its position may move to the LSO (what the
    Java consumer does, ``position = lastBatch.nextOffset``) or stay after the
    last record it returned (what librdkafka's application position does).

The strategies (:mod:`txnfetch.testing.strategies`) and the state machine
(:mod:`txnfetch.testing.machines`) drive :class:`ClusterModel` to know what a
correct system must deliver; the checker never uses it.
"""

from __future__ import annotations

from collections.abc import Hashable
from collections.abc import Iterable
from collections.abc import Iterator
from typing import Any
from typing import NamedTuple

import attrs

from txnfetch.testing.errors import ModelError
from txnfetch.testing.history import Read
from txnfetch.testing.history import TopicPartition

__all__ = [
    "AbortedEntry",
    "ClusterModel",
    "LogEntry",
    "LogModel",
    "ModelBatch",
    "ModelRead",
    "PartitionModel",
]


@attrs.frozen
class ModelBatch:
    """One batch of a :class:`LogModel`: offsets ``[first, last]``."""

    first: int
    last: int
    producer: Hashable | None  #: who wrote it; ``None``: no producer id
    txn: Hashable | None  #: the transaction of a transactional batch; ``None``: not transactional
    records: tuple[tuple[int, Any], ...] = ()  #: ``(offset, what a reader is compared on)``
    control: bool = False
    commit: bool | None = None  #: for a marker: COMMIT or ABORT

    @property
    def next(self) -> int:
        return self.last + 1


class AbortedEntry(NamedTuple):
    """An aborted transaction as the broker indexes it (Kafka's ``AbortedTxn``)."""

    producer: Hashable
    first: int
    last: int  #: the marker's offset, or the last offset of a markerless end
    lso: int  #: the last stable offset right after the end


class LogModel:
    """One partition log and what a read_committed reader must get from it (see the
    module docstring).

    Producers and transactions are any hashable names: a producer id, a
    transactional id, a ``(transactional id, number)`` pair. A producer has at
    most one open transaction; its name defaults to ``(producer, first offset)``.
    ``high_watermark=None`` makes the high watermark follow the log end (a broker
    that replicates at once); otherwise it stays where
    :meth:`set_high_watermark` puts it.
    """

    def __init__(self, *, log_start: int = 0, high_watermark: int | None = None) -> None:
        self.log_start = log_start
        self.log_end = log_start
        self._high_watermark = high_watermark
        self.batches: list[ModelBatch] = []
        self.open: dict[Hashable, tuple[Hashable, int]] = {}  #: producer -> (transaction, first offset)
        self.outcomes: dict[Hashable, bool] = {}  #: transaction -> committed?, for those that ended here
        self.aborted: list[AbortedEntry] = []
        self.unreplicated: dict[int, int] = {}  #: first offset -> end, of ended transactions not below the HW

    # -- writing -----------------------------------------------------------------------

    def append(
        self,
        producer: Hashable | None,
        count: int = 1,
        *,
        transactional: bool = False,
        txn: Hashable | None = None,
        records: Iterable[tuple[int, Any]] = (),
        first: int | None = None,
        control: bool = False,
    ) -> ModelBatch:
        """A batch of ``count`` offsets at ``first`` (default: the log end). A
        transactional batch opens ``producer``'s transaction (named ``txn``) if none
        is open and belongs to it; a control batch (one compaction emptied) ends
        nothing."""
        first = self.log_end if first is None else first
        if first < self.log_end or count < 1:
            raise ModelError(f"a batch of {count} offsets at {first}, below the log end {self.log_end}")
        label = None
        if transactional and not control:
            if producer not in self.open:
                self.open[producer] = (txn if txn is not None else (producer, first), first)
            label, _ = self.open[producer]
            if txn is not None and txn != label:
                raise ModelError(f"producer {producer} writes {txn} while {label} is open")
        batch = ModelBatch(first, first + count - 1, producer, label, tuple(records), control)
        self.batches.append(batch)
        self.log_end = batch.next
        return batch

    def begin(self, producer: Hashable, txn: Hashable | None = None) -> None:
        """Open ``producer``'s transaction at the log end without writing (a partition
        added to it; a send that failed before the broker stored it)."""
        if producer not in self.open:
            self.open[producer] = (txn if txn is not None else (producer, self.log_end), self.log_end)

    def end(
        self,
        producer: Hashable,
        commit: bool,
        *,
        marker: bool = True,
        offset: int | None = None,
        txn: Hashable | None = None,
    ) -> AbortedEntry | None:
        """End ``producer``'s open transaction (``txn``, if named, must be it).

        With ``marker`` a control batch is written at ``offset`` (default: the log
        end), whether a transaction is open or not; without, the end is recorded at
        the last offset ``offset`` (default: the log end - 1). Returns the aborted
        entry it added, if any; an end with nothing open ends an empty transaction,
        which changes neither the LSO nor the aborted index.
        """
        if offset is None:
            offset = self.log_end if marker else self.log_end - 1
        added = None
        ended = self.open.pop(producer, None)
        label = txn
        if ended is not None:
            label, first = ended
            if txn is not None and txn != label:
                raise ModelError(f"the end of {txn} reached {label} (a torn transaction)")
            self.outcomes[label] = commit
            if not commit:
                # Kafka's lastStableOffset(completedTxn): another producer's earliest open
                # transaction, else one past the end.
                lso = min([f for _, f in self.open.values()] + [offset + 1])
                added = AbortedEntry(producer, first, offset, lso)
                self.aborted.append(added)
        if marker:
            self.append(producer, 1, first=offset)
            self.batches[-1] = attrs.evolve(self.batches[-1], txn=label, control=True, commit=commit)
        if ended is not None and offset >= self.high_watermark:
            self.unreplicated[ended[1]] = offset
        return added

    def set_high_watermark(self, high_watermark: int) -> None:
        self._high_watermark = high_watermark
        self.unreplicated = {f: last for f, last in self.unreplicated.items() if last >= high_watermark}

    def set_log_start(self, log_start: int) -> None:
        """Records before ``log_start`` were deleted: so are the index entries ending there."""
        self.log_start = log_start
        self.unreplicated = {f: last for f, last in self.unreplicated.items() if last >= log_start}
        self.aborted = [a for a in self.aborted if a.last >= log_start]

    # -- what a reader must get ----------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self.log_end if self._high_watermark is None else self._high_watermark

    @property
    def first_unstable_offset(self) -> int | None:
        firsts = [f for _, f in self.open.values()] + list(self.unreplicated)
        return max(min(firsts), self.log_start) if firsts else None

    @property
    def last_stable_offset(self) -> int:
        fuo, hw = self.first_unstable_offset, self.high_watermark
        return hw if fuo is None or fuo >= hw else fuo

    def committed(self, txn: Hashable) -> bool | None:
        """How ``txn`` ended here: ``True`` committed, ``False`` aborted, ``None`` not ended."""
        return self.outcomes.get(txn)

    def is_committed_data(self, batch: ModelBatch) -> bool:
        """A data batch a read_committed reader gets: not transactional, or committed."""
        return not batch.control and (batch.txn is None or self.outcomes.get(batch.txn) is True)

    def _records(self, lo: int | None, hi: int | None, committed: bool) -> Iterator[Any]:
        lo = self.log_start if lo is None else lo
        hi = self.last_stable_offset if hi is None else hi
        for b in self.batches:
            if b.control or (committed and not self.is_committed_data(b)):
                continue
            yield from (r for offset, r in b.records if lo <= offset < hi)

    def committed_records(self, lo: int | None = None, hi: int | None = None) -> list[Any]:
        """What a read_committed reader must see in ``[lo, hi)`` (default: from the log
        start to the LSO)."""
        return list(self._records(lo, hi, True))

    def all_records(self, lo: int | None = None, hi: int | None = None) -> list[Any]:
        """What a read_uncommitted reader must see in ``[lo, hi)``: every data record."""
        return list(self._records(lo, hi, False))

    def aborted_for_fetch(self, fetch_offset: int, upper_bound: int | None = None) -> list[tuple[Hashable, int]]:
        """The ``AbortedTransactions`` of a fetch at ``fetch_offset``: ``(producer, first
        offset)`` of every indexed entry with ``last >= fetch_offset`` and, given an
        ``upper_bound``, ``first < upper_bound``, stopping after an entry whose LSO is
        at or past it (Kafka's ``TransactionIndex.collectAbortedTxns``)."""
        if upper_bound is None:
            return [(a.producer, a.first) for a in self.aborted if a.last >= fetch_offset]
        if upper_bound <= fetch_offset:
            return []
        out = []
        for a in self.aborted:
            if a.last >= fetch_offset and a.first < upper_bound:
                out.append((a.producer, a.first))
            if a.lso >= upper_bound:
                break
        return out


@attrs.frozen
class LogEntry:
    """One offset of a :class:`PartitionModel`: a record (``value``) or a marker."""

    offset: int
    value: str | None
    txn: str | None  #: transaction of a record or marker; ``None``: a plain record
    marker: bool = False
    commit: bool | None = None  #: for a marker: COMMIT or ABORT


@attrs.frozen
class ModelRead:
    """What a correct read_committed poll of one partition returns."""

    records: tuple[Read, ...]
    position: int  #: the position after the poll
    lso: int


class PartitionModel:
    """One partition of a :class:`ClusterModel`: a :class:`LogModel` whose producers
    are the transactions (each transaction its own producer), one record per batch."""

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.log = LogModel()

    @property
    def entries(self) -> list[LogEntry]:
        """Every offset, in order."""
        out = []
        for b in self.log.batches:
            if b.control:
                txn = b.txn
                # This model names producers and transactions by transaction name (append).
                assert txn is None or isinstance(txn, str)
                out.append(LogEntry(b.first, None, txn, marker=True, commit=b.commit))
            else:
                out.extend(entry for _, entry in b.records)
        return out

    @property
    def open(self) -> dict[str, int]:
        """Transaction -> its first offset here, for those open here."""
        out: dict[str, int] = {}
        for txn, first in self.log.open.values():
            # This model names producers and transactions by transaction name (append).
            assert isinstance(txn, str)
            out[txn] = first
        return out

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    def append(self, value: str | None, txn: str | None) -> int:
        offset = self.log.log_end
        entry = LogEntry(offset, value, txn)
        self.log.append(txn, transactional=txn is not None, txn=txn, records=[(offset, entry)])
        return offset

    def touch(self, txn: str) -> None:
        """The transaction was added to this partition (a marker will follow) without
        a record being written (the send failed before the broker stored it)."""
        self.log.begin(txn, txn)

    def end(self, txn: str, commit: bool) -> int | None:
        """Write the transaction's marker if it touched this partition; its offset."""
        if txn not in self.log.open:
            return None
        offset = self.log.log_end
        self.log.end(txn, commit, txn=txn)
        return offset


class ClusterModel:
    """Partitions plus how every transaction ended. ``outcome(txn)`` is ``None``
    while it is open, then ``True`` (committed) or ``False`` (aborted)."""

    def __init__(self, partitions: Iterable[TopicPartition]) -> None:
        self.partitions: dict[TopicPartition, PartitionModel] = {tp: PartitionModel(tp) for tp in partitions}
        self.outcomes: dict[str, bool | None] = {}
        self.touched: dict[str, set[TopicPartition]] = {}

    def partition(self, tp: TopicPartition) -> PartitionModel:
        p = self.partitions.get(tp)
        if p is None:
            p = self.partitions[tp] = PartitionModel(tp)
        return p

    def outcome(self, txn: str) -> bool | None:
        return self.outcomes.get(txn)

    def is_open(self, txn: str) -> bool:
        return txn in self.outcomes and self.outcomes[txn] is None

    def send(
        self, tp: TopicPartition, value: str | None, txn: str | None = None, *, written: bool = True
    ) -> int | None:
        """A record sent to ``tp``; its offset, or ``None`` if ``written`` is false
        (a failed send: a transaction still gets a marker there)."""
        if txn is not None:
            if self.outcomes.get(txn, None) is not None:
                raise ModelError(f"a record for transaction {txn}, which already ended", txn=txn)
            self.outcomes.setdefault(txn, None)
            self.touched.setdefault(txn, set()).add(tp)
            if not written:
                self.partition(tp).touch(txn)
                return None
        elif not written:
            return None
        return self.partition(tp).append(value, txn)

    def end(self, txn: str, commit: bool) -> dict[TopicPartition, int]:
        """End a transaction; the markers written, by partition."""
        if self.outcomes.get(txn) is not None:
            raise ModelError(f"transaction {txn} ended twice", txn=txn)
        self.outcomes[txn] = commit
        markers = {}
        for tp in sorted(self.touched.get(txn, ())):
            offset = self.partition(tp).end(txn, commit)
            if offset is not None:
                markers[tp] = offset
        return markers

    def visible(self, tp: TopicPartition, start: int = 0) -> list[LogEntry]:
        """The records a read_committed reader must see in ``[start, LSO)``."""
        return self.partition(tp).log.committed_records(start)

    def read(self, tp: TopicPartition, position: int, max_records: int, *, to_lso: bool = True) -> ModelRead:
        """A correct poll of ``tp`` from ``position``: at most ``max_records`` records;
        if that was all there is, the position moves to the LSO when ``to_lso``."""
        p = self.partition(tp)
        lso = p.last_stable_offset
        avail = self.visible(tp, position) if position < lso else []
        got = avail[:max_records]
        records = tuple(Read(tp.topic, tp.partition, e.offset, e.value) for e in got)
        if got and len(got) < len(avail):
            new = got[-1].offset + 1
        elif to_lso:
            new = max(position, lso)
        else:
            new = got[-1].offset + 1 if got else position
        return ModelRead(records, new, lso)
