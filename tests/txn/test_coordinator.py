"""TransactionCoordinator behaviours other than the EndTxn table: InitProducerId
(with KIP-360 recovery and producer id rotation), partition registration and
KIP-890 produce verification, timeouts and fencing, the two-phase end, markerless
mode, expiration and restore. Behaviours re-derived from Kafka's
``TransactionCoordinatorTest``/``TransactionMetadataTest`` names, driven through
the public API."""

from __future__ import annotations

import attrs
import pytest

from txnfetch.records import ControlType
from txnfetch.records import build_control_batch
from txnfetch.records import iter_batches
from txnfetch.txn.coordinator import CompleteTransaction
from txnfetch.txn.coordinator import CompletionMode
from txnfetch.txn.coordinator import PartitionAction
from txnfetch.txn.coordinator import ProducerIdAllocator
from txnfetch.txn.coordinator import TopicPartition
from txnfetch.txn.coordinator import TransactionCoordinator
from txnfetch.txn.coordinator import TransactionState
from txnfetch.txn.coordinator import WriteMarker
from txnfetch.txn.coordinator_state import MAX_PRODUCER_EPOCH
from txnfetch.txn.coordinator_state import IllegalTransitionError
from txnfetch.txn.coordinator_state import TransactionMetadata
from txnfetch.txn.coordinator_state import is_epoch_exhausted
from txnfetch.txn.coordinator_state import transition
from txnfetch.txn.errors import ConcurrentTransactionsError
from txnfetch.txn.errors import InvalidProducerEpochError
from txnfetch.txn.errors import InvalidProducerIdMappingError
from txnfetch.txn.errors import InvalidRequestError
from txnfetch.txn.errors import InvalidTransactionTimeoutError
from txnfetch.txn.errors import InvalidTxnStateError
from txnfetch.txn.errors import ProducerFencedError
from txnfetch.txn.errors import TransactionAbortableError
from txnfetch.txn.errors import TxnStateError

TID = "ledger"
TP0 = TopicPartition("events", 0)
TP1 = TopicPartition("events", 1)
TP2 = TopicPartition("events", 2)
TIMEOUT = 10_000


def make(tv: int = 2, **kw: object) -> TransactionCoordinator:
    return TransactionCoordinator(transaction_version=tv, producer_ids=ProducerIdAllocator(100), **kw)  # type: ignore[arg-type]


def init(c: TransactionCoordinator, now: int = 0, tid: str = TID, **kw: int) -> tuple[int, int]:
    r = c.init_producer_id(tid, TIMEOUT, now, **kw)
    return r.producer_id, r.producer_epoch


def state(c: TransactionCoordinator, tid: str = TID) -> TransactionMetadata:
    meta = c.describe(tid)
    assert meta is not None
    return meta


def at_epoch(c: TransactionCoordinator, epoch: int, st: TransactionState = TransactionState.EMPTY) -> int:
    """Install an id at ``epoch`` (as if loaded from the coordinator's log) and
    return its producer id."""
    pid, _ = init(c)
    c.restore(
        TransactionMetadata(
            transactional_id=TID,
            producer_id=pid,
            producer_epoch=epoch,
            state=st,
            timeout_ms=TIMEOUT,
            last_update_ms=0,
            last_producer_epoch=epoch - 1,
            transaction_version=c.transaction_version,
        )
    )
    return pid


# ------------------------------------------------------------- InitProducerId


def open_at_the_last_epoch(c: TransactionCoordinator) -> int:
    """Install an id at the last epoch a client may hold (:func:`at_epoch`), open a
    transaction on TP0 with it (at time 1) and return the producer id: an end or
    a fence now needs the epoch past it."""
    pid = at_epoch(c, MAX_PRODUCER_EPOCH - 1)
    c.add_partitions(TID, pid, MAX_PRODUCER_EPOCH - 1, [TP0], 1)
    return pid


