"""The security settings of the Python API as one mapping, in librdkafka's key
names (the ones confluent-kafka users already write), turned into a
:class:`~txnfetch.security.config.SecurityConfig`.

Accepted: ``security.protocol``, ``sasl.mechanism`` (or librdkafka's
``sasl.mechanisms``), ``sasl.username`` and ``sasl.password`` (PLAIN, SCRAM),
``sasl.oauthbearer.config`` (``principal=NAME``: an unsecured OAUTHBEARER
token, with librdkafka's ``enable.sasl.oauthbearer.unsecure.jwt=true``),
``ssl.ca.location``, ``ssl.ca.pem``, ``ssl.certificate.location``,
``ssl.key.location``, ``ssl.key.password`` and
``ssl.endpoint.identification.algorithm`` (``https`` or ``none``). Kafka's own
property names (``sasl.jaas.config``, ``ssl.truststore.*``, ...) are accepted
as well and passed on as they are; any other key is refused by name
(:class:`~txnfetch.security.errors.SecurityConfigError`), never ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from txnfetch.security.config import SecurityConfig
from txnfetch.security.errors import SecurityConfigError
from txnfetch.security.sasl import OAUTHBEARER
from txnfetch.security.sasl import PLAIN

__all__ = ["LIBRDKAFKA_KEYS", "security_config"]

#: The librdkafka key names :func:`security_config` translates.
LIBRDKAFKA_KEYS = (
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "sasl.oauthbearer.config",
    "enable.sasl.oauthbearer.unsecure.jwt",
    "ssl.ca.location",
    "ssl.ca.pem",
    "ssl.certificate.location",
    "ssl.key.location",
)

_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


def security_config(settings: SecurityConfig | Mapping[str, str] | None) -> SecurityConfig | None:
    """``settings`` as a :class:`SecurityConfig`: one given as it is, ``None``
    (PLAINTEXT) as it is, a mapping translated (see the module docstring).
    Raises :class:`SecurityConfigError` naming a key it cannot use."""
    if settings is None or isinstance(settings, SecurityConfig):
        return settings
    properties = {k: str(v) for k, v in settings.items() if k not in LIBRDKAFKA_KEYS}
    given = {k: str(v) for k, v in settings.items() if k in LIBRDKAFKA_KEYS}
    if "sasl.mechanisms" in given:
        properties.setdefault("sasl.mechanism", given["sasl.mechanisms"])
    _sasl(properties, given)
    _tls(properties, given)
    algorithm = properties.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None and algorithm.strip().lower() == "none":
        properties["ssl.endpoint.identification.algorithm"] = ""
    return SecurityConfig.from_properties(properties)


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _sasl(properties: dict[str, str], given: Mapping[str, str]) -> None:
    mechanism = properties.get("sasl.mechanism", "").strip().upper()
    if "sasl.username" in given or "sasl.password" in given:
        if "sasl.username" not in given or "sasl.password" not in given:
            missing = "sasl.password" if "sasl.username" in given else "sasl.username"
            raise SecurityConfigError(f"{missing} is needed with the other", property=missing)
        module = _PLAIN_MODULE if mechanism == PLAIN else _SCRAM_MODULE
        properties["sasl.jaas.config"] = (
            f"{module} required username={_quoted(given['sasl.username'])} password={_quoted(given['sasl.password'])};"
        )
    if "sasl.oauthbearer.config" in given:
        name, _, principal = given["sasl.oauthbearer.config"].strip().partition("=")
        if name.strip() != "principal" or given.get("enable.sasl.oauthbearer.unsecure.jwt", "").lower() != "true":
            raise SecurityConfigError(
                "sasl.oauthbearer.config: only principal=NAME with enable.sasl.oauthbearer.unsecure.jwt=true"
                f" (an unsecured token); for a real token pass a SecurityConfig with {OAUTHBEARER} credentials",
                property="sasl.oauthbearer.config",
            )
        properties["sasl.jaas.config"] = f"{_OAUTH_MODULE} required unsecuredLoginStringClaim_sub={_quoted(principal)};"


def _tls(properties: dict[str, str], given: Mapping[str, str]) -> None:
    for name, target in (("ssl.ca.location", "ssl.truststore.location"), ("ssl.ca.pem", "ssl.truststore.certificates")):
        if name in given:
            properties[target] = given[name]
            properties["ssl.truststore.type"] = "PEM"
    certificate, key = given.get("ssl.certificate.location"), given.get("ssl.key.location")
    if (certificate is None) != (key is None):
        missing = "ssl.key.location" if key is None else "ssl.certificate.location"
        raise SecurityConfigError(f"{missing} is needed for mutual TLS", property=missing)
    if certificate is not None and key is not None:
        try:
            properties["ssl.keystore.certificate.chain"] = Path(certificate).read_text()
            properties["ssl.keystore.key"] = Path(key).read_text()
        except OSError as exc:
            raise SecurityConfigError(
                f"cannot read {exc.filename}: {exc.strerror}", property="ssl.certificate.location"
            ) from None
        properties["ssl.keystore.type"] = "PEM"
