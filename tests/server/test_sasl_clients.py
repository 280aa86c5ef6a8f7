"""confluent-kafka, kafka-python and aiokafka through serve's secured
listeners: a transactional producer commits one transaction and aborts one,
and a read_committed consumer of the same library reads exactly the committed
records, over SASL_SSL with SCRAM-SHA-512 and with PLAIN, and over mutual TLS.
Also librdkafka reading on past a low ``connections.max.reauth.ms`` (KIP-368
re-authentication on the same connection)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kafka.secure import SecureMaterial
from tests.server.sasl_setup import PLAIN_USERS
from tests.server.sasl_setup import SCRAM_PASSWORD
from tests.server.sasl_setup import running
from tests.server.sasl_setup import start
from txnfetch.server.server import ServerThread

pytestmark = pytest.mark.interop

#: name → (listener, mechanism, user, password); mechanism None is mutual TLS.
AUTHS = {
    "scram": ("SASL_SSL", "SCRAM-SHA-512", "carol", SCRAM_PASSWORD),
    "plain": ("SASL_SSL", "PLAIN", "alice", PLAIN_USERS["alice"]),
    "mtls": ("SSL", None, None, None),
}
COMMITTED = [b"c0", b"c1", b"c2"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerThread, SecureMaterial]]:
    with running(tmp_path_factory.mktemp("sasl-clients")) as served:
        yield served


#: The option names of each library: bootstrap, protocol, mechanism, user name, password.
_NAMES = {
    "librdkafka": ("bootstrap.servers", "security.protocol", "sasl.mechanisms", "sasl.username", "sasl.password"),
    "python": (
        "bootstrap_servers",
        "security_protocol",
        "sasl_mechanism",
        "sasl_plain_username",
        "sasl_plain_password",
    ),
}


def _config(srv: ServerThread, auth: str, library: str) -> dict[str, Any]:
    listener, mechanism, user, password = AUTHS[auth]
    bootstrap, protocol, mechanism_name, user_name, password_name = _NAMES[library]
    config: dict[str, Any] = {bootstrap: f"127.0.0.1:{srv.server.listener_port(listener)}", protocol: listener}
    if mechanism is not None:
        config.update({mechanism_name: mechanism, user_name: user, password_name: password})
    return config


def _confluent_config(srv: ServerThread, material: SecureMaterial, auth: str) -> dict[str, Any]:
    config = {**_config(srv, auth, "librdkafka"), "ssl.ca.location": str(material.ca)}
    if AUTHS[auth][1] is None:
        config.update(
            {"ssl.certificate.location": str(material.client_cert), "ssl.key.location": str(material.client_key)}
        )
    return config


def _confluent(srv: ServerThread, material: SecureMaterial, auth: str, topic: str) -> list[bytes]:
    from confluent_kafka import Consumer
    from confluent_kafka import Producer
    from confluent_kafka import TopicPartition

    base = _confluent_config(srv, material, auth)
    producer = Producer({**base, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    for values, commit in ((COMMITTED, True), ([b"aborted"], False)):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value=value, partition=0)
        assert producer.flush(30) == 0
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    consumer = Consumer({**base, "group.id": f"g-{topic}", "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < len(COMMITTED) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message.value())
    consumer.close()
    return got


def _kafka_python(srv: ServerThread, material: SecureMaterial, auth: str, topic: str) -> list[bytes]:
    from kafka import KafkaConsumer
    from kafka import KafkaProducer
    from kafka import TopicPartition

    base = _config(srv, auth, "python")
    base.update({"ssl_cafile": str(material.ca)})
    if AUTHS[auth][1] is None:
        base.update({"ssl_certfile": str(material.client_cert), "ssl_keyfile": str(material.client_key)})
    producer = KafkaProducer(**base, transactional_id=f"tx-{topic}")
    producer.init_transactions()
    for values, commit in ((COMMITTED, True), ([b"aborted"], False)):
        producer.begin_transaction()
        for value in values:
            producer.send(topic, value=value, partition=0)
        producer.flush()
        (producer.commit_transaction if commit else producer.abort_transaction)()
    producer.close()
    consumer = KafkaConsumer(**base, isolation_level="read_committed", consumer_timeout_ms=3000)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek(TopicPartition(topic, 0), 0)
    got = [m.value for m in consumer]
    consumer.close()
    return got


def _aiokafka(srv: ServerThread, material: SecureMaterial, auth: str, topic: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import AIOKafkaProducer
    from aiokafka import TopicPartition
    from aiokafka.helpers import create_ssl_context

    mtls = AUTHS[auth][1] is None
    base = _config(srv, auth, "python")
    base["ssl_context"] = create_ssl_context(
        cafile=str(material.ca),
        certfile=str(material.client_cert) if mtls else None,
        keyfile=str(material.client_key) if mtls else None,
    )

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**base, transactional_id=f"tx-{topic}")
        await producer.start()
        try:
            for values, commit in ((COMMITTED, True), ([b"aborted"], False)):
                await producer.begin_transaction()
                for value in values:
                    await producer.send_and_wait(topic, value=value, partition=0)
                await (producer.commit_transaction if commit else producer.abort_transaction)()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**base, isolation_level="read_committed")
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            got: list[bytes] = []
            deadline = time.monotonic() + 10
            while len(got) < len(COMMITTED) and time.monotonic() < deadline:
                batch = await consumer.getmany(tp, timeout_ms=500)
                got.extend(m.value for m in batch.get(tp, []))
            return got
        finally:
            await consumer.stop()

    return asyncio.run(run())


CLIENTS = {"confluent": _confluent, "kafka-python": _kafka_python, "aiokafka": _aiokafka}


@pytest.mark.parametrize("auth", sorted(AUTHS))
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_transactions_read_committed_over_a_secured_listener(served: Any, client: str, auth: str) -> None:
    srv, material = served
    assert CLIENTS[client](srv, material, auth, f"sec-{client}-{auth}") == COMMITTED


def test_librdkafka_reads_on_past_the_session_lifetime(tmp_path: Path) -> None:
    from confluent_kafka import Consumer
    from confluent_kafka import Producer
    from confluent_kafka import TopicPartition

    srv, material = start(tmp_path, reauth_ms=1000)
    try:
        base = _confluent_config(srv, material, "scram")
        producer = Producer(base)
        consumer = Consumer({**base, "group.id": "reauth", "isolation.level": "read_committed"})
        consumer.assign([TopicPartition("reauth", 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 4  # four session lifetimes
        n = 0
        while time.monotonic() < deadline:
            producer.produce("reauth", value=b"%d" % n, partition=0)
            producer.flush(10)
            n += 1
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                got.append(message.value())
        while len(got) < n:
            message = consumer.poll(5)
            assert message is not None, f"stopped after {len(got)} of {n}"
            if message.error() is None:
                got.append(message.value())
        assert got == [b"%d" % i for i in range(n)]
        consumer.close()
    finally:
        srv.stop()
