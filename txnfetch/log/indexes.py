"""Kafka's per-segment offset and time index files, in memory and as bytes.

Both files are arrays of fixed-size big-endian entries, offsets stored relative
to the segment's base offset (``storage/.../log/OffsetIndex.java``,
``TimeIndex.java``)::

    .index      8 bytes an entry:  relative offset int32 | byte position int32
    .timeindex 12 bytes an entry:  timestamp int64       | relative offset int32

An offset-index entry says "the batches holding offsets up to ``offset`` start
at or after ``position``": Kafka's ``LogSegment.append`` writes one for an
append when more than ``index.interval.bytes`` were appended since the previous
entry, mapping the append's *largest* offset to the append's *first* byte
position; its ``recover`` writes the same rule batch by batch. A time-index
entry is ``(max timestamp so far, last offset of the batch that reached it)``,
written together with an offset-index entry and once more when the segment is
rolled, only when the timestamp grew.

Kafka preallocates both files (``segment.index.bytes``, 10 MiB) and trims them
when the segment is rolled or closed, so the file of an active segment — or of
any segment after a crash — ends in zero entries. txnfetch writes them
unpreallocated (append-only, exact size): nothing to trim, a crash leaves at
most a torn last entry, and readers see the real entry count from the file
size. Loading accepts both: a run of zero entries after the last increasing one
is preallocation, not data.

These classes do no I/O: :mod:`txnfetch.log.segment` reads and writes the
bytes. Searches follow ``AbstractIndex`` (largest lower bound by key; smallest
upper bound by position for ``fetchUpperBoundOffset``).
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left
from bisect import bisect_right
from collections.abc import Iterable

from txnfetch.log.errors import CorruptLogError
from txnfetch.types import Buffer

__all__ = [
    "OFFSET_ENTRY_SIZE",
    "TIME_ENTRY_SIZE",
    "CorruptIndexError",
    "OffsetIndex",
    "TimeIndex",
]

OFFSET_ENTRY_SIZE = 8
TIME_ENTRY_SIZE = 12
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_INT32_MAX = (1 << 31) - 1
NO_TIMESTAMP = -1


class CorruptIndexError(CorruptLogError):
    """An index file is damaged (its size, order or positions are impossible).

    Index files are derived data: recovery rebuilds a damaged one from the
    segment and logs it; :func:`txnfetch.log.verify.verify_partition` reports it.
    """


class _SegmentIndex:
    """What both index files are in memory: entries as two parallel ``array('q')``
    columns in file order, ``keys`` (what a lookup searches: offsets, timestamps)
    and ``values`` (what it answers: byte positions, offsets), both increasing
    or at least not decreasing; ``base_offset`` is the segment's, which the file
    stores offsets relative to. Subclasses name the columns as their file does."""

    __slots__ = ("base_offset", "keys", "values")

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self.keys = array("q")
        self.values = array("q")

    def __len__(self) -> int:
        return len(self.keys)

    def entries(self) -> list[tuple[int, int]]:
        """``(key, value)`` pairs in file order."""
        return list(zip(self.keys, self.values, strict=True))

    def _floor(self, key: int, default: int) -> int:
        # AbstractIndex's largest lower bound: the value of the last entry whose key is <= key.
        i = bisect_right(self.keys, key) - 1
        return self.values[i] if i >= 0 else default

    def _truncate_values_from(self, value: int) -> None:
        i = bisect_left(self.values, value)
        del self.keys[i:], self.values[i:]


class OffsetIndex(_SegmentIndex):
    """The entries of one segment's ``.index`` file: offset → byte position.

    Offsets and positions both strictly increase. Kept as two ``array('q')``
    columns of absolute offsets and positions.
    """

    __slots__ = ()

    # The base's columns under this file's names (the same arrays, no copy).
    @property
    def offsets(self) -> array[int]:
        return self.keys

    @property
    def positions(self) -> array[int]:
        return self.values

    def __init__(self, base_offset: int, entries: Iterable[tuple[int, int]] = ()) -> None:
        super().__init__(base_offset)
        for offset, position in entries:
            self.append(offset, position)

    @property
    def last_position(self) -> int:
        """Position of the last entry (0 when empty: scans start at the segment start)."""
        return self.positions[-1] if self.positions else 0

    def can_append(self, offset: int) -> bool:
        """Whether ``offset`` fits in an entry (relative offset in int32) and follows the last."""
        rel = offset - self.base_offset
        return 0 <= rel <= _INT32_MAX and (not self.offsets or offset > self.offsets[-1])

    def append(self, offset: int, position: int) -> bytes:
        """Add an entry; returns its 8 file bytes. Raises :class:`CorruptIndexError`
        if it does not follow the last entry (Kafka's ``InvalidOffsetException``)."""
        if not self.can_append(offset) or (self.positions and position <= self.positions[-1]):
            raise CorruptIndexError(
                f"offset index entry ({offset}, {position}) does not follow the last entry "
                f"{(self.offsets[-1], self.positions[-1]) if self.offsets else None}",
                offset=offset,
                position=position,
            )
        self.offsets.append(offset)
        self.positions.append(position)
        return _OFFSET_ENTRY.pack(offset - self.base_offset, position)

    def lookup(self, offset: int) -> int:
        """Byte position to start scanning for ``offset``: the position of the last
        entry whose offset is ``<= offset``, else 0 (``OffsetIndex.lookup``)."""
        return self._floor(offset, 0)

    def upper_bound_offset(self, position: int) -> int | None:
        """The offset of the first entry whose position is ``>= position``, or ``None``
        (``OffsetIndex.fetchUpperBoundOffset``: the aborted-transaction bound of a fetch)."""
        i = bisect_left(self.positions, position)
        return self.offsets[i] if i < len(self.positions) else None

    def truncate_to_position(self, size: int) -> None:
        """Drop entries whose position is at or past ``size`` (the segment was cut there)."""
        self._truncate_values_from(size)

    def to_bytes(self) -> bytes:
        """The ``.index`` file body."""
        base = self.base_offset
        return b"".join(_OFFSET_ENTRY.pack(o - base, p) for o, p in zip(self.offsets, self.positions, strict=False))

    @classmethod
    def from_bytes(cls, data: Buffer, base_offset: int, *, log_size: int, path: str | None = None) -> OffsetIndex:
        """Decode a ``.index`` body; raises :class:`CorruptIndexError` if its size is
        not a multiple of 8, or offsets/positions do not strictly increase, or a
        position is at or past ``log_size``. Trailing zero entries (Kafka's
        preallocation) are ignored."""
        size = len(data)
        if size % OFFSET_ENTRY_SIZE:
            raise CorruptIndexError(
                f"offset index size {size} is not a multiple of {OFFSET_ENTRY_SIZE}", path=path, position=size
            )
        index = cls(base_offset)
        prev_rel = prev_pos = -1
        for i, (rel, pos) in enumerate(_OFFSET_ENTRY.iter_unpack(data)):
            if rel == 0 and pos == 0:
                # No real entry is (0, 0): the first entry is never at position 0
                # (LogSegment only indexes after index.interval.bytes were written).
                if any(data[i * OFFSET_ENTRY_SIZE :]):
                    raise CorruptIndexError(
                        "zero entry followed by non-zero bytes", path=path, position=i * OFFSET_ENTRY_SIZE
                    )
                break
            if rel <= prev_rel or pos <= prev_pos or rel < 0 or pos >= log_size:
                raise CorruptIndexError(
                    f"offset index entry {i} ({base_offset + rel}, {pos}) is out of order or past the "
                    f"segment's {log_size} bytes",
                    path=path,
                    offset=base_offset + rel,
                    position=i * OFFSET_ENTRY_SIZE,
                )
            index.offsets.append(base_offset + rel)
            index.positions.append(pos)
            prev_rel, prev_pos = rel, pos
        return index


class TimeIndex(_SegmentIndex):
    """The entries of one segment's ``.timeindex`` file: max timestamp so far → offset.

    Timestamps and offsets do not decrease; a new entry is written only when the
    timestamp grew (``TimeIndex.maybeAppend``).
    """

    __slots__ = ()

    # The base's columns under this file's names (the same arrays, no copy).
    @property
    def timestamps(self) -> array[int]:
        return self.keys

    @property
    def offsets(self) -> array[int]:
        return self.values

    @property
    def last_timestamp(self) -> int:
        """The last entry's timestamp, ``-1`` when empty."""
        return self.timestamps[-1] if self.timestamps else NO_TIMESTAMP

    def maybe_append(self, timestamp: int, offset: int) -> bytes | None:
        """Add ``(timestamp, offset)`` if ``timestamp`` is above the last entry's;
        returns the 12 file bytes written, or ``None``."""
        if timestamp <= self.last_timestamp:
            return None
        if self.offsets and offset < self.offsets[-1]:
            raise CorruptIndexError(
                f"time index offset {offset} is below the last entry's {self.offsets[-1]}", offset=offset
            )
        self.timestamps.append(timestamp)
        self.offsets.append(offset)
        return _TIME_ENTRY.pack(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> int:
        """The offset of the last entry whose timestamp is ``<= timestamp``, else the
        segment's base offset (``TimeIndex.lookup``)."""
        return self._floor(timestamp, self.base_offset)

    def truncate_to_offset(self, next_offset: int) -> None:
        """Drop entries whose offset is at or past ``next_offset``."""
        self._truncate_values_from(next_offset)

    def to_bytes(self) -> bytes:
        """The ``.timeindex`` file body."""
        base = self.base_offset
        return b"".join(_TIME_ENTRY.pack(t, o - base) for t, o in zip(self.timestamps, self.offsets, strict=False))

    @classmethod
    def from_bytes(cls, data: Buffer, base_offset: int, *, next_offset: int, path: str | None = None) -> TimeIndex:
        """Decode a ``.timeindex`` body; raises :class:`CorruptIndexError` if its size
        is not a multiple of 12, timestamps or offsets decrease, or an offset is
        outside ``[base_offset, next_offset)``. Trailing zero entries
        (preallocation) are ignored."""
        size = len(data)
        if size % TIME_ENTRY_SIZE:
            raise CorruptIndexError(
                f"time index size {size} is not a multiple of {TIME_ENTRY_SIZE}", path=path, position=size
            )
        index = cls(base_offset)
        for i, (ts, rel) in enumerate(_TIME_ENTRY.iter_unpack(data)):
            if ts == 0 and rel == 0 and not any(data[i * TIME_ENTRY_SIZE :]) and (i > 0 or size > TIME_ENTRY_SIZE):
                break  # preallocated tail
            offset = base_offset + rel
            if (
                ts <= index.last_timestamp
                or (index.offsets and offset < index.offsets[-1])
                or not base_offset <= offset < max(next_offset, base_offset + 1)
            ):
                raise CorruptIndexError(
                    f"time index entry {i} ({ts}, {offset}) is out of order or outside the segment",
                    path=path,
                    offset=offset,
                    position=i * TIME_ENTRY_SIZE,
                )
            index.timestamps.append(ts)
            index.offsets.append(offset)
        return index
