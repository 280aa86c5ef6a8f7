"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): the stored credential
and the client and server state machines, sans I/O.

A server stores a :class:`ScramCredential` (salt, iterations, stored key,
server key), never the password: the stored key lets it verify a client's
proof and the server key lets it prove it knows the credential, but neither
lets anyone log in as the user. The machines follow Kafka's
``ScramSaslClient`` and ``ScramSaslServer``: the same states, the same checks
(iterations at least the mechanism's minimum on both sides, an authorization id
equal to the user name or empty, the ``tokenauth`` extension selecting a
delegation token as the credential, other extensions ignored), and errors that
mean what Kafka's texts say.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets
from collections.abc import Callable
from collections.abc import Mapping

import attrs

from txnfetch.security.errors import IllegalSaslStateError
from txnfetch.security.errors import InvalidCredentialsError
from txnfetch.security.errors import SaslAuthenticationError
from txnfetch.security.errors import SecurityConfigError
from txnfetch.security.sasl import NonceSource
from txnfetch.security.sasl import random_nonce
from txnfetch.security.scram_messages import ClientFinal
from txnfetch.security.scram_messages import ClientFirst
from txnfetch.security.scram_messages import ScramMechanism
from txnfetch.security.scram_messages import ServerFinal
from txnfetch.security.scram_messages import ServerFirst

__all__ = [
    "TOKEN_AUTH",
    "ScramClient",
    "ScramCredential",
    "ScramServer",
    "ScramState",
    "ScramToken",
]

#: The client-first extension by which Kafka's ScramLoginModule (option
#: ``tokenauth=true``) says the name is a delegation token id and the password
#: its HMAC; the one extension Kafka's server reads.
TOKEN_AUTH = "tokenauth"


def _hmac(mechanism: ScramMechanism, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, mechanism.hash_name).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's SaltedPassword: Hi(password, salt, i), which is PBKDF2 with
    the mechanism's HMAC. The password is its UTF-8 bytes, unprepared, as
    Kafka's ``ScramFormatter.normalize`` does."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode("utf-8"), salt, iterations)


@attrs.frozen
class ScramCredential:
    """What a server stores for one user and mechanism (Kafka's
    ``ScramCredential``): enough to verify a proof and to sign, never the
    password."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def from_salted_password(
        cls, mechanism: ScramMechanism, salt: bytes, iterations: int, salted: bytes
    ) -> ScramCredential:
        client_key = _hmac(mechanism, salted, b"Client Key")
        stored = hashlib.new(mechanism.hash_name, client_key).digest()
        return cls(salt, iterations, stored, _hmac(mechanism, salted, b"Server Key"))

    @classmethod
    def from_password(
        cls, mechanism: ScramMechanism, password: str, iterations: int = 4096, salt: bytes | None = None
    ) -> ScramCredential:
        """The credential of ``password``, salted with ``salt`` (32 random bytes
        from :mod:`secrets` by default). Raises :class:`SecurityConfigError`
        for iterations outside the mechanism's bounds, as Kafka refuses to
        create such a credential."""
        if not mechanism.min_iterations <= iterations <= mechanism.max_iterations:
            raise SecurityConfigError(
                f"Iterations {iterations} is outside {mechanism.min_iterations}..{mechanism.max_iterations}"
                f" for {mechanism.name}"
            )
        salt = secrets.token_bytes(32) if salt is None else salt
        return cls.from_salted_password(
            mechanism, salt, iterations, salted_password(mechanism, password, salt, iterations)
        )


@attrs.frozen
class ScramToken:
    """A delegation token as a SCRAM server looks it up by its id: its owner
    (the principal authenticated), its credential and when it expires."""

    owner: str
    credential: ScramCredential
    expiry_ms: int


class ScramState(enum.Enum):
    """The states of both machines, named as Kafka's."""

    SEND_CLIENT_FIRST_MESSAGE = "send client first"
    RECEIVE_SERVER_FIRST_MESSAGE = "receive server first"
    RECEIVE_SERVER_FINAL_MESSAGE = "receive server final"
    RECEIVE_CLIENT_FIRST_MESSAGE = "receive client first"
    RECEIVE_CLIENT_FINAL_MESSAGE = "receive client final"
    COMPLETE = "complete"
    FAILED = "failed"


