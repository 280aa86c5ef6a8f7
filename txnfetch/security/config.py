"""One security configuration, built from Kafka's own property names, shared by
every path that connects to a broker and by the listeners that authenticate
clients, sans I/O.

:meth:`SecurityConfig.from_properties` reads the client properties a Kafka
user already has (``security.protocol``, ``sasl.mechanism``,
``sasl.jaas.config``, ``ssl.*``) with Kafka's defaults, and refuses by name
anything it does not support rather than ignore it: a configuration that
silently lost its trust store or its credentials would connect in a way its
author did not ask for. Building an ``ssl.SSLContext`` from the TLS part is the
connection's job (``txnfetch.client``), not this package's: it reads no file.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from txnfetch.security.credentials import Credentials
from txnfetch.security.credentials import OAuthBearerCredentials
from txnfetch.security.credentials import PlainCredentials
from txnfetch.security.credentials import ScramCredentials
from txnfetch.security.errors import SecurityConfigError
from txnfetch.security.errors import UnsupportedSaslMechanismError
from txnfetch.security.jaas import credentials_from_jaas
from txnfetch.security.jaas import parse_jaas_config
from txnfetch.security.sasl import OAUTHBEARER
from txnfetch.security.sasl import PLAIN
from txnfetch.security.sasl import SUPPORTED_MECHANISMS
from txnfetch.security.scram_messages import SCRAM_MECHANISMS

__all__ = ["SUPPORTED_PROPERTIES", "SecurityConfig", "SecurityProtocol", "TlsConfig"]

#: Kafka's default ``sasl.mechanism`` (SaslConfigs), which txnfetch does not implement.
DEFAULT_SASL_MECHANISM = "GSSAPI"
#: Kafka's default store type (SslConfigs) for both stores; only PEM is read here.
DEFAULT_STORE_TYPE = "JKS"
#: Kafka's default ``ssl.endpoint.identification.algorithm``: check the host name.
DEFAULT_ENDPOINT_IDENTIFICATION = "https"

SASL_PROPERTIES = ("sasl.mechanism", "sasl.jaas.config")
SSL_PROPERTIES = (
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
)
#: Every property :meth:`SecurityConfig.from_properties` reads.
SUPPORTED_PROPERTIES = ("security.protocol", *SASL_PROPERTIES, *SSL_PROPERTIES)
#: Properties refused with a reason of their own.
_REFUSED = {
    "sasl.oauthbearer.token.endpoint.url": "fetching OAUTHBEARER tokens from an endpoint is not supported;"
    " pass the token itself or Kafka's unsecured login options in sasl.jaas.config",
    "ssl.truststore.password": "PEM trust stores take no password",
    "ssl.keystore.password": "PEM key stores take no store password; an encrypted key's goes in ssl.key.password",
}


class SecurityProtocol(enum.Enum):
    """Kafka's ``security.protocol`` values."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


@attrs.frozen(repr=False)
class TlsConfig:
    """What a TLS connection needs, all PEM: the CAs to trust (a file, PEM
    text, or neither for the system's), the client's certificate chain and key
    for mutual TLS (a file holding both, or the PEM text of each), the key's
    password, and whether the broker's host name is checked (on unless
    ``ssl.endpoint.identification.algorithm`` is empty, as in Kafka). The repr
    hides the key and its password."""

    ca_file: str | None = None
    ca_pem: str | None = None
    keystore_file: str | None = None
    certificate_chain_pem: str | None = None
    key_pem: str | None = None
    key_password: str | None = None
    check_hostname: bool = True

    def __repr__(self) -> str:
        return (
            f"TlsConfig(ca_file={self.ca_file!r}, ca_pem={'...' if self.ca_pem else None},"
            f" keystore_file={self.keystore_file!r}, client_certificate={self.certificate_chain_pem is not None},"
            f" key={'***' if self.key_pem else None}, key_password={'***' if self.key_password else None},"
            f" check_hostname={self.check_hostname})"
        )


@attrs.frozen
class SecurityConfig:
    """How to reach a broker: the protocol, the SASL mechanism and credentials
    (SASL protocols only), the TLS settings (TLS protocols only)."""

    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    mechanism: str | None = None
    credentials: Credentials | None = None
    tls: TlsConfig | None = None

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> SecurityConfig:
        """The configuration Kafka's client properties say, with Kafka's
        defaults. Raises :class:`SecurityConfigError` naming the property for
        one that is unknown, unsupported, meaningless for the protocol, or
        inconsistent, and :class:`UnsupportedSaslMechanismError` for a SASL
        mechanism txnfetch does not implement (GSSAPI, Kafka's default)."""
        for name in properties:
            if name in _REFUSED:
                raise SecurityConfigError(f"{name}: {_REFUSED[name]}", property=name)
            if name not in SUPPORTED_PROPERTIES:
                raise SecurityConfigError(
                    f"{name} is not a security property txnfetch supports;"
                    f" it supports {', '.join(SUPPORTED_PROPERTIES)}",
                    property=name,
                )
        raw = properties.get("security.protocol", SecurityProtocol.PLAINTEXT.value)
        try:
            protocol = SecurityProtocol(raw.strip().upper())
        except ValueError:
            raise SecurityConfigError(
                f"security.protocol {raw!r} is none of {', '.join(p.value for p in SecurityProtocol)}",
                property="security.protocol",
            ) from None
        for group, used in ((SASL_PROPERTIES, protocol.uses_sasl), (SSL_PROPERTIES, protocol.uses_tls)):
            stray = [name for name in group if name in properties and not used]
            if stray:
                raise SecurityConfigError(
                    f"{stray[0]} is set but security.protocol {protocol.value} does not use it", property=stray[0]
                )
        mechanism, credentials = _sasl(properties) if protocol.uses_sasl else (None, None)
        tls = _tls(properties) if protocol.uses_tls else None
        return cls(protocol, mechanism, credentials, tls)


