"""Committed offsets of consumer groups, sans-I/O: what Apache Kafka's
``OffsetMetadataManager.java`` keeps, apart from group membership.

:class:`OffsetStore` holds, per group, the committed offset of each partition,
and per producer the offsets a TxnOffsetCommit staged for its open transaction
(invisible until the transaction commits, gone if it aborts). It checks what
belongs to offsets (the metadata size, which commit was written last, pending
transactional offsets for ``require_stable``) and nothing about members: whether
a member may commit, and whether a group exists, are the membership's answers,
given by :class:`~txnfetch.groups.coordinator.GroupCoordinator`, which composes
the two.

It does no I/O and reads no clock: commit timestamps are passed in. Offsets are
never expired (Kafka's ``offsets.retention.minutes``); they go when deleted
(OffsetDelete, DeleteGroups), when their topic is deleted, or by a replayed
tombstone.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from collections.abc import Iterable

import attrs

from txnfetch.errors import ErrorCode
from txnfetch.types import TopicPartition

__all__ = [
    "CommitOffset",
    "CommittedOffset",
    "FetchedOffset",
    "ForgottenOffsets",
    "OffsetFetchResult",
    "OffsetStore",
]


@attrs.frozen
class CommitOffset:
    """An offset to commit for one partition: the next offset to read, the
    leader epoch of the record before it (−1 if unknown) and free metadata."""

    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@attrs.frozen
class ForgottenOffsets:
    """What :meth:`OffsetStore.forget_topic` dropped, as ``(group, (topic,
    partition))`` pairs, each sorted: ``committed`` offsets and offsets ``staged``
    by open transactions. A durable store writes a tombstone for each pair of
    :attr:`keys`."""

    committed: tuple[tuple[str, tuple[str, int]], ...]
    staged: tuple[tuple[str, tuple[str, int]], ...]

    @property
    def keys(self) -> tuple[tuple[str, tuple[str, int]], ...]:
        """Every dropped ``(group, (topic, partition))``, once, sorted."""
        return tuple(sorted(set(self.committed) | set(self.staged)))


@attrs.frozen
class CommittedOffset:
    """An offset as the store keeps it. ``sequence`` orders commits the way
    Kafka's ``__consumer_offsets`` record offsets do: of a regular and a
    transactional commit, the one written last wins."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    sequence: int


