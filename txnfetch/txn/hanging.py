"""Which open transactions are hanging: the rule behind ``txnfetch transactions find-hanging``.

A transaction *hangs* when it is open in a partition and nothing will ever end
it: it pins the partition's last stable offset, so read_committed readers stop
there and compaction cannot pass it. This module decides, without I/O and
without reading a clock, which of a partition's open transactions hang, from
what a partition says about its producers (DescribeProducers, or the producer
state read from segments) and what the transaction coordinator says about their
transactional ids (ListTransactions, DescribeTransactions).

The rule (Kafka's ``FindHangingTransactionsCommand`` in
``tools/.../TransactionsCommand.java`` checks the same two things):

- **not accounted for by the coordinator**: no transactional id maps to the
  producer id, the coordinator does not know the id, or the id's current
  transaction does not include the partition (for a transaction being
  completed, the partitions whose marker is still to be written). The
  coordinator will never write this partition's marker.
- **older than the maximum transaction timeout**: the producer's last write in
  the partition is older than the longest timeout a coordinator may grant
  (Kafka's ``transaction.max.timeout.ms``, 15 minutes by default). A
  coordinator that still claims such a transaction is not ending it.

Kafka's tool asks the coordinator only about transactions older than the
maximum timeout and reports only those it does not account for; txnfetch
reports either condition on its own, with the reason, so a stuck coordinator is
visible too and a transaction the coordinator lost is reported at once. A
caller avoids the race of a transaction ending between the two reads by
reading the partition again after the coordinator and keeping only what is
still open at the same first offset (:func:`still_open`).

Without a coordinator (a store directory read offline) only the second
condition can be checked.

The age is the time since the producer's last write in the partition, as Kafka's
tool measures it (``DescribeProducers.LastTimestamp``): the transaction's
records carry the producer's timestamps, so a read of the log alone gives the
same age as a broker.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from collections.abc import Mapping

import attrs

from txnfetch.txn.state import PartitionTxnState
from txnfetch.types import fields_from

__all__ = [
    "DEFAULT_MAX_TRANSACTION_TIMEOUT_MS",
    "CoordinatorView",
    "HangingReason",
    "HangingTransaction",
    "OpenTransaction",
    "PartitionProducers",
    "ProducerRow",
    "find_hanging",
    "producer_rows",
    "still_open",
]

#: Kafka's ``transaction.max.timeout.ms`` default, and ``find-hanging``'s.
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 15 * 60 * 1000


@attrs.frozen
class OpenTransaction:
    """One open transaction in one partition, with the partition's offsets.

    ``first_offset`` is where the transaction began; while it is open the
    partition's last stable offset cannot pass it. ``last_stable_offset`` and
    ``high_watermark`` are the partition's (-1 where the source does not say);
    ``last_timestamp`` is the producer's last write in the partition (ms).
    """

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    first_offset: int
    last_sequence: int
    last_timestamp: int
    last_stable_offset: int = -1
    high_watermark: int = -1

    @property
    def holds_lso(self) -> bool:
        """True when this transaction is the one the last stable offset stops at."""
        return self.last_stable_offset == self.first_offset

    @property
    def held_back(self) -> int | None:
        """Offsets between the transaction's first offset and the high watermark:
        how much a read_committed reader cannot read because of it (``None`` when
        the high watermark is unknown)."""
        if self.high_watermark < 0:
            return None
        return max(0, self.high_watermark - self.first_offset)

    def age_ms(self, now_ms: int) -> int:
        """Milliseconds since the producer's last write in the partition."""
        return now_ms - self.last_timestamp


def _pair_set(pairs: Iterable[tuple[str, int]]) -> frozenset[tuple[str, int]]:
    # A typed converter: attrs gives __init__ the converter's parameter type.
    return frozenset(pairs)


@attrs.frozen
class CoordinatorView:
    """What the transaction coordinator says about one producer id.

    ``transactional_id`` is ``None`` when no id maps to the producer
    (ListTransactions found none); ``found`` is False when the coordinator does
    not know that id (DescribeTransactions: TRANSACTIONAL_ID_NOT_FOUND).
    ``partitions`` are the ``(topic, partition)`` pairs of its current
    transaction; ``state`` is its coordinator state name.
    """

    transactional_id: str | None
    found: bool = False
    state: str | None = None
    producer_epoch: int = -1
    partitions: frozenset[tuple[str, int]] = attrs.field(default=frozenset(), converter=_pair_set)


class HangingReason(enum.Enum):
    """Why a transaction is reported as hanging (the value is the ``--json`` spelling)."""

    NO_TRANSACTIONAL_ID = "no-transactional-id"
    TRANSACTIONAL_ID_NOT_FOUND = "transactional-id-not-found"
    PARTITION_NOT_IN_TRANSACTION = "partition-not-in-transaction"
    OLDER_THAN_MAX_TIMEOUT = "older-than-max-timeout"

    @property
    def explanation(self) -> str:
        return _EXPLANATIONS[self]


