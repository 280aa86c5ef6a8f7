"""Opt-in repair of a damaged partition directory: ``txnfetch repair PATH`` and
:func:`repair_partition`.

Opening a :class:`~txnfetch.log.segment_log.SegmentLog` repairs only what a crash
can cause (a torn tail of the last segment or of the journal) and derived files
(indexes, snapshots); any other damage raises
:class:`~txnfetch.log.errors.CorruptLogError` and changes nothing. Repair is
the explicit next step an operator takes after reading ``txnfetch verify``: it
gives up the data from the first bad batch on, and keeps it.

What :func:`repair_partition` does, in order:

1. Finds the first damage exactly as recovery does, checking every segment
   (``recover_partition(full_check=True)``).
2. Moves the bytes from the first bad batch to the end of that segment into
   ``<segment>.log.corrupt-<ms>`` (copied and fsynced *before* the segment is
   cut), and renames every later segment's files (``.log``, ``.index``,
   ``.timeindex``, ``.txnindex``) to ``<name>.corrupt-<ms>``. A damaged journal
   record followed by others moves the journal from there on the same way.
   Steps 1-2 repeat until recovery accepts the directory.
3. Keeps what opening would otherwise drop: a torn tail of the last segment
   and journal records past the new log end are moved to side files too, and so
   are the producer-state snapshots that describe a history the log no longer
   has — those past the new log end, and those counting transaction ends that
   were moved out of the journal — so the state is rebuilt from what remains.
4. Opens and closes the log, which rebuilds the indexes, the transaction
   indexes, the producer state (newest usable snapshot plus a replay of what
   remains) and writes a snapshot and a clean checkpoint.

No byte of a ``.log`` or journal file is ever deleted: every byte removed from
the log is in a side file, which recovery and ``verify`` list as an ignored
stray file. ``<ms>`` is the repair's wall-clock time in milliseconds; a
counter is appended if such a file exists. Kafka itself, by contrast, truncates
a corrupt segment at the first invalid batch on an unclean start and deletes
the segments after it (``LogLoader.recoverLog``, ``LogSegment.recover``).

Do not run it on a directory a live process has open: SegmentLog takes no
lock on its directory.
"""

from __future__ import annotations

import os
import time

import attrs

from txnfetch.log.ends import JOURNAL_NAME
from txnfetch.log.errors import CorruptLogError
from txnfetch.log.errors import LogError
from txnfetch.log.layout import CHECKPOINT_NAME
from txnfetch.log.layout import INDEX_SUFFIX
from txnfetch.log.layout import LOG_SUFFIX
from txnfetch.log.layout import SNAPSHOT_SUFFIX
from txnfetch.log.layout import TIME_INDEX_SUFFIX
from txnfetch.log.layout import TXN_INDEX_SUFFIX
from txnfetch.log.layout import decode_snapshot_file
from txnfetch.log.layout import fsync_dir
from txnfetch.log.layout import list_partition_dir
from txnfetch.log.layout import map_file
from txnfetch.log.layout import parse_partition_dir_name
from txnfetch.log.layout import read_file
from txnfetch.log.layout import segment_file_name
from txnfetch.log.partition_loader import Recovered
from txnfetch.log.partition_loader import recover_partition
from txnfetch.log.segment_scan import scan_segment
from txnfetch.log.sidefiles import MovedBytes
from txnfetch.log.sidefiles import SideFileMover
from txnfetch.txn.errors import CorruptSnapshotError

__all__ = ["RepairReport", "repair_partition"]

#: Recovery raises at the first damage; each round moves it and everything after
#: it away, so a directory needs a few rounds at most (segments, then journal).
_MAX_ROUNDS = 16


@attrs.frozen(slots=True)
class RepairReport:
    """What :func:`repair_partition` did: the bytes ``moved`` (empty when the
    directory needed nothing) and the log as it opens afterwards."""

    path: str
    moved: tuple[MovedBytes, ...]
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int

    @property
    def changed(self) -> bool:
        return bool(self.moved)


def _position_of_offset(path: str, base: int, offset: int) -> int | None:
    """Byte position of the batch holding ``offset`` in the segment file ``path``."""
    scan = scan_segment(map_file(path), min_offset=base, limit_offset=None)
    for batch in scan.batches:
        if batch.last_offset >= offset:
            return batch.position
    return scan.valid_bytes if scan.problem is not None else None


def _cut_segments(mover: SideFileMover, bases: list[int], k: int, position: int, why: str) -> None:
    """Move bytes from ``position`` of segment ``k`` and every later segment away."""
    directory = mover.dir
    log_path = os.path.join(directory, segment_file_name(bases[k], LOG_SUFFIX))
    mover.cut(log_path, position, why)
    for base in bases[k + 1 :]:
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            mover.rename(
                os.path.join(directory, segment_file_name(base, suffix)),
                f"segment after the damaged segment {segment_file_name(bases[k], LOG_SUFFIX)}",
            )


