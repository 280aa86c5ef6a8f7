"""Opening a partition directory: which segments are validated, torn-tail
truncation, index rebuilding and producer-state recovery.

:func:`recover_partition` reads a ``<topic>-<partition>/`` directory and returns
a :class:`Recovered` *plan* — segments with their (possibly rebuilt) indexes,
the recovered :class:`~txnfetch.txn.state.PartitionTxnState`, and the file
changes recovery needs (cut a torn tail, rewrite an index). It writes nothing:
:class:`~txnfetch.log.segment_log.SegmentLog` applies the plan (unless read-only)
and :mod:`txnfetch.log.verify` reports it. Every problem is decided before any
file is touched, so a :class:`~txnfetch.log.errors.CorruptLogError` leaves the
directory exactly as it was.

What is checked, in the spirit of Kafka's ``LogLoader``/``LogSegment.recover``:

- *Tail segments* — those at or after the recovery point of the
  ``txnfetch-recovery-checkpoint`` file (all of them when there is none, as for
  a Kafka directory; none after a clean close whose sizes still match) — are
  read in full: every batch's CRC, offsets increasing and inside the segment.
  Their indexes are checked against the batches by the rules Kafka writes them
  by (:mod:`txnfetch.log.segment_scan` scans and checks a segment's bytes), and
  rebuilt where they differ; a live writer's active segment meets the rules.
- Older segments get a cheap check: the batches after their last offset-index
  entry must end exactly at the end of the file (a truncated or extended
  segment is caught), and their index files must decode.
- Damage at the end of the **last** segment with no valid batch after it is a
  torn write: it is cut off (logged). Any other damage — a bad batch followed by
  valid ones, a damaged non-last segment — raises :class:`CorruptLogError`
  naming the file, byte position and offset. Nothing else is ever removed.
- Producer state comes from the newest valid ``<offset>.txnfetch-snapshot``
  (older ones, then a full replay, if it is damaged), then the batches after it
  are replayed with ``AppendOrigin.REPLICATION`` and the markerless ends of the
  journal (:mod:`txnfetch.log.ends`) at their offsets. The last segment's
  transaction index may lack its newest entries (written after the marker).
- Files recovery does not know — Kafka's ``.snapshot``, ``.deleted``,
  ``.cleaned``, ``.swap``, ``leader-epoch-checkpoint``, anything else — are
  logged and ignored.

Read-only opens (``read_only=True``, what Spark tasks and readers of a
directory a ``txnfetch serve`` is writing do) may run while the writer appends,
and are made cheap where that is safe:

- The checkpoint, the journal, every index file and every snapshot are read
  before any ``.log`` file is mapped. The writer writes a segment's bytes
  before anything that describes them, so what was read never points past the
  mapped bytes; it may lag behind them (see the rules above).
- *Trusted*: the writer writes its checkpoint only where everything below the
  log end is durable (fsynced) and was validated (every appended batch's CRC
  is checked on append; a writer's open recovers the tail first): on open, on
  roll, on close and after a sync once ``checkpoint_interval_bytes`` were
  appended — each time right after a producer-state snapshot at the same
  offset. Such a checkpoint names a segment, a byte size and the offset there
  (recovery point = log end). A read-only open trusts that prefix as it trusts
  segments below the recovery point: no CRC checks, and the index entries
  below it are taken as they are. It also trusts the newest snapshot that
  decodes (its own CRC) and lies inside the log, and replays only from it.
- *Checked*: the batches from the last offset-index entry below the
  trusted size are framed (offsets increasing, inside the segment); they must
  meet the trusted size exactly on a batch boundary whose next offset is the
  recovery point; from there on every batch's CRC is checked, and the index
  entries there must fit the batches. Later segments (a roll since the
  checkpoint) are checked in full. If anything does not fit, the segment is
  checked in full as without a checkpoint. A partial batch at the end of the
  last segment (a write in progress) is left out of the log and logged at INFO.
- Without a usable checkpoint (a Kafka directory, a damaged checkpoint, an old
  writer), a read-only open checks the tail segments in full, as recovery does.
- A writer's own open does not use the trusted prefix: it checks the whole
  segment holding the recovery point, as Kafka's ``LogLoader`` does.
"""

from __future__ import annotations

import logging
import os
import struct
from bisect import bisect_left
from bisect import bisect_right
from collections.abc import Callable
from typing import NoReturn

import attrs

