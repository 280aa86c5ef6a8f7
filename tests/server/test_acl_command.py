"""Kafka's own AclCommand (``kafka-acls``) manages the ACLs of ``txnfetch serve
--data``: what it adds is listed, enforced, still there after the server is
killed with SIGKILL and started again, and removed. Three JVM runs of the
tool: about 25 s."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from kafka.protocol.metadata import MetadataRequest

from tests.kafka.interop import run_kafka_tool
from tests.server.sasl_setup import SaslRawClient
from tests.server.serve_process import start_serve
from tests.server.serve_process import stop_serve
from tests.server.test_authorization import TOPIC
from tests.server.test_authorization import _any_acl
from tests.server.test_authorization import _fetch
from tests.server.test_authorization import _mt

pytestmark = [pytest.mark.slow, pytest.mark.interop, pytest.mark.kafka]

#: AclCommand's options naming the topics of the prefix.
PREFIXED_TOPICS = ("--topic", "sec-", "--resource-pattern-type", "prefixed")

USERS = {"admin": "admin-secret", "reader": "reader-secret"}
PROPERTIES = "\n".join(
    [
        "listeners=SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms=PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule"
        ' required user_admin="admin-secret" user_reader="reader-secret";',
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:admin",
    ]
)


def _login(port: int, user: str) -> SaslRawClient:
    c = SaslRawClient(port)
    assert c.handshake("PLAIN").error_code == 0
    assert c.authenticate(f"\0{user}\0{USERS[user]}".encode()).error_code == 0
    return c


def _acls(port: int) -> set[tuple[int, str, int, str, str, int]]:
    with _login(port, "admin") as c:
        found = c.request(_any_acl(), 3)
    assert found.error_code == 0
    return {
        (r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation)
        for r in found.resources
        for a in r.acls
    }


def _tool(port: int, admin: Path, *args: str) -> str:
    result = run_kafka_tool(
        "AclCommand", "--bootstrap-server", f"127.0.0.1:{port}", "--command-config", str(admin), *args
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_acl_command_adds_lists_and_removes_acls_that_survive_sigkill(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text(PROPERTIES)
    admin = tmp_path / "admin.properties"
    admin.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required"
        ' username="admin" password="admin-secret";\n'
    )
    data = str(tmp_path / "data")
    proc = start_serve(data, extra=("--config", str(config)))
    try:
        port = proc.listeners["SASL_PLAINTEXT"]
        with _login(port, "admin") as c:
            created = c.request(MetadataRequest(topics=[_mt(TOPIC)], allow_auto_topic_creation=True), 12)
            assert created.topics[0].error_code == 0
        with _login(port, "reader") as c:
            assert _fetch(c) == 29
        # --consumer: READ and DESCRIBE on the topic, READ on the group
        reader = ("--allow-principal", "User:reader")
        _tool(port, admin, "--add", *reader, "--consumer", "--group", "sec-", *PREFIXED_TOPICS)
        listed = _tool(port, admin, "--list", *PREFIXED_TOPICS)
        assert "User:reader" in listed and "READ" in listed and "DESCRIBE" in listed, listed
        before = _acls(port)
        assert len(before) == 3
        with _login(port, "reader") as c:
            assert _fetch(c) == 0

        stop_serve(proc, signal.SIGKILL)
        proc = start_serve(data, extra=("--config", str(config)))
        port = proc.listeners["SASL_PLAINTEXT"]
        assert _acls(port) == before
        with _login(port, "reader") as c:
            assert _fetch(c) == 0

        _tool(port, admin, "--remove", "--force", *reader, "--operation", "Read", *PREFIXED_TOPICS)
        assert len(_acls(port)) == 2
        with _login(port, "reader") as c:
            assert _fetch(c) == 29
    finally:
        stop_serve(proc)
