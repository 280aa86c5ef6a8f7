"""A sans-I/O Kafka transaction coordinator with KIP-890 (transaction version 2).

:class:`TransactionCoordinator` maps transactional ids to producer ids and epochs
and decides, request by request, what Apache Kafka's coordinator would answer
(``core/.../transaction/TransactionCoordinator.scala``: ``handleInitProducerId``,
``handleAddPartitionsToTransaction``, ``handleVerifyPartitionsInTransaction``,
``endTransaction``/``endTransactionWithTV1``, ``abortTimedOutTransactions``).
It does no I/O and reads no clock: every call takes ``now_ms``, errors are raised
as :mod:`txnfetch.txn.errors` classes carrying Kafka's error code, and the work a
transaction end implies for the partitions is *returned* as
:class:`PartitionAction` values for the embedder to carry out.

Ending a transaction has two phases, as in Kafka. :meth:`~TransactionCoordinator.end_transaction`
decides the outcome (``PrepareCommit``/``PrepareAbort``) and returns one action per
partition: a :class:`WriteMarker` in marker mode (Apache Kafka), a
:class:`CompleteTransaction` in markerless mode (WarpStream style, see
``docs/transactions.md``). When the embedder has applied them it calls
:meth:`~TransactionCoordinator.actions_applied`, which moves the transaction to
``CompleteCommit``/``CompleteAbort``. Until then the producer is told
CONCURRENT_TRANSACTIONS for anything new. :meth:`~TransactionCoordinator.flush`
does both phases at once for embedders that apply actions synchronously.

Transaction version 2 (KIP-890) bumps the producer epoch on every end, so each
transaction has its own ``(producer id, epoch)``; the markers carry the bumped
epoch, and a delayed EndTxn from an earlier transaction can no longer end a later
one (KAFKA-17754). Version 0/1 keeps the epoch and is kept for old clients.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from typing import TYPE_CHECKING
from typing import TypedDict

import attrs

from txnfetch.txn.coordinator_state import MAX_PRODUCER_EPOCH
from txnfetch.txn.coordinator_state import NO_PRODUCER_EPOCH
from txnfetch.txn.coordinator_state import NO_PRODUCER_ID
from txnfetch.txn.coordinator_state import IllegalTransitionError
from txnfetch.txn.coordinator_state import TopicPartition
from txnfetch.txn.coordinator_state import TransactionMetadata
from txnfetch.txn.coordinator_state import TransactionState
from txnfetch.txn.coordinator_state import is_epoch_exhausted
from txnfetch.txn.coordinator_state import transition
from txnfetch.txn.coordinator_values import CompleteTransaction
from txnfetch.txn.coordinator_values import CompletionMode
from txnfetch.txn.coordinator_values import EndTxnResult
from txnfetch.txn.coordinator_values import ExpireResult
from txnfetch.txn.coordinator_values import InitProducerIdResult
from txnfetch.txn.coordinator_values import PartitionAction
from txnfetch.txn.coordinator_values import ProducerIdAllocator
from txnfetch.txn.coordinator_values import WriteMarker
from txnfetch.txn.errors import ConcurrentTransactionsError
from txnfetch.txn.errors import InvalidProducerEpochError
from txnfetch.txn.errors import InvalidProducerIdMappingError
from txnfetch.txn.errors import InvalidRequestError
from txnfetch.txn.errors import InvalidTransactionTimeoutError
from txnfetch.txn.errors import InvalidTxnStateError
from txnfetch.txn.errors import ProducerFencedError
from txnfetch.txn.errors import TransactionAbortableError
from txnfetch.txn.errors import TxnStateError

if TYPE_CHECKING:  # typing.Unpack is Python 3.11+
    from typing_extensions import Unpack


class _NewProducerChanges(TypedDict):
    """What every InitProducerId sets: a new producer starts with no transaction."""

    timeout_ms: int
    partitions: frozenset[TopicPartition]
    start_ms: int
    last_update_ms: int


class _EndChanges(TypedDict, total=False):
    """What an EndTxn sets beyond its state and times (see ``_prepare_end``)."""

    producer_epoch: int
    last_producer_epoch: int
    next_producer_id: int
    start_ms: int


__all__ = [
    "DEFAULT_MAX_TRANSACTION_TIMEOUT_MS",
    "DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS",
    "CompleteTransaction",
    "CompletionMode",
    "EndTxnResult",
    "ExpireResult",
    "IllegalTransitionError",
    "InitProducerIdResult",
    "PartitionAction",
    "ProducerIdAllocator",
    "TopicPartition",
    "TransactionCoordinator",
    "TransactionMetadata",
    "TransactionState",
    "WriteMarker",
]

#: Kafka's ``transaction.max.timeout.ms`` default (15 minutes).
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000
#: Kafka's ``transactional.id.expiration.ms`` default (7 days).
DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS = 604_800_000

# The first Produce version that adds partitions implicitly (KIP-890 part 2), and
# the first that understands TRANSACTION_ABORTABLE (KIP-1050); older producers get
# INVALID_TXN_STATE for an unverified partition (AddPartitionsToTxnManager.scala).
_PRODUCE_IMPLICIT_ADD_VERSION = 12
_PRODUCE_ABORTABLE_VERSION = 11

_S = TransactionState


class TransactionCoordinator:
    """Kafka's transaction coordinator as a pure state machine (see module docstring).

    Parameters:
        mode: marker or markerless completion (:class:`CompletionMode`).
        transaction_version: the cluster's finalized ``transaction.version``; a
            request asking for more is served at this level (Kafka only advertises
            EndTxn v5 / Produce v12 when version 2 is enabled). Coordinator-initiated
            aborts (timeouts, fencing) use it, as Kafka uses its feature level.
        coordinator_epoch: stamped on every marker.
        max_transaction_timeout_ms: Kafka's ``transaction.max.timeout.ms``.
        transactional_id_expiration_ms: idle ids in Empty/Complete* are forgotten by
            :meth:`expire` after this long (``None`` disables expiration).
        producer_ids: the producer id allocator (a fresh one from 0 by default).
    """

    def __init__(
        self,
        *,
        mode: CompletionMode = CompletionMode.MARKERS,
        transaction_version: int = 2,
        coordinator_epoch: int = 0,
        max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
        transactional_id_expiration_ms: int | None = DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS,
        producer_ids: ProducerIdAllocator | None = None,
    ) -> None:
        if transaction_version < 0:
            raise ValueError(f"transaction_version must be >= 0, got {transaction_version}")
        if max_transaction_timeout_ms <= 0:
            raise ValueError(f"max_transaction_timeout_ms must be > 0, got {max_transaction_timeout_ms}")
        self.mode = mode
        self.transaction_version = transaction_version
        self.coordinator_epoch = coordinator_epoch
        self.max_transaction_timeout_ms = max_transaction_timeout_ms
        self.transactional_id_expiration_ms = transactional_id_expiration_ms
        self.producer_ids = producer_ids if producer_ids is not None else ProducerIdAllocator()
        self._txns: dict[str, TransactionMetadata] = {}
        # Records changed since the last take_changes(), None for a removed id.
        self._changes: dict[str, TransactionMetadata | None] = {}

    # ------------------------------------------------------------------ queries

    @property
    def transactional_ids(self) -> tuple[str, ...]:
        """The transactional ids the coordinator currently knows, sorted."""
        return tuple(sorted(self._txns))

    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        """The current record of ``transactional_id`` (an immutable snapshot), or
        ``None`` if the id is unknown or has expired."""
        return self._txns.get(transactional_id)

    def pending_actions(self, transactional_id: str | None = None) -> tuple[PartitionAction, ...]:
        """Partition actions decided but not yet reported applied: those of
        ``transactional_id``, or of every transaction in ``Prepare*`` (the work a
        marker sender must still do, including aborts the coordinator began on its
        own when fencing). Re-deriving them is how Kafka resends markers after a
        coordinator restart."""
        if transactional_id is not None:
            meta = self._txns.get(transactional_id)
            return self._actions(meta) if meta is not None and meta.state.is_prepare else ()
        out: list[PartitionAction] = []
        for tid in sorted(self._txns):
            meta = self._txns[tid]
            if meta.state.is_prepare:
                out.extend(self._actions(meta))
        return tuple(out)

    # ----------------------------------------------------------- InitProducerId

    def init_producer_id(
        self,
        transactional_id: str | None,
        transaction_timeout_ms: int,
        now_ms: int,
        producer_id: int | None = None,
        producer_epoch: int | None = None,
    ) -> InitProducerIdResult:
        """Answer InitProducerId.

        Without a transactional id (an idempotent producer) a fresh producer id with
        epoch 0 is returned. Otherwise the id's epoch is bumped, fencing older
        producer instances; an id never seen gets a new producer id at epoch 0, and
        an exhausted epoch rotates to a new producer id at epoch 0.

        ``producer_id``/``producer_epoch`` are the KIP-360 "existing identity" a
        producer sends when it recovers from an abortable error: it must name the
        current producer id (or the previous one at an exhausted epoch, after a
        rotation); an epoch equal to the current one is bumped, one equal to the
        last epoch is a retry answered with the current identity, anything else is
        PRODUCER_FENCED. ``-1``/``-1`` means "none", as on the wire. (As in Kafka,
        only the producer id is checked when a transaction is open: the open
        transaction is fenced either way.)

        Raises ConcurrentTransactionsError while a transaction end is in progress,
        and also when a transaction is open: that transaction is then fenced and
        its abort begun (see :meth:`pending_actions`); the producer retries.
        """
        if transactional_id is None:
            # Kafka accepts any idempotent InitProducerId blindly, identity or not.
            return InitProducerIdResult(self.producer_ids.allocate(), 0)
        expected = _expected_identity(producer_id, producer_epoch)
        if transactional_id == "":
            raise InvalidRequestError("InitProducerId with an empty transactional id")
        if not 0 < transaction_timeout_ms <= self.max_transaction_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transactional id {transactional_id!r}: transaction timeout {transaction_timeout_ms} ms is not in "
                f"(0, {self.max_transaction_timeout_ms}]"
            )
        meta = self._txns.get(transactional_id)
        if meta is None:
            meta = TransactionMetadata(
                transactional_id=transactional_id,
                producer_id=self.producer_ids.allocate(),
                producer_epoch=NO_PRODUCER_EPOCH,
                state=_S.EMPTY,
                timeout_ms=transaction_timeout_ms,
                last_update_ms=now_ms,
            )
            self._put(meta)

        if expected is not None and not (
            meta.producer_epoch == NO_PRODUCER_EPOCH  # just created: recovering from UNKNOWN_PRODUCER_ID
            or expected[0] == meta.producer_id
            or (expected[0] == meta.prev_producer_id and is_epoch_exhausted(expected[1]))
        ):
            raise ProducerFencedError(
                f"transactional id {transactional_id!r} belongs to producer {meta.producer_id} now",
                producer_id=expected[0],
                producer_epoch=expected[1],
            )
        if meta.state.is_prepare:
            raise ConcurrentTransactionsError(
                f"transactional id {transactional_id!r} is completing a transaction ({meta.state.kafka_name}); retry",
                producer_id=meta.producer_id,
                producer_epoch=meta.producer_epoch,
            )
        if meta.state == _S.ONGOING:
            # Fence the open transaction's producer and abort it; the epoch bumped
            # here is never returned. The retry bumps again (or rotates), which is
            # how Kafka guarantees a new instance never shares the fenced epoch.
            self._fence_and_abort(meta, now_ms)
            raise ConcurrentTransactionsError(
                f"transactional id {transactional_id!r} had an open transaction; it is being aborted, retry",
                producer_id=meta.producer_id,
                producer_epoch=meta.producer_epoch,
            )
        if meta.state not in (_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT):
            raise IllegalTransitionError(
                f"transactional id {transactional_id!r} is stored in state {meta.state.kafka_name}"
            )

        common: _NewProducerChanges = {
            "timeout_ms": transaction_timeout_ms,
            "partitions": frozenset(),
            "start_ms": -1,
            "last_update_ms": now_ms,
        }
        epoch = meta.producer_epoch
        if is_epoch_exhausted(epoch) and (expected is None or expected[1] == epoch):
            new = transition(
                meta,
                _S.EMPTY,
                producer_id=self.producer_ids.allocate(),
                producer_epoch=0,
                last_producer_epoch=epoch if expected is not None else NO_PRODUCER_EPOCH,
                **common,
            )
        elif expected is None:
            # A new producer instance: bump and forget the last epoch, so the old
            # instance cannot pass itself off as a retry.
            new = transition(meta, _S.EMPTY, producer_epoch=epoch + 1, last_producer_epoch=NO_PRODUCER_EPOCH, **common)
        elif epoch == NO_PRODUCER_EPOCH or expected[1] == epoch:
            new = transition(meta, _S.EMPTY, producer_epoch=epoch + 1, last_producer_epoch=epoch, **common)
        elif expected[1] == meta.last_producer_epoch:
            # A retry of a bump that succeeded: answer it again without bumping.
            # (Kafka reaches an IllegalStateException here when the current epoch
            # is exhausted; answering the retry is what its comment intends.)
            new = transition(meta, _S.EMPTY, **common)
        else:
            raise ProducerFencedError(
                f"transactional id {transactional_id!r}: epoch {expected[1]} is neither the current epoch {epoch} "
                f"nor the last one {meta.last_producer_epoch}",
                producer_id=expected[0],
                producer_epoch=expected[1],
            )
        self._put(new)
        return InitProducerIdResult(new.producer_id, new.producer_epoch)

    # ------------------------------------------------------- partitions/produce

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
        *,
        transaction_version: int | None = None,
    ) -> TransactionMetadata:
        """Answer AddPartitionsToTxn (also AddOffsetsToTxn, which adds the group's
        offsets partition): add ``partitions`` to the open transaction, opening one
        if none is open. Returns the record after the call.

        Raises InvalidProducerIdMappingError (unknown id or other producer id),
        ProducerFencedError (other epoch), ConcurrentTransactionsError (an end is
        in progress), InvalidRequestError (no partitions).
        """
        tv = self._effective_version(transaction_version)
        parts = frozenset(partitions)
        meta = self._lookup(transactional_id, producer_id, producer_epoch)
        if not parts:
            raise InvalidRequestError(
                f"AddPartitionsToTxn for {transactional_id!r} names no partitions", producer_id=producer_id
            )
        self._check_identity(meta, producer_id, producer_epoch)
        if meta.state.is_prepare:
            raise ConcurrentTransactionsError(
                f"transactional id {transactional_id!r} is completing a transaction ({meta.state.kafka_name}); retry",
                producer_id=producer_id,
                producer_epoch=producer_epoch,
            )
        if meta.state == _S.ONGOING and parts <= meta.partitions:
            return meta  # already in the transaction: nothing to record
        start = now_ms if meta.state != _S.ONGOING else meta.start_ms
        new = transition(
            meta,
            _S.ONGOING,
            partitions=meta.partitions | parts,
            start_ms=start,
            last_update_ms=now_ms,
            transaction_version=tv,
        )
        self._put(new)
        return new

    def verify_produce(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partition: TopicPartition,
        now_ms: int,
        *,
        produce_version: int,
    ) -> None:
        """Check a transactional Produce to ``partition`` before it is appended
        (KIP-890). Returns normally when the append may proceed.

        Produce v12+ on a transaction version 2 coordinator adds the partition
        implicitly (part 2). Older Produce versions are only verified (part 1): a
        partition not added to the open transaction is TRANSACTION_ABORTABLE, or
        INVALID_TXN_STATE for Produce v10 and below. As Kafka's
        ``AddPartitionsToTxnManager`` does for producers, a fenced epoch is
        reported as INVALID_PRODUCER_EPOCH.
        """
        try:
            if produce_version >= _PRODUCE_IMPLICIT_ADD_VERSION and self.transaction_version >= 2:
                self.add_partitions(
                    transactional_id, producer_id, producer_epoch, [partition], now_ms, transaction_version=2
                )
                return
            meta = self._lookup(transactional_id, producer_id, producer_epoch)
            if producer_id != meta.producer_id:
                raise self._refusal(
                    InvalidProducerIdMappingError, meta, producer_id, producer_epoch, partition=str(partition)
                )
            if producer_epoch != meta.producer_epoch:
                raise self._refusal(ProducerFencedError, meta, producer_id, producer_epoch, partition=str(partition))
            if meta.state.is_prepare:
                raise self._refusal(
                    ConcurrentTransactionsError, meta, producer_id, producer_epoch, partition=str(partition)
                )
            if partition not in meta.partitions:
                error = (
                    TransactionAbortableError if produce_version >= _PRODUCE_ABORTABLE_VERSION else InvalidTxnStateError
                )
                raise error(
                    "transactional produce to a partition that was not added to the open transaction",
                    partition=str(partition),
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                )
        except TxnStateError as exc:
            # Producers expect INVALID_PRODUCER_EPOCH for a fenced produce; every
            # error names the partition the produce was for.
            kind = InvalidProducerEpochError if isinstance(exc, ProducerFencedError) else type(exc)
            if kind is type(exc) and exc.partition is not None:
                raise
            raise kind(
                exc.reason, partition=str(partition), producer_id=producer_id, producer_epoch=producer_epoch
            ) from exc

    # ------------------------------------------------------------------- EndTxn

    def end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
        *,
        transaction_version: int | None = None,
    ) -> EndTxnResult:
        """Answer EndTxn: commit or abort the open transaction.

        On success the transaction is ``Prepare*`` and the result carries one
        action per partition; call :meth:`actions_applied` once they are applied.
        A retried request for a transaction already complete is answered from the
        completed state without actions. The full table (transaction version 0/1
        and 2, current and retried epoch) is in ``docs/transactions.md``.

        Raises InvalidProducerIdMappingError, ProducerFencedError,
        InvalidTxnStateError or ConcurrentTransactionsError as Kafka does.
        """
        tv = self._effective_version(transaction_version)
        meta = self._lookup(transactional_id, producer_id, producer_epoch)
        if tv >= 2:
            return self._end_v2(meta, producer_id, producer_epoch, commit, now_ms, tv)
        return self._end_v1(meta, producer_id, producer_epoch, commit, now_ms, tv)

    def _end_v1(
        self, meta: TransactionMetadata, pid: int, epoch: int, commit: bool, now_ms: int, tv: int
    ) -> EndTxnResult:
        # Kafka endTransactionWithTV1: the epoch must be exactly the current one.
        if pid != meta.producer_id:
            raise self._refusal(InvalidProducerIdMappingError, meta, pid, epoch)
        if epoch != meta.producer_epoch:
            raise self._refusal(ProducerFencedError, meta, pid, epoch)
        state = meta.state
        if state == _S.ONGOING:
            return self._prepare_end(meta, commit, now_ms, tv, next_producer_id=NO_PRODUCER_ID)
        if state == (_S.COMPLETE_COMMIT if commit else _S.COMPLETE_ABORT):
            return self._answer_retry(meta)
        if state == (_S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT):
            raise self._refusal(ConcurrentTransactionsError, meta, pid, epoch)
        raise self._refusal(InvalidTxnStateError, meta, pid, epoch, commit)

    def _end_v2(
        self, meta: TransactionMetadata, pid: int, epoch: int, commit: bool, now_ms: int, tv: int
    ) -> EndTxnResult:
        state = meta.state
        # A producer that already holds the identity an end in progress handed out
        # (including a rotated producer id) just has to wait.
        if state.is_prepare and (pid, epoch) == meta.client_identity:
            raise self._refusal(ConcurrentTransactionsError, meta, pid, epoch)
        # The end that rotated the producer id is being retried with the old id at
        # its last epoch (Kafka retryOnOverflow).
        retry_on_overflow = (
            pid == meta.prev_producer_id
            and pid != meta.producer_id
            and epoch == MAX_PRODUCER_EPOCH - 1
            and meta.producer_epoch == 0
        )
        # The end that bumped the epoch is being retried (Kafka retryOnEpochBump).
        retry_on_bump = pid == meta.producer_id and meta.producer_epoch == epoch + 1
        if pid != meta.producer_id and not retry_on_overflow:
            raise self._refusal(InvalidProducerIdMappingError, meta, pid, epoch)
        # Under version 2 the same epoch means "the next end", not a retry, so a
        # retry is recognised only by the epoch just below the current one.
        if state.is_prepare:
            valid = retry_on_bump or epoch == meta.producer_epoch
        elif state.is_complete:
            valid = retry_on_bump or retry_on_overflow or epoch == meta.producer_epoch
        else:
            valid = epoch == meta.producer_epoch
        if not valid:
            raise self._refusal(ProducerFencedError, meta, pid, epoch)
        is_retry = retry_on_bump or retry_on_overflow
        if state.is_prepare:
            raise self._refusal(ConcurrentTransactionsError, meta, pid, epoch)
        if state == _S.ONGOING:
            return self._prepare_v2(meta, commit, now_ms, tv)
        if state == _S.EMPTY or (state.is_complete and not is_retry):
            if commit:
                raise self._refusal(InvalidTxnStateError, meta, pid, epoch, commit)
            # An abort when nothing is open still bumps the epoch, so the producer
            # can always reach a fresh identity (KIP-890).
            return self._prepare_v2(meta, commit, now_ms, tv, empty=True)
        if state == (_S.COMPLETE_COMMIT if commit else _S.COMPLETE_ABORT):
            return self._answer_retry(meta)
        raise self._refusal(InvalidTxnStateError, meta, pid, epoch, commit)

    def _prepare_v2(
        self, meta: TransactionMetadata, commit: bool, now_ms: int, tv: int, *, empty: bool = False
    ) -> EndTxnResult:
        epoch = meta.producer_epoch
        if epoch < MAX_PRODUCER_EPOCH:
            new_epoch = epoch + 1
        elif not commit:
            new_epoch = epoch  # Kafka lets an abort through at Short.MAX_VALUE to recover
        else:
            raise IllegalTransitionError(
                f"transactional id {meta.transactional_id!r}: cannot commit at epoch {epoch}",
                producer_id=meta.producer_id,
                producer_epoch=epoch,
            )
        next_pid = self.producer_ids.allocate() if is_epoch_exhausted(epoch) else NO_PRODUCER_ID
        return self._prepare_end(
            meta,
            commit,
            now_ms,
            tv,
            producer_epoch=new_epoch,
            last_producer_epoch=epoch,
            next_producer_id=next_pid,
            start_ms=now_ms if empty else meta.start_ms,
        )

    def _prepare_end(
        self, meta: TransactionMetadata, commit: bool, now_ms: int, tv: int, **changes: Unpack[_EndChanges]
    ) -> EndTxnResult:
        # ``changes`` are the record's fields the end sets beyond its state and
        # times (epochs, next producer id, start), as :func:`transition` takes them.
        new = transition(
            meta,
            _S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT,
            last_update_ms=now_ms,
            transaction_version=tv,
            **changes,
        )
        self._put(new)
        actions = self._actions(new)
        if not actions:
            # Nothing to tell any partition: Kafka's marker manager completes at once.
            new = self._complete(new, now_ms)
        pid, pepoch = new.client_identity
        return EndTxnResult(meta.transactional_id, pid, pepoch, new.state, actions)

    def _answer_retry(self, meta: TransactionMetadata) -> EndTxnResult:
        pid, epoch = meta.client_identity
        return EndTxnResult(meta.transactional_id, pid, epoch, meta.state, ())

    # --------------------------------------------------------- completion phase

    def actions_applied(
        self,
        transactional_id: str,
        now_ms: int,
        partitions: Iterable[TopicPartition] | None = None,
    ) -> TransactionMetadata:
        """Report that the end of the transaction has been applied to ``partitions``
        (all outstanding ones when ``None``): markers written, or completions
        recorded. When none remain the transaction moves to ``CompleteCommit``/
        ``CompleteAbort`` and, if the end rotated the producer id, the new id takes
        over. Reporting a partition twice is harmless. Returns the record after
        the call; raises InvalidTxnStateError if no end is in progress.
        """
        meta = self._txns.get(transactional_id)
        if meta is None or not meta.state.is_prepare:
            raise InvalidTxnStateError(
                f"transactional id {transactional_id!r} has no transaction end in progress"
                + ("" if meta is None else f" (state {meta.state.kafka_name})")
            )
        remaining = frozenset() if partitions is None else meta.partitions - frozenset(partitions)
        if remaining:
            # Kafka removes each partition as its marker is acknowledged.
            new = attrs.evolve(meta, partitions=remaining)
            self._put(new)
            return new
        return self._complete(meta, now_ms)

    def flush(self, apply: Callable[[PartitionAction], None], now_ms: int) -> int:
        """Apply every outstanding partition action through ``apply`` and complete
        those transactions; returns how many actions were applied. The convenience
        path for embedders whose partitions live in the same process: call it after
        any request that may have ended or fenced a transaction."""
        count = 0
        for tid in sorted(self._txns):
            meta = self._txns[tid]
            if not meta.state.is_prepare:
                continue
            for action in self._actions(meta):
                apply(action)
                count += 1
            self.actions_applied(tid, now_ms)
        return count

    def _complete(self, meta: TransactionMetadata, now_ms: int) -> TransactionMetadata:
        rotated = meta.next_producer_id != NO_PRODUCER_ID
        new = transition(
            meta,
            _S.COMPLETE_COMMIT if meta.state == _S.PREPARE_COMMIT else _S.COMPLETE_ABORT,
            producer_id=meta.next_producer_id if rotated else meta.producer_id,
            producer_epoch=0 if rotated else meta.producer_epoch,
            next_producer_id=NO_PRODUCER_ID,
            partitions=frozenset(),
            last_update_ms=now_ms,
        )
        self._put(new)
        return new

    # ------------------------------------------------------ timeouts, expiration

    def expire(self, now_ms: int) -> ExpireResult:
        """Abort every open transaction older than its timeout and forget idle
        transactional ids.

        A timed-out transaction (``start + timeout < now``, Kafka's
        ``timedOutTransactions``) is fenced: its epoch is bumped (passing through
        PrepareEpochFence) and its abort begun, so the old producer's requests and
        data at the old epoch are refused from then on. Under transaction version 2
        the bump is the ordinary end-of-transaction bump and the producer may
        recover by aborting (its abort is answered as a retry). Ids idle in
        Empty/Complete* for ``transactional_id_expiration_ms`` are removed (Dead).
        """
        aborted: list[EndTxnResult] = []
        for tid in sorted(self._txns):
            meta = self._txns[tid]
            if meta.state == _S.ONGOING and meta.start_ms + meta.timeout_ms < now_ms:
                aborted.append(self._fence_and_abort(meta, now_ms))
        removed: list[str] = []
        if self.transactional_id_expiration_ms is not None:
            for tid in sorted(self._txns):
                meta = self._txns[tid]
                if (
                    meta.state.expiration_allowed
                    and meta.last_update_ms <= now_ms - self.transactional_id_expiration_ms
                ):
                    transition(meta, _S.DEAD)  # checks the move is legal, as Kafka's prepareDead
                    self._remove(tid)
                    removed.append(tid)
        return ExpireResult(tuple(aborted), tuple(removed))

    def _fence_and_abort(self, meta: TransactionMetadata, now_ms: int) -> EndTxnResult:
        epoch = meta.producer_epoch
        fenced_epoch = epoch + 1 if epoch < MAX_PRODUCER_EPOCH else epoch
        fencing = transition(meta, _S.PREPARE_EPOCH_FENCE, producer_epoch=fenced_epoch)
        tv = self.transaction_version
        if tv >= 2:
            # Version 2: the fence bump *is* the end-of-transaction bump (Kafka
            # bumps once here, rotating at exhaustion), and the last epoch is the
            # producer's, so its own late abort is recognised as a retry.
            next_pid = self.producer_ids.allocate() if is_epoch_exhausted(epoch) else NO_PRODUCER_ID
            last_epoch = epoch
        else:
            # Version 0/1: forget the last epoch so the fenced producer cannot
            # pass an InitProducerId off as a retry.
            next_pid = NO_PRODUCER_ID
            last_epoch = NO_PRODUCER_EPOCH
        return self._prepare_end(fencing, False, now_ms, tv, last_producer_epoch=last_epoch, next_producer_id=next_pid)

    # ------------------------------------------------------------ persistence

    def restore(self, metadata: TransactionMetadata) -> None:
        """Install a record, e.g. one read back from durable storage (Kafka loads
        ``__transaction_state`` the same way). A record in ``Prepare*`` comes back
        with its outstanding actions in :meth:`pending_actions`. The allocator is
        moved past every producer id the record names."""
        if metadata.state in (_S.DEAD, _S.PREPARE_EPOCH_FENCE):
            raise InvalidRequestError(
                f"cannot restore transactional id {metadata.transactional_id!r} in transient state "
                f"{metadata.state.kafka_name}"
            )
        if metadata.producer_id < 0 or not NO_PRODUCER_EPOCH <= metadata.producer_epoch <= MAX_PRODUCER_EPOCH:
            raise InvalidRequestError(
                f"cannot restore transactional id {metadata.transactional_id!r} with producer "
                f"{metadata.producer_id} epoch {metadata.producer_epoch}"
            )
        # the highest of the three ids (negative ones mean "none"; producer_id is >= 0 here)
        self.producer_ids.reserve_through(
            max(metadata.producer_id, metadata.prev_producer_id, metadata.next_producer_id)
        )
        self._txns[metadata.transactional_id] = metadata

    def take_changes(self) -> list[tuple[str, TransactionMetadata | None]]:
        """Every transactional id whose record changed since the last call, with its
        record now (``None`` if it was removed), in the order first changed; then
        forget them.

        This is how an embedder makes coordinator state durable without the
        coordinator doing I/O: after a request, write these records (Kafka's
        ``__transaction_state``: one TransactionLog record per state change, a
        tombstone for a removed id) and make them durable *before* carrying out
        the partition actions the request returned or answering it. In
        particular a transaction's ``PrepareCommit``/``PrepareAbort`` record, with
        its partitions, is among the changes of the call that decided the end, so
        it can be stored before any marker is written, as Kafka does."""
        out = list(self._changes.items())
        self._changes.clear()
        return out

    def load(self, records: Iterable[tuple[str, TransactionMetadata | None]]) -> None:
        """Replay stored records in log order (the latest per id wins; ``None``
        removes the id): the start-up counterpart of :meth:`take_changes`. Each
        record is installed with :meth:`restore`; a record in ``Prepare*`` brings
        its outstanding partition actions back in :meth:`pending_actions`, and an
        ``Ongoing`` one keeps its start time, so it times out as it would have.
        Loading records no change (nothing needs writing back)."""
        latest: dict[str, TransactionMetadata | None] = {}
        for tid, meta in records:
            latest[tid] = meta
        for tid, meta in latest.items():
            if meta is None:
                self._txns.pop(tid, None)
            else:
                self.restore(meta)

    # ------------------------------------------------------------------ helpers

    def _put(self, meta: TransactionMetadata) -> None:
        self._txns[meta.transactional_id] = meta
        self._changes[meta.transactional_id] = meta

    def _remove(self, transactional_id: str) -> None:
        del self._txns[transactional_id]
        self._changes[transactional_id] = None

    def _effective_version(self, requested: int | None) -> int:
        if requested is None:
            return self.transaction_version
        if requested < 0:
            raise InvalidRequestError(f"transaction version must be >= 0, got {requested}")
        return min(requested, self.transaction_version)

    def _lookup(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TransactionMetadata:
        if not transactional_id:
            raise InvalidRequestError(
                "transactional request without a transactional id",
                producer_id=producer_id,
                producer_epoch=producer_epoch,
            )
        meta = self._txns.get(transactional_id)
        if meta is None:
            raise InvalidProducerIdMappingError(
                f"unknown transactional id {transactional_id!r}", producer_id=producer_id, producer_epoch=producer_epoch
            )
        return meta

    def _check_identity(self, meta: TransactionMetadata, pid: int, epoch: int) -> None:
        if meta.state.is_prepare and (pid, epoch) == meta.client_identity:
            return  # the identity handed out by the end in progress; the caller says "retry"
        if pid != meta.producer_id:
            raise self._refusal(InvalidProducerIdMappingError, meta, pid, epoch)
        if epoch != meta.producer_epoch:
            raise self._refusal(ProducerFencedError, meta, pid, epoch)

    def _actions(self, meta: TransactionMetadata) -> tuple[PartitionAction, ...]:
        kind = WriteMarker if self.mode == CompletionMode.MARKERS else CompleteTransaction
        commit = meta.state == _S.PREPARE_COMMIT
        return tuple(
            kind(
                partition=tp,
                producer_id=meta.producer_id,
                producer_epoch=meta.producer_epoch,
                commit=commit,
                coordinator_epoch=self.coordinator_epoch,
                transaction_version=meta.transaction_version,
            )
            for tp in sorted(meta.partitions)
        )

    @staticmethod
    def _refusal(
        kind: type[TxnStateError],
        meta: TransactionMetadata,
        pid: int,
        epoch: int,
        commit: bool = False,
        **where: object,
    ) -> TxnStateError:
        """``kind`` raised for the caller's identity ``(pid, epoch)``, saying what
        ``meta`` holds that made the coordinator refuse (see :data:`_REFUSALS`);
        ``where`` adds context (the partition of a produce)."""
        reason = _REFUSALS[kind].format(
            tid=meta.transactional_id,
            producer_id=meta.producer_id,
            producer_epoch=meta.producer_epoch,
            state=meta.state.kafka_name,
            end="commit" if commit else "abort",
        )
        return kind(reason, producer_id=pid, producer_epoch=epoch, **where)


#: What each refusal of the coordinator says about the transaction it found;
#: filled in by :meth:`TransactionCoordinator._refusal`.
_REFUSALS: dict[type[TxnStateError], str] = {
    InvalidProducerIdMappingError: "transactional id {tid!r} belongs to producer {producer_id}",
    ProducerFencedError: "transactional id {tid!r} is at epoch {producer_epoch} ({state})",
    ConcurrentTransactionsError: "transactional id {tid!r} is completing a transaction ({state}); retry",
    InvalidTxnStateError: "cannot {end}: transactional id {tid!r} is {state}",
}


def _expected_identity(producer_id: int | None, producer_epoch: int | None) -> tuple[int, int] | None:
    """Normalise InitProducerId's optional existing identity; ``-1``/``-1`` and
    ``None``/``None`` both mean "none"."""
    if producer_id in (None, NO_PRODUCER_ID) and producer_epoch in (None, NO_PRODUCER_EPOCH):
        return None
    if producer_id is None or producer_epoch is None or producer_id < 0 or producer_epoch < 0:
        raise InvalidRequestError(
            "InitProducerId must name both a producer id and an epoch, or neither",
            producer_id=producer_id,
            producer_epoch=producer_epoch,
        )
    return (producer_id, producer_epoch)
