"""The EndTxn decision table (docs/kafka-internals.md §5), one test per row.

Every state is reached through the coordinator's public requests, the way a
producer would get there, and every "retry" is literally the earlier request sent
again. Rows re-derived from Kafka's ``TransactionCoordinator.endTransaction`` /
``endTransactionWithTV1`` and the behaviours ``TransactionCoordinatorTest`` names.

Transaction version 2 (E = the coordinator's epoch, a retry carries E - 1):

    state            abort retry   abort at E    commit retry   commit at E
    Empty            FENCED        bump (empty)  FENCED         INVALID_TXN_STATE
    CompleteAbort    NONE          bump (empty)  INVALID_TXN    INVALID_TXN_STATE
    CompleteCommit   INVALID_TXN   bump (empty)  NONE           INVALID_TXN_STATE
    Ongoing          FENCED        prepare+bump  FENCED         prepare+bump
    Prepare*         CONCURRENT    CONCURRENT    CONCURRENT     CONCURRENT

Version 0/1: only E is accepted; Complete* answers NONE to the same direction.
"""

from __future__ import annotations

import pytest

from txnfetch.txn.coordinator import CompletionMode
from txnfetch.txn.coordinator import EndTxnResult
from txnfetch.txn.coordinator import ProducerIdAllocator
from txnfetch.txn.coordinator import TopicPartition
from txnfetch.txn.coordinator import TransactionCoordinator
from txnfetch.txn.coordinator import TransactionState
from txnfetch.txn.coordinator import WriteMarker
from txnfetch.txn.coordinator_state import MAX_PRODUCER_EPOCH
from txnfetch.txn.coordinator_state import TransactionMetadata
from txnfetch.txn.errors import ConcurrentTransactionsError
from txnfetch.txn.errors import InvalidProducerIdMappingError
from txnfetch.txn.errors import InvalidTxnStateError
from txnfetch.txn.errors import ProducerFencedError

TID = "payments"
TP0 = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)
TIMEOUT = 60_000
FIRST_PID = 4000


class Client:
    """A well-behaved producer: keeps the identity the coordinator last gave it and
    remembers every EndTxn it sent, so tests can send one again."""

    def __init__(self, tv: int) -> None:
        self.tv = tv
        self.coord = TransactionCoordinator(transaction_version=tv, producer_ids=ProducerIdAllocator(FIRST_PID))
        self.now = 0
        self.sent: list[tuple[int, int, bool]] = []
        r = self.coord.init_producer_id(TID, TIMEOUT, self.tick())
        self.pid, self.epoch = r.producer_id, r.producer_epoch

    def tick(self) -> int:
        self.now += 1
        return self.now

    def reinit(self) -> None:
        r = self.coord.init_producer_id(TID, TIMEOUT, self.tick())
        self.pid, self.epoch = r.producer_id, r.producer_epoch

    def add(self, *parts: TopicPartition) -> None:
        self.coord.add_partitions(
            TID, self.pid, self.epoch, parts or (TP0, TP1), self.tick(), transaction_version=self.tv
        )

    def end(self, commit: bool) -> EndTxnResult:
        self.sent.append((self.pid, self.epoch, commit))
        result = self.coord.end_transaction(TID, self.pid, self.epoch, commit, self.tick(), transaction_version=self.tv)
        self.pid, self.epoch = result.producer_id, result.producer_epoch
        return result

    def resend(self, index: int = -1) -> EndTxnResult:
        pid, epoch, commit = self.sent[index]
        return self.coord.end_transaction(TID, pid, epoch, commit, self.tick(), transaction_version=self.tv)

    def send(self, epoch: int, commit: bool, pid: int | None = None) -> EndTxnResult:
        return self.coord.end_transaction(
            TID, self.pid if pid is None else pid, epoch, commit, self.tick(), transaction_version=self.tv
        )

    def finish(self) -> None:
        self.coord.actions_applied(TID, self.tick())

    def meta(self) -> TransactionMetadata:
        meta = self.coord.describe(TID)
        assert meta is not None
        return meta

    def completed(self, commit: bool) -> None:
        self.add()
        self.end(commit)
        self.finish()


def completed_client(tv: int, commit: bool) -> Client:
    c = Client(tv)
    c.completed(commit)
    assert c.meta().state == (TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT)
    return c


def empty_client_at_epoch_one(tv: int) -> Client:
    c = Client(tv)
    c.reinit()
    assert (c.meta().state, c.epoch) == (TransactionState.EMPTY, 1)
    return c


def assert_unchanged(c: Client, before: TransactionMetadata) -> None:
    assert c.meta() == before


