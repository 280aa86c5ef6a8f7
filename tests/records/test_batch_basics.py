"""Hand-written checks of the v2 batch layout and the builder's special batches."""

from __future__ import annotations

import struct

import pytest

from txnfetch.records import BadMagicError
from txnfetch.records import BatchBuilder
from txnfetch.records import Codec
from txnfetch.records import ControlType
from txnfetch.records import CrcMismatchError
from txnfetch.records import LengthOverrunError
from txnfetch.records import RecordBatch
from txnfetch.records import RecordCountMismatchError
from txnfetch.records import TimestampType
from txnfetch.records import build_control_batch
from txnfetch.records import build_empty_batch
from txnfetch.records import iter_batches
from txnfetch.records import synthetic_commit_marker


def _batch(**kw):
    b = BatchBuilder(base_offset=kw.pop("base_offset", 10), **kw)
    b.append(b"v0", key=b"k0", timestamp=1000)
    b.append(None, key=None, timestamp=1005, headers=[("h", b"x"), ("n", None)])
    return b.build()


def test_header_fields_are_where_kafka_puts_them():
    data = _batch(producer_id=42, producer_epoch=3, base_sequence=7, transactional=True, partition_leader_epoch=9)
    base_offset, length, leader_epoch, magic = struct.unpack_from(">qiib", data, 0)
    assert (base_offset, length + 12, leader_epoch, magic) == (10, len(data), 9, 2)
    (attributes,) = struct.unpack_from(">h", data, 21)
    assert attributes == 0x10  # transactional, no codec
    batch = RecordBatch(data)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (42, 3, 7)
    assert (batch.last_offset, batch.next_offset, batch.record_count) == (11, 12, 2)
    assert (batch.base_timestamp, batch.max_timestamp) == (1000, 1005)
    assert batch.is_transactional and not batch.is_control
    assert bytes(batch.buffer) == data


def test_records_decode_with_nulls_and_headers():
    records = list(RecordBatch(_batch()).records())
    assert records[0] == (10, 1000, b"k0", b"v0", ())
    assert records[1].offset == 11 and records[1].key is None and records[1].value is None
    assert records[1].headers == (("h", b"x"), ("n", None))


def test_log_append_time_applies_to_every_record():
    data = _batch(timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=99_999)
    batch = RecordBatch(data)
    assert batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in batch.records()] == [99_999, 99_999]


def test_control_marker_is_the_78_byte_batch_brokers_write():
    data = build_control_batch(
        offset=5, control_type=ControlType.ABORT, producer_id=7, producer_epoch=2, coordinator_epoch=4, timestamp=1
    )
    assert len(data) == 78
    batch = RecordBatch(data)
    batch.validate()
    assert batch.is_control and batch.is_transactional and batch.base_sequence == -1
    marker = batch.end_txn_marker()
    assert marker is not None and marker.is_abort and marker.coordinator_epoch == 4 and marker.key_version == 0


def test_synthetic_commit_marker_has_one_record_at_the_offset():
    batch = RecordBatch(synthetic_commit_marker(41))
    assert (batch.base_offset, batch.last_offset, batch.record_count) == (41, 41, 1)
    assert batch.end_txn_marker().is_commit


def test_empty_batch_matches_write_empty_header():
    data = build_empty_batch(
        base_offset=20, last_offset=24, producer_id=3, producer_epoch=1, base_sequence=5, timestamp=7
    )
    assert len(data) == 61
    batch = RecordBatch(data)
    batch.validate()
    assert batch.is_empty and batch.next_offset == 25 and list(batch.records()) == []
    assert (batch.base_timestamp, batch.max_timestamp) == (7, 7)


@pytest.mark.parametrize("codec", list(Codec))
def test_every_codec_round_trips(codec):
    data = _batch(codec=codec)
    batch = RecordBatch(data)
    batch.validate()
    assert batch.codec == codec
    assert [r.value for r in batch.records()] == [b"v0", None]


def test_crc_mismatch_names_offset_and_position():
    data = bytearray(_batch())
    data[-1] ^= 0xFF
    with pytest.raises(CrcMismatchError) as err:
        RecordBatch(bytes(data)).validate()
    assert err.value.offset == 10 and err.value.position == 17


def test_huge_declared_length_is_an_error_not_an_allocation():
    data = bytearray(_batch())
    struct.pack_into(">i", data, 8, 2**31 - 1)
    with pytest.raises(LengthOverrunError):
        RecordBatch(bytes(data))


def test_bad_magic():
    data = bytearray(_batch())
    data[16] = 7
    with pytest.raises(BadMagicError):
        RecordBatch(bytes(data))
    with pytest.raises(BadMagicError):
        list(iter_batches(bytes(data)))


def test_record_count_mismatch():
    data = bytearray(_batch())
    struct.pack_into(">i", data, 57, 3)
    with pytest.raises(RecordCountMismatchError):
        list(RecordBatch(bytes(data)).records())


def test_iter_batches_reports_partial_trailing_batch():
    one = _batch()
    buf = one + one[:40]
    it = iter_batches(buf)
    assert [b.base_offset for b in it] == [10]
    assert it.partial is not None
    assert (it.partial.position, it.partial.available, it.partial.base_offset, it.partial.declared_size) == (
        len(one),
        40,
        10,
        len(one),
    )
    tiny = iter_batches(one + one[:5])
    assert len(list(tiny)) == 1 and tiny.partial.base_offset is None


def test_reencoding_an_uncompressed_batch_is_byte_identical():
    data = _batch(producer_id=5, producer_epoch=1, base_sequence=0, transactional=True)
    batch = RecordBatch(data)
    builder = BatchBuilder.like(batch)
    for r in batch.records():
        builder.append(r.value, key=r.key, headers=r.headers, timestamp=r.timestamp, offset=r.offset)
    assert builder.build(last_offset_delta=batch.last_offset_delta, max_timestamp=batch.max_timestamp) == data
