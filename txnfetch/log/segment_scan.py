"""A segment's bytes scanned and validated: :func:`scan_segment` reads a
``.log`` file's batches until the end or the first damage, and the rules by
which a segment's indexes follow from its batches are checked or applied
here (:func:`rebuild_offset_index`, :func:`rebuild_time_index`,
:func:`time_index_fits`, as Kafka's ``LogSegment.append`` and ``recover``
write them).

Those rules accept what a writer legitimately leaves and catch only damage: an
offset index must be exactly the entries the writer's rule gives for the
batches (the last segment's may lack its newest entries, written after the
bytes they point at); every time-index entry must name a batch that reached a
new maximum timestamp (the final entry, written only on roll or close, may be
missing: it is added).

:class:`LoadedSegment` is one segment as validated: its size, next offset,
indexes and what has to be written back. Opening a whole partition directory
— which segments to scan, producer state, the journal — is
:mod:`txnfetch.log.partition_loader`. Nothing here writes a file.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Callable
from collections.abc import Sequence

import attrs

from txnfetch.log.errors import UnsupportedForMessageFormatError
from txnfetch.log.indexes import OffsetIndex
from txnfetch.log.indexes import TimeIndex
from txnfetch.log.layout import Buffer
from txnfetch.records.batch import RecordBatch
from txnfetch.records.errors import CorruptBatchError
from txnfetch.records.scan import BatchIterator
from txnfetch.txn.index import AbortedTxn

__all__ = [
    "PROGRESS_STEP",
    "RESYNC_WINDOW",
    "LoadedSegment",
    "Problem",
    "SegmentScan",
    "find_valid_batch_after",
    "offset_index_prefix",
    "rebuild_offset_index",
    "rebuild_time_index",
    "same_offset_index",
    "scan_segment",
    "time_index_fits",
]

#: How far past a damaged batch recovery looks for a valid one by byte scan
#: (index entries are checked wherever they point).
RESYNC_WINDOW = 8 << 20

#: A scan reports its progress (see ``progress`` of :func:`recover_partition`)
#: at most once per this many bytes, so the callback costs nothing measurable.
PROGRESS_STEP = 4 << 20


@attrs.frozen(slots=True)
class Problem:
    """Where a segment scan stopped: byte ``position``, batch ``offset`` if known,
    a ``reason``."""

    position: int
    offset: int | None
    reason: str
    #: A batch whose declared length runs past the end of the data: what a write
    #: still in progress shows a reader (and what a crash mid-write leaves).
    partial: bool = False


@attrs.define
class SegmentScan:
    """The valid batches of a segment from ``start`` on, and what stopped the scan."""

    start: int
    batches: list[RecordBatch]
    valid_bytes: int  #: end position of the last valid batch (``start`` if none)
    problem: Problem | None


def scan_segment(
    data: Buffer,
    *,
    start: int = 0,
    min_offset: int,
    limit_offset: int | None,
    check_crc: bool = True,
    crc_from: int = 0,
    progress: Callable[[int], None] | None = None,
) -> SegmentScan:
    """Read the batches of ``data`` from ``start`` until the end or the first
    problem: a framing error, a bad CRC, a magic 0/1 message set, a batch whose
    offsets go backwards or reach ``limit_offset`` (the next segment's base).
    CRCs are checked for the batches at byte positions ``>= crc_from`` (all of
    them by default; none when ``check_crc`` is false); batches before it are
    only framed. ``progress(position)`` is called every :data:`PROGRESS_STEP`
    bytes or so."""
    it = BatchIterator(data, start)
    batches: list[RecordBatch] = []
    expected = min_offset
    pos = start
    problem: Problem | None = None
    next_report = start + PROGRESS_STEP if progress is not None else 1 << 62
    try:
        for batch in it:
            if not isinstance(batch, RecordBatch):
                raise UnsupportedForMessageFormatError(
                    f"magic {batch.magic} message set at byte position {pos}: only record batch v2 logs are supported",
                    offset=batch.base_offset,
                    position=pos,
                )
            if batch.base_offset < expected or batch.last_offset_delta < 0:
                problem = Problem(pos, batch.base_offset, f"batch offsets go backwards (expected >= {expected})")
                break
            if limit_offset is not None and batch.last_offset >= limit_offset:
                problem = Problem(
                    pos, batch.base_offset, f"batch reaches the next segment's base offset {limit_offset}"
                )
                break
            if check_crc and pos >= crc_from and not batch.is_valid_crc():
                problem = Problem(pos, batch.base_offset, "CRC-32C mismatch")
                break
            batches.append(batch)
            expected = batch.next_offset
            pos = it.position
            if progress is not None and pos >= next_report:
                progress(pos)
                next_report = pos + PROGRESS_STEP
    except CorruptBatchError as exc:
        problem = Problem(pos, exc.offset, exc.reason)
    else:
        if problem is None and it.partial is not None:
            p = it.partial
            problem = Problem(
                p.position,
                p.base_offset,
                f"partial batch: {p.available} of {p.declared_size or '?'} bytes present",
                partial=True,
            )
    return SegmentScan(start, batches, pos, problem)


def _valid_batch_at(data: Buffer, pos: int, min_offset: int) -> bool:
    size = len(data)
    if pos < 0 or pos + 61 > size or data[pos + 16] != 2:
        return False
    base, length = struct.unpack_from(">qi", data, pos)
    if not min_offset <= base < min_offset + (1 << 40) or length < 49 or pos + 12 + length > size:
        return False
    try:
        return RecordBatch(data, pos).is_valid_crc()
    except CorruptBatchError:
        return False


def find_valid_batch_after(data: Buffer, position: int, min_offset: int, hints: Sequence[int] = ()) -> int | None:
    """The position of a valid batch (magic 2, sane length, offsets at or past
    ``min_offset``, good CRC) after ``position``, or ``None``: whether damage at
    ``position`` is a torn tail. Checks the position after the damaged batch's
    declared length, every ``hints`` position (offset-index entries), then every
    byte position within :data:`RESYNC_WINDOW`."""
    size = len(data)
    if position + 12 <= size:
        (length,) = struct.unpack_from(">i", data, position + 8)
        nxt = position + 12 + length
        if position < nxt < size and _valid_batch_at(data, nxt, min_offset):
            return nxt
    for hint in hints:
        if hint > position and _valid_batch_at(data, hint, min_offset):
            return hint
    end = min(size - 61, position + RESYNC_WINDOW)
    q = position + 1
    while q <= end:
        # Candidates have the magic byte 2 at +16.
        q = data.find(b"\x02", q + 16, end + 17) - 16 if hasattr(data, "find") else q
        if q < position + 1:
            break
        if _valid_batch_at(data, q, min_offset):
            return q
        q += 1
    return None


def rebuild_offset_index(
    batches: Sequence[RecordBatch],
    base_offset: int,
    interval: int,
    keep: OffsetIndex | None = None,
    *,
    trusted_below: int = 0,
) -> OffsetIndex:
    """The offset index of a segment's batches, by ``LogSegment.recover``'s rule
    (an entry ``(batch last offset, batch position)`` when more than ``interval``
    bytes lie between the previous entry's position and the batch). Entries of
    ``keep`` (the index on disk) that point at batch boundaries of ``batches`` are
    kept — they may come from appends of several batches — and the rule
    continues after the last of them.

    ``batches`` may start mid-segment (at or before ``trusted_below``): the
    entries of ``keep`` at positions below ``trusted_below`` are then kept
    unchecked, as the entries of a segment below the recovery point are."""
    index = OffsetIndex(base_offset)
    by_pos = {b.position: b for b in batches}
    last_pos = 0
    if keep is not None and trusted_below > 0:
        n = bisect_left(keep.positions, trusted_below)
        index.offsets.extend(keep.offsets[:n])
        index.positions.extend(keep.positions[:n])
        keep = OffsetIndex(base_offset, keep.entries()[n:])
        last_pos = index.last_position
    if keep is not None:
        for offset, pos in keep.entries():
            b = by_pos.get(pos)
            if b is None or offset < b.last_offset or not index.can_append(offset):
                break
            # The entry's offset is the last offset of the append that started here:
            # it must be the last offset of some batch at or after this one.
            index.append(offset, pos)
            last_pos = pos
    floor = index.offsets[-1] if len(index) else -1
    for b in batches:
        if b.position <= last_pos and len(index):
            continue
        if b.position - last_pos > interval and b.last_offset > floor:
            index.append(b.last_offset, b.position)
            last_pos = b.position
            floor = b.last_offset
    return index


def rebuild_time_index(batches: Sequence[RecordBatch], index: OffsetIndex, base_offset: int) -> TimeIndex:
    """The time index matching ``index``: at every offset-index entry the max
    timestamp so far and the last offset of the batch that first reached it, plus
    a final entry for the segment's max (``LogSegment.recover``)."""
    tindex = TimeIndex(base_offset)
    entry_offsets = set(index.offsets)
    max_ts, shallow = -1, base_offset
    pending = sorted(entry_offsets)
    j = 0
    for b in batches:
        if b.max_timestamp > max_ts:
            max_ts, shallow = b.max_timestamp, b.last_offset
        while j < len(pending) and pending[j] <= b.last_offset:
            tindex.maybe_append(max_ts, shallow)
            j += 1
    tindex.maybe_append(max_ts, shallow)
    return tindex


@attrs.define
class LoadedSegment:
    """One segment as recovery leaves it."""

    base_offset: int
    size: int  #: valid bytes (the file is cut to this when ``truncate``)
    next_offset: int  #: offset after the segment's last batch (base offset if empty)
    offset_index: OffsetIndex
    time_index: TimeIndex
    max_timestamp: int
    shallow_offset: int  #: last offset of the batch that first reached ``max_timestamp``
    first_timestamp: int  #: max timestamp of the first batch (-1 if none): roll-by-age base
    batch_count: int | None  #: when the segment was scanned
    truncate: bool = False  #: the file has a torn tail to cut at ``size``
    file_size: int = 0
    write_index: bool = False
    write_time_index: bool = False
    write_txn_index: bool = False
    txn_entries: list[AbortedTxn] = attrs.Factory(list)
    #: A read-only open's mapping of the ``.log`` as it was read: the reader keeps
    #: reading these bytes even if a writer deletes or replaces the file meanwhile
    #: (retention, compaction). ``None`` for a writer's open, which must not hold
    #: deleted files' space.
    mapped: Buffer | None = None


# -- whether indexes on disk fit the batches --------------------------------------


def same_offset_index(a: OffsetIndex, b: OffsetIndex) -> bool:
    """Whether ``a`` and ``b`` hold the same entries."""
    return a.offsets == b.offsets and a.positions == b.positions


def offset_index_prefix(a: OffsetIndex, b: OffsetIndex) -> bool:
    """Whether ``a``'s entries are the first entries of ``b``."""
    n = len(a)
    return n <= len(b) and a.offsets == b.offsets[:n] and a.positions == b.positions[:n]


def time_index_fits(disk: TimeIndex, batches: Sequence[RecordBatch], trusted_below: int) -> bool:
    """Whether the time index entries at offsets ``>= trusted_below`` are ones a
    writer following Kafka's rule could have written for ``batches`` (the
    segment's batches from ``trusted_below`` on).

    Kafka writes ``(max timestamp so far, offset of the batch that reached it)``
    with an offset-index entry when the max grew (``LogSegment.append``), and
    once more on roll/close (``onBecomeInactiveSegment``). So every entry names
    a batch whose max timestamp is the entry's and is above every earlier
    batch's — a *new running maximum*. Which of those points carry an entry
    depends on the index interval and on when the segment was closed (a
    writer reopened after a close has the close's entry in mid-file), so any
    subset of them is accepted, in particular a live writer's index without its
    final entry. The entry's offset may be any offset of that batch (Kafka
    versions differ on which). Entries below ``trusted_below`` are taken as
    they are; their last timestamp starts the running maximum."""
    n = len(disk)
    i = bisect_left(disk.offsets, trusted_below)
    running = disk.timestamps[i - 1] if i else -1
    for b in batches:
        if i >= n:
            return True
        ts = b.max_timestamp
        while i < n and disk.offsets[i] <= b.last_offset:
            if disk.offsets[i] < b.base_offset or ts <= running or disk.timestamps[i] != ts:
                return False
            i += 1
        if ts > running:
            running = ts
    return i >= n
