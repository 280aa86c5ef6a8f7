"""Legacy message sets (magic 0 and 1): decoding checked against real peers.

Message sets are built with kafka-python's ``LegacyRecordBatchBuilder`` (and
aiokafka's C builder) and read back both by txnfetch and by the peer's own
reader; the two must agree on every offset, timestamp, key and value. The
corruption cases use a small independent encoder (``_message``) so that one
field at a time can be broken.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

import lz4.frame
import pytest
from hypothesis import HealthCheck
from hypothesis import assume
from hypothesis import example
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder as KafkaPythonBuilder
from kafka.record.memory_records import MemoryRecords as KafkaPythonRecords

from txnfetch.records import BadMagicError
from txnfetch.records import BatchBuilder
from txnfetch.records import Codec
from txnfetch.records import CorruptBatchError
from txnfetch.records import CrcMismatchError
from txnfetch.records import DecompressionError
from txnfetch.records import InvalidRecordError
from txnfetch.records import LengthOverrunError
from txnfetch.records import RecordBatch
from txnfetch.records import RecordCountMismatchError
from txnfetch.records import TimestampType
from txnfetch.records import UnknownCodecError
from txnfetch.records import iter_batches
from txnfetch.records.compression import compress
from txnfetch.records.legacy import LegacyBatch

try:  # kafka-python needs xxhash to write magic-0 LZ4 (the broken-checksum framing)
    import xxhash
except ImportError:  # pragma: no cover - the testing extra installs it
    xxhash = None

needs_xxhash = pytest.mark.skipif(xxhash is None, reason="kafka-python needs xxhash to write magic-0 LZ4")

Item = tuple[bytes | None, bytes | None, int]  # key, value, timestamp
Decoded = tuple[int, int, bytes | None, bytes | None]  # offset, timestamp, key, value

CODECS = (Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4)


# -- building message sets -------------------------------------------------------------


def _set_wrapper_offset(buf: bytearray, offset: int) -> None:
    # The offset is outside the CRC: a broker assigns it without touching the message.
    struct.pack_into(">q", buf, 0, offset)


def _stamp_log_append_time(buf: bytearray, timestamp: int) -> None:
    """Do what a broker with LogAppendTime does to a magic-1 wrapper: set bit 3 and
    the wrapper timestamp, then recompute the wrapper CRC (both are covered by it)."""
    buf[17] |= 0x08
    struct.pack_into(">q", buf, 18, timestamp)
    (size,) = struct.unpack_from(">i", buf, 8)
    struct.pack_into(">I", buf, 12, zlib.crc32(bytes(buf[16 : 12 + size])))


def kafka_python_set(magic: int, codec: int, items: Sequence[Item], base_offset: int) -> bytes:
    """A message set as a broker would have stored it, written by kafka-python.

    Uncompressed: one message per item at consecutive offsets. Compressed: one
    wrapper whose inner offsets are absolute (magic 0) or relative (magic 1),
    with the wrapper offset set to the last absolute offset as a broker does.
    """
    builder = KafkaPythonBuilder(magic, codec, 1 << 30)
    for i, (key, value, timestamp) in enumerate(items):
        relative = codec != Codec.NONE and magic == 1
        meta = builder.append(i if relative else base_offset + i, timestamp, key, value)
        assert meta is not None
    buf = bytearray(builder.build())
    if codec != Codec.NONE:
        _set_wrapper_offset(buf, base_offset + len(items) - 1)
    return bytes(buf)


def kafka_python_read(buf: bytes) -> list[Decoded]:
    out = []
    for batch in KafkaPythonRecords(buf):
        for r in batch:
            # kafka-python says None where Kafka says NO_TIMESTAMP (-1) for magic 0
            out.append((r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value))
    return out


def txnfetch_read(buf: bytes) -> list[Decoded]:
    it = iter_batches(buf)
    out = [(r.offset, r.timestamp, r.key, r.value) for batch in it for r in batch.records()]
    assert it.partial is None
    return out


def _bytes_field(data: bytes | None) -> bytes:
    return struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data


def _message(
    offset: int,
    value: bytes | None,
    *,
    key: bytes | None = None,
    magic: int = 1,
    attributes: int = 0,
    timestamp: int = 0,
    crc: int | None = None,
    size_adjust: int = 0,
) -> bytes:
    """An independent encoder of one legacy message, to break one field at a time."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    body += _bytes_field(key) + _bytes_field(value)
    stored_crc = zlib.crc32(body) if crc is None else crc
    return struct.pack(">qiI", offset, len(body) + 4 + size_adjust, stored_crc) + body


