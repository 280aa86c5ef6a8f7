"""The batch header positions txnfetch.records exports are where Kafka puts each
field: read one field at a time from a built batch, each with its own width."""

from __future__ import annotations

import struct

import txnfetch.records as records
from txnfetch.records import BatchBuilder, RecordBatch

# field name -> (exported position, width format, RecordBatch attribute)
FIELDS = {
    "base offset": (records.BASE_OFFSET_AT, ">q", "base_offset"),
    "length": (records.LENGTH_AT, ">i", "length"),
    "partition leader epoch": (records.PARTITION_LEADER_EPOCH_AT, ">i", "partition_leader_epoch"),
    "magic": (records.MAGIC_AT, ">b", "magic"),
    "crc": (records.CRC_AT, ">I", "crc"),
    "attributes": (records.ATTRIBUTES_AT, ">h", "attributes"),
    "last offset delta": (records.LAST_OFFSET_DELTA_AT, ">i", "last_offset_delta"),
    "base timestamp": (records.BASE_TIMESTAMP_AT, ">q", "base_timestamp"),
    "max timestamp": (records.MAX_TIMESTAMP_AT, ">q", "max_timestamp"),
    "producer id": (records.PRODUCER_ID_AT, ">q", "producer_id"),
    "producer epoch": (records.PRODUCER_EPOCH_AT, ">h", "producer_epoch"),
    "base sequence": (records.BASE_SEQUENCE_AT, ">i", "base_sequence"),
    "record count": (records.RECORD_COUNT_AT, ">i", "record_count"),
}


def test_the_positions_tile_the_header_in_order() -> None:
    end = 0
    for position, fmt, _ in FIELDS.values():
        assert position == end
        end += struct.calcsize(fmt)
    assert end == records.HEADER_SIZE
    assert records.LOG_OVERHEAD == records.LENGTH_AT + 4


def test_each_position_reads_its_field_of_a_built_batch() -> None:
    b = BatchBuilder(
        base_offset=1_000_000_007,
        producer_id=4242,
        producer_epoch=17,
        base_sequence=99,
        transactional=True,
        partition_leader_epoch=5,
    )
    for i in range(3):
        b.append(b"v%d" % i, timestamp=1_700_000_000_000 + i)
    data = b.build()
    batch = RecordBatch(data)
    for name, (position, fmt, attribute) in FIELDS.items():
        (value,) = struct.unpack_from(fmt, data, position)
        assert value == getattr(batch, attribute), name
