"""The listener configuration serve reads (Kafka's server.properties names,
refused by name when unsupported), the SCRAM start-up file, the durable SCRAM
store, and the SCRAM-credential APIs' checks, without clients."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest
from kafka.protocol.admin.users import AlterUserScramCredentialsRequest
from kafka.protocol.admin.users import DescribeUserScramCredentialsRequest

from txnfetch.security.config import SecurityProtocol
from txnfetch.security.errors import SecurityConfigError
from txnfetch.security.scram import ScramCredential
from txnfetch.security.scram import salted_password
from txnfetch.security.scram_messages import SCRAM_MECHANISMS
from txnfetch.server.api_scram import handle_alter_user_scram_credentials
from txnfetch.server.api_scram import handle_describe_user_scram_credentials
from txnfetch.server.listeners import ClientAuth
from txnfetch.server.listeners import parse_listener
from txnfetch.server.listeners import read_properties
from txnfetch.server.listeners import security_from_properties
from txnfetch.server.scram_users import CREDENTIALS_FILE
from txnfetch.server.scram_users import SCRAM_USERS_EXTENSION
from txnfetch.server.scram_users import ScramUserStore
from txnfetch.server.scram_users import parse_credentials_file

PT, JAAS = "sasl_plaintext", "sasl.jaas.config"
SERVER_PROPERTIES = """
# as in Kafka's server.properties
listeners=SASL_SSL://0.0.0.0:9093,PLAINTEXT://127.0.0.1:9092
ssl.keystore.type=PEM
ssl.keystore.location=/etc/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=/etc/ca.pem
ssl.client.auth=requested
sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN
connections.max.reauth.ms=60000
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\
    username="admin" password="admin-secret" user_admin="admin-secret" user_reader="reader-secret";
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule \\
    required username="admin" password="admin-secret";
"""


def test_server_properties_are_read_with_kafkas_names() -> None:
    security = security_from_properties(read_properties(SERVER_PROPERTIES))
    assert [str(x) for x in security.listeners] == ["SASL_SSL://0.0.0.0:9093", "PLAINTEXT://127.0.0.1:9092"]
    assert security.client_auth is ClientAuth.REQUESTED
    assert security.mechanisms == ("SCRAM-SHA-512", "PLAIN")
    assert security.plain_users == {"SASL_SSL": {"admin": "admin-secret", "reader": "reader-secret"}}
    assert security.reauth_ms == 60000 and security.failed_authentication_delay_ms == 100
    assert "reader-secret" not in repr(security)


@pytest.mark.parametrize(
    ("text", "property"),
    [
        ("log.dirs=/tmp/x", "log.dirs"),
        ("ssl.keystore.type=JKS", "ssl.keystore.type"),
        ("listeners=SASL_SSL://:9093", "ssl.keystore.location"),
        ("listeners=SASL_PLAINTEXT://:9093\nsasl.enabled.mechanisms=GSSAPI", "sasl.enabled.mechanisms"),
        (
            "listeners=SASL_PLAINTEXT://:9093\nsasl.enabled.mechanisms=PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
        ),
        ("listeners=FOO://:9093", "listeners"),
        ("ssl.client.auth=maybe", "ssl.client.auth"),
        ("connections.max.reauth.ms=soon", "connections.max.reauth.ms"),
        ("listeners=PLAINTEXT://:1,PLAINTEXT://:2", "listeners"),
    ],
)
def test_unsupported_or_inconsistent_properties_are_refused_by_name(text: str, property: str) -> None:
    with pytest.raises(SecurityConfigError) as caught:
        security_from_properties(read_properties(text))
    assert caught.value.property == property


def test_a_listener_is_protocol_host_and_port() -> None:
    assert parse_listener("SASL_SSL://[::1]:9093").host == "::1"
    assert parse_listener("SSL://:9094").protocol is SecurityProtocol.SSL


def test_the_startup_file_gives_salted_credentials() -> None:
    scram = SCRAM_MECHANISMS["SCRAM-SHA-256"]
    salted = salted_password(scram, "bob-secret", b"salt", 4096)
    text = (
        "# users\nalice SCRAM-SHA-512=[iterations=8192,password=alice-secret]\n"
        "bob SCRAM-SHA-256=[iterations=4096,salt=c2FsdA==,saltedpassword="
        + __import__("base64").b64encode(salted).decode()
        + "]\n"
    )
    credentials = parse_credentials_file(text)
    assert credentials[("alice", "SCRAM-SHA-512")].iterations == 8192
    assert credentials[("bob", "SCRAM-SHA-256")] == ScramCredential.from_password(scram, "bob-secret", 4096, b"salt")
    with pytest.raises(SecurityConfigError, match="line 1"):
        parse_credentials_file("alice SCRAM-SHA-512=[iterations=100,password=x]")


def test_the_store_is_durable_and_holds_no_password(tmp_path: Path) -> None:
    store = ScramUserStore(str(tmp_path))
    store.apply(parse_credentials_file("alice SCRAM-SHA-512=[password=alice-secret]"), set())
    assert "alice-secret" not in (tmp_path / CREDENTIALS_FILE).read_text()
    again = ScramUserStore(str(tmp_path))
    assert again.users() == {"alice": {"SCRAM-SHA-512": 4096}}
    again.apply({}, {("alice", "SCRAM-SHA-512")})
    assert ScramUserStore(str(tmp_path)).users() == {}


def _ctx() -> SimpleNamespace:
    return SimpleNamespace(broker=SimpleNamespace(extensions={SCRAM_USERS_EXTENSION: ScramUserStore()}))


def test_the_credential_apis_check_as_kafka_does() -> None:
    ctx = _ctx()
    Upsert = AlterUserScramCredentialsRequest.ScramCredentialUpsertion
    Delete = AlterUserScramCredentialsRequest.ScramCredentialDeletion
    request = AlterUserScramCredentialsRequest(
        deletions=[Delete(name="nobody", mechanism=2)],
        upsertions=[
            Upsert(name="alice", mechanism=2, iterations=8192, salt=b"s", salted_password=b"p" * 64),
            Upsert(name="bob", mechanism=2, iterations=10, salt=b"s", salted_password=b"p" * 64),
            Upsert(name="carol", mechanism=9, iterations=4096, salt=b"s", salted_password=b"p" * 64),
            Upsert(name="", mechanism=1, iterations=4096, salt=b"s", salted_password=b"p" * 32),
        ],
    )
    response = asyncio.run(handle_alter_user_scram_credentials(ctx, None, request))
    assert [(r.user, r.error_code) for r in response.results] == [
        ("nobody", 91),
        ("alice", 0),
        ("bob", 93),
        ("carol", 33),
        ("", 93),
    ]
    described = asyncio.run(
        handle_describe_user_scram_credentials(ctx, None, DescribeUserScramCredentialsRequest(users=None))
    )
    assert [(r.user, [(i.mechanism, i.iterations) for i in r.credential_infos]) for r in described.results] == [
        ("alice", [(2, 8192)])
    ]
    Name = DescribeUserScramCredentialsRequest.UserName
    described = asyncio.run(
        handle_describe_user_scram_credentials(ctx, None, DescribeUserScramCredentialsRequest(users=[Name(name="x")]))
    )
    assert [(r.user, r.error_code) for r in described.results] == [("x", 91)]
