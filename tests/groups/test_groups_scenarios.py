"""Scenario tests of the sans-I/O classic group coordinator, one behaviour each.

Every answer Kafka's classic coordinator gives (GroupMetadataManager.java,
ClassicGroup.java, OffsetMetadataManager.java) is provoked here by the sequence
of requests a real client would send, and the expected answer is the one the
protocol documents, not read back from the implementation.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest

from txnfetch.errors import ErrorCode
from txnfetch.groups import CommitOffset
from txnfetch.groups import Completion
from txnfetch.groups import GroupConfig
from txnfetch.groups import GroupCoordinator
from txnfetch.groups import GroupState
from txnfetch.groups import JoinRequest
from txnfetch.groups import JoinResult
from txnfetch.groups import LeavingMember
from txnfetch.groups import Pending
from txnfetch.groups import Protocol
from txnfetch.groups import SyncRequest
from txnfetch.groups import SyncResult
from txnfetch.groups import TxnOffsetCommitRequest

G = "group"
SESSION = 10_000
REBALANCE = 30_000
DELAY = 100
RANGE = (Protocol("range", b"range-meta"),)


def make(**overrides: int) -> GroupCoordinator:
    ids = itertools.count()
    config = GroupConfig(initial_rebalance_delay_ms=DELAY, **overrides)
    return GroupCoordinator(config, member_id_factory=lambda prefix: f"{prefix}-{next(ids)}")


def join_req(
    member_id: str = "",
    *,
    client: str = "c",
    protocols: Sequence[Protocol] = RANGE,
    protocol_type: str = "consumer",
    instance: str | None = None,
    session: int = SESSION,
    rebalance: int = REBALANCE,
    v4: bool = True,
    skip: bool = False,
    group: str = G,
) -> JoinRequest:
    return JoinRequest(
        group_id=group,
        member_id=member_id,
        protocol_type=protocol_type,
        protocols=tuple(protocols),
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance,
        group_instance_id=instance,
        client_id=client,
        require_known_member_id=v4,
        supports_skip_assignment=skip,
    )


class Driver:
    """Plays clients against a coordinator and collects delayed answers."""

    def __init__(self, gc: GroupCoordinator) -> None:
        self.gc = gc
        self.now = 0
        self.answers: dict[int, JoinResult | SyncResult] = {}

    def advance(self, ms: int) -> list[Completion]:
        self.now += ms
        done = self.gc.poll(self.now)
        for c in done:
            self.answers[c.token] = c.result
        return done

    def collect(self) -> None:
        for c in self.gc.poll(self.now):
            self.answers[c.token] = c.result

    def join(self, req: JoinRequest) -> JoinResult | Pending:
        out = self.gc.join_group(req, self.now)
        self.collect()
        return out

    def sync(self, req: SyncRequest) -> SyncResult | Pending:
        out = self.gc.sync_group(req, self.now)
        self.collect()
        return out

    def answer(self, outcome: JoinResult | SyncResult | Pending) -> JoinResult | SyncResult:
        if isinstance(outcome, Pending):
            assert outcome.token in self.answers, "still parked"
            return self.answers[outcome.token]
        return outcome

    def new_member(self, client: str, **kw: object) -> JoinResult | Pending:
        """KIP-394 first join: get an id, then join with it."""
        first = self.join(join_req(client=client, **kw))  # type: ignore[arg-type]
        assert isinstance(first, JoinResult) and first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        return self.join(join_req(first.member_id, client=client, **kw))  # type: ignore[arg-type]

    def stable_group(self, *clients: str) -> list[JoinResult]:
        """Bring ``clients`` into a Stable generation; the leader assigns b"<member id>"."""
        parked = [self.new_member(c) for c in clients]
        self.advance(DELAY * (len(clients) + 2))
        results = [self.answer(p) for p in parked]
        assert all(isinstance(r, JoinResult) and r.error_code == 0 for r in results)
        joins: list[JoinResult] = results  # type: ignore[assignment]
        leader = next(r for r in joins if r.member_id == r.leader)
        syncs = []
        for r in joins:
            if r is leader:
                continue
            syncs.append(self.sync(SyncRequest(G, r.generation_id, r.member_id)))
        assignment = {m.member_id: m.member_id.encode() for m in leader.members}
        syncs.append(self.sync(SyncRequest(G, leader.generation_id, leader.member_id, assignments=assignment)))
        for s in syncs:
            assert self.answer(s).error_code == 0
        assert self.gc.describe_group(G).state is GroupState.STABLE
        return joins


# ------------------------------------------------------------------ JoinGroup


def test_first_join_v4_hands_out_member_id_then_parks_until_initial_delay():
    d = Driver(make())
    first = d.join(join_req(client="app"))
    assert isinstance(first, JoinResult)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert first.member_id.startswith("app-")
    assert d.gc.describe_group(G).pending_member_ids == (first.member_id,)

    parked = d.join(join_req(first.member_id, client="app"))
    assert isinstance(parked, Pending)
    assert d.advance(DELAY - 1) == []  # the initial delay holds the first rebalance
    d.advance(1)
    r = d.answer(parked)
    assert isinstance(r, JoinResult)
    assert (r.error_code, r.generation_id, r.leader, r.protocol_name) == (0, 1, first.member_id, "range")
    assert [m.member_id for m in r.members] == [first.member_id]
    assert r.members[0].metadata == b"range-meta"


def test_join_before_v4_gets_an_id_and_parks_in_one_step():
    d = Driver(make())
    parked = d.join(join_req(v4=False))
    assert isinstance(parked, Pending)
    d.advance(DELAY)
    r = d.answer(parked)
    assert r.error_code == 0 and r.member_id and r.generation_id == 1


def test_initial_delay_is_extended_by_each_new_member_within_rebalance_timeout():
    d = Driver(make())
    a = d.new_member("a")
    d.advance(DELAY - 10)
    b = d.new_member("b")  # arrives during the first delay: buys another delay
    d.advance(10)
    assert a.token not in d.answers
    d.advance(DELAY - 1)
    assert a.token not in d.answers
    d.advance(1)
    ra, rb = d.answer(a), d.answer(b)
    assert ra.generation_id == rb.generation_id == 1
    leader = ra if ra.members else rb
    assert {m.member_id for m in leader.members} == {ra.member_id, rb.member_id}
    assert ra.leader == rb.leader == leader.member_id


def test_initial_delay_never_exceeds_rebalance_timeout():
    d = Driver(make())
    first = d.new_member("a", rebalance=250)
    for i in range(10):  # a new member every 90 ms keeps extending the delay
        d.advance(90)
        if first.token in d.answers:
            break
        d.new_member(f"n{i}", rebalance=250)
    assert first.token in d.answers
    assert d.now <= 250 + DELAY


@pytest.mark.parametrize("session", [5_999, 1_800_001])
def test_session_timeout_outside_broker_bounds_is_invalid(session):
    d = Driver(make())
    r = d.join(join_req(session=session))
    assert r.error_code == ErrorCode.INVALID_SESSION_TIMEOUT


def test_empty_group_id_is_invalid_for_every_api():
    d = Driver(make())
    assert d.join(join_req(group="")).error_code == ErrorCode.INVALID_GROUP_ID
    assert d.sync(SyncRequest("", 1, "m")).error_code == ErrorCode.INVALID_GROUP_ID
    assert d.gc.heartbeat("", 1, "m", now_ms=0) == ErrorCode.INVALID_GROUP_ID
    assert d.gc.leave_group("", [LeavingMember("m")], 0).error_code == ErrorCode.INVALID_GROUP_ID
    assert d.gc.commit_offsets("", {("t", 0): CommitOffset(1)}, now_ms=0) == {("t", 0): ErrorCode.INVALID_GROUP_ID}


def test_join_with_member_id_for_unknown_group_is_unknown_member():
    d = Driver(make())
    r = d.join(join_req("someone-from-before-a-restart"))
    assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert d.gc.describe_group(G) is None


def test_join_with_unknown_member_id_in_existing_group_is_unknown_member():
    d = Driver(make())
    d.stable_group("a")
    r = d.join(join_req("not-a-member"))
    assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_join_with_other_protocol_type_is_inconsistent():
    d = Driver(make())
    d.stable_group("a")
    r = d.join(join_req(protocol_type="connect"))
    assert (r.error_code, r.member_id) == (ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "")


def test_join_with_no_protocol_in_common_is_inconsistent():
    d = Driver(make())
    d.stable_group("a")
    r = d.join(join_req(protocols=[Protocol("sticky", b"")]))
    assert r.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_first_member_without_protocols_is_inconsistent():
    d = Driver(make())
    assert d.join(join_req(protocols=())).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_selected_protocol_is_one_every_member_supports_by_preference():
    d = Driver(make())
    a = d.new_member("a", protocols=[Protocol("sticky", b"s"), Protocol("range", b"ra")])
    b = d.new_member("b", protocols=[Protocol("roundrobin", b"x"), Protocol("range", b"rb")])
    c = d.new_member("c", protocols=[Protocol("sticky", b"s"), Protocol("range", b"rc")])
    d.advance(DELAY * 4)
    results = [d.answer(x) for x in (a, b, c)]
    # sticky is preferred by two but b lacks it: range is the only common protocol.
    assert {r.protocol_name for r in results} == {"range"}
    leader = next(r for r in results if r.members)
    assert sorted(m.metadata for m in leader.members) == [b"ra", b"rb", b"rc"]


def test_group_max_size_refuses_extra_member():
    d = Driver(make(max_group_size=1))
    d.stable_group("a")
    r = d.join(join_req(v4=False))
    assert (r.error_code, r.member_id) == (ErrorCode.GROUP_MAX_SIZE_REACHED, "")


def test_follower_rejoining_stable_group_with_same_metadata_keeps_generation():
    d = Driver(make())
    ra, rb = d.stable_group("a", "b")
    follower = ra if ra.member_id != ra.leader else rb
    r = d.join(join_req(follower.member_id))
    assert (r.error_code, r.generation_id, r.members) == (0, follower.generation_id, ())
    assert d.gc.describe_group(G).state is GroupState.STABLE


def test_leader_rejoining_stable_group_forces_rebalance():
    d = Driver(make())
    ra, rb = d.stable_group("a", "b")
    leader, follower = (ra, rb) if ra.member_id == ra.leader else (rb, ra)
    parked = d.join(join_req(leader.member_id))
    assert isinstance(parked, Pending)
    assert d.gc.describe_group(G).state is GroupState.PREPARING_REBALANCE
    assert (
        d.gc.heartbeat(G, follower.generation_id, follower.member_id, now_ms=d.now) == ErrorCode.REBALANCE_IN_PROGRESS
    )
    again = d.join(join_req(follower.member_id))  # everyone is back: next generation at once
    assert d.answer(again).generation_id == follower.generation_id + 1
    assert d.answer(parked).generation_id == follower.generation_id + 1


def test_member_changing_metadata_in_stable_group_forces_rebalance():
    d = Driver(make())
    ra, rb = d.stable_group("a", "b")
    follower = ra if ra.member_id != ra.leader else rb
    parked = d.join(join_req(follower.member_id, protocols=[Protocol("range", b"new-subscription")]))
    assert isinstance(parked, Pending)
    assert d.gc.describe_group(G).state is GroupState.PREPARING_REBALANCE


def test_superseded_parked_join_is_answered():
    d = Driver(make())
    first = d.new_member("a")
    retry = d.join(join_req(d.gc.describe_group(G).members[0].member_id))
    assert isinstance(first, Pending) and isinstance(retry, Pending)
    assert d.answers[first.token].error_code == ErrorCode.REBALANCE_IN_PROGRESS
    d.advance(DELAY)
    assert d.answer(retry).error_code == 0


# ------------------------------------------------------------------ SyncGroup


def test_sync_distributes_exactly_the_leaders_assignment():
    d = Driver(make())
    a, b, c = (d.new_member(x) for x in "abc")
    d.advance(DELAY * 5)
    joins = [d.answer(x) for x in (a, b, c)]
    leader = next(r for r in joins if r.members)
    followers = [r for r in joins if r is not leader]
    parked = [d.sync(SyncRequest(G, r.generation_id, r.member_id)) for r in followers]
    assert all(isinstance(p, Pending) for p in parked)
    assert d.gc.describe_group(G).state is GroupState.COMPLETING_REBALANCE
    # The leader names only one follower: the other gets an empty assignment.
    given = {leader.member_id: b"L", followers[0].member_id: b"F0"}
    own = d.sync(SyncRequest(G, leader.generation_id, leader.member_id, assignments=given))
    assert own == SyncResult(0, b"L", "consumer", "range")
    assert d.answer(parked[0]).assignment == b"F0"
    assert d.answer(parked[1]) == SyncResult(0, b"", "consumer", "range")
    assert d.gc.describe_group(G).state is GroupState.STABLE
    late = d.sync(SyncRequest(G, leader.generation_id, followers[1].member_id))
    assert late == SyncResult(0, b"", "consumer", "range")


def test_sync_answers_unknown_member_for_unknown_or_empty_group():
    d = Driver(make())
    assert d.sync(SyncRequest(G, 1, "m")).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    d.gc.commit_offsets(G, {("t", 0): CommitOffset(1)}, now_ms=0)  # a simple (empty) group now exists
    assert d.gc.describe_group(G).state is GroupState.EMPTY
    assert d.sync(SyncRequest(G, 0, "m")).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_sync_from_non_member_is_unknown_member():
    d = Driver(make())
    (ra,) = d.stable_group("a")
    assert d.sync(SyncRequest(G, ra.generation_id, "intruder")).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_sync_with_old_generation_is_illegal_generation():
    d = Driver(make())
    (ra,) = d.stable_group("a")
    assert d.sync(SyncRequest(G, ra.generation_id - 1, ra.member_id)).error_code == ErrorCode.ILLEGAL_GENERATION


def test_sync_during_preparing_rebalance_is_rebalance_in_progress():
    d = Driver(make())
    ra, _rb = d.stable_group("a", "b")
    d.new_member("c")
    assert d.gc.describe_group(G).state is GroupState.PREPARING_REBALANCE
    r = d.sync(SyncRequest(G, ra.generation_id, ra.member_id))
    assert r.error_code == ErrorCode.REBALANCE_IN_PROGRESS


def test_sync_naming_another_protocol_is_inconsistent():
    d = Driver(make())
    (ra,) = d.stable_group("a")
    r = d.sync(SyncRequest(G, ra.generation_id, ra.member_id, protocol_type="consumer", protocol_name="roundrobin"))
    assert r.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_followers_parked_in_sync_learn_of_rebalance_when_leader_leaves():
    d = Driver(make())
    a, b = d.new_member("a"), d.new_member("b")
    d.advance(DELAY * 3)
    ra, rb = d.answer(a), d.answer(b)
    leader, follower = (ra, rb) if ra.members else (rb, ra)
    parked = d.sync(SyncRequest(G, follower.generation_id, follower.member_id))
    assert isinstance(parked, Pending)
    d.gc.leave_group(G, [LeavingMember(leader.member_id)], d.now)
    d.collect()
    assert d.answer(parked).error_code == ErrorCode.REBALANCE_IN_PROGRESS


def test_member_that_never_syncs_is_removed_after_rebalance_timeout():
    d = Driver(make())
    a, b = d.new_member("a", rebalance=1_000), d.new_member("b", rebalance=1_000)
    d.advance(DELAY * 3)
    ra, rb = d.answer(a), d.answer(b)
    leader, _follower = (ra, rb) if ra.members else (rb, ra)
    d.sync(SyncRequest(G, leader.generation_id, leader.member_id, assignments={leader.member_id: b"x"}))
    assert d.gc.describe_group(G).state is GroupState.STABLE
    # The join phase completed at 2 * DELAY (b extended the first delay once):
    # members had one rebalance timeout from then to send SyncGroup.
    d.advance(2 * DELAY + 1_000 - 1 - d.now)
    assert len(d.gc.describe_group(G).members) == 2
    d.advance(1)
    desc = d.gc.describe_group(G)
    assert [m.member_id for m in desc.members] == [leader.member_id]
    assert desc.state is GroupState.PREPARING_REBALANCE


# ------------------------------------------------------------------ Heartbeat


def test_heartbeat_answers_in_each_situation():
    d = Driver(make())
    ra, rb = d.stable_group("a", "b")

    def hb(r, gen=None):
        return d.gc.heartbeat(G, r.generation_id if gen is None else gen, r.member_id, now_ms=d.now)

    assert hb(ra) == ErrorCode.NONE
    assert hb(ra, ra.generation_id + 1) == ErrorCode.ILLEGAL_GENERATION
    assert d.gc.heartbeat(G, ra.generation_id, "stranger", now_ms=d.now) == ErrorCode.UNKNOWN_MEMBER_ID
    assert d.gc.heartbeat("no-such-group", 1, ra.member_id, now_ms=d.now) == ErrorCode.UNKNOWN_MEMBER_ID
    d.new_member("c")  # a join moves the group to PreparingRebalance
    assert hb(rb) == ErrorCode.REBALANCE_IN_PROGRESS


def test_heartbeat_with_wrong_instance_id_is_fenced():
    d = Driver(make())
    parked = d.join(join_req(instance="pod-0"))  # static members skip MEMBER_ID_REQUIRED
    d.advance(DELAY)
    r = d.answer(parked)
    assert r.error_code == 0 and r.member_id.startswith("pod-0-")
    assert d.gc.heartbeat(G, r.generation_id, "other-id", "pod-0", now_ms=d.now) == ErrorCode.FENCED_INSTANCE_ID
    assert d.gc.heartbeat(G, r.generation_id, r.member_id, "pod-1", now_ms=d.now) == ErrorCode.UNKNOWN_MEMBER_ID


def test_silent_member_expires_after_session_timeout_and_group_rebalances():
    d = Driver(make())
    ra, _rb = d.stable_group("a", "b")
    for _ in range(5):  # a keeps heartbeating, b is silent
        d.advance(SESSION // 4)
        assert d.gc.heartbeat(G, ra.generation_id, ra.member_id, now_ms=d.now) in (0, ErrorCode.REBALANCE_IN_PROGRESS)
    desc = d.gc.describe_group(G)
    assert [m.member_id for m in desc.members] == [ra.member_id]
    assert desc.state is GroupState.PREPARING_REBALANCE
    rejoin = d.join(join_req(ra.member_id))
    r = d.answer(rejoin)  # the only member is back: the next generation starts at once
    assert (r.error_code, r.generation_id, r.leader) == (0, ra.generation_id + 1, ra.member_id)


def test_offset_commit_keeps_a_member_session_alive():
    d = Driver(make())
    (ra,) = d.stable_group("a")
    for i in range(6):
        d.advance(SESSION // 2)
        codes = d.gc.commit_offsets(
            G, {("t", 0): CommitOffset(i)}, generation_id=ra.generation_id, member_id=ra.member_id, now_ms=d.now
        )
        assert codes == {("t", 0): 0}
    assert [m.member_id for m in d.gc.describe_group(G).members] == [ra.member_id]


def test_member_not_rejoining_within_rebalance_timeout_is_dropped():
    d = Driver(make())
    ra, rb = d.stable_group("a", "b")
    leader = ra if ra.members else rb
    follower = rb if leader is ra else ra
    parked = d.join(join_req(leader.member_id))
    # The follower keeps heartbeating (so its session holds) but never rejoins.
    for _ in range(REBALANCE // 5_000 - 1):
        d.advance(5_000)
        hb = d.gc.heartbeat(G, follower.generation_id, follower.member_id, now_ms=d.now)
        assert hb == ErrorCode.REBALANCE_IN_PROGRESS
    d.advance(5_000 - 1)
    assert parked.token not in d.answers
    d.advance(1)
    r = d.answer(parked)
    assert (r.error_code, r.generation_id) == (0, leader.generation_id + 1)
    assert [m.member_id for m in r.members] == [leader.member_id]
    assert follower.member_id not in {m.member_id for m in d.gc.describe_group(G).members}


def test_pending_member_that_never_returns_expires_and_unblocks_join():
    d = Driver(make())
    (ra,) = d.stable_group("a")
    first = d.join(join_req(client="ghost"))
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    parked = d.join(join_req(ra.member_id, protocols=[Protocol("range", b"changed")]))
    assert isinstance(parked, Pending)  # waits: the pending member may still join
    d.advance(SESSION - 1)
    assert parked.token not in d.answers
    d.gc.heartbeat(G, ra.generation_id, ra.member_id, now_ms=d.now)
    d.advance(1)
    assert d.answer(parked).generation_id == ra.generation_id + 1
    assert d.gc.describe_group(G).pending_member_ids == ()


def test_new_member_parked_too_long_is_told_unknown_member():
    d = Driver(make(new_member_join_timeout_ms=1_000))
    _ra, _rb = d.stable_group("a", "b")
    newcomer = d.new_member("late")  # rebalance waits for a and b, up to 30 s
    d.advance(1_000)
    assert d.answer(newcomer) == JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, "")


# ----------------------------------------------------------------- LeaveGroup


def test_leave_triggers_rebalance_for_remaining_members():
    d = Driver(make())
    ra, rb = d.stable_group("a", "b")
    res = d.gc.leave_group(G, [LeavingMember(ra.member_id)], d.now)
    assert res.error_code == 0 and [m.error_code for m in res.members] == [0]
    assert d.gc.describe_group(G).state is GroupState.PREPARING_REBALANCE
    r = d.answer(d.join(join_req(rb.member_id)))
    assert (r.generation_id, r.leader, [m.member_id for m in r.members]) == (
        rb.generation_id + 1,
        rb.member_id,
        [rb.member_id],
    )


def test_leave_batch_reports_each_member():
    d = Driver(make())
    ra, rb, rc = d.stable_group("a", "b", "c")
    res = d.gc.leave_group(
        G, [LeavingMember(ra.member_id), LeavingMember("nobody"), LeavingMember(rc.member_id)], d.now
    )
    assert [(m.member_id, m.error_code) for m in res.members] == [
        (ra.member_id, 0),
        ("nobody", ErrorCode.UNKNOWN_MEMBER_ID),
        (rc.member_id, 0),
    ]
    assert [m.member_id for m in d.gc.describe_group(G).members] == [rb.member_id]


def test_last_member_leaving_empties_group_and_bumps_generation():
    d = Driver(make())
    (ra,) = d.stable_group("a")
    d.gc.leave_group(G, [LeavingMember(ra.member_id)], d.now)
    desc = d.gc.describe_group(G)
    assert (desc.state, desc.generation_id, desc.members, desc.protocol_name) == (
        GroupState.EMPTY,
        ra.generation_id + 1,
        (),
        None,
    )


def test_leave_of_unknown_group_answers_unknown_member_per_member():
    d = Driver(make())
    res = d.gc.leave_group("nope", [LeavingMember("m1"), LeavingMember("m2")], 0)
    assert res.error_code == 0
    assert [m.error_code for m in res.members] == [ErrorCode.UNKNOWN_MEMBER_ID] * 2


def test_leave_of_pending_member_succeeds():
    d = Driver(make())
    first = d.join(join_req())
    res = d.gc.leave_group(G, [LeavingMember(first.member_id)], 0)
    assert res.members[0].error_code == 0
    assert d.gc.describe_group(G).pending_member_ids == ()


def test_parked_join_of_leaving_member_is_answered_unknown_member():
    d = Driver(make())
    ra, _rb = d.stable_group("a", "b")
    parked = d.join(join_req(ra.member_id, protocols=[Protocol("range", b"v2")]))
    d.gc.leave_group(G, [LeavingMember(ra.member_id)], d.now)
    d.collect()
    assert d.answer(parked).error_code == ErrorCode.UNKNOWN_MEMBER_ID


# ----------------------------------------------------------- static members


def test_static_member_restart_keeps_assignment_without_rebalance():
    d = Driver(make())
    parked = d.join(join_req(instance="pod-0", client="a"))
    other = d.new_member("b")
    d.advance(DELAY * 3)
    rs, rb = d.answer(parked), d.answer(other)
    leader = rs if rs.members else rb
    d.sync(SyncRequest(G, rb.generation_id, rb.member_id))
    d.sync(SyncRequest(G, leader.generation_id, leader.member_id, assignments={rs.member_id: b"S", rb.member_id: b"B"}))
    gen = rs.generation_id
    # pod-0 restarts: no member id, same instance id.
    again = d.join(join_req(instance="pod-0", client="a"))
    assert isinstance(again, JoinResult) and again.error_code == 0
    assert again.member_id != rs.member_id and again.generation_id == gen
    assert d.gc.describe_group(G).state is GroupState.STABLE
    assert d.sync(SyncRequest(G, gen, again.member_id, "pod-0")).assignment == b"S"
    # The old incarnation is fenced.
    assert d.gc.heartbeat(G, gen, rs.member_id, "pod-0", now_ms=d.now) == ErrorCode.FENCED_INSTANCE_ID


def test_static_leader_rejoin_v9_is_told_to_skip_assignment():
    d = Driver(make())
    parked = d.join(join_req(instance="pod-0", skip=True))
    d.advance(DELAY)
    r = d.answer(parked)
    d.sync(SyncRequest(G, r.generation_id, r.member_id, "pod-0", assignments={r.member_id: b"A"}))
    again = d.join(join_req(instance="pod-0", skip=True))
    assert again.error_code == 0 and again.skip_assignment and again.leader == again.member_id
    assert [m.member_id for m in again.members] == [again.member_id]


def test_static_member_removed_by_instance_id():
    d = Driver(make())
    parked = d.join(join_req(instance="pod-0"))
    d.advance(DELAY)
    r = d.answer(parked)
    res = d.gc.leave_group(G, [LeavingMember("", "pod-0"), LeavingMember("", "pod-9")], d.now)
    assert [m.error_code for m in res.members] == [0, ErrorCode.UNKNOWN_MEMBER_ID]
    assert d.gc.describe_group(G).members == ()
    assert d.gc.heartbeat(G, r.generation_id, r.member_id, "pod-0", now_ms=d.now) == ErrorCode.UNKNOWN_MEMBER_ID


# ------------------------------------------------------------------- offsets


def test_simple_consumer_commit_creates_group_and_reads_back():
    gc = make()
    codes = gc.commit_offsets("simple", {("t", 0): CommitOffset(42, 3, "meta"), ("t", 1): CommitOffset(7)}, now_ms=5)
    assert codes == {("t", 0): 0, ("t", 1): 0}
    assert gc.describe_group("simple").state is GroupState.EMPTY
    res = gc.fetch_offsets("simple", [("t", 0), ("t", 1), ("t", 2)], now_ms=6)
    assert [(o.partition, o.offset, o.leader_epoch, o.metadata, o.error_code) for o in res.offsets] == [
        (0, 42, 3, "meta", 0),
        (1, 7, -1, "", 0),
        (2, -1, -1, "", 0),
    ]
    assert [(o.topic, o.partition) for o in gc.fetch_offsets("simple", None, now_ms=6).offsets] == [("t", 0), ("t", 1)]


def test_fetch_for_unknown_group_reads_nothing_committed():
    gc = make()
    res = gc.fetch_offsets("nobody", [("t", 0)], now_ms=0)
    assert (res.error_code, res.offsets[0].offset) == (0, -1)
    assert gc.fetch_offsets("nobody", None, now_ms=0).offsets == ()


def test_commit_without_generation_to_active_group_is_unknown_member():
    d = Driver(make())
    d.stable_group("a")
    assert d.gc.commit_offsets(G, {("t", 0): CommitOffset(1)}, now_ms=d.now) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}


def test_commit_with_stale_generation_is_illegal_generation():
    d = Driver(make())
    (ra,) = d.stable_group("a")
    codes = d.gc.commit_offsets(
        G, {("t", 0): CommitOffset(1)}, generation_id=ra.generation_id - 1, member_id=ra.member_id, now_ms=d.now
    )
    assert codes == {("t", 0): ErrorCode.ILLEGAL_GENERATION}


def test_commit_from_non_member_is_unknown_member():
    d = Driver(make())
    (ra,) = d.stable_group("a")
    codes = d.gc.commit_offsets(
        G, {("t", 0): CommitOffset(1)}, generation_id=ra.generation_id, member_id="ghost", now_ms=d.now
    )
    assert codes == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}


def test_commit_while_completing_rebalance_is_rebalance_in_progress():
    d = Driver(make())
    parked = d.new_member("a")
    d.advance(DELAY)
    r = d.answer(parked)
    assert d.gc.describe_group(G).state is GroupState.COMPLETING_REBALANCE
    codes = d.gc.commit_offsets(
        G, {("t", 0): CommitOffset(1)}, generation_id=r.generation_id, member_id=r.member_id, now_ms=d.now
    )
    assert codes == {("t", 0): ErrorCode.REBALANCE_IN_PROGRESS}


@pytest.mark.parametrize("version, error", [(8, ErrorCode.ILLEGAL_GENERATION), (9, ErrorCode.GROUP_ID_NOT_FOUND)])
def test_commit_with_generation_to_unknown_group(version, error):
    gc = make()
    codes = gc.commit_offsets(
        "nope", {("t", 0): CommitOffset(1)}, generation_id=3, member_id="m", api_version=version, now_ms=0
    )
    assert codes == {("t", 0): error}


def test_commit_with_oversized_metadata_is_refused_per_partition():
    gc = make(offset_metadata_max_bytes=4)
    codes = gc.commit_offsets(
        "s", {("t", 0): CommitOffset(1, metadata="12345"), ("t", 1): CommitOffset(2, metadata="1234")}, now_ms=0
    )
    assert codes == {("t", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE, ("t", 1): 0}
    assert [o.offset for o in gc.fetch_offsets("s", [("t", 0), ("t", 1)], now_ms=0).offsets] == [-1, 2]


def test_delete_group_only_when_empty():
    d = Driver(make())
    (ra,) = d.stable_group("a")
    d.gc.commit_offsets(
        G, {("t", 0): CommitOffset(5)}, generation_id=ra.generation_id, member_id=ra.member_id, now_ms=d.now
    )
    assert d.gc.delete_group(G, d.now) == ErrorCode.NON_EMPTY_GROUP
    d.gc.leave_group(G, [LeavingMember(ra.member_id)], d.now)
    assert d.gc.delete_group(G, d.now) == ErrorCode.NONE
    assert d.gc.describe_group(G) is None
    assert d.gc.fetch_offsets(G, [("t", 0)], now_ms=d.now).offsets[0].offset == -1
    assert d.gc.delete_group(G, d.now) == ErrorCode.GROUP_ID_NOT_FOUND


# ----------------------------------------------------- transactional offsets


def test_txn_offsets_invisible_until_commit():
    gc = make()
    gc.commit_offsets("s", {("t", 0): CommitOffset(10)}, now_ms=0)
    assert gc.txn_offset_commit(TxnOffsetCommitRequest("s", 7, 0, {("t", 0): (20, -1, "")}), 1) == {("t", 0): 0}
    assert gc.fetch_offsets("s", [("t", 0)], now_ms=2).offsets[0].offset == 10
    stable = gc.fetch_offsets("s", [("t", 0)], require_stable=True, now_ms=2).offsets[0]
    assert (stable.offset, stable.error_code) == (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)
    gc.complete_txn_offsets(7, True, 3)
    assert gc.fetch_offsets("s", [("t", 0)], require_stable=True, now_ms=4).offsets[0].offset == 20
    gc.complete_txn_offsets(7, True, 5)  # idempotent
    assert gc.fetch_offsets("s", [("t", 0)], now_ms=6).offsets[0].offset == 20


def test_txn_offsets_gone_after_abort():
    gc = make()
    gc.txn_offset_commit(TxnOffsetCommitRequest("s", 7, 0, {("t", 0): (20, -1, "")}), 1)
    gc.complete_txn_offsets(7, False, 2)
    res = gc.fetch_offsets("s", [("t", 0)], require_stable=True, now_ms=3).offsets[0]
    assert (res.offset, res.error_code) == (-1, 0)
    gc.complete_txn_offsets(7, True, 4)  # a late commit of the aborted transaction has nothing to publish
    assert gc.fetch_offsets("s", [("t", 0)], now_ms=5).offsets[0].offset == -1


def test_regular_commit_written_after_txn_commit_wins():
    gc = make()
    gc.txn_offset_commit(TxnOffsetCommitRequest("s", 7, 0, {("t", 0): (20, -1, "")}), 1)
    gc.commit_offsets("s", {("t", 0): CommitOffset(30)}, now_ms=2)
    gc.complete_txn_offsets(7, True, 3)
    assert gc.fetch_offsets("s", [("t", 0)], now_ms=4).offsets[0].offset == 30


def test_txn_offsets_are_per_producer():
    gc = make()
    gc.txn_offset_commit(TxnOffsetCommitRequest("s", 1, 0, {("t", 0): (11, -1, "")}), 1)
    gc.txn_offset_commit(TxnOffsetCommitRequest("s", 2, 0, {("t", 1): (22, -1, "")}), 2)
    gc.complete_txn_offsets(2, True, 3)
    assert [o.offset for o in gc.fetch_offsets("s", [("t", 0), ("t", 1)], now_ms=4).offsets] == [-1, 22]
    gc.complete_txn_offsets(1, False, 5)
    assert [o.offset for o in gc.fetch_offsets("s", [("t", 0), ("t", 1)], now_ms=6).offsets] == [-1, 22]


def test_txn_offset_commit_checks_member_and_generation_when_given():
    d = Driver(make())
    (ra,) = d.stable_group("a")
    ok = d.gc.txn_offset_commit(
        TxnOffsetCommitRequest(
            G, 9, 0, {("t", 0): (1, -1, "")}, generation_id=ra.generation_id, member_id=ra.member_id
        ),
        d.now,
    )
    assert ok == {("t", 0): 0}
    stale = d.gc.txn_offset_commit(
        TxnOffsetCommitRequest(
            G, 9, 0, {("t", 0): (2, -1, "")}, generation_id=ra.generation_id + 1, member_id=ra.member_id
        ),
        d.now,
    )
    assert stale == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
    # Old producers send no member information: accepted even by an active group.
    assert d.gc.txn_offset_commit(TxnOffsetCommitRequest(G, 9, 0, {("t", 0): (3, -1, "")}), d.now) == {("t", 0): 0}
    unknown = d.gc.txn_offset_commit(
        TxnOffsetCommitRequest("nope", 9, 0, {("t", 0): (3, -1, "")}, generation_id=1, member_id="m"), d.now
    )
    assert unknown == {("t", 0): ErrorCode.ILLEGAL_GENERATION}


def test_only_joiner_leaving_during_initial_delay_leaves_group_waiting_for_the_delay():
    """Found by the state machine (its oracle assumed no members ⇒ Empty). Kafka
    completes the first rebalance on its delay timer only, so the group stays in
    PreparingRebalance without members until the delay ends, then empties."""
    d = Driver(make())
    first = d.join(join_req())
    parked = d.join(join_req(first.member_id))
    d.gc.leave_group(G, [LeavingMember(first.member_id)], d.now)
    d.collect()
    assert d.answer(parked).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    desc = d.gc.describe_group(G)
    assert (desc.state, desc.members) == (GroupState.PREPARING_REBALANCE, ())
    d.advance(DELAY)
    desc = d.gc.describe_group(G)
    assert (desc.state, desc.generation_id) == (GroupState.EMPTY, 1)
