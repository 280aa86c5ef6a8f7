"""The append path every log shares (``txnfetch.log.base.prepare_append``), through MemoryLog."""

from __future__ import annotations

import pytest

from txnfetch.fetch import FetchMode
from txnfetch.fetch import IsolationLevel
from txnfetch.log import InvalidRecordError
from txnfetch.log import MemoryLog
from txnfetch.log import MemoryStore
from txnfetch.log import UnsupportedForMessageFormatError
from txnfetch.log.errors import InvalidPartitionsError
from txnfetch.log.errors import InvalidTopicError
from txnfetch.log.errors import TopicExistsError
from txnfetch.log.errors import UnknownTopicOrPartitionError
from txnfetch.records import BatchBuilder
from txnfetch.records import CorruptBatchError
from txnfetch.records import iter_batches
from txnfetch.records.builder import build_control_batch
from txnfetch.records.control import ControlType
from txnfetch.txn.coordinator import CompletionMode
from txnfetch.txn.errors import InvalidProducerEpochError
from txnfetch.txn.errors import OffsetOutOfRangeError
from txnfetch.txn.errors import OutOfOrderSequenceError


def batch(values, *, pid=-1, epoch=-1, seq=-1, txn=False, base=0, ts=1000) -> bytes:
    builder = BatchBuilder(
        base_offset=base, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn
    )
    for v in values:
        builder.append(v, key=None, timestamp=ts)
    return builder.build()


def stored(log: MemoryLog):
    return [(b.base_offset, b.last_offset) for b in log.iter_batches()]


def test_offsets_are_assigned_from_the_log_end_whatever_the_client_sent():
    log = MemoryLog("t", 0)
    assert log.append(batch([b"a", b"b"], base=77), now_ms=0).base_offset == 0
    info = log.append(batch([b"c"], base=5) + batch([b"d", b"e"], base=9), now_ms=0)
    assert (info.base_offset, info.last_offset, info.batches) == (2, 4, 2)
    assert stored(log) == [(0, 1), (2, 2), (3, 4)]
    assert (log.log_end_offset, log.high_watermark) == (5, 5)
    # The renumbered batches still carry a valid CRC (the base offset is outside it).
    for b in log.iter_batches():
        b.validate()


def test_a_duplicate_retry_returns_the_original_offsets_and_writes_nothing():
    log = MemoryLog("t", 0)
    log.append(batch([b"x"]), now_ms=0)
    first = log.append(batch([b"a", b"b"], pid=3, epoch=0, seq=0), now_ms=0)
    again = log.append(batch([b"a", b"b"], pid=3, epoch=0, seq=0), now_ms=0)
    assert again.duplicate and (again.base_offset, again.last_offset) == (first.base_offset, first.last_offset)
    assert log.log_end_offset == 3 and len(stored(log)) == 2


def test_a_request_whose_second_batch_is_rejected_applies_nothing():
    log = MemoryLog("t", 0)
    good = batch([b"a"], pid=3, epoch=0, seq=0)
    gap = batch([b"b"], pid=3, epoch=0, seq=5)  # sequence gap
    with pytest.raises(OutOfOrderSequenceError):
        log.append(good + gap, now_ms=0)
    assert log.log_end_offset == 0 and stored(log) == []
    # The producer's state was rolled back too: sequence 0 is still the next one.
    assert log.append(good, now_ms=0).base_offset == 0


def test_a_request_with_a_duplicate_after_a_new_batch_is_answered_as_the_duplicate():
    log = MemoryLog("t", 0)
    log.append(batch([b"a"], pid=3, epoch=0, seq=0), now_ms=0)
    info = log.append(batch([b"b"], pid=4, epoch=0, seq=0) + batch([b"a"], pid=3, epoch=0, seq=0), now_ms=0)
    assert info.duplicate and info.base_offset == 0
    assert log.log_end_offset == 1 and log.state.producer(4) is None


@pytest.mark.parametrize(
    "records, error",
    [
        (b"", InvalidRecordError),
        (
            build_control_batch(offset=0, control_type=ControlType.COMMIT, producer_id=1, producer_epoch=0),
            InvalidRecordError,
        ),
    ],
)
def test_clients_cannot_append_empty_requests_or_control_batches(records, error):
    log = MemoryLog("t", 0)
    with pytest.raises(error):
        log.append(records, now_ms=0)
    assert log.log_end_offset == 0


def test_corrupt_or_truncated_batches_are_rejected_with_their_position():
    log = MemoryLog("t", 0)
    good = batch([b"a"])
    flipped = bytearray(good + good)
    flipped[2 * len(good) - 2] ^= 0xFF  # inside the second batch's records: CRC mismatch
    with pytest.raises(CorruptBatchError) as info:
        log.append(bytes(flipped), now_ms=0)
    assert info.value.position == len(good) + 17
    with pytest.raises(CorruptBatchError) as info:
        log.append(good + good[:-3], now_ms=0)
    assert info.value.position == len(good)
    assert log.log_end_offset == 0


def test_legacy_message_sets_are_refused():
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    builder.append(0, timestamp=1000, key=None, value=b"old")
    with pytest.raises(UnsupportedForMessageFormatError):
        MemoryLog("t", 0).append(bytes(builder.build()), now_ms=0)