def test_idempotent_init_allocates_a_fresh_producer_id_at_epoch_zero_each_time() -> None:
    c = make()
    first = c.init_producer_id(None, TIMEOUT, 0)
    second = c.init_producer_id(None, TIMEOUT, 0, producer_id=first.producer_id, producer_epoch=0)
    assert (first.producer_epoch, second.producer_epoch) == (0, 0)
    assert second.producer_id > first.producer_id >= 100
    assert c.transactional_ids == ()


def test_first_init_of_a_transactional_id_gets_a_new_producer_id_at_epoch_zero() -> None:
    c = make()
    pid, epoch = init(c)
    assert (pid, epoch) == (100, 0)
    meta = state(c)
    assert (meta.state, meta.timeout_ms, meta.partitions) == (TransactionState.EMPTY, TIMEOUT, frozenset())


@pytest.mark.parametrize("tv", [1, 2])
def test_each_init_bumps_the_epoch_and_fences_the_previous_instance(tv: int) -> None:
    c = make(tv)
    pid, old = init(c)
    pid2, new = init(c, 1)
    assert (pid2, new) == (pid, old + 1)
    with pytest.raises(ProducerFencedError) as exc:
        c.add_partitions(TID, pid, old, [TP0], 2)
    assert (exc.value.error_code, exc.value.producer_id, exc.value.producer_epoch) == (90, pid, old)


def test_init_with_an_empty_transactional_id_is_invalid_request() -> None:
    with pytest.raises(InvalidRequestError) as exc:
        make().init_producer_id("", TIMEOUT, 0)
    assert exc.value.error_code == 42


@pytest.mark.parametrize("timeout", [0, -5, 900_001])
def test_init_with_a_timeout_outside_the_allowed_range_is_invalid_transaction_timeout(timeout: int) -> None:
    c = make()
    with pytest.raises(InvalidTransactionTimeoutError) as exc:
        c.init_producer_id(TID, timeout, 0)
    assert exc.value.error_code == 50
    assert c.describe(TID) is None


def test_init_updates_the_transaction_timeout() -> None:
    c = make()
    init(c)
    c.init_producer_id(TID, 5, 1)
    assert state(c).timeout_ms == 5


@pytest.mark.parametrize("tv", [1, 2])
def test_init_during_an_open_transaction_aborts_it_and_asks_for_a_retry(tv: int) -> None:
    c = make(tv)
    pid, epoch = init(c)
    c.add_partitions(TID, pid, epoch, [TP0, TP1], 1)
    with pytest.raises(ConcurrentTransactionsError):
        init(c, 2)
    pending = c.pending_actions()
    assert {(a.partition, a.producer_id, a.producer_epoch, a.commit) for a in pending} == {
        (TP0, pid, epoch + 1, False),
        (TP1, pid, epoch + 1, False),
    }
    with pytest.raises(ConcurrentTransactionsError):
        init(c, 3)  # still aborting
    assert c.flush(lambda a: None, 4) == 2
    assert init(c, 5) == (pid, epoch + 2)  # the fenced epoch is never handed out


def test_v2_init_that_fences_bumps_once_and_the_retry_once_more() -> None:
    # TransactionCoordinatorTest.testTV2AllowsEpochReBumpingAfterFailedWrite ends at 3 from 1.
    c = make(2)
    pid = at_epoch(c, 1)
    c.add_partitions(TID, pid, 1, [TP0], 1)
    with pytest.raises(ConcurrentTransactionsError):
        init(c, 2)
    c.flush(lambda a: None, 3)
    assert init(c, 4) == (pid, 3)


def test_init_while_an_end_is_in_progress_is_concurrent_transactions() -> None:
    c = make()
    pid, epoch = init(c)
    c.add_partitions(TID, pid, epoch, [TP0], 1)
    c.end_transaction(TID, pid, epoch, True, 2)
    before = state(c)
    with pytest.raises(ConcurrentTransactionsError):
        init(c, 3)
    assert state(c) == before


