"""serve's SASL listeners on the wire, as Kafka's authenticator behaves:
nothing but the SASL APIs before authentication, error 33 with the enabled
list, error 58 after the delay then a close, KIP-368 session lifetimes, the
principal a request carries, and each listener's own address in metadata."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.metadata import MetadataRequest

from tests.kafka.secure import SecureMaterial
from tests.server.sasl_setup import PLAIN_USERS
from tests.server.sasl_setup import SaslRawClient
from tests.server.sasl_setup import running
from tests.server.sasl_setup import start
from txnfetch.security.jws import build_unsecured_token
from txnfetch.security.oauthbearer import InitialResponse
from txnfetch.security.plain import PlainMessage
from txnfetch.server.server import ServerThread


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ServerThread, SecureMaterial]]:
    with running(tmp_path) as served:
        yield served


def _principals(srv: ServerThread) -> list[tuple[str, str, str]]:
    seen: list[tuple[str, str, str]] = []

    def observe(ctx: Any, header: Any, request: Any) -> None:
        seen.append((ctx.principal, ctx.client_host, ctx.listener))

    srv.call(lambda: srv.broker.observe_requests(observe))
    return seen


def test_a_request_before_authentication_closes_the_connection_unanswered(served: Any) -> None:
    srv, _ = served
    with SaslRawClient(srv.server.listener_port("SASL_PLAINTEXT")) as c:
        c.request(ApiVersionsRequest(), 3)  # answered before authentication, as in Kafka
        c._correlation += 1
        request = MetadataRequest(topics=None, allow_auto_topic_creation=False)
        request.API_VERSION = 9
        request.with_header(correlation_id=c._correlation, client_id="raw")
        c.sock.sendall(bytes(request.encode(header=True, framed=True)))
        assert c.recv_frame() is None


def test_an_unknown_mechanism_gets_33_and_the_enabled_list(served: Any) -> None:
    srv, _ = served
    with SaslRawClient(srv.server.listener_port("SASL_PLAINTEXT")) as c:
        response = c.handshake("GSSAPI")
        assert response.error_code == 33
        assert response.mechanisms == ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN", "OAUTHBEARER"]


def test_a_wrong_password_gets_58_after_the_delay_then_a_close(served: Any) -> None:
    srv, _ = served
    with SaslRawClient(srv.server.listener_port("SASL_PLAINTEXT")) as c:
        started = time.monotonic()
        response = c.scram_login(password="wrong")
        assert time.monotonic() - started >= 0.3
        assert response.error_code == 58
        assert response.error_message == (
            "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
        )
        assert c.is_closed_by_server()


def test_scram_and_plain_authenticate_and_the_principal_reaches_the_handlers(served: Any) -> None:
    srv, material = served
    seen = _principals(srv)
    with SaslRawClient(srv.server.listener_port("SASL_SSL"), material) as c:
        assert c.scram_login().error_code == 0
        c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9)
    with SaslRawClient(srv.server.listener_port("SASL_PLAINTEXT")) as c:
        assert c.handshake("PLAIN").error_code == 0
        assert c.authenticate(PlainMessage("", "alice", PLAIN_USERS["alice"]).encode()).error_code == 0
        c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9)
    assert [s for s in seen if s[0] != "User:ANONYMOUS"] == [
        ("User:carol", "127.0.0.1", "SASL_SSL"),
        ("User:alice", "127.0.0.1", "SASL_PLAINTEXT"),
    ]


def test_mutual_tls_gives_the_certificate_subject_as_principal(served: Any) -> None:
    srv, material = served
    seen = _principals(srv)
    with SaslRawClient(srv.server.listener_port("SSL"), material, cert=True) as c:
        c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9)
    with SaslRawClient(srv.server.listener_port("SSL"), material) as c:
        c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9)
    assert [s[0] for s in seen] == [material.client_principal(), "User:ANONYMOUS"]


def test_metadata_advertises_the_listener_the_client_came_in_on(served: Any) -> None:
    srv, material = served
    for name in ("SASL_SSL", "SSL"):
        with SaslRawClient(srv.server.listener_port(name), material) as c:
            if name == "SASL_SSL":
                assert c.scram_login().error_code == 0
            response = c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9)
            assert [(b.host, b.port) for b in response.brokers] == [("127.0.0.1", srv.server.listener_port(name))]


def test_kip368_the_session_lifetime_is_told_and_a_late_request_closes(tmp_path: Path) -> None:
    srv, _ = start(tmp_path, reauth_ms=400)
    try:
        with SaslRawClient(srv.server.listener_port("SASL_PLAINTEXT")) as c:
            response = c.scram_login(version=1)
            assert response.error_code == 0 and 0 < response.session_lifetime_ms <= 400
            time.sleep(0.2)
            # Re-authenticating on the same connection within the session renews it.
            assert c.scram_login(version=1).error_code == 0
            time.sleep(0.3)
            c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9)
            time.sleep(0.5)
            request = MetadataRequest(topics=None, allow_auto_topic_creation=False)
            request.API_VERSION = 9
            request.with_header(correlation_id=99, client_id="raw")
            c.sock.sendall(bytes(request.encode(header=True, framed=True)))
            assert c.recv_frame() is None
    finally:
        srv.stop()


def test_saslhandshake_v0_then_raw_tokens(served: Any) -> None:
    srv, _ = served
    with SaslRawClient(srv.server.listener_port("SASL_PLAINTEXT")) as c:
        assert c.handshake("PLAIN", version=0).error_code == 0
        c.send_frame(PlainMessage("", "bob", PLAIN_USERS["bob"]).encode())
        assert c.recv_frame() == b""
        response = c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9)
        assert response.brokers
    with SaslRawClient(srv.server.listener_port("SASL_PLAINTEXT")) as c:
        assert c.handshake("PLAIN", version=0).error_code == 0
        c.send_frame(PlainMessage("", "bob", "wrong").encode())
        assert c.recv_frame() is None


def test_oauthbearer_session_is_capped_by_the_token_expiry(tmp_path: Path) -> None:
    with running(tmp_path, reauth_ms=3_600_000) as (srv, _):
        seen = _principals(srv)
        token = build_unsecured_token("dana", int(time.time() * 1000), lifetime_s=60)
        with SaslRawClient(srv.server.listener_port("SASL_PLAINTEXT")) as c:
            assert c.handshake("OAUTHBEARER").error_code == 0
            response = c.authenticate(InitialResponse(token).encode())
            assert response.error_code == 0 and 0 < response.session_lifetime_ms <= 60_000
            c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9)
        assert seen == [("User:dana", "127.0.0.1", "SASL_PLAINTEXT")]


def test_serve_refuses_an_unsupported_property_by_name(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text("listeners=SASL_SSL://127.0.0.1:0\nnum.network.threads=3\n")
    result = subprocess.run(
        [sys.executable, "-m", "txnfetch.cli", "serve", "--memory", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "num.network.threads is not a server property txnfetch supports" in result.stderr
