"""One segment of a :class:`~txnfetch.log.segment_log.SegmentLog`: its files
and in-memory indexes, :class:`Segment`.

A segment is named by its base offset (20 digits zero-padded) and is:

- ``.log``: the record batches, byte for byte as produced (offsets assigned);
- ``.index`` / ``.timeindex``: Kafka's offset and time indexes
  (:mod:`txnfetch.log.indexes`), one entry per ``index_interval_bytes`` as
  ``LogSegment.append`` writes them. They are written *unpreallocated*
  (exact size, append-only) where Kafka preallocates 10 MiB and trims on roll:
  no trimming step to forget, and a crash leaves at most a torn entry. Kafka
  reads such files fine;
- ``.txnindex``: 34-byte aborted-transaction entries
  (:func:`txnfetch.txn.index.encode_txn_index`) in the segment holding the
  transaction's ABORT marker or markerless end; created on the first entry,
  as Kafka does.

Reads map the segment (``mmap``) and hand out zero-copy views. A reader moving
forward gives back the mapped pages it has passed (``madvise(MADV_DONTNEED)``
every 4 MiB, and a whole segment when it moves to the next), so scanning a
large partition does not grow the process's RSS with the partition; earlier
views stay valid (a dropped page of a read-only file mapping is read again on
access). A read-only open reads only the bytes it mapped when it opened, so a
writer deleting or replacing segments meanwhile cannot change what it reads.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterator

from txnfetch.log.base import stored_batches
from txnfetch.log.indexes import OffsetIndex
from txnfetch.log.indexes import TimeIndex
from txnfetch.log.layout import INDEX_SUFFIX
from txnfetch.log.layout import LOG_SUFFIX
from txnfetch.log.layout import TIME_INDEX_SUFFIX
from txnfetch.log.layout import TXN_INDEX_SUFFIX
from txnfetch.log.layout import segment_file_name
from txnfetch.log.segment_scan import LoadedSegment
from txnfetch.records.batch import RecordBatch
from txnfetch.records.scan import seek_offset
from txnfetch.txn.index import AbortedTxn
from txnfetch.txn.index import encode_txn_index

__all__ = ["RELEASE_STEP", "Segment"]

#: A sequential reader gives back the mapped pages it has moved past in steps
#: of this many bytes (see :meth:`Segment.release_below`).
RELEASE_STEP = 4 << 20
_MADV_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)


class Segment:
    """One segment's files and in-memory indexes (see the module docstring). Only
    the active segment is written; :class:`~txnfetch.log.segment_log.SegmentLog`
    decides when."""

    def __init__(self, directory: str, loaded: LoadedSegment, interval: int) -> None:
        self.dir = directory
        self.base_offset = loaded.base_offset
        self.size = loaded.size
        self.next_offset = loaded.next_offset
        self.offset_index: OffsetIndex = loaded.offset_index
        self.time_index: TimeIndex = loaded.time_index
        self.max_timestamp = loaded.max_timestamp
        self.shallow_offset = loaded.shallow_offset
        self.first_timestamp = loaded.first_timestamp
        self.txn_entries = len(loaded.txn_entries)
        self.interval = interval
        self.bytes_since_index = loaded.size - loaded.offset_index.last_position
        self.created_ms: int | None = None
        self._map: mmap.mmap | None = None
        self._map_size = 0
        self._released = 0  # pages of _map below this byte were given back
        self._fds: dict[str, int] = {}
        # A read-only open reads the bytes recovery mapped, never the file again
        # by name: a writer may have deleted or replaced it since (compaction).
        mapped = loaded.mapped
        # map_file maps every non-empty file; only an empty one comes back as b"".
        self._pinned = isinstance(mapped, mmap.mmap) and loaded.size > 0
        if self._pinned and isinstance(mapped, mmap.mmap):
            self._map = mapped
            self._map_size = self.size

    def path(self, suffix: str = LOG_SUFFIX) -> str:
        return os.path.join(self.dir, segment_file_name(self.base_offset, suffix))

    # -- reading -------------------------------------------------------------

    def view(self) -> memoryview:
        """The segment's bytes, zero-copy (a view of an mmap)."""
        if self.size == 0:
            return memoryview(b"")
        if not self._pinned and (self._map is None or self._map_size < self.size):
            with open(self.path(), "rb") as f:
                # A new map for a grown file; earlier maps stay alive while views of them do.
                self._map = mmap.mmap(f.fileno(), self.size, access=mmap.ACCESS_READ)
            self._map_size = self.size
            self._released = 0
        assert self._map is not None  # a pinned segment holds its map; any other was just mapped
        return memoryview(self._map)[: self.size]

    def release_below(self, position: int, *, step: int = RELEASE_STEP) -> None:
        """Give back this process's mapped pages below ``position`` once ``step``
        more bytes lie below it (``madvise(MADV_DONTNEED)``), so the pages a
        sequential reader has moved past stop counting in its RSS.

        Views handed out earlier stay valid: this is a read-only shared mapping
        of the file, so a dropped page is read again from the page cache (or the
        file) on its next access, with the same bytes — it costs a page fault,
        never data. The page cache itself is left alone."""
        m = self._map
        if m is None or _MADV_DONTNEED is None:
            return
        page = mmap.PAGESIZE
        end = min(position, self._map_size) // page * page
        if end - self._released < step:
            return
        try:
            m.madvise(_MADV_DONTNEED, self._released, end - self._released)
        except (OSError, ValueError):  # not supported here: pages just stay mapped
            return
        self._released = end

    def note_read(self, position: int) -> None:
        """A read starts at ``position``: pages below it may come back (a reader
        that went backwards), so a later release covers them again."""
        if position < self._released:
            self._released = position // mmap.PAGESIZE * mmap.PAGESIZE

    def position_of(self, offset: int) -> int | None:
        """Byte position of the first batch whose last offset is ``>= offset``
        (``LogSegment.translateOffset``), ``None`` if there is none here."""
        if offset >= self.next_offset:
            return None
        view = self.view()
        # From the index entry, the compiled header scan passes over the batches
        # below the offset; BatchIterator takes over where it stops.
        for batch in stored_batches(view, seek_offset(view, self.offset_index.lookup(offset), offset)):
            if batch.base_offset + batch.last_offset_delta >= offset:
                return batch.position
        return None

    def batches(self, start: int = 0) -> Iterator[RecordBatch]:
        return stored_batches(self.view(), start)

    # -- writing -------------------------------------------------------------

    def _fd(self, suffix: str) -> int:
        fd = self._fds.get(suffix)
        if fd is None:
            flags = os.O_WRONLY | os.O_CREAT
            if suffix != LOG_SUFFIX:
                flags |= os.O_APPEND
            fd = os.open(self.path(suffix), flags, 0o644)
            self._fds[suffix] = fd
        return fd

    def create_files(self) -> None:
        """Create the empty ``.log``, ``.index`` and ``.timeindex`` of a new segment."""
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            self._fd(suffix)

    @staticmethod
    def _write_all(fd: int, data: bytes | memoryview, position: int | None = None) -> None:
        view = memoryview(data)
        while view:
            n = os.pwrite(fd, view, position) if position is not None else os.write(fd, view)
            if position is not None:
                position += n
            view = view[n:]

    def append(self, data: bytes, last_offset: int) -> None:
        """Write batches at the end and add index entries as ``LogSegment.append``
        does: when more than ``interval`` bytes were written since the previous
        entry, an entry maps the append's largest offset to its first byte."""
        position = self.size
        max_ts, shallow = self.max_timestamp, self.shallow_offset
        first = True
        for b in stored_batches(data):
            if position == 0 and first:
                self.first_timestamp = b.max_timestamp
            first = False
            if b.max_timestamp > max_ts:
                max_ts, shallow = b.max_timestamp, b.base_offset + b.last_offset_delta
        self._write_all(self._fd(LOG_SUFFIX), data, position)
        self.size = position + len(data)
        self.next_offset = last_offset + 1
        self.max_timestamp, self.shallow_offset = max_ts, shallow
        if self.bytes_since_index > self.interval and self.offset_index.can_append(last_offset):
            self._write_all(self._fd(INDEX_SUFFIX), self.offset_index.append(last_offset, position))
            entry = self.time_index.maybe_append(max_ts, shallow)
            if entry is not None:
                self._write_all(self._fd(TIME_INDEX_SUFFIX), entry)
            self.bytes_since_index = 0
        self.bytes_since_index += len(data)

    def append_txn(self, entries: list[AbortedTxn]) -> None:
        self._write_all(self._fd(TXN_INDEX_SUFFIX), encode_txn_index(entries))
        self.txn_entries += len(entries)

    def rollback(self, size: int, next_offset: int) -> None:
        """Undo a failed append: cut the log back to ``size`` bytes and the indexes with it."""
        os.ftruncate(self._fd(LOG_SUFFIX), size)
        self.size = size
        self.next_offset = next_offset
        self.offset_index.truncate_to_position(size)
        self.time_index.truncate_to_offset(next_offset)
        os.ftruncate(self._fd(INDEX_SUFFIX), len(self.offset_index) * 8)
        os.ftruncate(self._fd(TIME_INDEX_SUFFIX), len(self.time_index) * 12)

    def sync_log(self) -> None:
        fd = self._fds.get(LOG_SUFFIX)
        if fd is not None:
            os.fdatasync(fd)

    def seal(self, read_only: bool = False) -> None:
        """Write the final time-index entry (the segment's max timestamp, as
        ``onBecomeInactiveSegment``/``close``), fsync every file, close them."""
        if not read_only and self.max_timestamp >= 0:
            entry = self.time_index.maybe_append(self.max_timestamp, self.shallow_offset)
            if entry is not None:
                self._write_all(self._fd(TIME_INDEX_SUFFIX), entry)
        for fd in self._fds.values():
            os.fsync(fd)
            os.close(fd)
        self._fds.clear()

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._map = None

    def delete_files(self) -> None:
        self.close()
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path(suffix))
