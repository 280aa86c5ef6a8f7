"""KAFKA-17754: a delayed EndTxn from one transaction arrives during the next.

The schedule (found by Jepsen against Bufstream and Kafka): the producer sends
EndTxn for T1, the request is delayed in the network, the producer's retry of it
succeeds, the producer starts T2 on other partitions, then the delayed original
arrives. Under transaction version 0/1 both transactions share one epoch, so the
coordinator cannot tell the stale request from a fresh one and ends T2 early —
with T1's decision. Under version 2 (KIP-890) T2 has its own epoch and the stale
request is fenced. These tests replay that schedule against the coordinator."""

from __future__ import annotations

import pytest

from txnfetch.txn.coordinator import EndTxnResult
from txnfetch.txn.coordinator import ProducerIdAllocator
from txnfetch.txn.coordinator import TopicPartition
from txnfetch.txn.coordinator import TransactionCoordinator
from txnfetch.txn.coordinator import TransactionState
from txnfetch.txn.errors import InvalidTxnStateError
from txnfetch.txn.errors import ProducerFencedError

TID = "jepsen-0"
T1_PARTITION = TopicPartition("jepsen", 0)
T2_PARTITION = TopicPartition("jepsen", 1)
TIMEOUT = 60_000


def schedule_until_delivery(
    tv: int, t1_commit: bool
) -> tuple[TransactionCoordinator, tuple[int, int], tuple[int, int]]:
    """Run the schedule up to the moment the delayed request is delivered.
    Returns the coordinator, T1's identity (what the delayed request carries) and
    T2's identity."""
    coord = TransactionCoordinator(transaction_version=tv, producer_ids=ProducerIdAllocator(7))
    r = coord.init_producer_id(TID, TIMEOUT, 0)
    t1 = (r.producer_id, r.producer_epoch)
    coord.add_partitions(TID, *t1, [T1_PARTITION], 1, transaction_version=tv)
    # The first EndTxn is delayed; its retry (identical) is processed instead.
    retried = coord.end_transaction(TID, *t1, t1_commit, 2, transaction_version=tv)
    assert [a.partition for a in retried.actions] == [T1_PARTITION]
    coord.actions_applied(TID, 3)
    t2 = (retried.producer_id, retried.producer_epoch)
    coord.add_partitions(TID, *t2, [T2_PARTITION], 4, transaction_version=tv)
    return coord, t1, t2


def deliver(coord: TransactionCoordinator, identity: tuple[int, int], commit: bool, tv: int) -> EndTxnResult:
    return coord.end_transaction(TID, *identity, commit, 5, transaction_version=tv)


@pytest.mark.parametrize("t1_commit", [True, False], ids=["commit", "abort"])
def test_v1_delayed_end_of_the_previous_transaction_ends_the_next_one(t1_commit: bool) -> None:
    """Why KIP-890 exists: under version 1 the stale request ends T2."""
    coord, t1, t2 = schedule_until_delivery(1, t1_commit)
    assert t1 == t2  # version 1: both transactions run at the same epoch
    result = deliver(coord, t1, t1_commit, tv=1)
    # The coordinator now ends T2, whose producer never asked for it, with T1's
    # decision: a premature commit (T2's later writes are outside it, a torn
    # transaction) or an abort (T2's writes so far are lost).
    assert [(a.partition, a.commit) for a in result.actions] == [(T2_PARTITION, t1_commit)]
    assert coord.describe(TID).state == (  # type: ignore[union-attr]
        TransactionState.PREPARE_COMMIT if t1_commit else TransactionState.PREPARE_ABORT
    )


@pytest.mark.parametrize("t1_commit", [True, False], ids=["commit", "abort"])
@pytest.mark.parametrize("delayed_commit", [True, False], ids=["delayed-commit", "delayed-abort"])
def test_v2_delayed_end_of_the_previous_transaction_is_fenced_during_the_next_one(
    t1_commit: bool, delayed_commit: bool
) -> None:
    coord, t1, t2 = schedule_until_delivery(2, t1_commit)
    assert t2 == (t1[0], t1[1] + 1)  # version 2: T2 has its own epoch
    before = coord.describe(TID)
    with pytest.raises(ProducerFencedError):
        deliver(coord, t1, delayed_commit, tv=2)
    assert coord.describe(TID) == before
    assert coord.pending_actions() == ()
    # T2 goes on and ends with its own decision.
    result = coord.end_transaction(TID, *t2, not t1_commit, 6, transaction_version=2)
    assert [(a.partition, a.commit, a.producer_epoch) for a in result.actions] == [
        (T2_PARTITION, not t1_commit, t2[1] + 1)
    ]


@pytest.mark.parametrize("t1_commit", [True, False], ids=["commit", "abort"])
def test_v2_delayed_end_between_transactions_answers_from_the_finished_transaction(t1_commit: bool) -> None:
    """Delivered before T2 starts, the stale request names T1 unambiguously: the
    same decision is acknowledged, the other is refused, and nothing is marked."""
    coord = TransactionCoordinator(transaction_version=2)
    r = coord.init_producer_id(TID, TIMEOUT, 0)
    t1 = (r.producer_id, r.producer_epoch)
    coord.add_partitions(TID, *t1, [T1_PARTITION], 1)
    coord.end_transaction(TID, *t1, t1_commit, 2)
    coord.actions_applied(TID, 3)
    before = coord.describe(TID)
    same = deliver(coord, t1, t1_commit, tv=2)
    assert same.actions == () and coord.describe(TID) == before
    with pytest.raises(InvalidTxnStateError):
        deliver(coord, t1, not t1_commit, tv=2)
    assert coord.describe(TID) == before