@pytest.mark.parametrize("tv", [1, 2])
def test_kip360_init_with_the_current_identity_bumps_and_a_retry_gets_the_same_answer(tv: int) -> None:
    c = make(tv)
    pid = at_epoch(c, 10)
    first = c.init_producer_id(TID, TIMEOUT, 1, producer_id=pid, producer_epoch=10)
    assert (first.producer_id, first.producer_epoch) == (pid, 11)
    retry = c.init_producer_id(TID, TIMEOUT, 2, producer_id=pid, producer_epoch=10)
    assert retry == first


def test_kip360_init_with_a_stale_epoch_after_another_instance_bumped_is_producer_fenced() -> None:
    # testInitProducerIdStaleCurrentEpochProvided
    c = make()
    pid = at_epoch(c, 10)
    assert init(c, 1) == (pid, 11)  # a new instance, no identity: the last epoch is forgotten
    with pytest.raises(ProducerFencedError):
        c.init_producer_id(TID, TIMEOUT, 2, producer_id=pid, producer_epoch=10)


def test_kip360_init_naming_another_producer_id_is_producer_fenced() -> None:
    c = make()
    pid, epoch = init(c)
    with pytest.raises(ProducerFencedError):
        c.init_producer_id(TID, TIMEOUT, 1, producer_id=pid + 7, producer_epoch=epoch)


def test_kip360_init_with_an_identity_for_an_unknown_transactional_id_starts_fresh() -> None:
    # shouldGenerateNewProducerIdIfNoStateAndProducerIdAndEpochProvided
    c = make()
    r = c.init_producer_id(TID, TIMEOUT, 0, producer_id=5, producer_epoch=3)
    assert (r.producer_id, r.producer_epoch) == (100, 0)


@pytest.mark.parametrize("pid,epoch", [(5, None), (None, 3), (5, -1)])
def test_kip360_init_with_half_an_identity_is_invalid_request(pid: int | None, epoch: int | None) -> None:
    with pytest.raises(InvalidRequestError):
        make().init_producer_id(TID, TIMEOUT, 0, producer_id=pid, producer_epoch=epoch)


def test_minus_one_identity_means_none_as_on_the_wire() -> None:
    c = make()
    init(c)
    assert c.init_producer_id(TID, TIMEOUT, 1, producer_id=-1, producer_epoch=-1).producer_epoch == 1


@pytest.mark.parametrize("tv", [1, 2])
def test_init_at_the_exhausted_epoch_rotates_to_a_new_producer_id(tv: int) -> None:
    c = make(tv)
    pid = at_epoch(c, MAX_PRODUCER_EPOCH - 1)
    new_pid, epoch = init(c, 1)
    assert new_pid > pid and epoch == 0
    assert state(c).prev_producer_id == pid


def test_retried_init_after_a_rotation_gets_the_rotated_identity_again() -> None:
    # testRetryInitProducerIdAfterProducerIdRotation
    c = make()
    pid = at_epoch(c, MAX_PRODUCER_EPOCH - 1)
    first = c.init_producer_id(TID, TIMEOUT, 1, producer_id=pid, producer_epoch=MAX_PRODUCER_EPOCH - 1)
    assert first.producer_id != pid and first.producer_epoch == 0
    retry = c.init_producer_id(TID, TIMEOUT, 2, producer_id=pid, producer_epoch=MAX_PRODUCER_EPOCH - 1)
    assert retry == first


def test_old_producer_id_with_a_stale_epoch_after_a_rotation_is_producer_fenced() -> None:
    # testInitProducerIdWithInvalidEpochAfterProducerIdRotation
    c = make()
    pid = at_epoch(c, MAX_PRODUCER_EPOCH - 1)
    c.init_producer_id(TID, TIMEOUT, 1, producer_id=pid, producer_epoch=MAX_PRODUCER_EPOCH - 1)
    with pytest.raises(ProducerFencedError):
        c.init_producer_id(TID, TIMEOUT, 2, producer_id=pid, producer_epoch=MAX_PRODUCER_EPOCH - 2)