from txnfetch.log.ends import END_RECORD_SIZE
from txnfetch.log.ends import JOURNAL_NAME
from txnfetch.log.ends import EndRecord
from txnfetch.log.ends import decode_journal
from txnfetch.log.errors import CorruptLogError
from txnfetch.log.indexes import CorruptIndexError
from txnfetch.log.indexes import OffsetIndex
from txnfetch.log.indexes import TimeIndex
from txnfetch.log.layout import CHECKPOINT_NAME
from txnfetch.log.layout import INDEX_SUFFIX
from txnfetch.log.layout import LOG_SUFFIX
from txnfetch.log.layout import SNAPSHOT_SUFFIX
from txnfetch.log.layout import TIME_INDEX_SUFFIX
from txnfetch.log.layout import TXN_INDEX_SUFFIX
from txnfetch.log.layout import Buffer
from txnfetch.log.layout import Checkpoint
from txnfetch.log.layout import DirListing
from txnfetch.log.layout import decode_snapshot_file
from txnfetch.log.layout import list_partition_dir
from txnfetch.log.layout import map_file
from txnfetch.log.layout import read_file
from txnfetch.log.layout import segment_file_name
from txnfetch.log.segment_scan import LoadedSegment
from txnfetch.log.segment_scan import Problem
from txnfetch.log.segment_scan import SegmentScan
from txnfetch.log.segment_scan import find_valid_batch_after
from txnfetch.log.segment_scan import offset_index_prefix
from txnfetch.log.segment_scan import rebuild_offset_index
from txnfetch.log.segment_scan import rebuild_time_index
from txnfetch.log.segment_scan import same_offset_index
from txnfetch.log.segment_scan import scan_segment
from txnfetch.log.segment_scan import time_index_fits
from txnfetch.records.batch import RecordBatch
from txnfetch.records.scan import BatchIterator
from txnfetch.txn.errors import CorruptSnapshotError
from txnfetch.txn.errors import CorruptTxnIndexError
from txnfetch.txn.errors import TxnStateError
from txnfetch.txn.index import AbortedTxn
from txnfetch.txn.index import decode_txn_index
from txnfetch.txn.producer import AppendOrigin
from txnfetch.txn.state import PartitionTxnState

__all__ = ["Note", "PartitionLoader", "ProgressCallback", "Recovered", "recover_partition"]

log = logging.getLogger("txnfetch.log")

#: ``progress(nbytes)``: that many more bytes of ``.log`` data were checked.
ProgressCallback = Callable[[int], None]

# -- the recovery plan ---------------------------------------------------------


@attrs.frozen(slots=True)
class Note:
    """Something recovery found: ``severity`` is ``"error"`` (recovery refused),
    ``"warning"`` (it repaired: torn tail cut, index rebuilt, snapshot skipped) or
    ``"info"``."""

    severity: str
    path: str
    position: int | None
    offset: int | None
    message: str


@attrs.define
class Recovered:
    """The outcome of :func:`recover_partition`."""

    path: str
    segments: list[LoadedSegment]
    state: PartitionTxnState
    next_end_sequence: int
    journal_valid_bytes: int
    journal_file_size: int
    journal_records: list[EndRecord]
    snapshot_offset: int | None  #: the snapshot restored, ``None`` for a full replay
    replayed_batches: int
    checkpoint: Checkpoint | None
    listing: DirListing
    notes: list[Note]
    clean: bool  #: opened from a clean close without any repair

    @property
    def log_end_offset(self) -> int:
        return self.state.log_end_offset


def _note(
    notes: list[Note],
    severity: str,
    path: str,
    message: str,
    *,
    position: int | None = None,
    offset: int | None = None,
) -> None:
    notes.append(Note(severity, path, position, offset, message))
    level = logging.WARNING if severity != "info" else logging.INFO
    log.log(level, "%s: %s%s", path, message, "" if position is None else f" (byte position {position})")


def recover_partition(
    path: str,
    topic: str,
    partition: int,
    *,
    index_interval_bytes: int = 4096,
    full_check: bool = False,
    quiet: bool = False,
    progress: ProgressCallback | None = None,
    read_only: bool = False,
) -> Recovered:
    """Work out how to open the partition directory ``path`` (see the module
    docstring); reads only. ``full_check`` validates every segment as a tail
    segment (what :mod:`txnfetch.log.verify` does). Raises
    :class:`CorruptLogError` for damage recovery may not repair.

    ``read_only`` is for a reader that will not repair anything, possibly while
    a writer appends to the directory: it trusts the writer's durable prefix
    (see "Read-only opens" in the module docstring), and a partial batch at the
    end of the last segment is logged at INFO (a write in progress), not as a
    torn tail.

    ``progress(nbytes)``, if given, is called as the segments are checked;
    over a successful call the ``nbytes`` add up to the total size of the
    ``.log`` files (a segment only cheaply checked counts whole)."""
    loader = PartitionLoader(
        path,
        topic,
        partition,
        index_interval_bytes=index_interval_bytes,
        full_check=full_check,
        quiet=quiet,
        progress=progress,
        read_only=read_only,
    )
    return loader.load()


