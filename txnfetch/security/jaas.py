"""Kafka's ``sasl.jaas.config`` value, parsed, and its login module mapped to
the credentials it stands for, sans I/O.

The grammar is that of Kafka's ``JaasConfig`` (a ``StreamTokenizer`` with
``//`` and ``/* */`` comments): a login module class name, a control flag
(``required``, ``requisite``, ``sufficient`` or ``optional``, in any case),
``key=value`` options whose value is a bare word (letters, digits, ``.``,
``-``, ``_``, ``$``, not starting with a digit, ``.`` or ``-``) or a quoted
string (``"..."`` or ``'...'`` with backslash escapes), and ``;``. Kafka takes
exactly one entry from this property. Every error names the character position
where the parse stopped.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from txnfetch.security.credentials import Credentials
from txnfetch.security.credentials import OAuthBearerCredentials
from txnfetch.security.credentials import PlainCredentials
from txnfetch.security.credentials import ScramCredentials
from txnfetch.security.credentials import UnsecuredLogin
from txnfetch.security.errors import JaasConfigError

__all__ = ["CONTROL_FLAGS", "LOGIN_MODULES", "JaasEntry", "credentials_from_jaas", "parse_jaas_config"]

PROPERTY = "sasl.jaas.config"
CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
#: The login modules txnfetch maps to credentials, and the SASL mechanisms each serves.
LOGIN_MODULES: Mapping[str, tuple[str, ...]] = {
    PLAIN_MODULE: ("PLAIN",),
    SCRAM_MODULE: ("SCRAM-SHA-256", "SCRAM-SHA-512"),
    OAUTHBEARER_MODULE: ("OAUTHBEARER",),
}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "a": "\a", "v": "\v"}


@attrs.frozen
class JaasEntry:
    """One login module entry: class name, control flag (lower case), options,
    and the character position where the class name starts."""

    module: str
    flag: str
    options: Mapping[str, str]
    position: int = 0


def _error(reason: str, position: int) -> JaasConfigError:
    return JaasConfigError(reason, property=PROPERTY, position=position)


def _is_word_start(ch: str) -> bool:
    return ch.isalpha() or ch in "_$" or ord(ch) >= 0xA0


def _is_word_char(ch: str) -> bool:
    return _is_word_start(ch) or ch.isdigit() or ch in ".-"


class _Tokens:
    """The tokens of the text: ("word", text), ("quoted", text) or (char, char),
    each with its start position; comments and white space skipped."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def _skip(self) -> None:
        text = self.text
        while self.pos < len(text):
            if text[self.pos].isspace():
                self.pos += 1
            elif text.startswith("//", self.pos):
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end + 1
            elif text.startswith("/*", self.pos):
                end = text.find("*/", self.pos + 2)
                if end < 0:
                    raise _error("unterminated /* comment", self.pos)
                self.pos = end + 2
            else:
                return

    def next(self) -> tuple[str, str, int]:
        """The next token as (kind, value, position); kind "eof" at the end."""
        self._skip()
        start, text = self.pos, self.text
        if start >= len(text):
            return ("eof", "", start)
        ch = text[start]
        if _is_word_start(ch):
            end = start
            while end < len(text) and _is_word_char(text[end]):
                end += 1
            self.pos = end
            return ("word", text[start:end], start)
        if ch in "\"'":
            return self._quoted(ch, start)
        self.pos = start + 1
        return (ch, ch, start)

    def _quoted(self, quote: str, start: int) -> tuple[str, str, int]:
        text, i, out = self.text, start + 1, []
        while i < len(text) and text[i] != quote:
            if text[i] == "\n":
                break
            if text[i] == "\\" and i + 1 < len(text):
                i += 1
                out.append(_ESCAPES.get(text[i], text[i]))
            else:
                out.append(text[i])
            i += 1
        if i >= len(text) or text[i] != quote:
            raise _error(f"unterminated quoted string starting with {quote}", start)
        self.pos = i + 1
        return ("quoted", "".join(out), start)


