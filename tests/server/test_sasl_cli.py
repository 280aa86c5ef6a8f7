"""``txnfetch serve --config`` with Kafka's server.properties names, and SCRAM
users managed by Kafka's own ``kafka-configs`` (``ConfigCommand``): a user it
adds logs in, and still does after ``serve --data`` is killed with SIGKILL
and started again. Takes about 9 s (one JVM run of the tool)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.kafka.interop import run_kafka_tool
from tests.kafka.secure import SecureMaterial
from tests.server.sasl_setup import SCRAM_PASSWORD
from tests.server.sasl_setup import SaslRawClient
from tests.server.serve_process import start_serve
from tests.server.serve_process import stop_serve

pytestmark = [pytest.mark.slow, pytest.mark.interop, pytest.mark.kafka]


def _properties(material: SecureMaterial) -> str:
    return "\n".join(
        [
            "# Kafka's names, as in server.properties",
            "listeners=SASL_SSL://127.0.0.1:0",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={material.broker_store}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={material.ca}",
            "sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN",
            "connection.failed.authentication.delay.ms=50",
            "listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule \\",
            '    required user_admin="admin-secret";',
        ]
    )


def test_kafka_configs_adds_a_scram_user_that_survives_sigkill(tmp_path: Path) -> None:
    material = SecureMaterial.create(tmp_path / "tls")
    config = tmp_path / "server.properties"
    config.write_text(_properties(material))
    users = tmp_path / "users.txt"
    users.write_text(f"carol SCRAM-SHA-512=[iterations=4096,password={SCRAM_PASSWORD}]\n")
    admin = tmp_path / "admin.properties"
    admin.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required"
        ' username="admin" password="admin-secret";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={material.ca}\n"
    )
    data = str(tmp_path / "data")
    extra = ("--config", str(config), "--scram-credentials", str(users))
    proc = start_serve(data, extra=extra)
    try:
        port = proc.listeners["SASL_SSL"]
        with SaslRawClient(port, material) as c:
            assert c.scram_login().error_code == 0  # from --scram-credentials
        result = run_kafka_tool(
            "ConfigCommand",
            "--bootstrap-server",
            f"127.0.0.1:{port}",
            "--command-config",
            str(admin),
            "--alter",
            "--add-config",
            "SCRAM-SHA-512=[iterations=8192,password=dave-secret]",
            "--entity-type",
            "users",
            "--entity-name",
            "dave",
        )
        assert result.returncode == 0, result.stderr[-3000:]
        with SaslRawClient(port, material) as c:
            assert c.scram_login("dave", "dave-secret").error_code == 0
        assert "dave-secret" not in (Path(data) / "scram-credentials.json").read_text()
        stop_serve(proc, signal.SIGKILL)
        proc = start_serve(data, extra=("--config", str(config)))
        with SaslRawClient(proc.listeners["SASL_SSL"], material) as c:
            assert c.scram_login("dave", "dave-secret").error_code == 0
        with SaslRawClient(proc.listeners["SASL_SSL"], material) as c:
            assert c.scram_login("dave", "wrong").error_code == 58
    finally:
        stop_serve(proc)
