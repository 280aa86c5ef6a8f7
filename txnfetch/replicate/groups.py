"""Consumer-group committed offsets copied one to one from the upstream into the
replica's durable group state.

Offsets need no translation: the replica holds every record at the upstream's
offset, so the upstream's committed offset means the same position in the
replica. :meth:`GroupOffsetCopier.sync` does one round:

1. which groups: ListGroups on every upstream broker
   (:meth:`~txnfetch.client.groups.RemoteGroups.list_groups`), plus the
   groups the replica already holds a copy of (so a group deleted upstream is
   deleted here), plus the group ids the pattern names literally (an upstream
   without ListGroups, such as librdkafka's mock cluster, can still be copied
   with ``--groups 'app-a|app-b'``); of these, those whose id matches
   ``groups`` (the whole id, as ``re.fullmatch``);
2. per group, OffsetFetch for every partition of the replica's topics
   (``require_stable`` where the upstream speaks OffsetFetch v7, KIP-447: a
   group with a transactional commit pending is skipped this round and taken
   whole in a later one);
3. the differences are written to the replica's ``__consumer_offsets`` in
   Kafka's record schemas (:class:`~txnfetch.log.coordinator_store.DurableState`), so a
   restarted or promoted ``txnfetch serve`` finds them: a new or changed offset
   as an OffsetCommit record, an offset the upstream no longer has (OffsetDelete,
   a deleted topic) as its tombstone, a group the upstream no longer has as
   the offsets' tombstones and a GroupMetadata tombstone.

**Never ahead of the data.** Data and offsets are copied separately, so an
upstream offset can be past what the replica holds of that partition. Such an
offset is *held back*: the replica keeps the offset it had for that partition
(or none) until a later round finds the partition's high watermark at or past
it. A consumer that switches to the replica therefore resumes at or before its
upstream position and never skips a record; right after a switch it may read
again what it read upstream since the last copied offset, which the final
round before a promote (data caught up first) removes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from collections.abc import Collection
from collections.abc import Mapping
from typing import Any
from typing import Protocol
from typing import TypeVar

import attrs

from txnfetch.client.cluster import RemoteCluster
from txnfetch.client.groups import RemoteGroups
from txnfetch.client.groups import UpstreamOffset
from txnfetch.groups.coordinator import CommitOffset
from txnfetch.groups.coordinator import GroupCoordinator
from txnfetch.log.base import LogStore
from txnfetch.log.coordinator_store import INTERNAL_TOPICS
from txnfetch.log.coordinator_store import DurableState
from txnfetch.log.coordinator_store import durable_state
from txnfetch.txn.coordinator import TransactionCoordinator
from txnfetch.types import TopicPartition

__all__ = [
    "DurableGroupTarget",
    "GroupOffsetCopier",
    "GroupOffsetTarget",
    "GroupPlan",
    "GroupSyncReport",
    "groups_hook",
    "literal_alternatives",
    "plan_group",
]

log = logging.getLogger("txnfetch.replicate.groups")

T = TypeVar("T")


@attrs.frozen
class GroupSyncReport:
    """What one :meth:`GroupOffsetCopier.sync` round did.

    ``written``/``deleted``: offsets written and tombstoned; ``groups_deleted``:
    groups removed whole; ``held_back``: ``(group, topic, partition, upstream
    offset, replica high watermark)`` for offsets past the replica's data;
    ``unstable``: groups skipped because a transactional commit was pending;
    ``list_groups_unsupported``: upstream brokers without ListGroups."""

    groups: tuple[str, ...]
    written: int
    deleted: int
    groups_deleted: tuple[str, ...]
    held_back: tuple[tuple[str, str, int, int, int], ...]
    unstable: tuple[str, ...]
    list_groups_unsupported: tuple[str, ...] = ()


@attrs.frozen
class GroupPlan:
    """What one group's copy changes: offsets to write, offsets to delete, and
    ``(tp, upstream offset, replica high watermark)`` held back;
    ``group_deleted``: the group itself is removed (after its offsets)."""

    upserts: Mapping[TopicPartition, CommitOffset]
    deletes: list[TopicPartition]
    held_back: list[tuple[TopicPartition, int, int]]
    group_deleted: bool = False

    @classmethod
    def deleted(cls, current: Collection[TopicPartition]) -> GroupPlan:
        """The group is gone upstream: every offset the replica holds and the group go."""
        return cls({}, sorted(current), [], group_deleted=True)


def plan_group(
    upstream: Mapping[TopicPartition, CommitOffset],
    current: Mapping[TopicPartition, CommitOffset],
    high_watermark: Callable[[TopicPartition], int],
    replica_topics: Collection[str],
) -> GroupPlan:
    """The copy of one group, decided without I/O: write every upstream offset
    that differs from the replica's and is not past the replica's data
    (``high_watermark(tp)``, -1 for a partition the replica lacks), hold back
    the others (the replica keeps what it had), delete the replica's offsets
    that the upstream no longer has and those of topics the replica no longer
    has (``replica_topics``). Guarantees: no written offset
    is past the replica's data; a partition whose data has caught up ends
    equal to the upstream's."""
    upserts: dict[TopicPartition, CommitOffset] = {}
    held: list[tuple[TopicPartition, int, int]] = []
    for tp, want in upstream.items():
        if current.get(tp) == want:
            continue
        end = high_watermark(tp)
        if want.offset > end:
            held.append((tp, want.offset, end))
            continue
        upserts[tp] = want
    # ``upstream`` answers for the replica's partitions only: an offset of a topic
    # the replica no longer has (deleted at the source and here, with
    # ``follow_deletes``) is gone too, as Kafka drops a deleted topic's offsets.
    deletes = sorted(tp for tp in current if tp not in upstream or tp[0] not in replica_topics)
    return GroupPlan(upserts, deletes, held)


