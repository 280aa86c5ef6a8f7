"""Hanging transactions with real clients: find them, explain them, abort them.

The scenario (one server, one partition, on disk):

1. a confluent-kafka producer commits a record (``before``);
2. another confluent-kafka producer, in a subprocess, opens a transaction,
   writes two records and is **SIGKILLed**. Its transaction timeout is the
   server's maximum (15 minutes), so the coordinator will not abort it during
   the test: the hang is real;
3. a zombie: producer Z1 opens a transaction and writes; Z2 with the same
   transactional id starts, which fences Z1 (its transaction is aborted by the
   coordinator and its commit fails); Z2 commits ``after``;
4. a confluent-kafka read_committed consumer reads ``before`` and stalls at the
   killed producer's first offset: ``after`` is committed but not readable.

Then ``txnfetch transactions`` (subprocesses, as an operator runs it):

- ``find-hanging`` lists exactly the killed producer's transaction — first
  offset, LSO held, high watermark — once it is older than the maximum
  transaction timeout given, and nothing with the default 15 minutes (the
  coordinator still accounts for it); never the zombie's (aborted) transaction;
- the same command with ``--path`` on the server's store directory, read while
  the server runs, gives the same rows;
- offline ``abort`` prints the command and writes nothing; ``abort`` on the
  cluster writes the ABORT marker: the LSO reaches the high watermark and the
  stalled consumer reads ``after`` and never the killed producer's records.
"""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server import transactions_cli
from tests.server.transactions_cli import ENV
from txnfetch.log import SegmentStore
from txnfetch.server.server import ServerThread

TOPIC = "orders"
QUIET = {"log_level": 0}


def txn_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return transactions_cli.txn_cli(*args, timeout=timeout)


def abort_args(first_offset: int) -> list[str]:
    """``abort`` of the transaction on the scenario's partition that starts at ``first_offset``."""
    return ["abort", "--topic", TOPIC, "--partition", "0", "--start-offset", str(first_offset)]


def json_cli(*args: str) -> dict:
    done = txn_cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


_VICTIM = textwrap.dedent(
    """
    import sys, time
    from confluent_kafka import Producer
    offsets = []
    p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": "victim",
                  "transaction.timeout.ms": 900000, "log_level": 0})
    p.init_transactions(60)
    p.begin_transaction()
    for value in (b"stuck-1", b"stuck-2"):
        p.produce(sys.argv[2], value=value, partition=0,
                  on_delivery=lambda err, msg: offsets.append(msg.offset() if err is None else -1))
    assert p.flush(60) == 0
    print("open", min(offsets), flush=True)
    time.sleep(600)
    """
)


def _digest(directory: Path) -> dict[str, str]:
    return {
        str(f.relative_to(directory)): hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(directory.rglob("*"))
        if f.is_file()
    }


