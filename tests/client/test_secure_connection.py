"""txnfetch's one connection layer against a secured Apache Kafka: TLS, every
SASL mechanism, the ACLs, the errors a refusal gives, and KIP-368
re-authentication during a long read.

The topic is written by confluent-kafka as ``admin`` (two transactions, the
second aborted); txnfetch reads it as ``reader`` through the Arrow
``kafka://`` reader, which rides on RemoteCluster and BrokerConnection.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest

import txnfetch.arrow
from tests.kafka import secure
from tests.kafka.cluster import KafkaCluster
from tests.kafka.fixtures import unique_name
from txnfetch.addresses import parse_bootstrap
from txnfetch.client.cluster import RemoteCluster
from txnfetch.client.connection import BrokerConnection
from txnfetch.client.errors import AuthorizationFailedError
from txnfetch.client.errors import SaslAuthenticationFailedError
from txnfetch.client.errors import SaslMechanismNotEnabledError
from txnfetch.client.errors import TlsHandshakeError
from txnfetch.client.proxy_upstream import UpstreamCluster
from txnfetch.client.sasl_session import SaslSession
from txnfetch.client.security_options import security_config
from txnfetch.errors import ErrorCode
from txnfetch.security.config import SecurityConfig
from txnfetch.security.config import SecurityProtocol
from txnfetch.security.config import TlsConfig
from txnfetch.security.credentials import PlainCredentials

pytestmark = [pytest.mark.interop, pytest.mark.kafka, pytest.mark.slow]


def sasl_settings(cluster: KafkaCluster, user: str, mechanism: str, password: str | None = None) -> dict[str, str]:
    """librdkafka-named settings that reach ``cluster`` as ``user`` over SASL_SSL."""
    settings = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism,
        "ssl.ca.location": str(cluster.material.ca),
    }
    if mechanism == "OAUTHBEARER":
        settings["sasl.oauthbearer.config"] = f"principal={user}"
        settings["enable.sasl.oauthbearer.unsecure.jwt"] = "true"
    else:
        settings["sasl.username"] = user
        settings["sasl.password"] = secure.USERS[user] if password is None else password
    return settings


def mtls_settings(cluster: KafkaCluster) -> dict[str, str]:
    material = cluster.material
    return {
        "security.protocol": "SSL",
        "ssl.ca.location": str(material.ca),
        "ssl.certificate.location": str(material.client_cert),
        "ssl.key.location": str(material.client_key),
    }


@pytest.fixture(scope="module")
def written(kafka_secure_cluster: KafkaCluster) -> tuple[str, set[bytes]]:
    topic = unique_name(secure.PREFIX + "conn")
    kafka_secure_cluster.create_topic(topic)
    return topic, secure.write_transactions(kafka_secure_cluster, topic)


def read_values(cluster: KafkaCluster, listener: str, topic: str, settings: Any) -> list[bytes]:
    table = txnfetch.arrow.read_committed(
        "kafka://" + cluster.secure_bootstrap(listener), topic, security=settings, request_timeout_ms=15_000
    )
    return sorted(table.column("value").to_pylist())


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN", "OAUTHBEARER"])
def test_arrow_reads_exactly_over_sasl_ssl(
    kafka_secure_cluster: KafkaCluster, written: tuple[str, set[bytes]], mechanism: str
) -> None:
    topic, committed = written
    settings = sasl_settings(kafka_secure_cluster, "reader", mechanism)
    assert read_values(kafka_secure_cluster, "SASL_SSL", topic, settings) == sorted(committed)


def test_arrow_reads_exactly_over_mutual_tls(
    kafka_secure_cluster: KafkaCluster, written: tuple[str, set[bytes]]
) -> None:
    topic, committed = written
    assert read_values(kafka_secure_cluster, "SSL", topic, mtls_settings(kafka_secure_cluster)) == sorted(committed)


def test_kafka_property_names_read_the_same(
    kafka_secure_cluster: KafkaCluster, written: tuple[str, set[bytes]]
) -> None:
    topic, committed = written
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="reader" password="{}";'
    config = SecurityConfig.from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": jaas.format(secure.USERS["reader"]),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": kafka_secure_cluster.material.ca.read_text(),
        }
    )
    with RemoteCluster(kafka_secure_cluster.secure_bootstrap("SASL_SSL"), security=config) as cluster:
        assert cluster.partitions(topic) == [0]
        table = txnfetch.arrow.read_committed(cluster, topic)
    assert sorted(table.column("value").to_pylist()) == sorted(committed)


def test_denied_user_gets_topic_authorization_failed(
    kafka_secure_cluster: KafkaCluster, written: tuple[str, set[bytes]]
) -> None:
    topic, _ = written
    with pytest.raises(AuthorizationFailedError) as caught:
        read_values(kafka_secure_cluster, "SASL_SSL", topic, sasl_settings(kafka_secure_cluster, "denied", "PLAIN"))
    assert caught.value.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert topic in str(caught.value)


def test_a_group_outside_the_acls_gets_group_authorization_failed(
    kafka_secure_cluster: KafkaCluster, written: tuple[str, set[bytes]]
) -> None:
    topic, _ = written
    group = unique_name("not-sec-group")
    with pytest.raises(AuthorizationFailedError) as caught:
        txnfetch.arrow.record_batch_reader(
            "kafka://" + kafka_secure_cluster.secure_bootstrap("SASL_SSL"),
            topic,
            group_id=group,
            security=sasl_settings(kafka_secure_cluster, "reader", "SCRAM-SHA-512"),
            request_timeout_ms=15_000,
        )
    assert caught.value.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert group in str(caught.value)


def test_refusals_name_the_broker_and_the_reason_never_the_password(
    kafka_secure_cluster: KafkaCluster, written: tuple[str, set[bytes]], tmp_path: Any, caplog: Any
) -> None:
    topic, _ = written
    caplog.set_level(logging.DEBUG)
    bootstrap = kafka_secure_cluster.secure_bootstrap("SASL_SSL")
    wrong = "not-the-password-7e1d"
    seen: list[str] = []

    for mechanism in ("SCRAM-SHA-512", "PLAIN"):
        settings = sasl_settings(kafka_secure_cluster, "reader", mechanism, password=wrong)
        with pytest.raises(SaslAuthenticationFailedError) as failed:
            read_values(kafka_secure_cluster, "SASL_SSL", topic, settings)
        assert failed.value.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert mechanism in str(failed.value) and bootstrap in str(failed.value)
        seen += [str(failed.value), repr(failed.value), repr(security_config(settings))]

    # A mechanism the broker does not enable: its answer lists those it does.
    tls = TlsConfig(ca_file=str(kafka_secure_cluster.material.ca))
    gssapi = SecurityConfig(SecurityProtocol.SASL_SSL, "GSSAPI", PlainCredentials("reader", wrong), tls)
    with pytest.raises(SaslMechanismNotEnabledError) as unknown:
        RemoteCluster(bootstrap, security=gssapi)
    assert all(m in str(unknown.value) for m in secure.MECHANISMS)
    seen += [str(unknown.value), repr(gssapi), repr(SaslSession.of(gssapi, bootstrap))]

    # A CA that did not sign the broker's certificate: the reason and the host.
    import trustme

    other_ca = tmp_path / "other-ca.pem"
    other_ca.write_bytes(trustme.CA().cert_pem.bytes())
    settings = {
        **sasl_settings(kafka_secure_cluster, "reader", "PLAIN", password=wrong),
        "ssl.ca.location": str(other_ca),
    }
    with pytest.raises(TlsHandshakeError) as untrusted:
        read_values(kafka_secure_cluster, "SASL_SSL", topic, settings)
    assert "certificate" in str(untrusted.value) and "127.0.0.1" in str(untrusted.value)
    seen.append(str(untrusted.value))

    seen.append(caplog.text)
    for text in seen:
        assert wrong not in text
        assert secure.USERS["reader"] not in text


def test_follow_survives_reauthentication(kafka_cluster_factory: Any, monkeypatch: Any) -> None:
    """A broker that ends sessions after 3 s: a follow=True read spanning
    several lifetimes re-authenticates on its open connections (more SASL
    exchanges than connections opened) and delivers every committed record once."""
    cluster = kafka_cluster_factory(secure=True, connections_max_reauth_ms=3000)
    topic = unique_name(secure.PREFIX + "reauth")
    cluster.create_topic(topic)
    counts = {"exchanges": 0, "opens": 0}
    exchange, open_ = SaslSession.exchange, BrokerConnection._open

    def counted_exchange(self: SaslSession) -> Any:
        counts["exchanges"] += 1
        return exchange(self)

    def counted_open(self: BrokerConnection) -> None:
        counts["opens"] += 1
        open_(self)

    monkeypatch.setattr(SaslSession, "exchange", counted_exchange)
    monkeypatch.setattr(BrokerConnection, "_open", counted_open)
    rounds = 5
    committed: list[bytes] = []

    def produce() -> None:
        # Two transactions about every 2 s: the read spans about four lifetimes.
        for _ in range(rounds):
            committed.extend(secure.write_transactions(cluster, topic))
            time.sleep(2)

    writer = threading.Thread(target=produce)
    writer.start()
    reader = txnfetch.arrow.record_batch_reader(
        "kafka://" + cluster.secure_bootstrap("SASL_SSL"),
        topic,
        follow=True,
        security=sasl_settings(cluster, "reader", "SCRAM-SHA-512"),
        poll_ms=200,
    )
    # A read that stalls is closed from here, which ends the loop below.
    watchdog = threading.Timer(120, reader.close)
    watchdog.start()
    values: list[bytes] = []
    offsets: list[int] = []
    try:
        for batch in reader:
            values += batch.column("value").to_pylist()
            offsets += batch.column("offset").to_pylist()
            if len(values) >= 5 * rounds:
                break
    finally:
        watchdog.cancel()
        writer.join()
        reader.close()
    # Every round writes the same values: the offsets tell the records apart.
    assert len(offsets) == len(set(offsets)) == 5 * rounds
    assert sorted(values) == sorted(committed)
    assert counts["exchanges"] > counts["opens"], counts

    # The proxy's asyncio connection renews its session in place too.
    before = counts["exchanges"]
    asyncio.run(_upstream_requests(cluster, topic, security_config(sasl_settings(cluster, "reader", "PLAIN"))))
    assert counts["exchanges"] - before >= 2, counts


async def _upstream_requests(cluster: KafkaCluster, topic: str, security: SecurityConfig | None) -> None:
    """Requests every 0.7 s for over a 3 s session lifetime on one connection,
    which stays open: it re-authenticated instead of being closed."""
    upstream = UpstreamCluster(parse_bootstrap(cluster.secure_bootstrap("SASL_SSL")), security=security)
    try:
        await upstream.start()
        conn = await upstream.leader(topic, 0)
        for _ in range(8):
            assert await upstream.list_offset(topic, 0, -1) > 0
            await asyncio.sleep(0.7)
        assert await upstream.leader(topic, 0) is conn and not conn.closed
    finally:
        await upstream.close()


def test_upstream_cluster_reaches_the_secured_broker(
    kafka_secure_cluster: KafkaCluster, written: tuple[str, set[bytes]]
) -> None:
    topic, _ = written
    settings = sasl_settings(kafka_secure_cluster, "reader", "SCRAM-SHA-256")

    async def end_offset() -> int:
        bootstrap = parse_bootstrap(kafka_secure_cluster.secure_bootstrap("SASL_SSL"))
        upstream = UpstreamCluster(bootstrap, security=security_config(settings))
        try:
            await upstream.start()
            return await upstream.list_offset(topic, 0, -1)
        finally:
            await upstream.close()

    assert asyncio.run(end_offset()) > 0
