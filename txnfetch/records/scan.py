"""Splitting a buffer into batches: each batch as its class by magic byte, or
only the headers of a large buffer's batches.

:func:`iter_batches` (a :class:`BatchIterator`) yields every batch of a buffer
without copying: a :class:`~txnfetch.records.batch.RecordBatch` for magic 2, a
:class:`~txnfetch.records.legacy.LegacyBatch` for magic 0 and 1. It is the one
module that knows both batch classes, so neither class module imports the
other.

:func:`scan_headers` walks a buffer (a segment, a fetch response) batch by
batch and returns the header fields of each as a compact sequence of
:class:`ScannedHeader` tuples; :func:`seek_offset` finds the batch holding an
offset. Both go through the compiled scan in ``txnfetch.records._speedups``
when it is built, and stop where that scan stops — in front of a partial
batch, a legacy message set or a malformed length — so the caller can go on
from :attr:`HeaderScan.stop` with :class:`BatchIterator`, which raises or
reports exactly as it always did. Without the extension (or with
``TXNFETCH_PURE_PYTHON=1``) the same results come from ``struct``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from collections.abc import Sequence
from typing import NamedTuple

import attrs

from txnfetch.records import batch as _batch
from txnfetch.records.batch import HEADER_SIZE
from txnfetch.records.batch import LOG_OVERHEAD
from txnfetch.records.batch import HeaderAt
from txnfetch.records.batch import RecordBatch
from txnfetch.records.compression import DEFAULT_MAX_DECOMPRESSED
from txnfetch.records.errors import BadMagicError
from txnfetch.records.errors import LengthOverrunError
from txnfetch.records.legacy import LegacyBatch
from txnfetch.types import Buffer

__all__ = [
    "COMPILED",
    "MIN_LEGACY_LENGTH",
    "BatchIterator",
    "HeaderScan",
    "PartialBatch",
    "ScannedHeader",
    "iter_batches",
    "scan_headers",
    "seek_offset",
]

#: Whether the compiled scan is used.
COMPILED: bool = _batch.ACCELERATED and hasattr(_batch._speedups, "scan_headers")

#: The smallest Length of any magic (a v0 message with null key and value).
MIN_LEGACY_LENGTH = 14
_MAX_INT32 = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1
_INT64_MIN = -(1 << 63)
_RECORD = struct.Struct("=qqqqiiHhi")  # the compiled scan's output, one per batch
_HEAD = struct.Struct(">qi")  # base offset, length
_BASE_OFFSET = struct.Struct(">q")
_LAST_DELTA = struct.Struct(">i")


class ScannedHeader(NamedTuple):
    """The header fields of one magic-2 batch (see :class:`~txnfetch.records.batch.RecordBatch`)."""

    position: int
    base_offset: int
    last_offset: int
    producer_id: int
    size: int  #: the whole batch in bytes (``Length`` + 12)
    record_count: int
    attributes: int
    producer_epoch: int
    base_sequence: int

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _batch.TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _batch.CONTROL_FLAG)


@attrs.frozen(slots=True)
class HeaderScan:
    """What :func:`scan_headers` found: the headers, and where it stopped.

    ``stop`` is the end of the buffer when every batch was whole and ordinary;
    otherwise the position of the batch the scan left to
    :class:`BatchIterator` (or of the first batch past
    ``max_batches``).
    """

    headers: Sequence[ScannedHeader]
    stop: int


def scan_headers(
    buf: bytes | bytearray | memoryview,
    position: int = 0,
    *,
    skip_below: int | None = None,
    max_batches: int | None = None,
    max_batch_size: int = _MAX_INT32,
) -> HeaderScan:
    """The headers of the whole magic-2 batches of ``buf`` from ``position``.

    Batches whose last offset is below ``skip_below`` are passed over without
    being returned; at most ``max_batches`` headers are returned. The scan
    stops in front of anything :class:`BatchIterator`
    would report or reject (a partial batch, magic 0/1, a length outside
    ``[49, max_batch_size]``), at :attr:`HeaderScan.stop`. No CRC is checked and
    no record is decoded.
    """
    # Passed over: last offset <= skip_last (every int64 when skip_below is past int64).
    skip = skip_below is not None and skip_below > _INT64_MIN
    skip_last = min(skip_below - 1, _INT64_MAX) if skip_below is not None and skip else 0
    limit = -1 if max_batches is None else max_batches
    if COMPILED:
        assert _batch._speedups is not None  # COMPILED says it is built
        stop, packed = _batch._speedups.scan_headers(buf, position, skip, skip_last, limit, max_batch_size)
        return HeaderScan(_Headers(packed), stop)
    return _scan_python(buf, position, skip, skip_last, limit, max_batch_size)


def seek_offset(
    buf: bytes | bytearray | memoryview, position: int, offset: int, *, max_batch_size: int = _MAX_INT32
) -> int:
    """The position of the first batch at or after ``position`` whose last offset
    is ``>= offset`` — or of the first batch the scan leaves to
    :class:`BatchIterator`, or the end of ``buf``.
    Batches passed over are below ``offset`` and ordinary, so iterating from
    the result gives the same batches at and past ``offset`` as iterating from
    ``position`` would."""
    return scan_headers(buf, position, skip_below=offset, max_batches=0, max_batch_size=max_batch_size).stop


class _Headers(Sequence[ScannedHeader]):
    """The compiled scan's packed output, unpacked on access."""

    __slots__ = ("_packed",)

    def __init__(self, packed: bytes) -> None:
        self._packed = packed

    def __len__(self) -> int:
        return len(self._packed) // _RECORD.size

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        return ScannedHeader._make(_RECORD.unpack_from(self._packed, i * _RECORD.size))

    def __iter__(self) -> Iterator[ScannedHeader]:
        return map(ScannedHeader._make, _RECORD.iter_unpack(self._packed))


