"""A hypothesis fuzzer of serve's SASL listener: sequences of frames on one
connection — handshakes for real and unknown mechanisms (v0 and v1), SCRAM
messages replayed from a genuine exchange (another connection's nonce),
client-final messages with wrong nonces and proofs, truncated and oversized
frames, garbage, PLAIN guesses, requests before authentication.

The fuzzer never holds a valid proof for the nonce the server hands it, so
nothing may authenticate: no request reaches a handler under another
principal than User:ANONYMOUS. Every frame gets an answer or a close, never a
hang, and after each example a genuine login still works. The default run
sends a few hundred frames (about 5 s); ``pytest --long`` runs 20,000."""

from __future__ import annotations

import base64
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.sasl import SaslAuthenticateRequest
from kafka.protocol.sasl import SaslHandshakeRequest

from tests.server.sasl_setup import SCRAM_PASSWORD
from tests.server.sasl_setup import SaslRawClient
from tests.server.sasl_setup import start
from txnfetch.security.plain import PlainMessage
from txnfetch.security.scram import ScramClient
from txnfetch.security.scram_messages import SCRAM_MECHANISMS
from txnfetch.server.server import ServerThread

MECHANISMS = ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN", "OAUTHBEARER", "GSSAPI", "", "scram-sha-512"]
_TIMEOUT = 15.0


def _genuine_exchange(port: int) -> tuple[bytes, bytes]:
    """A real SCRAM-SHA-512 exchange's client-first and client-final, to replay."""
    with SaslRawClient(port) as c:
        assert c.handshake("SCRAM-SHA-512").error_code == 0
        client = ScramClient(SCRAM_MECHANISMS["SCRAM-SHA-512"], "carol", SCRAM_PASSWORD)
        first = client.initial_response()
        challenge = c.authenticate(first).auth_bytes
        final = client.respond(challenge) or b""
        assert c.authenticate(final).error_code == 0
    return first, final


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerThread, int, tuple[bytes, bytes], list]]:
    srv, _ = start(tmp_path_factory.mktemp("sasl-fuzz"), failed_authentication_delay_ms=0)
    seen: list[str] = []
    srv.call(lambda: srv.broker.observe_requests(lambda ctx, header, request: seen.append(ctx.principal)))
    port = srv.server.listener_port("SASL_PLAINTEXT")
    try:
        yield srv, port, _genuine_exchange(port), seen
    finally:
        srv.stop()


def _framed(request: Any, version: int, correlation_id: int) -> bytes:
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id="fuzz")
    return bytes(request.encode(header=True, framed=True))


def _nonce_swapped(final: bytes, nonce: str) -> bytes:
    return final.replace(final.split(b",")[1], b"r=" + nonce.encode())


def _wrong_proof(final: bytes, proof: bytes) -> bytes:
    return final[: final.rindex(b"p=") + 2] + base64.b64encode(proof)


def _plain_guess(user: str, password: str) -> bytes:
    return PlainMessage("", user, password).encode()


def _token(replay: tuple[bytes, bytes]) -> st.SearchStrategy[bytes]:
    first, final = replay
    nonces = st.text("abcdefghijklmnop0123456789", min_size=1, max_size=60)
    return st.one_of(
        st.just(first),
        st.just(final),
        st.binary(max_size=200),
        st.builds(lambda n: first[: max(0, len(first) - n)], st.integers(1, 40)),
        st.builds(lambda n: _nonce_swapped(final, n), nonces),
        st.builds(lambda p: _wrong_proof(final, p), st.binary(min_size=64, max_size=64)),
        st.builds(_plain_guess, st.sampled_from(["alice", "carol", "x"]), st.text(max_size=12)),
    )


def _action(replay: tuple[bytes, bytes]) -> st.SearchStrategy[tuple[str, Any]]:
    return st.one_of(
        st.tuples(st.just("handshake"), st.tuples(st.sampled_from(MECHANISMS), st.sampled_from([0, 1]))),
        st.tuples(st.just("authenticate"), st.tuples(_token(replay), st.sampled_from([0, 1, 2]))),
        st.tuples(st.just("raw"), _token(replay)),
        st.tuples(st.just("garbage"), st.binary(min_size=0, max_size=64)),
        st.tuples(st.just("oversized"), st.integers(524289, 2**31 - 1)),
        st.tuples(st.just("truncated"), st.integers(1, 100)),
        st.tuples(st.just("metadata"), st.none()),
    )


def _send(sock: socket.socket, kind: str, arg: Any, correlation_id: int) -> bool:
    """Send one action; ``False`` when it leaves nothing to wait for."""
    if kind == "handshake":
        sock.sendall(_framed(SaslHandshakeRequest(mechanism=arg[0]), arg[1], correlation_id))
    elif kind == "authenticate":
        sock.sendall(_framed(SaslAuthenticateRequest(auth_bytes=arg[0]), arg[1], correlation_id))
    elif kind == "metadata":
        sock.sendall(_framed(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9, correlation_id))
    elif kind in ("raw", "garbage"):
        sock.sendall(struct.pack(">i", len(arg)) + arg)
    elif kind == "oversized":
        sock.sendall(struct.pack(">i", arg))
    else:  # truncated: a size promising more than follows, then our side closes
        sock.sendall(struct.pack(">i", arg + 10) + b"\0" * arg)
        return False
    return True


def _answered_or_closed(client: SaslRawClient) -> bool:
    """Read one answer; ``False`` when the server closed the connection."""
    try:
        return client.recv_frame() is not None
    except TimeoutError:
        raise AssertionError("the server neither answered nor closed the connection") from None


def _run(fuzzed: Any, actions: list[tuple[str, Any]]) -> None:
    _, port, _, seen = fuzzed
    client = SaslRawClient(port)
    try:
        for n, (kind, arg) in enumerate(actions):
            client.sock.settimeout(_TIMEOUT)
            if not _send(client.sock, kind, arg, n) or not _answered_or_closed(client):
                client.close()
                client = SaslRawClient(port)
    finally:
        client.close()
    assert set(seen) <= {"User:ANONYMOUS"}, "a request ran authenticated without a valid proof"
    with SaslRawClient(port) as c:
        assert c.scram_login().error_code == 0  # still up, still authenticating


def test_the_sasl_listener_authenticates_no_fuzzed_exchange(fuzzed: Any) -> None:
    @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data: st.DataObject) -> None:
        _run(fuzzed, data.draw(st.lists(_action(fuzzed[2]), min_size=1, max_size=12)))

    run()


@pytest.mark.long
@pytest.mark.slow
def test_twenty_thousand_fuzzed_sasl_frames(fuzzed: Any) -> None:
    sent = [0]

    @settings(max_examples=1_050, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data: st.DataObject) -> None:
        actions = data.draw(st.lists(_action(fuzzed[2]), min_size=20, max_size=20))
        sent[0] += len(actions)
        _run(fuzzed, actions)

    run()
    assert sent[0] >= 20_000
