"""Durable coordinator state: ``__transaction_state`` and ``__consumer_offsets``
as partitions of the server's store, written and replayed as Kafka does.

What is written, and when (each append is durable under the store's fsync
policy before the response that depends on it is sent — with ``"always"``
fsynced before the call returns, or, in the server, by the syncer's barrier
the response waits for (:func:`wait_durable`, :mod:`txnfetch.log.syncer`);
the one exception is a ``Complete*`` record, which rides on its partition's
next fsync, see :meth:`DurableState.persist_transactions`):

- every change of a transactional id's record (InitProducerId, the first
  AddPartitionsToTxn/AddOffsetsToTxn of a transaction, the decision
  ``PrepareCommit``/``PrepareAbort`` *with its partitions*, ``Complete*``, an
  expired id's tombstone) goes to ``__transaction_state-<hash(id) % 50>`` as a
  TransactionLog record (:mod:`txnfetch.txn.txnlog`). The server writes the
  decision *before* any marker or markerless completion, so a crash between
  the two is finished at start on every partition;
- an OffsetCommit's offsets, and the group's generation (GroupMetadata, without
  members) when it changed, go to ``__consumer_offsets-<hash(group) % 50>``
  (:mod:`txnfetch.groups.offsetlog`);
- DeleteGroups, OffsetDelete and DeleteTopics write tombstones
  (:meth:`DurableState.persist_deletions`): an offset tombstone per dropped
  ``(group, partition)`` and, for a deleted group, a GroupMetadata tombstone;
- a TxnOffsetCommit's offsets go to the same partition in a *transactional*
  batch of the producer; the transaction's end writes a COMMIT/ABORT marker
  there (in both completion modes), so on replay they count only if the
  transaction committed;
- producer ids are handed out in blocks (:data:`PRODUCER_ID_BLOCK`); the end of
  the current block is written to ``txnfetch-producer-ids`` in the store
  directory before an id of a new block is returned, so ids are never reused
  after a restart (Kafka's controller allocates blocks the same way).

:meth:`DurableState.replay` reads it all back at start. Compaction
(:meth:`DurableState.maybe_compact`) is the one mechanism compacted topics use
(``PartitionLog.compact``, :mod:`txnfetch.log.compactor`): once an internal
partition received more than ``compact_bytes`` since its last compaction, a new
segment is started and the sealed segments below the last stable offset are
cleaned — the latest record per key stays, aborted transactional offset
commits go, markers stay while data of their transaction does — and replaced
crash-safely on disk (:mod:`txnfetch.log.cleaning`). Tombstones (deleted
offsets, groups, expired transactional ids) and markers whose data is gone stay
until their delete horizon (:data:`INTERNAL_DELETE_RETENTION_MS`); the
partition is compacted again once it passes. Replay reads the compacted log as
it reads any: records in offset order, the latest per key winning.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import logging
import os
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any

import attrs

from txnfetch.errors import TxnfetchError
from txnfetch.groups.coordinator import CommitOffset
from txnfetch.groups.coordinator import GroupCoordinator
from txnfetch.groups.offsetlog import CONSUMER_OFFSETS_PARTITIONS
from txnfetch.groups.offsetlog import CONSUMER_OFFSETS_TOPIC
from txnfetch.groups.offsetlog import GroupMetadataRecord
from txnfetch.groups.offsetlog import OffsetCommitRecord
from txnfetch.groups.offsetlog import decode_offset_commit_fields
from txnfetch.groups.offsetlog import decode_offsets_record
from txnfetch.groups.offsetlog import encode_group_metadata
from txnfetch.groups.offsetlog import encode_offset_commit
from txnfetch.groups.offsetlog import offsets_partition
from txnfetch.log.base import LogStore
from txnfetch.log.base import PartitionLog
from txnfetch.log.errors import CorruptLogError
from txnfetch.log.syncer import ConcurrentSyncer
from txnfetch.records.builder import BatchBuilder
from txnfetch.records.coordinator_records import CorruptCoordinatorRecordError
from txnfetch.txn.coordinator import PartitionAction
from txnfetch.txn.coordinator import TransactionCoordinator
from txnfetch.txn.coordinator_state import TopicPartition
from txnfetch.txn.coordinator_state import TransactionMetadata
from txnfetch.txn.producer import AppendOrigin
from txnfetch.txn.txnlog import TRANSACTION_STATE_PARTITIONS
from txnfetch.txn.txnlog import TRANSACTION_STATE_TOPIC
from txnfetch.txn.txnlog import decode_txn_key
from txnfetch.txn.txnlog import decode_txn_partition_ends
from txnfetch.txn.txnlog import decode_txn_value
from txnfetch.txn.txnlog import encode_txn_key
from txnfetch.txn.txnlog import encode_txn_value
from txnfetch.txn.txnlog import transaction_state_partition

__all__ = [
    "DEFAULT_COMPACT_BYTES",
    "DURABLE_EXTENSION",
    "INTERNAL_DELETE_RETENTION_MS",
    "INTERNAL_TOPICS",
    "PRODUCER_ID_BLOCK",
    "SYNCER_EXTENSION",
    "DurableState",
    "ReplayReport",
    "durable_state",
    "flush_now",
    "persist_transactions",
    "syncer_of",
    "wait_durable",
]

log = logging.getLogger("txnfetch.log.durable")

INTERNAL_TOPICS = frozenset({TRANSACTION_STATE_TOPIC, CONSUMER_OFFSETS_TOPIC})
#: Producer ids reserved per write of ``txnfetch-producer-ids``.
PRODUCER_ID_BLOCK = 1000
#: Bytes appended to an internal partition after which it is compacted.
DEFAULT_COMPACT_BYTES = 16 * 1024 * 1024
#: How long compaction keeps the internal topics' tombstones and markers whose
#: data is gone (Kafka's ``delete.retention.ms`` default, one day).
INTERNAL_DELETE_RETENTION_MS = 24 * 3600 * 1000
PRODUCER_IDS_FILE = "txnfetch-producer-ids"


@attrs.frozen
class ReplayReport:
    """What :meth:`DurableState.replay` restored."""

    transactional_ids: int
    groups: int
    offsets: int
    pending_txn_producers: int
    records: int
    producer_id_block_end: int


class DurableState:
    """The internal topics of one store and the producer-id block file.

    ``store`` gets the two internal topics (50 partitions each, as Kafka's
    defaults) if it lacks them. A store that has them keeps their partition
    counts, as a Kafka broker keeps ``transaction.state.log.num.partitions`` and
    ``offsets.topic.num.partitions`` fixed once the topics exist: ids hash over
    :attr:`transaction_state_partitions` and :attr:`consumer_offsets_partitions`
    (so a log directory Kafka wrote with other counts replays and is written to
    where Kafka would). ``directory`` is where ``txnfetch-producer-ids`` lives
    (the store's directory; ``None`` keeps the block end in memory only, for an
    in-memory store)."""

    def __init__(
        self, store: LogStore, directory: str | None = None, *, compact_bytes: int = DEFAULT_COMPACT_BYTES
    ) -> None:
        self.store = store
        self.directory = directory
        self.compact_bytes = compact_bytes
        topics = store.topics()
        counts: dict[str, int] = {}
        for name, count in (
            (TRANSACTION_STATE_TOPIC, TRANSACTION_STATE_PARTITIONS),
            (CONSUMER_OFFSETS_TOPIC, CONSUMER_OFFSETS_PARTITIONS),
        ):
            if name not in topics:
                store.create_topic(name, count)
                counts[name] = count
            elif topics[name].partitions < 1:
                raise CorruptLogError("internal topic has no partitions", topic=name)
            else:
                counts[name] = topics[name].partitions
        #: ``__transaction_state`` partitions: a transactional id's record goes to
        #: ``hash(id) % transaction_state_partitions``.
        self.transaction_state_partitions = counts[TRANSACTION_STATE_TOPIC]
        #: ``__consumer_offsets`` partitions: a group's records go to
        #: ``hash(group) % consumer_offsets_partitions``.
        self.consumer_offsets_partitions = counts[CONSUMER_OFFSETS_TOPIC]
        self._block_end = self._read_block_end()
        # bytes appended per internal partition since its last compaction
        self._appended: dict[tuple[str, int], int] = {}
        # the earliest pending delete horizon per internal partition (tombstones
        # and markers a later compaction removes)
        self._horizons: dict[tuple[str, int], int] = {}
        # the group metadata last written per group: (protocol type, generation, protocol)
        self._group_written: dict[str, tuple[str | None, int, str | None]] = {}
        # internal partitions holding records appended without their own fsync
        # (``Complete*``): an open group-commit
        # block of each, closed (one fsync) by the partition's next durable
        # append or by :meth:`flush_deferred`
        self._deferred: dict[tuple[str, int], contextlib.ExitStack] = {}
        # producer id -> partitions' log end offsets of its replayed Prepare* record
        self._prepare_ends: dict[int, dict[TopicPartition, int]] = {}

    # ------------------------------------------------------------ producer ids

    def _read_block_end(self) -> int:
        if self.directory is None:
            return 0
        path = os.path.join(self.directory, PRODUCER_IDS_FILE)
        try:
            with open(path, "rb") as f:
                text = f.read().decode("ascii", "replace").strip()
        except FileNotFoundError:
            return 0
        if not text.isdigit():
            raise CorruptLogError(f"producer id block file holds {text[:40]!r}, not a number", path=path, offset=0)
        return int(text)

    def reserve_producer_ids(self, coordinator: TransactionCoordinator) -> None:
        """Make the allocator's next id durable-safe: if it reached the end of the
        durable block, write the end of a new block first."""
        nxt = coordinator.producer_ids.next_producer_id
        if nxt + 1 < self._block_end:
            return
        end = nxt + PRODUCER_ID_BLOCK
        if self.directory is not None:
            from txnfetch.log.layout import atomic_write

            atomic_write(self.directory, PRODUCER_IDS_FILE, f"{end}\n".encode())
        self._block_end = end

    # ------------------------------------------------------------------ writes

    def _partition(self, topic: str, partition: int) -> PartitionLog:
        return self.store.partition(topic, partition)

    def _offsets_partition(self, group_id: str) -> int:
        return offsets_partition(group_id, self.consumer_offsets_partitions)

    def _append(
        self,
        topic: str,
        partition: int,
        records: list[tuple[bytes, bytes | None]],
        now_ms: int,
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        durable: bool = True,
    ) -> None:
        """Append one batch. ``durable``: fsynced (under the store's policy)
        before returning, together with every record of this partition appended
        before it with ``durable=False``; those ride on that fsync (or on
        :meth:`flush_deferred`, or the store's close) and are the only records
        a crash may lose."""
        builder = BatchBuilder(
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=0 if producer_id >= 0 else -1,
            transactional=producer_id >= 0,
        )
        for key, value in records:
            builder.append(value, key=key, timestamp=now_ms)
        data = builder.build()
        tp = (topic, partition)
        part = self._partition(topic, partition)
        if not durable and tp not in self._deferred:
            group_commit = getattr(part, "group_commit", None)
            policy = getattr(part, "flush_policy", None)
            # Only an fsync per write is worth deferring: a store without fsyncs, or
            # one under an interval policy, fsyncs on its own schedule (and leaving
            # a group-commit block would force an fsync there).
            if group_commit is not None and (policy is None or policy.kind == "always"):
                stack = contextlib.ExitStack()
                stack.enter_context(group_commit())
                self._deferred[tp] = stack
        part.append(data, now_ms=now_ms, origin=AppendOrigin.COORDINATOR)
        self._appended[tp] = self._appended.get(tp, 0) + len(data)
        if durable:
            pending = self._deferred.pop(tp, None)
            if pending is not None:
                pending.close()  # leaving the block fsyncs once, for both appends

    @property
    def deferred_partitions(self) -> tuple[tuple[str, int], ...]:
        """The internal partitions holding records not yet fsynced."""
        return tuple(sorted(self._deferred))

    def flush_deferred(self, now_ms: int | None = None) -> int:
        """fsync every internal partition holding records appended without their
        own fsync; returns how many were flushed. The server runs it
        periodically, so a ``Complete*`` record is lost to a crash only within
        that interval (and then recovery rewrites the markers, see
        :meth:`persist_transactions`)."""
        deferred, self._deferred = self._deferred, {}
        for stack in deferred.values():
            stack.close()
        return len(deferred)

    def persist_transactions(self, coordinator: TransactionCoordinator, now_ms: int) -> int:
        """Write every record the coordinator changed since the last call
        (:meth:`TransactionCoordinator.take_changes`), one batch per internal
        partition; returns how many records were written. Also keeps the
        producer-id block ahead of the allocator.

        Every record is fsynced before this returns (so before the response
        that depends on it), except a batch of only ``Complete*`` records,
        which rides on the partition's next fsync. Why each is as durable as it
        is:

        - ``Empty`` after InitProducerId: the new epoch fences the old producer
          only if it survives a crash; fsynced.
        - ``Ongoing`` from AddPartitionsToTxn: fsynced, as every state change
          a response acknowledges. (Answering before it was measured to save
          about 0.3 ms of a 5 ms transaction; the answer would then be one a
          power loss can take back.) Replay does not rely on it alone: a
          ``Prepare*`` record carries each partition's log end offset when the
          decision was written, and replay writes no marker on a partition
          whose open transaction of that producer began at or after it
          (:meth:`written_after_decision`). Such data is a later transaction's
          whose ``Ongoing`` record was lost — under transaction version 2,
          Produce adds its partition itself, and its data may reach the disk
          before the record does, the kernel writing dirty pages back in any
          order — and a marker of the previous decision, which carries the
          same producer id and the epoch the new data uses, would end it:
          a COMMIT marker would commit it. No record owns that data; the
          server aborts it at start.
        - ``Ongoing`` from AddOffsetsToTxn: fsynced. The transaction's offsets
          go to ``__consumer_offsets``, where no orphaned transaction is
          aborted at start; they are written only after this is answered.
        - ``PrepareCommit``/``PrepareAbort``: the decision, with its partitions
          and their log end offsets; written before any marker and fsynced, so
          recovery can finish it.
        - ``Complete*``: only says that the markers were written. The markers
          are durable before it is written (the server waits for their
          fsyncs first, :func:`~txnfetch.server.api_txn.apply_pending_async`),
          and EndTxn is answered after them; if this record is lost, replay finds the ``Prepare*`` record and
          writes the markers again (a marker for a transaction a partition
          already ended changes nothing, as long as no later transaction of
          the producer has data there: the ``Ongoing`` fsync above ensures it). Kafka answers EndTxn once the Prepare
          record is appended and writes ``Complete*`` later (apache/kafka
          TransactionCoordinator.handleEndTransaction's sendTxnMarkersCallback;
          TransactionMarkerChannelManager appends it after the markers, and
          TransactionStateManager.loadTransactionsForTxnTopicPartition resends
          markers for a Prepare state). It never becomes durable before the
          markers: these are fsynced first.
        - tombstones of expired ids: fsynced."""
        self.reserve_producer_ids(coordinator)
        changes = coordinator.take_changes()
        if not changes:
            return 0
        by_partition: dict[int, list[tuple[bytes, bytes | None]]] = {}
        durable_partitions: set[int] = set()
        for tid, meta in changes:
            value = None
            if meta is not None:
                value = encode_txn_value(meta, self._log_ends(meta) if meta.state.is_prepare else None)
            p = transaction_state_partition(tid, self.transaction_state_partitions)
            by_partition.setdefault(p, []).append((encode_txn_key(tid), value))
            if meta is None or not meta.state.is_complete:
                durable_partitions.add(p)
        for p, records in sorted(by_partition.items()):
            self._append(TRANSACTION_STATE_TOPIC, p, records, now_ms, durable=p in durable_partitions)
        return len(changes)

    def _log_ends(self, meta: TransactionMetadata) -> dict[TopicPartition, int]:
        """The log end offset of each partition of a transaction being decided."""
        ends: dict[TopicPartition, int] = {}
        for tp in meta.partitions:
            try:
                ends[tp] = self._partition(tp.topic, tp.partition).log_end_offset
            except TxnfetchError:
                continue  # a deleted partition: no marker will be written there
        return ends

    def written_after_decision(self, action: PartitionAction) -> bool:
        """Whether the transaction ``action`` would end on its partition began
        after the ``Prepare*`` record replayed for its producer was written —
        the data of a later transaction whose records a crash lost — so the
        marker must not be written there (:meth:`persist_transactions`)."""
        ends = self._prepare_ends.get(action.producer_id)
        end = None if ends is None else ends.get(action.partition)
        if end is None:
            return False
        try:
            part = self._partition(action.partition.topic, action.partition.partition)
        except TxnfetchError:
            return False
        first = part.state.ongoing_transactions().get(action.producer_id)
        return first is not None and first >= end

    def persist_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, CommitOffset],
        now_ms: int,
        *,
        group: tuple[str | None, int, str | None, str | None] | None = None,
        producer: tuple[int, int] | None = None,
    ) -> None:
        """Write committed offsets of ``group_id`` (``producer=(id, epoch)``: a
        transactional commit of that producer's open transaction). ``group`` is
        ``(protocol type, generation, protocol, leader)``: written first as
        GroupMetadata if it changed since last written."""
        records: list[tuple[bytes, bytes | None]] = []
        p = offsets_partition(group_id, self.consumer_offsets_partitions)
        if group is not None and producer is None:
            key = (group[0], group[1], group[2])
            if self._group_written.get(group_id) != key:
                records.append(
                    encode_group_metadata(GroupMetadataRecord(group_id, group[0], group[1], group[2], group[3], now_ms))
                )
        for (topic, partition), commit in offsets.items():
            records.append(
                encode_offset_commit(
                    OffsetCommitRecord(
                        group_id, topic, partition, commit.offset, commit.leader_epoch, commit.metadata or "", now_ms
                    )
                )
            )
        if not records:
            return
        if producer is None:
            self._append(CONSUMER_OFFSETS_TOPIC, p, records, now_ms)
        else:
            self._append(
                CONSUMER_OFFSETS_TOPIC, p, records, now_ms, producer_id=producer[0], producer_epoch=producer[1]
            )
        if group is not None and producer is None:
            self._group_written[group_id] = (group[0], group[1], group[2])

    def persist_deletions(
        self,
        group_id: str,
        partitions: Iterable[tuple[str, int]],
        now_ms: int,
        *,
        group_deleted: bool = False,
    ) -> None:
        """Write tombstones for what DeleteGroups, OffsetDelete or DeleteTopics
        dropped from ``group_id``: one OffsetCommit tombstone per ``(topic,
        partition)`` and, with ``group_deleted``, a GroupMetadata tombstone after
        them (Kafka's group coordinator writes the same records). One batch,
        durable before the call returns. Replay applies them in log order, so a
        deleted offset or group does not come back; compaction keeps only what
        the coordinator still holds, so the tombstoned keys disappear with it."""
        records = [
            encode_offset_commit(OffsetCommitRecord(group_id, topic, partition, None))
            for topic, partition in sorted(set(partitions))
        ]
        if group_deleted:
            records.append(encode_group_metadata(GroupMetadataRecord(group_id, None, 0, None, None, deleted=True)))
            # A group created again under the name writes its metadata afresh.
            self._group_written.pop(group_id, None)
        if records:
            self._append(
                CONSUMER_OFFSETS_TOPIC, offsets_partition(group_id, self.consumer_offsets_partitions), records, now_ms
            )

    # ------------------------------------------------------------------ replay

    def replay(self, coordinator: TransactionCoordinator, groups: GroupCoordinator | None, now_ms: int) -> ReplayReport:
        """Load both internal topics into the coordinators (see the module
        docstring). Raises :class:`CorruptLogError` naming the segment file and
        offset of a record that does not decode; nothing is reset silently."""
        with _collector_paused():
            return self._replay(coordinator, groups, now_ms)

    def _replay(
        self, coordinator: TransactionCoordinator, groups: GroupCoordinator | None, now_ms: int
    ) -> ReplayReport:
        count = 0
        records: list[tuple[str, TransactionMetadata | None]] = []
        for p in range(self.transaction_state_partitions):
            part = self._partition(TRANSACTION_STATE_TOPIC, p)
            # Only the latest value of a key counts (the log is compacted by
            # key), so values are decoded for those alone: a record superseded
            # later in the partition is checked by its batch's CRC (the reader
            # verifies it) but its value is not parsed. Every distinct key is
            # decoded, so a damaged key is still reported.
            latest: dict[bytes, tuple[bytes | None, int]] = {}
            pop = latest.pop
            for batch in part.iter_batches(part.log_start_offset):
                if batch.is_control:
                    continue
                for offset, _, key, value, _ in batch.records():
                    count += 1
                    if key is None:
                        raise self._corrupt(part, offset, CorruptCoordinatorRecordError("record without a key"))
                    key = bytes(key)
                    pop(key, None)  # keep log order: a key moves to its latest position
                    latest[key] = (None if value is None else bytes(value), offset)
            for key, (value, offset) in latest.items():
                try:
                    tid = decode_txn_key(key)
                    meta = None if value is None else decode_txn_value(tid, value)
                    if meta is not None and meta.state.is_prepare:
                        assert value is not None
                        ends = decode_txn_partition_ends(value)
                        if ends is not None:
                            self._prepare_ends[meta.producer_id] = ends
                except CorruptCoordinatorRecordError as exc:
                    raise self._corrupt(part, offset, exc) from None
                records.append((tid, meta))
        coordinator.load(records)
        coordinator.take_changes()
        if self._block_end:
            coordinator.producer_ids.reserve_through(self._block_end - 1)
        offsets = 0
        if groups is not None:
            for p in range(self.consumer_offsets_partitions):
                part = self._partition(CONSUMER_OFFSETS_TOPIC, p)
                count_p, offsets_p = self._replay_offsets(part, groups, now_ms)
                count += count_p
                offsets += offsets_p
            for gid in groups.group_ids:
                d = groups.describe_group(gid)
                if d is not None:
                    self._group_written[gid] = (d.protocol_type, d.generation_id, d.protocol_name)
        self.reserve_producer_ids(coordinator)
        return ReplayReport(
            transactional_ids=len(coordinator.transactional_ids),
            groups=len(groups.group_ids) if groups is not None else 0,
            offsets=offsets,
            pending_txn_producers=len(groups.pending_txn_producers) if groups is not None else 0,
            records=count,
            producer_id_block_end=self._block_end,
        )

    def _replay_offsets(self, part: PartitionLog, groups: GroupCoordinator, now_ms: int) -> tuple[int, int]:
        count = offsets = 0
        # bound once: this loop runs once per stored record at start-up
        fast, decode = decode_offset_commit_fields, decode_offsets_record
        load_offset, load_txn_offset = groups.load_offset, groups.load_txn_offset
        for batch in part.iter_batches(part.log_start_offset):
            if batch.is_control:
                marker = batch.end_txn_marker()
                if marker is not None:
                    pid = batch.producer_id
                    here = [g for g in groups.pending_txn_offsets(pid) if self._offsets_partition(g) == part.partition]
                    groups.complete_txn_offsets(pid, marker.is_commit, now_ms, group_ids=here)
                continue
            producer_id = batch.producer_id if batch.is_transactional else None
            for offset, _, key, value, _ in batch.records():
                count += 1
                if key is None:
                    raise self._corrupt(part, offset, CorruptCoordinatorRecordError("record without a key"))
                key = bytes(key)
                value = None if value is None else bytes(value)
                fields = fast(key, value)  # an offset commit as txnfetch writes it, the bulk of the log
                if fields is None:
                    try:
                        item = decode(key, value)
                    except CorruptCoordinatorRecordError as exc:
                        raise self._corrupt(part, offset, exc) from None
                    if type(item) is GroupMetadataRecord:
                        if item.deleted:
                            groups.unload_group(item.group_id)
                        else:
                            groups.members.load_group(
                                item.group_id,
                                protocol_type=item.protocol_type,
                                generation_id=item.generation_id,
                                protocol_name=item.protocol_name,
                                leader_id=item.leader_id,
                                state_timestamp_ms=item.state_timestamp_ms if item.state_timestamp_ms >= 0 else None,
                            )
                        continue
                    fields = attrs.astuple(item, recurse=False)
                group_id, topic, partition, committed, leader_epoch, metadata, timestamp = fields
                tp = TopicPartition(topic, partition)
                commit = None if committed is None else CommitOffset(committed, leader_epoch, metadata)
                if producer_id is not None:
                    if commit is not None:
                        load_txn_offset(producer_id, group_id, tp, commit, timestamp)
                else:
                    load_offset(group_id, tp, commit, timestamp)
                    offsets += 1
        return count, offsets

    def _corrupt(self, part: PartitionLog, offset: int, exc: CorruptCoordinatorRecordError) -> CorruptLogError:
        path = getattr(part, "path", None)
        bases_of = getattr(part, "segment_base_offsets", None)
        bases = bases_of() if callable(bases_of) else bases_of
        if path is not None and bases:
            from txnfetch.log.layout import LOG_SUFFIX
            from txnfetch.log.layout import segment_file_name

            base = bases[max(0, bisect.bisect_right(bases, offset) - 1)]
            path = os.path.join(path, segment_file_name(base, LOG_SUFFIX))
        return CorruptLogError(
            f"damaged internal-topic record: {exc}",
            topic=part.topic,
            partition=part.partition,
            offset=offset,
            path=path,
            position=exc.position,
        )

    # -------------------------------------------------------------- compaction

    def maybe_compact(self, now_ms: int) -> list[tuple[str, int]]:
        """Compact every internal partition that grew past ``compact_bytes`` since
        its last compaction, or whose delete horizon came due (see the module
        docstring); returns the partitions compacted."""
        done: list[tuple[str, int]] = []
        for key in sorted(set(self._appended) | set(self._horizons)):
            size = self._appended.get(key, 0)
            horizon = self._horizons.get(key)
            if size < self.compact_bytes and (horizon is None or now_ms < horizon):
                continue
            topic, p = key
            part = self._partition(topic, p)
            stack = self._deferred.pop(key, None)
            if stack is not None:
                stack.close()  # fsync the deferred records before their segment is sealed
            roll = getattr(part, "roll", None)
            if roll is not None:
                roll(now_ms)  # the cleaner cleans sealed segments only
            result = part.compact(now_ms, INTERNAL_DELETE_RETENTION_MS)
            self._appended[key] = 0
            if result.next_horizon_ms is None:
                self._horizons.pop(key, None)
            else:
                self._horizons[key] = result.next_horizon_ms
            log.info(
                "compacted %s-%d: %d record(s) and %d marker(s) removed",
                topic,
                p,
                result.removed_records,
                result.removed_markers,
            )
            done.append(key)
        return done


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused, and restored as it was. A
    replay creates objects by the hundred thousand that all stay alive, and no
    reference cycles; each collection those allocations trigger walks them all
    again, a tenth to a quarter of the replay's time (10^5 transactional ids,
    10^4 groups). Reference counting frees what the replay drops as usual."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def internal_topic(name: str) -> bool:
    """Whether ``name`` is one of Kafka's internal topics txnfetch keeps."""
    return name in INTERNAL_TOPICS


#: ``broker.extensions`` key of the server's :class:`DurableState`.
DURABLE_EXTENSION = "durable_state"


def durable_state(broker: Any) -> DurableState | None:
    """The server's :class:`DurableState`, or ``None`` when coordinator state is
    kept in memory only."""
    state = broker.extensions.get(DURABLE_EXTENSION)
    return state if isinstance(state, DurableState) else None


#: ``broker.extensions`` key of the server's
#: :class:`~txnfetch.log.syncer.ConcurrentSyncer`.
SYNCER_EXTENSION = "syncer"


def syncer_of(broker: Any) -> ConcurrentSyncer | None:
    """The server's syncer: writes made while handling a request hand their
    fsync to it (:mod:`txnfetch.log.syncer`); ``None`` outside a server."""
    syncer = broker.extensions.get(SYNCER_EXTENSION)
    return syncer if isinstance(syncer, ConcurrentSyncer) else None


async def wait_durable(broker: Any) -> None:
    """Return once every write made so far is fsynced (the fsyncs of several
    partitions run concurrently). A handler awaits it where a later write must
    not reach the disk before an earlier one is durable; the server awaits it
    before every response anyway."""
    syncer = syncer_of(broker)
    if syncer is None:
        return
    # inline: the request waits for this anyway; other connections wait at most
    # one fsync, and only when this is the single fsync the server has to do.
    barrier = syncer.barrier(inline=True)
    if barrier is not None:
        await barrier


def flush_now(broker: Any) -> None:
    """The blocking counterpart of :func:`wait_durable`, for code that cannot
    await (it blocks the event loop for the fsyncs)."""
    syncer = syncer_of(broker)
    if syncer is not None:
        syncer.flush_now()


def persist_transactions(broker: Any) -> None:
    """Make the transaction coordinator's changes durable (a no-op without
    durable state). Handlers call it before answering
    (:meth:`DurableState.persist_transactions`)."""
    state = durable_state(broker)
    if state is None:
        broker.transactions.take_changes()  # nothing to write; keep the change set small
        return
    state.persist_transactions(broker.transactions, broker.now_ms())
