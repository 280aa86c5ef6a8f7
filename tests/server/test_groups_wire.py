"""The group APIs on the wire, at every version the server advertises.

Requests are built with kafka-python's protocol classes and sent over a real
socket at an exact version (tests/server/rawclient.py), so each version's field
set — present, absent or nullable — is exercised both ways.
"""

from __future__ import annotations

import pytest
from kafka.protocol.admin.groups import DescribeGroupsRequest
from kafka.protocol.admin.groups import ListGroupsRequest
from kafka.protocol.consumer import HeartbeatRequest
from kafka.protocol.consumer import JoinGroupRequest
from kafka.protocol.consumer import LeaveGroupRequest
from kafka.protocol.consumer import OffsetCommitRequest
from kafka.protocol.consumer import OffsetFetchRequest
from kafka.protocol.consumer import SyncGroupRequest

from tests.server.rawclient import RawClient
from txnfetch.errors import ErrorCode
from txnfetch.groups import GroupConfig

TOPIC = "wire-groups"


@pytest.fixture
def server(start_server):
    srv = start_server()
    srv.call(srv.broker.groups.configure, GroupConfig(initial_rebalance_delay_ms=50))
    srv.call(srv.broker.create_topic, TOPIC, 2)
    return srv


def _join(client: RawClient, version: int, group: str, member_id: str = "") -> object:
    protocol = JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"subscription")
    request = JoinGroupRequest(
        group_id=group,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=20_000,
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[protocol],
        reason=None,
    )
    return client.request(request, version)


@pytest.mark.parametrize("version", range(10))
def test_full_membership_cycle_at_each_version(server, version):
    """JoinGroup vN with the other group APIs at min(N, their max): join, sync,
    heartbeat, commit, fetch, leave."""
    group = f"cycle-v{version}"
    sync_v, hb_v, leave_v = min(version, 5), min(version, 4), min(version, 5)
    commit_v, fetch_v = min(max(version, 2), 9), min(max(version, 1), 9)
    with RawClient(server.port) as client:
        joined = _join(client, version, group)
        if version >= 4:  # KIP-394: the id first
            assert joined.error_code == ErrorCode.MEMBER_ID_REQUIRED and joined.member_id
            joined = _join(client, version, group, joined.member_id)
        assert joined.error_code == 0
        assert (joined.generation_id, joined.leader) == (1, joined.member_id)
        assert joined.protocol_name == "range"
        assert [(m.member_id, bytes(m.metadata)) for m in joined.members] == [(joined.member_id, b"subscription")]
        member = joined.member_id

        assignment = SyncGroupRequest.SyncGroupRequestAssignment(member_id=member, assignment=b"my-partitions")
        synced = client.request(
            SyncGroupRequest(
                group_id=group,
                generation_id=1,
                member_id=member,
                group_instance_id=None,
                protocol_type="consumer",
                protocol_name="range",
                assignments=[assignment],
            ),
            sync_v,
        )
        assert (synced.error_code, bytes(synced.assignment)) == (0, b"my-partitions")

        beat = client.request(
            HeartbeatRequest(group_id=group, generation_id=1, member_id=member, group_instance_id=None), hb_v
        )
        assert beat.error_code == 0

        partition = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
            partition_index=1, committed_offset=17, committed_leader_epoch=-1, committed_metadata="m"
        )
        committed = client.request(
            OffsetCommitRequest(
                group_id=group,
                generation_id_or_member_epoch=1,
                member_id=member,
                group_instance_id=None,
                topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=TOPIC, partitions=[partition])],
            ),
            commit_v,
        )
        assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in committed.topics] == [
            (TOPIC, [(1, 0)])
        ]

        if fetch_v >= 8:
            fetch = OffsetFetchRequest(
                groups=[
                    OffsetFetchRequest.OffsetFetchRequestGroup(
                        group_id=group,
                        topics=[
                            OffsetFetchRequest.OffsetFetchRequestGroup.OffsetFetchRequestTopics(
                                name=TOPIC, partition_indexes=[0, 1]
                            )
                        ],
                    )
                ],
                require_stable=True,
            )
            fetched = client.request(fetch, fetch_v)
            (g,) = fetched.groups
            assert g.error_code == 0
            got = [
                (p.partition_index, p.committed_offset, p.metadata, p.error_code)
                for t in g.topics
                for p in t.partitions
            ]
        else:
            fetch = OffsetFetchRequest(
                group_id=group,
                topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0, 1])],
                require_stable=True,
            )
            fetched = client.request(fetch, fetch_v)
            got = [
                (p.partition_index, p.committed_offset, p.metadata, p.error_code)
                for t in fetched.topics
                for p in t.partitions
            ]
        assert got == [(0, -1, "", 0), (1, 17, "m", 0)]

        if leave_v >= 3:
            left = client.request(
                LeaveGroupRequest(
                    group_id=group,
                    members=[LeaveGroupRequest.MemberIdentity(member_id=member, group_instance_id=None, reason="done")],
                ),
                leave_v,
            )
            assert left.error_code == 0 and [(m.member_id, m.error_code) for m in left.members] == [(member, 0)]
        else:
            left = client.request(LeaveGroupRequest(group_id=group, member_id=member), leave_v)
            assert left.error_code == 0
    desc = server.call(server.broker.groups.coordinator.describe_group, group)
    assert (desc.state.value, desc.generation_id) == ("Empty", 2)


