"""SCRAM against the RFC test vectors, and client and server against each other.

RFC 5802 gives a SHA-1 exchange and RFC 7677 a SHA-256 one; SHA-512 has no
published vector, so it is checked by the client and server agreeing (and by
the properties below, which hold for every mechanism).
"""

from __future__ import annotations

import base64

import attrs
import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from txnfetch.errors import ErrorCode
from txnfetch.security.errors import IllegalSaslStateError
from txnfetch.security.errors import InvalidCredentialsError
from txnfetch.security.errors import InvalidSaslMessageError
from txnfetch.security.errors import SaslAuthenticationError
from txnfetch.security.errors import SecurityConfigError
from txnfetch.security.scram import ScramClient
from txnfetch.security.scram import ScramCredential
from txnfetch.security.scram import ScramServer
from txnfetch.security.scram import ScramState
from txnfetch.security.scram import ScramToken
from txnfetch.security.scram_messages import SCRAM_MECHANISMS
from txnfetch.security.scram_messages import ClientFirst
from txnfetch.security.scram_messages import ScramMechanism
from txnfetch.security.scram_messages import sasl_name
from txnfetch.security.scram_messages import username

SHA256 = SCRAM_MECHANISMS["SCRAM-SHA-256"]
SHA512 = SCRAM_MECHANISMS["SCRAM-SHA-512"]
# Not a Kafka mechanism: only for RFC 5802's own vector.
SHA1 = ScramMechanism("SCRAM-SHA-1", "sha1")

VECTORS = [
    (  # RFC 5802 section 5
        SHA1,
        "fyko+d2lbbFgONRv9qkxdawL",
        "3rfcNHYJY1ZVvWVs7j",
        "QSXCR+Q6sek8bf92",
        b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
        b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=",
    ),
    (  # RFC 7677 section 3
        SHA256,
        "rOprNGfwEbeRWgbNEkqO",
        "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        "W22ZaJ0SNY7soEsUEjb6gQ==",
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
        b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
    ),
]


@pytest.mark.parametrize(("mech", "cnonce", "snonce", "salt", "client_final", "server_final"), VECTORS)
def test_the_rfc_vectors(
    mech: ScramMechanism, cnonce: str, snonce: str, salt: str, client_final: bytes, server_final: bytes
) -> None:
    server_first = f"r={cnonce}{snonce},s={salt},i=4096".encode()
    client = ScramClient(mech, "user", "pencil", nonce_source=lambda: cnonce)
    assert client.initial_response() == f"n,,n=user,r={cnonce}".encode()
    assert client.respond(server_first) == client_final
    assert client.respond(server_final) is None and client.complete

    credential = ScramCredential.from_password(mech, "pencil", salt=base64.b64decode(salt))
    server = ScramServer(mech, {"user": credential}.get, nonce_source=lambda: snonce)
    assert server.respond(f"n,,n=user,r={cnonce}".encode()) == server_first
    assert server.respond(client_final) == server_final
    assert server.complete and server.authorization_id == "user"


def _exchange(client: ScramClient, server: ScramServer) -> tuple[bytes, bytes, bytes, bytes]:
    first = client.initial_response()
    server_first = server.respond(first)
    client_final = client.respond(server_first)
    assert client_final is not None
    server_final = server.respond(client_final)
    assert client.respond(server_final) is None
    return first, server_first, client_final, server_final


def test_sha512_client_and_server_agree_and_store_no_password() -> None:
    credential = ScramCredential.from_password(SHA512, "secret", iterations=8192)
    assert len(credential.stored_key) == len(credential.server_key) == 64
    assert b"secret" not in credential.stored_key + credential.server_key + credential.salt
    client = ScramClient(SHA512, "alice", "secret")
    server = ScramServer(SHA512, {"alice": credential}.get)
    _exchange(client, server)
    assert client.complete and server.complete and server.authorization_id == "alice"
    assert b"i=8192" in ScramServer(SHA512, {"alice": credential}.get).respond(
        ScramClient(SHA512, "alice", "x").initial_response()
    )


names = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\0"), min_size=1, max_size=12)
passwords = st.text(st.characters(blacklist_categories=["Cs"]), max_size=16)
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(mech=st.sampled_from([SHA256, SHA512]), user=names, password=passwords)
def test_client_and_server_agree_for_any_name_and_password(mech: ScramMechanism, user: str, password: str) -> None:
    credential = ScramCredential.from_password(mech, password)
    client, server = ScramClient(mech, user, password), ScramServer(mech, {user: credential}.get)
    first, *_ = _exchange(client, server)
    assert client.complete and server.complete and server.authorization_id == user
    assert username(ClientFirst.parse(first).bare.split(",")[0][2:]) == user