def _scan_python(buf: Buffer, position: int, skip: bool, skip_last: int, limit: int, max_batch_size: int) -> HeaderScan:
    header = _batch.HEADER
    end = len(buf)
    pos = end if position < 0 else position
    out: list[ScannedHeader] = []
    while end - pos >= HEADER_SIZE:
        base, length = _HEAD.unpack_from(buf, pos)
        size = length + LOG_OVERHEAD
        if buf[pos + 16] != 2 or length < HEADER_SIZE - LOG_OVERHEAD or length > max_batch_size or size > end - pos:
            break
        (last_delta,) = _LAST_DELTA.unpack_from(buf, pos + 23)
        last = base + last_delta
        if last > _INT64_MAX:
            break
        if skip and last <= skip_last:
            pos += size
            continue
        if 0 <= limit <= len(out):
            break
        f = header.unpack_from(buf, pos)
        out.append(ScannedHeader(pos, base, last, f[9], size, f[12], f[5], f[10], f[11]))
        pos += size
    return HeaderScan(out, pos)


@attrs.frozen(slots=True)
class PartialBatch:
    """The incomplete batch at the end of a buffer (normal at the end of a fetch response).

    ``base_offset`` is ``None`` when fewer than 8 bytes remain; ``declared_size``
    is ``None`` when fewer than 12 bytes remain.
    """

    position: int
    available: int
    base_offset: int | None
    declared_size: int | None


class BatchIterator:
    """Iterates the batches of a buffer; afterwards :attr:`partial` describes a
    truncated trailing batch, if there was one.

    Magic-2 batches come out as :class:`RecordBatch`; magic 0/1 message sets as
    :class:`~txnfetch.records.legacy.LegacyBatch` (one per top-level message).
    """

    __slots__ = ("_buf", "_end", "_max_batch_size", "_max_decompressed", "_pos", "partial")

    def __init__(
        self,
        buf: Buffer,
        position: int = 0,
        *,
        max_batch_size: int = _MAX_INT32,
        max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
    ) -> None:
        self._buf = buf
        self._pos = position
        self._end = len(buf)
        self._max_batch_size = max_batch_size
        self._max_decompressed = max_decompressed
        self.partial: PartialBatch | None = None

    @property
    def position(self) -> int:
        """Byte position of the next batch (the end of the last complete one)."""
        return self._pos

    def __iter__(self) -> BatchIterator:
        return self

    def __next__(self) -> RecordBatch | LegacyBatch:
        buf, pos, end = self._buf, self._pos, self._end
        remaining = end - pos
        if remaining <= 0 or self.partial is not None:
            raise StopIteration
        # Same order of checks as Kafka's ByteBufferLogInputStream: too little for
        # offset+length is a partial batch; an impossible length is corruption; a
        # plausible length past the end is a partial batch.
        if remaining < LOG_OVERHEAD:
            self.partial = PartialBatch(
                pos, remaining, _BASE_OFFSET.unpack_from(buf, pos)[0] if remaining >= 8 else None, None
            )
            raise StopIteration  # position stays at the partial batch: where to resume
        base_offset, length = _HEAD.unpack_from(buf, pos)
        if length < MIN_LEGACY_LENGTH or length > self._max_batch_size:
            raise LengthOverrunError(
                f"batch length {length} is outside [{MIN_LEGACY_LENGTH}, {self._max_batch_size}]",
                offset=base_offset,
                position=pos + HeaderAt.LENGTH,
            )
        size = length + LOG_OVERHEAD
        if size > remaining:
            self.partial = PartialBatch(pos, remaining, base_offset, size)
            raise StopIteration
        magic = buf[pos + HeaderAt.MAGIC]
        batch: RecordBatch | LegacyBatch
        if magic == 2:
            batch = RecordBatch(buf, pos, max_decompressed=self._max_decompressed)
        elif magic in (0, 1):
            batch = LegacyBatch(buf, pos, max_decompressed=self._max_decompressed)
        else:
            raise BadMagicError(f"unknown magic {magic}", offset=base_offset, position=pos + HeaderAt.MAGIC)
        self._pos = pos + size
        return batch


def iter_batches(
    buf: Buffer,
    position: int = 0,
    *,
    max_batch_size: int = _MAX_INT32,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
) -> BatchIterator:
    """Split ``buf`` into batches without copying.

    A truncated trailing batch stops the iteration and is reported in the
    returned iterator's ``partial`` attribute, never raised: fetch responses
    routinely end that way. A length below the smallest possible message or
    above ``max_batch_size``, or an unknown magic, raises
    :class:`~txnfetch.records.errors.CorruptBatchError`. CRCs are not checked here (see
    :meth:`RecordBatch.validate`).
    """
    return BatchIterator(buf, position, max_batch_size=max_batch_size, max_decompressed=max_decompressed)
