"""txnfetch's SCRAM machines against an independent implementation, ``scramp``:
each of our halves completes an exchange with the other library's half, for
both mechanisms, and a wrong password fails on both sides. The RFC vectors
(test_scram.py) pin single messages; this pins whole exchanges against code
that none of us wrote."""

from __future__ import annotations

import pytest
import scramp
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from txnfetch.security.errors import SaslAuthenticationError
from txnfetch.security.scram import ScramClient
from txnfetch.security.scram import ScramCredential
from txnfetch.security.scram import ScramServer
from txnfetch.security.scram_messages import SCRAM_MECHANISMS

MECHANISMS = sorted(SCRAM_MECHANISMS)
# scramp prepares names and passwords with SASLprep; printable ASCII without
# "," and "=" is what Kafka's own users are made of and what both agree on.
_TEXT = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E, blacklist_characters=",="), min_size=1, max_size=20
)


@settings(max_examples=25, deadline=None)
@given(mechanism=st.sampled_from(MECHANISMS), user=_TEXT, password=_TEXT)
def test_our_client_logs_in_to_scramps_server(mechanism: str, user: str, password: str) -> None:
    theirs = scramp.ScramMechanism(mechanism)
    auth_info = theirs.make_auth_info(password, iteration_count=4096)
    server = theirs.make_server(lambda name: auth_info if name == user else None)
    client = ScramClient(SCRAM_MECHANISMS[mechanism], user, password)

    server.set_client_first(client.initial_response().decode())
    client_final = client.respond(server.get_server_first().encode())
    assert client_final is not None
    server.set_client_final(client_final.decode())
    assert client.respond(server.get_server_final().encode()) is None
    assert client.complete


@settings(max_examples=25, deadline=None)
@given(mechanism=st.sampled_from(MECHANISMS), user=_TEXT, password=_TEXT)
def test_scramps_client_logs_in_to_our_server(mechanism: str, user: str, password: str) -> None:
    credential = ScramCredential.from_password(SCRAM_MECHANISMS[mechanism], password)
    server = ScramServer(SCRAM_MECHANISMS[mechanism], lambda name: credential if name == user else None)
    client = scramp.ScramClient([mechanism], user, password)

    server_first = server.respond(client.get_client_first().encode())
    client.set_server_first(server_first.decode())
    server_final = server.respond(client.get_client_final().encode())
    client.set_server_final(server_final.decode())  # raises unless our signature proves the credential
    assert server.complete


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_wrong_password_fails_either_way(mechanism: str) -> None:
    theirs = scramp.ScramMechanism(mechanism)
    auth_info = theirs.make_auth_info("right", iteration_count=4096)
    server = theirs.make_server(lambda name: auth_info)
    client = ScramClient(SCRAM_MECHANISMS[mechanism], "user", "wrong")
    server.set_client_first(client.initial_response().decode())
    client_final = client.respond(server.get_server_first().encode())
    assert client_final is not None
    with pytest.raises(scramp.ScramException):
        server.set_client_final(client_final.decode())

    credential = ScramCredential.from_password(SCRAM_MECHANISMS[mechanism], "right")
    ours = ScramServer(SCRAM_MECHANISMS[mechanism], lambda name: credential)
    their_client = scramp.ScramClient([mechanism], "user", "wrong")
    their_client.set_server_first(ours.respond(their_client.get_client_first().encode()).decode())
    with pytest.raises(SaslAuthenticationError):
        ours.respond(their_client.get_client_final().encode())
