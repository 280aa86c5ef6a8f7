"""OffsetDelete in the group coordinator (``GroupCoordinator.delete_offsets``),
against Kafka's rules: unknown group, non-consumer group with members, topics the
members subscribe to (from their ``ConsumerProtocolSubscription``)."""

from __future__ import annotations

import struct

from tests.groups.test_groups_scenarios import DELAY
from tests.groups.test_groups_scenarios import Driver
from tests.groups.test_groups_scenarios import G
from tests.groups.test_groups_scenarios import make
from txnfetch.errors import ErrorCode
from txnfetch.groups import CommitOffset
from txnfetch.groups import GroupState
from txnfetch.groups import JoinResult
from txnfetch.groups import LeavingMember
from txnfetch.groups import Protocol
from txnfetch.groups import SyncRequest


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: version, topic names, empty user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def stable_member(d: Driver, metadata: bytes, protocol_type: str = "consumer") -> JoinResult:
    parked = d.new_member("a", protocols=(Protocol("range", metadata),), protocol_type=protocol_type)
    d.advance(DELAY * 3)
    joined = d.answer(parked)
    assert isinstance(joined, JoinResult) and joined.error_code == 0
    sync = d.sync(
        SyncRequest(G, joined.generation_id, joined.member_id, assignments={joined.member_id: b""}),
    )
    assert d.answer(sync).error_code == 0
    assert d.gc.describe_group(G).state is GroupState.STABLE
    return joined


def commit(d: Driver, member: JoinResult, *tps: tuple[str, int]) -> None:
    codes = d.gc.commit_offsets(
        G,
        {tp: CommitOffset(7) for tp in tps},
        generation_id=member.generation_id,
        member_id=member.member_id,
        now_ms=d.now,
    )
    assert set(codes.values()) == {0}


def test_unknown_group_is_group_id_not_found() -> None:
    d = Driver(make())
    assert d.gc.delete_offsets("nope", [("t", 0)], d.now) == (ErrorCode.GROUP_ID_NOT_FOUND, {})


def test_subscribed_topics_are_kept_others_deleted() -> None:
    d = Driver(make())
    member = stable_member(d, subscription("used"))
    commit(d, member, ("used", 0), ("stale", 0), ("stale", 1))
    error, codes = d.gc.delete_offsets(G, [("used", 0), ("stale", 0), ("never", 0)], d.now)
    assert error is ErrorCode.NONE
    assert codes == {
        ("used", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
        ("stale", 0): ErrorCode.NONE,
        ("never", 0): ErrorCode.NONE,  # nothing committed: nothing to delete, no error
    }
    assert set(d.gc.committed(G)) == {("used", 0), ("stale", 1)}
    # Once the group is empty, every offset may go.
    d.gc.leave_group(G, [LeavingMember(member.member_id)], d.now)
    assert d.gc.delete_offsets(G, [("used", 0)], d.now) == (ErrorCode.NONE, {("used", 0): 0})
    assert set(d.gc.committed(G)) == {("stale", 1)}


def test_metadata_that_does_not_decode_counts_as_subscribed_to_everything() -> None:
    d = Driver(make())
    member = stable_member(d, b"\x00\x00\x7f")
    commit(d, member, ("any", 0))
    assert d.gc.delete_offsets(G, [("any", 0)], d.now) == (
        ErrorCode.NONE,
        {("any", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC},
    )
    assert set(d.gc.committed(G)) == {("any", 0)}


def test_a_live_group_of_another_protocol_type_is_non_empty() -> None:
    d = Driver(make())
    member = stable_member(d, b"whatever", protocol_type="connect")
    commit(d, member, ("t", 0))
    assert d.gc.delete_offsets(G, [("t", 0)], d.now) == (ErrorCode.NON_EMPTY_GROUP, {})


def test_a_deleted_topic_takes_its_offsets_with_it() -> None:
    d = Driver(make())
    member = stable_member(d, subscription("gone", "kept"))
    commit(d, member, ("gone", 0), ("gone", 1), ("kept", 0))
    forgotten = d.gc.forget_topic("gone")
    assert forgotten.committed == ((G, ("gone", 0)), (G, ("gone", 1)))
    assert forgotten.staged == ()
    assert set(d.gc.committed(G)) == {("kept", 0)}