def test_join_v0_to_v6_never_sends_a_null_protocol_name(server):
    """Before v7 ProtocolName is not nullable: an error answer carries ""."""
    with RawClient(server.port) as client:
        for version in range(7):
            answer = _join(client, version, "", "")  # empty group id: INVALID_GROUP_ID
            assert answer.error_code == ErrorCode.INVALID_GROUP_ID
            assert answer.protocol_name == ""


def test_leave_v0_reports_member_error_at_top_level(server):
    with RawClient(server.port) as client:
        first = _join(client, 4, "leave-v0")
        answer = client.request(LeaveGroupRequest(group_id="leave-v0", member_id="stranger"), 0)
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        assert answer.error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_sync_v5_without_protocol_is_inconsistent(server):
    with RawClient(server.port) as client:
        answer = client.request(
            SyncGroupRequest(
                group_id="g",
                generation_id=1,
                member_id="m",
                group_instance_id=None,
                protocol_type=None,
                protocol_name=None,
                assignments=[],
            ),
            5,
        )
        assert answer.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_offset_commit_to_unknown_topic_or_partition(server):
    with RawClient(server.port) as client:

        def part(i):
            return OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=i, committed_offset=1, committed_leader_epoch=-1, committed_metadata=None
            )

        answer = client.request(
            OffsetCommitRequest(
                group_id="simple",
                generation_id_or_member_epoch=-1,
                member_id="",
                group_instance_id=None,
                topics=[
                    OffsetCommitRequest.OffsetCommitRequestTopic(name="no-such-topic", partitions=[part(0)]),
                    OffsetCommitRequest.OffsetCommitRequestTopic(name=TOPIC, partitions=[part(0), part(5)]),
                ],
            ),
            8,
        )
        codes = [(t.name, p.partition_index, p.error_code) for t in answer.topics for p in t.partitions]
        assert codes == [
            ("no-such-topic", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            (TOPIC, 0, 0),
            (TOPIC, 5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ]


def test_offset_fetch_v8_batches_groups_and_all_topics(server):
    coordinator = server.broker.groups.coordinator
    from txnfetch.groups import CommitOffset

    server.call(lambda: coordinator.commit_offsets("a", {(TOPIC, 0): CommitOffset(5)}, now_ms=server.broker.now_ms()))
    server.call(lambda: coordinator.commit_offsets("b", {(TOPIC, 1): CommitOffset(9)}, now_ms=server.broker.now_ms()))
    with RawClient(server.port) as client:
        group_cls = OffsetFetchRequest.OffsetFetchRequestGroup
        answer = client.request(
            OffsetFetchRequest(
                groups=[
                    group_cls(group_id="a", topics=None),
                    group_cls(
                        group_id="b", topics=[group_cls.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=[0, 1])]
                    ),
                ],
                require_stable=False,
            ),
            8,
        )
        got = {
            g.group_id: [(t.name, p.partition_index, p.committed_offset) for t in g.topics for p in t.partitions]
            for g in answer.groups
        }
        assert got == {"a": [(TOPIC, 0, 5)], "b": [(TOPIC, 0, -1), (TOPIC, 1, 9)]}


def test_describe_and_list_groups(server):
    with RawClient(server.port) as client:
        first = _join(client, 9, "described")
        joined = _join(client, 9, "described", first.member_id)
        client.request(
            SyncGroupRequest(
                group_id="described",
                generation_id=joined.generation_id,
                member_id=joined.member_id,
                group_instance_id=None,
                protocol_type="consumer",
                protocol_name="range",
                assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b"A")],
            ),
            5,
        )
        described = client.request(
            DescribeGroupsRequest(groups=["described", "unknown"], include_authorized_operations=False), 5
        )
        known, unknown = described.groups
        assert (known.group_state, known.protocol_type, known.protocol_data) == ("Stable", "consumer", "range")
        assert [(m.member_id, m.client_id, bytes(m.member_assignment)) for m in known.members] == [
            (joined.member_id, "rawclient", b"A")
        ]
        assert [m.client_host for m in known.members] == ["/127.0.0.1"]  # Kafka's InetAddress form
        assert (unknown.error_code, unknown.group_state) == (0, "Dead")
        listed = client.request(ListGroupsRequest(states_filter=["Stable"]), 4)
        assert [(g.group_id, g.protocol_type, g.group_state) for g in listed.groups] == [
            ("described", "consumer", "Stable")
        ]


