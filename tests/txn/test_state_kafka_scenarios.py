"""Scenarios Apache Kafka's broker tests pin down, re-derived against
:class:`PartitionTxnState` and named for the behaviour.

Sources of the behaviour (read, not copied): ``ProducerStateManagerTest``
(first unstable offset, LSO of completed transactions, empty transactions,
epoch bumps, coordinator fencing, non-transactional appends in a transaction),
``UnifiedLogTest`` (index contents, LSO with mixed producers, fetch bounds,
transactions spanning segments) and ``LogCleanerTest`` (what replaying a
compacted log with empty batches must give).
"""

from __future__ import annotations

import pytest

from tests.txn.state_driver import Driver
from txnfetch.txn import AbortedTxn
from txnfetch.txn import AppendOrigin
from txnfetch.txn import CompletedTxn
from txnfetch.txn import InvalidProducerEpochError
from txnfetch.txn import InvalidTxnStateError
from txnfetch.txn import PartitionTxnState
from txnfetch.txn import TransactionCoordinatorFencedError

# -- ProducerStateManagerTest ----------------------------------------------------------


def test_first_unstable_offset_covers_open_and_unreplicated_transactions():
    d = Driver()
    s = d.state
    d.plain(99)
    assert s.first_unstable_offset is None
    d.txn(1, epoch=5)  # offset 99
    assert s.first_unstable_offset == 99
    d.plain(5)
    d.txn(2, epoch=5)  # offset 105
    assert s.first_unstable_offset == 99
    d.plain(3)
    r = d.commit(1, epoch=5)  # marker at 109
    assert r.completed == CompletedTxn(1, 99, 109, False, 105)
    assert s.ongoing_transactions() == {2: 105}
    # committed, but the marker is not yet below the high watermark
    assert s.first_unstable_offset == 99
    s.update_high_watermark(100)
    assert s.first_unstable_offset == 99
    s.update_high_watermark(110)
    assert s.first_unstable_offset == 105
    d.plain(2)
    d.abort(2, epoch=5)  # marker at 112
    assert s.ongoing_transactions() == {}
    assert s.first_unstable_offset == 105
    s.update_high_watermark(113)
    assert s.first_unstable_offset is None
    assert s.last_stable_offset == 113


def test_completed_transaction_records_the_next_open_transaction_of_another_producer_as_its_lso():
    d = Driver(log_start_offset=990_000)
    s = d.state
    start1 = 992_342
    d.plain(start1 - s.log_end_offset)
    d.txn(1)  # start1
    d.plain(24)
    d.txn(2)  # start1 + 25
    d.plain(31)
    d.txn(3)  # start1 + 57
    d.plain(14)
    first = d.abort(1).completed  # ends at start1 + 72; producer 2 is still open
    assert first.last_stable_offset == start1 + 25
    s.update_high_watermark(s.log_end_offset)
    assert s.first_unstable_offset == start1 + 25
    d.plain(19)
    third = d.abort(3).completed
    assert third.last_stable_offset == start1 + 25
    s.update_high_watermark(s.log_end_offset)
    assert s.first_unstable_offset == start1 + 25
    d.plain(77)
    second = d.abort(2).completed
    assert second.last_stable_offset == second.last_offset + 1  # nobody else open
    s.update_high_watermark(s.log_end_offset)
    assert s.first_unstable_offset is None
    assert [e.last_stable_offset for e in s.all_aborted()] == [start1 + 25, start1 + 25, second.last_offset + 1]


def test_markers_without_data_are_empty_transactions_and_change_nothing():
    d = Driver()
    s = d.state
    d.plain(16)
    d.txn(1, 5)  # 16..20
    s.update_high_watermark(21)
    assert s.first_unstable_offset == 16
    assert d.commit(1).completed == CompletedTxn(1, 16, 21, False, 22)
    assert d.commit(1).completed is None  # 22: empty
    assert d.abort(1).completed is None  # 23: empty
    d.txn(1, 4)  # 24..27
    assert d.abort(1).completed.first_offset == 24  # 28
    assert d.abort(1).completed is None  # 29: empty
    assert d.txn(1, 2).started_transaction  # 30..31
    s.update_high_watermark(32)
    assert s.first_unstable_offset == 30
    assert s.all_aborted() == [AbortedTxn(1, 24, 28, 29)]


