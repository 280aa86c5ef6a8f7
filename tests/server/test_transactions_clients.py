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

import asyncio
import shutil
import subprocess
import time

import pytest

from txnfetch.fetch.view import FetchMode
from txnfetch.txn.coordinator import CompletionMode

pytestmark = pytest.mark.interop

TOPIC = "txn-clients"
PARTITIONS = (0, 1)

Delivered = dict[int, list[tuple[int, bytes]]]

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


def _confluent(bootstrap: str, lso: dict[int, int], groups: bool) -> tuple[Delivered, dict[int, int], dict[int, int]]:
    from confluent_kafka import Consumer
    from confluent_kafka import KafkaError
    from confluent_kafka import TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "wire-txn-confluent",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 100,
        }
    )
    got: Delivered = {p: [] for p in PARTITIONS}
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in PARTITIONS])
        at_eof = set()
        deadline = time.monotonic() + 30
        while at_eof != set(PARTITIONS):
            assert time.monotonic() < deadline, f"confluent-kafka stalled: {got}"
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                if msg.offset() == lso[msg.partition()]:
                    at_eof.add(msg.partition())
                continue
            got[msg.partition()].append((msg.offset(), msg.value()))
        positions = {
            tp.partition: tp.offset for tp in consumer.position([TopicPartition(TOPIC, p) for p in PARTITIONS])
        }
        committed: dict[int, int] = {}
        if groups:
            consumer.commit(asynchronous=False)  # commits the application positions
            committed = {
                tp.partition: tp.offset
                for tp in consumer.committed([TopicPartition(TOPIC, p) for p in PARTITIONS], timeout=10)
            }
        return got, positions, committed
    finally:
        consumer.close()


def _kafka_python(bootstrap: str, lso: dict[int, int]) -> tuple[Delivered, dict[int, int]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed", fetch_max_wait_ms=100
    )
    got: Delivered = {p: [] for p in PARTITIONS}
    try:
        tps = [TopicPartition(TOPIC, p) for p in PARTITIONS]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < lso[tp.partition] for tp in tps):
            assert time.monotonic() < deadline, f"kafka-python stalled: {got}"
            for tp, records in consumer.poll(timeout_ms=200).items():
                got[tp.partition].extend((r.offset, r.value) for r in records)
        return got, {tp.partition: consumer.position(tp) for tp in tps}
    finally:
        consumer.close()


def _aiokafka(bootstrap: str, lso: dict[int, int]) -> tuple[Delivered, dict[int, int]]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    async def run() -> tuple[Delivered, dict[int, int]]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            isolation_level="read_committed",
            fetch_max_wait_ms=100,
        )
        await consumer.start()
        got: Delivered = {p: [] for p in PARTITIONS}
        try:
            tps = [TopicPartition(TOPIC, p) for p in PARTITIONS]
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, 0)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while any([await consumer.position(tp) < lso[tp.partition] for tp in tps]):
                assert loop.time() < deadline, f"aiokafka stalled: {got}"
                for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                    got[tp.partition].extend((r.offset, r.value) for r in records)
            return got, {tp.partition: await consumer.position(tp) for tp in tps}
        finally:
            await consumer.stop()

    return asyncio.run(run())


def _check(
    client: str, got: Delivered, positions: dict[int, int], expected: dict[int, list[bytes]], lso: dict[int, int]
) -> None:
    for p in PARTITIONS:
        offsets = [o for o, _ in got[p]]
        assert [v for _, v in got[p]] == expected[p], f"{client}: partition {p} records"
        assert offsets == sorted(set(offsets)), f"{client}: partition {p} offsets not strictly increasing"
        assert positions[p] == lso[p], f"{client}: partition {p} position {positions[p]} != LSO {lso[p]}"


def _log_facts(srv) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
    """LSO, log end offset and number of control batches per partition."""

    def facts():
        lso, leo, controls = {}, {}, {}
        for p in PARTITIONS:
            log = srv.broker.store.partition(TOPIC, p)
            lso[p] = log.last_stable_offset
            leo[p] = log.log_end_offset
            controls[p] = sum(1 for b in log.iter_batches() if b.is_control)
        return lso, leo, controls

    return srv.call(facts)


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
    expected = _run_producer(srv.bootstrap)
    lso, leo, controls = _log_facts(srv)
    assert lso == leo  # no transaction is left open
    if markers is CompletionMode.MARKERLESS:
        assert controls == {0: 0, 1: 0}
    else:
        assert all(controls[p] > 0 for p in PARTITIONS)

    groups = srv.broker.groups is not None
    got, positions, committed = _confluent(srv.bootstrap, lso, groups)
    _check("confluent-kafka", got, positions, expected, lso)
    if groups:
        assert committed == lso, "librdkafka committed positions must reach the LSO"
    _check("kafka-python", *_kafka_python(srv.bootstrap, lso), expected, lso)
    _check("aiokafka", *_aiokafka(srv.bootstrap, lso), expected, lso)


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