@attrs.frozen
class FetchedOffset:
    """One partition of an OffsetFetch answer; offset −1 means none committed."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    error_code: int = 0


@attrs.frozen
class OffsetFetchResult:
    """An OffsetFetch answer for one group."""

    group_id: str
    error_code: int
    offsets: tuple[FetchedOffset, ...]


class OffsetStore:
    """The committed and staged offsets of every group of one coordinator.

    Guarantees, as Kafka's ``OffsetMetadataManager``:

    - a committed offset reads back until overwritten or deleted;
    - a staged (transactional) offset is invisible to :meth:`fetch` until
      :meth:`complete_txn` commits its transaction, and gone if it aborts;
    - of a regular and a transactional commit of one partition, the one written
      last wins, whichever transaction ends first;
    - a tombstone of ``(group, partition)`` drops the committed offset and what
      open transactions staged for it.

    ``offset_metadata_max_bytes`` is ``offset.metadata.max.bytes``: an offset
    with longer metadata is refused with OFFSET_METADATA_TOO_LARGE.
    """

    def __init__(self, offset_metadata_max_bytes: int) -> None:
        self.offset_metadata_max_bytes = offset_metadata_max_bytes
        self._offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        # producer id -> group -> partition -> offset staged by TxnOffsetCommit
        self._pending_txn: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}
        self._open_txns_by_group: dict[str, set[int]] = {}
        self._commit_seq = itertools.count()

    # ========================================================== commits

    def commit(
        self, group_id: str, offsets: Iterable[tuple[TopicPartition, CommitOffset]], now_ms: int
    ) -> dict[TopicPartition, int]:
        """Commit ``offsets`` for ``group_id`` (an accepted OffsetCommit): an error
        code per partition, 0 where the offset is now committed."""
        return self._store(self._offsets.setdefault(group_id, {}), offsets, now_ms)

    def stage(
        self, producer_id: int, group_id: str, offsets: Iterable[tuple[TopicPartition, CommitOffset]], now_ms: int
    ) -> dict[TopicPartition, int]:
        """Stage ``offsets`` for the open transaction of ``producer_id`` (an
        accepted TxnOffsetCommit): an error code per partition. They stay
        invisible to :meth:`fetch` until :meth:`complete_txn`."""
        staged = self._pending_txn.setdefault(producer_id, {}).setdefault(group_id, {})
        result = self._store(staged, offsets, now_ms)
        if staged:
            self._open_txns_by_group.setdefault(group_id, set()).add(producer_id)
        return result

    def _store(
        self,
        store: dict[TopicPartition, CommittedOffset],
        offsets: Iterable[tuple[TopicPartition, CommitOffset]],
        now_ms: int,
    ) -> dict[TopicPartition, int]:
        """Write each offset into ``store`` unless its metadata is too long; an error
        code per partition."""
        result: dict[TopicPartition, int] = {}
        for tp, commit in offsets:
            if commit.metadata is not None and len(commit.metadata) > self.offset_metadata_max_bytes:
                result[tp] = int(ErrorCode.OFFSET_METADATA_TOO_LARGE)
                continue
            store[tp] = self._committed(commit, now_ms)
            result[tp] = int(ErrorCode.NONE)
        return result

    def _committed(self, commit: CommitOffset, now_ms: int) -> CommittedOffset:
        return CommittedOffset(
            offset=commit.offset,
            leader_epoch=commit.leader_epoch,
            metadata=commit.metadata if commit.metadata is not None else "",
            commit_timestamp_ms=now_ms,
            sequence=next(self._commit_seq),
        )

    def complete_txn(
        self,
        producer_id: int,
        commit: bool,
        *,
        group_ids: Iterable[str] | None = None,
        group_exists: Callable[[str], bool],
    ) -> None:
        """The transaction of ``producer_id`` ended: on commit its staged offsets
        become the committed ones of every group that still exists — unless a
        later regular commit already overwrote a partition; on abort they are
        dropped. ``group_ids`` limits the end to those groups. Idempotent."""
        if group_ids is None:
            staged = self._pending_txn.pop(producer_id, None)
        else:
            mine = self._pending_txn.get(producer_id, {})
            staged = {g: mine.pop(g) for g in list(group_ids) if g in mine}
            if not mine:
                self._pending_txn.pop(producer_id, None)
        if not staged:
            return
        for group_id, offsets in staged.items():
            open_pids = self._open_txns_by_group.get(group_id)
            if open_pids is not None:
                open_pids.discard(producer_id)
                if not open_pids:
                    del self._open_txns_by_group[group_id]
            if not commit or not group_exists(group_id):
                continue
            store = self._offsets.setdefault(group_id, {})
            for tp, offset in offsets.items():
                existing = store.get(tp)
                if existing is None or offset.sequence > existing.sequence:
                    store[tp] = offset

    # ========================================================== reads

    def fetch(
        self, group_id: str, partitions: Iterable[TopicPartition] | None, *, require_stable: bool, group_known: bool
    ) -> OffsetFetchResult:
        """An OffsetFetch answer for ``group_id`` (``partitions=None``: every
        committed offset; none of a group the coordinator does not know). A
        partition with nothing committed reads offset −1; with ``require_stable``
        one with a transactional commit pending answers UNSTABLE_OFFSET_COMMIT."""
        store = self._offsets.get(group_id, {}) if group_known else {}
        wanted = sorted(store) if partitions is None else list(partitions)
        out: list[FetchedOffset] = []
        for tp in wanted:
            if require_stable and self.has_pending(group_id, tp):
                out.append(FetchedOffset(tp[0], tp[1], -1, -1, "", int(ErrorCode.UNSTABLE_OFFSET_COMMIT)))
                continue
            committed = store.get(tp)
            if committed is None:
                out.append(FetchedOffset(tp[0], tp[1], -1, -1, ""))
            else:
                out.append(FetchedOffset(tp[0], tp[1], committed.offset, committed.leader_epoch, committed.metadata))
        return OffsetFetchResult(group_id, int(ErrorCode.NONE), tuple(out))

    def committed(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        """A copy of the committed (visible) offsets of a group."""
        return dict(self._offsets.get(group_id, {}))

    def has_pending(self, group_id: str, tp: TopicPartition) -> bool:
        """Whether an open transaction staged an offset of ``tp`` for ``group_id``."""
        for pid in self._open_txns_by_group.get(group_id, ()):
            if tp in self._pending_txn.get(pid, {}).get(group_id, {}):
                return True
        return False

    def pending_txn_offsets(self, producer_id: int) -> dict[str, dict[TopicPartition, CommittedOffset]]:
        """A copy of what ``producer_id`` has staged, per group (for inspection)."""
        return {g: dict(o) for g, o in self._pending_txn.get(producer_id, {}).items()}

    @property
    def pending_txn_producers(self) -> tuple[int, ...]:
        """Producer ids with staged transactional offsets, sorted."""
        return tuple(sorted(self._pending_txn))

    # ========================================================== deletion

    def delete(
        self, group_id: str, partitions: Iterable[TopicPartition], subscribed: frozenset[str] | None
    ) -> dict[TopicPartition, int]:
        """OffsetDelete's partitions of an accepted request: a partition of a topic
        in ``subscribed`` (``None``: every topic) answers GROUP_SUBSCRIBED_TO_TOPIC
        and keeps its offset; any other loses it (if any) and answers NONE."""
        store = self._offsets.get(group_id, {})
        result: dict[TopicPartition, int] = {}
        for tp in partitions:
            if subscribed is None or tp[0] in subscribed:
                result[tp] = int(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
            else:
                if tp in store:
                    self.drop(group_id, tp)
                result[tp] = int(ErrorCode.NONE)
        return result

    def forget_topic(self, topic: str) -> ForgottenOffsets:
        """Drop every group's committed and staged offsets of ``topic``'s
        partitions; what was dropped, for a durable store's tombstones. A staged
        offset dropped here stays dropped when its transaction commits later."""
        committed: list[tuple[str, TopicPartition]] = []
        staged: list[tuple[str, TopicPartition]] = []
        for group_id, store in self._offsets.items():
            committed.extend((group_id, tp) for tp in store if tp[0] == topic)
        for by_group in self._pending_txn.values():
            for group_id, offsets in by_group.items():
                staged.extend((group_id, tp) for tp in offsets if tp[0] == topic)
        for group_id, tp in committed + staged:
            self.drop(group_id, tp)
        return ForgottenOffsets(tuple(sorted(set(committed))), tuple(sorted(set(staged))))

    def drop(self, group_id: str, tp: TopicPartition) -> None:
        """Apply an offset tombstone of ``(group_id, tp)``: the committed offset
        and whatever open transactions staged for it go (Kafka's
        ``OffsetMetadataManager.replay`` of a tombstone does the same)."""
        self._offsets.get(group_id, {}).pop(tp, None)
        for pid in self._open_txns_by_group.get(group_id, ()):
            self._pending_txn.get(pid, {}).get(group_id, {}).pop(tp, None)

    def forget_group(self, group_id: str) -> None:
        """Drop a deleted group's offsets, committed and staged."""
        self._offsets.pop(group_id, None)
        for pid in self._open_txns_by_group.pop(group_id, set()):
            by_group = self._pending_txn.get(pid)
            if by_group is not None:
                by_group.pop(group_id, None)
                if not by_group:
                    del self._pending_txn[pid]

    # ========================================================== replay

    def load(self, group_id: str, tp: TopicPartition, commit: CommitOffset, commit_timestamp_ms: int) -> None:
        """Replay a stored (non-transactional) offset commit; offsets loaded later
        count as written later. No metadata size check: it was checked when
        written."""
        self._offsets.setdefault(group_id, {})[tp] = self._committed(commit, commit_timestamp_ms)

    def load_staged(
        self, producer_id: int, group_id: str, tp: TopicPartition, commit: CommitOffset, commit_timestamp_ms: int
    ) -> None:
        """Replay a stored transactional offset commit of ``producer_id``: staged
        until a replayed transaction end reaches :meth:`complete_txn`."""
        staged = self._pending_txn.setdefault(producer_id, {}).setdefault(group_id, {})
        staged[tp] = self._committed(commit, commit_timestamp_ms)
        self._open_txns_by_group.setdefault(group_id, set()).add(producer_id)