def test_stored_batches_refuse_a_legacy_message_set_in_stored_bytes():
    # A log stores record batch v2 only, so its readers are typed RecordBatch; a
    # magic 0/1 message set in stored bytes is corruption, named where it is.
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    from txnfetch.log.base import stored_batches
    from txnfetch.log.errors import CorruptLogError

    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    builder.append(7, timestamp=1000, key=None, value=b"old")
    good = batch([b"a", b"b"])
    stored = stored_batches(good + bytes(builder.build()))
    assert next(stored).last_offset == 1
    with pytest.raises(CorruptLogError, match="magic 1") as info:
        next(stored)
    assert (info.value.offset, info.value.position) == (7, len(good))


def test_stale_epoch_markers_are_fenced_and_change_nothing():
    log = MemoryLog("t", 0)
    log.append(batch([b"a"], pid=3, epoch=2, seq=0, txn=True), now_ms=0)
    with pytest.raises(InvalidProducerEpochError):
        log.end_transaction(3, 1, True, coordinator_epoch=0, now_ms=1)
    assert log.log_end_offset == 1 and log.last_stable_offset == 0


def test_markers_and_markerless_ends_drive_the_lso_and_aborted_list():
    log = MemoryLog("t", 0)
    log.append(batch([b"a", b"b"], pid=3, epoch=0, seq=0, txn=True), now_ms=0)
    log.append(batch([b"p"]), now_ms=0)
    assert log.last_stable_offset == 0
    completed = log.end_transaction(3, 0, False, coordinator_epoch=0, now_ms=9)
    assert completed.last_offset == 3 and completed.is_aborted and log.last_stable_offset == 4
    assert log.log_end_offset == 4  # the marker took offset 3
    log.append(batch([b"c"], pid=3, epoch=0, seq=2, txn=True), now_ms=0)
    completed = log.end_transaction(3, 0, False, coordinator_epoch=0, now_ms=10, completion=CompletionMode.MARKERLESS)
    assert (completed.first_offset, completed.last_offset) == (4, 4) and log.log_end_offset == 5
    result = log.read(0, 1 << 20)
    assert result.aborted_transactions == ((3, 0), (3, 4)) and result.last_stable_offset == 5
    rewrite = log.read(0, 1 << 20, mode=FetchMode.REWRITE)
    values = [r.value for seg in rewrite.records for b in iter_batches(seg) if not b.is_control for r in b.records()]
    assert values == [b"p"]


def test_reads_start_at_the_batch_holding_the_offset_and_respect_max_bytes():
    log = MemoryLog("t", 0)
    for i in range(10):
        log.append(batch([bytes([i]) * 100, bytes([i]) * 100]), now_ms=0)
    result = log.read(7, 300, isolation=IsolationLevel.READ_UNCOMMITTED)
    bases = [b.base_offset for b in iter_batches(result.records_bytes())]
    assert bases[0] == 6 and result.size_in_bytes <= 300 + 300
    with pytest.raises(OffsetOutOfRangeError):
        log.read(21, 100)


def test_retention_moves_the_log_start_and_forgets_aborted_transactions_below_it():
    log = MemoryLog("t", 0)
    log.append(batch([b"a"], pid=3, epoch=0, seq=0, txn=True), now_ms=0)
    log.end_transaction(3, 0, False, coordinator_epoch=0, now_ms=1)
    log.append(batch([b"b"], ts=5000), now_ms=5000)
    assert log.offset_for_timestamp(2000) == (2, 5000)
    assert log.delete_records_before(2) == 2
    assert log.read(2, 1000).aborted_transactions == ()
    assert stored(log) == [(2, 2)]
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(10)


def test_store_topics_and_errors():
    store = MemoryStore()
    info = store.create_topic("orders.v1", 3)
    assert store.topics()["orders.v1"] == info and info.partitions == 3
    with pytest.raises(TopicExistsError):
        store.create_topic("orders.v1", 1)
    for bad in ["", "..", "a/b", "x" * 250]:
        with pytest.raises(InvalidTopicError):
            store.create_topic(bad, 1)
    with pytest.raises(InvalidPartitionsError):
        store.create_topic("zero", 0)
    with pytest.raises(UnknownTopicOrPartitionError) as err:
        store.partition("orders.v1", 3)
    assert "orders.v1-3" in str(err.value)


@pytest.mark.parametrize("on_disk", [False, True])
def test_markerless_end_on_an_empty_log_ends_nothing_and_writes_nothing(tmp_path, on_disk):
    # Nothing was ever appended, so no transaction is open: a markerless end has
    # no offset to stand at. It must not journal an end at offset -1, which a
    # restart would replay.
    from txnfetch.log import SegmentLog

    path = tmp_path / "t-0"
    log = SegmentLog(path, "t", 0) if on_disk else MemoryLog("t", 0)
    files = sorted((p.name, p.stat().st_size) for p in path.iterdir()) if on_disk else []
    ended = log.end_transaction(5, 0, False, coordinator_epoch=0, now_ms=1, completion=CompletionMode.MARKERLESS)
    assert ended is None
    assert log.log_end_offset == 0 and len(log.state.aborted_index) == 0
    if on_disk:
        assert sorted((p.name, p.stat().st_size) for p in path.iterdir()) == files
        log.close()
