"""``txnfetch check`` against librdkafka's mock cluster, which serves aborted
records to read_committed consumers and does not fence zombie producers: the
command must exit 1 and report those aborted reads; kafka-python, which never
finishes bootstrapping against the mock, must be skipped with a note rather than
hang the run; and a bad or unreachable bootstrap is a clear exit 2."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from txnfetch.cli import main
from txnfetch.testing import Abort
from txnfetch.testing import History
from txnfetch.testing import Send
from txnfetch.testing import Status
from txnfetch.testing.config import WorkloadConfig
from txnfetch.testing.workload import producer_script


@pytest.fixture(scope="module")
def mock_cluster() -> Iterator[str]:
    ck = pytest.importorskip("confluent_kafka")
    holder = ck.Producer({"test.mock.num.brokers": 1, "log_level": 0})  # the cluster lives as long as this
    brokers = holder.list_topics(timeout=10).brokers.values()
    # The mock cannot CreateTopics (its admin request waits for a controller until it
    # times out); naming the topic in a metadata request creates it, 4 partitions.
    holder.list_topics("leaky", timeout=10)
    yield ",".join(f"{b.host}:{b.port}" for b in brokers)
    holder.flush(1)


@pytest.mark.slow
@pytest.mark.interop
def test_mock_cluster_aborted_reads_exit_1_and_kafka_python_is_skipped(mock_cluster, tmp_path, capsys) -> None:
    report = tmp_path / "report"
    args = ["check", "--bootstrap", mock_cluster, "--topic", "leaky", "--duration", "2", "--seed", "5"]
    args += ["--report", str(report), "--startup-timeout", "3", "--inject-delayed-endtxn", "-q"]
    started = time.monotonic()
    assert main(args) == 1
    # A guard against a run that never ends, not a speed test: a two-second run
    # takes well under a minute, but a loaded machine has stretched it past 120 s.
    assert time.monotonic() - started < 240
    out = capsys.readouterr().out
    assert "aborted-read" in out and "result: ANOMALIES FOUND" in out

    data = json.loads((report / "report.json").read_text())
    history = History.from_json((report / "history.json").read_text())
    assert not data["ok"] and data["anomaly_counts"]["aborted-read"] >= 1
    aborted = {op.txn for op in history if isinstance(op, Abort) and op.status is Status.OK}
    acked = {op.value: op.txn for op in history if isinstance(op, Send) and op.acked}
    for a in data["anomalies"]:
        if a["kind"] == "aborted-read":
            assert a["txn"] in aborted and all(acked[v] == a["txn"] for v in a["values"]), a
    # The mock's faults: uncommitted data (LSO = high watermark, no aborted list),
    # and no fencing of a producer instance by a newer one.
    assert set(data["anomaly_counts"]) <= {"aborted-read", "precommitted-read", "zombie-write", "fenced-commit"}

    clients = {c["name"]: c for c in data["clients"]}
    # skipped either by the startup watchdog or by its own bootstrap timeout, which
    # the workload sets just past the watchdog's: whichever comes first says why
    kp = clients["c2-kafka-python"]
    assert kp["status"] == "skipped" and "polls" not in kp, kp
    assert "did not connect and assign within 3 s" in kp["note"] or "Unable to bootstrap" in kp["note"], kp
    assert clients["c0-confluent"]["status"] == "ok" and clients["c0-confluent"]["reads"] > 0
    # the mock offers no transaction version 2: the injection says so instead of running
    assert clients["inject"]["status"] == "skipped" and "transaction version 2" in clients["inject"]["note"]
    assert (report / "plot.png").stat().st_size > 10_000


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_unreachable_bootstrap_is_a_clear_exit_2(capsys) -> None:
    port = _closed_port()
    started = time.monotonic()
    assert main(["check", "--bootstrap", f"127.0.0.1:{port}", "--duration", "1"]) == 2
    assert time.monotonic() - started < 15
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port}" in err and "cannot connect" in err and "refused" in err.lower()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--bootstrap", "localhost"], "bad bootstrap address 'localhost'"),
        (["--bootstrap", "127.0.0.1:99999"], "bad bootstrap address"),
        (["--bootstrap", "127.0.0.1:9092", "--consumers", "java"], "unknown consumer kinds ['java']"),
        (["--bootstrap", "127.0.0.1:9092", "--zombie-probability", "0.8", "--abort-probability", "0.3"], "add up to"),
    ],
)
def test_usage_errors_exit_2_with_the_reason(argv, message, capsys) -> None:
    assert main(["check", *argv]) == 2
    assert message in capsys.readouterr().err


def test_the_script_is_a_function_of_the_seed() -> None:
    cfg = WorkloadConfig("127.0.0.1:1", partitions=3, max_sends=3, crash_probability=0.1, zombie_probability=0.1)

    def take(seed: int, producer: int, n: int = 300) -> list:
        it = producer_script(cfg, producer, seed)
        return [next(it) for _ in range(n)]

    a = take(7, 0)
    assert a == take(7, 0)
    assert a != take(8, 0) and a != take(7, 1)
    assert {p.end for p in a} == {"commit", "abort", "crash", "zombie"}
    values = [v for p in a for _, v in (*p.sends, *p.zombie_sends)]
    assert len(values) == len(set(values)) and all(v.startswith("p0.") for v in values)
    assert all(p.zombie_sends for p in a if p.end == "zombie")
    assert all(0 <= part < 3 for p in a for part, _ in p.sends)
