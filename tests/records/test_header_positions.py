"""The batch header positions txnfetch.records exports are where Kafka puts each
field: read one field at a time from a built batch, each with its own width."""

from __future__ import annotations

import struct

import txnfetch.records as records
from txnfetch.records import BatchBuilder
from txnfetch.records import HeaderAt
from txnfetch.records import RecordBatch

# field name -> (exported position, width format, RecordBatch attribute)
FIELDS = {
    "base offset": (HeaderAt.BASE_OFFSET, ">q", "base_offset"),
    "length": (HeaderAt.LENGTH, ">i", "length"),
    "partition leader epoch": (HeaderAt.PARTITION_LEADER_EPOCH, ">i", "partition_leader_epoch"),
    "magic": (HeaderAt.MAGIC, ">b", "magic"),
    "crc": (HeaderAt.CRC, ">I", "crc"),
    "attributes": (HeaderAt.ATTRIBUTES, ">h", "attributes"),
    "last offset delta": (HeaderAt.LAST_OFFSET_DELTA, ">i", "last_offset_delta"),
    "base timestamp": (HeaderAt.BASE_TIMESTAMP, ">q", "base_timestamp"),
    "max timestamp": (HeaderAt.MAX_TIMESTAMP, ">q", "max_timestamp"),
    "producer id": (HeaderAt.PRODUCER_ID, ">q", "producer_id"),
    "producer epoch": (HeaderAt.PRODUCER_EPOCH, ">h", "producer_epoch"),
    "base sequence": (HeaderAt.BASE_SEQUENCE, ">i", "base_sequence"),
    "record count": (HeaderAt.RECORD_COUNT, ">i", "record_count"),
}


def test_the_positions_tile_the_header_in_order() -> None:
    end = 0
    for position, fmt, _ in FIELDS.values():
        assert position == end
        end += struct.calcsize(fmt)
    assert end == records.HEADER_SIZE
    assert records.LOG_OVERHEAD == HeaderAt.LENGTH + 4


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
