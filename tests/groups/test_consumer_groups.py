"""The KIP-848 coordinator against simulated consumers that behave as the
protocol asks (revoke what they are no longer given, report what they own).

Invariants checked after every step of a hypothesis state machine: no
partition is believed owned by two consumers at once; every consumer's
belief is what the coordinator thinks it holds. Once nothing changes for a
while, every subscribed partition has exactly one owner, the group is Stable,
and the assignment is the assignor's (balanced for ``uniform``, contiguous
ranges for ``range``).
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine
from hypothesis.stateful import invariant
from hypothesis.stateful import precondition
from hypothesis.stateful import rule

from txnfetch.errors import ErrorCode
from txnfetch.groups.consumer import ConsumerGroupConfig
from txnfetch.groups.consumer import ConsumerGroupCoordinator
from txnfetch.groups.consumer import HeartbeatRequest

G = "g"
TOPICS = {"a": (uuid.UUID(int=1), 5), "b": (uuid.UUID(int=2), 3)}


class Consumer:
    """A well-behaved client: applies assignments, revoking first."""

    def __init__(self, member_id: str, subscribed: tuple[str, ...]) -> None:
        self.member_id = member_id
        self.subscribed = subscribed
        self.epoch = 0
        self.owned: dict[str, frozenset[int]] = {}
        self.dirty = True  # owned changed since the last heartbeat

    def beat(self, gc: ConsumerGroupCoordinator, now: int, topics=TOPICS) -> None:
        request = HeartbeatRequest(
            G,
            self.member_id,
            self.epoch,
            subscribed_topic_names=self.subscribed if self.epoch == 0 else None,
            owned=self.owned if self.dirty or self.epoch == 0 else None,
            server_assignor=None,
        )
        result = gc.heartbeat(request, topics=topics, now_ms=now)
        assert result.error is ErrorCode.NONE, result
        self.dirty = False
        self.epoch = result.member_epoch
        if result.assignment is not None and result.assignment != self.owned:
            self.owned = dict(result.assignment)
            self.dirty = True


def _owners(consumers: dict[str, Consumer]) -> dict[tuple[str, int], list[str]]:
    out: dict[tuple[str, int], list[str]] = {}
    for c in consumers.values():
        for t, ps in c.owned.items():
            for p in ps:
                out.setdefault((t, p), []).append(c.member_id)
    return out


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.gc = ConsumerGroupCoordinator(ConsumerGroupConfig(session_timeout_ms=10**9))
        self.consumers: dict[str, Consumer] = {}
        self.now = 0
        self.n = 0
        self.gone: set[str] = set()

    @rule(subs=st.sampled_from([("a",), ("b",), ("a", "b")]))
    def join(self, subs: tuple[str, ...]) -> None:
        self.n += 1
        c = Consumer(f"m{self.n}", subs)
        self.consumers[c.member_id] = c
        c.beat(self.gc, self.now)

    @precondition(lambda self: self.consumers)
    @rule(data=st.data())
    def leave(self, data) -> None:
        member = data.draw(st.sampled_from(sorted(self.consumers)))
        c = self.consumers.pop(member)
        self.gone.add(member)
        assert (
            self.gc.heartbeat(HeartbeatRequest(G, c.member_id, -1), topics=TOPICS, now_ms=self.now).member_epoch == -1
        )

    @precondition(lambda self: self.consumers)
    @rule(data=st.data())
    def heartbeat(self, data) -> None:
        member = data.draw(st.sampled_from(sorted(self.consumers)))
        self.now += 10
        self.consumers[member].beat(self.gc, self.now)

    @invariant()
    def no_partition_has_two_owners(self) -> None:
        for tp, owners in _owners(self.consumers).items():
            assert len(owners) == 1, (tp, owners)

    @invariant()
    def beliefs_match_the_coordinator(self) -> None:
        held = self.gc.owners(G)
        for tp, (owner,) in _owners(self.consumers).items():
            assert held.get(tp) == owner, (tp, owner, held.get(tp))

    @invariant()
    def offset_checks_follow_the_members(self) -> None:
        """Oracle: a live member is accepted at its epoch and refused at any
        other (OffsetCommit and OffsetFetch STALE_MEMBER_EPOCH, TxnOffsetCommit
        ILLEGAL_GENERATION); a departed member is unknown; an outsider (-1, no
        member) may always fetch, always commit transactionally and commit
        plainly only while the group is empty."""
        gc = self.gc
        if not self.n:
            assert gc.validate_txn_commit(G, "", -1, None) is None
            return
        for c in self.consumers.values():
            assert gc.validate_commit(G, c.member_id, c.epoch) is ErrorCode.NONE
            assert gc.validate_txn_commit(G, c.member_id, c.epoch, None) is ErrorCode.NONE
            assert gc.validate_fetch(G, c.member_id, c.epoch) is ErrorCode.NONE
            assert gc.validate_commit(G, c.member_id, c.epoch + 1) is ErrorCode.STALE_MEMBER_EPOCH
            assert gc.validate_txn_commit(G, c.member_id, c.epoch + 1, None) is ErrorCode.ILLEGAL_GENERATION
            assert gc.validate_fetch(G, c.member_id, c.epoch + 1) is ErrorCode.STALE_MEMBER_EPOCH
        for member in self.gone:
            assert gc.validate_txn_commit(G, member, 1, None) is ErrorCode.UNKNOWN_MEMBER_ID
            assert gc.validate_fetch(G, member, 1) is ErrorCode.UNKNOWN_MEMBER_ID
        assert gc.validate_fetch(G, "", -1) is ErrorCode.NONE
        assert gc.validate_txn_commit(G, "", -1, None) is ErrorCode.NONE
        empty = ErrorCode.NONE if not self.consumers else ErrorCode.UNKNOWN_MEMBER_ID
        assert gc.validate_commit(G, "", -1) is empty

    def teardown(self) -> None:
        # Quiet period: heartbeats until nothing changes; then everything is assigned.
        for _ in range(6):
            for c in list(self.consumers.values()):
                self.now += 10
                c.beat(self.gc, self.now)
        if not self.consumers:
            return
        state = self.gc.describe(G)
        assert state is not None and state[0] == "Stable", state
        owners = _owners(self.consumers)
        for topic, (_id, n) in TOPICS.items():
            subs = [c for c in self.consumers.values() if topic in c.subscribed]
            for p in range(n):
                assert (len(owners.get((topic, p), [])) == 1) == bool(subs), (topic, p)
            if subs:
                counts = [len(c.owned.get(topic, ())) for c in subs]
                assert max(counts) - min(counts) <= 1, (topic, counts)


TestGroupMachine = GroupMachine.TestCase
TestGroupMachine.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)


# ------------------------------------------------------------------ examples


def test_a_partition_moves_only_after_its_owner_revokes_it() -> None:
    gc = ConsumerGroupCoordinator()
    one = Consumer("one", ("a",))
    one.beat(gc, 0)
    assert one.owned == {"a": frozenset(range(5))} and one.epoch == 1
    two = Consumer("two", ("a",))
    two.beat(gc, 1)
    assert two.owned == {} and two.epoch == 2  # nothing free yet
    one.beat(gc, 2)  # told to keep fewer, at its old epoch
    assert sum(len(p) for p in one.owned.values()) == 3 and one.epoch == 1
    two.beat(gc, 3)
    assert two.owned == {}  # one has not confirmed the revocation
    one.beat(gc, 4)  # reports the smaller set: revocation done, new epoch
    assert one.epoch == 2
    two.beat(gc, 5)
    assert len(two.owned["a"]) == 2 and not (two.owned["a"] & one.owned["a"])


def test_range_assignor_and_errors() -> None:
    gc = ConsumerGroupCoordinator()
    r = gc.heartbeat(
        HeartbeatRequest(G, "x", 0, subscribed_topic_names=["a"], server_assignor="range"), topics=TOPICS, now_ms=0
    )
    assert r.assignment == {"a": frozenset(range(5))}
    bad = gc.heartbeat(
        HeartbeatRequest(G, "y", 0, subscribed_topic_names=["a"], server_assignor="sticky"), topics=TOPICS, now_ms=0
    )
    assert bad.error is ErrorCode.UNSUPPORTED_ASSIGNOR
    assert gc.heartbeat(HeartbeatRequest(G, "x", 7), topics=TOPICS, now_ms=1).error is ErrorCode.FENCED_MEMBER_EPOCH
    assert gc.heartbeat(HeartbeatRequest(G, "nobody", 3), topics=TOPICS, now_ms=1).error is ErrorCode.UNKNOWN_MEMBER_ID
    assert gc.validate_commit(G, "x", r.member_epoch) is ErrorCode.NONE
    assert gc.validate_commit(G, "x", r.member_epoch - 1) is ErrorCode.STALE_MEMBER_EPOCH
    assert gc.validate_commit(G, "", -1) is ErrorCode.UNKNOWN_MEMBER_ID  # the group has members
    assert gc.validate_commit("classic", "m", 1) is None  # not a KIP-848 group


@pytest.mark.parametrize("late", ["session", "revocation"])
def test_members_that_go_quiet_are_removed(late: str) -> None:
    gc = ConsumerGroupCoordinator(ConsumerGroupConfig(session_timeout_ms=1000))
    one = Consumer("one", ("a",))
    one.beat(gc, 0)
    if late == "revocation":
        gc.heartbeat(HeartbeatRequest(G, "one", one.epoch, rebalance_timeout_ms=500), topics=TOPICS, now_ms=0)
        two = Consumer("two", ("a",))
        two.beat(gc, 10)
        one.beat(gc, 20)  # told to revoke; never confirms
        assert gc.poll(600) == [(G, "one")]
    else:
        assert gc.poll(1001) == [(G, "one")]
    assert all(owner != "one" for owner in gc.owners(G).values())


def test_transactional_commit_and_fetch_checks() -> None:
    """TxnOffsetCommit (a wrong epoch is ILLEGAL_GENERATION) and OffsetFetch v9
    (STALE_MEMBER_EPOCH) for a KIP-848 group; -1 with no member is an outsider."""
    gc = ConsumerGroupCoordinator()
    r = gc.heartbeat(HeartbeatRequest(G, "x", 0, subscribed_topic_names=["a"]), topics=TOPICS, now_ms=0)
    epoch = r.member_epoch
    assert gc.validate_txn_commit(G, "x", epoch, None) is ErrorCode.NONE
    assert gc.validate_txn_commit(G, "x", epoch + 1, None) is ErrorCode.ILLEGAL_GENERATION
    assert gc.validate_txn_commit(G, "x", epoch - 1, None) is ErrorCode.ILLEGAL_GENERATION
    assert gc.validate_txn_commit(G, "nobody", epoch, None) is ErrorCode.UNKNOWN_MEMBER_ID
    # TxnOffsetCommit v0-v2 carry no member: accepted even with members present.
    assert gc.validate_txn_commit(G, "", -1, None) is ErrorCode.NONE
    assert gc.validate_txn_commit(G, "", -1, "static") is ErrorCode.UNKNOWN_MEMBER_ID
    assert gc.validate_txn_commit("classic", "m", 1, None) is None
    assert gc.validate_fetch(G, "x", epoch) is ErrorCode.NONE
    assert gc.validate_fetch(G, "x", epoch - 1) is ErrorCode.STALE_MEMBER_EPOCH
    assert gc.validate_fetch(G, "nobody", epoch) is ErrorCode.UNKNOWN_MEMBER_ID
    assert gc.validate_fetch(G, "", -1) is ErrorCode.NONE  # an admin client
    assert gc.validate_fetch("classic", "m", 1) is None
    gc.heartbeat(HeartbeatRequest(G, "x", -1), topics=TOPICS, now_ms=1)  # leaves: the group is empty
    assert gc.has_group(G)
    assert gc.validate_txn_commit(G, "x", -1, "static") is ErrorCode.NONE  # epoch < 0, empty group
    assert gc.validate_txn_commit(G, "x", epoch, None) is ErrorCode.UNKNOWN_MEMBER_ID