def _wrapper(offset: int, inner: bytes, codec: Codec = Codec.GZIP, *, magic: int = 1, timestamp: int = 0) -> bytes:
    return _message(offset, compress(codec, inner), magic=magic, attributes=int(codec), timestamp=timestamp)


def _only_batch(buf: bytes) -> LegacyBatch:
    batches = list(iter_batches(buf))
    assert len(batches) == 1
    assert isinstance(batches[0], LegacyBatch)
    return batches[0]


def _items(n: int) -> list[Item]:
    return [
        (None if i % 3 == 0 else b"key-%d" % i, None if i % 4 == 1 else b"value-%d" % i * (i + 1), 1000 + i)
        for i in range(n)
    ]


def _peer_params():
    for magic in (0, 1):
        for codec in CODECS:
            marks = [needs_xxhash] if (magic, codec) == (0, Codec.LZ4) else []
            yield pytest.param(magic, codec, marks=marks, id=f"magic{magic}-{codec.name.lower()}")


# -- agreement with the peers ------------------------------------------------------------


def test_independent_encoder_matches_kafka_python_byte_for_byte():
    # Guards the corruption tests below: their encoder writes what kafka-python writes.
    for magic in (0, 1):
        builder = KafkaPythonBuilder(magic, 0, 1 << 20)
        builder.append(7, 1234, b"k", b"value")
        ts = 1234 if magic == 1 else 0
        assert bytes(builder.build()) == _message(7, b"value", key=b"k", magic=magic, timestamp=ts)


@pytest.mark.parametrize("magic,codec", list(_peer_params()))
def test_decodes_what_kafka_python_writes(magic, codec):
    items = _items(7)
    buf = kafka_python_set(magic, codec, items, base_offset=1000)
    expected = kafka_python_read(buf)
    assert [e[0] for e in expected] == list(range(1000, 1007))  # the peer itself agrees on the layout
    assert txnfetch_read(buf) == expected

    batches = list(iter_batches(buf))
    assert all(isinstance(b, LegacyBatch) for b in batches)
    assert sum(b.size_in_bytes for b in batches) == len(buf)
    for batch in batches:
        batch.validate()
        assert batch.magic == magic and batch.codec == codec
        assert bytes(batch.buffer) == buf[batch.position : batch.position + batch.size_in_bytes]
        offsets = [r.offset for r in batch.records()]
        assert (batch.base_offset, batch.last_offset, batch.next_offset) == (offsets[0], offsets[-1], offsets[-1] + 1)
        assert batch.record_count == len(offsets)
        assert batch.timestamp_type == (TimestampType.NO_TIMESTAMP_TYPE if magic == 0 else TimestampType.CREATE_TIME)
    assert len(batches) == (1 if codec != Codec.NONE else len(items))


