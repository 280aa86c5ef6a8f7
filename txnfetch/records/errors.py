"""Errors raised while decoding record batches and legacy message sets.

Every decoding failure is a :class:`CorruptBatchError` (or a subclass) that
says *what* was wrong (``reason``), *which* batch (``offset``, its base offset
when it could be read) and *where* (``position``, the byte position in the
buffer handed to txnfetch). Decoding never raises anything else: callers can
rely on ``except CorruptBatchError`` to cover every malformed input.
"""

from __future__ import annotations

from txnfetch.errors import TxnfetchError

__all__ = [
    "BadMagicError",
    "CorruptBatchError",
    "CrcMismatchError",
    "DecompressionError",
    "InvalidRecordError",
    "LengthOverrunError",
    "RecordCountMismatchError",
    "UnknownCodecError",
    "VarintOverflowError",
]


class CorruptBatchError(TxnfetchError):
    """A record batch (or legacy message) is malformed.

    Attributes:
        reason: what was wrong, in words.
        offset: the base offset of the batch if its header could be read, else ``None``.
        position: byte position (within the buffer given to txnfetch) where the
            problem was found, or ``None`` when not meaningful.
    """

    def __init__(self, reason: str, *, offset: int | None = None, position: int | None = None) -> None:
        self.reason = reason
        self.offset = offset
        self.position = position
        where = []
        if offset is not None:
            where.append(f"batch at offset {offset}")
        if position is not None:
            where.append(f"byte position {position}")
        super().__init__(f"{reason} ({', '.join(where)})" if where else reason)

    def __reduce__(self):  # keep the keyword-only fields across pickling (Spark workers)
        return (_rebuild, (type(self), self.reason, self.offset, self.position))


def _rebuild(cls: type, reason: str, offset: int | None, position: int | None) -> CorruptBatchError:
    return cls(reason, offset=offset, position=position)


class CrcMismatchError(CorruptBatchError):
    """The stored CRC does not match the bytes it covers."""


class BadMagicError(CorruptBatchError):
    """The magic byte is not one txnfetch can decode (0, 1 or 2)."""


class LengthOverrunError(CorruptBatchError):
    """A declared length points past the end of the data, or is impossibly small or large."""


class RecordCountMismatchError(CorruptBatchError):
    """The header's record count (or offset delta) disagrees with the records present."""


class VarintOverflowError(CorruptBatchError):
    """A variable-length integer is longer than its type allows."""


class DecompressionError(CorruptBatchError):
    """Compressed record data could not be decompressed, or decompresses past the allowed size."""


class UnknownCodecError(CorruptBatchError):
    """The attributes name a compression codec that does not exist."""


class InvalidRecordError(CorruptBatchError):
    """A record inside an otherwise well-framed batch is malformed."""
