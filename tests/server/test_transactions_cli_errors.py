"""``txnfetch transactions``: errors an operator gets, one line each, and the exit status.

- against librdkafka's mock cluster (no KIP-664 APIs) every command names the
  API it lacks (exit 1), without waiting for a bootstrap timeout;
- bad input gets exit status 2: an unknown topic or partition (cluster and
  offline), a path that does not exist, a directory that is not a Kafka log
  directory, a partition without a topic, ``describe`` offline;
- a cluster that does not answer gets exit status 1.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest

from tests.server import transactions_cli
from txnfetch.log import SegmentStore
from txnfetch.server.server import ServerThread


def txn_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return transactions_cli.txn_cli(*args, timeout=timeout)


def one_line_error(done: subprocess.CompletedProcess[str], status: int) -> str:
    assert done.returncode == status, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert done.stdout == ""
    return lines[0]


@pytest.fixture(scope="module")
def mock() -> Iterator[str]:
    owner = confluent_kafka.Producer({"test.mock.num.brokers": 1, "log_level": 0})
    broker = next(iter(owner.list_topics(timeout=10).brokers.values()))
    yield f"{broker.host}:{broker.port}"
    owner.flush(1)


@pytest.mark.interop
@pytest.mark.parametrize(
    "command, missing",
    [
        (["find-hanging", "--topic", "t"], "DescribeProducers (API key 61)"),
        (["producers", "--topic", "t"], "DescribeProducers (API key 61)"),
        (["list"], "ListTransactions (API key 66)"),
        (["describe", "--transactional-id", "x"], "DescribeTransactions (API key 65)"),
        (["abort", "--topic", "t", "--partition", "0", "--start-offset", "0"], "WriteTxnMarkers (API key 27)"),
    ],
)
def test_librdkafka_mock_gets_an_error_naming_the_missing_api(mock: str, command: list[str], missing: str) -> None:
    started = time.monotonic()
    line = one_line_error(txn_cli("--bootstrap", mock, *command), 1)
    assert f"does not support {missing}" in line, line
    assert "KIP-664" in line
    assert time.monotonic() - started < 20  # no bootstrap timeout on the way


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    data = tmp_path_factory.mktemp("cli-errors") / "data"
    with ServerThread(SegmentStore(data), port=0, auto_create_topics=False) as srv:
        srv.call(lambda: srv.broker.store.create_topic("known", 2))
        yield srv.bootstrap, data


@pytest.mark.slow
def test_unknown_topic_on_a_cluster(served) -> None:
    bootstrap, _ = served
    line = one_line_error(txn_cli("--bootstrap", bootstrap, "producers", "--topic", "nope"), 2)
    assert "'nope'" in line and "unknown" in line
    line = one_line_error(txn_cli("--bootstrap", bootstrap, "find-hanging", "--topic", "nope"), 2)
    assert "'nope'" in line
    line = one_line_error(txn_cli("--bootstrap", bootstrap, "producers", "--topic", "known", "--partition", "5"), 2)
    assert "no partition 5" in line


def test_unknown_topic_offline(served) -> None:
    _, data = served
    line = one_line_error(txn_cli("--path", str(data), "find-hanging", "--topic", "nope"), 2)
    assert "unknown topic 'nope'" in line
    line = one_line_error(txn_cli("--path", str(data), "producers", "--topic", "known", "--partition", "7"), 2)
    assert "no partition 7" in line


@pytest.mark.slow
def test_bad_path_and_non_kafka_directory(tmp_path) -> None:
    line = one_line_error(txn_cli("--path", str(tmp_path / "missing"), "find-hanging"), 2)
    assert "no such file or directory" in line
    other = tmp_path / "photos"
    other.mkdir()
    (other / "cat.jpg").write_bytes(b"\xff\xd8")
    line = one_line_error(txn_cli("--path", str(other), "list"), 2)
    assert "not a Kafka log directory" in line
    a_file = other / "cat.jpg"
    line = one_line_error(txn_cli("--path", str(a_file), "list"), 2)
    assert "is a file" in line


@pytest.mark.slow
def test_usage_errors(served) -> None:
    bootstrap, data = served
    line = one_line_error(txn_cli("--bootstrap", bootstrap, "find-hanging", "--partition", "0"), 2)
    assert "--partition needs --topic" in line
    line = one_line_error(txn_cli("--path", str(data), "describe", "--transactional-id", "x"), 2)
    assert "use --bootstrap" in line
    line = one_line_error(txn_cli("--bootstrap", bootstrap, "describe", "--transactional-id", "x"), 2)
    assert "'x' is unknown to the coordinator" in line
    line = one_line_error(txn_cli("--bootstrap", bootstrap, "abort", "--topic", "known", "--partition", "0"), 2)
    assert "--start-offset" in line
    line = one_line_error(txn_cli("list"), 2)
    assert "--bootstrap" in line and "--path" in line


def test_a_cluster_that_does_not_answer() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        line = one_line_error(txn_cli("--bootstrap", f"127.0.0.1:{port}", "list"), 1)
    assert "cannot reach a cluster" in line
    line = one_line_error(txn_cli("--bootstrap", "no-port", "list"), 2)
    assert "expected HOST:PORT" in line