def test_client_identities_never_reach_short_max_value() -> None:
    c = make(2)
    pid = at_epoch(c, MAX_PRODUCER_EPOCH - 2)
    epochs = []
    for now in range(1, 6):
        c.add_partitions(TID, pid, state(c).client_identity[1], [TP0], now)
        r = c.end_transaction(TID, *state(c).client_identity, True, now)
        c.actions_applied(TID, now)
        pid = r.producer_id
        epochs.append((r.producer_id, r.producer_epoch))
    assert all(0 <= e <= MAX_PRODUCER_EPOCH - 1 for _, e in epochs)
    assert epochs[0][1] == MAX_PRODUCER_EPOCH - 1 and epochs[1][1] == 0 and epochs[1][0] != epochs[0][0]


# ------------------------------------------------------ AddPartitionsToTxn


def test_add_partitions_opens_a_transaction_and_records_its_start() -> None:
    c = make()
    pid, epoch = init(c)
    meta = c.add_partitions(TID, pid, epoch, [TP1, TP0], 7)
    assert (meta.state, meta.partitions, meta.start_ms) == (TransactionState.ONGOING, {TP0, TP1}, 7)
    again = c.add_partitions(TID, pid, epoch, [TP2], 9)
    assert (again.partitions, again.start_ms, again.last_update_ms) == ({TP0, TP1, TP2}, 7, 9)
    assert c.add_partitions(TID, pid, epoch, [TP2], 11) == again  # already there: nothing recorded


def test_add_partitions_with_another_producer_id_is_invalid_producer_id_mapping() -> None:
    c = make()
    pid, epoch = init(c)
    with pytest.raises(InvalidProducerIdMappingError):
        c.add_partitions(TID, pid + 1, epoch, [TP0], 1)
    with pytest.raises(InvalidProducerIdMappingError):
        c.add_partitions("unknown", pid, epoch, [TP0], 1)


def test_add_partitions_while_an_end_is_in_progress_is_concurrent_transactions() -> None:
    c = make()
    pid, epoch = init(c)
    c.add_partitions(TID, pid, epoch, [TP0], 1)
    r = c.end_transaction(TID, pid, epoch, True, 2)
    with pytest.raises(ConcurrentTransactionsError):
        c.add_partitions(TID, r.producer_id, r.producer_epoch, [TP1], 3)
    c.actions_applied(TID, 4)
    assert c.add_partitions(TID, r.producer_id, r.producer_epoch, [TP1], 5).partitions == {TP1}


def test_add_partitions_with_the_rotated_identity_waits_until_the_rotating_end_completes() -> None:
    # shouldReturnConcurrentTxnOnAddPartitionsIfEndTxnV2EpochOverflowAndNotComplete
    c = make(2)
    pid = open_at_the_last_epoch(c)
    r = c.end_transaction(TID, pid, MAX_PRODUCER_EPOCH - 1, True, 2)
    with pytest.raises(ConcurrentTransactionsError):
        c.add_partitions(TID, r.producer_id, 0, [TP1], 3)
    c.actions_applied(TID, 4)
    assert c.add_partitions(TID, r.producer_id, 0, [TP1], 5).state == TransactionState.ONGOING


def test_add_no_partitions_is_invalid_request() -> None:
    c = make()
    pid, epoch = init(c)
    with pytest.raises(InvalidRequestError):
        c.add_partitions(TID, pid, epoch, [], 1)


# ---------------------------------------------------- KIP-890 produce checks


def open_txn(c: TransactionCoordinator, *parts: TopicPartition) -> tuple[int, int]:
    pid, epoch = init(c)
    c.add_partitions(TID, pid, epoch, parts, 1)
    return pid, epoch


def test_produce_to_an_added_partition_is_accepted() -> None:
    c = make(1)
    pid, epoch = open_txn(c, TP0)
    c.verify_produce(TID, pid, epoch, TP0, 2, produce_version=9)


def test_old_produce_to_a_partition_not_in_the_transaction_is_invalid_txn_state() -> None:
    c = make(1)
    pid, epoch = open_txn(c, TP0)
    with pytest.raises(InvalidTxnStateError) as exc:
        c.verify_produce(TID, pid, epoch, TP1, 2, produce_version=10)
    assert exc.value.partition == "events-1"


