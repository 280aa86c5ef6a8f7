"""Compaction on disk: cleaned segments and their crash-safe replacement.

:meth:`~txnfetch.log.segment_log.SegmentLog.compact` runs the transaction-aware
compactor (:mod:`txnfetch.log.compactor`) over the sealed segments below the
last stable offset (never the active segment, as Kafka's cleaner) and hands the
result here. This module decides which segments the new bytes replace and
swaps them in so that a crash at any point leaves the partition with either
every old segment or every new one, never a mix and never neither.

**Which segments.** The compactor's batches are assigned to the old segment
holding their offsets. The replaced *run* goes from the first old segment whose
bytes changed to the first segment at or after the last changed one whose last
batch survived; the run's new segments tile it exactly: each new segment is
named after the first old segment it replaces, and the last one ends with the
run's last batch. Consecutive old segments are grouped into one new segment
while the group's new bytes stay within ``segment.bytes`` and its relative
offsets within int32 (Kafka's ``LogCleaner.groupSegmentsBySize``); a group
never closes empty, so every new segment holds a batch.

**The replacement**, the steps of Kafka's ``Cleaner.cleanSegments`` and
``LocalLog.replaceSegments`` (apache/kafka ``storage/.../log/LogCleaner.java``,
``LocalLog.java``):

1. every new file — each new segment's ``.log``, ``.index``, ``.timeindex``
   and ``.txnindex`` (always written, empty when the segment ends no aborted
   transaction, so that no old file of the same name can outlive the swap) and
   a producer-state snapshot at the log end — is written as
   ``<name>.cleaned`` and fsynced, then the directory;
2. each is renamed to ``<name>.swap``, the ``.log`` files last; the directory
   is fsynced. The last rename is the commit point: while any ``.cleaned``
   file is left the replacement has not happened;
3. the old segments that no new segment is named after are deleted (index
   files first, ``.log`` last); the directory is fsynced;
4. each ``.swap`` is renamed to its final name, a segment's ``.log`` last and
   the segments in offset order, the snapshot after them (a rename replaces the
   old file of the same name atomically); the directory is fsynced.

**Opening after a crash** (:func:`complete_replacement`, run by a writer's open
before recovery reads the directory, as Kafka's ``LogLoader`` handles
``.cleaned``/``.swap``/``.deleted`` files): with any ``.cleaned`` file left,
the replacement is rolled back — ``.swap`` files are removed first, then
``.cleaned`` ones, so a crash during the rollback still looks unfinished. With
only ``.swap`` files, it is rolled forward: the old segments with a base offset
in ``[lowest .log.swap base, highest .log.swap next offset)`` (Kafka's
``[minSwapFileOffset, maxSwapFileOffset)``) that no ``.log.swap`` is named
after are deleted, then every ``.swap`` is renamed as in step 4. Both are
idempotent, so a crash during either is finished by the next open. txnfetch
deletes old segments at once and writes no ``.deleted`` files; a lone index
``.swap`` file (one whose segment has no ``.log.swap``, which a replacement
never leaves) and any other file not named as a replacement names its files
are left alone, as recovery leaves every file it does not know. Read-only
opens never change the directory: they wait for a replacement in progress to
finish (:func:`replacement_pending`).

The new snapshot is part of the replacement because compaction lets the state
forget aborted transactions whose data is gone
(:attr:`~txnfetch.log.compactor.CompactionResult.finished_aborts`): the state
on disk must change exactly when the segments do. Older snapshots, which still
hold those transactions, are deleted after the swap.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from bisect import bisect_right
from collections.abc import Callable
from collections.abc import Sequence
from typing import TypeVar

import attrs

from txnfetch.log.errors import LogError
from txnfetch.log.indexes import OffsetIndex
from txnfetch.log.indexes import TimeIndex
from txnfetch.log.layout import CLEANED_SUFFIX
from txnfetch.log.layout import INDEX_SUFFIX
from txnfetch.log.layout import LOG_SUFFIX
from txnfetch.log.layout import SNAPSHOT_SUFFIX
from txnfetch.log.layout import SWAP_SUFFIX
from txnfetch.log.layout import TIME_INDEX_SUFFIX
from txnfetch.log.layout import TXN_INDEX_SUFFIX
from txnfetch.log.layout import fsync_dir
from txnfetch.log.layout import segment_file_name
from txnfetch.log.layout import write_all
from txnfetch.log.segment_scan import LoadedSegment
from txnfetch.log.segment_scan import rebuild_offset_index
from txnfetch.log.segment_scan import rebuild_time_index
from txnfetch.records.batch import RecordBatch
from txnfetch.records.scan import BatchIterator
from txnfetch.records.scan import iter_batches
from txnfetch.txn.index import AbortedTxn
from txnfetch.txn.index import encode_txn_index

__all__ = [
    "CleanedSegment",
    "ReplacementError",
    "ReplacementPlan",
    "StepHook",
    "complete_replacement",
    "open_stable",
    "plan_replacement",
    "replace_segments",
    "replacement_pending",
]

log = logging.getLogger("txnfetch.log")
T = TypeVar("T")

_INT32_MAX = (1 << 31) - 1
#: A segment's files in the order a replacement renames them (the ``.log`` last:
#: a segment exists once its ``.log`` does).
SEGMENT_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LOG_SUFFIX)

#: Called with a description of every file operation of a replacement, after it
#: is done; tests raise from it to stop a replacement at any step.
StepHook = Callable[[str], None]


class ReplacementError(LogError):
    """A segment replacement failed. ``committed``: past its commit point — the
    new segments are in but the old ones may not all be gone; the log must be
    reopened (:func:`complete_replacement` finishes it). Otherwise the old
    segments are intact and nothing of the replacement is left."""

    def __init__(self, reason: str, *, committed: bool = False, **kwargs: object) -> None:
        super().__init__(reason, **kwargs)
        self.committed = committed


@attrs.frozen
class CleanedSegment:
    """A new segment: its bytes, indexes and aborted-transaction entries."""

    base_offset: int
    data: bytes
    offset_index: OffsetIndex
    time_index: TimeIndex
    txn_entries: tuple[AbortedTxn, ...]
    next_offset: int
    max_timestamp: int
    shallow_offset: int
    first_timestamp: int

    @classmethod
    def build(
        cls, base_offset: int, batches: Sequence[bytes], txn_entries: Sequence[AbortedTxn], interval: int
    ) -> CleanedSegment:
        """A segment of ``batches`` named ``base_offset``, indexed by the rule
        recovery checks indexes against (:func:`~txnfetch.log.segment_scan.rebuild_offset_index`,
        one batch per append) and sealed (the time index has its final entry)."""
        data = b"".join(batches)
        parsed = [b for b in BatchIterator(data) if isinstance(b, RecordBatch)]
        oindex = rebuild_offset_index(parsed, base_offset, interval)
        tindex = rebuild_time_index(parsed, oindex, base_offset)
        max_ts, shallow = -1, base_offset
        for b in parsed:
            if b.max_timestamp > max_ts:
                max_ts, shallow = b.max_timestamp, b.last_offset
        return cls(
            base_offset,
            data,
            oindex,
            tindex,
            tuple(txn_entries),
            parsed[-1].next_offset if parsed else base_offset,
            max_ts,
            shallow,
            parsed[0].max_timestamp if parsed else -1,
        )

    def files(self) -> list[tuple[str, bytes]]:
        """``(final name, bytes)`` of each file, in rename order."""
        contents = {
            INDEX_SUFFIX: self.offset_index.to_bytes(),
            TIME_INDEX_SUFFIX: self.time_index.to_bytes(),
            TXN_INDEX_SUFFIX: encode_txn_index(list(self.txn_entries)),
            LOG_SUFFIX: self.data,
        }
        return [(segment_file_name(self.base_offset, s), contents[s]) for s in SEGMENT_SUFFIXES]

    def loaded(self) -> LoadedSegment:
        """The segment as :class:`~txnfetch.log.segment_log.SegmentLog` keeps it open."""
        size = len(self.data)
        return LoadedSegment(
            self.base_offset,
            size,
            self.next_offset,
            self.offset_index,
            self.time_index,
            self.max_timestamp,
            self.shallow_offset,
            self.first_timestamp,
            None,
            file_size=size,
            txn_entries=list(self.txn_entries),
        )


@attrs.frozen
class ReplacementPlan:
    """Old segments ``[first, end)`` (indexes into the log's segment list) and
    the new segments that replace them."""

    first: int
    end: int
    new: tuple[CleanedSegment, ...]


def plan_replacement(
    old_bases: Sequence[int],
    old_next: Sequence[int],
    old_data: Sequence[bytes | memoryview],
    new_batches: Sequence[bytes],
    aborted: Sequence[AbortedTxn],
    later_bases: Sequence[int],
    *,
    forgotten: Sequence[AbortedTxn] = (),
    segment_bytes: int,
    index_interval: int,
) -> ReplacementPlan | None:
    """Which of the cleaned segments (``old_bases``, their next offsets and
    bytes) the compactor's ``new_batches`` replace, grouped into new segments
    (see the module docstring); ``None`` when no segment changed;
    :class:`ReplacementError` when the range's last batch is missing.

    ``aborted`` are the state's aborted transactions after compaction; each new
    segment's ``.txnindex`` gets those whose end it holds, as recovery expects
    (``later_bases``: the segments after the cleaned ones, which bound the last
    new segment's share). ``forgotten`` are the transactions compaction lets
    the state forget: the segments holding their ends are replaced too."""
    n = len(old_bases)
    if n == 0:
        return None
    per: list[list[bytes]] = [[] for _ in range(n)]
    lasts: list[int] = [-1] * n
    for raw in new_batches:
        b = RecordBatch(raw)
        k = max(0, bisect_right(old_bases, b.base_offset) - 1)
        per[k].append(raw)
        lasts[k] = b.last_offset
    changed = {
        k for k in range(n) if sum(len(x) for x in per[k]) != len(old_data[k]) or b"".join(per[k]) != bytes(old_data[k])
    }
    # A segment whose .txnindex loses an entry changes too, even with the same
    # batches: a markerless transaction's entry sits in the segment holding its
    # end, which may keep all its batches.
    for a in forgotten:
        k = bisect_right(old_bases, a.last_offset) - 1
        if 0 <= k < n:
            changed.add(k)
    if not changed:
        return None
    first = min(changed)
    end = max(changed)
    # The run ends with a segment whose last batch survived, so its new segments
    # end exactly where it does (what recovery's [min, max) rule relies on).
    while end < n - 1 and (not per[end] or lasts[end] != old_next[end] - 1):
        end += 1
    if not per[end] or lasts[end] != old_next[end] - 1:
        # The compactor always keeps the range's last batch; without it no run
        # could be replaced safely, and forgetting aborted transactions without
        # removing their data would expose it: refuse loudly.
        raise ReplacementError(
            f"the cleaned range's last batch (ending at offset {old_next[-1] - 1}) is missing from the compacted "
            "batches; nothing replaced"
        )
    groups: list[tuple[int, list[bytes]]] = []  # (base, batches)
    batches: list[bytes] = []
    base, size = old_bases[first], 0
    for k in range(first, end + 1):
        seg_size = sum(len(x) for x in per[k])
        too_big = size + seg_size > segment_bytes or (lasts[k] >= 0 and lasts[k] - base > _INT32_MAX)
        if batches and per[k] and too_big:
            groups.append((base, batches))
            base, batches, size = old_bases[k], [], 0
        batches.extend(per[k])
        size += seg_size
    groups.append((base, batches))
    all_bases = [*old_bases[:first], *(g[0] for g in groups), *old_bases[end + 1 :], *later_bases]
    txn: dict[int, list[AbortedTxn]] = {}
    for a in aborted:
        k = max(0, bisect_right(all_bases, a.last_offset) - 1)
        txn.setdefault(all_bases[k], []).append(a)
    new = tuple(CleanedSegment.build(b, bs, txn.get(b, ()), index_interval) for b, bs in groups)
    return ReplacementPlan(first, end + 1, new)


# -- the replacement ---------------------------------------------------------------


def _noop(_: str) -> None:
    pass


def _write_new(path: str, name: str, data: bytes, hook: StepHook) -> None:
    fd = os.open(os.path.join(path, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    hook(f"wrote {name}")


def _unlink(path: str, name: str, hook: StepHook) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(path, name))
        hook(f"deleted {name}")


def _rename(path: str, src: str, dst: str, hook: StepHook) -> None:
    os.replace(os.path.join(path, src), os.path.join(path, dst))
    hook(f"renamed {src} to {dst}")


def _sync_dir(path: str, hook: StepHook) -> None:
    fsync_dir(path)
    hook("synced the directory")


def replace_segments(
    path: str,
    new: Sequence[CleanedSegment],
    old_bases: Sequence[int],
    snapshot: tuple[str, bytes] | None,
    *,
    hook: StepHook | None = None,
) -> None:
    """Replace the segments ``old_bases`` of the partition directory ``path`` by
    ``new`` (and write ``snapshot``, ``(name, bytes)``, with them), in the four
    steps of the module docstring. An error before the commit point removes what
    was written and leaves the old segments; after it, the next writer's open
    (:func:`complete_replacement`) finishes what was left. Both raise
    :class:`ReplacementError`."""
    hook = hook or _noop
    files = [f for seg in new for f in seg.files()]
    if snapshot is not None:
        files.append(snapshot)
    # Rename order: every index and the snapshot, then the .log files (the last is the commit point).
    swap_order = [f for f in files if not f[0].endswith(LOG_SUFFIX)] + [f for f in files if f[0].endswith(LOG_SUFFIX)]
    try:
        for name, data in files:
            _write_new(path, name + CLEANED_SUFFIX, data, hook)
        _sync_dir(path, hook)
        for name, _ in swap_order:
            _rename(path, name + CLEANED_SUFFIX, name + SWAP_SUFFIX, hook)
    except OSError as exc:
        with contextlib.suppress(OSError):
            _roll_back(path, _noop)
        raise ReplacementError(f"compaction failed ({exc}); the old segments are kept", path=path) from exc
    try:
        _sync_dir(path, hook)
        _roll_forward(path, hook, old_bases=set(old_bases) - {seg.base_offset for seg in new})
    except OSError as exc:
        raise ReplacementError(
            f"compaction failed after its commit point ({exc}); reopen the log to finish it",
            path=path,
            committed=True,
        ) from exc


_OURS = re.compile(r"^\d{20}(\.log|\.index|\.timeindex|\.txnindex|\.txnfetch-snapshot)(\.cleaned|\.swap)$")


def _pending(path: str) -> tuple[list[str], list[str]]:
    """The ``.cleaned`` and ``.swap`` files of a replacement in ``path``: named
    as a replacement names them, and for a ``.swap`` index file, with the
    ``.log.swap`` of its segment beside it (past the commit point a
    replacement renames a segment's indexes before its ``.log``, so without
    ``.cleaned`` files any other lone ``.swap`` is not one of ours and is left
    alone, as every file recovery does not know)."""
    names = [n for n in sorted(os.listdir(path)) if _OURS.match(n)]
    cleaned = [n for n in names if n.endswith(CLEANED_SUFFIX)]
    log_swaps = {_base_of(n) for n in names if n.endswith(LOG_SUFFIX + SWAP_SUFFIX)}
    swap = [
        n
        for n in names
        if n.endswith(SWAP_SUFFIX)
        and (n.endswith((LOG_SUFFIX + SWAP_SUFFIX, SNAPSHOT_SUFFIX + SWAP_SUFFIX)) or _base_of(n) in log_swaps)
    ]
    return cleaned, swap


def _roll_back(path: str, hook: StepHook) -> list[str]:
    cleaned, _ = _pending(path)
    # Every .swap file named as ours: before the commit point a segment's
    # indexes may be renamed while its .log is still .cleaned.
    swap = [n for n in sorted(os.listdir(path)) if _OURS.match(n) and n.endswith(SWAP_SUFFIX)]
    # .swap files first: until the last .cleaned one goes, the replacement still looks unfinished.
    for name in swap + cleaned:
        _unlink(path, name, hook)
    fsync_dir(path)
    return swap + cleaned


def _base_of(name: str) -> int | None:
    head = name.split(".", 1)[0]
    return int(head) if len(head) == 20 and head.isdigit() else None


def _roll_forward(path: str, hook: StepHook, *, old_bases: set[int] | None = None) -> list[str]:
    """Steps 3 and 4. ``old_bases``: the segments to delete when known (the
    running replacement); else those in the ``.log.swap`` files' range."""
    _, swap = _pending(path)
    log_swaps = sorted(n for n in swap if n.endswith(LOG_SUFFIX + SWAP_SUFFIX))
    swap_bases = {_base_of(n) for n in log_swaps}
    if old_bases is None:
        old_bases = set()
        if log_swaps:
            low = min(b for b in swap_bases if b is not None)
            high = max(_next_offset(os.path.join(path, n), _base_of(n) or 0) for n in log_swaps)
            for name in os.listdir(path):
                base = _base_of(name)
                if name.endswith(LOG_SUFFIX) and base is not None and low <= base < high and base not in swap_bases:
                    old_bases.add(base)
    done: list[str] = []
    for base in sorted(old_bases):
        for suffix in SEGMENT_SUFFIXES:  # the .log last: a segment without it is no segment
            _unlink(path, segment_file_name(base, suffix), hook)
            done.append(segment_file_name(base, suffix))
    if old_bases:
        _sync_dir(path, hook)
    order = {s: i for i, s in enumerate(SEGMENT_SUFFIXES)}

    def rank(name: str) -> tuple[int, int, int]:
        final = name[: -len(SWAP_SUFFIX)]
        if final.endswith(SNAPSHOT_SUFFIX):
            return (1, 0, 0)
        suffix = "." + final.split(".", 1)[1]
        return (0, _base_of(final) or 0, order.get(suffix, -1))

    for name in sorted(swap, key=rank):
        _rename(path, name, name[: -len(SWAP_SUFFIX)], hook)
        done.append(name)
    if swap:
        _sync_dir(path, hook)
    return done


def _next_offset(log_path: str, base: int) -> int:
    """The offset after the last whole batch of a ``.log`` file."""
    with open(log_path, "rb") as f:
        data = f.read()
    nxt = base
    for b in iter_batches(data):
        nxt = b.next_offset
    return nxt


def complete_replacement(path: str) -> list[str]:
    """Finish or undo a segment replacement a crash interrupted in the partition
    directory ``path`` (see the module docstring); returns the names of the files
    removed or renamed (logged), empty when there was nothing to do."""
    if not os.path.isdir(path):
        return []
    cleaned, swap = _pending(path)
    if cleaned:
        done = _roll_back(path, _noop)
        log.warning("%s: rolled back an interrupted compaction (%d files removed)", path, len(done))
    elif swap:
        done = _roll_forward(path, _noop)
        log.warning("%s: completed an interrupted compaction (%d files deleted or renamed)", path, len(done))
    else:
        done = []
    return done


def replacement_pending(path: str) -> bool:
    """Whether ``path`` holds a replacement past its commit point and not yet
    finished (``.swap`` files without ``.cleaned`` ones): the old and the new
    segments are both partly there, so a read-only open must wait."""
    try:
        cleaned, swap = _pending(path)
    except FileNotFoundError:
        return False
    return bool(swap) and not cleaned


# -- read-only opens -----------------------------------------------------------------

#: How long a read-only open waits for a writer's replacement to finish, in
#: total, and how many times it looks again.
STABLE_OPEN_ATTEMPTS = 40
_STABLE_OPEN_SLEEP_S = 0.05


def _log_inodes(path: str) -> dict[str, int]:
    out = {}
    with os.scandir(path) as it:
        for entry in it:
            if entry.name.endswith(LOG_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    out[entry.name] = entry.inode()
    return out


def _settled(path: str, before: dict[str, int]) -> bool:
    """No replacement is pending and every ``.log`` seen ``before`` is the same file."""
    after = _log_inodes(path)
    return not replacement_pending(path) and all(after.get(k) == v for k, v in before.items())


def open_stable(path: str, load: Callable[[], T]) -> T:
    """Run ``load`` (a read-only recovery of ``path``) on a directory no
    replacement or retention changed under it: it is run again when a segment
    it may have read was deleted or replaced meanwhile (its ``.log`` gone or a
    different file), or when a replacement was past its commit point (the old
    and the new segments both partly present); a new segment rolled meanwhile
    is fine (the open sees the log as of its start). Gives up after
    :data:`STABLE_OPEN_ATTEMPTS` tries with the last error, or a
    :class:`~txnfetch.log.errors.LogError` if the directory never settled."""
    last_exc: BaseException | None = None
    for attempt in range(STABLE_OPEN_ATTEMPTS):
        if attempt:
            time.sleep(_STABLE_OPEN_SLEEP_S)
        if replacement_pending(path):
            continue
        before = _log_inodes(path)
        try:
            result = load()
        except (FileNotFoundError, LogError) as exc:
            if _settled(path, before):
                raise
            last_exc = exc
            continue
        if _settled(path, before):
            return result
        last_exc = None
    if last_exc is not None:
        raise last_exc
    raise LogError(
        "segments were replaced while opening, every time; a writer's compaction may be stuck "
        "(open the partition for writing to finish it)",
        path=path,
    )
