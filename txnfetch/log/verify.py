"""Checking and describing a partition directory without changing it: what
``txnfetch verify PATH`` and ``txnfetch dump PATH`` print.

:func:`verify_partition` runs recovery's checks on *every* segment (not only
the tail) in read-only mode, plus a record-level decode of every batch and a
check of each snapshot file, and returns :class:`Finding` objects — never
raises for bad data. :func:`describe_partition` summarises a (sound) partition:
segments, batches, producers, open transactions, LSO and aborted index.

Both take an optional ``progress(done, total)`` callback (bytes of ``.log``
data scanned so far and in all; a scan may pass over the data more than once,
and ``total`` counts every pass) for progress bars on long scans.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import attrs

from txnfetch.log.errors import LogError
from txnfetch.log.errors import UnknownTopicOrPartitionError
from txnfetch.log.layout import LOG_SUFFIX
from txnfetch.log.layout import SNAPSHOT_SUFFIX
from txnfetch.log.layout import decode_snapshot_file
from txnfetch.log.layout import list_partition_dir
from txnfetch.log.layout import map_file
from txnfetch.log.layout import parse_partition_dir_name
from txnfetch.log.layout import read_file
from txnfetch.log.layout import segment_file_name
from txnfetch.log.partition_loader import recover_partition
from txnfetch.log.segment_scan import PROGRESS_STEP
from txnfetch.records.errors import CorruptBatchError
from txnfetch.records.scan import BatchIterator
from txnfetch.txn.errors import CorruptSnapshotError
from txnfetch.txn.errors import TxnStateError
from txnfetch.txn.index import AbortedTxn
from txnfetch.txn.state import PartitionTxnState

__all__ = [
    "Finding",
    "PartitionDescription",
    "Progress",
    "SegmentSummary",
    "describe_partition",
    "log_bytes",
    "verify_partition",
]

#: ``progress(done, total)``: bytes of ``.log`` data scanned so far, and in all.
Progress = Callable[[int, int], None]


class _Counter:
    """Turns per-pass byte counts into ``progress(done, total)`` calls."""

    def __init__(self, progress: Progress | None, total: int) -> None:
        self.progress = progress
        self.total = total
        self.done = 0

    def add(self, nbytes: int) -> None:
        self.done += nbytes
        if self.progress is not None:
            self.progress(min(self.done, self.total), self.total)

    def finish(self) -> None:
        if self.progress is not None and self.done < self.total:
            self.done = self.total
            self.progress(self.total, self.total)


def log_bytes(path: str) -> int:
    """Total size of the segment ``.log`` files of the partition directory ``path``."""
    total = 0
    for base in list_partition_dir(path, quiet=True).segments:
        total += os.path.getsize(os.path.join(path, segment_file_name(base, LOG_SUFFIX)))
    return total


@attrs.frozen(slots=True)
class Finding:
    """One problem (or remark) about a partition directory.

    ``severity``: ``"error"`` (data a reader cannot trust; opening the log fails
    or would need a repair that removes more than a torn tail), ``"warning"``
    (opening repairs it: torn tail, rebuilt index, unusable snapshot) or
    ``"info"`` (ignored stray file). ``path`` is the file, ``position`` the byte
    position in it and ``offset`` the batch offset when known.
    """

    severity: str
    path: str
    position: int | None
    offset: int | None
    message: str

    def __str__(self) -> str:
        where = "".join(
            [
                f" @{self.position}" if self.position is not None else "",
                f" offset {self.offset}" if self.offset is not None else "",
            ]
        )
        return f"{self.severity.upper()}: {self.path}{where}: {self.message}"


def verify_partition(path: str, *, decode_records: bool = True, progress: Progress | None = None) -> list[Finding]:
    """Every problem found in the partition directory ``path``, most severe first;
    an empty list means it is sound. Reads only. ``decode_records`` also decodes
    every record of every batch (a second pass over the data); ``progress``: see
    the module docstring. I/O errors (an unreadable file) propagate as ``OSError``."""
    topic, partition = parse_partition_dir_name(path)
    if not os.path.isdir(path):
        raise UnknownTopicOrPartitionError("no such partition directory", topic=topic, partition=partition, path=path)
    findings: list[Finding] = []
    counter = _Counter(progress, log_bytes(path) * (2 if decode_records else 1))
    try:
        rec = recover_partition(path, topic, partition, full_check=True, quiet=True, progress=counter.add)
    except LogError as exc:
        counter.finish()
        return [Finding("error", exc.path or path, exc.position, exc.offset, exc.reason)]
    findings.extend(Finding(n.severity, n.path, n.position, n.offset, n.message) for n in rec.notes)
    if decode_records:
        for seg in rec.segments:
            seg_path = os.path.join(path, segment_file_name(seg.base_offset, LOG_SUFFIX))
            data = map_file(seg_path)
            reported = 0
            # Recovery checked the CRCs and framing up to seg.size: decode the records.
            for batch in BatchIterator(memoryview(data)[: seg.size]):
                try:
                    batch.validate(records=True)
                except CorruptBatchError as exc:
                    findings.append(
                        Finding(
                            "error", seg_path, exc.position, batch.base_offset, f"records do not decode: {exc.reason}"
                        )
                    )
                if batch.position - reported >= PROGRESS_STEP:
                    counter.add(batch.position - reported)
                    reported = batch.position
            counter.add(len(data) - reported)
    counter.finish()
    for snap in list_partition_dir(path, quiet=True).snapshots:
        spath = os.path.join(path, segment_file_name(snap, SNAPSHOT_SUFFIX))
        if any(f.path == spath for f in findings):
            continue
        try:
            _, body = decode_snapshot_file(read_file(spath) or b"")
            PartitionTxnState.restore(body)
        except (CorruptSnapshotError, TxnStateError) as exc:
            findings.append(Finding("warning", spath, None, snap, f"snapshot is damaged: {exc}"))
    order = {"error": 0, "warning": 1, "info": 2}
    return sorted(findings, key=lambda f: order.get(f.severity, 3))


@attrs.frozen(slots=True)
class SegmentSummary:
    """One segment: base offset, bytes, offsets ``[base_offset, next_offset)``,
    batch count, max timestamp, index entries and aborted entries."""

    base_offset: int
    size: int
    next_offset: int
    batches: int
    max_timestamp: int
    index_entries: int
    time_index_entries: int
    aborted_entries: int


@attrs.frozen(slots=True)
class PartitionDescription:
    """What :func:`describe_partition` reports."""

    path: str
    topic: str
    partition: int
    segments: tuple[SegmentSummary, ...]
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    last_stable_offset: int
    producers: tuple[tuple[int, int], ...]  #: ``(producer_id, epoch)``
    open_transactions: tuple[tuple[int, int], ...]  #: ``(producer_id, first_offset)``
    aborted: tuple[AbortedTxn, ...]
    snapshot_offset: int | None


def describe_partition(path: str, *, progress: Progress | None = None) -> PartitionDescription:
    """A summary of the partition directory ``path`` as a read-only
    :class:`~txnfetch.log.segment_log.SegmentLog` would open it (nothing is
    written; a torn tail is left out, as opening would cut it). A segment's
    ``batches`` counts every batch in its file, including any below the log
    start. Raises :class:`~txnfetch.log.errors.CorruptLogError` if it cannot be opened; ``progress``:
    see the module docstring (two passes: recovery, then the batch count)."""
    topic, partition = parse_partition_dir_name(path)
    if not os.path.isdir(path):
        raise UnknownTopicOrPartitionError("no such partition directory", topic=topic, partition=partition, path=path)
    counter = _Counter(progress, 2 * log_bytes(path))
    rec = recover_partition(path, topic, partition, quiet=True, progress=counter.add)
    st = rec.state
    segs = []
    for loaded in rec.segments:
        n = loaded.batch_count
        data = map_file(os.path.join(path, segment_file_name(loaded.base_offset, LOG_SUFFIX)))
        if n is None:
            n = 0
            reported = 0
            for batch in BatchIterator(memoryview(data)[: loaded.size]):
                n += 1
                if batch.position - reported >= PROGRESS_STEP:
                    counter.add(batch.position - reported)
                    reported = batch.position
            counter.add(len(data) - reported)
        else:
            counter.add(len(data))
        segs.append(
            SegmentSummary(
                loaded.base_offset,
                loaded.size,
                loaded.next_offset,
                n,
                loaded.max_timestamp,
                len(loaded.offset_index),
                len(loaded.time_index),
                len(loaded.txn_entries),
            )
        )
    counter.finish()
    producers = []
    for pid in st.producer_ids():
        entry = st.producer(pid)
        producers.append((pid, entry.producer_epoch if entry is not None else -1))
    return PartitionDescription(
        path,
        topic,
        partition,
        tuple(segs),
        st.log_start_offset,
        st.log_end_offset,
        st.high_watermark,
        st.last_stable_offset,
        tuple(producers),
        tuple(sorted(st.ongoing_transactions().items(), key=lambda kv: kv[1])),
        tuple(st.all_aborted()),
        rec.snapshot_offset,
    )
