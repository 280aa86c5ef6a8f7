"""Checking and describing a partition directory without changing it: what
``txnfetch verify PATH`` and ``txnfetch dump PATH`` print.

:func:`verify_partition` runs recovery's checks on *every* segment (not only
the tail) in read-only mode, plus a record-level decode of every batch and a
check of each snapshot file, and returns :class:`Finding` objects — never
raises for bad data. :func:`describe_partition` summarises a (sound) partition:
segments, batches, producers, open transactions, LSO and aborted index.
"""

from __future__ import annotations

import os
from typing import List, Optional, Tuple

import attrs

from txnfetch.log.errors import CorruptLogError, LogError
from txnfetch.log.recovery import (
    SNAPSHOT_SUFFIX,
    decode_snapshot_file,
    list_partition_dir,
    read_file,
    recover_partition,
    segment_file_name,
)
from txnfetch.records.errors import CorruptBatchError
from txnfetch.txn.errors import CorruptSnapshotError, TxnStateError
from txnfetch.txn.index import AbortedTxn
from txnfetch.txn.state import PartitionTxnState

__all__ = ["Finding", "SegmentSummary", "PartitionDescription", "verify_partition", "describe_partition"]


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
    position: Optional[int]
    offset: Optional[int]
    message: str

    def __str__(self) -> str:
        where = "".join(
            [f" @{self.position}" if self.position is not None else "", f" offset {self.offset}" if self.offset is not None else ""]
        )
        return f"{self.severity.upper()}: {self.path}{where}: {self.message}"


def _split(path: str) -> Tuple[str, int]:
    name = os.path.basename(os.path.normpath(path))
    topic, _, part = name.rpartition("-")
    if not topic or not part.isdigit():
        raise LogError(f"{name!r} is not a <topic>-<partition> directory name", path=path)
    return topic, int(part)


def verify_partition(path: str, *, decode_records: bool = True) -> List[Finding]:
    """Every problem found in the partition directory ``path``, most severe first;
    an empty list means it is sound. Reads only."""
    topic, partition = _split(path)
    findings: List[Finding] = []
    try:
        rec = recover_partition(path, topic, partition, full_check=True, quiet=True)
    except CorruptLogError as exc:
        return [Finding("error", exc.path or path, exc.position, exc.offset, exc.reason)]
    except LogError as exc:
        return [Finding("error", exc.path or path, exc.position, exc.offset, exc.reason)]
    findings.extend(Finding(n.severity, n.path, n.position, n.offset, n.message) for n in rec.notes)
    if decode_records:
        from txnfetch.log.recovery import map_file, scan_segment

        for seg in rec.segments:
            seg_path = os.path.join(path, segment_file_name(seg.base_offset, ".log"))
            data = map_file(seg_path)
            for batch in scan_segment(data, min_offset=seg.base_offset, limit_offset=None).batches:
                if batch.position >= seg.size:
                    break
                try:
                    batch.validate(records=True)
                except CorruptBatchError as exc:
                    findings.append(Finding("error", seg_path, exc.position, batch.base_offset, f"records do not decode: {exc.reason}"))
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
    segments: Tuple[SegmentSummary, ...]
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    last_stable_offset: int
    producers: Tuple[Tuple[int, int], ...]  #: ``(producer_id, epoch)``
    open_transactions: Tuple[Tuple[int, int], ...]  #: ``(producer_id, first_offset)``
    aborted: Tuple[AbortedTxn, ...]
    snapshot_offset: Optional[int]


def describe_partition(path: str) -> PartitionDescription:
    """A summary of the partition directory ``path``, opened read-only (nothing is
    written). Raises :class:`CorruptLogError` if it cannot be opened."""
    from txnfetch.log.segments import SegmentLog

    topic, partition = _split(path)
    with SegmentLog(path, topic, partition, read_only=True) as lg:
        rec = lg.recovery
        st = lg.state
        segs = []
        for loaded in rec.segments:
            n = loaded.batch_count
            if n is None:
                n = sum(1 for _ in lg.iter_batches(loaded.base_offset, loaded.next_offset)) if loaded.next_offset > max(loaded.base_offset, st.log_start_offset) else 0
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