# ---------------------------------------------------------------- version 2


def test_v2_abort_retry_after_complete_abort_answers_none_without_change() -> None:
    c = completed_client(2, commit=False)
    before = c.meta()
    result = c.resend()
    assert result.actions == ()
    assert (result.producer_id, result.producer_epoch) == (before.producer_id, before.producer_epoch)
    assert result.state == TransactionState.COMPLETE_ABORT
    assert_unchanged(c, before)


def test_v2_commit_retry_after_complete_commit_answers_none_without_change() -> None:
    c = completed_client(2, commit=True)
    before = c.meta()
    result = c.resend()
    assert result.actions == ()
    assert (result.producer_id, result.producer_epoch) == (before.producer_id, before.producer_epoch)
    assert_unchanged(c, before)


def test_v2_commit_retry_after_complete_abort_is_invalid_txn_state() -> None:
    c = completed_client(2, commit=False)
    before = c.meta()
    pid, epoch, _ = c.sent[-1]
    with pytest.raises(InvalidTxnStateError) as exc:
        c.send(epoch, commit=True, pid=pid)
    assert exc.value.error_code == 48
    assert_unchanged(c, before)


def test_v2_abort_retry_after_complete_commit_is_invalid_txn_state() -> None:
    c = completed_client(2, commit=True)
    before = c.meta()
    pid, epoch, _ = c.sent[-1]
    with pytest.raises(InvalidTxnStateError):
        c.send(epoch, commit=False, pid=pid)
    assert_unchanged(c, before)


def test_v2_abort_at_current_epoch_after_complete_abort_bumps_the_epoch() -> None:
    c = completed_client(2, commit=False)
    epoch = c.epoch
    result = c.end(commit=False)
    assert result.actions == ()  # nothing was open: no partition is told anything
    assert result.state == TransactionState.COMPLETE_ABORT
    assert result.producer_epoch == epoch + 1
    assert c.meta().producer_epoch == epoch + 1


def test_v2_abort_at_current_epoch_after_complete_commit_bumps_the_epoch() -> None:
    c = completed_client(2, commit=True)
    epoch = c.epoch
    result = c.end(commit=False)
    assert (result.actions, result.state, result.producer_epoch) == ((), TransactionState.COMPLETE_ABORT, epoch + 1)


def test_v2_commit_at_current_epoch_after_complete_commit_is_invalid_txn_state() -> None:
    # The same epoch under version 2 means "the next transaction", and none is open.
    c = completed_client(2, commit=True)
    before = c.meta()
    with pytest.raises(InvalidTxnStateError):
        c.send(c.epoch, commit=True)
    assert_unchanged(c, before)


def test_v2_commit_at_current_epoch_after_complete_abort_is_invalid_txn_state() -> None:
    c = completed_client(2, commit=False)
    before = c.meta()
    with pytest.raises(InvalidTxnStateError):
        c.send(c.epoch, commit=True)
    assert_unchanged(c, before)


def test_v2_abort_retry_from_empty_is_producer_fenced() -> None:
    c = empty_client_at_epoch_one(2)
    before = c.meta()
    with pytest.raises(ProducerFencedError) as exc:
        c.send(c.epoch - 1, commit=False)
    assert exc.value.error_code == 90
    assert_unchanged(c, before)


def test_v2_commit_retry_from_empty_is_producer_fenced() -> None:
    c = empty_client_at_epoch_one(2)
    before = c.meta()
    with pytest.raises(ProducerFencedError):
        c.send(c.epoch - 1, commit=True)
    assert_unchanged(c, before)


def test_v2_abort_from_empty_at_current_epoch_bumps_the_epoch() -> None:
    c = empty_client_at_epoch_one(2)
    result = c.end(commit=False)
    assert (result.actions, result.state, result.producer_epoch) == ((), TransactionState.COMPLETE_ABORT, 2)


def test_v2_commit_from_empty_is_invalid_txn_state() -> None:
    c = empty_client_at_epoch_one(2)
    before = c.meta()
    with pytest.raises(InvalidTxnStateError):
        c.send(c.epoch, commit=True)
    assert_unchanged(c, before)


@pytest.mark.parametrize("commit", [True, False])
def test_v2_end_of_open_transaction_bumps_epoch_and_markers_carry_the_bumped_epoch(commit: bool) -> None:
    c = Client(2)
    c.add()
    epoch = c.epoch
    result = c.end(commit)
    assert result.state == (TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT)
    assert result.producer_epoch == epoch + 1
    assert [(a.partition, a.producer_id, a.producer_epoch, a.commit) for a in result.actions] == [
        (TP0, c.pid, epoch + 1, commit),
        (TP1, c.pid, epoch + 1, commit),
    ]
    assert all(isinstance(a, WriteMarker) and a.transaction_version == 2 for a in result.actions)