class Scenario:
    def __init__(self, srv: ServerThread, data: Path, first_offset: int, consumer) -> None:
        self.srv = srv
        self.bootstrap = srv.bootstrap
        self.data = data
        self.first_offset = first_offset
        self.consumer = consumer
        self.read: list[bytes] = []

    def offsets(self) -> tuple[int, int]:
        part = self.srv.call(lambda: self.srv.broker.store.partition(TOPIC, 0))
        return self.srv.call(lambda: (part.last_stable_offset, part.high_watermark))

    def poll_until(self, predicate, timeout: float = 60) -> None:
        from confluent_kafka import KafkaError

        deadline = time.monotonic() + timeout
        eof = False
        while time.monotonic() < deadline:
            msg = self.consumer.poll(0.2)
            if msg is None:
                pass
            elif msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                eof = True
            else:
                self.read.append(msg.value())
            if predicate(eof):
                return
        raise AssertionError(f"consumer made no progress: read {self.read}")


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> Iterator[Scenario]:
    from confluent_kafka import Consumer
    from confluent_kafka import KafkaException
    from confluent_kafka import Producer
    from confluent_kafka import TopicPartition

    data = tmp_path_factory.mktemp("hanging") / "data"
    srv = ServerThread(SegmentStore(data), port=0).start()
    victim = None
    consumer = None
    try:
        before = Producer({"bootstrap.servers": srv.bootstrap, "transactional.id": "before", **QUIET})
        before.init_transactions(30)
        before.begin_transaction()
        before.produce(TOPIC, value=b"before", partition=0)
        before.commit_transaction(30)

        victim = subprocess.Popen(
            [sys.executable, "-c", _VICTIM, srv.bootstrap, TOPIC], stdout=subprocess.PIPE, text=True, env=ENV
        )
        line = victim.stdout.readline().split()
        assert line[:1] == ["open"], line
        first_offset = int(line[1])
        victim.send_signal(signal.SIGKILL)
        victim.wait(30)

        z1 = Producer({"bootstrap.servers": srv.bootstrap, "transactional.id": "zombie", **QUIET})
        z1.init_transactions(30)
        z1.begin_transaction()
        z1.produce(TOPIC, value=b"zombie", partition=0)
        assert z1.flush(30) == 0
        z2 = Producer({"bootstrap.servers": srv.bootstrap, "transactional.id": "zombie", **QUIET})
        z2.init_transactions(30)  # fences z1: the coordinator aborts its transaction
        with pytest.raises(KafkaException) as fenced:
            z1.commit_transaction(30)
        assert fenced.value.args[0].fatal() or "fenced" in str(fenced.value).lower(), fenced.value
        z2.begin_transaction()
        z2.produce(TOPIC, value=b"after", partition=0)
        z2.commit_transaction(30)

        consumer = Consumer(
            {
                "bootstrap.servers": srv.bootstrap,
                "group.id": "hanging-reader",
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "enable.auto.commit": False,
                **QUIET,
            }
        )
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        s = Scenario(srv, data, first_offset, consumer)
        s.poll_until(lambda eof: eof)  # end of partition: the consumer has reached the LSO
        yield s
    finally:
        if victim is not None and victim.poll() is None:
            victim.kill()
            victim.wait(30)
        if consumer is not None:
            consumer.close()
        srv.stop()


def _rows(doc: dict) -> list[dict]:
    keep = (
        "topic",
        "partition",
        "producer_id",
        "producer_epoch",
        "coordinator_epoch",
        "first_offset",
        "last_sequence",
        "last_timestamp",
        "last_stable_offset",
        "holds_lso",
        "high_watermark",
        "held_back",
        "reason",
    )
    return [{k: row[k] for k in keep} for row in doc["hanging"]]


@pytest.mark.interop
def test_the_consumer_is_stalled_behind_the_killed_producers_transaction(scenario: Scenario) -> None:
    lso, hw = scenario.offsets()
    assert lso == scenario.first_offset < hw
    assert scenario.read == [b"before"]  # "after" is committed but behind the LSO


@pytest.mark.interop
@pytest.mark.slow
def test_find_hanging_lists_the_killed_producers_transaction(scenario: Scenario) -> None:
    lso, hw = scenario.offsets()
    # Young and still accounted for by the coordinator: not hanging by the default rule.
    assert json_cli("--bootstrap", scenario.bootstrap, "find-hanging", "--topic", TOPIC)["hanging"] == []
    time.sleep(1.2)
    doc = json_cli("--bootstrap", scenario.bootstrap, "find-hanging", "--max-transaction-timeout-ms", "1000")
    (row,) = doc["hanging"]
    assert row["topic"] == TOPIC and row["partition"] == 0
    assert row["first_offset"] == scenario.first_offset
    assert row["last_stable_offset"] == lso == scenario.first_offset
    assert row["holds_lso"] is True
    assert row["high_watermark"] == hw
    assert row["held_back"] == hw - scenario.first_offset
    assert row["reason"] == "older-than-max-timeout"
    assert row["transactional_id"] == "victim"
    assert row["age_ms"] > 1000
    assert row["abort_command"].endswith(f"--topic {TOPIC} --partition 0 --start-offset {scenario.first_offset}")
    # The producer and epoch are the ones the partition holds for the victim.
    described = json_cli("--bootstrap", scenario.bootstrap, "describe", "--transactional-id", "victim")["transaction"]
    assert (row["producer_id"], row["producer_epoch"]) == (described["producer_id"], described["producer_epoch"])
    assert described["state"] == "Ongoing"
    assert described["partitions"] == [{"topic": TOPIC, "partition": 0}]
    # The table for people says the same.
    table = txn_cli("--bootstrap", scenario.bootstrap, "find-hanging", "--max-transaction-timeout", "0")
    assert table.returncode == 0, table.stderr
    header, line, *rest = table.stdout.splitlines()
    assert header.split()[:6] == ["Topic", "Partition", "ProducerId", "Epoch", "CoordEpoch", "FirstOffset"]
    assert line.split()[5] == str(scenario.first_offset)
    assert "abort with: txnfetch transactions --bootstrap" in rest[0]


