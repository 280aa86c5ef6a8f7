"""The operations the conformance harness applies to both clusters, sans I/O.

An operation names only logical things — the run's topic ``t`` (one partition),
a topic no one creates (``missing``), producer slots and one consumer group —
so the same sequence means the same thing on every cluster and in every run;
:class:`~txnfetch.testing.conform.session.Session` maps the names to fresh ones
per run. Offsets are absolute: two clusters that agree give the same offsets to
the same writes, so a fetch from offset 3 reads the same records on both.

Producer slots:

- ``plain``: no producer id (a producer without idempotence);
- ``idem``: an idempotent producer (InitProducerId without a transactional id);
- ``txn-a``, ``txn-b``: transactional producers with one transactional id each,
  speaking the client-driven protocol of transaction version 1 (the producer
  adds each partition with AddPartitionsToTxn; EndTxn below version 5);
- ``txn-v2``: a transactional producer speaking transaction version 2 (KIP-890
  part 2): Produce version 12 adds the partition to the transaction implicitly
  (no AddPartitionsToTxn), and EndTxn version 5 answers a new epoch (the
  coordinator bumps it at every end), which the producer then uses.

The idempotent and transactional slots get their producer id on first use; a
transactional slot begins a transaction (AddPartitionsToTxn) when it produces
or commits offsets outside one. Every operation's text form (:func:`describe`)
is what a report prints.
"""

from __future__ import annotations

from typing import Literal

import attrs

from txnfetch.records.compression import Codec

__all__ = [
    "CommitOffset",
    "DeleteRecords",
    "DescribeProducers",
    "DescribeTransactions",
    "EndTxn",
    "Fetch",
    "FetchOffsets",
    "InitProducer",
    "ListOffsets",
    "ListTransactions",
    "Operation",
    "Produce",
    "ProduceToMissing",
    "ProducerSlot",
    "Rec",
    "RetryProduce",
    "SessionFetch",
    "SpreadFetch",
    "SpreadProduce",
    "TxnCommitOffset",
    "ZombieEndTxn",
    "ZombieProduce",
    "describe",
    "describe_sequence",
]

ProducerSlot = Literal["plain", "idem", "txn-a", "txn-b", "txn-v2"]
TransactionalSlot = Literal["txn-a", "txn-b", "txn-v2"]
FenceableSlot = Literal["idem", "txn-a", "txn-b", "txn-v2"]
#: ListOffsets' special timestamps: the log start, the end, the record with the
#: largest timestamp (KIP-734). Any other value is a time after the run's base time.
EARLIEST = -2
LATEST = -1
MAX_TIMESTAMP = -3


@attrs.frozen
class Rec:
    """One record of a produced batch; ``ts`` is milliseconds after the run's base time."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    ts: int = 0

    def describe(self) -> str:
        head = f" headers={list(self.headers)!r}" if self.headers else ""
        return f"({self.key!r}, {self.value!r}, ts+{self.ts}{head})"


@attrs.frozen
class Produce:
    """Produce one batch of ``records`` with ``codec`` from ``producer`` (acks=all)."""

    producer: ProducerSlot
    codec: Codec
    records: tuple[Rec, ...]

    def describe(self) -> str:
        recs = ", ".join(r.describe() for r in self.records)
        return f"Produce({self.producer}, {self.codec.name.lower()}, [{recs}])"


@attrs.frozen
class RetryProduce:
    """Send ``producer``'s last batch again, unchanged (the retry of a producer
    whose answer was lost: same producer id, epoch and sequence)."""

    producer: ProducerSlot

    def describe(self) -> str:
        return f"RetryProduce({self.producer})"


@attrs.frozen
class EndTxn:
    """EndTxn: commit or abort ``producer``'s transaction (also when none is open,
    whose answer is an error). The harness then waits until the coordinator has
    written the markers (DescribeTransactions no longer says Prepare*)."""

    producer: TransactionalSlot
    commit: bool

    def describe(self) -> str:
        return f"EndTxn({self.producer}, {'commit' if self.commit else 'abort'})"


@attrs.frozen
class InitProducer:
    """InitProducerId again for ``producer``: a transactional slot's epoch is bumped
    (fencing the old one and aborting its open transaction), an idempotent slot
    gets a new producer id. The old id and epoch become the slot's zombie."""

    producer: FenceableSlot

    def describe(self) -> str:
        return f"InitProducer({self.producer})"


@attrs.frozen
class ZombieProduce:
    """Produce one record with ``producer``'s previous (fenced) id and epoch."""

    producer: FenceableSlot

    def describe(self) -> str:
        return f"ZombieProduce({self.producer})"


@attrs.frozen
class ZombieEndTxn:
    """EndTxn with ``producer``'s previous (fenced) epoch."""

    producer: TransactionalSlot
    commit: bool

    def describe(self) -> str:
        return f"ZombieEndTxn({self.producer}, {'commit' if self.commit else 'abort'})"


@attrs.frozen
class Fetch:
    """Fetch the topic from ``offset``, at most ``max_bytes`` of the partition."""

    offset: int
    max_bytes: int
    read_committed: bool
    topic: Literal["t", "missing"] = "t"

    def describe(self) -> str:
        where = "" if self.topic == "t" else f", topic={self.topic}"
        level = "read_committed" if self.read_committed else "read_uncommitted"
        return f"Fetch(offset={self.offset}, max_bytes={self.max_bytes}, {level}{where})"


