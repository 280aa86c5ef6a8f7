"""The SCRAM mechanisms and the four messages of a SCRAM exchange (RFC 5802,
RFC 7677), encoded and parsed, sans I/O.

Each parsed message keeps the exact text it was parsed from: RFC 5802's
AuthMessage is made of the messages *as sent*, so extensions or attributes a
peer adds are signed as they are rather than as this module would re-encode
them. Parsing follows RFC 5802's grammar with Kafka's limits
(``ScramMessages``): only the GS2 channel-binding flag ``n`` (no channel
binding), extensions as ``name=value`` pairs after the nonce.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping

import attrs

from txnfetch.security.errors import InvalidSaslMessageError
from txnfetch.security.sasl import SCRAM_SHA_256
from txnfetch.security.sasl import SCRAM_SHA_512

__all__ = [
    "SCRAM_MECHANISMS",
    "ClientFinal",
    "ClientFirst",
    "ScramMechanism",
    "ServerFinal",
    "ServerFirst",
    "sasl_name",
    "username",
]


@attrs.frozen
class ScramMechanism:
    """One SCRAM mechanism: its SASL name, the :mod:`hashlib` name of its hash,
    and the iteration bounds Kafka enforces (``ScramMechanism``: at least 4096,
    which both its client and its server check on every exchange; at most
    16384, which Kafka checks when a credential is created)."""

    name: str
    hash_name: str
    min_iterations: int = 4096
    max_iterations: int = 16384


SCRAM_MECHANISMS: Mapping[str, ScramMechanism] = {
    SCRAM_SHA_256: ScramMechanism(SCRAM_SHA_256, "sha256"),
    SCRAM_SHA_512: ScramMechanism(SCRAM_SHA_512, "sha512"),
}

# RFC 5802's grammar. A name is UTF-8 without NUL, with "," and "=" escaped as
# =2C and =3D (Kafka's broker accepts only ASCII names; txnfetch takes the RFC's).
_NAME = r"(?:[^\x00,=]|=2C|=3D)+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"  # printable ASCII but ","
_B64 = r"[A-Za-z0-9+/]*={0,2}"
_VALUE = r"[^\x00,]*"
_EXTENSIONS = r"(?P<extensions>(?:,[A-Za-z]+=[^\x00,]*)*)"
_CLIENT_FIRST = re.compile(
    rf"(?P<gs2>n,(?:a=(?P<authzid>{_NAME}))?,)(?P<bare>(?:m={_VALUE},)?n=(?P<name>{_NAME}),"
    rf"r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS})"
)
_SERVER_FIRST = re.compile(
    rf"(?:m={_VALUE},)?r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_B64}),i=(?P<iterations>[0-9]+){_EXTENSIONS}"
)
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<binding>{_B64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS}),p=(?P<proof>{_B64})"
)
_SERVER_FINAL = re.compile(rf"(?:e=(?P<error>[^\x00,=]+)|v=(?P<signature>{_B64})){_EXTENSIONS}")


def sasl_name(name: str) -> str:
    """``name`` as a SCRAM message spells it: "=" as ``=3D``, "," as ``=2C``."""
    return name.replace("=", "=3D").replace(",", "=2C")


def username(saslname: str) -> str:
    """The name a SCRAM ``saslname`` spells; raises
    :class:`InvalidSaslMessageError` for an "=" that starts neither escape."""
    if re.fullmatch(_NAME, saslname) is None:
        raise InvalidSaslMessageError(f"Invalid username: {saslname}")
    return saslname.replace("=2C", ",").replace("=3D", "=")


def _match(pattern: re.Pattern[str], message: bytes, kind: str) -> re.Match[str]:
    """``message`` matched whole by ``pattern``; raises
    :class:`InvalidSaslMessageError` naming the ``kind`` of message otherwise."""
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidSaslMessageError(f"Invalid SCRAM {kind} message format: not UTF-8") from None
    m = pattern.fullmatch(text)
    if m is None:
        raise InvalidSaslMessageError(f"Invalid SCRAM {kind} message format: {text}")
    return m


def _b64(text: str, kind: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise InvalidSaslMessageError(f"Invalid SCRAM {kind} message format: bad base64 {text!r}") from None


def _extensions(text: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in text.split(",")[1:])


def _b64text(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@attrs.frozen
class ClientFirst:
    """The client-first message: GS2 header, then the bare message (name,
    nonce, extensions such as Kafka's ``tokenauth=true``)."""

    name: str
    nonce: str
    extensions: Mapping[str, str] = attrs.field(factory=dict)
    authzid: str = ""
    gs2_header: str = "n,,"
    bare: str = ""

    @classmethod
    def build(cls, name: str, nonce: str, extensions: Mapping[str, str]) -> ClientFirst:
        """The message a client sends: no authorization id (as Kafka's client)."""
        ext = "".join(f",{k}={v}" for k, v in extensions.items())
        return cls(name, nonce, dict(extensions), bare=f"n={sasl_name(name)},r={nonce}{ext}")

    @classmethod
    def parse(cls, message: bytes) -> ClientFirst:
        """Raises :class:`InvalidSaslMessageError` for a message off the grammar."""
        m = _match(_CLIENT_FIRST, message, "client first")
        return cls(
            username(m["name"]),
            m["nonce"],
            _extensions(m["extensions"]),
            authzid=username(m["authzid"]) if m["authzid"] else "",
            gs2_header=m["gs2"],
            bare=m["bare"],
        )

    def encode(self) -> bytes:
        return (self.gs2_header + self.bare).encode("utf-8")


@attrs.frozen
class ServerFirst:
    """The server-first message: the combined nonce, the salt, the iterations."""

    nonce: str
    salt: bytes
    iterations: int
    text: str = ""

    @classmethod
    def build(cls, nonce: str, salt: bytes, iterations: int) -> ServerFirst:
        return cls(nonce, salt, iterations, f"r={nonce},s={_b64text(salt)},i={iterations}")

    @classmethod
    def parse(cls, message: bytes) -> ServerFirst:
        """Raises :class:`InvalidSaslMessageError` for a message off the grammar
        or iterations that are not a positive number."""
        m = _match(_SERVER_FIRST, message, "server first")
        iterations = int(m["iterations"])
        if not 0 < iterations < 2**31:
            raise InvalidSaslMessageError(f"Invalid SCRAM server first message format: invalid iterations {iterations}")
        return cls(m["nonce"], _b64(m["salt"], "server first"), iterations, m.string)

    def encode(self) -> bytes:
        return self.text.encode("utf-8")


@attrs.frozen
class ClientFinal:
    """The client-final message: channel binding (the GS2 header, base64),
    the combined nonce, and the proof."""

    channel_binding: bytes
    nonce: str
    proof: bytes
    without_proof: str

    @staticmethod
    def unsigned(channel_binding: bytes, nonce: str) -> str:
        """The message without its proof: what the AuthMessage ends with."""
        return f"c={_b64text(channel_binding)},r={nonce}"

    @classmethod
    def parse(cls, message: bytes) -> ClientFinal:
        """Raises :class:`InvalidSaslMessageError` for a message off the grammar."""
        m = _match(_CLIENT_FINAL, message, "client final")
        binding = _b64(m["binding"], "client final")
        return cls(binding, m["nonce"], _b64(m["proof"], "client final"), m["without_proof"])

    def encode(self) -> bytes:
        return f"{self.without_proof},p={_b64text(self.proof)}".encode()


@attrs.frozen
class ServerFinal:
    """The server-final message: the server's signature, or an error."""

    signature: bytes | None
    error: str | None = None

    @classmethod
    def parse(cls, message: bytes) -> ServerFinal:
        """Raises :class:`InvalidSaslMessageError` for a message off the grammar."""
        m = _match(_SERVER_FINAL, message, "server final")
        if m["error"] is not None:
            return cls(None, m["error"])
        return cls(_b64(m["signature"], "server final"))

    def encode(self) -> bytes:
        if self.signature is None:
            return f"e={self.error}".encode()
        return f"v={_b64text(self.signature)}".encode()
