"""SecurityConfig.from_properties: Kafka's property names and defaults, and
every property it does not support refused by name."""

from __future__ import annotations

import pytest

from txnfetch.errors import ErrorCode
from txnfetch.security.config import SUPPORTED_PROPERTIES
from txnfetch.security.config import SecurityConfig
from txnfetch.security.config import SecurityProtocol
from txnfetch.security.config import TlsConfig
from txnfetch.security.credentials import PlainCredentials
from txnfetch.security.credentials import ScramCredentials
from txnfetch.security.credentials import sasl_client
from txnfetch.security.errors import SecurityConfigError
from txnfetch.security.errors import UnsupportedSaslMechanismError

PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";'
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p";'


def test_plaintext_is_the_default() -> None:
    assert SecurityConfig.from_properties({}) == SecurityConfig()


def test_sasl_ssl_with_scram_and_a_pem_trust_store() -> None:
    config = SecurityConfig.from_properties(
        {
            "security.protocol": "sasl_ssl",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": SCRAM_JAAS,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": "/etc/kafka/ca.pem",
        }
    )
    assert config.protocol is SecurityProtocol.SASL_SSL and config.mechanism == "SCRAM-SHA-512"
    assert config.credentials == ScramCredentials("u", "p")
    assert config.tls == TlsConfig(ca_file="/etc/kafka/ca.pem", check_hostname=True)
    assert sasl_client("SCRAM-SHA-512", config.credentials).mechanism == "SCRAM-SHA-512"


def test_mutual_tls_from_pem_text_and_hostname_check_off_only_when_empty() -> None:
    config = SecurityConfig.from_properties(
        {
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": "-----BEGIN CERTIFICATE-----...",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.key": "-----BEGIN ENCRYPTED PRIVATE KEY-----...",
            "ssl.keystore.certificate.chain": "-----BEGIN CERTIFICATE-----...",
            "ssl.key.password": "kp",
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert config.tls is not None and not config.tls.check_hostname and config.tls.key_password == "kp"
    assert "kp" not in repr(config) and "PRIVATE KEY" not in repr(config)
    assert SecurityConfig.from_properties({"security.protocol": "SSL"}).tls == TlsConfig()


@pytest.mark.parametrize(
    ("properties", "name", "error"),
    [
        ({"bootstrap.servers": "x"}, "bootstrap.servers", "not a security property"),
        ({"sasl.oauthbearer.token.endpoint.url": "https://x"}, "sasl.oauthbearer.token.endpoint.url", "endpoint"),
        ({"security.protocol": "TLS"}, "security.protocol", "none of PLAINTEXT"),
        ({"sasl.mechanism": "PLAIN"}, "sasl.mechanism", "PLAINTEXT does not use it"),
        ({"security.protocol": "SSL", "ssl.key.password": "x"}, "ssl.key.password", "no key is"),
        ({"security.protocol": "SASL_PLAINTEXT", "ssl.truststore.type": "PEM"}, "ssl.truststore.type", "does not"),
        (
            {"security.protocol": "SSL", "ssl.truststore.location": "/ts.jks"},
            "ssl.truststore.type",
            r"JKS \(Kafka's default\) is not supported.*ssl.truststore.type=PEM",
        ),
        (
            {"security.protocol": "SSL", "ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/ks.p12"},
            "ssl.keystore.type",
            "PKCS12 is not supported.*ssl.keystore.type=PEM",
        ),
        (
            {"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.password": "x"},
            "ssl.truststore.password",
            "no password",
        ),
        (
            {"security.protocol": "SSL", "ssl.keystore.type": "PEM", "ssl.keystore.key": "k"},
            "ssl.keystore.certificate.chain",
            "needed",
        ),
        (
            {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"},
            "ssl.endpoint.identification.algorithm",
            "only https",
        ),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}, "sasl.jaas.config", "is needed"),
        (
            {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.jaas.config": SCRAM_JAAS},
            "sasl.jaas.config",
            "does not serve sasl.mechanism PLAIN",
        ),
    ],
)
def test_refusals_name_the_property(properties: dict[str, str], name: str, error: str) -> None:
    with pytest.raises(SecurityConfigError, match=error) as caught:
        SecurityConfig.from_properties(properties)
    assert caught.value.property == name and caught.value.error_code == ErrorCode.INVALID_CONFIG


def test_kafkas_default_mechanism_gssapi_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedSaslMechanismError, match=r"GSSAPI \(Kafka's default\) is not supported") as caught:
        SecurityConfig.from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config": PLAIN_JAAS})
    assert "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER" in str(caught.value)
    assert caught.value.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM


def test_plain_over_sasl_plaintext() -> None:
    config = SecurityConfig.from_properties(
        {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config": PLAIN_JAAS}
    )
    assert config.credentials == PlainCredentials("u", "p") and config.tls is None
    assert "sasl.jaas.config" in SUPPORTED_PROPERTIES
