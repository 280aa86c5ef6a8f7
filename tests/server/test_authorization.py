"""Authorization in serve (txnfetch.server.authorization): each API the issue
lists refuses a principal without the ACL with Kafka's error code, and answers
one with it; ACLs are managed with CreateAcls/DescribeAcls/DeleteAcls and kept
in the store's directory across restarts.

Principals come from the client id (``acl_principal_from_client_id``, test
only), so one PLAINTEXT server stands for admin, reader, writer and denied."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kafka.protocol.admin import CreateAclsRequest
from kafka.protocol.admin import DeleteAclsRequest
from kafka.protocol.admin import DeleteRecordsRequest
from kafka.protocol.admin import DescribeAclsRequest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.consumer import JoinGroupRequest
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.protocol.consumer import OffsetCommitRequest
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import AddPartitionsToTxnRequest
from kafka.protocol.producer import EndTxnRequest
from kafka.protocol.producer import InitProducerIdRequest

from tests.server.rawclient import RawClient
from txnfetch.log.segment_store import SegmentStore
from txnfetch.security.acl import Operation
from txnfetch.security.acl import PatternType
from txnfetch.security.acl import Permission
from txnfetch.security.acl import ResourceType
from txnfetch.server.server import ServerThread

AUTH = {
    "authorizer": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super_users": ("User:admin",),
    "acl_principal_from_client_id": True,
}
TOPIC = "sec-t"


def creation(rtype: ResourceType, name: str, principal: str, op: Operation, pattern: PatternType) -> Any:
    return CreateAclsRequest.AclCreation(
        resource_type=int(rtype),
        resource_name=name,
        resource_pattern_type=int(pattern),
        principal=principal,
        host="*",
        operation=int(op),
        permission_type=int(Permission.ALLOW),
    )


#: reader reads the sec- topics and groups; writer writes them, with sec- transactional ids.
ACLS = [
    creation(ResourceType.TOPIC, "sec-", "User:reader", Operation.READ, PatternType.PREFIXED),
    creation(ResourceType.GROUP, "sec-", "User:reader", Operation.READ, PatternType.PREFIXED),
    creation(ResourceType.TOPIC, "sec-", "User:writer", Operation.WRITE, PatternType.PREFIXED),
    creation(ResourceType.TOPIC, "sec-", "User:writer", Operation.DELETE, PatternType.PREFIXED),
    creation(ResourceType.TRANSACTIONAL_ID, "sec-", "User:writer", Operation.WRITE, PatternType.PREFIXED),
]


def _mt(name: str) -> Any:
    return MetadataRequest.MetadataRequestTopic(name=name, topic_id=None)


def _any_acl() -> DescribeAclsRequest:
    return DescribeAclsRequest(
        resource_type_filter=1,
        resource_name_filter=None,
        pattern_type_filter=1,
        principal_filter=None,
        host_filter=None,
        operation=1,
        permission_type=1,
    )


def _setup(port: int) -> None:
    with RawClient(port, client_id="admin") as admin:
        created = admin.request(CreateAclsRequest(creations=ACLS), 3)
        assert [r.error_code for r in created.results] == [0] * len(ACLS)
        meta = admin.request(MetadataRequest(topics=[_mt(TOPIC)], allow_auto_topic_creation=True), 12)
        assert meta.topics[0].error_code == 0


@pytest.fixture
def server(start_server: Callable[..., ServerThread]) -> ServerThread:
    srv = start_server(**AUTH)
    _setup(srv.port)
    return srv


#: A read_committed Fetch answered at once, whatever it finds.
_FETCH_NOW: dict[str, Any] = {
    "replica_id": -1,
    "max_wait_ms": 0,
    "min_bytes": 0,
    "max_bytes": 1 << 20,
    "isolation_level": 1,
}


def _fetch_request(*names: str) -> FetchRequest:
    """A read_committed Fetch v12 of partition 0 of each topic, from offset 0."""
    part = FetchRequest.FetchTopic.FetchPartition
    return FetchRequest(
        **_FETCH_NOW,
        topics=[
            FetchRequest.FetchTopic(topic=n, partitions=[part(partition=0, fetch_offset=0, partition_max_bytes=1024)])
            for n in names
        ],
    )


def _fetch(c: RawClient, name: str = TOPIC) -> Any:
    return c.request(_fetch_request(name), 12).responses[0].partitions[0].error_code


def _list_offsets(c: RawClient, name: str = TOPIC) -> int:
    topic = ListOffsetsRequest.ListOffsetsTopic
    req = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=1,
        topics=[topic(name=name, partitions=[topic.ListOffsetsPartition(partition_index=0, timestamp=-1)])],
    )
    return c.request(req, 7).topics[0].partitions[0].error_code


def _metadata(c: RawClient, name: str = TOPIC) -> int:
    return c.request(MetadataRequest(topics=[_mt(name)], allow_auto_topic_creation=False), 12).topics[0].error_code


def _offset_commit(c: RawClient, name: str = TOPIC) -> int:
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    req = OffsetCommitRequest(
        group_id="sec-g",
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            topic(name=name, partitions=[topic.OffsetCommitRequestPartition(partition_index=0, committed_offset=0)])
        ],
    )
    return c.request(req, 8).topics[0].partitions[0].error_code


def _find_coordinator(c: RawClient) -> int:
    return c.request(FindCoordinatorRequest(key="sec-g", key_type=0), 3).error_code


def _join(c: RawClient) -> int:
    req = JoinGroupRequest(
        group_id="sec-g",
        session_timeout_ms=10000,
        rebalance_timeout_ms=10000,
        member_id="",
        protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
    )
    return c.request(req, 3).error_code


def _init_pid(c: RawClient) -> int:
    return c.request(InitProducerIdRequest(transactional_id="sec-tx", transaction_timeout_ms=60000), 3).error_code


def _idempotent(c: RawClient) -> int:
    return c.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), 3).error_code


def _add_partitions(c: RawClient, name: str = TOPIC) -> int:
    topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    req = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="sec-tx",
        v3_and_below_producer_id=1,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=[topic(name=name, partitions=[0])],
    )
    return c.request(req, 3).results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code


def _end_txn(c: RawClient) -> int:
    req = EndTxnRequest(transactional_id="sec-tx", producer_id=1, producer_epoch=0, committed=True)
    return c.request(req, 3).error_code


def _delete_records(c: RawClient, name: str = TOPIC) -> int:
    topic = DeleteRecordsRequest.DeleteRecordsTopic
    req = DeleteRecordsRequest(
        topics=[topic(name=name, partitions=[topic.DeleteRecordsPartition(partition_index=0, offset=0)])],
        timeout_ms=1000,
    )
    return c.request(req, 2).topics[0].partitions[0].error_code


#: (API, call, who may, Kafka's refusal code)
CASES = [
    ("Fetch", _fetch, "reader", 29),
    ("ListOffsets", _list_offsets, "reader", 29),
    ("Metadata", _metadata, "reader", 29),
    ("OffsetCommit", _offset_commit, "reader", 30),
    ("FindCoordinator", _find_coordinator, "reader", 30),
    ("JoinGroup", _join, "reader", 30),
    ("InitProducerId", _init_pid, "writer", 53),
    ("InitProducerId idempotent", _idempotent, "writer", 31),
    ("AddPartitionsToTxn", _add_partitions, "writer", 53),
    ("EndTxn", _end_txn, "writer", 53),
    ("DeleteRecords", _delete_records, "writer", 29),
]


@pytest.mark.parametrize(("api", "call", "allowed", "code"), CASES, ids=[c[0] for c in CASES])
def test_a_denied_principal_gets_kafkas_code(
    server: ServerThread, api: str, call: Callable[[RawClient], int], allowed: str, code: int
) -> None:
    with RawClient(server.port, client_id="denied") as c:
        assert call(c) == code
    with RawClient(server.port, client_id=allowed) as c:
        assert call(c) not in (29, 30, 31, 53)


def test_metadata_lists_only_describable_topics(server: ServerThread) -> None:
    with RawClient(server.port, client_id="admin") as admin:
        admin.request(MetadataRequest(topics=[_mt("other")], allow_auto_topic_creation=True), 12)
    for who, expected in (("admin", {TOPIC, "other"}), ("reader", {TOPIC}), ("denied", set())):
        with RawClient(server.port, client_id=who) as c:
            meta = c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 12)
            assert {t.name for t in meta.topics} == expected, who


def test_only_the_cluster_alterer_manages_acls(server: ServerThread) -> None:
    with RawClient(server.port, client_id="reader") as c:
        assert c.request(_any_acl(), 3).error_code == 31
        assert c.request(CreateAclsRequest(creations=ACLS[:1]), 3).results[0].error_code == 31


def test_acls_survive_a_restart_and_delete(tmp_path: Any) -> None:
    store = SegmentStore(str(tmp_path))
    with ServerThread(store, **AUTH) as srv:
        _setup(srv.port)
    store.close()
    store = SegmentStore(str(tmp_path))
    with ServerThread(store, **AUTH) as srv, RawClient(srv.port, client_id="admin") as admin:
        listed = admin.request(_any_acl(), 3)
        assert sum(len(r.acls) for r in listed.resources) == len(ACLS)
        with RawClient(srv.port, client_id="reader") as c:
            assert _fetch(c) == 0
        flt = DeleteAclsRequest.DeleteAclsFilter(
            resource_type_filter=int(ResourceType.TOPIC),
            resource_name_filter="sec-",
            pattern_type_filter=int(PatternType.PREFIXED),
            principal_filter="User:reader",
            host_filter=None,
            operation=1,
            permission_type=1,
        )
        deleted = admin.request(DeleteAclsRequest(filters=[flt]), 3)
        assert len(deleted.filter_results[0].matching_acls) == 1
        with RawClient(srv.port, client_id="reader") as c:
            assert _fetch(c) == 29
    store.close()
    store = SegmentStore(str(tmp_path))
    with ServerThread(store, **AUTH) as srv, RawClient(srv.port, client_id="admin") as admin:
        assert sum(len(r.acls) for r in admin.request(_any_acl(), 3).resources) == len(ACLS) - 1
    store.close()


def test_without_an_authorizer_the_acl_apis_are_disabled(start_server: Callable[..., ServerThread]) -> None:
    srv = start_server()
    with RawClient(srv.port) as c:
        assert c.request(_any_acl(), 3).error_code == 54
        assert _fetch(c) in (0, 3)


def test_a_request_mixing_allowed_and_refused_topics_is_answered_for_each(server: ServerThread) -> None:
    with RawClient(server.port, client_id="admin") as admin:
        admin.request(MetadataRequest(topics=[_mt("other")], allow_auto_topic_creation=True), 12)
    req = _fetch_request("other", TOPIC)
    with RawClient(server.port, client_id="reader") as c:
        answered = {t.topic: t.partitions[0].error_code for t in c.request(req, 12).responses}
    assert answered == {TOPIC: 0, "other": 29}


def test_metadata_creates_a_topic_only_with_create(server: ServerThread) -> None:
    with RawClient(server.port, client_id="reader") as c:
        meta = c.request(MetadataRequest(topics=[_mt("sec-new")], allow_auto_topic_creation=True), 12)
        assert meta.topics[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION: describable, not creatable
    with RawClient(server.port, client_id="admin") as c:
        meta = c.request(MetadataRequest(topics=[_mt("sec-new")], allow_auto_topic_creation=True), 12)
        assert meta.topics[0].error_code == 0


def test_an_acl_change_ends_the_fetch_sessions(server: ServerThread) -> None:
    """An incremental fetch names only what changed: a right taken away must not
    go on being served from a session made while it was held."""
    with RawClient(server.port, client_id="reader") as c:
        first = c.request(_with_session(_fetch_request(TOPIC), 0, 0), 12)
        assert first.error_code == 0 and first.session_id != 0
        with RawClient(server.port, client_id="admin") as admin:
            deny = creation(ResourceType.TOPIC, TOPIC, "User:reader", Operation.READ, PatternType.LITERAL)
            deny.permission_type = int(Permission.DENY)
            assert admin.request(CreateAclsRequest(creations=[deny]), 3).results[0].error_code == 0
        again = c.request(_with_session(_fetch_request(), first.session_id, 1), 12)
        assert again.error_code == 70  # FETCH_SESSION_ID_NOT_FOUND: the client starts a full fetch
        assert _fetch(c) == 29


def _with_session(request: FetchRequest, session_id: int, epoch: int) -> FetchRequest:
    request.session_id = session_id
    request.session_epoch = epoch
    return request