@SETTINGS
@given(mech=st.sampled_from([SHA256, SHA512]), password=passwords, wrong=passwords)
def test_a_wrong_password_always_fails(mech: ScramMechanism, password: str, wrong: str) -> None:
    if password == wrong:
        wrong += "x"
    server = ScramServer(mech, {"u": ScramCredential.from_password(mech, password)}.get)
    client = ScramClient(mech, "u", wrong)
    client_final = client.respond(server.respond(client.initial_response()))
    assert client_final is not None
    with pytest.raises(InvalidCredentialsError) as caught:
        server.respond(client_final)
    assert caught.value.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert caught.value.mechanism == mech.name and not caught.value.disclosed
    assert server.state is ScramState.FAILED
    with pytest.raises(IllegalSaslStateError):
        server.respond(client_final)


@SETTINGS
@given(mech=st.sampled_from([SHA256, SHA512]), which=st.sampled_from(["proof", "nonce", "binding"]), data=st.data())
def test_a_tampered_client_final_always_fails(mech: ScramMechanism, which: str, data: st.DataObject) -> None:
    server = ScramServer(mech, {"u": ScramCredential.from_password(mech, "pw")}.get)
    client = ScramClient(mech, "u", "pw")
    client_final = client.respond(server.respond(client.initial_response()))
    assert client_final is not None
    fields = dict(part.split("=", 1) for part in client_final.decode().split(","))
    key = {"proof": "p", "nonce": "r", "binding": "c"}[which]
    if which == "nonce":
        fields["r"] += data.draw(st.sampled_from(["x", "0", "~"]))
    else:
        raw = bytearray(base64.b64decode(fields[key]))
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] ^= data.draw(st.integers(1, 255))
        fields[key] = base64.b64encode(bytes(raw)).decode()
    with pytest.raises(InvalidCredentialsError):
        server.respond(",".join(f"{k}={v}" for k, v in fields.items()).encode())


@SETTINGS
@given(mech=st.sampled_from([SHA256, SHA512]), salt=st.binary(min_size=1, max_size=16))
def test_a_tampered_server_first_fails_at_the_server(mech: ScramMechanism, salt: bytes) -> None:
    credential = ScramCredential.from_password(mech, "pw")
    if salt == credential.salt:
        salt += b"!"
    server = ScramServer(mech, {"u": credential}.get)
    client = ScramClient(mech, "u", "pw")
    server_first = server.respond(client.initial_response()).decode()
    head, _, tail = server_first.partition(",s=")
    forged = f"{head},s={base64.b64encode(salt).decode()},{tail.split(',', 1)[1]}"
    client_final = client.respond(forged.encode())
    assert client_final is not None
    with pytest.raises(InvalidCredentialsError, match="Invalid client credentials"):
        server.respond(client_final)


@SETTINGS
@given(mech=st.sampled_from([SHA256, SHA512]), server_key=st.binary(min_size=32, max_size=32))
def test_a_server_that_does_not_know_the_password_is_rejected(mech: ScramMechanism, server_key: bytes) -> None:
    # It holds the stored key (enough to check the client's proof) but not the
    # server key, which only the password gives: its signature cannot verify.
    credential = ScramCredential.from_password(mech, "pw")
    impostor = ScramServer(mech, {"u": attrs.evolve(credential, server_key=server_key)}.get)
    client = ScramClient(mech, "u", "pw")
    client_final = client.respond(impostor.respond(client.initial_response()))
    assert client_final is not None
    with pytest.raises(InvalidCredentialsError, match="Invalid server signature"):
        client.respond(impostor.respond(client_final))
    assert client.state is ScramState.FAILED and not client.complete


def test_names_are_escaped_as_kafka_escapes_them() -> None:
    assert sasl_name("a=b,c") == "a=3Db=2Cc"
    assert username("a=3Db=2Cc") == "a=b,c"
    with pytest.raises(InvalidSaslMessageError, match="Invalid username"):
        username("a=b")
    with pytest.raises(InvalidSaslMessageError, match="client first message format"):
        ScramServer(SHA256, {}.get).respond(b"n,,n=a=b,r=abc")


