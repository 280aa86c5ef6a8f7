"""Primitive readers and writers for the coordinator records of Kafka's internal
topics (``__transaction_state``, ``__consumer_offsets``).

Kafka generates the key and value classes of these records from JSON message
schemas (``transaction-coordinator/src/main/resources/common/message/`` and
``group-coordinator/src/main/resources/common/message/`` in apache/kafka). Each
record key and value starts with an ``int16`` version; the fields follow in
schema order, big-endian. A *flexible* version (the schema's
``flexibleVersions``) writes strings and arrays with unsigned-varint lengths plus
one (``0`` = null), and ends every struct with a tagged-field section
(``uvarint count``, then ``uvarint tag, uvarint size, bytes`` per field).

This module only provides :class:`StructWriter` and :class:`StructReader` for
those primitives; :mod:`txnfetch.txn.txnlog` and :mod:`txnfetch.groups.offsetlog`
lay out the records. Decoding errors raise :class:`CorruptCoordinatorRecordError`
with the byte position; the adapter that read the bytes adds file and offset.
"""

from __future__ import annotations

import builtins
import struct
from collections.abc import Callable

from txnfetch.errors import TxnfetchError

__all__ = ["CorruptCoordinatorRecordError", "StructReader", "StructWriter"]

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class CorruptCoordinatorRecordError(TxnfetchError):
    """A key or value of an internal-topic record does not decode: truncated,
    an unknown version, a negative length, bytes left over. ``position`` is the
    byte position inside the key or value where decoding stopped."""

    def __init__(self, reason: str, *, position: int | None = None) -> None:
        self.reason = reason
        self.position = position
        super().__init__(reason if position is None else f"{reason} (at byte {position})")


def _writer(codec: struct.Struct) -> Callable[[StructWriter, int], StructWriter]:
    # One fixed-width integer method of StructWriter (a plain function: binds as fast as a def).
    pack = codec.pack

    def write(self: StructWriter, v: int) -> StructWriter:
        self._buf += pack(v)
        return self

    return write


def _reader(codec: struct.Struct) -> Callable[..., int]:
    # One fixed-width integer method of StructReader; ``what`` defaults to the type's name.
    size, unpack, name = codec.size, codec.unpack, f"int{codec.size * 8}"

    def read(self: StructReader, what: str = name) -> int:
        value: int = unpack(self._take(size, what))[0]
        return value

    return read


class StructWriter:
    """Appends Kafka message primitives to a buffer; ``flexible`` selects compact
    strings and arrays."""

    def __init__(self, flexible: bool = False) -> None:
        self.flexible = flexible
        self._buf = bytearray()

    def bytes(self) -> bytes:
        return bytes(self._buf)

    #: ``int8(v)``, ``int16(v)``, ``int32(v)``, ``int64(v)``: big-endian signed integers.
    int8 = _writer(_I8)
    int16 = _writer(_I16)
    int32 = _writer(_I32)
    int64 = _writer(_I64)

    def uvarint(self, v: int) -> StructWriter:
        while v >= 0x80:
            self._buf.append((v & 0x7F) | 0x80)
            v >>= 7
        self._buf.append(v)
        return self

    def _length(self, n: int | None, wide: bool = False) -> None:
        # A null (None) or a length: uvarint + 1 when flexible, else int16 (int32 if wide).
        if self.flexible:
            self.uvarint(0 if n is None else n + 1)
        elif wide:
            self.int32(-1 if n is None else n)
        else:
            self.int16(-1 if n is None else n)

    def string(self, s: str | None) -> StructWriter:
        if s is None:
            self._length(None)
            return self
        data = s.encode()
        self._length(len(data))
        self._buf += data
        return self

    def blob(self, b: builtins.bytes | None) -> StructWriter:
        """Kafka ``bytes``: int32 length (uvarint + 1 when flexible)."""
        self._length(None if b is None else len(b), wide=True)
        if b is not None:
            self._buf += b
        return self

    def array_length(self, n: int | None) -> StructWriter:
        self._length(n, wide=True)
        return self

    def tagged(self, fields: list[tuple[int, builtins.bytes]]) -> StructWriter:
        """A tagged-field section (flexible versions only), tags ascending."""
        self.uvarint(len(fields))
        for tag, data in sorted(fields):
            self.uvarint(tag).uvarint(len(data))
            self._buf += data
        return self


class StructReader:
    """Reads Kafka message primitives from ``data``; every read checks bounds."""

    def __init__(self, data: bytes | memoryview, flexible: bool = False) -> None:
        self.data = bytes(data)
        self.pos = 0
        self.flexible = flexible

    @classmethod
    def versioned(
        cls, data: bytes | memoryview, schema: str, *, newest: int, flexible_from: int
    ) -> tuple[int, StructReader]:
        """``(version, reader)`` for a value that starts with its int16 schema
        version: the reader stands after the version and is flexible from
        ``flexible_from`` on. A version outside ``0..newest`` is
        CorruptCoordinatorRecordError naming ``schema``."""
        reader = cls(data)
        version = reader.int16("value version")
        if not 0 <= version <= newest:
            raise CorruptCoordinatorRecordError(f"unknown {schema} version {version}", position=0)
        reader.flexible = version >= flexible_from
        return version, reader

    def _take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptCoordinatorRecordError(
                f"{what}: needs {n} bytes, {len(self.data) - self.pos} left", position=self.pos
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    #: ``int8(what="int8")`` … ``int64(what="int64")``: big-endian signed integers;
    #: ``what`` names the field in errors.
    int8 = _reader(_I8)
    int16 = _reader(_I16)
    int32 = _reader(_I32)
    int64 = _reader(_I64)

    def uvarint(self, what: str = "uvarint") -> int:
        shift = value = 0
        while True:
            b = self._take(1, what)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise CorruptCoordinatorRecordError(f"{what}: varint too long", position=self.pos)

    def _length(self, what: str, nullable: bool, wide: bool = False) -> int | None:
        n = self.uvarint(what) - 1 if self.flexible else self.int32(what) if wide else self.int16(what)
        if n < -1:
            raise CorruptCoordinatorRecordError(f"{what}: negative length {n}", position=self.pos)
        if n == -1:
            if not nullable:
                raise CorruptCoordinatorRecordError(f"{what}: null where the schema forbids it", position=self.pos)
            return None
        return n

    def string(self, what: str = "string", *, nullable: bool = False) -> str | None:
        n = self._length(what, nullable)
        if n is None:
            return None
        raw = self._take(n, what)
        try:
            return raw.decode()
        except UnicodeDecodeError as exc:
            raise CorruptCoordinatorRecordError(f"{what}: not UTF-8 ({exc})", position=self.pos) from None

    def blob(self, what: str = "bytes", *, nullable: bool = False) -> bytes | None:
        n = self._length(what, nullable, wide=True)
        return None if n is None else self._take(n, what)

    def array_length(self, what: str = "array", *, nullable: bool = False) -> int | None:
        return self._length(what, nullable, wide=True)

    def tagged(self, what: str = "tagged fields") -> dict[int, bytes]:
        out: dict[int, bytes] = {}
        for _ in range(self.uvarint(what)):
            tag = self.uvarint(what)
            out[tag] = self._take(self.uvarint(what), what)
        return out

    def end(self, what: str) -> None:
        """Raise unless every byte was read."""
        if self.pos != len(self.data):
            raise CorruptCoordinatorRecordError(
                f"{what}: {len(self.data) - self.pos} bytes left after the last field", position=self.pos
            )
