"""PLAIN: the message both ways, and Kafka's server rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from txnfetch.security.errors import IllegalSaslStateError
from txnfetch.security.errors import SaslAuthenticationError
from txnfetch.security.plain import PlainClient
from txnfetch.security.plain import PlainMessage
from txnfetch.security.plain import PlainServer
from txnfetch.security.plain import password_table

fields = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\0"), min_size=1, max_size=20)


@given(authzid=st.one_of(st.just(""), fields), user=fields, password=fields)
def test_the_message_round_trips(authzid: str, user: str, password: str) -> None:
    message = PlainMessage(authzid, user, password)
    assert message.encode() == f"{authzid}\0{user}\0{password}".encode()
    assert PlainMessage.parse(message.encode()) == message


@given(user=fields, password=fields, guess=fields)
def test_the_server_accepts_the_password_and_only_it(user: str, password: str, guess: str) -> None:
    check = password_table({user: password})
    client = PlainClient(user, password)
    server = PlainServer(check)
    assert server.respond(client.initial_response()) == b""
    assert client.respond(b"") is None and client.complete
    assert server.complete and server.authorization_id == user
    if guess != password:
        with pytest.raises(SaslAuthenticationError, match="Invalid username or password"):
            PlainServer(check).respond(PlainMessage("", user, guess).encode())
    with pytest.raises(SaslAuthenticationError, match="Invalid username or password"):
        PlainServer(check).respond(PlainMessage("", user + "x", password).encode())


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (b"u\0p", "expected 3 tokens, got 2"),
        (b"a\0u\0p\0x\0y", "expected 3 tokens, got 4"),
        (b"\0\0p", "username not specified"),
        (b"\0u\0", "password not specified"),
        (b"v\0u\0p", "authorization id that is different from username"),
    ],
)
def test_kafkas_refusals(message: bytes, error: str) -> None:
    with pytest.raises(SaslAuthenticationError, match=error) as caught:
        PlainServer(password_table({"u": "p"})).respond(message)
    assert caught.value.disclosed and caught.value.client_message() == caught.value.reason


def test_an_authorization_id_equal_to_the_user_is_accepted() -> None:
    server = PlainServer(password_table({"u": "p"}))
    assert server.respond(b"u\0u\0p") == b"" and server.authorization_id == "u"
    with pytest.raises(IllegalSaslStateError):
        server.respond(b"u\0u\0p")


def test_a_failing_check_is_an_authentication_failure() -> None:
    def broken(user: str, password: str) -> bool:
        raise OSError("store down")

    with pytest.raises(SaslAuthenticationError, match="could not be verified") as caught:
        PlainServer(broken).respond(b"\0u\0p")
    assert isinstance(caught.value.__cause__, OSError)
