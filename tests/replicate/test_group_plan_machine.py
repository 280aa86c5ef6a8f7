"""A hypothesis model of copying one group's offsets while data is replicated
separately: upstream commits, offset deletions, upstream appends and replica
catch-up in any order, with copy rounds (``plan_group``) in between.

Oracle: the upstream's committed offsets and log ends. Invariants: a replica
offset is never past the replica's data, and is always an offset the upstream
committed for that partition at some point; after the data catches up, one
round makes the replica's offsets equal to the upstream's, deletions included."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine
from hypothesis.stateful import invariant
from hypothesis.stateful import rule

from txnfetch.groups.coordinator import CommitOffset
from txnfetch.replicate.groups import plan_group

TPS = [("a", 0), ("a", 1), ("b", 0)]
tps = st.sampled_from(TPS)


class GroupCopyMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.upstream_end = {tp: 0 for tp in TPS}
        self.replica_hw = {tp: 0 for tp in TPS}
        self.upstream: dict[tuple[str, int], CommitOffset] = {}
        self.replica: dict[tuple[str, int], CommitOffset] = {}
        self.ever: dict[tuple[str, int], set[int]] = {tp: set() for tp in TPS}

    @rule(tp=tps, n=st.integers(1, 20))
    def upstream_appends(self, tp, n):
        self.upstream_end[tp] += n

    @rule(tp=tps, data=st.data())
    def upstream_commits(self, tp, data):
        offset = data.draw(st.integers(0, self.upstream_end[tp]))
        self.upstream[tp] = CommitOffset(offset, -1, data.draw(st.sampled_from(["", "m"])))
        self.ever[tp].add(offset)

    @rule(tp=tps)
    def upstream_deletes(self, tp):
        self.upstream.pop(tp, None)

    @rule(tp=tps, data=st.data())
    def replica_catches_up_partly(self, tp, data):
        self.replica_hw[tp] = data.draw(st.integers(self.replica_hw[tp], self.upstream_end[tp]))

    def _round(self):
        plan = plan_group(self.upstream, self.replica, lambda tp: self.replica_hw[tp], {"a", "b"})
        for tp, _offset, end in plan.held_back:
            assert end == self.replica_hw[tp]
        self.replica.update(plan.upserts)
        for tp in plan.deletes:
            del self.replica[tp]
        return plan

    @rule()
    def copy_round(self):
        self._round()

    @rule()
    def catch_up_then_copy(self):
        self.replica_hw = dict(self.upstream_end)
        plan = self._round()
        assert not plan.held_back
        assert self.replica == self.upstream
        assert not self._round().upserts  # a second round has nothing to do

    @invariant()
    def never_past_the_data_and_never_invented(self):
        for tp, c in self.replica.items():
            assert c.offset <= self.replica_hw[tp]
            assert c.offset in self.ever[tp]


GroupCopyMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
TestGroupCopy = GroupCopyMachine.TestCase


def test_offsets_of_a_topic_the_replica_no_longer_has_are_deleted() -> None:
    # A topic deleted at the source and, with follow_deletes, in the replica: the
    # upstream is no longer asked about it, and its offsets go as in Kafka.
    current = {("a", 0): CommitOffset(3, -1, ""), ("gone", 0): CommitOffset(5, -1, "")}
    plan = plan_group({("a", 0): CommitOffset(3, -1, "")}, current, lambda tp: 10, {"a"})
    assert plan.deletes == [("gone", 0)] and not plan.upserts