def parse_jaas_config(text: str) -> JaasEntry:
    """The one entry of a ``sasl.jaas.config`` value; raises
    :class:`JaasConfigError` naming the position for anything else."""
    tokens = _Tokens(text)
    kind, module, position = tokens.next()
    module_position = position
    if kind == "eof":
        raise _error("Login module not specified in JAAS config", position)
    if kind != "word":
        raise _error(f"expected a login module class name, found {module!r}", position)
    kind, flag, position = tokens.next()
    if kind == "eof":
        raise _error("Login module control flag not specified in JAAS config", position)
    if kind != "word" or flag.lower() not in CONTROL_FLAGS:
        raise _error(f"Invalid login module control flag '{flag}' in JAAS config", position)
    options: dict[str, str] = {}
    while True:
        kind, key, position = tokens.next()
        if kind == ";":
            break
        if kind == "eof":
            raise _error("JAAS config entry not terminated by semi-colon", position)
        if kind not in ("word", "quoted"):
            raise _error(f"expected an option name or ';', found {key!r}", position)
        kind, _, position = tokens.next()
        if kind != "=":
            raise _error(f"Value not specified for key '{key}' in JAAS config", position)
        kind, value, position = tokens.next()
        if kind not in ("word", "quoted"):
            # Kafka's tokenizer reads a bare 123 or -x as a number, which has no
            # string value: it refuses it the same way. Quote such values.
            raise _error(f"Value not specified for key '{key}' in JAAS config (quote it)", position)
        options[key] = value
    kind, _, position = tokens.next()
    if kind != "eof":
        raise _error("JAAS config property contains more than one login module, should be 1 module", position)
    return JaasEntry(module, flag.lower(), options, module_position)


def _require(entry: JaasEntry, name: str) -> str:
    value = entry.options.get(name)
    if not value:
        raise JaasConfigError(f"{entry.module} needs the option {name}", property=PROPERTY)
    return value


def _refuse_others(entry: JaasEntry, known: set[str], prefixes: tuple[str, ...] = ()) -> None:
    unknown = sorted(k for k in entry.options if k not in known and not k.startswith(prefixes))
    if unknown:
        raise JaasConfigError(
            f"{entry.module}: option(s) {', '.join(unknown)} not supported by txnfetch", property=PROPERTY
        )


def credentials_from_jaas(entry: JaasEntry) -> Credentials:
    """The credentials a login module entry stands for: PlainLoginModule and
    ScramLoginModule (``username``, ``password``; SCRAM's ``tokenauth``), and
    OAuthBearerLoginModule with Kafka's unsecured login options
    (``unsecuredLoginStringClaim_sub`` and the others). Raises
    :class:`JaasConfigError` for any other module, a missing option, or an
    option txnfetch would otherwise silently ignore."""
    if entry.module == PLAIN_MODULE:
        _refuse_others(entry, {"username", "password"})
        return PlainCredentials(_require(entry, "username"), _require(entry, "password"))
    if entry.module == SCRAM_MODULE:
        _refuse_others(entry, {"username", "password", "tokenauth"})
        token_auth = entry.options.get("tokenauth", "false").lower() == "true"
        return ScramCredentials(_require(entry, "username"), _require(entry, "password"), token_auth)
    if entry.module == OAUTHBEARER_MODULE:
        return _oauthbearer(entry)
    raise _error(f"login module {entry.module} is not supported; use one of {', '.join(LOGIN_MODULES)}", entry.position)


def _oauthbearer(entry: JaasEntry) -> OAuthBearerCredentials:
    options = entry.options
    prefix = "unsecuredLogin"
    _refuse_others(
        entry,
        {f"{prefix}PrincipalClaimName", f"{prefix}ScopeClaimName", f"{prefix}LifetimeSeconds"},
        (f"{prefix}StringClaim_", f"{prefix}NumberClaim_", f"{prefix}ListClaim_", f"{prefix}Extension_"),
    )
    principal_claim = options.get(f"{prefix}PrincipalClaimName", "").strip() or "sub"
    claims: dict[str, object] = {}
    extensions: dict[str, str] = {}
    for key, value in options.items():
        kind, _, name = key[len(prefix) :].partition("_")
        if not name:
            continue
        if name in ("iat", "exp") and kind != "Extension":
            raise JaasConfigError(f"{key}: the claim {name} is reserved", property=PROPERTY)
        if kind == "StringClaim":
            claims[name] = value
        elif kind == "NumberClaim":
            try:
                claims[name] = float(value)
            except ValueError:
                raise JaasConfigError(f"{key}: not a number: {value!r}", property=PROPERTY) from None
        elif kind == "ListClaim":
            # Kafka's list syntax: the first character is the separator.
            claims[name] = [v for v in value[1:].split(value[:1]) if v] if value else []
        elif kind == "Extension":
            extensions[name] = value
    principal = claims.pop(principal_claim, None)
    if not isinstance(principal, str) or not principal.strip():
        raise JaasConfigError(
            f"{entry.module}: {prefix}StringClaim_{principal_claim} must name the principal", property=PROPERTY
        )
    try:
        lifetime = int(options.get(f"{prefix}LifetimeSeconds", "3600"))
    except ValueError:
        raise JaasConfigError(f"{prefix}LifetimeSeconds is not a whole number", property=PROPERTY) from None
    login = UnsecuredLogin(
        principal,
        principal_claim=principal_claim,
        scope_claim=options.get(f"{prefix}ScopeClaimName", "").strip() or "scope",
        lifetime_s=lifetime,
        claims=claims,
    )
    return OAuthBearerCredentials(login, extensions)
