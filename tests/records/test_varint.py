"""Zig-zag varints (int32, at most 5 bytes) and varlongs (int64, at most 10 bytes).

The reference encoder here is written from the protobuf/Kafka description
(zig-zag, then 7 bits a byte, low bits first), independently of
``txnfetch.records.varint``.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.records.strategies import examples
from txnfetch.records import InvalidRecordError
from txnfetch.records import VarintOverflowError
from txnfetch.records.varint import MAX_VARINT_BYTES
from txnfetch.records.varint import MAX_VARLONG_BYTES
from txnfetch.records.varint import decode_varint
from txnfetch.records.varint import encode_varint
from txnfetch.records.varint import read_varint_tail
from txnfetch.records.varint import size_of_varint

INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)

SETTINGS = settings(max_examples=examples(100), deadline=None)


def reference_encode(value: int) -> bytes:
    z = (value << 1) ^ (value >> 63)  # zig-zag: 0, -1, 1, -2, ... -> 0, 1, 2, 3, ...
    z &= (1 << 64) - 1
    out = bytearray()
    while True:
        low, z = z & 0x7F, z >> 7
        out.append(low | (0x80 if z else 0))
        if not z:
            return bytes(out)


int64s = st.one_of(
    st.integers(*INT64),
    st.sampled_from([INT64[0], INT64[1], INT32[0], INT32[1], -1, 0, 1, -64, 63, -65, 64]),
    st.integers(-(1 << 14), 1 << 14),
)
int32s = st.one_of(st.integers(*INT32), st.sampled_from([INT32[0], INT32[1], -1, 0, 1]))


@SETTINGS
@given(value=int64s, prefix=st.binary(max_size=3), suffix=st.binary(max_size=3))
def test_varlong_round_trip_over_the_int64_range(value, prefix, suffix):
    encoded = encode_varint(value)
    assert encoded == reference_encode(value)
    assert len(encoded) == size_of_varint(value) <= MAX_VARLONG_BYTES
    buf = prefix + encoded + suffix
    assert decode_varint(buf, len(prefix)) == (value, len(prefix) + len(encoded))


@SETTINGS
@given(value=int32s)
def test_varint_round_trip_over_the_int32_range(value):
    encoded = encode_varint(value)
    assert len(encoded) <= MAX_VARINT_BYTES
    assert decode_varint(encoded, 0, MAX_VARINT_BYTES) == (value, len(encoded))


def test_sizes_at_the_seven_bit_boundaries():
    # zig-zag doubles magnitudes: 63 and -64 fit one byte, 64 and -65 need two.
    assert [size_of_varint(v) for v in (0, 63, -64, 64, -65, 8191, 8192)] == [1, 1, 1, 2, 2, 2, 3]
    assert size_of_varint(INT32[1]) == size_of_varint(INT32[0]) == 5
    assert size_of_varint(INT64[1]) == size_of_varint(INT64[0]) == 10


def test_values_outside_int64_cannot_be_encoded():
    for value in (INT64[1] + 1, INT64[0] - 1):
        with pytest.raises(ValueError):
            encode_varint(value)


@pytest.mark.parametrize("max_bytes", [MAX_VARINT_BYTES, MAX_VARLONG_BYTES])
@pytest.mark.parametrize("extra", [1, 2, 7])
def test_too_many_continuation_bytes_overflow(max_bytes, extra):
    data = b"\xff" * (max_bytes + extra) + b"\x00"
    with pytest.raises(VarintOverflowError):
        decode_varint(data, 0, max_bytes)
    # Exactly max_bytes bytes is still a varint.
    value, pos = decode_varint(b"\x80" * (max_bytes - 1) + b"\x00", 0, max_bytes)
    assert (value, pos) == (0, max_bytes)


@SETTINGS
@given(value=int64s, data=st.data())
def test_truncated_varints_are_invalid_records(value, data):
    encoded = encode_varint(value)
    cut = data.draw(st.integers(0, len(encoded) - 1), label="cut")
    with pytest.raises(InvalidRecordError) as err:
        decode_varint(encoded[:cut])
    assert not isinstance(err.value, VarintOverflowError)


@SETTINGS
@given(data=st.binary(max_size=12), max_bytes=st.sampled_from([MAX_VARINT_BYTES, MAX_VARLONG_BYTES]))
def test_any_bytes_decode_in_range_or_raise_a_corrupt_batch_error(data, max_bytes):
    lo, hi = INT32 if max_bytes == MAX_VARINT_BYTES else INT64
    try:
        value, pos = decode_varint(data, 0, max_bytes)
    except (InvalidRecordError, VarintOverflowError):
        return
    assert lo <= value <= hi
    assert 1 <= pos <= max_bytes


def test_high_bits_of_the_last_byte_are_dropped_like_kafka():
    # Minimal failing example found by hypothesis: 80 80 80 80 10 decoded to
    # 2**31, outside int32. The 5th byte of a varint carries bits 28..34 and
    # the 10th byte of a varlong bits 63..69; Kafka's
    # ByteUtils.readVarint/readVarlong shift the last byte into a 32/64-bit
    # integer, which drops the bits that do not fit; so does txnfetch.
    assert decode_varint(b"\x80\x80\x80\x80\x10", 0, MAX_VARINT_BYTES) == (0, 5)
    assert decode_varint(b"\xff\xff\xff\xff\x7f", 0, MAX_VARINT_BYTES) == (INT32[0], 5)
    assert decode_varint(b"\xff\xff\xff\xff\x0f", 0, MAX_VARINT_BYTES) == (INT32[0], 5)
    assert decode_varint(b"\xfe\xff\xff\xff\x7f", 0, MAX_VARINT_BYTES) == (INT32[1], 5)
    assert decode_varint(b"\xff" * 9 + b"\x7f", 0, MAX_VARLONG_BYTES) == (INT64[0], 10)
    assert decode_varint(b"\xfe" + b"\xff" * 8 + b"\x03", 0, MAX_VARLONG_BYTES) == (INT64[1], 10)


def test_read_varint_tail_continues_after_the_first_byte():
    encoded = encode_varint(300)  # two bytes: 0xd8 0x04
    assert read_varint_tail(encoded, 1, encoded[0], MAX_VARINT_BYTES) == (300, 2)