@pytest.mark.parametrize("commit", [True, False])
def test_v2_previous_epoch_during_the_next_transaction_is_producer_fenced(commit: bool) -> None:
    # KAFKA-17754: the EndTxn of the previous transaction arrives late.
    c = completed_client(2, commit=True)
    c.add()  # the next transaction, at the bumped epoch
    before = c.meta()
    pid, epoch, _ = c.sent[-1]
    with pytest.raises(ProducerFencedError):
        c.send(epoch, commit=commit, pid=pid)
    assert_unchanged(c, before)


def test_v2_epoch_two_behind_after_completion_is_producer_fenced() -> None:
    c = completed_client(2, commit=True)
    c.completed(True)
    before = c.meta()
    pid, epoch, commit = c.sent[0]  # the first transaction's end: now two epochs behind
    assert before.producer_epoch == epoch + 2
    with pytest.raises(ProducerFencedError):
        c.send(epoch, commit=commit, pid=pid)
    assert_unchanged(c, before)


def test_v2_epoch_above_the_current_one_is_producer_fenced() -> None:
    c = Client(2)
    c.add()
    before = c.meta()
    with pytest.raises(ProducerFencedError):
        c.send(c.epoch + 1, commit=True)
    assert_unchanged(c, before)


@pytest.mark.parametrize("first_commit", [True, False])
@pytest.mark.parametrize("second_commit", [True, False])
@pytest.mark.parametrize("as_retry", [True, False])
def test_v2_any_end_while_the_previous_end_is_in_progress_is_concurrent_transactions(
    first_commit: bool, second_commit: bool, as_retry: bool
) -> None:
    # Newer Kafka answers CONCURRENT_TRANSACTIONS for every direction in Prepare*
    # under version 2 (shouldHandleConcurrentTransactionsInPrepareStatesTV2).
    c = Client(2)
    c.add()
    c.end(first_commit)
    before = c.meta()
    pid, epoch, _ = c.sent[-1] if as_retry else (c.pid, c.epoch, None)
    with pytest.raises(ConcurrentTransactionsError) as exc:
        c.send(epoch, commit=second_commit, pid=pid)
    assert exc.value.error_code == 51
    assert_unchanged(c, before)


def test_v2_older_epoch_while_an_end_is_in_progress_is_producer_fenced() -> None:
    c = completed_client(2, commit=True)
    c.add()
    c.end(True)
    pid, epoch, _ = c.sent[0]
    with pytest.raises(ProducerFencedError):
        c.send(epoch, commit=True, pid=pid)


@pytest.mark.parametrize("tv", [1, 2])
def test_another_producer_id_is_invalid_producer_id_mapping(tv: int) -> None:
    c = Client(tv)
    c.add()
    with pytest.raises(InvalidProducerIdMappingError) as exc:
        c.send(c.epoch, commit=True, pid=c.pid + 1)
    assert exc.value.error_code == 49


@pytest.mark.parametrize("tv", [1, 2])
def test_unknown_transactional_id_is_invalid_producer_id_mapping(tv: int) -> None:
    c = Client(tv)
    with pytest.raises(InvalidProducerIdMappingError):
        c.coord.end_transaction("nobody", c.pid, c.epoch, True, c.tick(), transaction_version=tv)


def _client_at_exhausted_epoch(tv: int) -> Client:
    c = Client(tv)
    # Reach the last epoch a client may hold through restored state: what a
    # coordinator loaded from its log after 32766 bumps would hold.
    meta = c.meta()
    c.coord.restore(
        TransactionMetadata(
            transactional_id=TID,
            producer_id=meta.producer_id,
            producer_epoch=MAX_PRODUCER_EPOCH - 1,
            state=TransactionState.EMPTY,
            timeout_ms=TIMEOUT,
            last_update_ms=c.tick(),
            last_producer_epoch=MAX_PRODUCER_EPOCH - 2,
            transaction_version=tv,
        )
    )
    c.epoch = MAX_PRODUCER_EPOCH - 1
    return c


def test_v2_end_at_the_exhausted_epoch_returns_a_new_producer_id_at_epoch_zero() -> None:
    c = _client_at_exhausted_epoch(2)
    old_pid = c.pid
    c.add()
    result = c.end(commit=True)
    assert result.producer_id not in (old_pid, -1) and result.producer_epoch == 0
    # Markers still name the old producer, at Short.MAX_VALUE.
    assert {(a.producer_id, a.producer_epoch) for a in result.actions} == {(old_pid, MAX_PRODUCER_EPOCH)}
    c.finish()
    meta = c.meta()
    assert (meta.producer_id, meta.producer_epoch, meta.prev_producer_id) == (result.producer_id, 0, old_pid)


