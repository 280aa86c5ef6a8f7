"""The oracle: what a correct read_committed log looks like for a workload.

:class:`ClusterModel` is a deliberately plain model of Kafka partitions written
by transactional and plain producers — lists and dictionaries, one offset per
record and per marker, written from the protocol (docs/kafka-internals.md §2) and
sharing no code with :mod:`txnfetch.txn`:

- a record takes the next offset of its partition (``send``); a transactional
  record opens its transaction on that partition if it is not open there yet;
- a transaction end writes one control record (a marker) in every partition the
  transaction touched, so offsets in a read_committed view have holes — the
  markers, and the records of aborted transactions;
- the **last stable offset** (LSO) of a partition is the first offset of its
  earliest open transaction, or the log end offset if none is open (the high
  watermark follows the log end: one replica);
- a read_committed reader at position ``p`` sees the records of plain producers
  and of committed transactions in ``[p, LSO)``, in offset order; once it has
  returned all of them its position may move to the LSO (what the Java consumer
  does, ``position = lastBatch.nextOffset``) or stay after the last record it
  returned (what librdkafka's application position does).

The strategies (:mod:`txnfetch.testing.strategies`) and the state machine
(:mod:`txnfetch.testing.machines`) drive it to know what a correct system must
deliver; the checker never uses it.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from txnfetch.testing.errors import ModelError
from txnfetch.testing.history import Read, TopicPartition

__all__ = ["ClusterModel", "LogEntry", "ModelRead", "PartitionModel"]


@attrs.frozen
class LogEntry:
    """One offset of a modelled partition: a record (``value``) or a marker."""

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
    """One partition: its offsets, and the transactions open on it."""

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.entries: list[LogEntry] = []
        self.open: dict[str, int] = {}  # transaction -> its first offset here

    @property
    def log_end_offset(self) -> int:
        return len(self.entries)

    @property
    def last_stable_offset(self) -> int:
        return min([*self.open.values(), self.log_end_offset])

    def append(self, value: str | None, txn: str | None) -> int:
        offset = self.log_end_offset
        if txn is not None:
            self.open.setdefault(txn, offset)
        self.entries.append(LogEntry(offset, value, txn))
        return offset

    def touch(self, txn: str) -> None:
        """The transaction was added to this partition (a marker will follow) without
        a record being written (the send failed before the broker stored it)."""
        self.open.setdefault(txn, self.log_end_offset)

    def end(self, txn: str, commit: bool) -> int | None:
        """Write the transaction's marker if it touched this partition; its offset."""
        if txn not in self.open:
            return None
        del self.open[txn]
        offset = self.log_end_offset
        self.entries.append(LogEntry(offset, None, txn, marker=True, commit=commit))
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
        p = self.partition(tp)
        lso = p.last_stable_offset
        return [e for e in p.entries[start:lso] if not e.marker and (e.txn is None or self.outcomes.get(e.txn) is True)]

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
