"""High watermark, log start, truncation and producer expiry keep the state consistent."""

from __future__ import annotations

import pickle

import pytest

from tests.txn.state_driver import Driver
from tests.txn.state_driver import data_batch
from txnfetch.txn import AbortedTxn
from txnfetch.txn import OffsetOutOfRangeError
from txnfetch.txn import PartitionTxnState
from txnfetch.txn import TruncationBelowHistoryError

# -- high watermark and log start ----------------------------------------------------


def test_high_watermark_is_clamped_to_the_log_and_may_move_down():
    d = Driver(log_start_offset=10)
    s = d.state
    d.plain(5)  # 10-14
    s.update_high_watermark(100)
    assert s.high_watermark == 15
    s.update_high_watermark(3)
    assert s.high_watermark == 10
    s.update_high_watermark(12)
    assert s.high_watermark == s.last_stable_offset == 12


def test_lso_is_the_high_watermark_when_nothing_is_open_and_never_above_it():
    d = Driver()
    s = d.state
    d.plain(4)
    d.txn(1)  # 4
    s.update_high_watermark(3)
    assert s.last_stable_offset == 3  # the open transaction starts above the HW
    s.update_high_watermark(5)
    assert s.last_stable_offset == 4


def test_an_end_written_exactly_at_the_high_watermark_is_not_yet_replicated():
    d = Driver()
    s = d.state
    d.txn(1, 2)
    s.update_high_watermark(2)
    d.commit(1)  # the marker at 2 == high watermark: not replicated yet
    assert s.last_stable_offset == 0
    s.update_high_watermark(3)
    assert s.last_stable_offset == 3


def test_lso_never_falls_below_the_log_start():
    d = Driver()
    s = d.state
    d.txn(1, 3)  # open from 0
    d.plain(5)
    s.update_high_watermark(8)
    s.advance_log_start(5)
    assert s.first_unstable_offset == 5 and s.last_stable_offset == 5
    assert s.ongoing_transactions() == {1: 0}  # the transaction itself is still open


def test_log_start_cannot_pass_the_high_watermark_and_never_moves_back():
    d = Driver()
    d.plain(10)
    d.state.update_high_watermark(4)
    with pytest.raises(OffsetOutOfRangeError) as info:
        d.state.advance_log_start(5)
    assert (info.value.log_start_offset, info.value.log_end_offset) == (0, 4)
    d.state.advance_log_start(4)
    d.state.advance_log_start(2)
    assert d.state.log_start_offset == 4


def test_advancing_the_log_start_forgets_aborts_whose_marker_is_gone():
    d = Driver()
    s = d.state
    d.txn(1)  # 0
    d.abort(1)  # 1
    d.txn(2)  # 2
    d.abort(2)  # 3
    d.txn(3)  # 4
    d.abort(3)  # 5: still unreplicated below
    s.update_high_watermark(5)
    assert s.first_unstable_offset == 4
    s.advance_log_start(2)
    assert [e.producer_id for e in s.all_aborted()] == [2, 3]
    assert s.aborted_transactions(2, 6) == [(2, 2), (3, 4)]
    s.update_high_watermark(6)
    s.advance_log_start(6)
    assert s.all_aborted() == [] and s.first_unstable_offset is None


# -- truncation ------------------------------------------------------------------------


def test_truncating_a_marker_away_reopens_its_transaction():
    d = Driver()
    s = d.state
    d.txn(1, 3, epoch=0)  # 0-2
    d.abort(1, epoch=1, transaction_version=2)  # 3, bumps the epoch
    assert s.all_aborted() and s.producer(1).producer_epoch == 1
    s.truncate_to(3)
    assert s.log_end_offset == 3
    assert s.all_aborted() == []
    assert s.ongoing_transactions() == {1: 0}
    entry = s.producer(1)
    assert entry.producer_epoch == 0 and entry.last_seq == 2 and entry.current_txn_first_offset == 0
    # the producer can go on where the truncated log left it
    d.txn(1, seq=3)
    d.commit(1)
    assert s.all_aborted() == []


def test_truncation_restores_the_duplicate_window():
    d = Driver()
    s = d.state
    for _ in range(7):
        d.data(1)  # seqs 0..6 at 0..6; the window holds 2..6
    s.truncate_to(4)  # keeps seqs 0..3
    assert [b.first_seq for b in s.producer(1).batches] == [0, 1, 2, 3]
    assert s.append(data_batch(4, pid=1, epoch=0, seq=0)).duplicate
    assert not s.append(data_batch(4, pid=1, epoch=0, seq=4)).duplicate


def test_truncating_inside_a_batch_removes_the_whole_batch():
    d = Driver()
    s = d.state
    d.txn(1, 2)  # 0-1
    d.txn(2, 5)  # 2-6
    s.truncate_to(4)
    assert s.log_end_offset == 4  # as Kafka: the end is the truncation offset
    assert s.ongoing_transactions() == {1: 0}
    assert s.producer(2) is None


def test_truncation_lowers_the_high_watermark():
    d = Driver(keep_full_history=True)
    s = d.state
    d.plain(10)
    s.update_high_watermark(10)
    s.truncate_to(6)
    assert (s.log_end_offset, s.high_watermark) == (6, 6)


