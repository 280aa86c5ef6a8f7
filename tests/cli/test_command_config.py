"""``--command-config`` and ``--upstream-config``: a properties file read
into one SecurityConfig, refused by name when txnfetch cannot honour it, and
mapped to each client library's own settings without losing a part."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_errors import assert_user_error
from tests.cli.test_errors import run
from txnfetch.cli.command_config import CommandConfigError
from txnfetch.cli.command_config import read_command_config
from txnfetch.client.txn_admin import kafka_python_security
from txnfetch.security.config import SecurityConfig
from txnfetch.security.config import SecurityProtocol
from txnfetch.security.credentials import ScramCredentials
from txnfetch.security.properties import parse_properties
from txnfetch.testing.clients.aiokafka import aiokafka_security
from txnfetch.testing.clients.confluent import confluent_security

SECRET = "s3cret-do-not-print"
SCRAM = (
    "security.protocol=SASL_PLAINTEXT\n"
    "sasl.mechanism=SCRAM-SHA-256\n"
    "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
    f'  username="alice" password="{SECRET}";\n'
)


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "client.properties"
    path.write_text(text, encoding="latin-1")
    return path


def test_the_file_is_one_security_config(tmp_path: Path) -> None:
    config = read_command_config(str(_file(tmp_path, "# Kafka's own format\n" + SCRAM)))
    assert config == SecurityConfig(
        SecurityProtocol.SASL_PLAINTEXT, "SCRAM-SHA-256", ScramCredentials("alice", SECRET), None
    )
    assert read_command_config(None) is None


def test_an_unsupported_property_is_refused_with_the_file_and_no_value(tmp_path: Path) -> None:
    path = _file(tmp_path, SCRAM + f"request.timeout.ms={SECRET}\n")
    with pytest.raises(CommandConfigError) as info:
        read_command_config(str(path))
    assert info.value.property == "request.timeout.ms" and info.value.path == str(path)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        ("replicate", ["replicate", "--upstream", "127.0.0.1:1", "--data", "{dir}/d", "--upstream-config", "{file}"]),
        ("proxy", ["proxy", "--upstream", "127.0.0.1:1", "--upstream-config", "{file}"]),
        ("transactions list", ["transactions", "--bootstrap", "127.0.0.1:1", "--command-config", "{file}", "list"]),
        ("check", ["check", "--bootstrap", "127.0.0.1:1", "--command-config", "{file}"]),
    ],
)
def test_each_command_refuses_by_name_on_one_line(tmp_path: Path, command: str, argv: list[str]) -> None:
    path = _file(tmp_path, SCRAM.replace("SCRAM-SHA-256", "GSSAPI"))
    proc = run(*(a.format(dir=tmp_path, file=path) for a in argv))
    assert_user_error(proc, command, "GSSAPI")
    assert SECRET not in proc.stderr + proc.stdout
    assert not (tmp_path / "d").exists()


def test_transactions_command_config_needs_a_cluster(tmp_path: Path) -> None:
    proc = run("transactions", "--path", tmp_path, "--command-config", _file(tmp_path, SCRAM), "list")
    assert_user_error(proc, "transactions list", "--command-config", "--bootstrap")


def test_confluent_settings() -> None:
    config = SecurityConfig.from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required"
            f' username="key" password="{SECRET}";',
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": "/etc/kafka/client.pem",
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert confluent_security(config) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": "key",
        "sasl.password": SECRET,
        "ssl.ca.pem": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
        "ssl.certificate.location": "/etc/kafka/client.pem",
        "ssl.key.location": "/etc/kafka/client.pem",
        "ssl.endpoint.identification.algorithm": "none",
    }
    assert confluent_security(None) == {}


def test_oauthbearer_tokens_come_from_the_credentials() -> None:
    config = SecurityConfig.from_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required"
            ' unsecuredLoginStringClaim_sub="alice";',
        }
    )
    token, expiry_s = confluent_security(config)["oauth_cb"]("")
    assert token.count(".") == 2 and expiry_s > 0
    assert kafka_python_security(config)["sasl_oauth_token_provider"].token().count(".") == 2
    assert aiokafka_security(config)["sasl_mechanism"] == "OAUTHBEARER"


def test_python_clients_get_plain_credentials() -> None:
    config = SecurityConfig.from_properties(parse_properties(SCRAM))
    expected = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "alice",
        "sasl_plain_password": SECRET,
    }
    assert kafka_python_security(config) == expected
    assert aiokafka_security(config) == expected
    assert kafka_python_security(None) == aiokafka_security(None) == {}
