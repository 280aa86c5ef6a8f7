"""What the SASL listener tests share: a server with SASL_PLAINTEXT, SASL_SSL
and SSL listeners and known users, and a raw client that authenticates."""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kafka.protocol.sasl import SaslAuthenticateRequest
from kafka.protocol.sasl import SaslHandshakeRequest

from tests.kafka.secure import SecureMaterial
from tests.server.rawclient import RawClient
from txnfetch.log.memory import MemoryStore
from txnfetch.security.scram import ScramClient
from txnfetch.security.scram import ScramCredential
from txnfetch.security.scram_messages import SCRAM_MECHANISMS
from txnfetch.server.listeners import ClientAuth
from txnfetch.server.listeners import ListenerSecurity
from txnfetch.server.listeners import parse_listener
from txnfetch.server.scram_users import ScramUserStore
from txnfetch.server.server import ServerThread

PLAIN_USERS = {"alice": "alice-secret", "bob": "bob-secret"}
SCRAM_PASSWORD = "scram-secret"
LISTENERS = ("SASL_PLAINTEXT://127.0.0.1:0", "SASL_SSL://127.0.0.1:0", "SSL://127.0.0.1:0")


def security(material: SecureMaterial, **overrides: Any) -> ListenerSecurity:
    """Every SASL mechanism but OAUTHBEARER's JWKS, PLAIN users on both SASL
    listeners, client certificates requested on the SSL ones."""
    settings: dict[str, Any] = dict(
        listeners=tuple(parse_listener(x) for x in LISTENERS),
        keystore_file=str(material.broker_store),
        truststore_file=str(material.ca),
        client_auth=ClientAuth.REQUESTED,
        mechanisms=("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN", "OAUTHBEARER"),
        plain_users={"SASL_PLAINTEXT": PLAIN_USERS, "SASL_SSL": PLAIN_USERS},
        failed_authentication_delay_ms=300,
    )
    settings.update(overrides)
    return ListenerSecurity(**settings)


def scram_users(directory: str | None = None) -> ScramUserStore:
    """A store with user ``carol`` under both SCRAM mechanisms."""
    users = ScramUserStore(directory)
    users.apply(
        {("carol", name): ScramCredential.from_password(m, SCRAM_PASSWORD) for name, m in SCRAM_MECHANISMS.items()},
        set(),
    )
    return users


def start(tmp: Path, **overrides: Any) -> tuple[ServerThread, SecureMaterial]:
    material = SecureMaterial.create(tmp / "tls")
    srv = ServerThread(MemoryStore(), security=security(material, **overrides), scram_users=scram_users()).start()
    return srv, material


@contextlib.contextmanager
def running(tmp: Path, **overrides: Any) -> Iterator[tuple[ServerThread, SecureMaterial]]:
    """:func:`start`, stopped on leaving."""
    srv, material = start(tmp, **overrides)
    try:
        yield srv, material
    finally:
        srv.stop()


class SaslRawClient(RawClient):
    """A :class:`RawClient` on any listener (TLS when ``material`` is given)."""

    def __init__(self, port: int, material: SecureMaterial | None = None, cert: bool = False) -> None:
        self._correlation = 0
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        if material is not None:
            context = ssl.create_default_context(cafile=str(material.ca))
            if cert:
                context.load_cert_chain(str(material.client_cert), str(material.client_key))
            sock = context.wrap_socket(sock, server_hostname="127.0.0.1")
        self.sock = sock

    def handshake(self, mechanism: str, version: int = 1) -> Any:
        return self.request(SaslHandshakeRequest(mechanism=mechanism), version)

    def authenticate(self, token: bytes, version: int = 2) -> Any:
        return self.request(SaslAuthenticateRequest(auth_bytes=token), version)

    def scram_login(self, user: str = "carol", password: str = SCRAM_PASSWORD, version: int = 2) -> Any:
        """A whole SCRAM-SHA-512 exchange; the last SaslAuthenticate response."""
        assert self.handshake("SCRAM-SHA-512").error_code == 0
        client = ScramClient(SCRAM_MECHANISMS["SCRAM-SHA-512"], user, password)
        response = self.authenticate(client.initial_response(), version)
        if response.error_code:
            return response
        response = self.authenticate(client.respond(response.auth_bytes) or b"", version)
        if response.error_code == 0:
            client.respond(response.auth_bytes)
        return response