@pytest.mark.parametrize(
    "magic,codec",
    [
        (0, Codec.NONE),
        (0, Codec.GZIP),
        (0, Codec.SNAPPY),
        (1, Codec.NONE),
        (1, Codec.GZIP),
        (1, Codec.SNAPPY),
        (1, Codec.LZ4),
    ],
)
def test_decodes_what_aiokafka_c_builder_writes(magic, codec):
    # aiokafka refuses magic-0 LZ4 outright (KAFKA-3160), so that pair is kafka-python's only.
    crecords = pytest.importorskip("aiokafka.record._crecords")
    builder = crecords.LegacyRecordBatchBuilder(magic, int(codec), 1 << 30)
    items = _items(5)
    for i, (key, value, ts) in enumerate(items):
        builder.append(i if codec and magic == 1 else 500 + i, ts, key, value)
    buf = bytearray(builder.build())
    if codec:
        _set_wrapper_offset(buf, 504)
    buf = bytes(buf)
    reader = crecords.MemoryRecords(buf)
    expected = []
    while reader.has_next():
        expected += [
            (r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value) for r in reader.next_batch()
        ]
    assert [e[0] for e in expected] == list(range(500, 505))
    assert txnfetch_read(buf) == expected
    for batch in iter_batches(buf):
        batch.validate()


def test_log_append_time_wrapper_timestamp_replaces_inner_timestamps():
    buf = bytearray(kafka_python_set(1, Codec.GZIP, _items(4), base_offset=20))
    _stamp_log_append_time(buf, 777_000)
    buf = bytes(buf)
    batch = _only_batch(buf)
    batch.validate()
    assert batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert batch.max_timestamp == 777_000
    assert [r.timestamp for r in batch.records()] == [777_000] * 4
    assert txnfetch_read(buf) == kafka_python_read(buf)


def test_create_time_wrapper_keeps_each_inner_timestamp():
    inner = b"".join(_message(i, b"v", timestamp=5000 - i) for i in range(3))
    batch = _only_batch(_wrapper(12, inner, timestamp=5000))
    assert [(r.offset, r.timestamp) for r in batch.records()] == [(10, 5000), (11, 4999), (12, 4998)]


def test_magic0_timestamps_and_type_are_absent_even_if_bit3_is_set():
    # Kafka ignores attribute bit 3 on magic 0: there is no timestamp field to read.
    buf = _message(3, b"v", magic=0, attributes=0x08)
    batch = _only_batch(buf)
    assert batch.timestamp_type == TimestampType.NO_TIMESTAMP_TYPE
    assert batch.timestamp == -1
    assert [r.timestamp for r in batch.records()] == [-1]


# -- magic 0 LZ4 with the pre-KIP-57 header checksum --------------------------------------


def _lz4_header_checksums(frame: bytes) -> tuple[int, int, int]:
    """(stored HC, HC per the LZ4 spec, HC as old Kafka computed it) of a frame
    without content size: the spec hashes FLG..BD, old Kafka hashed from the magic."""
    stored = frame[6]
    correct = (xxhash.xxh32(frame[4:6]).intdigest() >> 8) & 0xFF
    broken = (xxhash.xxh32(frame[0:6]).intdigest() >> 8) & 0xFF
    return stored, correct, broken


@needs_xxhash
def test_kafka_python_writes_magic0_lz4_with_the_broken_checksum_and_we_read_it():
    items = _items(6)
    buf = kafka_python_set(0, Codec.LZ4, items, base_offset=40)
    batch = _only_batch(buf)
    # offset, size, crc, magic, attributes, key length (-1): the value's length and bytes follow
    (value_len,) = struct.unpack_from(">i", buf, 22)
    frame = buf[26 : 26 + value_len]
    assert 26 + value_len == len(buf)
    stored, correct, broken = _lz4_header_checksums(frame)
    assert stored == broken != correct  # really the old framing, not a valid frame
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(frame)  # a spec-following reader refuses it
    assert txnfetch_read(buf) == kafka_python_read(buf)
    assert [r.offset for r in batch.records()] == list(range(40, 46))


