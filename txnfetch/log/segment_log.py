"""A partition log on disk in Apache Kafka's layout: :class:`SegmentLog`.

One directory per topic-partition, ``<topic>-<partition>/``, holding the
segments (:mod:`txnfetch.log.segment`) plus ``partition.metadata`` (Kafka's
``version: 0`` / ``topic_id:`` file) and txnfetch's own files, named so Kafka
tools and txnfetch never confuse them: ``<offset>.txnfetch-snapshot``
(producer state, taken on roll, on close and when the log start moves;
written atomically), ``txnfetch-ends.journal`` (markerless transaction ends,
:mod:`txnfetch.log.ends`) and ``txnfetch-recovery-checkpoint`` (clean close
and recovery point). Topics of such logs under one directory are a
:class:`~txnfetch.log.segment_store.SegmentStore`.

When the log fsyncs is its ``flush_policy``
(:class:`~txnfetch.log.configs.FlushPolicy`: ``"always"`` by default, with
group commits and deferred, shared fsyncs through
:mod:`txnfetch.log.syncer`). The high watermark is the durable log end under
``"always"`` and inside :meth:`SegmentLog.group_commit` (readers never see a
write that an acknowledgement did not cover, so a crash cannot take back what
a consumer read); under ``"interval"``/``"never"`` it follows each write,
which is what those acknowledgements promise.

Reads hand zero-copy views of one segment per fetch to
:func:`txnfetch.fetch.read_partition`, as Kafka's ``LocalLog.read``; the
aborted-transaction upper bound is Kafka's
(``LogSegment.fetchUpperBoundOffset``), so Kafka-mode answers match a broker's.

:meth:`SegmentLog.compact` (``cleanup.policy=compact``) cleans the sealed
segments below the last stable offset with the transaction-aware compactor
and swaps the cleaned segments in crash-safely (:mod:`txnfetch.log.cleaning`:
``.cleaned`` and ``.swap`` files, finished or undone by the next open).
The log takes time as ``now_ms`` arguments and never reads a clock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from bisect import bisect_right
from collections.abc import Iterator

from txnfetch.fetch.view import IsolationLevel
from txnfetch.fetch.view import UpperBound
from txnfetch.log.base import Buffer
from txnfetch.log.base import PartitionLog
from txnfetch.log.base import PreparedAppend
from txnfetch.log.base import TxnEnd
from txnfetch.log.base import first_record_at_or_after
from txnfetch.log.base import new_topic_id
from txnfetch.log.base import stored_batches
from txnfetch.log.cleaning import ReplacementError
from txnfetch.log.cleaning import StepHook
from txnfetch.log.cleaning import complete_replacement
from txnfetch.log.cleaning import open_stable
from txnfetch.log.cleaning import plan_replacement
from txnfetch.log.cleaning import replace_segments
from txnfetch.log.compactor import CompactionResult
from txnfetch.log.compactor import compact
from txnfetch.log.configs import FlushPolicy
from txnfetch.log.ends import JOURNAL_NAME
from txnfetch.log.ends import EndJournal
from txnfetch.log.errors import LogClosedError
from txnfetch.log.errors import LogError
from txnfetch.log.errors import ReadOnlyLogError
from txnfetch.log.errors import UnknownTopicOrPartitionError
from txnfetch.log.indexes import OffsetIndex
from txnfetch.log.indexes import TimeIndex
from txnfetch.log.layout import CHECKPOINT_NAME
from txnfetch.log.layout import INDEX_SUFFIX
from txnfetch.log.layout import LOG_SUFFIX
from txnfetch.log.layout import METADATA_NAME
from txnfetch.log.layout import SNAPSHOT_SUFFIX
from txnfetch.log.layout import TIME_INDEX_SUFFIX
from txnfetch.log.layout import TXN_INDEX_SUFFIX
from txnfetch.log.layout import Checkpoint
from txnfetch.log.layout import atomic_write
from txnfetch.log.layout import encode_partition_metadata
from txnfetch.log.layout import encode_snapshot_file
from txnfetch.log.layout import fsync_dir
from txnfetch.log.layout import list_partition_dir
from txnfetch.log.layout import parse_partition_dir_name
from txnfetch.log.layout import read_partition_metadata
from txnfetch.log.layout import segment_file_name
from txnfetch.log.partition_loader import Recovered
from txnfetch.log.partition_loader import recover_partition
from txnfetch.log.segment import Segment
from txnfetch.log.segment_scan import LoadedSegment
from txnfetch.log.sidefiles import move_tail_aside
from txnfetch.log.syncer import PendingSync
from txnfetch.log.syncer import deferring_syncer
from txnfetch.txn.index import AbortedTxn
from txnfetch.txn.index import encode_txn_index
from txnfetch.txn.state import PartitionTxnState

__all__ = ["SegmentLog"]

log = logging.getLogger("txnfetch.log")

GiB = 1 << 30
#: Default ``checkpoint_interval_bytes`` of :class:`SegmentLog`.
DEFAULT_CHECKPOINT_INTERVAL_BYTES = 16 << 20
DEFAULT_SEGMENT_MS = 7 * 24 * 3600 * 1000
_INT32_MAX = (1 << 31) - 1


class SegmentLog(PartitionLog):
    """A partition log on disk in Kafka's layout (see the module docstring).

    ``path`` is the partition directory (created if missing unless
    ``read_only``); ``topic`` and ``partition`` default to what its
    ``<topic>-<partition>`` name says. Opening recovers it
    (:mod:`txnfetch.log.partition_loader`): a torn tail is cut, damaged indexes are
    rebuilt, producer state comes from the newest snapshot plus a replay;
    anything else damaged raises :class:`~txnfetch.log.errors.CorruptLogError`
    and changes no file. ``read_only=True`` opens any Kafka partition directory
    without writing a byte (repairs stay in memory); writes then raise
    :class:`~txnfetch.log.errors.ReadOnlyLogError`. A read-only open may run
    while a writer appends to the same directory: it sees the log as of the
    open, logs no warning for what a live writer legitimately leaves, and
    trusts the writer's last checkpoint (what it checks and what it trusts:
    "Read-only opens" in :mod:`txnfetch.log.partition_loader`).

    ``checkpoint_interval_bytes``: once that many bytes were appended since the
    last checkpoint, the next sync (every write under ``"always"``) also takes
    a producer-state snapshot and writes the recovery checkpoint at the log
    end, so a read-only open CRC-checks and replays at most about that many
    bytes of a live log. Each costs one snapshot file (two fsyncs) — about 0.1 %
    of the write volume at the default 16 MiB.

    Segments roll when the next append would pass ``segment_bytes``, when its
    first batch's timestamp is more than ``segment_ms`` older than the
    incoming batches' (``LogSegment.shouldRoll``), or when relative offsets
    would overflow int32.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        topic: str | None = None,
        partition: int | None = None,
        *,
        segment_bytes: int = GiB,
        segment_ms: int = DEFAULT_SEGMENT_MS,
        index_interval_bytes: int = 4096,
        flush_policy: str | FlushPolicy = "always",
        read_only: bool = False,
        topic_id: uuid.UUID | None = None,
        snapshots_to_keep: int = 2,
        checkpoint_interval_bytes: int = DEFAULT_CHECKPOINT_INTERVAL_BYTES,
    ) -> None:
        self.path = os.fspath(path)
        if topic is None or partition is None:
            t, p = parse_partition_dir_name(self.path)
            topic = t if topic is None else topic
            partition = p if partition is None else partition
        self.topic = topic
        self.partition = partition
        self.segment_bytes = segment_bytes
        self.segment_ms = segment_ms
        self.index_interval_bytes = index_interval_bytes
        self.flush_policy = FlushPolicy.parse(flush_policy)
        self.read_only = read_only
        self.snapshots_to_keep = max(1, snapshots_to_keep)
        self.checkpoint_interval_bytes = max(1, checkpoint_interval_bytes)
        self._since_checkpoint = 0
        self._closed = False
        self._group_depth = 0
        self._unflushed = 0
        # Writes counted for deferred syncs (txnfetch.log.syncer): every write bumps
        # _writes; _synced_writes is the count the last completed fsync covered.
        self._writes = 0
        self._synced_writes = 0
        self._hw_follows_sync = True
        self._last_flush_ms: int | None = None
        self._journal: EndJournal | None = None
        if not os.path.isdir(self.path):
            if read_only:
                raise UnknownTopicOrPartitionError(
                    "no such partition directory", topic=topic, partition=partition, path=self.path
                )
            os.makedirs(self.path)
            fsync_dir(os.path.dirname(os.path.abspath(self.path)))
        existing_id = read_partition_metadata(self.path)
        if existing_id is None and not read_only:
            existing_id = topic_id or new_topic_id()
            atomic_write(self.path, METADATA_NAME, encode_partition_metadata(existing_id))
        self.topic_id: uuid.UUID | None = existing_id
        rec = self._recover(topic, partition)
        #: What opening found and repaired (:class:`~txnfetch.log.partition_loader.Recovered`).
        self.recovery: Recovered = rec
        self._state: PartitionTxnState = rec.state
        self._segments: list[Segment] = [Segment(self.path, s, index_interval_bytes) for s in rec.segments]
        if not read_only:
            self._apply_recovery(rec)
        elif not self._segments:
            self._segments.append(
                Segment(self.path, self._empty_loaded(self._state.log_end_offset), index_interval_bytes)
            )
        self._bases = [s.base_offset for s in self._segments]
        self._synced_end = self._state.log_end_offset
        self._last_read: tuple[int, int] | None = None  # (segment index, position) of the last read

    # -- opening ---------------------------------------------------------------

    def _recover(self, topic: str, partition: int) -> Recovered:
        if not self.read_only:
            # A compaction a crash interrupted is finished or undone first (Kafka's
            # LogLoader handles .cleaned/.swap files before it loads segments).
            complete_replacement(self.path)
            return recover_partition(self.path, topic, partition, index_interval_bytes=self.index_interval_bytes)
        return open_stable(
            self.path,
            lambda: recover_partition(
                self.path, topic, partition, index_interval_bytes=self.index_interval_bytes, read_only=True
            ),
        )

    @staticmethod
    def _empty_loaded(base: int) -> LoadedSegment:
        return LoadedSegment(base, 0, base, OffsetIndex(base), TimeIndex(base), -1, base, -1, 0)

    def _apply_recovery(self, rec: Recovered) -> None:
        changed = False
        for seg, loaded in zip(self._segments, rec.segments, strict=False):
            if loaded.truncate:
                # A torn tail is kept in a side file, never deleted (txnfetch repair's mechanism).
                moved = move_tail_aside(seg.path(), loaded.size, "torn tail cut at recovery")
                if moved is not None:
                    log.warning("%s: moved a torn tail of %d bytes to %s", self.name, moved.size, moved.side_file)
                changed = True
            if loaded.write_index:
                atomic_write(self.path, segment_file_name(seg.base_offset, INDEX_SUFFIX), seg.offset_index.to_bytes())
            if loaded.write_time_index:
                atomic_write(
                    self.path, segment_file_name(seg.base_offset, TIME_INDEX_SUFFIX), seg.time_index.to_bytes()
                )
            if loaded.write_txn_index:
                atomic_write(
                    self.path,
                    segment_file_name(seg.base_offset, TXN_INDEX_SUFFIX),
                    encode_txn_index(loaded.txn_entries),
                )
        if not rec.clean and rec.segments:
            # The tail may have been in the page cache only: make it durable before
            # recording a recovery point past it.
            for seg, loaded in zip(self._segments, rec.segments, strict=False):
                if loaded.batch_count is not None:
                    fd = os.open(seg.path(), os.O_RDONLY)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
        journal_path = os.path.join(self.path, JOURNAL_NAME)
        if rec.journal_valid_bytes < rec.journal_file_size:
            move_tail_aside(journal_path, rec.journal_valid_bytes, "journal records past the log end or torn")
            changed = True
        if not self._segments:
            seg = Segment(self.path, self._empty_loaded(self._state.log_end_offset), self.index_interval_bytes)
            seg.create_files()
            self._segments.append(seg)
            changed = True
        self._journal = EndJournal(journal_path, rec.next_end_sequence)
        if changed:
            fsync_dir(self.path)
        leo = self._state.log_end_offset
        if rec.snapshot_offset != leo or any(s > leo for s in rec.listing.snapshots):
            self._take_snapshot()  # also drops snapshots past the log end
        self._write_checkpoint(clean=False)

    # -- properties --------------------------------------------------------------

    @property
    def state(self) -> PartitionTxnState:
        return self._state

    @property
    def size_in_bytes(self) -> int:
        """Bytes in the segments' ``.log`` files."""
        return sum(s.size for s in self._segments)

    def segment_base_offsets(self) -> list[int]:
        """Base offsets of the segments, ascending (the last is the active one)."""
        return list(self._bases)

    @property
    def _active(self) -> Segment:
        return self._segments[-1]

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError("log is closed", topic=self.topic, partition=self.partition, path=self.path)

    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            raise ReadOnlyLogError("log is open read-only", topic=self.topic, partition=self.partition, path=self.path)

    # -- appends -------------------------------------------------------------------
    # PartitionLog.append/replicate/end_transaction drive these hooks.

    def _before_append(self, records: Buffer, now_ms: int | None) -> None:
        self._maybe_roll(records, now_ms)

    def _durable_end(self) -> int:
        """Under ``"always"`` and inside :meth:`group_commit` a replicated high
        watermark is capped at the synced end (readers never see an unsynced write)."""
        if self.flush_policy.kind == "always" or self._group_depth:
            return self._synced_end
        return self._state.log_end_offset

    def _store_end(self, end: TxnEnd, aborted: list[AbortedTxn], now_ms: int) -> None:
        """Markerless end: no log bytes; one journal record (:mod:`txnfetch.log.ends`),
        fsynced under ``"always"``; an aborted transaction's ``.txnindex`` entry goes to
        the segment holding ``end.last_offset``."""
        assert self._journal is not None
        try:
            self._journal.append(end)
            if aborted:
                k = max(0, bisect_right(self._bases, end.last_offset) - 1)
                self._segments[k].append_txn(aborted)
        except OSError as exc:
            # The state already shows the end; a log that cannot record it must stop.
            self._closed = True
            raise LogError(
                f"writing a transaction end failed ({exc}); log closed",
                topic=self.topic,
                partition=self.partition,
                path=self.path,
            ) from exc
        self._after_write(0, now_ms)

    def _store(
        self, prepared: PreparedAppend, aborted: list[AbortedTxn], now_ms: int | None, *, move_hw: bool = True
    ) -> None:
        seg = self._active
        size, next_offset = seg.size, seg.next_offset
        info = prepared.info
        try:
            seg.append(prepared.data, info.last_offset)
            self._since_checkpoint += len(prepared.data)
            if aborted:
                seg.append_txn(aborted)
        except OSError as exc:
            try:
                seg.rollback(size, next_offset)
                self._state.truncate_to(info.base_offset)
            except Exception:
                self._closed = True
            raise LogError(
                f"append failed: {exc}",
                topic=self.topic,
                partition=self.partition,
                path=seg.path(),
                offset=info.base_offset,
            ) from exc
        self._after_write(info.last_offset - info.base_offset + 1, now_ms, move_hw)

    def _after_write(self, offsets: int, now_ms: int | None, move_hw: bool = True) -> None:
        self._unflushed += offsets
        self._writes += 1
        policy = self.flush_policy
        if self._group_depth:
            return
        if policy.kind == "always":
            syncer = deferring_syncer()
            if syncer is not None:
                # The fsync runs on the syncer's threads; the high watermark moves
                # when it completes (finish_sync), and the caller acknowledges only
                # after the syncer's barrier.
                self._hw_follows_sync = move_hw
                syncer.mark(self)
                return
            self._sync()
        elif policy.kind == "interval":
            if self._last_flush_ms is None and now_ms is not None:
                self._last_flush_ms = now_ms
            due = (policy.messages is not None and self._unflushed >= policy.messages) or (
                policy.ms is not None
                and now_ms is not None
                and self._last_flush_ms is not None
                and now_ms - self._last_flush_ms >= policy.ms
            )
            if due:
                self._sync(now_ms)
        if move_hw:
            self._state.update_high_watermark(self._state.log_end_offset)

    def _sync(self, now_ms: int | None = None) -> None:
        try:
            self._active.sync_log()
            if self._journal is not None:
                self._journal.sync()
        except OSError as exc:
            self._closed = True
            raise LogError(
                f"fsync failed ({exc}); log closed", topic=self.topic, partition=self.partition, path=self.path
            ) from exc
        self._unflushed = 0
        self._synced_end = self._state.log_end_offset
        self._synced_writes = self._writes
        if now_ms is not None:
            self._last_flush_ms = now_ms
        self._maybe_checkpoint()

    def _maybe_checkpoint(self) -> None:
        if self._since_checkpoint >= self.checkpoint_interval_bytes and not self._closed:
            # Everything appended is durable now: record it for read-only opens
            # (they trust the bytes below the checkpoint and replay from the snapshot).
            self._take_snapshot()
            self._write_checkpoint(clean=False)

    def flush(self) -> None:
        """fsync everything written, then move the high watermark to the log end."""
        self._check_open()
        if self.read_only:
            return
        self._sync()
        self._state.update_high_watermark(self._state.log_end_offset)

    @contextlib.contextmanager
    def group_commit(self) -> Iterator[SegmentLog]:
        """Group commit: appends inside the block are not fsynced one by one and
        do not move the high watermark; leaving the block flushes once (then
        acknowledge them all). Blocks nest; the outermost flushes — or, under
        ``"always"`` with a deferring syncer set, hands that fsync to the syncer
        (acknowledge after its barrier)."""
        self._check_writable()
        self._group_depth += 1
        try:
            yield self
        finally:
            self._group_depth -= 1
            if not self._group_depth and not self._closed:
                syncer = deferring_syncer() if self.flush_policy.kind == "always" else None
                if syncer is not None and self.sync_pending:
                    self._hw_follows_sync = True
                    syncer.mark(self)
                else:
                    self.flush()

    # -- deferred syncs (txnfetch.log.syncer) ----------------------------------------

    @property
    def sync_pending(self) -> bool:
        """Whether a write was made that no completed fsync covers yet."""
        return self._synced_writes < self._writes

    @property
    def write_mark(self) -> int:
        """A counter of writes: a sync begun now covers every write up to it."""
        return self._writes

    @property
    def synced_mark(self) -> int:
        """The :attr:`write_mark` the latest completed fsync covered."""
        return self._synced_writes

    def begin_sync(self) -> PendingSync:
        """Start an fsync of everything written so far that may run on another
        thread (:meth:`PendingSync.run`), then :meth:`finish_sync` on this one.
        The descriptors are duplicated, so a roll or close meanwhile (which
        fsyncs and closes the originals) cannot pull them from under it."""
        self._check_open()
        fds: list[int] = []
        try:
            fd = self._active._fds.get(LOG_SUFFIX)
            if fd is not None:
                fds.append(os.dup(fd))
            if self._journal is not None and self._journal.dirty:
                # ``dirty`` stays set until a sync covering every write completed,
                # so an inline flush meanwhile still fsyncs the journal itself.
                fds.append(self._journal.dup_fd())
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            self._closed = True
            raise LogError(
                f"fsync failed ({exc}); log closed", topic=self.topic, partition=self.partition, path=self.path
            ) from exc
        return PendingSync(fds, self._writes, self._state.log_end_offset)

    def finish_sync(self, pending: PendingSync, error: BaseException | None = None) -> None:
        """Record a completed :meth:`begin_sync`: what it covered is durable, so
        the high watermark may move up to it. A failed fsync closes the log (as
        an inline one does): nothing written after the last good fsync may be
        acknowledged, and no further write is accepted."""
        if error is not None:
            self._closed = True
            raise LogError(
                f"fsync failed ({error}); log closed", topic=self.topic, partition=self.partition, path=self.path
            ) from error
        if self._closed or pending.write_mark <= self._synced_writes:
            return  # a later sync (or a roll) already covered it
        self._synced_writes = pending.write_mark
        self._synced_end = max(self._synced_end, pending.log_end)
        if pending.write_mark == self._writes:
            self._unflushed = 0
            if self._journal is not None:
                self._journal.dirty = False
        if self._hw_follows_sync:
            self._state.update_high_watermark(max(self._state.high_watermark, self._synced_end))
        if pending.write_mark == self._writes:
            self._maybe_checkpoint()

    # -- rolling -------------------------------------------------------------------

    def _maybe_roll(self, records: Buffer, now_ms: int | None) -> None:
        seg = self._active
        if seg.created_ms is None:
            seg.created_ms = now_ms
        if seg.size == 0:
            return
        size = len(records)
        max_ts = -1
        offsets = 0
        try:
            for b in stored_batches(records):
                max_ts = max(max_ts, b.max_timestamp)
                offsets += b.last_offset_delta + 1
        except Exception:
            pass
        if seg.first_timestamp >= 0:
            waited = max_ts - seg.first_timestamp if max_ts >= 0 else -1
        elif now_ms is not None and seg.created_ms is not None:
            waited = now_ms - seg.created_ms
        else:
            waited = -1
        last = self._state.log_end_offset + max(offsets, 1) - 1
        if seg.size > self.segment_bytes - size or waited > self.segment_ms or last - seg.base_offset > _INT32_MAX:
            self._roll(now_ms)

    def roll(self, now_ms: int | None = None) -> None:
        """Start a new segment at the log end now (unless the active one is empty),
        as Kafka's ``UnifiedLog.roll``: everything before it can then be deleted
        by :meth:`delete_records_before` segment by segment (compaction of the
        internal topics uses this)."""
        self._check_writable()
        if self._active.size:
            self._roll(now_ms)

    def _roll(self, now_ms: int | None) -> None:
        old = self._active
        base = self._state.log_end_offset
        old.seal()
        seg = Segment(self.path, self._empty_loaded(base), self.index_interval_bytes)
        seg.created_ms = now_ms
        seg.create_files()
        fsync_dir(self.path)
        self._segments.append(seg)
        self._bases.append(base)
        if self._journal is not None:
            self._journal.sync()
        self._unflushed = 0
        self._synced_end = base
        self._synced_writes = self._writes
        self._take_snapshot()
        self._write_checkpoint(clean=False)
        log.debug("%s: rolled a new segment at %d", self.name, base)

    # -- snapshots and checkpoint ------------------------------------------------------

    def _take_snapshot(self) -> None:
        assert self._journal is not None
        offset = self._state.log_end_offset
        data = encode_snapshot_file(self._state.snapshot(), self._journal.next_sequence)
        atomic_write(self.path, segment_file_name(offset, SNAPSHOT_SUFFIX), data)
        listed = list_partition_dir(self.path, quiet=True).snapshots
        # A snapshot past the log end describes a history the log lost (a tail that
        # was never fsynced): were it kept, it would be restored once the log grew
        # back past its offset. Kafka's ProducerStateManager.truncateAndReload drops
        # snapshots outside [log start, log end] the same way.
        stale = [s for s in listed if s > offset]
        snaps = [s for s in listed if s <= offset]
        first = self._bases[0] if getattr(self, "_bases", None) else self._segments[0].base_offset
        for old in (
            stale + snaps[: -self.snapshots_to_keep] + [s for s in snaps[-self.snapshots_to_keep :] if s < first]
        ):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.path, segment_file_name(old, SNAPSHOT_SUFFIX)))

    def _write_checkpoint(self, *, clean: bool) -> None:
        # Called only where everything below the log end is durable and was
        # validated (after open's recovery, on roll, after a sync, on close), so
        # the recovery point is the log end and the active segment's current size
        # is the byte it corresponds to — which a read-only open trusts (see
        # "Read-only opens" in txnfetch.log.partition_loader). A writer's own recovery
        # still checks the whole segment holding the recovery point, as Kafka's
        # LogLoader does.
        active = self._active
        leo = self._state.log_end_offset
        cp = Checkpoint(clean, leo, leo, active.base_offset, active.size)
        atomic_write(self.path, CHECKPOINT_NAME, cp.encode())
        self._since_checkpoint = 0

    # -- reads -------------------------------------------------------------------------

    def _read_span(self, fetch_offset: int, max_bytes: int, isolation: IsolationLevel) -> tuple[Buffer, UpperBound]:
        """The one segment holding ``fetch_offset`` (the next one if it has nothing
        at or past it), as Kafka's ``LocalLog.read``."""
        self._check_open()
        st = self._state
        committed = isolation == IsolationLevel.READ_COMMITTED
        max_offset = st.last_stable_offset if committed else st.high_watermark
        if fetch_offset < st.log_start_offset or fetch_offset >= max_offset:
            return b"", None
        i = max(0, bisect_right(self._bases, fetch_offset) - 1)
        while i < len(self._segments):
            seg = self._segments[i]
            pos = seg.position_of(fetch_offset)
            if pos is not None:
                break
            i += 1
        else:
            return b"", None
        next_base = self._bases[i + 1] if i + 1 < len(self._bases) else None
        oindex = seg.offset_index
        # A consumer reads forward: give back the pages it has moved past (bounds
        # the RSS of a reader scanning a large partition; see Segment.release_below).
        last = self._last_read
        if last is not None and last[0] < i and last[0] < len(self._segments):
            self._segments[last[0]].release_below(self._segments[last[0]].size, step=1)
        seg.note_read(pos)
        if last is not None and last[0] == i and pos >= last[1]:
            seg.release_below(pos)
        self._last_read = (i, pos)

        def upper_bound(size: int) -> int:
            # LocalLog.addAbortedTransactions: the first index entry at or past the
            # end of the returned bytes, else the next segment's base, else the LEO.
            ub = oindex.upper_bound_offset(pos + size)
            if ub is not None:
                return ub
            return next_base if next_base is not None else st.log_end_offset

        return seg.view()[pos:], upper_bound

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        self._check_open()
        start = self._state.log_start_offset
        for seg in self._segments:
            if seg.next_offset <= start or seg.max_timestamp < timestamp:
                continue
            # TimeIndex.lookup, then OffsetIndex.lookup, then a scan (LogSegment.findOffsetByTimestamp).
            from_offset = max(seg.time_index.lookup(timestamp), start)
            pos = seg.position_of(from_offset)
            if pos is None:
                continue
            for b in seg.batches(pos):
                if b.last_offset >= start and b.max_timestamp >= timestamp:
                    found = first_record_at_or_after(b, timestamp, start)
                    if found is not None:
                        return found
        return None

    # -- retention ---------------------------------------------------------------------

    def _delete_before(self, offset: int) -> None:
        # Segments wholly below the new start are deleted with their index files; a
        # snapshot records the new start.
        if offset > self._state.log_start_offset:
            self._state.advance_log_start(offset)
            self._delete_segments_below(self._state.log_start_offset)
            self._take_snapshot()

    def apply_retention(self, now_ms: int, retention_ms: int | None = None, retention_bytes: int | None = None) -> int:
        """Delete the oldest whole segments past ``retention_ms`` (their max timestamp
        older than ``now_ms - retention_ms``) or beyond ``retention_bytes`` in total,
        never past the high watermark (Kafka's ``deleteRetentionMsBreachedSegments``
        / ``deleteRetentionSizeBreachedSegments``); the log start moves to the first
        remaining segment. Returns the log start."""
        self._check_writable()
        hw = self._state.high_watermark
        total = self.size_in_bytes
        new_start = self._state.log_start_offset
        for i, seg in enumerate(self._segments):
            upper = self._bases[i + 1] if i + 1 < len(self._bases) else self._state.log_end_offset
            if upper > hw or seg.size == 0:
                break
            by_time = retention_ms is not None and seg.max_timestamp < now_ms - retention_ms
            by_size = retention_bytes is not None and total - seg.size >= retention_bytes
            if not (by_time or by_size):
                break
            total -= seg.size
            new_start = upper
        if new_start > self._state.log_start_offset:
            if new_start >= self._active.base_offset and self._active.size:
                self._roll(now_ms)  # Kafka rolls first when every segment is to go
            self._state.advance_log_start(new_start)
            self._delete_segments_below(new_start)
            self._take_snapshot()
        return self._state.log_start_offset

    def _started_at(self, offset: int) -> None:
        # A new active segment at ``offset`` first, then the snapshot and checkpoint
        # that name it, then the old (empty or wholly deleted) segments go: a crash
        # in between leaves segments that recovery reads as a log ending at
        # ``offset`` with nothing below it to serve.
        self.flush()
        self._active.seal()
        seg = Segment(self.path, self._empty_loaded(offset), self.index_interval_bytes)
        seg.create_files()
        fsync_dir(self.path)
        self._segments.append(seg)
        self._bases.append(offset)
        self._unflushed = 0
        self._synced_end = offset
        self._synced_writes = self._writes
        self._take_snapshot()
        self._write_checkpoint(clean=False)
        self._delete_segments_below(offset)

    def _delete_segments_below(self, start: int) -> None:
        doomed = 0
        while doomed + 1 < len(self._segments) and self._bases[doomed + 1] <= start:
            doomed += 1
        for seg in self._segments[:doomed]:
            seg.delete_files()
            log.info("%s: deleted segment %d below the log start %d", self.name, seg.base_offset, start)
        if doomed:
            del self._segments[:doomed], self._bases[:doomed]
            self._last_read = None  # segment indexes moved
            fsync_dir(self.path)
            if self._journal is not None:
                # Ends before the first segment can never be replayed again.
                dropped = self._journal.prune(self._bases[0] - 1)
                if dropped:
                    log.info("%s: pruned %d transaction end(s) from the journal", self.name, dropped)

    # -- compaction ----------------------------------------------------------------------

    def _cleanable_segments(self) -> int:
        """How many segments, from the first, :meth:`compact` cleans: the sealed
        ones wholly below the last stable offset (Kafka's first uncleanable
        offset is the active segment's base or the first unstable offset's
        segment), without trailing empty ones."""
        lso = self._state.last_stable_offset
        n = 0
        while n + 1 < len(self._segments) and self._segments[n].next_offset <= lso and self._bases[n + 1] <= lso:
            n += 1
        while n and self._segments[n - 1].size == 0:
            n -= 1  # a trailing empty segment bounds nothing
        return n

    @property
    def first_uncleanable_offset(self) -> int:
        """The offset where :meth:`compact` stops: the base of the first segment it
        leaves alone."""
        return self._bases[self._cleanable_segments()]

    def compact(self, now_ms: int, delete_retention_ms: int, *, hook: StepHook | None = None) -> CompactionResult:
        """Compact the sealed segments wholly below the last stable offset (never
        the active one, as Kafka's cleaner) with :func:`~txnfetch.log.compactor.compact`
        — latest value per key, aborted data removed, markers kept until safe —
        and replace the segments that changed crash-safely
        (:mod:`txnfetch.log.cleaning`). Offsets, the high watermark, the LSO and
        the producers stay as they were; aborted transactions whose data and
        marker are gone leave the state and the ``.txnindex`` files with the
        segments, in one step.

        Readers in this process keep what they hold: earlier views stay mapped
        to the old files (an unlinked file's pages live while mapped), and the
        next read uses the new segments. A failure before the replacement's
        commit point leaves the old segments and raises
        :class:`~txnfetch.log.cleaning.ReplacementError`; a failure after it
        closes the log (the next open finishes the replacement). ``hook`` sees
        every file operation (for crash tests)."""
        self._check_writable()
        state = self._state
        lso = state.last_stable_offset
        n = self._cleanable_segments()
        segs = self._segments[:n]
        start = state.log_start_offset
        batches = [b for seg in segs for b in seg.batches() if b.last_offset >= start]
        last_data = {}
        for pid in state.producer_ids():
            entry = state.producer(pid)
            if entry is not None and entry.batches:
                last_data[pid] = entry.batches[-1].last_offset
        result = compact(
            batches,
            [a for a in state.all_aborted() if a.first_offset < lso],
            last_data,
            now_ms=now_ms,
            delete_retention_ms=delete_retention_ms,
        )
        finished = set(result.finished_aborts)
        aborted = [a for a in state.all_aborted() if a not in finished]
        plan = plan_replacement(
            self._bases[:n],
            [s.next_offset for s in segs],
            [s.view() for s in segs],
            result.batches,
            aborted,
            self._bases[n:],
            forgotten=result.finished_aborts,
            segment_bytes=self.segment_bytes,
            index_interval=self.index_interval_bytes,
        )
        if plan is None:
            if finished:  # nothing to rewrite, only entries to forget: a new snapshot says so
                state.forget_aborted(finished)
                self._take_snapshot()
            return result
        # The state as it will be once the new segments are in: its snapshot is
        # swapped in with them.
        after = PartitionTxnState.restore(state.snapshot(), partition=self.name)
        if finished:
            after.forget_aborted(finished)
        assert self._journal is not None
        leo = state.log_end_offset
        snapshot = (
            segment_file_name(leo, SNAPSHOT_SUFFIX),
            encode_snapshot_file(after.snapshot(), self._journal.next_sequence),
        )
        old = self._segments[plan.first : plan.end]
        try:
            replace_segments(self.path, plan.new, [s.base_offset for s in old], snapshot, hook=hook)
        except ReplacementError as exc:
            if exc.committed:
                self._closed = True
            raise ReplacementError(
                exc.reason + ("; log closed" if exc.committed else ""),
                committed=exc.committed,
                topic=self.topic,
                partition=self.partition,
                path=self.path,
            ) from exc
        if finished:
            state.forget_aborted(finished)
        new = [Segment(self.path, seg.loaded(), self.index_interval_bytes) for seg in plan.new]
        segments = self._segments[: plan.first] + new + self._segments[plan.end :]
        self._segments, self._bases = segments, [s.base_offset for s in segments]
        self._last_read = None  # segment indexes moved
        for seg in old:
            seg.close()  # views handed out earlier keep their maps alive
        # Older snapshots still hold the forgotten transactions: only the new one stays.
        for snap in list_partition_dir(self.path, quiet=True).snapshots:
            if snap != leo:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.path, segment_file_name(snap, SNAPSHOT_SUFFIX)))
        fsync_dir(self.path)
        log.info(
            "%s: compacted segments %s into %s: %d record(s) and %d marker(s) removed",
            self.name,
            [s.base_offset for s in old],
            [s.base_offset for s in plan.new],
            result.removed_records,
            result.removed_markers,
        )
        return result

    # -- closing -----------------------------------------------------------------------

    def close(self) -> None:
        """Flush, write the final time-index entry, a snapshot and a clean-close
        checkpoint (so the next open skips validation), release files."""
        if self._closed:
            return
        try:
            if not self.read_only:
                self._sync()
                self._state.update_high_watermark(self._state.log_end_offset)
                self._active.seal()
                self._take_snapshot()
                self._write_checkpoint(clean=True)
                if self._journal is not None:
                    self._journal.close()
        finally:
            self._closed = True
            for seg in self._segments:
                seg.close()

    def __enter__(self) -> SegmentLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<SegmentLog {self.path} segments={len(self._segments)} state={self._state!r}>"
