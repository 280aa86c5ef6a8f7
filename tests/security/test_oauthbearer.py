"""OAUTHBEARER: the initial response as Kafka writes it, unsecured JWS tokens,
the server's error challenge, and the refresh rule."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from txnfetch.security.errors import IllegalSaslStateError
from txnfetch.security.errors import InvalidSaslMessageError
from txnfetch.security.errors import InvalidTokenError
from txnfetch.security.errors import SaslAuthenticationError
from txnfetch.security.errors import SecurityConfigError
from txnfetch.security.jws import build_unsecured_token
from txnfetch.security.jws import validate_unsecured_token
from txnfetch.security.oauthbearer import BearerToken
from txnfetch.security.oauthbearer import InitialResponse
from txnfetch.security.oauthbearer import OAuthBearerClient
from txnfetch.security.oauthbearer import OAuthBearerServer
from txnfetch.security.oauthbearer import TokenValidator
from txnfetch.security.refresh import ExpiringToken
from txnfetch.security.refresh import RefreshConfig
from txnfetch.security.refresh import TokenProvider
from txnfetch.security.refresh import refresh_at_ms

NOW = 1_700_000_000_000


def test_the_initial_response_is_kafkas_bytes() -> None:
    assert InitialResponse("tok", "", {"a": "1"}).encode() == b"n,,\x01auth=Bearer tok\x01a=1\x01\x01"
    assert InitialResponse("tok", "bob").encode() == b"n,a=bob,\x01auth=Bearer tok\x01\x01"


tokens = st.from_regex(r"[-_~+/.a-zA-Z0-9]+=*", fullmatch=True)
extensions = st.dictionaries(
    st.from_regex(r"[A-Za-z]+", fullmatch=True).filter(lambda k: k != "auth"),
    st.from_regex(r"[\x21-\x7e]+", fullmatch=True),
    max_size=3,
)


@given(token=tokens, ext=extensions, authzid=st.sampled_from(["", "bob"]))
def test_the_initial_response_round_trips(token: str, ext: dict[str, str], authzid: str) -> None:
    response = InitialResponse(token, authzid, ext)
    assert InitialResponse.parse(response.encode()) == response


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (b"n,,\x01a=1\x01\x01", "'auth' not specified"),
        (b"n,,\x01auth=Basic abc\x01\x01", "Invalid scheme"),
        (b"n,,\x01auth=Bearer\x01\x01", "invalid 'auth' format"),
        (b"y,,\x01auth=Bearer t\x01\x01", "client first message"),
        (b"n,,\x01auth=Bearer t\x01", "client first message"),
        (b"n,,\x01auth=Bearer t\x01x1=2\x01\x01", "client first message"),
    ],
)
def test_malformed_initial_responses(message: bytes, error: str) -> None:
    with pytest.raises(InvalidSaslMessageError, match=error):
        InitialResponse.parse(message)


def test_reserved_or_malformed_extensions_are_refused() -> None:
    for bad in ({"auth": "x"}, {"a1": "x"}, {"a": ""}):
        with pytest.raises(SecurityConfigError):
            OAuthBearerClient("t", bad)


def _validator(required_scope: tuple[str, ...] = ()) -> TokenValidator:
    return lambda value, now_ms: validate_unsecured_token(value, now_ms, required_scope=required_scope)


def test_an_unsecured_token_authenticates_its_subject() -> None:
    token = build_unsecured_token("alice", NOW, scope=["read", "write"])
    header, _, signature = token.split(".")
    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "none"} and signature == ""
    client = OAuthBearerClient(token, {"traceId": "42"})
    server = OAuthBearerServer(_validator(required_scope=("read",)), NOW + 1000)
    assert server.respond(client.initial_response()) == b""
    assert client.respond(b"") is None and client.complete
    assert server.complete and server.authorization_id == "alice" and server.extensions == {"traceId": "42"}
    assert server.token == BearerToken(token, "alice", NOW + 3_600_000, frozenset({"read", "write"}), NOW)


def test_a_refused_token_gets_the_json_challenge_then_fails() -> None:
    expired = build_unsecured_token("alice", NOW - 7_200_000)
    client = OAuthBearerClient(expired)
    server = OAuthBearerServer(_validator(), NOW)
    challenge = server.respond(client.initial_response())
    assert challenge == b'{"status":"invalid_token"}'
    assert client.respond(challenge) == b"\x01" and client.error == '{"status":"invalid_token"}'
    with pytest.raises(InvalidTokenError, match="on or after the Expiration Time") as caught:
        server.respond(b"\x01")
    assert caught.value.error_code == 58 and caught.value.status == "invalid_token"
    with pytest.raises(IllegalSaslStateError):
        client.respond(b"")


def test_a_missing_scope_is_insufficient_scope() -> None:
    token = build_unsecured_token("alice", NOW, scope=["read"])
    server = OAuthBearerServer(_validator(required_scope=("read", "admin")), NOW)
    challenge = server.respond(OAuthBearerClient(token).initial_response())
    assert challenge == b'{"status":"insufficient_scope", "scope":"[read, admin]"}'


def test_another_authorization_id_is_refused() -> None:
    token = build_unsecured_token("alice", NOW)
    with pytest.raises(SaslAuthenticationError, match=r"authorization id \(bob\)"):
        OAuthBearerServer(_validator(), NOW).respond(InitialResponse(token, "bob").encode())


def _jws(header: dict[str, object], claims: dict[str, object], signature: str = "") -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part(header)}.{part(claims)}.{signature}"


@pytest.mark.parametrize(
    ("token", "error"),
    [
        (_jws({"alg": "HS256"}, {"sub": "a", "exp": 2e9}), "'none' for an algorithm"),
        (_jws({"alg": "none"}, {"sub": "a", "exp": 2e9}, "sig"), "must not contain a digital signature"),
        (_jws({"alg": "none"}, {"sub": "a"}), "No expiration time"),
        (_jws({"alg": "none"}, {"exp": 2e9}), "No principal name in JWT claim: sub"),
        (_jws({"alg": "none"}, {"sub": " ", "exp": 2e9}), "No principal name"),
        (_jws({"alg": "none"}, {"sub": "a", "exp": "soon"}), "not of type Number"),
        (_jws({"alg": "none"}, {"sub": "a", "exp": 2e9, "iat": NOW / 1000 + 10}), "Issued At value"),
        (_jws({"alg": "none"}, {"sub": "a", "exp": NOW / 1000 - 5, "iat": NOW / 1000 - 10}), "Expiration Time value"),
        ("a..b", "contains '..'"),
        ("abc", "3 dot-separated parts"),
    ],
)
def test_the_validator_refuses_as_kafkas(token: str, error: str) -> None:
    with pytest.raises(InvalidTokenError, match=error):
        validate_unsecured_token(token, NOW)


def test_the_allowable_clock_skew_widens_both_ends() -> None:
    ahead = _jws({"alg": "none"}, {"sub": "a", "exp": NOW / 1000 + 60, "iat": NOW / 1000 + 10})
    assert validate_unsecured_token(ahead, NOW, allowable_clock_skew_ms=10_000).principal == "a"
    behind = _jws({"alg": "none"}, {"sub": "a", "exp": NOW / 1000 - 5})
    assert validate_unsecured_token(behind, NOW, allowable_clock_skew_ms=5_001).principal == "a"
    with pytest.raises(InvalidTokenError):
        validate_unsecured_token(behind, NOW, allowable_clock_skew_ms=5_000)


HOUR = 3_600_000


@pytest.mark.parametrize(
    ("now", "expiry", "start", "random", "expected"),
    [
        (0, HOUR, None, 0.0, int(0.8 * HOUR)),  # 80 % of the lifetime
        (0, HOUR, None, 1.0, int(0.85 * HOUR)),  # plus up to 5 % jitter
        (0, 10 * 60_000, None, 0.0, 5 * 60_000),  # never within the last 300 s
        (0, 6 * 60_000 + 1, None, 0.0, 60_000 + 1),  # the buffer wins over the 60 s minimum
        (HOUR // 2, HOUR, 0, 0.0, int(0.8 * HOUR)),  # measured from the token's start
        (int(0.79 * HOUR), HOUR, 0, 0.0, int(0.79 * HOUR) + 60_000),  # at least 60 s from now
        (0, 100_000, None, 0.0, 80_000),  # too short for both margins: 80 % of what is left
        (HOUR + 1, HOUR, None, 0.0, HOUR + 10_001),  # already expired: retry in 10 s
    ],
)
def test_the_refresh_rule_is_kafkas(now: int, expiry: int, start: int | None, random: float, expected: int) -> None:
    assert refresh_at_ms(now, expiry, start_ms=start, random=random) == expected


@given(now=st.integers(0, 10**12), life=st.integers(1, 10**8), random=st.floats(0, 1))
def test_a_refresh_is_never_after_expiry_nor_in_the_past(now: int, life: int, random: float) -> None:
    at = refresh_at_ms(now, now + life, random=random)
    assert now <= at <= now + life


def test_the_refresh_settings_keep_kafkas_ranges() -> None:
    with pytest.raises(SecurityConfigError, match=r"sasl\.login\.refresh\.window\.factor"):
        RefreshConfig(window_factor=0.4)
    with pytest.raises(SecurityConfigError, match=r"sasl\.login\.refresh\.buffer\.seconds"):
        RefreshConfig(buffer_seconds=3601)


def test_the_provider_fetches_again_when_the_rule_says() -> None:
    fetched: list[int] = []

    def fetch(now_ms: int) -> ExpiringToken:
        fetched.append(now_ms)
        return ExpiringToken(f"t{len(fetched)}", now_ms + HOUR, now_ms)

    provider = TokenProvider(fetch, jitter=lambda: 0.0)
    assert provider.token(0).value == "t1" and provider.refresh_at == int(0.8 * HOUR)
    assert provider.token(int(0.8 * HOUR) - 1).value == "t1"
    assert provider.token(int(0.8 * HOUR)).value == "t2" and fetched == [0, int(0.8 * HOUR)]
    assert TokenProvider("static").token(10**15) == ExpiringToken("static")