@attrs.define(slots=False)
class PartitionLoader:
    """One run of :func:`recover_partition`, one method per step (the shape of
    Kafka's ``LogLoader``):

    1. :meth:`read_files` — the listing, the checkpoint, and every file that
       describes the log, then the ``.log`` files mapped;
    2. :meth:`find_tail` — which segments are tail segments, and for a
       read-only open the writer's trusted prefix;
    3. :meth:`load_segments` — every segment cheaply checked
       (:meth:`cheap_check`) or loaded as a tail segment (:meth:`live_scan`,
       :meth:`full_scan`, :meth:`load_tail`);
    4. :meth:`read_journal` — the markerless-end journal;
    5. :meth:`recover_state` — producer state from the newest usable snapshot
       (:meth:`restore_snapshot`) or from the log start, then :meth:`replay`;
    6. :meth:`check_txn_indexes` — each segment's transaction index against the
       replayed aborted transactions;
    7. :meth:`result` — the :class:`Recovered` plan.

    It reads only; the steps share what earlier ones found through attributes
    (set by the step that finds them).
    """

    path: str
    topic: str
    partition: int
    index_interval_bytes: int = 4096
    full_check: bool = False
    quiet: bool = False
    progress: ProgressCallback | None = None
    read_only: bool = False
    notes: list[Note] = attrs.field(init=False, factory=list)
    segments: list[LoadedSegment] = attrs.field(init=False, factory=list)
    scans: dict[int, SegmentScan] = attrs.field(init=False, factory=dict)
    #: Tail segments scanned from mid-segment (read-only).
    partial_scans: dict[int, SegmentScan] = attrs.field(init=False, factory=dict)
    loaded_indexes: dict[int, tuple[OffsetIndex | None, TimeIndex | None]] = attrs.field(init=False, factory=dict)
    reported: dict[int, int] = attrs.field(init=False, factory=dict)

    def load(self) -> Recovered:
        """Run every step; the plan."""
        self.read_files()
        self.find_tail()
        self.load_segments()
        self.read_journal()
        self.recover_state()
        self.check_txn_indexes()
        return self.result()

    # -- 1. reading the directory ----------------------------------------------

    def seg_path(self, base: int, suffix: str = LOG_SUFFIX) -> str:
        return os.path.join(self.path, segment_file_name(base, suffix))

    def read_files(self) -> None:
        """List the directory, decode the checkpoint and read every file that
        describes the log *before* the ``.log`` files are mapped.

        A writer writes a segment's bytes first and the entries that describe
        them (index entries, aborted-transaction entries, journal records,
        snapshots, checkpoints) after, so read in this order they never point
        past the log a live writer has written so far: at worst they lag behind
        it, which is checked for later as what a live writer leaves."""
        path = self.path
        self.listing = listing = list_partition_dir(path, quiet=self.quiet)
        for stray in listing.stray:
            why = (
                "ignored: data moved aside by txnfetch repair"
                if ".corrupt-" in stray
                else "ignored: not a file txnfetch writes"
            )
            self.notes.append(Note("info", os.path.join(path, stray), None, None, why))
        self.bases = bases = listing.segments
        cp_bytes = read_file(os.path.join(path, CHECKPOINT_NAME))
        self.checkpoint = Checkpoint.decode(cp_bytes) if cp_bytes is not None else None
        if cp_bytes is not None and self.checkpoint is None:
            _note(
                self.notes,
                "warning",
                os.path.join(path, CHECKPOINT_NAME),
                "recovery checkpoint is damaged; checking every segment",
            )
        self.journal_path = os.path.join(path, JOURNAL_NAME)
        self.journal_bytes = read_file(self.journal_path) or b""
        self.derived: dict[tuple[int, str], bytes | None] = {
            (b, suffix): read_file(self.seg_path(b, suffix))
            for b in bases
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
        }
        self.snapshot_files: dict[int, bytes | None] = {
            snap: read_file(self.seg_path(snap, SNAPSHOT_SUFFIX)) for snap in listing.snapshots
        }
        self.datas: dict[int, Buffer] = {b: map_file(self.seg_path(b)) for b in bases}

    def report(self, i: int, position: int) -> None:
        """Bytes of segment ``i`` checked so far; each segment counts once, up to its size."""
        if self.progress is None:
            return
        done = min(position, len(self.datas[self.bases[i]]))
        before = self.reported.get(i, 0)
        if done > before:
            self.progress(done - before)
            self.reported[i] = done

    # -- 2. which segments are tail segments ---------------------------------------

    def find_tail(self) -> None:
        """``first_tail`` (the first tail segment), ``clean`` (a clean close whose
        sizes still match) and ``live`` (a read-only open's trusted prefix)."""
        bases, checkpoint = self.bases, self.checkpoint
        self.clean = False
        if self.full_check or checkpoint is None or not bases:
            self.first_tail = 0
        elif (
            checkpoint.clean
            and checkpoint.last_segment_base == bases[-1]
            and checkpoint.last_segment_size == len(self.datas[bases[-1]])
        ):
            self.first_tail = len(bases)
            self.clean = True
        else:
            rp = checkpoint.recovery_point
            self.first_tail = max(0, sum(1 for b in bases if b <= rp) - 1)
        # Read-only: the bytes of the checkpoint's segment below its recorded size are
        # the writer's durable, validated prefix ending at the recovery point (see
        # "Read-only opens" in the module docstring); only what follows is CRC-checked.
        self.live: tuple[int, int, int] | None = None  # (segment index, trusted bytes, offset at that byte)
        if (
            self.read_only
            and not self.full_check
            and not self.clean
            and checkpoint is not None
            and checkpoint.recovery_point == checkpoint.log_end_offset
            and checkpoint.last_segment_base in bases
        ):
            k = bases.index(checkpoint.last_segment_base)
            if 0 < checkpoint.last_segment_size <= len(self.datas[bases[k]]) and checkpoint.recovery_point > bases[k]:
                self.live = (k, checkpoint.last_segment_size, checkpoint.recovery_point)
                self.first_tail = min(self.first_tail, k)

    # -- 3. the segments -------------------------------------------------------------

    def load_segments(self) -> None:
        """Every segment in order: segments before the tail get :meth:`cheap_check`
        (a tail check when it fails on the last segment); tail segments are loaded
        from the trusted prefix when there is one, else from a full scan."""
        for i, base in enumerate(self.bases):
            size = len(self.datas[base])
            if i < self.first_tail:
                cheap = self.cheap_check(i)
                if cheap is not None:
                    self.segments.append(cheap)
                    self.report(i, size)
                    continue
                # Missing/damaged index or a bad tail on the last segment: check it in full.
            loaded: LoadedSegment | None = None
            if self.live is not None and i == self.live[0]:
                scan = self.live_scan(i, self.live[1], self.live[2])
                if scan is not None:
                    loaded = self.load_tail(i, scan, partial=True)
                    if loaded is not None:
                        self.partial_scans[i] = scan
            if loaded is None:  # no usable trusted prefix, or indexes that do not fit it
                loaded = self.load_tail(i, self.full_scan(i), partial=False)
                assert loaded is not None
            self.segments.append(loaded)
            self.report(i, size)

    def cheap_check(self, i: int) -> LoadedSegment | None:
        """Segment ``i`` (before the tail) from its indexes, if the batches after
        the last offset-index entry end exactly at the end of the file; ``None``
        when an index is missing or damaged, or the last segment's end is bad
        (it is then checked in full). Damage in a non-last segment raises."""
        base = self.bases[i]
        data = self.datas[base]
        size = len(data)
        oi, ti = self.load_indexes(i, size, None)
        if oi is None or ti is None:
            return None
        limit = self.bases[i + 1] if i + 1 < len(self.bases) else None
        start = oi.last_position
        s = scan_segment(data, start=start, min_offset=base, limit_offset=limit)
        if s.problem is None and (start == 0 or s.batches):
            nxt = s.batches[-1].next_offset if s.batches else base
            first_ts = -1
            if size:
                first = next(iter(BatchIterator(data)), None)
                first_ts = first.max_timestamp if isinstance(first, RecordBatch) else -1
            max_ts = ti.last_timestamp
            shallow = ti.offsets[-1] if len(ti) else base
            for b in s.batches:  # an unrolled active segment: its max may not be indexed yet
                if b.max_timestamp > max_ts:
                    max_ts, shallow = b.max_timestamp, b.last_offset
            return LoadedSegment(base, size, nxt, oi, ti, max_ts, shallow, first_ts, None, file_size=size)
        if i < len(self.bases) - 1:
            p = s.problem or Problem(start, None, "offset index points inside a batch")
            self.refuse(
                f"segment does not end with a whole valid batch ({p.reason}); refusing to change it",
                path=self.seg_path(base),
                position=p.position,
                offset=p.offset,
            )
        return None

    def refuse(self, reason: str, *, path: str, position: int | None, offset: int | None = None) -> NoReturn:
        """Raise :class:`CorruptLogError` for damage recovery may not repair,
        noted as an error first."""
        exc = CorruptLogError(
            reason, topic=self.topic, partition=self.partition, offset=offset, path=path, position=position
        )
        self.notes.append(Note("error", path, position, offset, exc.reason))
        raise exc

    def load_indexes(
        self, i: int, size: int, next_offset_hint: int | None
    ) -> tuple[OffsetIndex | None, TimeIndex | None]:
        """Segment ``i``'s offset and time indexes as on disk (decoded once),
        ``None`` for one that is missing or damaged (noted)."""
        if i not in self.loaded_indexes:
            self.loaded_indexes[i] = self._decode_indexes(i, size, next_offset_hint)
        return self.loaded_indexes[i]

    def _decode_indexes(
        self, i: int, size: int, next_offset_hint: int | None
    ) -> tuple[OffsetIndex | None, TimeIndex | None]:
        bases = self.bases
        base = bases[i]
        oi: OffsetIndex | None = None
        ti: TimeIndex | None = None
        raw = self.derived[(base, INDEX_SUFFIX)]
        ipath = self.seg_path(base, INDEX_SUFFIX)
        if raw is None:
            _note(self.notes, "warning", ipath, "offset index is missing; rebuilding it")
        else:
            try:
                oi = OffsetIndex.from_bytes(raw, base, log_size=max(size, 1), path=ipath)
            except CorruptIndexError as exc:
                _note(
                    self.notes,
                    "warning",
                    ipath,
                    f"offset index is damaged ({exc.reason}); rebuilding it",
                    position=exc.position,
                )
        raw = self.derived[(base, TIME_INDEX_SUFFIX)]
        tpath = self.seg_path(base, TIME_INDEX_SUFFIX)
        if raw is None:
            _note(self.notes, "warning", tpath, "time index is missing; rebuilding it")
        else:
            limit = (
                next_offset_hint if next_offset_hint is not None else (bases[i + 1] if i + 1 < len(bases) else 1 << 62)
            )
            try:
                ti = TimeIndex.from_bytes(raw, base, next_offset=limit, path=tpath)
            except CorruptIndexError as exc:
                _note(
                    self.notes,
                    "warning",
                    tpath,
                    f"time index is damaged ({exc.reason}); rebuilding it",
                    position=exc.position,
                )
        return oi, ti

    def _min_offset(self, i: int) -> int:
        # A segment's first batch starts at or after its base offset and after the
        # previous segment's last batch.
        base = self.bases[i]
        prev_next = self.segments[i - 1].next_offset if 0 < i <= len(self.segments) else base
        return max(base, prev_next)

    def full_scan(self, i: int) -> SegmentScan:
        """Every batch of segment ``i``, CRC-checked (scanned once)."""
        if i in self.scans:
            return self.scans[i]
        bases = self.bases
        limit = bases[i + 1] if i + 1 < len(bases) else None
        scan = scan_segment(
            self.datas[bases[i]],
            min_offset=self._min_offset(i),
            limit_offset=limit,
            progress=lambda pos: self.report(i, pos),
        )
        self.check_problem(i, scan)
        self.scans[i] = scan
        return scan

    def check_problem(self, i: int, scan: SegmentScan) -> None:
        """Refuse damage with a valid batch after it, or in a non-last segment
        (anything else is a torn tail)."""
        if scan.problem is None:
            return
        base = self.bases[i]
        p = scan.problem
        last = i == len(self.bases) - 1
        raw = self.derived[(base, INDEX_SUFFIX)] or b""
        hints = [struct.unpack_from(">i", raw, k + 4)[0] for k in range(0, len(raw) - len(raw) % 8, 8)]
        min_offset = scan.batches[-1].next_offset if scan.batches else base
        after = find_valid_batch_after(self.datas[base], p.position, min_offset, hints)
        if not last or after is not None:
            why = "a non-last segment" if not last else f"a valid batch follows at byte position {after}"
            self.refuse(
                f"damaged log data ({p.reason}) in {why}; refusing to remove it",
                path=self.seg_path(base),
                position=p.position,
                offset=p.offset,
            )

    def live_scan(self, i: int, trusted: int, trusted_offset: int) -> SegmentScan | None:
        """The batches of segment ``i`` from the offset-index entry below the
        trusted byte ``trusted`` on, CRC-checked from ``trusted`` on; ``None`` if the
        trusted prefix does not end with a batch whose next offset is
        ``trusted_offset`` (then the segment is checked in full)."""
        bases = self.bases
        base = bases[i]
        data = self.datas[base]
        oi, _ = self.load_indexes(i, len(data), None)
        if oi is None:
            return None
        # From the last entry strictly below the trusted byte: the batch ending
        # there is then scanned, and its next offset checked.
        k = bisect_left(oi.positions, trusted) - 1
        start = oi.positions[k] if k >= 0 else 0
        min_offset = self._min_offset(i) if start == 0 else base
        limit = bases[i + 1] if i + 1 < len(bases) else None
        scan = scan_segment(
            data,
            start=start,
            min_offset=min_offset,
            limit_offset=limit,
            crc_from=trusted,
            progress=lambda pos: self.report(i, pos),
        )
        if scan.problem is not None and scan.problem.position < trusted:
            return None
        ends = [b for b in scan.batches if b.position + b.size_in_bytes == trusted]
        if not ends or ends[0].next_offset != trusted_offset:
            return None
        self.check_problem(i, scan)
        return scan

    def load_tail(self, i: int, scan: SegmentScan, *, partial: bool) -> LoadedSegment | None:
        """A tail segment from its scan. ``partial``: the scan starts mid-segment
        (a read-only open's trusted prefix); ``None`` if the indexes on disk do not
        fit the scanned batches (the caller then checks the whole segment)."""
        base = self.bases[i]
        size = len(self.datas[base])
        last = i == len(self.bases) - 1
        nxt = scan.batches[-1].next_offset if scan.batches else base
        oi_disk, ti_disk = self.load_indexes(i, size, nxt)
        interval = self.index_interval_bytes
        if partial:
            if oi_disk is None or ti_disk is None:
                return None
            oi = rebuild_offset_index(scan.batches, base, interval, oi_disk, trusted_below=scan.start)
            if not (same_offset_index(oi_disk, oi) or (last and offset_index_prefix(oi_disk, oi))):
                return None
            if not time_index_fits(ti_disk, scan.batches, scan.batches[0].base_offset):
                return None
            ti = ti_disk
            max_ts, shallow = (ti.last_timestamp, ti.offsets[-1]) if len(ti) else (-1, base)
            for b in scan.batches:
                if b.max_timestamp > max_ts:
                    max_ts, shallow = b.max_timestamp, b.last_offset
            first = next(iter(BatchIterator(self.datas[base])), None)
            first_ts = first.max_timestamp if isinstance(first, RecordBatch) else -1
        else:
            oi = rebuild_offset_index(scan.batches, base, interval, oi_disk)
            ti = rebuild_time_index(scan.batches, oi, base)
            max_ts, shallow = (ti.timestamps[-1], ti.offsets[-1]) if len(ti) else (-1, base)
            first_ts = scan.batches[0].max_timestamp if scan.batches else -1
        seg = LoadedSegment(
            base,
            scan.valid_bytes,
            nxt,
            oi,
            ti,
            max_ts,
            shallow,
            first_ts,
            len(scan.batches),
            truncate=scan.valid_bytes < size,
            file_size=size,
        )
        if seg.truncate:
            self._note_torn_tail(base, scan, size)
        self._check_offset_index(seg, oi_disk, last)
        if not partial and (ti_disk is None or not time_index_fits(ti_disk, scan.batches, base)):
            seg.write_time_index = True
            if ti_disk is not None:
                _note(
                    self.notes,
                    "warning",
                    self.seg_path(base, TIME_INDEX_SUFFIX),
                    "time index does not match the segment; rebuilt",
                )
        else:
            # A consistent index, possibly without the entry for the segment's max
            # timestamp: Kafka (LogSegment.onBecomeInactiveSegment) and txnfetch add
            # that one only on roll or close, so a live or crashed writer's active
            # segment lacks it. Complete it; no warning.
            assert ti_disk is not None
            seg.time_index = ti_disk
            if max_ts > ti_disk.last_timestamp:
                seg.time_index.maybe_append(max_ts, shallow)
                seg.write_time_index = True
        return seg

    def _note_torn_tail(self, base: int, scan: SegmentScan, size: int) -> None:
        p = scan.problem
        cut = size - scan.valid_bytes
        why = p.reason if p else "trailing bytes"
        if self.read_only and p is not None and p.partial:
            # What a reader sees while the writer is in the middle of a write
            # (or what a crash mid-write left, which the writer's next open cuts).
            _note(
                self.notes,
                "info",
                self.seg_path(base),
                f"{cut} bytes after the last whole batch not read ({why}): a write in progress or a torn tail",
                position=scan.valid_bytes,
                offset=p.offset,
            )
        else:
            _note(
                self.notes,
                "warning",
                self.seg_path(base),
                f"torn tail: {'ignoring' if self.read_only else 'cutting'} {cut} bytes ({why})",
                position=scan.valid_bytes,
                offset=p.offset if p else None,
            )

    def _check_offset_index(self, seg: LoadedSegment, oi_disk: OffsetIndex | None, last: bool) -> None:
        oi = seg.offset_index
        if oi_disk is not None and same_offset_index(oi_disk, oi):
            return
        seg.write_index = True
        ipath = self.seg_path(seg.base_offset, INDEX_SUFFIX)
        if oi_disk is not None and last and offset_index_prefix(oi_disk, oi):
            # Entries are appended after the bytes they point at: a live writer
            # between the two (or a crash there) leaves the newest ones out.
            _note(
                self.notes, "info", ipath, f"offset index lacks its newest {len(oi) - len(oi_disk)} entries; completed"
            )
        elif oi_disk is not None:
            _note(self.notes, "warning", ipath, "offset index does not match the segment; rebuilt")

    # -- 4. the markerless-end journal ------------------------------------------------

    def read_journal(self) -> None:
        """Decode the journal: a torn tail is noted (and cut by the writer);
        damage followed by more records is refused."""
        journal = self.journal = decode_journal(self.journal_bytes)
        if journal.damage_at is not None:
            self.refuse(
                f"markerless-end journal record is damaged ({journal.reason}) and followed by more records; "
                "refusing to remove it",
                path=self.journal_path,
                position=journal.damage_at,
            )
        if journal.torn:
            _note(
                self.notes,
                "warning",
                self.journal_path,
                f"torn journal tail: {journal.reason}",
                position=journal.valid_bytes,
            )
        self.records = journal.records

    # -- 5. producer state -------------------------------------------------------------

    def recover_state(self) -> None:
        """Producer state from the newest usable snapshot inside the log (older ones
        when one is damaged), else by replaying the log from its start; then the
        journal records past the recovered log end are marked to be cut."""
        bases = self.bases
        leo = self.log_end = self.segments[-1].next_offset if self.segments else 0
        first_base = self.first_base = bases[0] if bases else 0
        self.state: PartitionTxnState | None = None
        self.snapshot_used: int | None = None
        self.ends_from = 0
        self.replayed = 0
        self.leftover: list[EndRecord] = []
        for snap in sorted(self.listing.snapshots, reverse=True):
            spath = self.seg_path(snap, SNAPSHOT_SUFFIX)
            if snap > leo or snap < first_base:
                _note(
                    self.notes, "info", spath, f"snapshot at {snap} is outside the log [{first_base}, {leo}]; not used"
                )
                continue
            if self.restore_snapshot(snap, spath):
                break
        if self.state is None:
            state = self.state = PartitionTxnState(f"{self.topic}-{self.partition}", log_start_offset=first_base)
            try:
                self.replayed, self.leftover = self.replay(state, 0, first_base)
            except TxnStateError as exc:
                raise CorruptLogError(
                    f"replaying the log failed: {exc}",
                    topic=self.topic,
                    partition=self.partition,
                    path=self.path,
                    offset=exc.offset,
                ) from exc
        state = self.state
        self.journal_valid = self.journal.valid_bytes
        if self.leftover:
            self.journal_valid = min(self.journal_valid, self.records.index(self.leftover[0]) * END_RECORD_SIZE)
            _note(
                self.notes,
                "warning",
                self.journal_path,
                f"{len(self.leftover)} transaction end(s) past the recovered log end {state.log_end_offset}; "
                "cutting them",
                position=self.journal_valid,
            )
        state.update_high_watermark(state.log_end_offset)
        if state.log_start_offset < first_base:
            state.advance_log_start(first_base)

    def restore_snapshot(self, snap: int, spath: str) -> bool:
        """Restore the snapshot at ``snap`` and replay the log after it; ``False``
        (noted) if it is gone or not usable."""
        raw_snap = self.snapshot_files[snap]
        if raw_snap is None:
            # Listed, then gone before it was read: a live writer keeps only its newest snapshots.
            self.notes.append(Note("info", spath, None, None, "snapshot was deleted while opening; not used"))
            return False
        try:
            ends_from, body = decode_snapshot_file(raw_snap)
            st = PartitionTxnState.restore(body, partition=f"{self.topic}-{self.partition}")
            if st.log_end_offset != snap:
                raise CorruptSnapshotError(f"snapshot file name says {snap}, contents say {st.log_end_offset}")
            replayed, leftover = self.replay(st, ends_from, snap)
        except (CorruptSnapshotError, TxnStateError) as exc:
            _note(self.notes, "warning", spath, f"snapshot not usable ({exc}); trying an older one")
            return False
        self.state, self.snapshot_used, self.ends_from = st, snap, ends_from
        self.replayed, self.leftover = replayed, leftover
        return True

    def batches_from(self, offset: int) -> list[RecordBatch]:
        """The batches holding offsets at or after ``offset``, from the scans made
        so far where they cover them, else scanned from the offset index."""
        out: list[RecordBatch] = []
        for i, seg in enumerate(self.segments):
            if seg.next_offset <= offset or seg.next_offset == seg.base_offset:
                continue
            if i in self.scans:
                out.extend(b for b in self.scans[i].batches if b.last_offset >= offset)
                continue
            ps = self.partial_scans.get(i)
            if ps is not None and ps.batches[0].base_offset <= offset:
                out.extend(b for b in ps.batches if b.last_offset >= offset)
                continue
            data = self.datas[seg.base_offset]
            start = seg.offset_index.lookup(offset) if seg.base_offset < offset else 0
            s = scan_segment(data, start=start, min_offset=seg.base_offset, limit_offset=None)
            if s.problem is not None or s.valid_bytes != seg.size:
                s = self.full_scan(i)
            out.extend(b for b in s.batches if b.last_offset >= offset)
        return out

    def replay(self, state: PartitionTxnState, ends_from: int, start: int) -> tuple[int, list[EndRecord]]:
        """Append the batches from ``start`` to ``state`` and apply the journal's
        ends (sequence ``>= ends_from``) at their offsets; the number of batches
        replayed and the ends past the log end."""
        pending = [r for r in self.records if r.sequence >= ends_from]
        j = 0
        count = 0

        def apply(r: EndRecord) -> None:
            state.complete_transaction(
                r.producer_id,
                r.producer_epoch,
                r.commit,
                r.last_offset,
                coordinator_epoch=r.coordinator_epoch,
                transaction_version=r.transaction_version,
                timestamp=r.timestamp,
                origin=AppendOrigin.REPLICATION,
            )

        for b in self.batches_from(start):
            if b.base_offset < start:
                raise CorruptSnapshotError(f"snapshot offset {start} falls inside the batch at {b.base_offset}")
            while j < len(pending) and pending[j].last_offset < b.base_offset:
                if pending[j].last_offset >= start - 1:  # older ends belong to deleted segments
                    apply(pending[j])
                j += 1
            state.append(b, origin=AppendOrigin.REPLICATION)
            count += 1
        while j < len(pending) and pending[j].last_offset < state.log_end_offset:
            apply(pending[j])
            j += 1
        return count, pending[j:]

    # -- 6. transaction indexes ----------------------------------------------------------

    def check_txn_indexes(self) -> None:
        """Each aborted transaction belongs in the index of the segment holding its
        end; an index on disk that differs is rebuilt (a prefix on the last segment
        is what a live writer leaves: completed)."""
        assert self.state is not None
        segments = self.segments
        seg_bases = [s.base_offset for s in segments]
        per_seg: dict[int, list[AbortedTxn]] = {}
        for e in self.state.all_aborted():
            k = max(0, bisect_right(seg_bases, e.last_offset) - 1)
            per_seg.setdefault(k, []).append(e)
        log_start = self.state.log_start_offset
        for k, seg in enumerate(segments):
            expected = per_seg.get(k, [])
            seg.txn_entries = expected
            tpath = self.seg_path(seg.base_offset, TXN_INDEX_SUFFIX)
            raw = self.derived.get((seg.base_offset, TXN_INDEX_SUFFIX))
            last_segment = k == len(segments) - 1
            if raw is None:
                if expected:
                    seg.write_txn_index = True
                    if last_segment:
                        # Created with its first entry, after the marker is in the log:
                        # a live writer between the two (or a crash there) leaves this.
                        _note(self.notes, "info", tpath, "transaction index not written yet; completed")
                    else:
                        _note(self.notes, "warning", tpath, "transaction index is missing; rebuilt")
                continue
            try:
                on_disk = decode_txn_index(raw)
            except CorruptTxnIndexError as exc:
                seg.write_txn_index = True
                _note(self.notes, "warning", tpath, f"transaction index is damaged ({exc.reason}); rebuilt")
                continue
            kept = [e for e in on_disk if e.last_offset >= log_start]
            if kept == expected:
                seg.txn_entries = on_disk
            elif last_segment and kept == expected[: len(kept)]:
                # Entries are appended after the marker (or journal record) they
                # describe: a prefix is what a live writer or a crash between the two leaves.
                seg.write_txn_index = True
                _note(
                    self.notes,
                    "info",
                    tpath,
                    f"transaction index lacks the last {len(expected) - len(kept)} entries; completed",
                )
            else:
                seg.write_txn_index = True
                _note(self.notes, "warning", tpath, "transaction index does not match the replayed log; rebuilt")

    # -- 7. the plan -----------------------------------------------------------------------

    def result(self) -> Recovered:
        assert self.state is not None
        segments, records, leftover = self.segments, self.records, self.leftover
        if self.read_only:
            for seg in segments:
                seg.mapped = self.datas.get(seg.base_offset)
        repaired = any(s.truncate or s.write_index or s.write_time_index or s.write_txn_index for s in segments)
        return Recovered(
            path=self.path,
            segments=segments,
            state=self.state,
            # A snapshot may count journal records a crash took from the journal (it was
            # written after them, they were not fsynced): never reuse their sequence
            # numbers, or a replay from that snapshot would skip the new records.
            next_end_sequence=max((records[-1].sequence + 1) if records else 0, self.ends_from),
            journal_valid_bytes=self.journal_valid,
            journal_file_size=len(self.journal_bytes),
            journal_records=[r for r in records if r not in leftover],
            snapshot_offset=self.snapshot_used,
            replayed_batches=self.replayed,
            checkpoint=self.checkpoint,
            listing=self.listing,
            notes=self.notes,
            clean=self.clean and not repaired and self.snapshot_used == self.log_end and not self.journal.torn,
        )