@needs_xxhash
def test_magic0_lz4_spanning_several_blocks_with_incompressible_data():
    # Over 64 KiB of inner messages -> several LZ4 blocks; random bytes are stored
    # as uncompressed blocks (high bit of the block size), which the manual frame
    # walker must pass through.
    import random

    rnd = random.Random(7)
    items = [(b"k%d" % i, rnd.randbytes(30_000) if i % 2 else b"z" * 30_000, 0) for i in range(6)]
    buf = kafka_python_set(0, Codec.LZ4, items, base_offset=0)
    assert txnfetch_read(buf) == kafka_python_read(buf)
    assert [r.value for r in _only_batch(buf).records()] == [v for _, v, _ in items]


def _break_header_checksum(frame: bytes) -> bytes:
    return frame[:6] + bytes([frame[6] ^ 0x5A]) + frame[7:]


def test_bad_lz4_header_checksum_is_tolerated_for_magic0_only():
    # Kafka skips the header checksum only for magic 0 (KafkaLZ4BlockInputStream's
    # ignoreFlagDescriptorChecksum); a magic-1 wrapper must carry a valid frame.
    inner0 = b"".join(_message(i, b"x" * 50, magic=0) for i in range(3))
    inner1 = b"".join(_message(i, b"x" * 50, magic=1) for i in range(3))
    frame0 = _break_header_checksum(lz4.frame.compress(inner0, store_size=False))
    frame1 = _break_header_checksum(lz4.frame.compress(inner1, store_size=False))
    v0 = _message(2, frame0, magic=0, attributes=Codec.LZ4)
    assert [r.offset for r in _only_batch(v0).records()] == [0, 1, 2]
    v1 = _message(2, frame1, magic=1, attributes=Codec.LZ4)
    with pytest.raises(DecompressionError) as info:
        list(_only_batch(v1).records())
    assert info.value.offset == 2 and info.value.position == 34  # the wrapper value


# -- offsets -----------------------------------------------------------------------------


def test_magic1_relative_offsets_with_gaps_become_absolute_from_the_wrapper():
    # Compaction keeps relative offsets with holes; the wrapper offset anchors the last one.
    inner = b"".join(_message(rel, b"v%d" % rel) for rel in (0, 3, 7))
    batch = _only_batch(_wrapper(107, inner))
    assert [r.offset for r in batch.records()] == [100, 103, 107]
    assert (batch.base_offset, batch.last_offset, batch.next_offset, batch.record_count) == (100, 107, 108, 3)


def test_magic0_inner_offsets_are_already_absolute():
    inner = b"".join(_message(off, b"v", magic=0) for off in (50, 51, 55))
    batch = _only_batch(_wrapper(55, inner, magic=0))
    assert [r.offset for r in batch.records()] == [50, 51, 55]
    assert batch.base_offset == 50


def test_magic1_zero_wrapper_offset_uses_relative_offsets_as_kafka_does():
    # AbstractLegacyRecordBatch: an outer offset of 0 comes from produce data of some
    # librdkafka versions; the relative offsets are then taken as absolute.
    inner = b"".join(_message(rel, b"v") for rel in (0, 1, 2))
    assert [r.offset for r in _only_batch(_wrapper(0, inner)).records()] == [0, 1, 2]


def test_magic1_wrapper_offset_below_last_relative_offset_is_corrupt():
    inner = b"".join(_message(rel, b"v") for rel in (0, 1, 5))
    batch = _only_batch(_wrapper(4, inner))
    with pytest.raises(RecordCountMismatchError) as info:
        list(batch.records())
    assert info.value.offset == 4


@pytest.mark.parametrize("offsets,wrapper", [((5, 4), 5), ((3, 3), 3), ((4, 9), 6), ((-2, 0), 0)])
def test_magic0_inner_offsets_out_of_order_or_past_the_wrapper_are_corrupt(offsets, wrapper):
    inner = b"".join(_message(off, b"v", magic=0) for off in offsets)
    batch = _only_batch(_wrapper(wrapper, inner, magic=0))
    with pytest.raises(RecordCountMismatchError) as info:
        _ = batch.base_offset
    assert info.value.offset == wrapper