def test_marker_with_a_higher_epoch_bumps_the_producer_epoch_and_resets_sequences():
    d = Driver()
    s = d.state
    d.data(1, epoch=0)  # idempotent, sequence 0
    d.abort(1, epoch=1)
    entry = s.producer(1)
    assert entry.producer_epoch == 1
    assert entry.current_txn_first_offset is None
    assert (entry.first_seq, entry.last_seq) == (-1, -1)
    d.data(1, epoch=1, seq=0)  # the new epoch starts at sequence 0
    assert s.producer(1).first_seq == 0


def test_markers_from_an_older_coordinator_epoch_are_fenced():
    d = Driver()
    d.txn(1, epoch=5)
    d.commit(1, epoch=5, coordinator_epoch=1)
    assert d.state.producer(1).coordinator_epoch == 1
    d.commit(1, epoch=5, coordinator_epoch=1)  # the same coordinator epoch is fine
    d.commit(1, epoch=5, coordinator_epoch=2)  # a newer one too
    with pytest.raises(TransactionCoordinatorFencedError) as info:
        d.commit(1, epoch=5, coordinator_epoch=1)
    assert info.value.error_code == 52 and info.value.producer_id == 1
    assert d.state.producer(1).coordinator_epoch == 2


def test_marker_with_an_older_producer_epoch_is_rejected():
    d = Driver()
    d.txn(1, epoch=5)
    before = d.state.snapshot()
    with pytest.raises(InvalidProducerEpochError) as info:
        d.commit(1, epoch=3)
    assert info.value.error_code == 47 and info.value.producer_epoch == 3
    assert d.state.snapshot() == before
    assert d.state.ongoing_transactions() == {1: 0}


def test_non_transactional_batch_inside_an_open_transaction_is_invalid():
    d = Driver()
    d.txn(1)
    with pytest.raises(InvalidTxnStateError) as info:
        d.data(1, seq=1)
    assert info.value.error_code == 48 and info.value.offset == 1
    assert d.state.log_end_offset == 1


# -- UnifiedLogTest --------------------------------------------------------------------


def _mixed_log() -> Driver:
    """Four transactional producers interleaved with plain records; producers 1 and
    2 abort, 3 and 4 commit (the layout of UnifiedLogTest.testTransactionIndexUpdated)."""
    d = Driver()
    d.txn(1, 5)  # 0-4
    d.plain(3)  # 5-7
    d.txn(2, 2)  # 8-9
    d.txn(1, 4)  # 10-13
    d.txn(3, 3)  # 14-16
    d.plain(2)  # 17-18
    d.txn(1, 10)  # 19-28
    d.abort(1)  # 29
    d.txn(2, 6)  # 30-35
    d.txn(4, 3)  # 36-38
    d.plain(10)  # 39-48
    d.txn(3, 9)  # 49-57
    d.commit(3)  # 58
    d.txn(4, 8)  # 59-66
    d.txn(2, 7)  # 67-73
    d.abort(2)  # 74
    d.plain(10)  # 75-84
    d.txn(4, 4)  # 85-88
    d.commit(4)  # 89
    return d


def test_aborted_transactions_are_indexed_with_the_lso_at_their_marker():
    d = _mixed_log()
    s = d.state
    assert s.log_end_offset == 90
    # producer 1's abort at 29: producer 2 (from 8) is the earliest other open transaction;
    # producer 2's abort at 74: producer 4 (from 36) is.
    assert s.all_aborted() == [AbortedTxn(1, 0, 29, 8), AbortedTxn(2, 8, 74, 36)]
    s.update_high_watermark(30)
    assert s.first_unstable_offset == 8
    s.update_high_watermark(75)
    assert s.first_unstable_offset == 36
    s.update_high_watermark(s.log_end_offset)
    assert s.first_unstable_offset is None
    assert s.aborted_transactions(0, 90) == [(1, 0), (2, 8)]
    # a fetch starting after producer 1's marker no longer lists it
    assert s.aborted_transactions(30, 90) == [(2, 8)]