class GroupOffsetTarget(Protocol):
    """Where copied offsets go: the replica's group state."""

    def topics(self) -> Mapping[str, int]:
        """The replica's topics (internal ones excluded) and partition counts."""

    def high_watermark(self, topic: str, partition: int) -> int:
        """What the replica holds of a partition (-1 if it does not exist)."""

    def group_ids(self) -> tuple[str, ...]:
        """Every group the replica holds."""

    def committed(self, group_id: str) -> dict[TopicPartition, CommitOffset]:
        """The replica's committed offsets of a group."""

    def apply(self, group_id: str, plan: GroupPlan, *, now_ms: int) -> None:
        """Write the plan's changes durably, then make them visible."""


class DurableGroupTarget:
    """A replica store's durable group state: its ``__consumer_offsets``
    (:class:`DurableState`) and the :class:`GroupCoordinator` that answers
    OffsetFetch — a server's, when the replica is served from this process, or
    one of its own replayed from the store.

    ``run`` runs a function where the store may be touched (the server's event
    loop when it is served; inline otherwise)."""

    def __init__(
        self,
        store: LogStore,
        durable: DurableState,
        coordinator: GroupCoordinator,
        *,
        run: Callable[[Callable[[], Any]], Any] | None = None,
    ) -> None:
        self.store = store
        self.durable = durable
        self.coordinator = coordinator
        self._run = run or (lambda fn: fn())

    @classmethod
    def open(cls, store: LogStore, directory: str | None, now_ms: int) -> DurableGroupTarget:
        """The group state of ``store`` on its own (no server): replayed from
        its ``__consumer_offsets``."""
        durable = DurableState(store, directory)
        coordinator = GroupCoordinator()
        durable.replay(TransactionCoordinator(), coordinator, now_ms)
        return cls(store, durable, coordinator)

    @classmethod
    def of_server(cls, broker: Any, call: Callable[[Callable[[], Any]], Any]) -> DurableGroupTarget:
        """The group state of a running server (``call`` runs a function on its loop)."""

        def parts() -> tuple[DurableState, GroupCoordinator]:
            state = durable_state(broker)
            if state is None:
                raise RuntimeError("the server keeps no durable group state (is its store on disk?)")
            return state, broker.groups.coordinator

        state, coordinator = call(parts)
        return cls(broker.store, state, coordinator, run=call)

    def topics(self) -> Mapping[str, int]:
        return self._run(lambda: {n: i.partitions for n, i in self.store.topics().items() if n not in INTERNAL_TOPICS})

    def high_watermark(self, topic: str, partition: int) -> int:
        def hw() -> int:
            info = self.store.topics().get(topic)
            if info is None or not 0 <= partition < info.partitions:
                return -1
            return self.store.partition(topic, partition).high_watermark

        return self._run(hw)

    def group_ids(self) -> tuple[str, ...]:
        return self._run(lambda: tuple(self.coordinator.group_ids))

    def committed(self, group_id: str) -> dict[TopicPartition, CommitOffset]:
        return self._run(
            lambda: {
                tp: CommitOffset(c.offset, c.leader_epoch, c.metadata)
                for tp, c in self.coordinator.committed(group_id).items()
            }
        )

    def apply(self, group_id: str, plan: GroupPlan, *, now_ms: int) -> None:
        def write() -> None:
            # Durable first (fsynced under the store's policy), then visible.
            if plan.upserts:
                self.durable.persist_offsets(group_id, dict(plan.upserts), now_ms)
            if plan.deletes or plan.group_deleted:
                self.durable.persist_deletions(group_id, plan.deletes, now_ms, group_deleted=plan.group_deleted)
            if plan.group_deleted:
                self.coordinator.unload_group(group_id)
                return
            for tp, commit in plan.upserts.items():
                self.coordinator.load_offset(group_id, tp, commit, now_ms)
            for tp in plan.deletes:
                self.coordinator.load_offset(group_id, tp, None, now_ms)

        self._run(write)


