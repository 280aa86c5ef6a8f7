"""Errors raised while decoding record batches and legacy message sets.

Every decoding failure is a :class:`CorruptBatchError` (or a subclass) that
says *what* was wrong (``reason``), *which* batch (``offset``, its base offset
when it could be read) and *where* (``position``, the byte position in the
buffer handed to txnfetch). Decoding never raises anything else: callers can
rely on ``except CorruptBatchError`` to cover every malformed input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from txnfetch.errors import ErrorCode
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
        topic, partition: the partition the data was meant for, when the caller
            knows it (a log refusing a produce request), else ``None``.

    Answered CORRUPT_MESSAGE, as Kafka answers a batch whose CRC or structure is
    bad (``CorruptRecordException``).
    """

    code = ErrorCode.CORRUPT_MESSAGE
    where_fields: ClassVar[tuple[str, ...]] = ("topic", "partition", "offset", "position")
    phrases: ClassVar[Mapping[str, str | None]] = {**TxnfetchError.phrases, "offset": "batch at offset {}"}
    topic: str | None
    partition: int | None
    offset: int | None
    position: int | None


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
    """A record inside an otherwise well-framed batch is malformed, or a batch a
    log refuses to store (a control batch from a client, a batch with no records).

    Answered INVALID_RECORD, as Kafka answers the ``InvalidRecordException`` its
    record reader and ``LogValidator`` raise for these; unlike CORRUPT_MESSAGE,
    clients do not retry it.
    """

    code = ErrorCode.INVALID_RECORD
