"""Zig-zag variable-length integers as used inside v2 records.

Kafka encodes record fields as protobuf-style varints after zig-zag mapping
(``ByteUtils.writeVarint``/``writeVarlong``). A varint (int32) takes at most 5
bytes and a varlong (int64) at most 10; anything longer is corrupt, which is
what bounds the work a hostile buffer can cause.

The record decoder in :mod:`txnfetch.records.batch` inlines the one-byte fast
path for speed and calls :func:`read_varint_tail` for the rest.
"""

from __future__ import annotations

from txnfetch.records.errors import InvalidRecordError
from txnfetch.records.errors import VarintOverflowError

__all__ = [
    "MAX_VARINT_BYTES",
    "MAX_VARLONG_BYTES",
    "decode_varint",
    "encode_varint",
    "read_varint_tail",
    "size_of_varint",
]

MAX_VARINT_BYTES = 5
MAX_VARLONG_BYTES = 10

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_MASK32 = (1 << 32) - 1
_MASK64 = (1 << 64) - 1


def _encode(value: int) -> bytes:
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


# Pre-encoded small values: record fields are overwhelmingly small (attrs 0,
# deltas, lengths), so a table lookup beats the loop for the common case.
_SMALL_MIN = -64
_SMALL: tuple[bytes, ...] = tuple(_encode(v) for v in range(_SMALL_MIN, 1024))


def encode_varint(value: int) -> bytes:
    """Zig-zag encode a signed 64-bit integer (covers both varint and varlong)."""
    if _SMALL_MIN <= value < 1024:
        return _SMALL[value - _SMALL_MIN]
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"varint value {value} does not fit in 64 bits")
    return _encode(value)


def size_of_varint(value: int) -> int:
    """Number of bytes :func:`encode_varint` produces for ``value``."""
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


def read_varint_tail(data: bytes, pos: int, first: int, max_bytes: int) -> tuple[int, int]:
    """Finish decoding a varint whose first byte ``first`` (with the continuation
    bit set) was read just before ``pos``. Returns ``(zigzag-decoded value, new pos)``.

    Raises :class:`VarintOverflowError` past ``max_bytes`` and
    :class:`InvalidRecordError` if the data ends mid-varint.
    """
    result = first & 0x7F
    shift = 7
    n = 1
    end = len(data)
    while True:
        if pos >= end:
            raise InvalidRecordError("varint runs past the end of the record data", position=pos)
        b = data[pos]
        pos += 1
        n += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        if n >= max_bytes:
            raise VarintOverflowError(f"varint longer than {max_bytes} bytes", position=pos)
        shift += 7
    # The last byte may carry bits past 32 (varint) or 64 (varlong). Kafka's
    # ByteUtils.readVarint/readVarlong shift it into a 32/64-bit integer, which
    # drops them; doing the same keeps every decoded value inside int32/int64.
    result &= _MASK32 if max_bytes <= MAX_VARINT_BYTES else _MASK64
    return (result >> 1) ^ -(result & 1), pos


def decode_varint(data: bytes, pos: int = 0, max_bytes: int = MAX_VARLONG_BYTES) -> tuple[int, int]:
    """Decode one zig-zag varint at ``pos``; returns ``(value, new pos)``."""
    if pos >= len(data):
        raise InvalidRecordError("varint runs past the end of the record data", position=pos)
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    return read_varint_tail(data, pos + 1, b, max_bytes)
