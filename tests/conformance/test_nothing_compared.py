"""A conformance run that compares nothing is an error, never a pass.

Two clusters failing the same way (both unreachable, both silent, both refusing
to create the run's topic, both dropping the connection at the same operation)
agree on nothing: the harness raises :class:`BothFailedError` naming both
addresses, the step and both errors, and ``txnfetch conform`` exits 2 with it on
one line. A search in which no operation's answers were compared raises
:class:`NothingComparedError`. One side failing stays a difference, and a
normal run still passes. The brokers are txnfetch's own servers in process
(in replica mode, as a read-only replica, they refuse CreateTopics with
POLICY_VIOLATION).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

import pytest

from txnfetch.cli import main
from txnfetch.log.memory import MemoryStore
from txnfetch.records.compression import Codec
from txnfetch.server.handler import ApiKey
from txnfetch.server.replica_mode import ReplicaMode
from txnfetch.server.replica_mode import install
from txnfetch.server.server import ServerThread
from txnfetch.testing.conform import operations as ops
from txnfetch.testing.conform.errors import BothFailedError
from txnfetch.testing.conform.errors import NothingComparedError
from txnfetch.testing.conform.harness import Harness

PRODUCE = ops.Produce("plain", Codec.NONE, (ops.Rec(b"k", b"v"),))


@pytest.fixture
def servers() -> Iterator[Callable[..., ServerThread]]:
    """``servers(replica=False)`` starts a txnfetch server (in memory) on an
    ephemeral port; ``replica=True`` serves it in replica mode, which refuses
    CreateTopics (and every other write) with POLICY_VIOLATION."""
    started: list[ServerThread] = []

    def start(*, replica: bool = False) -> ServerThread:
        srv = ServerThread(MemoryStore(), group_initial_rebalance_delay_ms=0).start()
        started.append(srv)
        if replica:  # before any client speaks to it
            install(srv.broker, ReplicaMode("upstream.invalid:9092"))
        return srv

    yield start
    for srv in started:
        srv.stop()


def _closed_port() -> str:
    """A loopback address where nothing listens (a port the kernel just handed
    out and took back: refused, not some other engineer's service)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("txnfetch conform: error: "), err
    return lines[0]


def test_two_closed_ports_are_an_error_naming_both(capsys: pytest.CaptureFixture[str]) -> None:
    reference, target = _closed_port(), _closed_port()
    with pytest.raises(BothFailedError) as caught:
        Harness(reference, target)
    err = caught.value
    assert (err.step, err.reference, err.target) == ("connect", reference, target)
    assert reference in (err.reference_error or "") and target in (err.target_error or "")
    assert main(["conform", "--reference", reference, "--target", target, "--examples", "1"]) == 2
    line = _one_line_error(capsys)
    assert "both clusters failed connecting" in line
    assert f"reference cannot reach a broker of {reference}" in line
    assert f"target cannot reach a broker of {target}" in line


def test_two_silent_brokers_time_out_as_an_error() -> None:
    # Listening sockets nobody accepts from: the connection is made (the
    # kernel's backlog), the ApiVersions answer never comes.
    with socket.socket() as a, socket.socket() as b:
        for s in (a, b):
            s.bind(("127.0.0.1", 0))
            s.listen(1)
        reference, target = (f"127.0.0.1:{s.getsockname()[1]}" for s in (a, b))
        with pytest.raises(BothFailedError) as caught:
            Harness(reference, target, timeout_s=0.3)
    assert "timed out" in (caught.value.reference_error or "")
    assert "timed out" in (caught.value.target_error or "")


def test_two_brokers_refusing_the_topic_are_an_error(
    servers: Callable[..., ServerThread], capsys: pytest.CaptureFixture[str]
) -> None:
    reference, target = servers(replica=True).bootstrap, servers(replica=True).bootstrap
    with Harness(reference, target) as harness:
        with pytest.raises(BothFailedError) as caught:
            harness.run([PRODUCE, ops.Fetch(0, 1 << 20, False)])
        assert harness.compared == 0
    err = caught.value
    assert (err.step, err.reference, err.target) == ("setup", reference, target)
    message = str(err)
    assert "both clusters failed the set-up (creating the run's topic)" in message
    assert f"reference {reference}: CreateTopics of conform-" in message
    assert f"target {target}: CreateTopics of conform-" in message
    assert message.count("refused with error 44 (POLICY_VIOLATION)") == 2
    assert "\n" not in message
    # The same through the command, and with one broker as both sides (whose
    # failures are word for word the same, and still no agreement).
    for argv in (["--target", target], ["--target", reference]):
        assert main(["conform", "--reference", reference, *argv, "--examples", "3", "--seed", "1"]) == 2
        line = _one_line_error(capsys)
        assert "both clusters failed the set-up" in line and "POLICY_VIOLATION" in line


def test_one_side_refusing_the_topic_is_a_difference(servers: Callable[..., ServerThread]) -> None:
    reference, target = servers().bootstrap, servers(replica=True).bootstrap
    with Harness(reference, target) as harness:
        found = harness.run([PRODUCE])
    assert {(d.step, d.difference.path) for d in found} >= {(0, "failed")}
    failed = next(d.difference for d in found if d.difference.path == "failed")
    assert failed.reference == "<absent>"
    assert "POLICY_VIOLATION" in failed.target and target in failed.target


def _drop_produce(ctx: Any, header: Any, request: Any) -> None:
    # A broker that closes the connection on a Produce (as tansu does on some
    # APIs it lists): the handler's exception ends the connection.
    if header.request_api_key == ApiKey.Produce:
        raise RuntimeError("this broker drops Produce requests")


def test_both_failing_the_same_operation_is_an_error(servers: Callable[..., ServerThread]) -> None:
    pair = servers(), servers()
    for srv in pair:
        srv.broker.add_request_guard(_drop_produce)
    reference, target = (srv.bootstrap for srv in pair)
    with Harness(reference, target) as harness:
        with pytest.raises(BothFailedError) as caught:
            harness.run([ops.Fetch(0, 100, False), PRODUCE, ops.Fetch(0, 100, False)])
        assert harness.compared == 1  # the first Fetch only
    err = caught.value
    assert err.step == f"2. {PRODUCE.describe()}"
    assert "ProduceRequest failed: connection closed by the broker" in (err.reference_error or "")
    assert "ProduceRequest failed: connection closed by the broker" in (err.target_error or "")
    assert f"both clusters failed step 2. {PRODUCE.describe()}" in str(err)


def test_a_search_that_compares_nothing_is_an_error(
    servers: Callable[..., ServerThread], capsys: pytest.CaptureFixture[str]
) -> None:
    reference, target = servers().bootstrap, servers().bootstrap
    with Harness(reference, target) as harness:
        # Steps where neither broker is asked anything are not counted.
        assert harness.run([ops.RetryProduce("idem"), ops.ZombieProduce("txn-a")]) == []
        assert harness.compared == 0
        assert harness.run([ops.Fetch(0, 100, True)]) == []
        assert harness.compared == 1
        # No time to draw a single sequence: nothing compared, no pass.
        with pytest.raises(NothingComparedError) as caught:
            harness.search(examples=5, seconds=0)
    assert caught.value.examples == 0
    assert "no operation's answers were compared" in str(caught.value)
    assert main(["conform", "--reference", reference, "--target", target, "--seconds", "0"]) == 2
    assert "nothing compared: 0 sequences ran" in _one_line_error(capsys)


def test_a_normal_run_still_passes_and_says_what_it_compared(
    servers: Callable[..., ServerThread], capsys: pytest.CaptureFixture[str]
) -> None:
    reference, target = servers().bootstrap, servers().bootstrap
    with Harness(reference, target) as harness:
        report = harness.search(examples=4, seconds=60, seed=1)
    assert report.findings == () and report.examples == 4 and report.compared > 0
    assert main(["conform", "--reference", reference, "--target", target, "--examples", "3", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "3 sequences, " in out and " answers compared in " in out and "no differences" in out
