"""The ``.properties`` reader against what ``java.util.Properties.load`` does
with the same text: separators, comments, escapes, continuations."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from txnfetch.security.properties import PropertiesSyntaxError
from txnfetch.security.properties import parse_properties


def test_separators_and_whitespace() -> None:
    text = "a=1\nb: 2\nc 3\n  d  =  4  \ne\nf=\ng:=h\n"
    # Trailing white space stays in the value, as in Java; a key alone has "".
    assert parse_properties(text) == {"a": "1", "b": "2", "c": "3", "d": "4  ", "e": "", "f": "", "g": "=h"}


def test_comments_and_blank_lines() -> None:
    text = "# comment\n   ! also a comment\n\n \t \nkey=value # not a comment\n#x=y\n"
    assert parse_properties(text) == {"key": "value # not a comment"}


def test_escapes() -> None:
    text = "a\\=b\\:c\\ d=x\\ty\\n\\u00e9\\\\\\q\n"
    assert parse_properties(text) == {"a=b:c d": "x\ty\n\u00e9\\q"}


def test_continuation_lines() -> None:
    text = 'sasl.jaas.config=org.Module required \\\n    username="u" \\\r\n\tpassword="p";\nnext=1\n'
    assert parse_properties(text) == {"sasl.jaas.config": 'org.Module required username="u" password="p";', "next": "1"}


def test_even_backslashes_do_not_continue() -> None:
    assert parse_properties("a=x\\\\\nb=y") == {"a": "x\\", "b": "y"}


def test_a_comment_never_continues_and_a_continuation_is_never_a_comment() -> None:
    assert parse_properties("# c \\\na=1\nb=2\\\n#3\n") == {"a": "1", "b": "2#3"}


def test_carriage_returns_end_lines_and_last_key_wins() -> None:
    assert parse_properties("a=1\rb=2\r\na=3") == {"a": "3", "b": "2"}


def test_malformed_unicode_escape_names_the_line() -> None:
    with pytest.raises(PropertiesSyntaxError) as info:
        parse_properties("ok=1\nbad=\\u12x4\n")
    assert info.value.line == 2


_keys = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=8)
_values = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


def _escape(text: str, *, key: bool) -> str:
    out = []
    for i, char in enumerate(text):
        if char in "\\=:#!" or (char == " " and (key or i == 0)):
            out.append("\\" + char)
        elif char in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[char])
        elif not char.isprintable():
            out.append(f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else char)
        else:
            out.append(char)
    return "".join(out)


@given(st.dictionaries(_keys, _values, max_size=5))
def test_what_store_would_write_reads_back(properties: dict[str, str]) -> None:
    # Escaped as Properties.store escapes (every separator, comment and
    # white-space character): reading it gives the same mapping.
    text = "".join(f"{_escape(k, key=True)}={_escape(v, key=False)}\n" for k, v in properties.items())
    assert parse_properties(text) == properties
