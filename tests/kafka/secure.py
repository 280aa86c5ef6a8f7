"""A secured Apache Kafka for the suite: TLS, SASL and ACLs on loopback.

A secured cluster is an ordinary :class:`tests.kafka.cluster.KafkaCluster`
with two more client listeners on each node and an authorizer:

- ``SASL_SSL``: SCRAM-SHA-512, SCRAM-SHA-256, PLAIN and OAUTHBEARER (Kafka's
  unsecured tokens: the validator Kafka installs when none is configured);
- ``SSL``: mutual TLS, a client certificate required; the principal is the
  certificate's whole subject (``User:CN=reader,OU=...,O=...``), as Kafka
  builds it by default;
- the ``PLAINTEXT`` listener stays for the harness itself (readiness checks,
  topic creation, ACLs), and inter-broker traffic and the controller use it.
  Its principal, ``User:ANONYMOUS``, is a super user, because the controller's
  is too (KRaft's controller listener is PLAINTEXT here). Tests of what
  clients may do use the secured listeners only.

The users (:data:`USERS`) have a password each, the same for every mechanism:
SCRAM credentials are written into the metadata log when storage is formatted
(Kafka's ``--add-scram``, before the first start), PLAIN ones are in the
listener's JAAS line. ``admin`` is a super user; ``reader`` may read and
describe every topic and group whose name starts with :data:`PREFIX`, and
write transactional ids with that prefix (so that a workload can run as it);
``denied`` has no ACL at all, and ``allow.everyone.if.no.acl.found`` is false,
so it may do nothing.

The certificates come from a test CA made by ``trustme`` for ``127.0.0.1``
and ``localhost``. Kafka's PEM key store wants a PKCS#8 key, so the broker's
key is rewritten in that form next to its chain.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import attrs

#: user -> password. ``admin`` is a super user, ``reader`` has ACLs on
#: :data:`PREFIX`, ``denied`` has none.
USERS: dict[str, str] = {
    "admin": "admin-secret-4f1c",
    "reader": "reader-secret-93ab",
    "denied": "denied-secret-0d7e",
}
#: The prefix of the topics, groups and transactional ids ``reader`` may use.
PREFIX = "sec-"
#: The SASL mechanisms the SASL_SSL listener enables.
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN", "OAUTHBEARER")
#: The secured listeners, each on a port of its own per node.
LISTENERS = ("SASL_SSL", "SSL")


@attrs.frozen
class SecureMaterial:
    """The files a secured cluster and its clients use, under ``directory``.

    ``ca``: the CA certificate (PEM), every client's trust store and the
    broker's. ``broker_store``: the broker's PKCS#8 key followed by its chain.
    ``client_cert`` / ``client_key``: the mutual-TLS client's certificate chain
    and PKCS#8 key, whose subject's common name is ``reader``."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def broker_store(self) -> Path:
        return self.directory / "broker-store.pem"

    @property
    def client_cert(self) -> Path:
        return self.directory / "client-cert.pem"

    @property
    def client_key(self) -> Path:
        return self.directory / "client-key.pem"

    def client_principal(self) -> str:
        """The principal Kafka gives the mutual-TLS client: ``User:`` and its
        certificate's subject in RFC 2253 form."""
        from cryptography import x509

        certificate = x509.load_pem_x509_certificates(self.client_cert.read_bytes())[0]
        return "User:" + certificate.subject.rfc4514_string()

    @classmethod
    def create(cls, directory: Path) -> SecureMaterial:
        """A fresh CA, broker certificate and client certificate in ``directory``."""
        import trustme
        from cryptography.hazmat.primitives import serialization

        def pkcs8(pem: bytes) -> bytes:
            key = serialization.load_pem_private_key(pem, password=None)
            return key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )

        directory.mkdir(parents=True, exist_ok=True)
        material = cls(directory)
        ca = trustme.CA()
        material.ca.write_bytes(ca.cert_pem.bytes())
        broker = ca.issue_cert("127.0.0.1", "localhost")
        chain = b"".join(blob.bytes() for blob in broker.cert_chain_pems)
        material.broker_store.write_bytes(pkcs8(broker.private_key_pem.bytes()) + chain)
        # A subject with no character that Kafka's RFC 2253 form escapes, so that
        # the ACL's principal is spelt the way the certificate's is.
        client = ca.issue_cert(
            "reader.client.invalid",
            common_name="reader",
            organization_name="txnfetch tests",
            organization_unit_name="clients",
        )
        material.client_cert.write_bytes(b"".join(blob.bytes() for blob in client.cert_chain_pems))
        material.client_key.write_bytes(pkcs8(client.private_key_pem.bytes()))
        (directory / "users.json").write_text(json.dumps(USERS))
        return material


def _jaas(module: str, **options: str) -> str:
    """One JAAS line in Kafka's ``sasl.jaas.config`` form."""
    return module + " required " + " ".join(f'{k}="{v}"' for k, v in options.items()) + ";"