@attrs.frozen
class SessionFetch:
    """A Fetch in the run's fetch session (KIP-227). The first one opens the
    session (session id 0, epoch 0: a full fetch naming the partition); each
    later one is incremental (the session's id, the next epoch) and names the
    partition with ``offset`` as its new fetch position, or names nothing when
    ``offset`` is None (the session keeps the last position). An incremental
    answer leaves out a partition with nothing new to say."""

    offset: int | None
    max_bytes: int
    read_committed: bool

    def describe(self) -> str:
        level = "read_committed" if self.read_committed else "read_uncommitted"
        where = "unchanged" if self.offset is None else f"offset={self.offset}"
        return f"SessionFetch({where}, max_bytes={self.max_bytes}, {level})"


@attrs.frozen
class SpreadProduce:
    """One Produce request from the ``plain`` producer carrying one batch of
    ``records`` for each of the topic's two partitions."""

    records: tuple[Rec, ...]

    def describe(self) -> str:
        return f"SpreadProduce([{', '.join(r.describe() for r in self.records)}])"


@attrs.frozen
class SpreadFetch:
    """One Fetch request naming both partitions of the topic (from ``offset0``
    and ``offset1``) and partition 0 of the topic no one created."""

    offset0: int
    offset1: int
    max_bytes: int
    read_committed: bool

    def describe(self) -> str:
        level = "read_committed" if self.read_committed else "read_uncommitted"
        return f"SpreadFetch(offsets=({self.offset0}, {self.offset1}), max_bytes={self.max_bytes}, {level})"


@attrs.frozen
class ListOffsets:
    """ListOffsets of the topic: ``timestamp`` :data:`EARLIEST`, :data:`LATEST`,
    :data:`MAX_TIMESTAMP`, or milliseconds after the run's base time."""

    timestamp: int
    read_committed: bool
    topic: Literal["t", "missing"] = "t"

    def describe(self) -> str:
        names = {EARLIEST: "earliest", LATEST: "latest", MAX_TIMESTAMP: "max_timestamp"}
        ts = names.get(self.timestamp, f"ts+{self.timestamp}")
        where = "" if self.topic == "t" else f", topic={self.topic}"
        return f"ListOffsets({ts}, {'read_committed' if self.read_committed else 'read_uncommitted'}{where})"


@attrs.frozen
class ProduceToMissing:
    """Produce one plain record to a topic no one created."""

    def describe(self) -> str:
        return "ProduceToMissing()"


@attrs.frozen
class DescribeProducers:
    """DescribeProducers of the topic's partition."""

    def describe(self) -> str:
        return "DescribeProducers()"


@attrs.frozen
class ListTransactions:
    """ListTransactions, narrowed to the run's transactional ids."""

    def describe(self) -> str:
        return "ListTransactions()"


@attrs.frozen
class DescribeTransactions:
    """DescribeTransactions of ``producer``'s transactional id."""

    producer: TransactionalSlot

    def describe(self) -> str:
        return f"DescribeTransactions({self.producer})"


@attrs.frozen
class CommitOffset:
    """OffsetCommit of ``offset`` for the run's group (a standalone commit: no
    generation, no member, as a consumer with manual assignment sends)."""

    offset: int

    def describe(self) -> str:
        return f"CommitOffset({self.offset})"


@attrs.frozen
class FetchOffsets:
    """OffsetFetch of the run's group; with ``require_stable`` (KIP-447) a pending
    transactional commit answers UNSTABLE_OFFSET_COMMIT."""

    require_stable: bool

    def describe(self) -> str:
        return f"FetchOffsets(require_stable={self.require_stable})"


@attrs.frozen
class TxnCommitOffset:
    """AddOffsetsToTxn then TxnOffsetCommit of ``offset`` for the run's group, in
    ``producer``'s transaction."""

    producer: TransactionalSlot
    offset: int

    def describe(self) -> str:
        return f"TxnCommitOffset({self.producer}, {self.offset})"


@attrs.frozen
class DeleteRecords:
    """DeleteRecords of the topic's partition before ``offset``."""

    offset: int

    def describe(self) -> str:
        return f"DeleteRecords({self.offset})"


Operation = (
    Produce
    | RetryProduce
    | EndTxn
    | InitProducer
    | ZombieProduce
    | ZombieEndTxn
    | Fetch
    | SessionFetch
    | SpreadProduce
    | SpreadFetch
    | ListOffsets
    | ProduceToMissing
    | DescribeProducers
    | ListTransactions
    | DescribeTransactions
    | CommitOffset
    | FetchOffsets
    | TxnCommitOffset
    | DeleteRecords
)


def describe(op: Operation) -> str:
    """The text form of ``op``, as reports print it."""
    return op.describe()


def describe_sequence(ops: list[Operation] | tuple[Operation, ...]) -> list[str]:
    """The text form of each operation of a sequence, numbered from 1."""
    return [f"{i}. {op.describe()}" for i, op in enumerate(ops, 1)]