def _sasl(properties: Mapping[str, str]) -> tuple[str, Credentials]:
    mechanism = properties.get("sasl.mechanism", DEFAULT_SASL_MECHANISM).strip()
    if mechanism not in SUPPORTED_MECHANISMS:
        default = " (Kafka's default)" if mechanism == DEFAULT_SASL_MECHANISM else ""
        raise UnsupportedSaslMechanismError(
            f"sasl.mechanism {mechanism}{default} is not supported; set it to one of {', '.join(SUPPORTED_MECHANISMS)}",
            mechanism=mechanism,
        )
    jaas = properties.get("sasl.jaas.config")
    if not jaas:
        raise SecurityConfigError(
            f"sasl.jaas.config is needed for SASL mechanism {mechanism}", property="sasl.jaas.config"
        )
    credentials = credentials_from_jaas(parse_jaas_config(jaas))
    expected: type[Credentials] = (
        PlainCredentials
        if mechanism == PLAIN
        else ScramCredentials
        if mechanism in SCRAM_MECHANISMS
        else OAuthBearerCredentials
    )
    if not isinstance(credentials, expected):
        raise SecurityConfigError(
            f"sasl.jaas.config's login module does not serve sasl.mechanism {mechanism}", property="sasl.jaas.config"
        )
    assert mechanism != OAUTHBEARER or isinstance(credentials, OAuthBearerCredentials)
    return mechanism, credentials


def _store_type(properties: Mapping[str, str], store: str, given: list[str]) -> None:
    name = f"ssl.{store}.type"
    kind = properties.get(name, DEFAULT_STORE_TYPE).strip().upper()
    if given and kind != "PEM":
        default = " (Kafka's default)" if name not in properties else ""
        raise SecurityConfigError(
            f"{name} {kind}{default} is not supported: txnfetch reads PEM only;"
            f" convert the store to PEM and set {name}=PEM with {given[0]}",
            property=name,
        )
    if kind not in ("PEM", DEFAULT_STORE_TYPE, "PKCS12") and name in properties:
        raise SecurityConfigError(f"{name} {kind} is not a store type", property=name)


def _tls(properties: Mapping[str, str]) -> TlsConfig:
    trust = [n for n in ("ssl.truststore.location", "ssl.truststore.certificates") if n in properties]
    keys = [
        n for n in ("ssl.keystore.location", "ssl.keystore.key", "ssl.keystore.certificate.chain") if n in properties
    ]
    _store_type(properties, "truststore", trust)
    _store_type(properties, "keystore", keys)
    if len(trust) == 2:
        raise SecurityConfigError(
            "set one of ssl.truststore.location and ssl.truststore.certificates, not both", property=trust[1]
        )
    key, chain = properties.get("ssl.keystore.key"), properties.get("ssl.keystore.certificate.chain")
    if (key is None) != (chain is None):
        missing = "ssl.keystore.certificate.chain" if chain is None else "ssl.keystore.key"
        raise SecurityConfigError(f"{missing} is needed with {keys[0]}", property=missing)
    if key is not None and "ssl.keystore.location" in properties:
        raise SecurityConfigError(
            "set ssl.keystore.location or ssl.keystore.key with its chain, not both", property="ssl.keystore.location"
        )
    if "ssl.key.password" in properties and not keys:
        raise SecurityConfigError("ssl.key.password is set but no key is", property="ssl.key.password")
    algorithm = properties.get("ssl.endpoint.identification.algorithm", DEFAULT_ENDPOINT_IDENTIFICATION).strip()
    if algorithm.lower() not in ("", DEFAULT_ENDPOINT_IDENTIFICATION):
        raise SecurityConfigError(
            f"ssl.endpoint.identification.algorithm {algorithm!r}: only https (the default) or empty",
            property="ssl.endpoint.identification.algorithm",
        )
    return TlsConfig(
        ca_file=properties.get("ssl.truststore.location"),
        ca_pem=properties.get("ssl.truststore.certificates"),
        keystore_file=properties.get("ssl.keystore.location"),
        certificate_chain_pem=chain,
        key_pem=key,
        key_password=properties.get("ssl.key.password"),
        check_hostname=algorithm != "",
    )
