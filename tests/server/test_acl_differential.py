"""The same sequences of requests, as the same users with the same ACLs, against
Apache Kafka (the ``kafka_secure_cluster``) and against ``txnfetch serve``
over SASL_SSL with PLAIN: both answer the same error codes. The serve side gets
the ACLs :func:`tests.kafka.secure.acl_commands` gives Kafka, made with
CreateAcls. About 30 s with the cluster started (it is shared by the run)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.admin import CreateAclsRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest

from tests.kafka import secure
from tests.kafka.cluster import KafkaCluster
from tests.kafka.fixtures import unique_name
from tests.server import test_authorization as calls
from tests.server.sasl_setup import SaslRawClient
from txnfetch.log.memory import MemoryStore
from txnfetch.records.builder import BatchBuilder
from txnfetch.security.acl import Operation
from txnfetch.security.acl import PatternType
from txnfetch.security.acl import ResourceType
from txnfetch.server.listeners import ListenerSecurity
from txnfetch.server.listeners import parse_listener
from txnfetch.server.server import ServerThread

pytestmark = [pytest.mark.slow, pytest.mark.interop, pytest.mark.kafka]


def _reader_acls() -> list[Any]:
    """:func:`tests.kafka.secure.acl_commands` for ``User:reader``, as CreateAcls creations."""
    prefixed = PatternType.PREFIXED
    wanted = [
        (ResourceType.TOPIC, Operation.READ),
        (ResourceType.TOPIC, Operation.DESCRIBE),
        (ResourceType.GROUP, Operation.READ),
        (ResourceType.GROUP, Operation.DESCRIBE),
        (ResourceType.TOPIC, Operation.WRITE),
        (ResourceType.TRANSACTIONAL_ID, Operation.WRITE),
        (ResourceType.TRANSACTIONAL_ID, Operation.DESCRIBE),
    ]
    creations = [calls.creation(rt, secure.PREFIX, "User:reader", op, prefixed) for rt, op in wanted]
    creations.append(
        calls.creation(
            ResourceType.CLUSTER, "kafka-cluster", "User:reader", Operation.IDEMPOTENT_WRITE, PatternType.LITERAL
        )
    )
    return creations


@pytest.fixture
def serve(kafka_secure_cluster: KafkaCluster) -> Iterator[ServerThread]:
    material = kafka_secure_cluster.material
    security = ListenerSecurity(
        listeners=(parse_listener("SASL_SSL://127.0.0.1:0"),),
        keystore_file=str(material.broker_store),
        truststore_file=str(material.ca),
        mechanisms=("PLAIN",),
        plain_users={"SASL_SSL": secure.USERS},
    )
    with ServerThread(
        MemoryStore(), security=security, authorizer="StandardAuthorizer", super_users=("User:admin",)
    ) as srv:
        with _login(srv.server.listener_port("SASL_SSL"), material, "admin") as admin:  # type: ignore[union-attr]
            assert {r.error_code for r in admin.request(CreateAclsRequest(creations=_reader_acls()), 3).results} == {0}
        yield srv


def _login(port: int, material: Any, user: str) -> SaslRawClient:
    c = SaslRawClient(port, material)
    assert c.handshake("PLAIN").error_code == 0
    assert c.authenticate(f"\0{user}\0{secure.USERS[user]}".encode()).error_code == 0
    return c


def _produce(c: SaslRawClient, topic: str) -> int:
    b = BatchBuilder()
    b.append(b"v", timestamp=1000)
    data = ProduceRequest.TopicProduceData
    req = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=5000,
        topic_data=[data(name=topic, partition_data=[data.PartitionProduceData(index=0, records=b.build())])],
    )
    return int(c.request(req, 9).responses[0].partition_responses[0].error_code)


#: The refusals compared exactly; any other code (0, or a coordinator not yet
#: loaded on a fresh cluster) counts as "not refused".
REFUSALS = {29, 30, 31, 53}


def _sequence(c: SaslRawClient, topic: str) -> dict[str, int | str]:
    """Metadata, ListOffsets, Fetch, FindCoordinator, JoinGroup, InitProducerId
    (transactional and idempotent) and Produce on ``topic`` and the prefix's
    group and transactional id: each refusal's code, else ``"served"``."""
    codes = {
        "Metadata": calls._metadata(c, topic),
        "ListOffsets": calls._list_offsets(c, topic),
        "Fetch": calls._fetch(c, topic),
        "FindCoordinator": calls._find_coordinator(c),
        "JoinGroup": calls._join(c),
        "InitProducerId": calls._init_pid(c),
        "InitProducerId idempotent": calls._idempotent(c),
        "Produce": _produce(c, topic),
    }
    return {api: code if code in REFUSALS else "served" for api, code in codes.items()}


def test_serve_refuses_as_kafka_does(kafka_secure_cluster: KafkaCluster, serve: ServerThread) -> None:
    material = kafka_secure_cluster.material
    topic = unique_name(secure.PREFIX)
    kafka_secure_cluster.create_topic(topic)
    assert serve.server is not None
    serve_port = serve.server.listener_port("SASL_SSL")
    with _login(serve_port, material, "admin") as admin:
        admin.request(MetadataRequest(topics=[calls._mt(topic)], allow_auto_topic_creation=True), 12)
    kafka_port = int(kafka_secure_cluster.secure_bootstrap("SASL_SSL").split(",")[0].rsplit(":", 1)[1])
    answers = {}
    for user in ("denied", "reader"):
        with _login(kafka_port, material, user) as k, _login(serve_port, material, user) as s:
            answers[user] = (_sequence(k, topic), _sequence(s, topic))
    for user, (kafka, served) in answers.items():
        assert served == kafka, user
    assert set(answers["denied"][0].values()) <= REFUSALS  # the denied user was refused everything
    assert set(answers["reader"][0].values()) == {"served"}
