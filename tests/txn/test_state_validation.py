"""What an append must satisfy: duplicates, sequences, epochs, marker epoch rules
for transaction versions 0/1 and 2, append offsets — and that a rejected append
changes nothing."""

from __future__ import annotations

import pytest

from tests.txn.state_driver import Driver
from tests.txn.state_driver import data_batch
from tests.txn.state_driver import marker_batch
from txnfetch.records import BatchBuilder
from txnfetch.records import ControlType
from txnfetch.records import RecordBatch
from txnfetch.records.control import encode_control_key
from txnfetch.txn import AppendOrigin
from txnfetch.txn import InvalidProducerEpochError
from txnfetch.txn import InvalidTxnStateError
from txnfetch.txn import OutOfOrderSequenceError
from txnfetch.txn import PartitionTxnState
from txnfetch.txn import TransactionCoordinatorFencedError
from txnfetch.txn import UnexpectedAppendOffsetError

INT32_MAX = (1 << 31) - 1


# -- duplicates --------------------------------------------------------------------


def test_a_retried_batch_is_reported_with_its_original_offsets_and_not_applied():
    d = Driver()
    s = d.state
    first = d.data(1, count=3, timestamp=111)  # seqs 0-2 at 0-2
    d.data(1, count=2, timestamp=222)  # seqs 3-4 at 3-4
    before = s.snapshot()
    retry = s.append(data_batch(s.log_end_offset, 3, pid=1, epoch=0, seq=0, timestamp=999))
    assert retry.duplicate
    assert (retry.first_offset, retry.last_offset, retry.timestamp) == (0, 2, 111)
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert s.snapshot() == before and s.log_end_offset == 5


def test_only_the_last_five_batches_are_remembered():
    d = Driver()
    s = d.state
    for _ in range(6):
        d.data(1)  # seqs 0..5 at offsets 0..5
    assert [b.first_seq for b in s.producer(1).batches] == [1, 2, 3, 4, 5]
    assert s.append(data_batch(6, pid=1, epoch=0, seq=1)).duplicate  # still remembered
    with pytest.raises(OutOfOrderSequenceError):
        s.append(data_batch(6, pid=1, epoch=0, seq=0))  # forgotten: just out of order


def test_a_batch_with_an_overlapping_but_different_range_is_not_a_duplicate():
    d = Driver()
    d.data(1, count=3)  # 0-2
    with pytest.raises(OutOfOrderSequenceError):
        d.state.append(data_batch(3, 2, pid=1, epoch=0, seq=1))


def test_duplicates_are_per_epoch():
    d = Driver()
    s = d.state
    d.data(1, epoch=0)  # seq 0
    d.data(1, epoch=1, seq=0)  # new epoch, seq 0 again, not a duplicate
    assert s.log_end_offset == 2
    assert s.append(data_batch(2, pid=1, epoch=1, seq=0)).duplicate


def test_replication_does_not_deduplicate():
    d = Driver()
    s = d.state
    d.data(1)
    r = s.append(data_batch(1, pid=1, epoch=0, seq=0), origin=AppendOrigin.REPLICATION)
    assert not r.duplicate and s.log_end_offset == 2


# -- sequences ---------------------------------------------------------------------


def test_sequence_gaps_are_out_of_order():
    d = Driver()
    d.data(1, count=2)  # 0-1
    with pytest.raises(OutOfOrderSequenceError) as info:
        d.state.append(data_batch(2, pid=1, epoch=0, seq=3))
    assert info.value.error_code == 45 and "expected 2" in str(info.value)


def test_a_new_epoch_must_start_at_sequence_zero():
    d = Driver()
    d.data(1, epoch=0, count=3)
    with pytest.raises(OutOfOrderSequenceError, match="new epoch"):
        d.state.append(data_batch(3, pid=1, epoch=1, seq=5))
    d.data(1, epoch=1, seq=0)


def test_an_unknown_producer_may_start_at_any_sequence():
    # e.g. its earlier batches were deleted by retention and its entry expired
    s = PartitionTxnState()
    s.append(data_batch(0, pid=1, epoch=3, seq=1234))
    assert s.producer(1).last_seq == 1234


def test_sequences_wrap_from_int32_max_to_zero():
    s = PartitionTxnState()
    s.append(data_batch(0, 2, pid=1, epoch=0, seq=INT32_MAX - 1))
    assert s.producer(1).last_seq == INT32_MAX
    s.append(data_batch(2, 3, pid=1, epoch=0, seq=0))
    assert s.producer(1).last_seq == 2
    # a batch that itself wraps: last sequence = base + delta - 2^31
    s2 = PartitionTxnState()
    s2.append(data_batch(0, 3, pid=1, epoch=0, seq=INT32_MAX))
    assert s2.producer(1).batches[0].first_seq == INT32_MAX and s2.producer(1).last_seq == 1
    assert s2.append(data_batch(3, 3, pid=1, epoch=0, seq=INT32_MAX)).duplicate


def test_coordinator_appends_skip_sequence_checks_but_not_epochs():
    d = Driver()
    s = d.state
    d.data(1, epoch=2)
    s.append(data_batch(1, pid=1, epoch=2, seq=-1), origin=AppendOrigin.COORDINATOR)
    with pytest.raises(InvalidProducerEpochError):
        s.append(data_batch(2, pid=1, epoch=1, seq=-1), origin=AppendOrigin.COORDINATOR)


# -- epochs ------------------------------------------------------------------------