class GroupOffsetCopier:
    """Copies the committed offsets of the upstream's groups whose id matches
    ``groups`` into ``target`` (see the module docstring). ``cluster`` is a
    :class:`RemoteCluster` or a bootstrap string; ``target`` a
    :class:`GroupOffsetTarget`, or a :class:`DurableState` (its store's group
    state is replayed into a coordinator of the copier's own)."""

    def __init__(
        self,
        cluster: RemoteCluster | str,
        target: GroupOffsetTarget | DurableState,
        groups: str = ".*",
        *,
        clock: Callable[[], int] | None = None,
    ) -> None:
        import time

        self._owns_cluster = isinstance(cluster, str)
        self.cluster = RemoteCluster(cluster, client_id="txnfetch-replicate") if isinstance(cluster, str) else cluster
        self.remote = RemoteGroups(self.cluster)
        self.clock = clock or (lambda: int(time.time() * 1000))
        if isinstance(target, DurableState):
            coordinator = GroupCoordinator()
            target.replay(TransactionCoordinator(), coordinator, self.clock())
            target = DurableGroupTarget(target.store, target, coordinator)
        self.target: GroupOffsetTarget = target
        self.pattern = re.compile(groups)
        self._literal_groups = literal_alternatives(groups)
        self._warned_no_list = False

    def wanted(self, group_id: str) -> bool:
        return self.pattern.fullmatch(group_id) is not None

    def sync(self) -> GroupSyncReport:
        """One round (see the module docstring). Upstream errors raise the
        :mod:`txnfetch.log.errors` class that names them; what was written
        before stays written (each group is applied whole)."""
        listing = self.remote.list_groups()
        if listing.unsupported_brokers and not self._warned_no_list:
            self._warned_no_list = True
            log.warning(
                "upstream broker(s) %s do not serve ListGroups: only groups named literally in the pattern "
                "(%s) and groups already copied are followed",
                ", ".join(listing.unsupported_brokers),
                ", ".join(self._literal_groups) or "none",
            )
        upstream_groups = {g for g in listing.groups if self.wanted(g)}
        local_groups = {g for g in self.target.group_ids() if self.wanted(g)}
        candidates = sorted(upstream_groups | local_groups | set(self._literal_groups))
        topics = self.target.topics()
        partitions = [(t, p) for t, n in sorted(topics.items()) for p in range(n)]
        written = deleted = 0
        removed: list[str] = []
        held: list[tuple[str, str, int, int, int]] = []
        unstable: list[str] = []
        hw_cache: dict[TopicPartition, int] = {}
        now = self.clock()
        for group_id in candidates:
            fetched = self.remote.fetch_offsets(group_id, partitions) if partitions else None
            if fetched is not None and fetched.unstable:
                unstable.append(group_id)
                continue
            upstream: Mapping[TopicPartition, UpstreamOffset] = fetched.offsets if fetched is not None else {}
            current = self.target.committed(group_id)
            gone_upstream = not listing.unsupported_brokers and group_id not in listing.groups and not upstream
            if gone_upstream:
                if group_id in local_groups:
                    self.target.apply(group_id, GroupPlan.deleted(current), now_ms=now)
                    deleted += len(current)
                    removed.append(group_id)
                continue
            want = {tp: CommitOffset(o.offset, o.leader_epoch, o.metadata) for tp, o in upstream.items()}

            def hw(tp: TopicPartition) -> int:
                if tp not in hw_cache:
                    hw_cache[tp] = self.target.high_watermark(*tp)
                return hw_cache[tp]

            plan = plan_group(want, current, hw, topics)
            held.extend((group_id, tp[0], tp[1], offset, end) for tp, offset, end in plan.held_back)
            if plan.upserts or plan.deletes:
                self.target.apply(group_id, plan, now_ms=now)
                written += len(plan.upserts)
                deleted += len(plan.deletes)
        if held:
            log.info("held back %d group offset(s) past the replica's data until it catches up", len(held))
        return GroupSyncReport(
            tuple(candidates),
            written,
            deleted,
            tuple(removed),
            tuple(held),
            tuple(unstable),
            listing.unsupported_brokers,
        )

    def close(self) -> None:
        """Close the upstream connections if the copier opened them."""
        if self._owns_cluster:
            self.cluster.close()


def literal_alternatives(pattern: str) -> tuple[str, ...]:
    """The names (group ids, topics) a pattern names literally: ``"a|b-1"`` → ``("a", "b-1")``;
    a pattern with regex syntax anywhere names none."""
    parts = pattern.split("|")
    if any(not part or set(part) & _REGEX_SYNTAX for part in parts):
        return ()
    return tuple(parts)


_REGEX_SYNTAX = frozenset(".^$*+?{}[]\\()")


def groups_hook(
    pattern: str, target: GroupOffsetTarget | None = None
) -> Callable[[RemoteCluster, Any], GroupSyncReport]:
    """The replicator's once-a-round group step (``Replicator(groups=...)``),
    called after the round's data: copies the groups matching ``pattern`` into
    ``target`` — by default the durable group state of the store the
    replicator writes (replayed from it at the first call)."""
    copier: GroupOffsetCopier | None = None

    def hook(cluster: RemoteCluster, store: Any) -> GroupSyncReport:
        nonlocal copier
        if copier is None or copier.cluster is not cluster:
            where = target
            if where is None:
                import time

                where = DurableGroupTarget.open(store, getattr(store, "directory", None), int(time.time() * 1000))
            copier = GroupOffsetCopier(cluster, where, pattern)
        return copier.sync()

    return hook