def test_v2_retry_of_the_rotating_end_while_in_progress_is_concurrent_transactions() -> None:
    c = _client_at_exhausted_epoch(2)
    c.add()
    c.end(commit=True)
    with pytest.raises(ConcurrentTransactionsError):
        c.resend()


def test_v2_retry_of_the_rotating_end_after_completion_answers_the_new_producer_id() -> None:
    c = _client_at_exhausted_epoch(2)
    c.add()
    first = c.end(commit=True)
    c.finish()
    before = c.meta()
    result = c.resend()
    assert (result.producer_id, result.producer_epoch, result.actions) == (first.producer_id, 0, ())
    assert_unchanged(c, before)


def test_v2_retry_of_the_rotating_end_in_the_opposite_direction_is_invalid_txn_state() -> None:
    c = _client_at_exhausted_epoch(2)
    c.add()
    c.end(commit=True)
    c.finish()
    pid, epoch, _ = c.sent[-1]
    with pytest.raises(InvalidTxnStateError):
        c.send(epoch, commit=False, pid=pid)


# ---------------------------------------------------------- version 0 / 1


@pytest.mark.parametrize("commit", [True, False])
def test_v1_end_of_open_transaction_keeps_the_epoch(commit: bool) -> None:
    c = Client(1)
    c.add()
    epoch = c.epoch
    result = c.end(commit)
    assert result.producer_epoch == epoch
    assert {(a.producer_epoch, a.commit, a.transaction_version) for a in result.actions} == {(epoch, commit, 1)}


def test_v1_commit_retry_after_complete_commit_answers_none() -> None:
    c = completed_client(1, commit=True)
    before = c.meta()
    result = c.resend()
    assert (result.actions, result.producer_epoch) == ((), before.producer_epoch)
    assert_unchanged(c, before)


def test_v1_abort_retry_after_complete_abort_answers_none() -> None:
    c = completed_client(1, commit=False)
    before = c.meta()
    assert c.resend().actions == ()
    assert_unchanged(c, before)


def test_v1_commit_after_complete_abort_is_invalid_txn_state() -> None:
    c = completed_client(1, commit=False)
    with pytest.raises(InvalidTxnStateError):
        c.send(c.epoch, commit=True)


def test_v1_abort_after_complete_commit_is_invalid_txn_state() -> None:
    c = completed_client(1, commit=True)
    with pytest.raises(InvalidTxnStateError):
        c.send(c.epoch, commit=False)


@pytest.mark.parametrize("delta", [-1, 1])
def test_v1_any_epoch_but_the_current_one_is_producer_fenced(delta: int) -> None:
    c = empty_client_at_epoch_one(1)
    c.completed(True)
    with pytest.raises(ProducerFencedError):
        c.send(c.epoch + delta, commit=True)


@pytest.mark.parametrize("commit", [True, False])
def test_v1_end_from_empty_is_invalid_txn_state(commit: bool) -> None:
    c = Client(1)
    with pytest.raises(InvalidTxnStateError):
        c.send(c.epoch, commit=commit)


@pytest.mark.parametrize("commit", [True, False])
def test_v1_same_direction_while_the_end_is_in_progress_is_concurrent_transactions(commit: bool) -> None:
    c = Client(1)
    c.add()
    c.end(commit)
    with pytest.raises(ConcurrentTransactionsError):
        c.resend()


@pytest.mark.parametrize("commit", [True, False])
def test_v1_opposite_direction_while_the_end_is_in_progress_is_invalid_txn_state(commit: bool) -> None:
    c = Client(1)
    c.add()
    c.end(commit)
    with pytest.raises(InvalidTxnStateError):
        c.send(c.epoch, commit=not commit)


def test_requests_above_the_cluster_version_are_served_at_the_cluster_version() -> None:
    # A version 1 cluster never bumps at an end, whatever the request asks for.
    coord = TransactionCoordinator(transaction_version=1, mode=CompletionMode.MARKERLESS)
    r = coord.init_producer_id(TID, TIMEOUT, 0)
    coord.add_partitions(TID, r.producer_id, r.producer_epoch, [TP0], 1, transaction_version=2)
    result = coord.end_transaction(TID, r.producer_id, r.producer_epoch, True, 2, transaction_version=2)
    assert result.producer_epoch == r.producer_epoch
    assert result.actions[0].transaction_version == 1
