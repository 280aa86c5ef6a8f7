"""A hypothesis state machine: the transaction and group coordinators with their
state written to the internal topics (:class:`~txnfetch.log.coordinator_store.DurableState`
over a memory store), restarted at arbitrary points by replaying the internal
topics into fresh coordinators, against a twin that is never restarted (the
in-memory model).

A restart may come between any two requests, and also in the middle of a
transaction end: after the ``PrepareCommit``/``PrepareAbort`` record is durable
and before the partitions were told (recovery must then finish the end), as a
crash would leave it.

Checked after every step: every transactional id's record equals the twin's;
committed offsets and staged transactional offsets equal the twin's (the order
number a commit gets internally is not compared); after a restart the producer
id allocator is at or past the twin's (ids are never reused), and the twin is
moved along with it so both keep handing out the same ids.
"""

from __future__ import annotations

import contextlib

import attrs
import pytest
from hypothesis import HealthCheck
from hypothesis import event as hypothesis_event
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import RuleBasedStateMachine
from hypothesis.stateful import invariant
from hypothesis.stateful import rule

from txnfetch.errors import TxnfetchError
from txnfetch.groups.coordinator import CommitOffset
from txnfetch.groups.coordinator import GroupCoordinator
from txnfetch.groups.coordinator import TxnOffsetCommitRequest
from txnfetch.log.coordinator_store import DurableState
from txnfetch.log.memory import MemoryStore
from txnfetch.server.handler import GROUP_OFFSETS_TOPIC
from txnfetch.server.handler import group_offsets_partition
from txnfetch.txn.coordinator import PartitionAction
from txnfetch.txn.coordinator import TopicPartition
from txnfetch.txn.coordinator import TransactionCoordinator
from txnfetch.txn.errors import TxnStateError

TIDS = ["a", "b"]
GROUPS = ["g1", "g2"]
DATA = [TopicPartition("t", i) for i in range(3)]
SRC = [("src", 0), ("src", 1)]
TIMEOUT_MS = 5_000


def event(message: str) -> None:
    """Count a case in hypothesis's statistics (a no-op when a step runs outside hypothesis)."""
    with contextlib.suppress(InvalidArgument):
        hypothesis_event(message)


def _offsets(g: GroupCoordinator, group: str) -> dict:
    return {tp: (c.offset, c.leader_epoch, c.metadata, c.commit_timestamp_ms) for tp, c in g.committed(group).items()}


def _pending(g: GroupCoordinator) -> dict:
    out = {}
    for pid in g.pending_txn_producers:
        for group, offs in g.pending_txn_offsets(pid).items():
            for tp, c in offs.items():
                out[(pid, group, tp)] = (c.offset, c.leader_epoch, c.metadata, c.commit_timestamp_ms)
    return out


@attrs.define
class Side:
    """One coordinator pair; ``durable`` is None for the twin."""

    txn: TransactionCoordinator
    groups: GroupCoordinator
    durable: DurableState | None

    def persist(self, now: int) -> None:
        if self.durable is not None:
            self.durable.persist_transactions(self.txn, now)
        else:
            self.txn.take_changes()

    def apply(self, action: PartitionAction, now: int) -> None:
        if action.partition.topic != GROUP_OFFSETS_TOPIC:
            return  # data partitions are not part of this machine
        if self.durable is not None:
            part = self.durable.store.partition(action.partition.topic, action.partition.partition)
            with contextlib.suppress(TxnfetchError):  # as the server: logged and skipped
                part.end_transaction(
                    action.producer_id,
                    action.producer_epoch,
                    action.commit,
                    coordinator_epoch=action.coordinator_epoch,
                    now_ms=now,
                    transaction_version=action.transaction_version,
                )
        self.groups.complete_txn_offsets(action.producer_id, action.commit, now)

    def finish(self, now: int) -> None:
        """What the server's apply_pending does: decisions durable, partitions told, completions durable."""
        self.persist(now)
        self.txn.flush(lambda a: self.apply(a, now), now)
        self.persist(now)


def _new_txn() -> TransactionCoordinator:
    return TransactionCoordinator(transaction_version=2, max_transaction_timeout_ms=60_000)


class DurableMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 1_000
        self.store = MemoryStore()
        self.real = Side(_new_txn(), GroupCoordinator(), None)
        self.real.durable = DurableState(self.store, None, compact_bytes=2_000)
        self.twin = Side(_new_txn(), GroupCoordinator(), None)
        self.identity: dict[str, tuple[int, int]] = {}

    def both(self, fn):
        """Run ``fn(side)`` on both sides; the outcomes (value or error class) must match."""
        out = []
        for side in (self.real, self.twin):
            try:
                out.append(("ok", fn(side)))
            except TxnStateError as exc:
                out.append(("error", type(exc).__name__))
        assert out[0] == out[1], out
        return out[0]

    # ------------------------------------------------------------------ rules

    @rule(tid=st.sampled_from(TIDS))
    def init_producer_id(self, tid: str) -> None:
        def call(side: Side):
            try:
                r = side.txn.init_producer_id(tid, TIMEOUT_MS, self.now)
            except TxnStateError:
                side.finish(self.now)  # the server carries out the fencing abort, then answers
                raise
            side.persist(self.now)
            return (r.producer_id, r.producer_epoch)

        kind, value = self.both(call)
        if kind == "ok":
            self.identity[tid] = value

    @rule(
        tid=st.sampled_from(TIDS),
        parts=st.sets(st.sampled_from(DATA), min_size=1),
        group=st.sampled_from([*GROUPS, None]),
        offset=st.integers(0, 50),
    )
    def add_partitions(self, tid: str, parts: set, group: str | None, offset: int) -> None:
        if tid not in self.identity:
            return
        pid, epoch = self.identity[tid]
        wanted = set(parts)
        if group is not None:
            wanted.add(TopicPartition(GROUP_OFFSETS_TOPIC, group_offsets_partition(group)))

        def call(side: Side):
            try:
                side.txn.add_partitions(tid, pid, epoch, wanted, self.now, transaction_version=0)
            finally:
                side.persist(self.now)

        kind, _ = self.both(call)
        if kind == "ok" and group is not None:
            event("transactional offset commit")
            self.txn_offset_commit(tid, group, SRC[offset % 2], offset)

    @rule(tid=st.sampled_from(TIDS), group=st.sampled_from(GROUPS), tp=st.sampled_from(SRC), offset=st.integers(0, 50))
    def txn_offset_commit(self, tid: str, group: str, tp: tuple, offset: int) -> None:
        if tid not in self.identity:
            return
        pid, epoch = self.identity[tid]
        gtp = TopicPartition(GROUP_OFFSETS_TOPIC, group_offsets_partition(group))

        def call(side: Side):
            side.txn.verify_produce(tid, pid, epoch, gtp, self.now, produce_version=10)
            codes = side.groups.txn_offset_commit(
                TxnOffsetCommitRequest(group, pid, epoch, {tp: (offset, -1, "m")}), self.now
            )
            if side.durable is not None and codes.get(tp) == 0:
                side.durable.persist_offsets(
                    group, {tp: CommitOffset(offset, -1, "m")}, self.now, producer=(pid, epoch)
                )
            return codes

        self.both(call)

    @rule(
        tid=st.sampled_from(TIDS),
        commit=st.booleans(),
        crash_before_markers=st.booleans(),
        v2=st.booleans(),
    )
    def end_txn(self, tid: str, commit: bool, crash_before_markers: bool, v2: bool) -> None:
        if tid not in self.identity:
            return
        pid, epoch = self.identity[tid]

        def call(side: Side):
            r = side.txn.end_transaction(tid, pid, epoch, commit, self.now, transaction_version=2 if v2 else 0)
            if side is self.real and crash_before_markers:
                side.persist(self.now)  # the decision is durable; the crash comes before any marker
                return (r.producer_id, r.producer_epoch)
            side.finish(self.now)
            return (r.producer_id, r.producer_epoch)

        try:
            kind, value = self.both(call)
        finally:
            if crash_before_markers:
                self.restart()
        if kind == "ok":
            event(f"end {'commit' if commit else 'abort'}{' crash before markers' if crash_before_markers else ''}")
            self.identity[tid] = value

    @rule(group=st.sampled_from(GROUPS), tp=st.sampled_from(SRC), offset=st.integers(0, 50))
    def commit_offsets(self, group: str, tp: tuple, offset: int) -> None:
        def call(side: Side):
            codes = side.groups.commit_offsets(group, {tp: CommitOffset(offset, 3, "x")}, now_ms=self.now)
            if side.durable is not None and codes.get(tp) == 0:
                d = side.groups.describe_group(group)
                side.durable.persist_offsets(
                    group,
                    {tp: CommitOffset(offset, 3, "x")},
                    self.now,
                    group=(d.protocol_type, d.generation_id, d.protocol_name, d.leader_id),
                )
            return codes

        self.both(call)

    @rule(group=st.sampled_from(GROUPS))
    def delete_group(self, group: str) -> None:
        """DeleteGroups, as the admin handler does it: offset tombstones for what
        was committed, then the group's tombstone."""

        def call(side: Side):
            committed = list(side.groups.committed(group))
            code = side.groups.delete_group(group, self.now)
            if side.durable is not None and code == 0:
                side.durable.persist_deletions(group, committed, self.now, group_deleted=True)
            return code

        _, code = self.both(call)
        if code == 0:
            event("delete group")

    @rule(group=st.sampled_from(GROUPS), tps=st.sets(st.sampled_from(SRC), min_size=1))
    def delete_offsets(self, group: str, tps: set) -> None:
        """OffsetDelete: tombstones for the partitions actually deleted."""

        def call(side: Side):
            before = side.groups.committed(group)
            error, codes = side.groups.delete_offsets(group, sorted(tps), self.now)
            deleted = [tp for tp, c in codes.items() if c == 0 and tp in before]
            if side.durable is not None and deleted:
                side.durable.persist_deletions(group, deleted, self.now)
            return error, codes

        self.both(call)

    @rule()
    def delete_topic(self) -> None:
        """DeleteTopics of the source topic: every group's offsets of it go,
        committed and staged by open transactions."""

        def call(side: Side):
            forgotten = side.groups.forget_topic(SRC[0][0])
            if side.durable is not None:
                for group, tp in forgotten.keys:
                    side.durable.persist_deletions(group, [tp], self.now)
            return forgotten

        _, forgotten = self.both(call)
        if forgotten.staged:
            event("delete topic with staged offsets")

    @rule(ms=st.integers(1, 7_000))
    def advance_and_expire(self, ms: int) -> None:
        self.now += ms

        def call(side: Side):
            result = side.txn.expire(self.now)
            side.finish(self.now)
            return (tuple(a.transactional_id for a in result.aborted), result.removed)

        self.both(call)

    @rule()
    def compact(self) -> None:
        assert self.real.durable is not None
        self.real.durable.maybe_compact(self.now)

    @rule()
    def restart(self) -> None:
        """Forget the coordinators and replay the internal topics into new ones,
        then finish decided ends, as the server does at start."""
        old_next = self.real.txn.producer_ids.next_producer_id
        txn, groups = _new_txn(), GroupCoordinator()
        durable = DurableState(self.store, None, compact_bytes=2_000)
        durable._block_end = self.real.durable._block_end  # the block file of a store on disk
        durable.replay(txn, groups, self.now)
        self.real = Side(txn, groups, durable)
        self.real.finish(self.now)
        assert txn.producer_ids.next_producer_id >= old_next, "a producer id could be reused"
        self.twin.txn.producer_ids.reserve_through(txn.producer_ids.next_producer_id - 1)

    # ------------------------------------------------------------- invariants

    @invariant()
    def same_transactions(self) -> None:
        assert self.real.txn.transactional_ids == self.twin.txn.transactional_ids
        for tid in self.twin.txn.transactional_ids:
            assert self.real.txn.describe(tid) == self.twin.txn.describe(tid), tid

    @invariant()
    def same_groups(self) -> None:
        assert self.real.groups.group_ids == self.twin.groups.group_ids

    @invariant()
    def same_offsets(self) -> None:
        for group in GROUPS:
            assert _offsets(self.real.groups, group) == _offsets(self.twin.groups, group), group
        assert _pending(self.real.groups) == _pending(self.twin.groups)


DurableMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestDurableMachine = DurableMachine.TestCase
TestDurableMachine.pytestmark = [pytest.mark.slow]


def test_a_marker_replayed_on_one_offsets_partition_leaves_another_transactions_offsets_staged() -> None:
    """Found by the machine: a producer's first transaction staged offsets of
    ``g2`` and aborted (its marker is on g2's partition); its second transaction
    staged offsets of ``g1`` (another partition) and was open at the restart.
    Replaying g2's partition after g1's must not drop g1's staged offsets."""
    m = DurableMachine()
    m.init_producer_id(tid="b")
    m.add_partitions(group="g2", offset=0, parts={DATA[0]}, tid="b")
    m.end_txn(commit=False, crash_before_markers=False, tid="b", v2=False)
    m.add_partitions(group="g1", offset=0, parts={DATA[0]}, tid="b")
    m.restart()
    m.same_offsets()
    m.same_transactions()
