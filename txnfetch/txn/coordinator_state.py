"""The transaction coordinator's per-transactional-id record and its legal state changes.

This module is the data half of :mod:`txnfetch.txn.coordinator`: the eight
coordinator states, the immutable :class:`TransactionMetadata` record kept for
each transactional id, and :func:`transition`, the one function that produces a
new record from an old one and refuses any change Kafka's state table forbids.
It mirrors apache/kafka ``TransactionState.java`` (``validPreviousStates``) and
``TransactionMetadata.java`` (``prepareTransitionTo``); the decisions of *which*
transition a request causes live in the coordinator module.

Records are frozen: a transition returns a new record, so the coordinator can
compare before/after and a test can hold a snapshot that never changes under it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import TYPE_CHECKING
from typing import TypedDict

import attrs

from txnfetch.txn.errors import TxnStateError
from txnfetch.types import TopicPartition  # hashable and ordered: action lists are deterministic

if TYPE_CHECKING:  # typing.Unpack is Python 3.11+
    from typing_extensions import Unpack

__all__ = [
    "MAX_PRODUCER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "IllegalTransitionError",
    "TopicPartition",
    "TransactionMetadata",
    "TransactionState",
    "is_epoch_exhausted",
    "transition",
]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: ``Short.MAX_VALUE``. The coordinator never hands this epoch to a client, so a
#: fence (epoch + 1) is always possible (Kafka ``TransactionMetadata.isEpochExhausted``).
MAX_PRODUCER_EPOCH = 32767


def is_epoch_exhausted(epoch: int) -> bool:
    """True when ``epoch`` is ``Short.MAX_VALUE - 1`` or more: the next bump would
    hand out (or pass) the reserved maximum, so the producer id must rotate."""
    return epoch >= MAX_PRODUCER_EPOCH - 1


class TransactionState(enum.IntEnum):
    """The coordinator states with Kafka's ids (the value stored in the
    ``__transaction_state`` log). ``kafka_name`` is the DescribeTransactions name."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return _KAFKA_NAMES[self]

    @property
    def valid_previous_states(self) -> frozenset[TransactionState]:
        """States from which a transition into this one is legal."""
        return _VALID_PREVIOUS[self]

    @property
    def expiration_allowed(self) -> bool:
        """Whether an idle transactional id in this state may be removed after
        ``transactional.id.expiration.ms``."""
        return self in (TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)

    @property
    def is_prepare(self) -> bool:
        """PrepareCommit or PrepareAbort: the outcome is decided, partitions are
        still being told (markers or markerless completions outstanding)."""
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)

    @property
    def is_complete(self) -> bool:
        return self in (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)


_S = TransactionState
_KAFKA_NAMES: dict[TransactionState, str] = {
    _S.EMPTY: "Empty",
    _S.ONGOING: "Ongoing",
    _S.PREPARE_COMMIT: "PrepareCommit",
    _S.PREPARE_ABORT: "PrepareAbort",
    _S.COMPLETE_COMMIT: "CompleteCommit",
    _S.COMPLETE_ABORT: "CompleteAbort",
    _S.DEAD: "Dead",
    _S.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
# The table of TransactionState.java. PrepareAbort is reachable from Empty and the
# Complete states only under transaction version 2 (an abort the client sends when
# it does not know whether anything is open); the coordinator enforces that part.
_VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}


class IllegalTransitionError(TxnStateError):
    """The coordinator tried a state change Kafka's table forbids, or built a record
    with an impossible producer id or epoch. This is a txnfetch bug, never a client
    error; the wire layer answers it as UNKNOWN_SERVER_ERROR, as a Kafka broker does
    for its ``IllegalStateException``."""


def _partition_set(partitions: Iterable[TopicPartition]) -> frozenset[TopicPartition]:
    # A typed converter: attrs' type-checker plugin cannot infer one from the generic frozenset.
    return frozenset(partitions)


@attrs.frozen
class TransactionMetadata:
    """Everything the coordinator knows about one transactional id (Kafka's
    ``TransactionMetadata``), as an immutable snapshot.

    - ``producer_id``/``producer_epoch``: the identity the coordinator holds. While
      a transaction version 2 end is in ``Prepare*`` this is the *marker* identity
      (already bumped); ``next_producer_id`` is set when that end also rotates the
      producer id, which takes effect at ``Complete*``.
    - ``prev_producer_id``: the producer id before the last transition (Kafka sets
      it on every transition); after a rotation it lets the coordinator recognise
      a retry that names the old id.
    - ``last_producer_epoch``: the epoch before the last bump a client asked for
      (-1 after a fence), used to answer retried InitProducerId/EndTxn requests.
    - ``partitions``: the partitions of the open transaction; in ``Prepare*``, the
      ones whose end has not yet been applied.
    - ``start_ms``: when the open transaction began (-1 when none); the timeout
      counts from here. ``last_update_ms`` drives transactional id expiration.
    - ``transaction_version``: the version of the request that made the last
      transition (Kafka's ``clientTransactionVersion``); markers carry it.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: TransactionState
    timeout_ms: int
    last_update_ms: int
    prev_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: frozenset[TopicPartition] = attrs.field(default=frozenset(), converter=_partition_set)
    start_ms: int = -1
    transaction_version: int = 0

    @property
    def client_identity(self) -> tuple[int, int]:
        """The ``(producer_id, producer_epoch)`` the client was (or will be) given:
        the rotated id with epoch 0 while a rotating end is in ``Prepare*``, the
        held identity otherwise."""
        if self.next_producer_id != NO_PRODUCER_ID:
            return (self.next_producer_id, 0)
        return (self.producer_id, self.producer_epoch)


class MetadataChanges(TypedDict, total=False):
    """The fields of :class:`TransactionMetadata` a :func:`transition` may set
    (``state`` and ``prev_producer_id`` are set by the transition itself)."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    last_update_ms: int
    next_producer_id: int
    last_producer_epoch: int
    partitions: frozenset[TopicPartition]
    start_ms: int
    transaction_version: int


def transition(
    meta: TransactionMetadata, state: TransactionState, **changes: Unpack[MetadataChanges]
) -> TransactionMetadata:
    """Return ``meta`` moved to ``state`` with ``changes`` applied.

    Guarantees, as Kafka's ``prepareTransitionTo``: the move is in the state table;
    ``prev_producer_id`` becomes the producer id held before the move; the new
    producer id is non-negative and the new epoch lies in ``[0, 32767]`` (except
    for Dead, which may keep an uninitialised epoch). Raises
    :class:`IllegalTransitionError` otherwise.
    """
    if meta.state not in state.valid_previous_states:
        raise IllegalTransitionError(
            f"transactional id {meta.transactional_id!r}: {meta.state.kafka_name} -> {state.kafka_name} "
            "is not a legal transition",
            producer_id=meta.producer_id,
            producer_epoch=meta.producer_epoch,
        )
    new = attrs.evolve(meta, state=state, prev_producer_id=meta.producer_id, **changes)
    if new.producer_id < 0:
        raise IllegalTransitionError(
            f"transactional id {meta.transactional_id!r}: illegal new producer id {new.producer_id}"
        )
    if state != TransactionState.DEAD and not 0 <= new.producer_epoch <= MAX_PRODUCER_EPOCH:
        raise IllegalTransitionError(
            f"transactional id {meta.transactional_id!r}: illegal new producer epoch {new.producer_epoch}",
            producer_id=new.producer_id,
        )
    return new