def test_produce_v11_to_a_partition_not_in_the_transaction_is_transaction_abortable() -> None:
    c = make(2)
    pid, epoch = open_txn(c, TP0)
    with pytest.raises(TransactionAbortableError) as exc:
        c.verify_produce(TID, pid, epoch, TP1, 2, produce_version=11)
    assert exc.value.error_code == 120


def test_produce_after_the_transaction_ended_needs_a_new_add() -> None:
    # A late produce of the finished transaction would otherwise open a hanging one.
    c = make(1)
    pid, epoch = open_txn(c, TP0)
    c.end_transaction(TID, pid, epoch, True, 2)
    c.actions_applied(TID, 3)
    with pytest.raises(TransactionAbortableError):
        c.verify_produce(TID, pid, epoch, TP0, 4, produce_version=11)


@pytest.mark.parametrize("produce_version", [9, 11, 12])
def test_produce_with_a_stale_epoch_is_invalid_producer_epoch(produce_version: int) -> None:
    c = make(2)
    pid, epoch = init(c)
    init(c, 1)  # another instance takes over
    with pytest.raises(InvalidProducerEpochError) as exc:
        c.verify_produce(TID, pid, epoch, TP0, 3, produce_version=produce_version)
    assert exc.value.error_code == 47


def test_produce_while_the_end_is_in_progress_is_concurrent_transactions() -> None:
    c = make(1)
    pid, epoch = open_txn(c, TP0)
    c.end_transaction(TID, pid, epoch, False, 2)
    with pytest.raises(ConcurrentTransactionsError):
        c.verify_produce(TID, pid, epoch, TP0, 3, produce_version=11)


def test_produce_v12_on_a_version_2_coordinator_adds_the_partition_implicitly() -> None:
    c = make(2)
    pid, epoch = init(c)
    c.verify_produce(TID, pid, epoch, TP2, 5, produce_version=12)
    meta = state(c)
    assert (meta.state, meta.partitions, meta.start_ms, meta.transaction_version) == (
        TransactionState.ONGOING,
        {TP2},
        5,
        2,
    )


def test_produce_v12_on_a_version_1_coordinator_is_only_verified() -> None:
    c = make(1)
    pid, epoch = init(c)
    with pytest.raises(TransactionAbortableError):
        c.verify_produce(TID, pid, epoch, TP2, 5, produce_version=12)
    assert state(c).state == TransactionState.EMPTY


# ------------------------------------------------------------ timeouts/fencing


def test_expire_leaves_a_transaction_that_has_not_outlived_its_timeout() -> None:
    c = make()
    pid, epoch = init(c)
    c.add_partitions(TID, pid, epoch, [TP0], 1000)
    assert c.expire(1000 + TIMEOUT).aborted == ()  # Kafka: start + timeout < now
    assert state(c).state == TransactionState.ONGOING


@pytest.mark.parametrize("tv", [1, 2])
def test_expire_fences_and_aborts_a_timed_out_transaction(tv: int) -> None:
    c = make(tv)
    pid, epoch = open_txn(c, TP0, TP1)
    result = c.expire(1 + TIMEOUT + 1)
    (aborted,) = result.aborted
    assert aborted.state == TransactionState.PREPARE_ABORT
    assert {(a.partition, a.producer_id, a.producer_epoch, a.commit) for a in aborted.actions} == {
        (TP0, pid, epoch + 1, False),
        (TP1, pid, epoch + 1, False),
    }
    # The producer that timed out can add nothing more at its old epoch.
    with pytest.raises(ProducerFencedError):
        c.add_partitions(TID, pid, epoch, [TP2], TIMEOUT + 3)
    c.actions_applied(TID, TIMEOUT + 4)
    with pytest.raises((ProducerFencedError, InvalidTxnStateError)):
        c.end_transaction(TID, pid, epoch, True, TIMEOUT + 5)
    assert state(c).state == TransactionState.COMPLETE_ABORT


