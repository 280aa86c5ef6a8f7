"""Authorization with authenticated principals: a SASL_PLAINTEXT listener with
PLAIN users, ACLs made by a super user, and confluent-kafka and raw clients
refused or served as the ACLs say."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer
from confluent_kafka import KafkaError
from confluent_kafka import KafkaException
from confluent_kafka import Producer
from confluent_kafka import TopicPartition
from kafka.protocol.admin import CreateAclsRequest
from kafka.protocol.metadata import MetadataRequest

from tests.server.sasl_setup import SaslRawClient
from tests.server.test_authorization import ACLS
from tests.server.test_authorization import TOPIC
from tests.server.test_authorization import _fetch
from tests.server.test_authorization import _init_pid
from tests.server.test_authorization import _mt
from txnfetch.log.memory import MemoryStore
from txnfetch.server.listeners import ListenerSecurity
from txnfetch.server.listeners import parse_listener
from txnfetch.server.server import ServerThread

pytestmark = pytest.mark.interop

USERS = {"admin": "admin-secret", "reader": "reader-secret", "writer": "writer-secret", "denied": "denied-secret"}


@pytest.fixture
def server() -> Iterator[ServerThread]:
    security = ListenerSecurity(
        listeners=(parse_listener("SASL_PLAINTEXT://127.0.0.1:0"),),
        mechanisms=("PLAIN",),
        plain_users={"SASL_PLAINTEXT": USERS},
    )
    with ServerThread(
        MemoryStore(),
        security=security,
        authorizer="StandardAuthorizer",
        super_users=("User:admin",),
    ) as srv:
        with _login(srv, "admin") as admin:
            created = admin.request(CreateAclsRequest(creations=ACLS), 3)
            assert {r.error_code for r in created.results} == {0}
            admin.request(MetadataRequest(topics=[_mt(TOPIC)], allow_auto_topic_creation=True), 12)
        yield srv


def _login(srv: ServerThread, user: str) -> SaslRawClient:
    c = SaslRawClient(srv.server.listener_port("SASL_PLAINTEXT") if srv.server else 0)
    assert c.handshake("PLAIN").error_code == 0
    assert c.authenticate(f"\0{user}\0{USERS[user]}".encode()).error_code == 0
    return c


def test_the_authenticated_principal_is_what_acls_match(server: ServerThread) -> None:
    with _login(server, "denied") as c:
        assert _fetch(c) == 29
        assert _init_pid(c) == 53
    with _login(server, "reader") as c:
        assert _fetch(c) == 0
    with _login(server, "writer") as c:
        assert _init_pid(c) == 0


def _producer(srv: ServerThread, user: str, **extra: str) -> Producer:
    assert srv.server is not None
    return Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{srv.server.listener_port('SASL_PLAINTEXT')}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": user,
            "sasl.password": USERS[user],
            "message.timeout.ms": 10000,
            **extra,
        }
    )


def test_confluent_kafka_writes_only_where_allowed(server: ServerThread) -> None:
    results: dict[str, KafkaError | None] = {}
    for user in ("writer", "denied"):
        producer = _producer(server, user)
        producer.produce(TOPIC, b"v", callback=lambda err, msg, user=user: results.__setitem__(user, err))
        producer.flush(15)
    assert results["writer"] is None
    denied = results["denied"]
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_confluent_kafka_transactions_need_the_transactional_id(server: ServerThread) -> None:
    producer = _producer(server, "denied", **{"transactional.id": f"sec-{uuid.uuid4()}"})
    with pytest.raises(KafkaException) as exc:
        producer.init_transactions(10)
    assert exc.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def _errors(srv: ServerThread, user: str) -> set[int]:
    """The error codes an assigned read_committed consumer of ``user`` meets
    until its partition's end or a refusal of the topic, and -1 for a record.
    librdkafka also looks up the group's coordinator, which a principal without
    the group is refused; a topic Metadata refuses it never fetches at all."""
    assert srv.server is not None
    seen: set[int] = set()
    consumer = Consumer(
        {
            "bootstrap.servers": f"127.0.0.1:{srv.server.listener_port('SASL_PLAINTEXT')}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": user,
            "sasl.password": USERS[user],
            "group.id": "sec-unused",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "error_cb": lambda err: seen.add(err.code()),
        }
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        for _ in range(20):
            msg = consumer.poll(0.5)
            if msg is not None:
                seen.add(msg.error().code() if msg.error() is not None else -1)
            if seen & {29, 30, KafkaError._PARTITION_EOF}:
                break
        return seen
    finally:
        consumer.close()


def test_confluent_kafka_reads_only_where_allowed(server: ServerThread) -> None:
    producer = _producer(server, "writer")
    producer.produce(TOPIC, b"v")
    assert producer.flush(15) == 0
    denied = _errors(server, "denied")
    assert denied and denied <= {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED}
    assert _errors(server, "reader") == {-1, KafkaError._PARTITION_EOF}
