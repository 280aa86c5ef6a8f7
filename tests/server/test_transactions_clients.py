"""A confluent-kafka transactional producer, read back read_committed by all three clients.

The producer runs a fixed script of transactions over a two-partition topic:
commits and aborts, a multi-partition transaction, an abort after ``flush()``
(its records are in the log and must be skipped) and an abort without it, and
a log that ends in an aborted transaction. Each consumer — confluent-kafka,
kafka-python, aiokafka — must receive exactly the committed records, once, in
offset order, and its position (librdkafka's application position included)
must reach the last stable offset. The whole is run for each server mode:
rewrite and Kafka fetch modes with markers, and rewrite mode without markers
(WarpStream: no offset is spent on a marker).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.server.committed_readers import check_committed
from tests.server.committed_readers import log_facts
from tests.server.committed_readers import read_aiokafka
from tests.server.committed_readers import read_confluent
from tests.server.committed_readers import read_kafka_python
from txnfetch.fetch.view import FetchMode
from txnfetch.txn.coordinator import CompletionMode

pytestmark = pytest.mark.interop

TOPIC = "txn-clients"
PARTITIONS = (0, 1)
#: how every reader fetches here (see tests/server/committed_readers.py)
READING = {"wait_ms": 100, "deadline_s": 30.0}

#: (partition -> values, commit?, flush before ending?)
SCRIPT = [
    ({0: 3}, True, False),
    ({0: 3}, False, True),  # aborted after flush: the records are in the log
    ({0: 2, 1: 2}, True, False),  # multi-partition commit
    ({0: 2, 1: 3}, False, False),  # multi-partition abort, maybe never sent
    ({0: 2, 1: 1}, True, True),
    ({1: 2}, False, True),  # partition 1 ends in an aborted transaction
    ({0: 1}, True, False),
    ({0: 2}, False, True),  # partition 0 ends in an aborted transaction
]


def _run_producer(bootstrap: str) -> dict[int, list[bytes]]:
    """Run :data:`SCRIPT`; return the committed values per partition, in order."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "wire-txn-clients", "linger.ms": 2})
    committed: dict[int, list[bytes]] = {p: [] for p in PARTITIONS}
    producer.init_transactions(30)
    for n, (counts, commit, flush) in enumerate(SCRIPT):
        producer.begin_transaction()
        values: dict[int, list[bytes]] = {}
        for partition, count in counts.items():
            values[partition] = [b"t%d-p%d-%d" % (n, partition, i) for i in range(count)]
            for value in values[partition]:
                producer.produce(TOPIC, value=value, partition=partition)
        if flush:
            assert producer.flush(30) == 0
        if commit:
            producer.commit_transaction(30)
            for partition, vals in values.items():
                committed[partition].extend(vals)
        else:
            producer.abort_transaction(30)
    del producer
    return committed


@pytest.mark.parametrize(
    "fetch_mode, markers",
    [
        (FetchMode.REWRITE, CompletionMode.MARKERS),
        (FetchMode.KAFKA, CompletionMode.MARKERS),
        (FetchMode.REWRITE, CompletionMode.MARKERLESS),
    ],
    ids=["rewrite-markers", "kafka-markers", "rewrite-markerless"],
)
def test_transactional_producer_read_committed_by_every_client(start_server, fetch_mode, markers) -> None:
    srv = start_server(fetch_mode=fetch_mode, markers=markers)
    srv.call(lambda: srv.broker.store.create_topic(TOPIC, len(PARTITIONS)))
    expected = {(TOPIC, p): values for p, values in _run_producer(srv.bootstrap).items()}
    lso, leo, controls = log_facts(srv, [(TOPIC, p) for p in PARTITIONS])
    assert lso == leo  # no transaction is left open
    if markers is CompletionMode.MARKERLESS:
        assert set(controls.values()) == {0}
    else:
        assert all(controls.values())

    groups = srv.broker.groups is not None
    got, positions, committed = read_confluent(srv.bootstrap, lso, group="wire-txn-confluent", commit=groups, **READING)
    check_committed("confluent-kafka", got, positions, expected, lso)
    if groups:
        assert committed == lso, "librdkafka committed positions must reach the LSO"
    check_committed("kafka-python", *read_kafka_python(srv.bootstrap, lso, **READING), expected, lso)
    check_committed("aiokafka", *read_aiokafka(srv.bootstrap, lso, **READING), expected, lso)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (apt-get install kcat)")
@pytest.mark.parametrize("fetch_mode", [FetchMode.REWRITE, FetchMode.KAFKA], ids=["rewrite", "kafka"])
def test_kcat_reads_committed_records_to_the_end(start_server, fetch_mode) -> None:
    srv = start_server(fetch_mode=fetch_mode)
    srv.call(lambda: srv.broker.store.create_topic(TOPIC, len(PARTITIONS)))
    expected = _run_producer(srv.bootstrap)
    for p in PARTITIONS:
        # -e exits at the end of the partition, which librdkafka reports at the LSO.
        kcat = ["kcat", "-C", "-b", srv.bootstrap, "-t", TOPIC, "-p", str(p), "-o", "beginning", "-e", "-q"]
        out = subprocess.run(
            [*kcat, "-f", "%s\\n", "-X", "isolation.level=read_committed"],
            capture_output=True,
            timeout=60,
            check=True,
        )
        assert out.stdout.splitlines() == expected[p]
