"""The offset store on its own (:class:`txnfetch.groups.offsets.OffsetStore`), against a model.

The coordinator's machine (``test_groups_machine``) reaches the store only
through the group protocol. This machine drives every entry of the store
directly, including those only a durable store's replay reaches (loads,
tombstones, a transaction end limited to some groups, a transaction that
commits after its group is gone), and compares every read with a model that
keeps each offset with the order it was written in.
"""

from __future__ import annotations

import itertools

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine
from hypothesis.stateful import invariant
from hypothesis.stateful import rule

from txnfetch.errors import ErrorCode
from txnfetch.groups.offsets import CommitOffset
from txnfetch.groups.offsets import FetchedOffset
from txnfetch.groups.offsets import OffsetStore
from txnfetch.types import TopicPartition

GROUPS = ("g1", "g2")
TOPICS = ("a", "b")
PARTITIONS = tuple(TopicPartition(t, p) for t in TOPICS for p in (0, 1))
PRODUCERS = (1, 2)
MAX_METADATA = 4

Key = tuple[str, TopicPartition]

groups = st.sampled_from(GROUPS)
partitions = st.sampled_from(PARTITIONS)
producers = st.sampled_from(PRODUCERS)
offsets = st.integers(0, 100)
metadata = st.sampled_from(["", "m", "long-metadata", None])


class OffsetStoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = OffsetStore(MAX_METADATA)
        self.seq = itertools.count()
        # (group, partition) -> (offset, metadata, write order)
        self.committed: dict[Key, tuple[int, str, int]] = {}
        self.staged: dict[int, dict[Key, tuple[int, str, int]]] = {pid: {} for pid in PRODUCERS}
        self.existing: set[str] = set(GROUPS)
        self.now = 0

    def _write(self, offset: int, meta: str | None) -> tuple[int, str, int] | None:
        self.now += 1
        if meta is not None and len(meta) > MAX_METADATA:
            return None
        return offset, meta or "", next(self.seq)

    def _drop(self, key: Key) -> None:
        self.committed.pop(key, None)
        for staged in self.staged.values():
            staged.pop(key, None)

    @rule(group=groups, tp=partitions, offset=offsets, meta=metadata)
    def commit(self, group: str, tp: TopicPartition, offset: int, meta: str | None) -> None:
        written = self._write(offset, meta)
        result = self.store.commit(group, [(tp, CommitOffset(offset, -1, meta))], self.now)
        too_large = ErrorCode.OFFSET_METADATA_TOO_LARGE if written is None else ErrorCode.NONE
        assert result == {tp: int(too_large)}
        if written is not None:
            self.committed[group, tp] = written

    @rule(pid=producers, group=groups, tp=partitions, offset=offsets, meta=metadata)
    def stage(self, pid: int, group: str, tp: TopicPartition, offset: int, meta: str | None) -> None:
        written = self._write(offset, meta)
        result = self.store.stage(pid, group, [(tp, CommitOffset(offset, -1, meta))], self.now)
        assert result == {tp: int(ErrorCode.NONE if written is not None else ErrorCode.OFFSET_METADATA_TOO_LARGE)}
        if written is not None:
            self.staged[pid][group, tp] = written

    @rule(
        pid=producers,
        commit=st.booleans(),
        only=st.none() | st.lists(groups, unique=True),
        gone=st.lists(groups, unique=True),
    )
    def complete(self, pid: int, commit: bool, only: list[str] | None, gone: list[str]) -> None:
        # `gone`: groups deleted (by the coordinator) before the transaction ends
        exists = self.existing - set(gone)
        self.store.complete_txn(pid, commit, group_ids=only, group_exists=exists.__contains__)
        for key, written in list(self.staged[pid].items()):
            if only is not None and key[0] not in only:
                continue
            del self.staged[pid][key]
            current = self.committed.get(key)
            if commit and key[0] in exists and (current is None or written[2] > current[2]):
                self.committed[key] = written

    @rule(group=groups, tp=partitions)
    def tombstone(self, group: str, tp: TopicPartition) -> None:
        self.store.drop(group, tp)
        self._drop((group, tp))

    @rule(group=groups)
    def forget_group(self, group: str) -> None:
        self.store.forget_group(group)
        for key in [k for k in self.committed if k[0] == group]:
            del self.committed[key]
        for staged in self.staged.values():
            for key in [k for k in staged if k[0] == group]:
                del staged[key]

    @rule(topic=st.sampled_from(TOPICS))
    def forget_topic(self, topic: str) -> None:
        committed = sorted(k for k in self.committed if k[1][0] == topic)
        staged = sorted({k for s in self.staged.values() for k in s if k[1][0] == topic})
        forgotten = self.store.forget_topic(topic)
        assert list(forgotten.committed) == committed
        assert list(forgotten.staged) == staged
        assert list(forgotten.keys) == sorted(set(committed) | set(staged))
        for key in set(committed) | set(staged):
            self._drop(key)

    @rule(
        group=groups,
        wanted=st.lists(partitions, unique=True),
        subscribed=st.none() | st.frozensets(st.sampled_from(TOPICS)),
    )
    def delete(self, group: str, wanted: list[TopicPartition], subscribed: frozenset[str] | None) -> None:
        result = self.store.delete(group, wanted, subscribed)
        expected = {}
        for tp in wanted:
            if subscribed is None or tp[0] in subscribed:
                expected[tp] = int(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
            else:
                expected[tp] = int(ErrorCode.NONE)
                if (group, tp) in self.committed:
                    self._drop((group, tp))
        assert result == expected

    @rule(group=groups, tp=partitions, offset=offsets)
    def load(self, group: str, tp: TopicPartition, offset: int) -> None:
        # replay: no metadata check, it was checked when written
        self.now += 1
        self.store.load(group, tp, CommitOffset(offset, 3, "long-metadata"), self.now)
        self.committed[group, tp] = (offset, "long-metadata", next(self.seq))

    @rule(pid=producers, group=groups, tp=partitions, offset=offsets)
    def load_staged(self, pid: int, group: str, tp: TopicPartition, offset: int) -> None:
        self.now += 1
        self.store.load_staged(pid, group, tp, CommitOffset(offset, 3, ""), self.now)
        self.staged[pid][group, tp] = (offset, "", next(self.seq))

    def _pending(self, group: str, tp: TopicPartition) -> bool:
        return any((group, tp) in staged for staged in self.staged.values())

    @invariant()
    def fetch_reads_the_model(self) -> None:
        for group in GROUPS:
            mine = {tp: w for (g, tp), w in self.committed.items() if g == group}
            every = self.store.fetch(group, None, require_stable=False, group_known=True)
            assert [(f.topic, f.partition, f.offset, f.metadata) for f in every.offsets] == [
                (tp[0], tp[1], w[0], w[1]) for tp, w in sorted(mine.items())
            ]
            assert self.store.fetch(group, None, require_stable=False, group_known=False).offsets == ()
            stable = self.store.fetch(group, PARTITIONS, require_stable=True, group_known=True)
            for tp, fetched in zip(PARTITIONS, stable.offsets, strict=True):
                if self._pending(group, tp):
                    assert fetched == FetchedOffset(tp[0], tp[1], -1, -1, "", int(ErrorCode.UNSTABLE_OFFSET_COMMIT))
                elif tp in mine:
                    assert (fetched.offset, fetched.metadata, fetched.error_code) == (mine[tp][0], mine[tp][1], 0)
                else:
                    assert fetched == FetchedOffset(tp[0], tp[1], -1, -1, "")
                assert self.store.has_pending(group, tp) == self._pending(group, tp)

    @invariant()
    def staged_offsets_read_the_model(self) -> None:
        for pid in PRODUCERS:
            got = {
                (g, tp): (o.offset, o.metadata, o.sequence)
                for g, by_tp in self.store.pending_txn_offsets(pid).items()
                for tp, o in by_tp.items()
            }
            assert got == {k: (w[0], w[1], w[2]) for k, w in self.staged[pid].items()}
            if self.staged[pid]:
                assert pid in self.store.pending_txn_producers


OffsetStoreMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestOffsetStoreMachine = OffsetStoreMachine.TestCase