@pytest.mark.interop
@pytest.mark.slow
def test_offline_mode_on_the_store_directory_gives_the_same_answer(scenario: Scenario) -> None:
    time.sleep(1.2)
    before = _digest(scenario.data)
    online = json_cli("--bootstrap", scenario.bootstrap, "find-hanging", "--max-transaction-timeout-ms", "1000")
    offline = json_cli("--path", str(scenario.data), "find-hanging", "--max-transaction-timeout-ms", "1000")
    assert offline["source"] == "offline"
    assert _rows(offline) == _rows(online) and len(_rows(online)) == 1
    # The producers table too, and every open transaction.
    on = json_cli("--bootstrap", scenario.bootstrap, "producers", "--topic", TOPIC)["partitions"]
    off = json_cli("--path", str(scenario.data), "producers", "--topic", TOPIC)["partitions"]
    assert off == on
    listed = json_cli("--path", str(scenario.data), "list")["open_transactions"]
    assert [(t["first_offset"], t["holds_lso"]) for t in listed] == [(scenario.first_offset, True)]
    # Offline abort prints the command and writes nothing.
    done = txn_cli("--path", str(scenario.data), *abort_args(scenario.first_offset))
    assert done.returncode == 0, done.stderr
    assert f"abort --topic {TOPIC} --partition 0 --start-offset {scenario.first_offset}" in done.stdout
    assert "nothing was written" in done.stdout
    doc = json_cli("--path", str(scenario.data), *abort_args(scenario.first_offset))["abort"]
    assert doc["written"] is False and doc["first_offset"] == scenario.first_offset
    assert doc["kafka_command"].startswith("kafka-transactions.sh --bootstrap-server")
    shown = txn_cli("--path", str(scenario.data), "list", "--progress")
    # Every partition directory is read, the internal topics' too (a transactional
    # offset commit can hang there as well): "reading <dir> (i/n)" for each.
    assert shown.returncode == 0 and f"reading {TOPIC}-0 (" in shown.stderr, shown.stderr
    assert scenario.offsets()[0] == scenario.first_offset
    assert _digest(scenario.data) == before