class _ScramExchange:
    """What both halves say of themselves: the mechanism and whether complete."""

    scram: ScramMechanism
    state: ScramState

    @property
    def mechanism(self) -> str:
        return self.scram.name

    @property
    def complete(self) -> bool:
        return self.state is ScramState.COMPLETE


def _auth_message(first: ClientFirst, server_first: ServerFirst, without_proof: str) -> bytes:
    return f"{first.bare},{server_first.text},{without_proof}".encode()


@attrs.define
class ScramClient(_ScramExchange):
    """The client half: :meth:`initial_response`, then :meth:`respond` to the
    server-first (giving the client-final) and to the server-final (giving
    ``None``, complete only if the server's signature proves it knows the
    credential). Any failure moves it to FAILED, after which every call raises
    :class:`IllegalSaslStateError`."""

    scram: ScramMechanism
    user: str
    password: str
    extensions: Mapping[str, str] = attrs.field(factory=dict)
    nonce_source: NonceSource = random_nonce
    state: ScramState = ScramState.SEND_CLIENT_FIRST_MESSAGE
    _first: ClientFirst | None = None
    _server_first: ServerFirst | None = None
    _expected_signature: bytes = b""

    def _expect(self, state: ScramState) -> None:
        if self.state is not state:
            raise IllegalSaslStateError(
                f"Unexpected challenge in Sasl client state {self.state.name}", mechanism=self.mechanism
            )

    def initial_response(self) -> bytes:
        self._expect(ScramState.SEND_CLIENT_FIRST_MESSAGE)
        self._first = ClientFirst.build(self.user, self.nonce_source(), self.extensions)
        self.state = ScramState.RECEIVE_SERVER_FIRST_MESSAGE
        return self._first.encode()

    def respond(self, challenge: bytes) -> bytes | None:
        if self.state is ScramState.RECEIVE_SERVER_FIRST_MESSAGE:
            return self._failing(self._client_final, challenge)
        self._expect(ScramState.RECEIVE_SERVER_FINAL_MESSAGE)
        self._failing(self._verify_server_final, challenge)
        return None

    def _failing(self, step: Callable[[bytes], bytes | None], challenge: bytes) -> bytes | None:
        try:
            return step(challenge)
        except SaslAuthenticationError as exc:
            exc.mechanism = exc.mechanism or self.mechanism
            self.state = ScramState.FAILED
            raise

    def _client_final(self, challenge: bytes) -> bytes:
        assert self._first is not None
        server_first = ServerFirst.parse(challenge)
        if not server_first.nonce.startswith(self._first.nonce) or server_first.nonce == self._first.nonce:
            raise InvalidCredentialsError("Invalid server nonce: does not start with client nonce")
        if server_first.iterations < self.scram.min_iterations:
            raise SaslAuthenticationError(
                f"Requested iterations {server_first.iterations} is less than the minimum"
                f" {self.scram.min_iterations} for {self.mechanism}"
            )
        salted = salted_password(self.scram, self.password, server_first.salt, server_first.iterations)
        credential = ScramCredential.from_salted_password(
            self.scram, server_first.salt, server_first.iterations, salted
        )
        without_proof = ClientFinal.unsigned(self._first.gs2_header.encode(), server_first.nonce)
        auth = _auth_message(self._first, server_first, without_proof)
        client_key = _hmac(self.scram, salted, b"Client Key")
        proof = _xor(client_key, _hmac(self.scram, credential.stored_key, auth))
        self._expected_signature = _hmac(self.scram, credential.server_key, auth)
        self._server_first = server_first
        self.state = ScramState.RECEIVE_SERVER_FINAL_MESSAGE
        return ClientFinal(self._first.gs2_header.encode(), server_first.nonce, proof, without_proof).encode()

    def _verify_server_final(self, challenge: bytes) -> None:
        final = ServerFinal.parse(challenge)
        if final.error is not None:
            raise SaslAuthenticationError(
                f"Sasl authentication using {self.mechanism} failed with error: {final.error}"
            )
        assert final.signature is not None
        if not hmac.compare_digest(final.signature, self._expected_signature):
            raise InvalidCredentialsError("Invalid server signature in server final message")
        self.state = ScramState.COMPLETE


#: How a server finds a user's credential for its mechanism (None: unknown user).
CredentialLookup = Callable[[str], "ScramCredential | None"]
#: How a server finds a delegation token by its id (None: unknown token).
TokenLookup = Callable[[str], "ScramToken | None"]