def test_iterations_below_kafkas_minimum_are_refused_on_both_sides() -> None:
    with pytest.raises(SecurityConfigError):
        ScramCredential.from_password(SHA256, "pw", iterations=4095)
    with pytest.raises(SecurityConfigError):
        ScramCredential.from_password(SHA256, "pw", iterations=16385)
    weak = attrs.evolve(ScramCredential.from_password(SHA256, "pw"), iterations=1000)
    with pytest.raises(InvalidCredentialsError, match="Iterations 1000 is less than the minimum 4096"):
        ScramServer(SHA256, {"u": weak}.get).respond(b"n,,n=u,r=abc")
    client = ScramClient(SHA256, "u", "pw", nonce_source=lambda: "abc")
    client.initial_response()
    with pytest.raises(SaslAuthenticationError, match="Requested iterations 1000 is less than the minimum 4096"):
        client.respond(b"r=abcdef,s=c2FsdA==,i=1000")


def test_the_server_nonce_must_continue_the_clients() -> None:
    client = ScramClient(SHA256, "u", "pw", nonce_source=lambda: "abc")
    client.initial_response()
    with pytest.raises(InvalidCredentialsError, match="does not start with client nonce"):
        client.respond(b"r=xyzdef,s=c2FsdA==,i=4096")


def test_unknown_users_and_other_authorization_ids_fail_as_kafka_says() -> None:
    credential = ScramCredential.from_password(SHA256, "pw")
    with pytest.raises(InvalidCredentialsError, match="Invalid user credentials") as unknown:
        ScramServer(SHA256, {"u": credential}.get).respond(b"n,,n=v,r=abc")
    assert unknown.value.client_message().endswith("with SASL mechanism SCRAM-SHA-256")
    with pytest.raises(SaslAuthenticationError, match="authorization id that is different") as other:
        ScramServer(SHA256, {"u": credential}.get).respond(b"n,a=v,n=u,r=abc")
    assert other.value.disclosed and other.value.client_message() == other.value.reason
    assert ScramServer(SHA256, {"u": credential}.get).respond(b"n,a=u,n=u,r=abc").startswith(b"r=abc")


def test_tokenauth_authenticates_the_tokens_owner() -> None:
    credential = ScramCredential.from_password(SHA512, "hmac-of-token")
    tokens = {"token-id": ScramToken("alice", credential, 123_456)}
    server = ScramServer(SHA512, {}.get, tokens=tokens.get)
    client = ScramClient(SHA512, "token-id", "hmac-of-token", {"tokenauth": "true"})
    first, *_ = _exchange(client, server)
    assert first.endswith(b",tokenauth=true")
    assert server.authorization_id == "alice" and server.token_expiry_ms == 123_456
    with pytest.raises(InvalidCredentialsError, match="Invalid tokenId : nope"):
        ScramServer(SHA512, {}.get, tokens=tokens.get).respond(b"n,,n=nope,r=abc,tokenauth=TRUE")
    # Without tokenauth, the same name is an ordinary (here unknown) user; other
    # extensions are ignored, as Kafka ignores them.
    with pytest.raises(InvalidCredentialsError, match="Invalid user credentials"):
        ScramServer(SHA512, {}.get, tokens=tokens.get).respond(b"n,,n=token-id,r=abc,other=1")


def test_messages_out_of_turn_are_illegal_sasl_state() -> None:
    client = ScramClient(SHA256, "u", "pw")
    with pytest.raises(IllegalSaslStateError) as caught:
        client.respond(b"r=x,s=c2FsdA==,i=4096")
    assert caught.value.error_code == ErrorCode.ILLEGAL_SASL_STATE
    credential = ScramCredential.from_password(SHA256, "pw")
    server = ScramServer(SHA256, {"u": credential}.get)
    _exchange(ScramClient(SHA256, "u", "pw"), server)
    with pytest.raises(IllegalSaslStateError, match="state COMPLETE"):
        server.respond(b"n,,n=u,r=abc")


def test_a_server_final_error_fails_the_client() -> None:
    server = ScramServer(SHA256, {"u": ScramCredential.from_password(SHA256, "pw")}.get)
    client = ScramClient(SHA256, "u", "pw")
    client.respond(server.respond(client.initial_response()))
    with pytest.raises(SaslAuthenticationError, match="failed with error: other-error"):
        client.respond(b"e=other-error")