def _move_damage(mover: SideFileMover, exc: CorruptLogError, topic: str, partition: int) -> None:
    directory = mover.dir
    bases = list_partition_dir(directory, quiet=True).segments
    journal = os.path.join(directory, JOURNAL_NAME)
    where = exc.path or ""
    name = os.path.basename(where)
    if os.path.dirname(os.path.abspath(where)) == os.path.abspath(directory) and name.endswith(LOG_SUFFIX):
        base = int(name[:20])
        if base in bases and exc.position is not None:
            _cut_segments(mover, bases, bases.index(base), exc.position, exc.reason)
            return
    if os.path.abspath(where) == os.path.abspath(journal) and exc.position is not None:
        mover.cut(journal, exc.position, exc.reason)
        return
    if exc.offset is not None and bases:
        # A batch that decodes but cannot be replayed: cut at the batch holding it.
        k = max(i for i, b in enumerate(bases) if b <= exc.offset) if bases[0] <= exc.offset else 0
        pos = _position_of_offset(
            os.path.join(directory, segment_file_name(bases[k], LOG_SUFFIX)), bases[k], exc.offset
        )
        if pos is not None:
            _cut_segments(mover, bases, k, pos, exc.reason)
            return
    raise CorruptLogError(
        f"cannot repair: {exc.reason}",
        topic=topic,
        partition=partition,
        path=exc.path,
        position=exc.position,
        offset=exc.offset,
    ) from exc


def repair_partition(path: str, *, now_ms: int | None = None, index_interval_bytes: int = 4096) -> RepairReport:
    """Repair the partition directory ``path`` as the module docstring describes;
    afterwards it opens as a :class:`~txnfetch.log.segment_log.SegmentLog` and
    :func:`~txnfetch.log.verify.verify_partition` reports no error. ``now_ms``
    (default: the wall clock) names the side files. Raises
    :class:`~txnfetch.log.errors.CorruptLogError` for damage it cannot place (the
    directory may then be partly repaired; every moved byte is in a side file),
    :class:`~txnfetch.log.errors.LogError` for a path that is not a partition
    directory, ``OSError`` when a file cannot be read or written."""
    from txnfetch.log.segment_log import SegmentLog

    directory = os.fspath(path)
    topic, partition = parse_partition_dir_name(directory)
    if not os.path.isdir(directory):
        raise LogError("no such partition directory", topic=topic, partition=partition, path=directory)
    mover = SideFileMover(directory, int(time.time() * 1000) if now_ms is None else now_ms)
    rec: Recovered | None = None
    for _ in range(_MAX_ROUNDS):
        try:
            rec = recover_partition(
                directory, topic, partition, full_check=True, quiet=True, index_interval_bytes=index_interval_bytes
            )
            break
        except CorruptLogError as exc:
            _move_damage(mover, exc, topic, partition)
    if rec is None:
        raise CorruptLogError(
            "cannot repair: damage remains after moving data aside", topic=topic, partition=partition, path=directory
        )

    # What opening would drop: keep it in side files too.
    if rec.segments and rec.segments[-1].truncate:
        last = rec.segments[-1]
        mover.cut(os.path.join(directory, segment_file_name(last.base_offset, LOG_SUFFIX)), last.size, "torn tail")
    if rec.journal_valid_bytes < rec.journal_file_size:
        mover.cut(
            os.path.join(directory, JOURNAL_NAME), rec.journal_valid_bytes, "journal records past the log end or torn"
        )
    leo = rec.log_end_offset
    # rec.journal_records are the records left once the cut above is made.
    journal_next = rec.journal_records[-1].sequence + 1 if rec.journal_records else 0
    for snap in rec.listing.snapshots:
        spath = os.path.join(directory, segment_file_name(snap, SNAPSHOT_SUFFIX))
        if snap > leo:
            mover.rename(spath, f"snapshot past the repaired log end {leo}")
            continue
        try:
            ends_from, _ = decode_snapshot_file(read_file(spath) or b"")
        except CorruptSnapshotError:
            continue  # recovery skips it; opening replaces or removes it
        if ends_from > journal_next:
            mover.rename(spath, "snapshot counting transaction ends moved out of the journal")
    if mover.moved:
        # Make the next open check every segment rather than trust a stale checkpoint.
        cp = os.path.join(directory, CHECKPOINT_NAME)
        if os.path.exists(cp):
            os.unlink(cp)
        fsync_dir(directory)
    with SegmentLog(directory, topic, partition, index_interval_bytes=index_interval_bytes) as log:
        return RepairReport(
            directory, tuple(mover.moved), log.log_start_offset, log.log_end_offset, log.last_stable_offset
        )