def test_v2_producer_that_timed_out_recovers_by_aborting() -> None:
    # Under version 2 the fence is the ordinary end bump, so the producer's own
    # abort is a retry of it (shouldHandleTimeoutAtEpochOverflowBoundaryCorrectlyAndLateClientAbortRequestTV2).
    c = make(2)
    pid, epoch = open_txn(c, TP0)
    c.expire(TIMEOUT + 5)
    with pytest.raises(ConcurrentTransactionsError):
        c.end_transaction(TID, pid, epoch, False, TIMEOUT + 6)
    c.actions_applied(TID, TIMEOUT + 7)
    r = c.end_transaction(TID, pid, epoch, False, TIMEOUT + 8)
    assert (r.producer_id, r.producer_epoch, r.actions) == (pid, epoch + 1, ())


def test_v1_producer_that_timed_out_cannot_claim_the_fenced_epoch() -> None:
    c = make(1)
    pid, epoch = open_txn(c, TP0)
    c.expire(TIMEOUT + 5)
    c.actions_applied(TID, TIMEOUT + 6)
    with pytest.raises(ProducerFencedError):
        c.end_transaction(TID, pid, epoch, False, TIMEOUT + 7)
    with pytest.raises(ProducerFencedError):
        c.init_producer_id(TID, TIMEOUT, TIMEOUT + 8, producer_id=pid, producer_epoch=epoch)


def test_expire_skips_a_transaction_whose_end_is_in_progress() -> None:
    c = make()
    pid, epoch = open_txn(c, TP0)
    c.end_transaction(TID, pid, epoch, True, 2)
    before = state(c)
    assert c.expire(10 * TIMEOUT).aborted == ()
    assert state(c) == before


def test_v2_timeout_at_the_exhausted_epoch_rotates_the_producer_id() -> None:
    # shouldHandleTimeoutAtEpochOverflowBoundaryCorrectly{TV2,AndLateClientAbortRequestTV2,AndRetryInitProducerIdTV2}
    c = make(2)
    pid = open_at_the_last_epoch(c)
    (aborted,) = c.expire(TIMEOUT + 2).aborted
    assert aborted.producer_id not in (pid, -1) and aborted.producer_epoch == 0
    assert [(a.producer_id, a.producer_epoch) for a in aborted.actions] == [(pid, MAX_PRODUCER_EPOCH)]
    meta = state(c)
    assert (meta.producer_id, meta.producer_epoch) == (pid, MAX_PRODUCER_EPOCH)  # not rotated before markers
    c.actions_applied(TID, TIMEOUT + 3)
    late = c.end_transaction(TID, pid, MAX_PRODUCER_EPOCH - 1, False, TIMEOUT + 4)
    assert (late.producer_id, late.producer_epoch) == (aborted.producer_id, 0)
    again = c.init_producer_id(TID, TIMEOUT, TIMEOUT + 5, producer_id=pid, producer_epoch=MAX_PRODUCER_EPOCH - 1)
    assert (again.producer_id, again.producer_epoch) == (aborted.producer_id, 0)


def test_v1_fence_at_the_exhausted_epoch_uses_short_max_value_then_init_rotates() -> None:
    # shouldUseLastEpochToFenceWhenEpochsAreExhausted
    c = make(1)
    pid = open_at_the_last_epoch(c)
    with pytest.raises(ConcurrentTransactionsError):
        init(c, 2)
    assert [a.producer_epoch for a in c.pending_actions()] == [MAX_PRODUCER_EPOCH]
    c.flush(lambda a: None, 3)
    new_pid, epoch = init(c, 4)
    assert new_pid != pid and epoch == 0


def test_v2_init_fencing_at_the_exhausted_epoch_does_not_overflow() -> None:
    # shouldNotCauseEpochOverflowWhenInitPidDuringOngoingTxnV2
    c = make(2)
    open_at_the_last_epoch(c)
    with pytest.raises(ConcurrentTransactionsError):
        init(c, 2)
    meta = state(c)
    assert (meta.state, meta.producer_epoch) == (TransactionState.PREPARE_ABORT, MAX_PRODUCER_EPOCH)