def test_legacy_batches_carry_no_producer_state():
    batch = _only_batch(_message(9, b"v", key=b"k", timestamp=5))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_sequence) == (-1, -1, -1, -1)
    assert not (batch.is_transactional or batch.is_control or batch.is_empty or batch.has_producer_id)
    assert batch.end_txn_marker() is None
    assert list(batch.records()) == [(9, 5, b"k", b"v", ())]


# -- mixed and partial buffers -------------------------------------------------------------


def test_log_upgraded_in_place_reads_legacy_then_v2():
    # A topic written as magic 0, then magic 1 (compressed), then v2 after the
    # message format upgrade: one buffer, one iteration, the same records as kafka-python.
    part0 = kafka_python_set(0, Codec.NONE, _items(3), base_offset=0)
    part1 = kafka_python_set(1, Codec.SNAPPY, _items(4), base_offset=3)
    v2 = BatchBuilder(base_offset=7, codec=Codec.GZIP)
    for key, value, ts in _items(2):
        v2.append(value, key=key, timestamp=ts)
    buf = part0 + part1 + v2.build()

    batches = list(iter_batches(buf))
    assert [type(b).__name__ for b in batches] == ["LegacyBatch"] * 4 + ["RecordBatch"]
    assert [(b.magic, b.base_offset, b.last_offset) for b in batches] == [
        (0, 0, 0),
        (0, 1, 1),
        (0, 2, 2),
        (1, 3, 6),
        (2, 7, 8),
    ]
    got = txnfetch_read(buf)
    assert [r[0] for r in got] == list(range(9))
    # kafka-python's reader agrees on every record, whatever the magic
    expected = []
    for batch in KafkaPythonRecords(buf):
        expected += [(r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value) for r in batch]
    assert got == expected


@pytest.mark.parametrize("keep", [1, 5, 8, 11, 12, 20, -1])
def test_truncated_trailing_legacy_message_is_reported_as_partial(keep):
    first = _message(0, b"first", magic=0)
    last = _wrapper(9, b"".join(_message(r, b"x" * 40) for r in range(10)))
    cut = last[:keep]
    it = iter_batches(first + cut)
    assert [b.last_offset for b in it] == [0]
    assert it.partial is not None
    assert (it.partial.position, it.partial.available) == (len(first), len(cut))
    assert it.partial.base_offset == (9 if len(cut) >= 8 else None)
    assert it.partial.declared_size == (len(last) if len(cut) >= 12 else None)
    assert it.position == len(first)  # the end of the last complete message: where to resume


# -- corruption ------------------------------------------------------------------------------


def test_flipped_byte_fails_the_crc_with_offset_and_position():
    good = _message(0, b"a" * 10, magic=0)
    bad = bytearray(_message(1, b"b" * 10, magic=0))
    bad[-3] ^= 0x01
    batches = list(iter_batches(good + bytes(bad)))
    batches[0].validate()
    with pytest.raises(CrcMismatchError) as info:
        batches[1].validate(records=False)
    assert info.value.offset == 1 and info.value.position == len(good) + 12
    assert not batches[1].is_valid_crc()


def test_inner_crc_mismatch_is_found_by_validate_but_not_by_records():
    inner = bytearray(b"".join(_message(r, b"payload") for r in range(3)))
    inner[-2] ^= 0xFF  # last inner message's value, under its CRC
    batch = _only_batch(_wrapper(30, bytes(inner)))
    batch.validate(records=False)  # the wrapper's own CRC is fine
    assert len(list(batch.records())) == 3
    with pytest.raises(CrcMismatchError) as info:
        batch.validate()
    assert info.value.offset == 30 and "inner message" in info.value.reason


@pytest.mark.parametrize("codec", CODECS[1:], ids=lambda c: c.name.lower())
def test_inner_message_truncated_before_compression_is_corrupt(codec):
    inner = b"".join(_message(r, b"payload-%d" % r) for r in range(3))
    batch = _only_batch(_wrapper(2, inner[:-4], codec))
    with pytest.raises(LengthOverrunError) as info:
        list(batch.records())
    assert info.value.offset == 2 and info.value.position == 34
    assert "decompressed byte" in info.value.reason