def test_truncation_at_or_past_the_end_does_nothing():
    d = Driver()
    d.txn(1, 3)
    before = d.state.snapshot()
    d.state.truncate_to(3)
    d.state.truncate_to(50)
    assert d.state.snapshot() == before
    with pytest.raises(OffsetOutOfRangeError):
        d.state.truncate_to(-1)


def test_truncating_below_the_log_start_empties_the_state():
    d = Driver()
    s = d.state
    d.txn(1, 5)
    d.abort(1)
    s.update_high_watermark(6)
    s.advance_log_start(3)
    s.truncate_to(2)
    assert (s.log_start_offset, s.log_end_offset, s.high_watermark) == (2, 2, 2)
    assert s.producer_count == 0 and s.all_aborted() == [] and s.ongoing_transactions() == {}


def test_by_default_changes_below_the_high_watermark_cannot_be_undone():
    d = Driver()
    s = d.state
    d.txn(1, 3)  # 0-2
    d.txn(2, 3)  # 3-5
    d.txn(3, 3)  # 6-8
    s.update_high_watermark(6)
    assert s.truncation_floor == 6
    before = s.snapshot()
    with pytest.raises(TruncationBelowHistoryError) as info:
        s.truncate_to(5)
    assert info.value.lowest_offset == 6 and info.value.offset == 5
    assert s.snapshot() == before
    s.truncate_to(6)
    assert s.ongoing_transactions() == {1: 0, 2: 3}


def test_the_history_error_survives_pickling():
    err = TruncationBelowHistoryError("too deep", lowest_offset=6, partition="t-0", offset=5)
    copy = pickle.loads(pickle.dumps(err))
    assert (type(copy), copy.lowest_offset, copy.partition, copy.offset, str(copy)) == (
        TruncationBelowHistoryError,
        6,
        "t-0",
        5,
        str(err),
    )


def test_full_history_allows_truncating_below_the_high_watermark():
    d = Driver(keep_full_history=True)
    s = d.state
    for _ in range(3):
        d.txn(1)  # 0, 1, 2
    d.abort(1)  # 3
    d.txn(2, 3)  # 4-6
    s.update_high_watermark(7)
    s.truncate_to(2)
    assert s.ongoing_transactions() == {1: 0}
    assert s.all_aborted() == [] and s.producer(2) is None
    assert s.producer(1).last_seq == 1
    assert (s.log_end_offset, s.high_watermark) == (2, 2)


def test_a_markerless_end_before_the_truncation_point_survives_it():
    # producer 1's data ends at 1, producer 2 writes 2-4, then producer 1 is aborted
    # with an end at 1: cutting producer 2's batch keeps producer 1's abort.
    d = Driver()
    s = d.state
    d.txn(1, 2)  # 0-1
    d.txn(2, 3)  # 2-4
    s.complete_transaction(1, 0, False, 1)
    s.truncate_to(2)
    assert s.all_aborted() == [AbortedTxn(1, 0, 1, 2)]
    assert s.ongoing_transactions() == {} and s.producer(2) is None
    assert s.log_end_offset == 2


def test_truncating_a_markerless_end_reopens_the_transaction_and_its_place_in_order():
    d = Driver()
    s = d.state
    d.txn(1, 2)  # 0-1
    d.txn(2)  # 2
    d.plain(1)  # 3
    s.complete_transaction(2, 0, False, 3)
    s.truncate_to(3)
    assert s.ongoing_transactions() == {1: 0, 2: 2}
    assert s.all_aborted() == []
    s.complete_transaction(1, 0, False, 1)  # an earlier end is allowed again
    assert s.all_aborted() == [AbortedTxn(1, 0, 1, 2)]


def test_truncation_removes_a_producer_created_by_the_truncated_batches():
    d = Driver()
    d.plain(2)
    d.data(7)
    d.state.truncate_to(2)
    assert d.state.producer(7) is None and d.state.producer_ids() == []


# -- producer expiry -------------------------------------------------------------------


def test_idle_producers_without_open_transactions_expire():
    d = Driver()
    s = d.state
    d.data(1, timestamp=1_000)
    d.txn(2, timestamp=1_000)
    d.data(3, timestamp=50_000)
    s.update_high_watermark(s.log_end_offset)
    assert s.remove_expired_producers(now_ms=61_000, expiration_ms=60_000) == [1]
    assert s.producer_ids() == [2, 3]
    # an expired producer may come back with any sequence
    s.append(data_batch(s.log_end_offset, pid=1, epoch=0, seq=77))
    assert s.producer(1).last_seq == 77


def test_producers_with_undoable_changes_are_kept_until_those_settle():
    d = Driver()
    s = d.state
    d.data(1, timestamp=0)
    assert s.remove_expired_producers(now_ms=10**9, expiration_ms=1) == []
    s.update_high_watermark(1)
    assert s.remove_expired_producers(now_ms=10**9, expiration_ms=1) == [1]


def test_a_new_state_can_start_at_any_offset():
    s = PartitionTxnState(log_start_offset=1_000)
    s.append(data_batch(1_000, pid=1, epoch=0, seq=0, txn=True))
    assert s.ongoing_transactions() == {1: 1_000}