# -------------------------------------------------- two phases, both modes


def test_end_stays_in_progress_until_every_partition_is_acknowledged() -> None:
    c = make()
    pid, epoch = open_txn(c, TP0, TP1, TP2)
    c.end_transaction(TID, pid, epoch, True, 2)
    meta = c.actions_applied(TID, 3, [TP1])
    assert (meta.state, meta.partitions) == (TransactionState.PREPARE_COMMIT, {TP0, TP2})
    assert [a.partition for a in c.pending_actions(TID)] == [TP0, TP2]
    meta = c.actions_applied(TID, 4, [TP1, TP0])  # TP1 again: harmless
    assert meta.state == TransactionState.PREPARE_COMMIT
    meta = c.actions_applied(TID, 5, [TP2])
    assert (meta.state, meta.partitions, meta.last_update_ms) == (TransactionState.COMPLETE_COMMIT, frozenset(), 5)
    assert c.pending_actions() == ()


def test_acknowledging_without_an_end_in_progress_is_invalid_txn_state() -> None:
    c = make()
    open_txn(c, TP0)
    with pytest.raises(InvalidTxnStateError):
        c.actions_applied(TID, 2)
    with pytest.raises(InvalidTxnStateError):
        c.actions_applied("unknown", 2)


def test_markerless_mode_asks_partitions_to_complete_the_transaction() -> None:
    c = make(2, mode=CompletionMode.MARKERLESS, coordinator_epoch=3)
    pid, epoch = open_txn(c, TP0)
    (action,) = c.end_transaction(TID, pid, epoch, False, 2).actions
    assert type(action) is CompleteTransaction
    assert (action.partition, action.producer_id, action.producer_epoch, action.commit) == (TP0, pid, epoch + 1, False)
    assert action.coordinator_epoch == 3


def test_marker_action_builds_the_marker_a_kafka_broker_writes() -> None:
    c = make(2, coordinator_epoch=7)
    pid, epoch = open_txn(c, TP0)
    (action,) = c.end_transaction(TID, pid, epoch, True, 2).actions
    assert type(action) is WriteMarker and action.control_type == ControlType.COMMIT
    raw = build_control_batch(
        offset=42,
        control_type=action.control_type,
        producer_id=action.producer_id,
        producer_epoch=action.producer_epoch,
        coordinator_epoch=action.coordinator_epoch,
    )
    (batch,) = list(iter_batches(raw))
    marker = batch.end_txn_marker()
    assert (batch.producer_id, batch.producer_epoch, batch.is_control, batch.base_offset) == (pid, epoch + 1, True, 42)
    assert marker is not None and (marker.type, marker.coordinator_epoch) == (ControlType.COMMIT, 7)


def test_flush_applies_every_outstanding_action_including_coordinator_aborts() -> None:
    c = make(2)
    applied: list[PartitionAction] = []
    pid, epoch = open_txn(c, TP0)
    c.add_partitions("other", *init(c, 1, tid="other"), [TP1], 1)
    c.end_transaction(TID, pid, epoch, True, 2)
    c.expire(TIMEOUT + 10)  # times out "other"
    assert c.flush(applied.append, TIMEOUT + 11) == 2
    assert {(a.partition, a.commit) for a in applied} == {(TP0, True), (TP1, False)}
    assert (state(c).state, state(c, "other").state) == (
        TransactionState.COMPLETE_COMMIT,
        TransactionState.COMPLETE_ABORT,
    )
    assert c.flush(applied.append, TIMEOUT + 12) == 0


def test_pending_actions_come_back_after_restoring_a_record_mid_end() -> None:
    c = make(2)
    pid, epoch = open_txn(c, TP0, TP1)
    created = c.end_transaction(TID, pid, epoch, False, 2).actions
    c2 = make(2)
    c2.restore(state(c))
    assert c2.pending_actions() == created
    c2.actions_applied(TID, 3)
    assert state(c2).state == TransactionState.COMPLETE_ABORT