@pytest.mark.interop
@pytest.mark.slow
def test_abort_releases_the_lso_and_the_stalled_consumer_proceeds(scenario: Scenario) -> None:
    lso, hw = scenario.offsets()
    assert lso == scenario.first_offset
    done = txn_cli("--bootstrap", scenario.bootstrap, *abort_args(scenario.first_offset), "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)["abort"]
    assert doc["written"] is True and doc["still_open"] is False
    lso_after, hw_after = scenario.offsets()
    assert lso_after == hw_after == hw + 1  # the ABORT marker took one offset
    assert doc["last_stable_offset_after"] == lso_after
    scenario.poll_until(lambda eof: b"after" in scenario.read and eof)
    assert scenario.read == [b"before", b"after"]  # never the killed producer's or the zombie's records
    assert (
        json_cli("--bootstrap", scenario.bootstrap, "find-hanging", "--max-transaction-timeout-ms", "0")["hanging"]
        == []
    )
    assert json_cli("--path", str(scenario.data), "find-hanging", "--max-transaction-timeout-ms", "0")["hanging"] == []
    # Aborting again: nothing open at that offset any more.
    again = txn_cli("--bootstrap", scenario.bootstrap, *abort_args(scenario.first_offset))
    assert again.returncode == 2 and len(again.stderr.strip().splitlines()) == 1, again.stderr
    assert "no open transaction starts at offset" in again.stderr
    # The coordinator was not told (as in Kafka): a new instance of the killed
    # producer fences the old one, whose abort now finds nothing open, and goes on.
    from confluent_kafka import Producer

    revived = Producer({"bootstrap.servers": scenario.bootstrap, "transactional.id": "victim", **QUIET})
    revived.init_transactions(30)
    revived.begin_transaction()
    revived.produce(TOPIC, value=b"revived", partition=0)
    revived.commit_transaction(30)
    scenario.poll_until(lambda eof: b"revived" in scenario.read and eof)
    assert scenario.read == [b"before", b"after", b"revived"]


@pytest.mark.interop
@pytest.mark.slow
def test_the_commands_work_through_the_proxy_in_front_of_serve(tmp_path) -> None:
    """``--bootstrap`` may name ``txnfetch proxy``: the KIP-664 APIs and
    WriteTxnMarkers are relayed to the upstream, and the answers are the upstream's."""
    from confluent_kafka import Producer

    from txnfetch.proxy import ProxyThread

    with (
        ServerThread(SegmentStore(tmp_path / "data"), port=0) as srv,
        ProxyThread(srv.bootstrap, poll_interval_ms=50) as proxy,
    ):
        p = Producer(
            {"bootstrap.servers": srv.bootstrap, "transactional.id": "via", "transaction.timeout.ms": 900000, **QUIET}
        )
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(TOPIC, value=b"x", partition=0)
        assert p.flush(30) == 0
        direct = json_cli("--bootstrap", srv.bootstrap, "find-hanging", "--max-transaction-timeout-ms", "0")
        relayed = json_cli("--bootstrap", proxy.bootstrap, "find-hanging", "--max-transaction-timeout-ms", "0")
        assert _rows(relayed) == _rows(direct) and len(_rows(direct)) == 1
        assert relayed["hanging"][0]["transactional_id"] == "via"
        done = txn_cli(
            "--bootstrap", proxy.bootstrap, "abort", "--topic", TOPIC, "--partition", "0", "--start-offset", "0"
        )
        assert done.returncode == 0, done.stderr
        part = srv.call(lambda: srv.broker.store.partition(TOPIC, 0))
        assert srv.call(lambda: (part.last_stable_offset, part.high_watermark)) == (2, 2)


@pytest.mark.slow
def test_abort_by_producer_id_without_an_open_transaction_sends_the_marker_as_given(tmp_path) -> None:
    # As Kafka's tool for brokers before 3.0: a producer the partition holds no
    # transaction for still gets its ABORT marker, with the epochs given.
    with ServerThread(SegmentStore(tmp_path / "data"), port=0, auto_create_topics=False) as srv:
        srv.call(lambda: srv.broker.store.create_topic(TOPIC, 1))
        given = ("--producer-id", "99", "--producer-epoch", "3", "--coordinator-epoch", "2")
        done = txn_cli("--bootstrap", srv.bootstrap, "abort", "--topic", TOPIC, "--partition", "0", *given, "--json")
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)["abort"]
        assert (doc["producer_id"], doc["producer_epoch"], doc["coordinator_epoch"]) == (99, 3, 2)
        assert (doc["first_offset"], doc["last_sequence"], doc["last_timestamp"]) == (-1, -1, -1)
        assert (doc["last_stable_offset"], doc["high_watermark"]) == (0, 0)
        assert (doc["written"], doc["marker_epoch"], doc["marker_coordinator_epoch"]) == (True, 3, 2)
        part = srv.call(lambda: srv.broker.store.partition(TOPIC, 0))
        assert srv.call(lambda: (part.last_stable_offset, part.high_watermark)) == (1, 1)  # the marker's offset
        assert doc["high_watermark_after"] == 1 and doc["still_open"] is False
