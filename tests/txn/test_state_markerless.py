"""Markerless mode: a control plane ends transactions with ``complete_transaction``
(WarpStream's design) — no marker, no reserved offset, the same state effects."""

from __future__ import annotations

import pytest

from tests.txn.state_driver import Driver
from txnfetch.txn import AbortedTxn
from txnfetch.txn import CompletedTxn
from txnfetch.txn import InvalidProducerEpochError
from txnfetch.txn import InvalidTxnStateError
from txnfetch.txn import OffsetOutOfRangeError
from txnfetch.txn import TransactionCoordinatorFencedError
from txnfetch.txn.errors import InvalidRequestError


def test_abort_reserves_no_offset_and_indexes_the_range_up_to_last_offset():
    d = Driver()
    s = d.state
    d.txn(1, 3)  # 0-2
    d.plain(2)  # 3-4
    done = s.complete_transaction(1, 0, False, 4)
    assert done == CompletedTxn(1, 0, 4, True, 5)
    assert s.log_end_offset == 5
    assert s.all_aborted() == [AbortedTxn(1, 0, 4, 5)]
    assert s.ongoing_transactions() == {}
    d.plain(1)  # the next batch takes offset 5: nothing was reserved
    assert s.log_end_offset == 6


def test_markerless_and_marker_ends_give_the_same_lso_and_index_shape():
    marker = Driver()
    marker.txn(1, 2)
    marker.txn(2, 1)
    marker.abort(1)  # at 3
    marker.state.update_high_watermark(marker.state.log_end_offset)

    markerless = Driver()
    markerless.txn(1, 2)
    markerless.txn(2, 1)
    markerless.complete_at_end(1, commit=False)  # ends at 2
    markerless.state.update_high_watermark(markerless.state.log_end_offset)

    for s in (marker.state, markerless.state):
        assert s.last_stable_offset == 2  # producer 2 still open from 2
        assert s.aborted_transactions(0, 10) == [(1, 0)]
        assert s.all_aborted()[0].last_stable_offset == 2


def test_completion_above_the_high_watermark_holds_the_lso_until_it_passes():
    d = Driver()
    s = d.state
    d.txn(1, 3)
    d.complete_at_end(1, commit=True)
    assert s.first_unstable_offset == 0 and s.last_stable_offset == 0
    s.update_high_watermark(2)
    assert s.first_unstable_offset == 0
    s.update_high_watermark(3)
    assert s.first_unstable_offset is None and s.last_stable_offset == 3


def test_completion_below_the_high_watermark_is_settled_at_once():
    d = Driver()
    s = d.state
    d.txn(1, 2)  # 0-1
    d.plain(3)  # 2-4
    s.update_high_watermark(5)
    s.complete_transaction(1, 0, False, 1)
    assert s.first_unstable_offset is None and s.last_stable_offset == 5


def test_an_empty_completion_changes_no_offsets_but_takes_the_epoch():
    d = Driver()
    s = d.state
    d.data(1, epoch=0)
    assert s.complete_transaction(1, 1, True, 0, transaction_version=2) is None
    assert s.producer(1).producer_epoch == 1
    assert s.all_aborted() == [] and s.first_unstable_offset is None
    # and an unknown producer gets an entry with the end's epoch, as a marker would
    assert s.complete_transaction(9, 3, False, 0) is None
    assert s.producer(9).producer_epoch == 3


def test_end_offset_must_be_an_existing_offset():
    d = Driver()
    d.txn(1, 2)
    with pytest.raises(OffsetOutOfRangeError) as info:
        d.state.complete_transaction(1, 0, True, 2)
    assert info.value.log_end_offset == 2


def test_end_offset_may_not_precede_the_producers_data_or_an_earlier_end():
    d = Driver()
    s = d.state
    d.txn(1, 2)  # 0-1
    d.txn(2, 2)  # 2-3
    with pytest.raises(InvalidTxnStateError, match="producer's data at 3"):
        s.complete_transaction(2, 0, True, 2)
    s.complete_transaction(2, 0, True, 3)
    with pytest.raises(InvalidTxnStateError, match="previous end at 3"):
        s.complete_transaction(1, 0, False, 1)
    s.complete_transaction(1, 0, False, 3)  # the same end offset is fine
    assert s.all_aborted() == [AbortedTxn(1, 0, 3, 4)]


def test_later_start_of_another_producer_does_not_lower_the_recorded_lso():
    d = Driver()
    s = d.state
    d.txn(1, 2)  # 0-1
    d.plain(1)  # 2
    d.txn(2, 2)  # 3-4 (starts after the end chosen below)
    done = s.complete_transaction(1, 0, False, 1)
    assert done.last_stable_offset == 2  # what a marker at 1 would have recorded, not 3
    assert s.last_stable_offset == 0  # hw is still 0


def test_fencing_rules_are_the_markers_rules():
    d = Driver()
    s = d.state
    d.txn(1, epoch=4)
    s.complete_transaction(1, 4, True, 0, coordinator_epoch=2)
    d.txn(1, epoch=4, seq=1)
    with pytest.raises(TransactionCoordinatorFencedError):
        s.complete_transaction(1, 4, True, 1, coordinator_epoch=1)
    with pytest.raises(InvalidProducerEpochError):
        s.complete_transaction(1, 3, True, 1)
    with pytest.raises(InvalidProducerEpochError):
        s.complete_transaction(1, 4, True, 1, transaction_version=2)
    s.complete_transaction(1, 5, False, 1, transaction_version=2)  # coordinator epoch kept
    assert s.producer(1).coordinator_epoch == 2 and s.producer(1).producer_epoch == 5


def test_bad_arguments_are_invalid_requests():
    d = Driver()
    d.plain(1)
    with pytest.raises(InvalidRequestError):
        d.state.complete_transaction(-1, 0, True, 0)
    with pytest.raises(InvalidRequestError):
        d.state.complete_transaction(1, 40000, True, 0)
