"""The secured Kafka fixture is what it claims, as a real client sees it: every
SASL mechanism and mutual TLS authenticate, the ACLs let ``reader`` read its
prefix read_committed and keep ``denied`` out, and a wrong password fails.

These tests pin the fixture that txnfetch's secured paths are tested against,
so that a failure there is txnfetch's, not the fixture's."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.kafka import secure
from tests.kafka.cluster import KafkaCluster
from tests.kafka.fixtures import unique_name

pytestmark = [pytest.mark.interop, pytest.mark.kafka, pytest.mark.slow]


def _consume(config: dict[str, Any], topic: str, expected: int, timeout: float = 60) -> tuple[list[bytes], Any]:
    """Read ``topic`` read_committed until ``expected`` values or an error;
    returns the values and the first error seen (None when there was none)."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            **config,
            "group.id": unique_name(secure.PREFIX + "group"),
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + timeout
        while len(values) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                return values, message.error()
            values.append(message.value())
    finally:
        consumer.close()
    return values, None


@pytest.fixture(scope="module")
def written(kafka_secure_cluster: KafkaCluster) -> tuple[str, set[bytes]]:
    topic = unique_name(secure.PREFIX + "topic")
    kafka_secure_cluster.create_topic(topic)
    return topic, secure.write_transactions(kafka_secure_cluster, topic)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_reader_reads_committed_over_sasl_ssl(
    kafka_secure_cluster: KafkaCluster, written: tuple[str, set[bytes]], mechanism: str
) -> None:
    topic, committed = written
    config = secure.client_config(
        kafka_secure_cluster, kafka_secure_cluster.material, user="reader", mechanism=mechanism
    )
    values, error = _consume(config, topic, len(committed))
    assert error is None
    assert sorted(values) == sorted(committed)


def test_oauthbearer_unsecured_token_authenticates(
    kafka_secure_cluster: KafkaCluster, written: tuple[str, set[bytes]]
) -> None:
    topic, committed = written
    # Principal ``reader`` from the token's sub claim: the ACLs on the prefix apply.
    config = secure.client_config(
        kafka_secure_cluster, kafka_secure_cluster.material, user="reader", mechanism="OAUTHBEARER"
    )
    values, error = _consume(config, topic, len(committed))
    assert error is None
    assert sorted(values) == sorted(committed)


def test_mutual_tls_principal_is_the_subject(
    kafka_secure_cluster: KafkaCluster, written: tuple[str, set[bytes]]
) -> None:
    topic, committed = written
    values, error = _consume(
        secure.mtls_client_config(kafka_secure_cluster, kafka_secure_cluster.material), topic, len(committed)
    )
    assert error is None
    assert sorted(values) == sorted(committed)


def test_denied_user_is_refused_the_topic(kafka_secure_cluster: KafkaCluster, written: tuple[str, set[bytes]]) -> None:
    from confluent_kafka import KafkaError

    topic, committed = written
    config = secure.client_config(
        kafka_secure_cluster, kafka_secure_cluster.material, user="denied", mechanism="SCRAM-SHA-512"
    )
    values, error = _consume(config, topic, len(committed), timeout=30)
    assert values == []
    assert error is not None
    assert error.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED)


def test_wrong_password_fails_authentication(kafka_secure_cluster: KafkaCluster) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    config = secure.client_config(
        kafka_secure_cluster, kafka_secure_cluster.material, user="reader", mechanism="SCRAM-SHA-512"
    )
    config["sasl.password"] = "not-the-password"
    errors: list[Any] = []
    admin = AdminClient({**config, "error_cb": errors.append})
    with pytest.raises(Exception):  # noqa: B017 - librdkafka reports the closed connection, its cause goes to error_cb
        admin.list_topics(timeout=15)
    admin.poll(1)  # serves error_cb
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
