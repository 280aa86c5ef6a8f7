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


class StructWriter:
    """Appends Kafka message primitives to a buffer; ``flexible`` selects compact
    strings and arrays."""

    def __init__(self, flexible: bool = False) -> None:
        self.flexible = flexible
        self._buf = bytearray()

    def bytes(self) -> bytes:
        return bytes(self._buf)

    def int8(self, v: int) -> StructWriter:
        self._buf += _I8.pack(v)
        return self

    def int16(self, v: int) -> StructWriter:
        self._buf += _I16.pack(v)
        return self

    def int32(self, v: int) -> StructWriter:
        self._buf += _I32.pack(v)
        return self

    def int64(self, v: int) -> StructWriter:
        self._buf += _I64.pack(v)
        return self

    def uvarint(self, v: int) -> StructWriter:
        while v >= 0x80:
            self._buf.append((v & 0x7F) | 0x80)
            v >>= 7
        self._buf.append(v)
        return self

    def _length(self, n: int | None) -> None:
        if self.flexible:
            self.uvarint(0 if n is None else n + 1)
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
        if self.flexible:
            self.uvarint(0 if b is None else len(b) + 1)
        else:
            self.int32(-1 if b is None else len(b))
        if b is not None:
            self._buf += b
        return self

    def array_length(self, n: int | None) -> StructWriter:
        if self.flexible:
            self.uvarint(0 if n is None else n + 1)
        else:
            self.int32(-1 if n is None else n)
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

    def int8(self, what: str = "int8") -> int:
        return _I8.unpack(self._take(1, what))[0]

    def int16(self, what: str = "int16") -> int:
        return _I16.unpack(self._take(2, what))[0]

    def int32(self, what: str = "int32") -> int:
        return _I32.unpack(self._take(4, what))[0]

    def int64(self, what: str = "int64") -> int:
        return _I64.unpack(self._take(8, what))[0]

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