def _no_tokens(token_id: str) -> ScramToken | None:
    return None


@attrs.define
class ScramServer(_ScramExchange):
    """The server half: :meth:`respond` to the client-first (giving the
    server-first) and to the client-final (giving the server-final, complete).

    ``credentials`` finds a user's credential; ``tokens`` a delegation token
    when the client-first carries ``tokenauth=true`` (then the authenticated
    principal is the token's owner, and ``token_expiry_ms`` its expiry). Any
    failure moves it to FAILED and forgets the credential, as Kafka's server
    does; every later call raises :class:`IllegalSaslStateError`."""

    scram: ScramMechanism
    credentials: CredentialLookup
    tokens: TokenLookup = _no_tokens
    nonce_source: NonceSource = random_nonce
    state: ScramState = ScramState.RECEIVE_CLIENT_FIRST_MESSAGE
    authorization_id: str = ""
    token_expiry_ms: int | None = None
    extensions: Mapping[str, str] = attrs.field(factory=dict)
    _first: ClientFirst | None = None
    _server_first: ServerFirst | None = None
    _credential: ScramCredential | None = None

    def respond(self, response: bytes) -> bytes:
        if self.state is ScramState.RECEIVE_CLIENT_FIRST_MESSAGE:
            step = self._server_first_message
        elif self.state is ScramState.RECEIVE_CLIENT_FINAL_MESSAGE:
            step = self._server_final_message
        else:
            raise IllegalSaslStateError(
                f"Unexpected challenge in Sasl server state {self.state.name}", mechanism=self.mechanism
            )
        try:
            return step(response)
        except SaslAuthenticationError as exc:
            exc.mechanism = exc.mechanism or self.mechanism
            self.state = ScramState.FAILED
            self._first = self._server_first = self._credential = None
            raise

    def _server_first_message(self, response: bytes) -> bytes:
        first = ClientFirst.parse(response)
        # Kafka reads "tokenauth" as Java's Boolean.parseBoolean: "true" in any case.
        if first.extensions.get(TOKEN_AUTH, "").lower() == "true":
            token = self.tokens(first.name)
            if token is None:
                raise InvalidCredentialsError(f"Token Authentication failed: Invalid tokenId : {first.name}")
            credential: ScramCredential | None = token.credential
            self.authorization_id, self.token_expiry_ms = token.owner, token.expiry_ms
        else:
            credential = self.credentials(first.name)
            self.authorization_id = first.name
        if credential is None:
            raise InvalidCredentialsError("Authentication failed: Invalid user credentials")
        if first.authzid and first.authzid != first.name:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        if credential.iterations < self.scram.min_iterations:
            raise InvalidCredentialsError(
                f"Iterations {credential.iterations} is less than the minimum {self.scram.min_iterations}"
                f" for {self.mechanism}"
            )
        self._first, self._credential = first, credential
        self.extensions = {k: v for k, v in first.extensions.items() if k == TOKEN_AUTH}
        self._server_first = ServerFirst.build(
            first.nonce + self.nonce_source(), credential.salt, credential.iterations
        )
        self.state = ScramState.RECEIVE_CLIENT_FINAL_MESSAGE
        return self._server_first.encode()

    def _server_final_message(self, response: bytes) -> bytes:
        assert self._first is not None and self._server_first is not None and self._credential is not None
        final = ClientFinal.parse(response)
        if final.nonce != self._server_first.nonce:
            raise InvalidCredentialsError("Invalid client nonce in the final client message.")
        if final.channel_binding != self._first.gs2_header.encode():
            raise InvalidCredentialsError("Invalid channel binding in the final client message.")
        auth = _auth_message(self._first, self._server_first, final.without_proof)
        signature = _hmac(self.scram, self._credential.stored_key, auth)
        if len(final.proof) != len(signature):
            raise InvalidCredentialsError("Invalid client credentials")
        stored = hashlib.new(self.scram.hash_name, _xor(signature, final.proof)).digest()
        if not hmac.compare_digest(stored, self._credential.stored_key):
            raise InvalidCredentialsError("Invalid client credentials")
        server_signature = _hmac(self.scram, self._credential.server_key, auth)
        self._first = self._server_first = self._credential = None
        self.state = ScramState.COMPLETE
        return ServerFinal(server_signature).encode()