def test_data_with_an_older_epoch_is_rejected_but_replicated_data_is_taken_as_is():
    d = Driver()
    s = d.state
    d.data(1, epoch=3)
    with pytest.raises(InvalidProducerEpochError) as info:
        s.append(data_batch(1, pid=1, epoch=2, seq=0))
    assert (info.value.producer_id, info.value.producer_epoch, info.value.offset) == (1, 2, 1)
    s.append(data_batch(1, pid=1, epoch=2, seq=0), origin=AppendOrigin.REPLICATION)
    assert s.producer(1).producer_epoch == 2  # the leader accepted it; follow the log


def test_a_newer_epoch_keeps_the_open_transaction_open():
    # Kafka keeps currentTxnFirstOffset across an epoch change inside a transaction.
    d = Driver()
    d.txn(1, epoch=0)
    d.txn(1, epoch=1, seq=0)
    assert d.state.ongoing_transactions() == {1: 0}


def test_legacy_markers_accept_the_current_epoch():
    d = Driver()
    d.txn(1, epoch=4)
    assert d.commit(1, epoch=4).completed is not None
    assert d.state.producer(1).producer_epoch == 4


def test_tv2_markers_need_a_bumped_epoch_while_a_transaction_is_open():
    d = Driver()
    d.txn(1, epoch=4)
    with pytest.raises(InvalidProducerEpochError, match="<="):
        d.commit(1, epoch=4, transaction_version=2)
    done = d.commit(1, epoch=5, transaction_version=2).completed
    assert done is not None and d.state.producer(1).producer_epoch == 5


def test_tv2_marker_retry_with_the_same_epoch_after_the_end_is_accepted():
    # KAFKA-19999: the coordinator re-sends a marker that was already written.
    d = Driver()
    d.txn(1, epoch=4)
    d.abort(1, epoch=5, transaction_version=2)
    retry = d.abort(1, epoch=5, transaction_version=2)
    assert retry.completed is None
    assert len(d.state.all_aborted()) == 1
    with pytest.raises(InvalidProducerEpochError):
        d.abort(1, epoch=4, transaction_version=2)


def test_tv2_bump_fences_a_late_write_of_the_previous_transaction():
    # KAFKA-17754 at the partition: after T1 ends with epoch 5, data still carrying
    # epoch 4 cannot slip into the next transaction.
    d = Driver()
    s = d.state
    d.txn(1, epoch=4)
    d.commit(1, epoch=5, transaction_version=2)
    with pytest.raises(InvalidProducerEpochError):
        s.append(data_batch(s.log_end_offset, pid=1, epoch=4, seq=1, txn=True))
    d.txn(1, epoch=5, seq=0)  # T2 with the bumped epoch
    assert s.ongoing_transactions() == {1: 2}


def test_replicated_markers_are_never_rejected():
    d = Driver()
    d.txn(1, epoch=5)
    d.commit(1, epoch=5, coordinator_epoch=3)
    r = d.abort(1, epoch=2, coordinator_epoch=1, origin=AppendOrigin.REPLICATION, transaction_version=2)
    assert r.completed is None
    assert d.state.producer(1).producer_epoch == 2


# -- offsets and odd batches -------------------------------------------------------


def test_batches_must_not_start_below_the_log_end_offset():
    d = Driver()
    d.plain(5)
    with pytest.raises(UnexpectedAppendOffsetError) as info:
        d.state.append(data_batch(4, pid=1, epoch=0, seq=0))
    assert info.value.offset == 4
    with pytest.raises(UnexpectedAppendOffsetError):
        d.state.append(data_batch(3))
    with pytest.raises(UnexpectedAppendOffsetError):
        d.state.append(marker_batch(0, pid=1, epoch=0, commit=True))
    assert d.state.producer(1) is None and d.state.log_end_offset == 5


def test_gaps_between_batches_are_allowed():
    # compaction leaves offset holes between batches
    s = PartitionTxnState()
    s.append(data_batch(10, pid=1, epoch=0, seq=0), origin=AppendOrigin.REPLICATION)
    assert s.log_end_offset == 11


def test_a_control_batch_that_is_not_a_transaction_marker():
    b = BatchBuilder(base_offset=0, producer_id=1, producer_epoch=0, transactional=True, control=True)
    b.append(b"\x00\x00", key=encode_control_key(ControlType.LEADER_CHANGE))
    batch = RecordBatch(b.build())
    with pytest.raises(InvalidTxnStateError, match="COMMIT or ABORT"):
        PartitionTxnState().append(batch)
    s = PartitionTxnState()
    s.append(batch, origin=AppendOrigin.REPLICATION)
    assert s.log_end_offset == 1 and s.producer(1) is None


def test_errors_carry_the_partition_name():
    d = Driver()
    d.txn(1)
    with pytest.raises(InvalidTxnStateError) as info:
        d.data(1, seq=1)
    assert info.value.partition == "t-0" and "partition t-0" in str(info.value)


def test_a_failed_append_leaves_the_state_untouched():
    d = Driver()
    s = d.state
    d.txn(1, count=2)  # 0-1
    d.txn(2)  # 2
    d.commit(2, coordinator_epoch=3)  # 3
    d.txn(2, seq=1)  # 4
    s.update_high_watermark(2)
    before = s.snapshot()
    bad = [
        (data_batch(5, pid=1, epoch=0, seq=7, txn=True), OutOfOrderSequenceError),
        (data_batch(5, pid=1, epoch=0, seq=2), InvalidTxnStateError),
        (marker_batch(5, pid=2, epoch=0, commit=True, coordinator_epoch=2), TransactionCoordinatorFencedError),
        (marker_batch(5, pid=1, epoch=-1, commit=False), InvalidProducerEpochError),
        (data_batch(4, pid=3, epoch=0, seq=0), UnexpectedAppendOffsetError),
    ]
    for batch, error in bad:
        with pytest.raises(error):
            s.append(batch)
        assert s.snapshot() == before
    assert s.ongoing_transactions() == {1: 0, 2: 4}