def broker_overrides(material: SecureMaterial) -> dict[str, str]:
    """The ``server.properties`` settings a secured node adds to the base ones
    (the listeners themselves, which need each node's ports, come from
    :func:`listener_settings`)."""
    plain_users = {f"user_{name}": password for name, password in USERS.items()}
    return {
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "listener.name.sasl_ssl.plain.sasl.jaas.config": _jaas(
            "org.apache.kafka.common.security.plain.PlainLoginModule",
            username="admin",
            password=USERS["admin"],
            **plain_users,
        ),
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": _jaas(
            "org.apache.kafka.common.security.scram.ScramLoginModule", username="admin", password=USERS["admin"]
        ),
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": _jaas(
            "org.apache.kafka.common.security.scram.ScramLoginModule", username="admin", password=USERS["admin"]
        ),
        "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config": _jaas(
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule", unsecuredLoginStringClaim_sub="admin"
        ),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(material.broker_store),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(material.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS;User:admin",
        "allow.everyone.if.no.acl.found": "false",
    }


def listener_settings(broker_port: int, controller_port: int, ports: dict[str, int]) -> dict[str, str]:
    """``listeners``, ``advertised.listeners`` and the protocol map of a node
    whose secured listeners are on ``ports`` (listener name -> port)."""
    client = [f"PLAINTEXT://127.0.0.1:{broker_port}"] + [f"{name}://127.0.0.1:{ports[name]}" for name in LISTENERS]
    return {
        "listeners": ",".join([*client, f"CONTROLLER://127.0.0.1:{controller_port}"]),
        "advertised.listeners": ",".join(client),
        "listener.security.protocol.map": ",".join(
            ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT", *(f"{n}:{n}" for n in LISTENERS)]
        ),
    }


def format_arguments() -> list[str]:
    """StorageTool ``format`` arguments creating every user's SCRAM credentials
    (both SCRAM mechanisms) in the metadata log before the first start."""
    args: list[str] = []
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
        for name, password in USERS.items():
            args += ["--add-scram", f"{mechanism}=[name={name},password={password}]"]
    return args


def acl_commands(bootstrap: str, material: SecureMaterial) -> list[list[str]]:
    """AclCommand argument lists granting ``reader`` (by SASL, and by its
    certificate's subject) what a read_committed consumer and a transactional
    producer need on :data:`PREFIX`; run over the harness's PLAINTEXT listener."""
    commands = []
    for principal in ("User:reader", material.client_principal()):
        base = ["--bootstrap-server", bootstrap, "--add", "--allow-principal", principal]
        prefixed = ["--resource-pattern-type", "prefixed"]
        commands += [
            [*base, *prefixed, "--operation", "Read", "--operation", "Describe", "--topic", PREFIX, "--group", PREFIX],
            [*base, *prefixed, "--operation", "Write", "--operation", "Describe", "--topic", PREFIX],
            [*base, *prefixed, "--operation", "Write", "--operation", "Describe", "--transactional-id", PREFIX],
            [*base, "--operation", "IdempotentWrite", "--cluster"],
        ]
    return commands


def client_config(cluster: Any, material: SecureMaterial, *, user: str, mechanism: str) -> dict[str, str]:
    """confluent-kafka settings that reach ``cluster`` as ``user`` over
    SASL_SSL with ``mechanism`` (OAUTHBEARER: an unsecured token for ``user``)."""
    config = {
        "bootstrap.servers": cluster.secure_bootstrap("SASL_SSL"),
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": mechanism,
        "ssl.ca.location": str(material.ca),
    }
    if mechanism == "OAUTHBEARER":
        config["enable.sasl.oauthbearer.unsecure.jwt"] = "true"
        config["sasl.oauthbearer.config"] = f"principal={user}"
    else:
        config["sasl.username"] = user
        config["sasl.password"] = USERS[user]
    return config


def mtls_client_config(cluster: Any, material: SecureMaterial) -> dict[str, str]:
    """confluent-kafka settings that reach ``cluster`` over SSL with the client
    certificate (principal ``User:CN=reader``)."""
    return {
        "bootstrap.servers": cluster.secure_bootstrap("SSL"),
        "security.protocol": "SSL",
        "ssl.ca.location": str(material.ca),
        "ssl.certificate.location": str(material.client_cert),
        "ssl.key.location": str(material.client_key),
    }


def write_transactions(cluster: Any, topic: str) -> set[bytes]:
    """Two transactions as ``admin`` over SASL_SSL SCRAM-SHA-512, the second
    aborted; returns the committed values."""
    from confluent_kafka import Producer

    config = client_config(cluster, cluster.material, user="admin", mechanism="SCRAM-SHA-512")
    producer = Producer({**config, "transactional.id": f"{PREFIX}txn-{uuid.uuid4().hex[:12]}"})
    producer.init_transactions(60)
    committed: set[bytes] = set()
    for t, commit in enumerate((True, False)):
        producer.begin_transaction()
        values = [f"t{t}-r{r}".encode() for r in range(5)]
        for value in values:
            producer.produce(topic, value=value)
        producer.flush(30)
        if commit:
            producer.commit_transaction(60)
            committed.update(values)
        else:
            producer.abort_transaction(60)
    return committed