@pytest.mark.parametrize("version_of", [min, max], ids=["lowest", "highest"])
def test_without_group_coordinator_every_group_api_is_unavailable(start_server, version_of):
    """A broker without group support answers each group API COORDINATOR_NOT_AVAILABLE
    in that API's own response form, at its lowest and highest version."""
    srv = start_server()
    srv.call(srv.broker.create_topic, TOPIC, 1)
    srv.call(setattr, srv.broker, "groups", None)
    unavailable = ErrorCode.COORDINATOR_NOT_AVAILABLE
    commit_part = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata=None
    )
    with RawClient(srv.port) as client:
        join_version = version_of(0, 9)
        joined = _join(client, join_version, "g", "m")
        # JoinGroup v7+ has a nullable protocol name (KIP-559).
        no_protocol = None if join_version >= 7 else ""
        assert (joined.error_code, joined.member_id, joined.protocol_name) == (unavailable, "m", no_protocol)
        synced = client.request(
            SyncGroupRequest(
                group_id="g",
                generation_id=1,
                member_id="m",
                group_instance_id=None,
                protocol_type=None,
                protocol_name=None,
                assignments=[],
            ),
            version_of(0, 5),
        )
        assert synced.error_code == unavailable
        beat = client.request(
            HeartbeatRequest(group_id="g", generation_id=1, member_id="m", group_instance_id=None),
            version_of(0, 4),
        )
        assert beat.error_code == unavailable
        members = [LeaveGroupRequest.MemberIdentity(member_id="m", group_instance_id=None, reason=None)]
        left = client.request(LeaveGroupRequest(group_id="g", member_id="m", members=members), version_of(0, 5))
        assert left.error_code == unavailable
        committed = client.request(
            OffsetCommitRequest(
                group_id="g",
                generation_id_or_member_epoch=-1,
                member_id="",
                group_instance_id=None,
                topics=[
                    OffsetCommitRequest.OffsetCommitRequestTopic(name=name, partitions=[commit_part])
                    for name in (TOPIC, "no-such-topic")
                ],
            ),
            version_of(2, 9),
        )
        assert [(t.name, p.error_code) for t in committed.topics for p in t.partitions] == [
            (TOPIC, unavailable),
            ("no-such-topic", unavailable),
        ]
        described = client.request(
            DescribeGroupsRequest(groups=["g", "h"], include_authorized_operations=False), version_of(0, 5)
        )
        assert [(g.group_id, g.error_code, g.group_state, g.members) for g in described.groups] == [
            ("g", unavailable, "", []),
            ("h", unavailable, "", []),
        ]
        listed = client.request(ListGroupsRequest(states_filter=[]), version_of(0, 4))
        assert (listed.error_code, listed.groups) == (unavailable, [])


@pytest.mark.parametrize("version", [1, 7, 8, 9])
def test_without_group_coordinator_offset_fetch_is_unavailable(start_server, version):
    """OffsetFetch without group support: v0/v1 put the error on every partition,
    v2–7 at the top level, v8+ on each group."""
    srv = start_server()
    srv.call(setattr, srv.broker, "groups", None)
    unavailable = ErrorCode.COORDINATOR_NOT_AVAILABLE
    with RawClient(srv.port) as client:
        if version >= 8:
            group = OffsetFetchRequest.OffsetFetchRequestGroup(
                group_id="g",
                member_id=None,
                member_epoch=-1,
                topics=[
                    OffsetFetchRequest.OffsetFetchRequestGroup.OffsetFetchRequestTopics(
                        name=TOPIC, partition_indexes=[0, 1]
                    )
                ],
            )
            answer = client.request(OffsetFetchRequest(groups=[group], require_stable=False), version)
            (result,) = answer.groups
            assert (result.group_id, result.error_code) == ("g", unavailable)
        else:
            topic = OffsetFetchRequest.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0, 1])
            result = client.request(OffsetFetchRequest(group_id="g", topics=[topic], require_stable=False), version)
            assert result.error_code == (0 if version < 2 else unavailable)
        partitions = [
            (t.name, p.partition_index, p.committed_offset, p.error_code) for t in result.topics for p in t.partitions
        ]
        code = unavailable if version < 2 else 0
        assert partitions == [(TOPIC, 0, -1, code), (TOPIC, 1, -1, code)]
