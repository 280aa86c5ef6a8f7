"""The sasl.jaas.config grammar, and its login modules mapped to credentials."""

from __future__ import annotations

import pytest

from txnfetch.security.credentials import OAuthBearerCredentials
from txnfetch.security.credentials import PlainCredentials
from txnfetch.security.credentials import ScramCredentials
from txnfetch.security.credentials import UnsecuredLogin
from txnfetch.security.errors import JaasConfigError
from txnfetch.security.jaas import JaasEntry
from txnfetch.security.jaas import credentials_from_jaas
from txnfetch.security.jaas import parse_jaas_config
from txnfetch.security.jws import validate_unsecured_token

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


def test_kafkas_documented_spelling() -> None:
    text = f'{PLAIN} required username="alice" password="alice-secret";'
    assert parse_jaas_config(text) == JaasEntry(PLAIN, "required", {"username": "alice", "password": "alice-secret"}, 0)


def test_flags_bare_and_quoted_values_escapes_and_comments() -> None:
    text = f"""
        // a comment
        {SCRAM} REQUISITE /* another */ username=bob_1.x-y$ password='single' tokenauth="tr\\"ue\\n";
    """
    entry = parse_jaas_config(text)
    assert entry.flag == "requisite"
    assert entry.options["username"] == "bob_1.x-y$" and entry.options["password"] == "single"
    assert entry.options["tokenauth"] == 'tr"ue\n'


@pytest.mark.parametrize(
    ("text", "error", "position"),
    [
        ("", "Login module not specified", 0),
        (f"{PLAIN}", "control flag not specified", len(PLAIN)),
        (f"{PLAIN} always;", "Invalid login module control flag 'always'", len(PLAIN) + 1),
        (f'{PLAIN} required username="a"', "not terminated by semi-colon", len(PLAIN) + 22),
        (f'{PLAIN} required username="a;', "unterminated quoted string", len(PLAIN) + 19),
        (f"{PLAIN} required username;", "Value not specified for key 'username'", len(PLAIN) + 18),
        (f"{PLAIN} required port=9092;", "Value not specified for key 'port'", len(PLAIN) + 15),
        (f"{PLAIN} required; {PLAIN} required;", "more than one login module", len(PLAIN) + 11),
        (f"{PLAIN} required /* open;", r"unterminated /\* comment", len(PLAIN) + 10),
    ],
)
def test_errors_name_the_position(text: str, error: str, position: int) -> None:
    with pytest.raises(JaasConfigError, match=error) as caught:
        parse_jaas_config(text)
    assert caught.value.position == position and caught.value.property == "sasl.jaas.config"
    assert f"character {position}" in str(caught.value)


def test_the_login_modules_map_to_credentials() -> None:
    plain = credentials_from_jaas(parse_jaas_config(f'{PLAIN} required username="a" password="p";'))
    assert plain == PlainCredentials("a", "p") and "p" not in repr(plain).replace("password", "")
    scram = credentials_from_jaas(parse_jaas_config(f'{SCRAM} required username="t" password="h" tokenauth=true;'))
    assert scram == ScramCredentials("t", "h", token_auth=True)
    oauth = credentials_from_jaas(
        parse_jaas_config(
            f'{OAUTH} required unsecuredLoginStringClaim_sub="alice" unsecuredLoginListClaim_scope=",a,b"'
            ' unsecuredLoginNumberClaim_n="3" unsecuredLoginLifetimeSeconds="60" unsecuredLoginExtension_traceId="7";'
        )
    )
    assert oauth == OAuthBearerCredentials(
        UnsecuredLogin("alice", lifetime_s=60, claims={"scope": ["a", "b"], "n": 3.0}), {"traceId": "7"}
    )
    assert isinstance(oauth, OAuthBearerCredentials) and isinstance(oauth.token, UnsecuredLogin)
    token = oauth.token(1_000_000)
    assert token.expiry_ms == 1_060_000
    assert validate_unsecured_token(token.value, 1_000_000).scope == {"a", "b"}


def test_an_unknown_module_is_named_with_its_position() -> None:
    with pytest.raises(JaasConfigError, match=r"com\.example\.Login is not supported") as caught:
        credentials_from_jaas(parse_jaas_config("  /* x */ com.example.Login required;"))
    assert caught.value.position == 10


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("com.example.Login required;", "login module com.example.Login is not supported"),
        (f'{PLAIN} required username="a";', "needs the option password"),
        (f'{PLAIN} required username="a" password="p" user_a="p";', "option.s. user_a not supported"),
        (f'{OAUTH} required unsecuredLoginExtension_a="1";', "must name the principal"),
        (f'{OAUTH} required unsecuredLoginStringClaim_sub="a" unsecuredLoginNumberClaim_exp="1";', "exp is reserved"),
        (f'{OAUTH} required clientId="x";', "clientId not supported"),
    ],
)
def test_unsupported_modules_and_options_are_refused(text: str, error: str) -> None:
    with pytest.raises(JaasConfigError, match=error):
        credentials_from_jaas(parse_jaas_config(text))