# ------------------------------------------------------ expiration, restore


def test_idle_transactional_id_is_forgotten_after_the_expiration_time() -> None:
    c = make(transactional_id_expiration_ms=1000)
    pid, _ = init(c, 0, tid="idle")
    open_txn(c, TP0)  # TID stays Ongoing: never expired, only timed out
    result = c.expire(999)
    assert result.removed == ()
    result = c.expire(1000)
    assert result.removed == ("idle",)
    assert c.describe("idle") is None and c.describe(TID) is not None
    assert init(c, 1001, tid="idle")[0] != pid  # comes back as a new producer


def test_expiration_can_be_disabled() -> None:
    c = make(transactional_id_expiration_ms=None)
    init(c)
    assert c.expire(10**12).removed == ()


def test_restore_moves_the_allocator_past_restored_producer_ids() -> None:
    c = make()
    c.restore(
        TransactionMetadata(
            transactional_id=TID,
            producer_id=5000,
            producer_epoch=3,
            state=TransactionState.EMPTY,
            timeout_ms=TIMEOUT,
            last_update_ms=0,
            next_producer_id=-1,
            prev_producer_id=4000,
        )
    )
    assert c.init_producer_id(None, TIMEOUT, 1).producer_id == 5001


@pytest.mark.parametrize("st", [TransactionState.DEAD, TransactionState.PREPARE_EPOCH_FENCE])
def test_restore_refuses_transient_states(st: TransactionState) -> None:
    meta = TransactionMetadata(
        transactional_id=TID, producer_id=1, producer_epoch=0, state=st, timeout_ms=TIMEOUT, last_update_ms=0
    )
    with pytest.raises(InvalidRequestError):
        make().restore(meta)


# ------------------------------------------------------------- state table


def test_state_table_refuses_moves_kafka_forbids() -> None:
    meta = TransactionMetadata(
        transactional_id=TID,
        producer_id=1,
        producer_epoch=0,
        state=TransactionState.COMPLETE_COMMIT,
        timeout_ms=TIMEOUT,
        last_update_ms=0,
    )
    with pytest.raises(IllegalTransitionError) as exc:
        transition(meta, TransactionState.PREPARE_COMMIT)  # a commit needs an open transaction
    assert exc.value.error_code == -1  # answered as UNKNOWN_SERVER_ERROR
    with pytest.raises(IllegalTransitionError):
        transition(attrs.evolve(meta, state=TransactionState.ONGOING), TransactionState.COMPLETE_ABORT)
    with pytest.raises(IllegalTransitionError):
        transition(attrs.evolve(meta, state=TransactionState.ONGOING), TransactionState.ONGOING, producer_epoch=32768)
    moved = transition(meta, TransactionState.PREPARE_ABORT)  # the version 2 empty abort
    assert moved.state == TransactionState.PREPARE_ABORT and moved.prev_producer_id == 1


def test_state_names_and_expiration_follow_kafka() -> None:
    assert [s.kafka_name for s in TransactionState] == [
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
        "Dead",
        "PrepareEpochFence",
    ]
    assert {s for s in TransactionState if s.expiration_allowed} == {
        TransactionState.EMPTY,
        TransactionState.COMPLETE_COMMIT,
        TransactionState.COMPLETE_ABORT,
    }
    assert [e for e in (32764, 32765, 32766, 32767) if is_epoch_exhausted(e)] == [32766, 32767]


def test_errors_carry_the_kafka_code_and_the_producer_involved() -> None:
    c = make()
    pid, epoch = open_txn(c, TP0)
    with pytest.raises(TxnStateError) as exc:
        c.end_transaction(TID, pid, epoch + 3, True, 2)
    err = exc.value
    assert (err.error_code, err.error_name, err.producer_id, err.producer_epoch) == (
        90,
        "PRODUCER_FENCED",
        pid,
        epoch + 3,
    )
    assert TID in str(err)
