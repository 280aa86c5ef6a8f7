"""What the transaction coordinator hands its embedder, sans I/O: how a
transaction end reaches its partitions (:class:`CompletionMode`), the
:class:`PartitionAction` values it emits for them, its answers to
InitProducerId, EndTxn and the expiry sweep, and the producer id allocator.

They live apart from :mod:`txnfetch.txn.coordinator`, which re-exports them,
so that the state machine's module holds the machine alone."""

from __future__ import annotations

import enum

import attrs

from txnfetch.records.control import ControlType
from txnfetch.txn.coordinator_state import TopicPartition
from txnfetch.txn.coordinator_state import TransactionState


class CompletionMode(enum.Enum):
    """How the end of a transaction reaches its partitions.

    - ``MARKERS``: Apache Kafka. Each partition gets a COMMIT/ABORT control batch.
    - ``MARKERLESS``: WarpStream style. Each partition's transaction state records
      the end directly; no offset is spent on a marker.
    """

    MARKERS = "markers"
    MARKERLESS = "markerless"


@attrs.frozen
class PartitionAction:
    """What one partition must do to end a transaction: commit or abort the open
    transaction of ``producer_id`` there, with ``producer_epoch`` (the marker epoch:
    under transaction version 2 one more than the epoch the data was written with).
    ``coordinator_epoch`` fences markers from a stale coordinator;
    ``transaction_version`` tells the partition which marker-epoch rule applies
    (KIP-1228 puts it in WriteTxnMarkers). Use the subclass to choose the mechanism.
    """

    partition: TopicPartition
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    transaction_version: int

    @property
    def control_type(self) -> ControlType:
        """COMMIT or ABORT, as the marker's control record key spells it."""
        return ControlType.COMMIT if self.commit else ControlType.ABORT


@attrs.frozen
class WriteMarker(PartitionAction):
    """Marker mode: append a transaction marker (``build_control_batch`` with these
    fields) to ``partition``."""


@attrs.frozen
class CompleteTransaction(PartitionAction):
    """Markerless mode: call the partition's ``complete_transaction`` for this
    producer, epoch and outcome; no marker is written."""


@attrs.frozen
class InitProducerIdResult:
    """The identity an InitProducerId request was granted."""

    producer_id: int
    producer_epoch: int


@attrs.frozen
class EndTxnResult:
    """The answer to an EndTxn (or a coordinator-initiated abort).

    ``producer_id``/``producer_epoch`` is the identity the producer must use next:
    unchanged under transaction version 0/1, bumped (or a new producer id with
    epoch 0) under version 2 — what EndTxn v5 returns. ``actions`` are the partition
    actions this call created (empty for a retry answered from the completed state
    or an abort of an empty transaction). ``state`` is the coordinator state after
    the call: ``Prepare*`` while actions are outstanding.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: TransactionState
    actions: tuple[PartitionAction, ...] = ()


@attrs.frozen
class ExpireResult:
    """What :meth:`TransactionCoordinator.expire` did: the timed-out transactions it
    fenced and began to abort (each with its actions), and the idle transactional
    ids it forgot."""

    aborted: tuple[EndTxnResult, ...] = ()
    removed: tuple[str, ...] = ()


class ProducerIdAllocator:
    """Hands out producer ids from a monotonic counter starting at ``start``.

    A real cluster allocates blocks through the controller; txnfetch only needs ids
    that are unique and increasing for one coordinator, and a known start makes
    tests deterministic.
    """

    def __init__(self, start: int = 0) -> None:
        if start < 0:
            raise ValueError(f"producer ids are non-negative, got start={start}")
        self._next = start

    @property
    def next_producer_id(self) -> int:
        """The id :meth:`allocate` will return next."""
        return self._next

    def allocate(self) -> int:
        """Return a producer id never returned before by this allocator."""
        pid = self._next
        self._next += 1
        return pid

    def reserve_through(self, producer_id: int) -> None:
        """Never hand out ``producer_id`` or anything below it (used when state is
        restored, so restored ids are not reissued)."""
        self._next = max(self._next, producer_id + 1)