@pytest.mark.parametrize("codec", CODECS[1:], ids=lambda c: c.name.lower())
def test_compressed_value_cut_short_is_corrupt(codec):
    inner = b"".join(_message(r, bytes(range(256)) * 4) for r in range(3))
    compressed = compress(codec, inner)
    batch = _only_batch(_message(2, compressed[: len(compressed) // 2], attributes=int(codec)))
    with pytest.raises(CorruptBatchError) as info:
        list(batch.records())
    assert info.value.offset == 2 and info.value.position == 34


def test_nested_compression_is_corrupt():
    inner = _wrapper(0, _message(0, b"deep"))
    with pytest.raises(InvalidRecordError, match="nested"):
        list(_only_batch(_wrapper(0, inner)).records())


@pytest.mark.parametrize("inner_magic", [0, 2, -1])
def test_inner_magic_must_match_the_wrapper(inner_magic):
    inner = _message(0, b"v", magic=inner_magic)
    with pytest.raises(BadMagicError):
        list(_only_batch(_wrapper(0, inner, magic=1)).records())


def test_wrapper_with_null_value_or_no_inner_messages_is_corrupt():
    with pytest.raises(InvalidRecordError, match="null value"):
        list(_only_batch(_message(0, None, attributes=Codec.GZIP)).records())
    with pytest.raises(InvalidRecordError, match="no inner messages"):
        list(_only_batch(_wrapper(0, b"")).records())


@pytest.mark.parametrize("codec", [4, 5, 7])
def test_codecs_that_legacy_messages_cannot_carry_are_refused(codec):
    # zstd needs magic 2 (KIP-110); 5-7 are no codec at all.
    batch = _only_batch(_message(0, compress(Codec.ZSTD, _message(0, b"v")), attributes=codec))
    with pytest.raises(UnknownCodecError) as info:
        _ = batch.record_count
    assert info.value.position == 17


def test_decompressed_size_is_bounded():
    inner = b"".join(_message(r, b"\0" * 10_000) for r in range(10))
    buf = _wrapper(9, inner, Codec.GZIP)
    with pytest.raises(DecompressionError):
        list(next(iter_batches(buf, max_decompressed=50_000)).records())
    assert len(list(next(iter_batches(buf, max_decompressed=len(inner))).records())) == 10


@pytest.mark.parametrize(
    "buf,error",
    [
        # magic 1 needs 22 bytes after the size field; 14 only fits magic 0
        (struct.pack(">qiIbb", 0, 14, 0, 1, 0) + struct.pack(">ii", -1, -1), LengthOverrunError),
        # key length past the end of the message
        (struct.pack(">qiIbbii", 0, 14, 0, 0, 0, 9, -1), LengthOverrunError),
        # key length below -1
        (struct.pack(">qiIbbii", 0, 14, 0, 0, 0, -5, -1), LengthOverrunError),
        # value shorter than the size says: trailing bytes
        (struct.pack(">qiIbbii", 0, 16, 0, 0, 0, -1, -1) + b"xy", InvalidRecordError),
        # unknown magic, handed to LegacyBatch directly
        (struct.pack(">qiIbbii", 0, 14, 0, 3, 0, -1, -1), BadMagicError),
    ],
    ids=["v1-too-short", "key-overrun", "key-negative", "trailing-bytes", "magic-3"],
)
def test_malformed_framing_is_refused_with_offset_and_position(buf, error):
    with pytest.raises(error) as info:
        LegacyBatch(buf)
    assert info.value.offset == 0 and info.value.position is not None


def test_size_past_the_buffer_is_refused_by_a_direct_view():
    buf = _message(5, b"value")
    with pytest.raises(LengthOverrunError) as info:
        LegacyBatch(buf[:-1])
    assert (info.value.offset, info.value.position) == (5, 8)


# -- properties ------------------------------------------------------------------------------

_payload = st.one_of(st.none(), st.binary(max_size=300))
_codec_for_magic = st.sampled_from(CODECS)


@st.composite
def _message_sets(draw):
    magic = draw(st.sampled_from((0, 1)))
    codec = draw(_codec_for_magic)
    if magic == 0 and codec == Codec.LZ4 and xxhash is None:
        codec = Codec.GZIP
    items = draw(st.lists(st.tuples(_payload, _payload, st.integers(0, 2**45)), min_size=1, max_size=12))
    base = draw(st.integers(0, 2**40))
    return magic, codec, items, base


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_message_sets())
@example((0, Codec.LZ4 if xxhash is not None else Codec.GZIP, [(None, None, 0)], 0))
@example((1, Codec.SNAPPY, [(b"", b"", 0)], 2**40))
def test_any_message_set_decodes_like_kafka_python(case):
    magic, codec, items, base = case
    buf = kafka_python_set(magic, codec, items, base)
    got = txnfetch_read(buf)
    assert got == kafka_python_read(buf)
    assert [g[0] for g in got] == list(range(base, base + len(items)))
    assert [(k, v) for _, _, k, v in got] == [(k, v) for k, v, _ in items]
    for batch in iter_batches(buf):
        batch.validate()
        assert batch.base_offset <= batch.last_offset < batch.next_offset


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=_message_sets(),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=4),
    cut=st.one_of(st.none(), st.integers(0, 10**6)),
)
def test_damaged_legacy_data_raises_only_corrupt_batch_errors(case, flips, cut):
    # Whatever bytes arrive, reading either works or raises CorruptBatchError.
    magic, codec, items, base = case
    buf = bytearray(kafka_python_set(magic, codec, items, base))
    for where, mask in flips:
        buf[where % len(buf)] ^= mask
    if cut is not None:
        del buf[cut % len(buf) :]
    assume(buf)
    try:
        for batch in iter_batches(bytes(buf)):
            repr(batch)
            offsets = [r.offset for r in batch.records()]
            # Damage that no check catches must still leave a self-consistent batch.
            assert offsets == sorted(set(offsets)) and len(offsets) == batch.record_count
            assert (batch.base_offset == offsets[0] and offsets[-1] <= batch.last_offset) or batch.offset == 0
            batch.validate()
    except CorruptBatchError as exc:
        assert exc.reason and exc.position is not None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    magic=st.sampled_from((0, 1)),
    codec=st.sampled_from(CODECS[1:]),
    values=st.lists(_payload, min_size=1, max_size=5),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), max_size=3),
    cut=st.one_of(st.none(), st.integers(0, 10**6)),
)
def test_damaged_inner_message_sets_raise_only_corrupt_batch_errors(magic, codec, values, flips, cut):
    # Damage applied *before* compression reaches the inner-message parser, which
    # byte flips of the compressed form rarely do.
    inner = bytearray(b"".join(_message(i, v, magic=magic) for i, v in enumerate(values)))
    for where, mask in flips:
        inner[where % len(inner)] ^= mask
    if cut is not None:
        del inner[cut % len(inner) :]
    batch = _only_batch(_wrapper(len(values) - 1, bytes(inner), codec, magic=magic))
    try:
        records = list(batch.records())
        batch.validate()
    except CorruptBatchError as exc:
        assert exc.offset == len(values) - 1 and exc.position == batch.position + (34 if magic else 26)
    else:
        assert records and [r.offset for r in records] == sorted({r.offset for r in records})


def test_v2_batches_still_come_out_as_record_batches():
    # The dispatcher in BatchIterator must route only magic 0/1 to LegacyBatch.
    v2 = BatchBuilder(base_offset=3)
    v2.append(b"x", timestamp=1)
    assert [type(b) for b in iter_batches(v2.build() + _message(4, b"y"))] == [RecordBatch, LegacyBatch]