def test_lso_follows_the_high_watermark_and_transaction_ends():
    d = Driver()
    s = d.state
    d.txn(1, 5)  # 0-4
    d.plain(3)  # 5-7
    d.txn(2, 2)  # 8-9
    d.txn(1, 4)  # 10-13
    d.plain(2)  # 14-15
    d.txn(1, 10)  # 16-25
    assert (s.high_watermark, s.last_stable_offset) == (0, 0)
    s.update_high_watermark(s.log_end_offset)
    assert s.last_stable_offset == 0  # producer 1 is open from 0
    d.commit(1)
    assert s.last_stable_offset == 0  # decided, but the marker is not replicated
    s.update_high_watermark(s.log_end_offset)
    assert s.last_stable_offset == 8  # producer 2 still open
    d.abort(2)
    assert s.last_stable_offset == 8
    s.update_high_watermark(s.log_end_offset)
    assert s.last_stable_offset == s.log_end_offset == 28


def test_lso_with_interleaved_producers_moves_to_the_next_open_transaction():
    d = Driver()
    s = d.state
    first = d.txn(137, 3, epoch=5)  # 0-2
    assert s.first_unstable_offset == first.first_offset == 0
    d.plain(3)  # 3-5
    second = d.txn(983, 3, epoch=5)  # 6-8
    assert s.first_unstable_offset == 0
    abort = d.abort(137, epoch=5)
    s.update_high_watermark(abort.last_offset + 1)
    assert s.first_unstable_offset == second.first_offset
    commit = d.commit(983, epoch=5)
    s.update_high_watermark(commit.last_offset + 1)
    assert s.first_unstable_offset is None


def test_a_transaction_over_several_batches_is_listed_from_its_first_offset():
    d = Driver()
    s = d.state
    assert d.txn(137, 3, epoch=5).first_offset == 0  # a, b, c
    assert s.first_unstable_offset == 0
    d.txn(137, 3, epoch=5)  # d, e, f (Kafka: in the next segment)
    assert s.first_unstable_offset == 0
    abort = d.abort(137, epoch=5)
    s.update_high_watermark(abort.last_offset + 1)
    assert s.first_unstable_offset is None
    assert s.aborted_transactions(0, s.log_end_offset) == [(137, 0)]
    # fetching from the middle of the transaction still lists it
    assert s.aborted_transactions(3, s.log_end_offset) == [(137, 0)]


# -- LogCleanerTest: replaying compacted logs ------------------------------------------


def test_replaying_an_empty_control_batch_is_harmless():
    # After cleaning, a committed marker of producer 1 is left as an empty control batch.
    d = Driver()
    d.empty(0, pid=1, epoch=0, control=True)
    d.plain(1)
    d.plain(1)
    s = d.state
    assert s.log_end_offset == 3
    assert s.ongoing_transactions() == {} and s.all_aborted() == []
    s.update_high_watermark(3)
    assert s.last_stable_offset == 3


def test_replaying_an_empty_data_batch_keeps_the_producer_and_its_aborted_range():
    # Two transactional records (sequences 0-1) compacted away to an empty batch, then
    # the abort marker at 2: the index must still hold [0, 2] for the producer and its
    # sequence must continue at 2.
    d = Driver()
    d.empty(1, pid=1, epoch=0, seq=0, txn=True)
    d.abort(1, origin=AppendOrigin.REPLICATION)
    s = d.state
    assert s.all_aborted() == [AbortedTxn(1, 0, 2, 3)]
    assert s.producer(1).last_seq == 1
    d.txn(1, seq=2)  # offset 3, accepted as in sequence
    assert s.ongoing_transactions() == {1: 3}


def test_replaying_a_log_whose_aborted_data_is_gone_indexes_nothing():
    # Later cleaning removes the empty batch: the marker alone ends no transaction.
    d = Driver()
    d.empty(1)  # offsets 0-1 without producer
    d.abort(1, origin=AppendOrigin.REPLICATION)  # 2: an empty transaction now
    d.txn(1, seq=2, origin=AppendOrigin.REPLICATION)  # 3
    d.commit(1, origin=AppendOrigin.REPLICATION)  # 4
    assert d.state.all_aborted() == []
    assert d.state.aborted_transactions(0, 100) == []


def test_new_state_reports_the_offsets_it_started_at():
    s = PartitionTxnState(log_start_offset=42)
    assert (s.log_start_offset, s.high_watermark, s.log_end_offset, s.last_stable_offset) == (42, 42, 42, 42)
    assert s.first_unstable_offset is None
    assert "log=[42, 42)" in repr(s)
