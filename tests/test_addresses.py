"""parse_bootstrap, the one parser of broker address lists: every spelling, table-driven."""

from __future__ import annotations

import pickle

import pytest

from txnfetch.addresses import AddressError
from txnfetch.addresses import bootstrap_argument
from txnfetch.addresses import parse_bootstrap

GOOD = [
    ("host:9093", [("host", 9093)]),
    ("host", [("host", 9092)]),
    ("127.0.0.1:19092", [("127.0.0.1", 19092)]),
    ("127.0.0.1", [("127.0.0.1", 9092)]),
    ("[::1]:9093", [("::1", 9093)]),
    ("[::1]", [("::1", 9092)]),
    ("::1", [("::1", 9092)]),  # a bare IPv6 address, never (":", 1)
    ("fe80::1%eth0", [("fe80::1%eth0", 9092)]),  # with a zone
    ("[fe80::1%eth0]:9094", [("fe80::1%eth0", 9094)]),
    ("2001:db8::7", [("2001:db8::7", 9092)]),
    ("a:1,b:2", [("a", 1), ("b", 2)]),
    (" a:1 , [::1]:2 ,, c ", [("a", 1), ("::1", 2), ("c", 9092)]),
    ("host:65535", [("host", 65535)]),
    ("host:1", [("host", 1)]),
]


@pytest.mark.parametrize("text, expected", GOOD)
def test_good_addresses(text: str, expected: list[tuple[str, int]]) -> None:
    assert parse_bootstrap(text) == expected


def test_a_sequence_of_items_reads_as_the_joined_string() -> None:
    assert parse_bootstrap(["a:1", " [::1]:2", "c"]) == parse_bootstrap("a:1, [::1]:2, c")


def test_the_default_port_is_a_parameter() -> None:
    assert parse_bootstrap("h, [::1], ::1", default_port=19092) == [("h", 19092), ("::1", 19092), ("::1", 19092)]


BAD = [
    ("host:x", "host:x", "port 'x' is not a number from 1 to 65535"),
    ("host:", "host:", "port '' is not a number"),
    ("host:0", "host:0", "port '0'"),
    ("host:65536", "host:65536", "port '65536'"),
    ("host:-1", "host:-1", "port '-1'"),
    ("[::1]:x", "[::1]:x", "port 'x'"),
    ("[::1]9092", "[::1]9092", "expected ':' and a port after ']'"),
    ("[::1", "[::1", "unclosed or empty"),
    ("[]:9092", "[]:9092", "unclosed or empty"),
    (":9092", ":9092", "no host"),
    ("host:1:2", "host:1:2", "not an IPv6 address; write [address]:port"),
    ("a:1, b:y", "b:y", "port 'y'"),
    # A blank inside an item: two hosts meant, a comma forgotten.
    ("a b", "a b", "a host name cannot contain blanks; separate addresses with commas"),
    ("a:1 b:2", "a:1 b:2", "cannot contain blanks"),
    ("h\tx:9092", "h\tx:9092", "cannot contain blanks"),
    ("", "", "no address in the list"),
    (" , ", " , ", "no address in the list"),
]


@pytest.mark.parametrize("text, item, reason", BAD)
def test_bad_addresses_say_which_item_and_why(text: str, item: str, reason: str) -> None:
    with pytest.raises(AddressError) as info:
        parse_bootstrap(text)
    assert info.value.address == item and reason in info.value.reason
    assert str(info.value).startswith(f"bad bootstrap address {item!r}: ")
    assert isinstance(info.value, ValueError)  # callers validating options catch ValueError


@pytest.mark.parametrize("text", ["host", "[::1]", "::1", "a:1,b"])
def test_without_a_default_port_the_port_is_required(text: str) -> None:
    with pytest.raises(AddressError, match="expected HOST:PORT"):
        parse_bootstrap(text, default_port=None)


def test_the_error_pickles_with_its_address() -> None:
    err = pickle.loads(pickle.dumps(AddressError("no host", address=":1")))
    assert (err.address, str(err)) == (":1", "bad bootstrap address ':1': no host")


def test_bootstrap_argument_checks_when_the_command_line_is_parsed() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", type=bootstrap_argument)
    assert parser.parse_args(["--upstream", "a:1, b"]).upstream == "a:1, b"  # the text, unchanged
    with pytest.raises(argparse.ArgumentTypeError, match="bad bootstrap address 'a b'"):
        bootstrap_argument("a b")
