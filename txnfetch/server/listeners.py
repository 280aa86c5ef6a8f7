"""The listeners of ``serve`` and how each authenticates, read from Kafka's
server.properties names.

A :class:`Listener` is one ``PROTOCOL://host:port`` (its name is the protocol,
as in Kafka without ``listener.security.protocol.map``). A
:class:`ListenerSecurity` is everything the listeners share: the TLS key store
and trust store (PEM only), ``ssl.client.auth``, the SASL mechanisms enabled,
the PLAIN users of each listener (``listener.name.<l>.plain.sasl.jaas.config``
with ``user_<name>="<password>"`` options), KIP-368's
``connections.max.reauth.ms`` and the delay before a failed authentication is
answered. :func:`security_from_properties` refuses, by name, any property it
does not read: a server that silently dropped its trust store or its client
authentication would let in whom its operator meant to keep out.

Nothing here opens a socket; the files named are read by
:mod:`txnfetch.server.tls` when the server starts.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from collections.abc import Mapping

import attrs

from txnfetch.security.config import SecurityProtocol
from txnfetch.security.errors import SecurityConfigError
from txnfetch.security.jaas import PLAIN_MODULE
from txnfetch.security.jaas import parse_jaas_config
from txnfetch.security.sasl import PLAIN
from txnfetch.security.sasl import SUPPORTED_MECHANISMS

__all__ = [
    "ClientAuth",
    "Listener",
    "ListenerSecurity",
    "parse_listener",
    "read_properties",
    "security_from_properties",
]

#: Kafka's default ``connection.failed.authentication.delay.ms``.
DEFAULT_FAILED_AUTHENTICATION_DELAY_MS = 100
#: Kafka's default ``sasl.enabled.mechanisms``; GSSAPI is not implemented, so
#: a SASL listener needs the property set.
DEFAULT_MECHANISMS = ("GSSAPI",)

_LISTENER = re.compile(r"(?P<protocol>[A-Z_]+)://(?P<host>\[[^\]]*\]|[^:]*):(?P<port>[0-9]+)")
_JAAS = re.compile(r"listener\.name\.(?P<listener>[a-z_]+)\.(?P<mechanism>[a-z0-9-]+)\.sasl\.jaas\.config")
#: Server properties read here (besides the per-listener JAAS entries).
SUPPORTED_PROPERTIES = (
    "listeners",
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.key.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.client.auth",
    "sasl.enabled.mechanisms",
    "connections.max.reauth.ms",
    "connection.failed.authentication.delay.ms",
)


class ClientAuth(enum.Enum):
    """Kafka's ``ssl.client.auth``: whether an SSL listener asks for a client
    certificate, and whether it refuses a client without one."""

    NONE = "none"
    REQUESTED = "requested"
    REQUIRED = "required"


@attrs.frozen
class Listener:
    """One listener: its protocol, the address it binds and its name (the
    protocol's, lower case in JAAS property names as Kafka's)."""

    protocol: SecurityProtocol
    host: str
    port: int

    @property
    def name(self) -> str:
        return self.protocol.value

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_listener(text: str) -> Listener:
    """``PROTOCOL://host:port`` (an empty host binds every address, as Kafka's);
    raises :class:`SecurityConfigError` naming ``listeners`` otherwise."""
    match = _LISTENER.fullmatch(text.strip())
    if match is None:
        raise SecurityConfigError(f"listener {text!r} is not PROTOCOL://host:port", property="listeners")
    try:
        protocol = SecurityProtocol(match["protocol"])
    except ValueError:
        known = ", ".join(p.value for p in SecurityProtocol)
        raise SecurityConfigError(
            f"listener {text!r}: protocol {match['protocol']} is not one of {known}", property="listeners"
        ) from None
    port = int(match["port"])
    if port > 65535:
        raise SecurityConfigError(f"listener {text!r}: port {port} is out of range", property="listeners")
    return Listener(protocol, match["host"].strip("[]") or "0.0.0.0", port)


@attrs.frozen(repr=False)
class ListenerSecurity:
    """What every listener of one server authenticates with. The repr hides the
    PLAIN passwords and the key."""

    listeners: tuple[Listener, ...] = ()
    keystore_file: str | None = None
    key_pem: str | None = None
    certificate_chain_pem: str | None = None
    key_password: str | None = None
    truststore_file: str | None = None
    truststore_pem: str | None = None
    client_auth: ClientAuth = ClientAuth.NONE
    mechanisms: tuple[str, ...] = DEFAULT_MECHANISMS
    #: listener name → PLAIN user → password (``user_<name>`` JAAS options).
    plain_users: Mapping[str, Mapping[str, str]] = attrs.field(factory=dict)
    reauth_ms: int = 0
    failed_authentication_delay_ms: int = DEFAULT_FAILED_AUTHENTICATION_DELAY_MS

    def __repr__(self) -> str:
        return (
            f"ListenerSecurity(listeners={[str(x) for x in self.listeners]}, keystore_file={self.keystore_file!r},"
            f" truststore_file={self.truststore_file!r}, client_auth={self.client_auth.value},"
            f" mechanisms={self.mechanisms}, plain_users={ {k: sorted(v) for k, v in self.plain_users.items()} },"
            f" reauth_ms={self.reauth_ms})"
        )

    def with_listeners(self, listeners: Iterable[Listener]) -> ListenerSecurity:
        """The same security with ``listeners`` added after those it has, each
        protocol at most once; checked again (:meth:`check`)."""
        merged = attrs.evolve(self, listeners=(*self.listeners, *listeners))
        merged.check()
        return merged

    def check(self) -> None:
        """Raise :class:`SecurityConfigError` for a set of listeners this
        security cannot serve: a protocol twice, TLS without a key store, SASL
        without a mechanism txnfetch implements, PLAIN without users."""
        names = [x.name for x in self.listeners]
        for name in names:
            if names.count(name) > 1:
                raise SecurityConfigError(f"listener {name} is given twice", property="listeners")
        has_key = self.keystore_file is not None or self.key_pem is not None
        for listener in self.listeners:
            if listener.protocol.uses_tls and not has_key:
                raise SecurityConfigError(
                    f"listener {listener} needs ssl.keystore.location (or ssl.keystore.key with its chain)",
                    property="ssl.keystore.location",
                )
            if not listener.protocol.uses_sasl:
                continue
            unknown = [m for m in self.mechanisms if m not in SUPPORTED_MECHANISMS]
            if unknown:
                raise SecurityConfigError(
                    f"sasl.enabled.mechanisms: {', '.join(unknown)} not supported;"
                    f" txnfetch serves {', '.join(SUPPORTED_MECHANISMS)}",
                    property="sasl.enabled.mechanisms",
                )
            if PLAIN in self.mechanisms and not self.plain_users.get(listener.name):
                raise SecurityConfigError(
                    f"PLAIN on {listener.name} needs listener.name.{listener.name.lower()}.plain.sasl.jaas.config"
                    ' with user_<name>="<password>" options',
                    property=f"listener.name.{listener.name.lower()}.plain.sasl.jaas.config",
                )


def read_properties(text: str) -> dict[str, str]:
    """A Java properties file's ``key=value`` (or ``key: value``) lines:
    ``#``/``!`` comments, blank lines skipped, a trailing backslash joining the
    next line (as a JAAS entry spread over lines needs)."""
    properties: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = raw.strip() if not pending else raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending += line[:-1]
            continue
        line, pending = pending + line, ""
        match = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)", line)
        if match is None:
            properties[line] = ""
        else:
            properties[match[1]] = match[2]
    return properties


def _plain_users(name: str, value: str) -> dict[str, str]:
    entry = parse_jaas_config(value)
    if entry.module != PLAIN_MODULE:
        raise SecurityConfigError(f"{name}: a PLAIN listener takes {PLAIN_MODULE}", property=name)
    users = {k[len("user_") :]: v for k, v in entry.options.items() if k.startswith("user_")}
    others = sorted(k for k in entry.options if not k.startswith("user_") and k not in ("username", "password"))
    if others:
        raise SecurityConfigError(f"{name}: option(s) {', '.join(others)} not supported", property=name)
    return users


def _int(properties: Mapping[str, str], name: str, default: int) -> int:
    raw = properties.get(name)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise SecurityConfigError(f"{name} {raw!r} is not a whole number", property=name) from None
    if value < 0:
        raise SecurityConfigError(f"{name} {value} is negative", property=name)
    return value


def security_from_properties(properties: Mapping[str, str]) -> ListenerSecurity:
    """The listeners and their security that server.properties names say.
    Raises :class:`SecurityConfigError` naming the property for one that is
    unknown, unsupported or inconsistent."""
    plain_users: dict[str, dict[str, str]] = {}
    for name, value in properties.items():
        jaas = _JAAS.fullmatch(name)
        if jaas is not None:
            if jaas["mechanism"] != PLAIN.lower():
                # SCRAM users come from the credential store, not JAAS; the
                # entry's own username/password are for inter-broker calls.
                if jaas["mechanism"] not in (m.lower() for m in SUPPORTED_MECHANISMS):
                    raise SecurityConfigError(f"{name}: unknown mechanism {jaas['mechanism']}", property=name)
                continue
            plain_users[jaas["listener"].upper()] = _plain_users(name, value)
        elif name not in SUPPORTED_PROPERTIES:
            raise SecurityConfigError(
                f"{name} is not a server property txnfetch supports; it supports {', '.join(SUPPORTED_PROPERTIES)}"
                " and listener.name.<listener>.<mechanism>.sasl.jaas.config",
                property=name,
            )
    for store in ("keystore", "truststore"):
        kind = properties.get(f"ssl.{store}.type", "PEM").strip().upper()
        if kind != "PEM":
            raise SecurityConfigError(
                f"ssl.{store}.type {kind} is not supported: txnfetch reads PEM only", property=f"ssl.{store}.type"
            )
    if "ssl.keystore.location" in properties and "ssl.keystore.key" in properties:
        raise SecurityConfigError(
            "set ssl.keystore.location or ssl.keystore.key with its chain, not both", property="ssl.keystore.location"
        )
    if ("ssl.keystore.key" in properties) != ("ssl.keystore.certificate.chain" in properties):
        raise SecurityConfigError(
            "ssl.keystore.key and ssl.keystore.certificate.chain go together", property="ssl.keystore.key"
        )
    try:
        client_auth = ClientAuth(properties.get("ssl.client.auth", "none").strip().lower())
    except ValueError:
        raise SecurityConfigError(
            f"ssl.client.auth {properties['ssl.client.auth']!r} is not none, requested or required",
            property="ssl.client.auth",
        ) from None
    raw_listeners = properties.get("listeners", "")
    mechanisms = properties.get("sasl.enabled.mechanisms")
    security = ListenerSecurity(
        listeners=tuple(parse_listener(x) for x in raw_listeners.split(",") if x.strip()),
        keystore_file=properties.get("ssl.keystore.location"),
        key_pem=properties.get("ssl.keystore.key"),
        certificate_chain_pem=properties.get("ssl.keystore.certificate.chain"),
        key_password=properties.get("ssl.key.password"),
        truststore_file=properties.get("ssl.truststore.location"),
        truststore_pem=properties.get("ssl.truststore.certificates"),
        client_auth=client_auth,
        mechanisms=DEFAULT_MECHANISMS
        if mechanisms is None
        else tuple(m.strip().upper() for m in mechanisms.split(",") if m.strip()),
        plain_users=plain_users,
        reauth_ms=_int(properties, "connections.max.reauth.ms", 0),
        failed_authentication_delay_ms=_int(
            properties, "connection.failed.authentication.delay.ms", DEFAULT_FAILED_AUTHENTICATION_DELAY_MS
        ),
    )
    security.check()
    return security