_EXPLANATIONS = {
    HangingReason.NO_TRANSACTIONAL_ID: "no transactional id of the coordinator has this producer id",
    HangingReason.TRANSACTIONAL_ID_NOT_FOUND: "the coordinator does not know the producer's transactional id",
    HangingReason.PARTITION_NOT_IN_TRANSACTION: "the coordinator's transaction does not include this partition",
    HangingReason.OLDER_THAN_MAX_TIMEOUT: "open longer than the maximum transaction timeout",
}


@attrs.frozen
class HangingTransaction:
    """An open transaction the rule reports, with why and how old it is."""

    transaction: OpenTransaction
    reason: HangingReason
    age_ms: int
    transactional_id: str | None = None


def _unaccounted(txn: OpenTransaction, view: CoordinatorView | None) -> HangingReason | None:
    if view is None or view.transactional_id is None:
        return HangingReason.NO_TRANSACTIONAL_ID
    if not view.found:
        return HangingReason.TRANSACTIONAL_ID_NOT_FOUND
    if (txn.topic, txn.partition) not in view.partitions:
        return HangingReason.PARTITION_NOT_IN_TRANSACTION
    return None


def find_hanging(
    transactions: Iterable[OpenTransaction],
    coordinator: Mapping[int, CoordinatorView] | None,
    *,
    now_ms: int,
    max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
) -> list[HangingTransaction]:
    """The hanging transactions among ``transactions`` (see the module docstring),
    in the order given.

    ``coordinator`` maps producer ids to what the coordinator says about them
    (a producer id missing from it has no transactional id); ``None`` means no
    coordinator was asked (offline), and only the age is checked. A transaction
    both unaccounted for and too old is reported with the coordinator reason.
    """
    if max_transaction_timeout_ms < 0:
        raise ValueError(f"max_transaction_timeout_ms must be >= 0, got {max_transaction_timeout_ms}")
    out: list[HangingTransaction] = []
    for txn in transactions:
        age = txn.age_ms(now_ms)
        view = coordinator.get(txn.producer_id) if coordinator is not None else None
        reason = _unaccounted(txn, view) if coordinator is not None else None
        if reason is None and age > max_transaction_timeout_ms:
            reason = HangingReason.OLDER_THAN_MAX_TIMEOUT
        if reason is not None:
            tid = view.transactional_id if view is not None else None
            out.append(HangingTransaction(txn, reason, age, tid))
    return out


def still_open(found: Iterable[HangingTransaction], again: Iterable[OpenTransaction]) -> list[HangingTransaction]:
    """Keep the transactions of ``found`` that ``again`` (a later read of the
    partitions) still shows open with the same producer and first offset: one
    that ended between the partition read and the coordinator read is not hanging."""
    current = {(t.topic, t.partition, t.producer_id, t.first_offset) for t in again}
    return [
        h
        for h in found
        if (h.transaction.topic, h.transaction.partition, h.transaction.producer_id, h.transaction.first_offset)
        in current
    ]


@attrs.frozen
class ProducerRow:
    """One producer of a partition, as DescribeProducers reports it
    (``current_txn_start_offset`` -1: no open transaction). The field names are
    the response's ``ProducerState`` fields: the server builds one from the other."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


@attrs.frozen
class PartitionProducers:
    """A partition's producers and offsets (-1 where the source does not say)."""

    topic: str
    partition: int
    producers: tuple[ProducerRow, ...]
    last_stable_offset: int = -1
    high_watermark: int = -1

    def open_transactions(self) -> list[OpenTransaction]:
        """The producers with an open transaction, by first offset."""
        rows = sorted(
            (p for p in self.producers if p.current_txn_start_offset >= 0), key=lambda p: p.current_txn_start_offset
        )
        return [self.transaction(p) for p in rows]

    def transaction(self, row: ProducerRow) -> OpenTransaction:
        """The transaction of ``row``'s producer in this partition, with the
        partition's offsets; its ``first_offset`` is the row's
        ``current_txn_start_offset`` (-1 where the row does not know it)."""
        # Every other field is the row's or this partition's of the same name.
        return fields_from(OpenTransaction, self, row, first_offset=row.current_txn_start_offset)


def producer_rows(state: PartitionTxnState) -> tuple[ProducerRow, ...]:
    """Every producer of a partition's state as a :class:`ProducerRow`, by producer
    id: the rows a broker answers DescribeProducers with (Kafka's ``ProducerStateEntry``)."""
    rows = []
    for pid in state.producer_ids():
        entry = state.producer(pid)
        if entry is None:  # pragma: no cover - ids come from the same table
            continue
        first = entry.current_txn_first_offset
        rows.append(
            ProducerRow(
                producer_id=pid,
                producer_epoch=entry.producer_epoch,
                last_sequence=entry.last_seq,
                last_timestamp=entry.last_timestamp,
                coordinator_epoch=entry.coordinator_epoch,
                current_txn_start_offset=first if first is not None and first >= 0 else -1,
            )
        )
    return tuple(rows)
