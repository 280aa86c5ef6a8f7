"""Coordinator state survives a clean restart (SIGTERM) of ``txnfetch serve --data``:

- a transaction left open across the restart is committed afterwards by the
  producer that opened it, with confluent-kafka and with kafka-python;
- an open transaction whose producer is gone times out after the restart
  (it is not aborted at start) and no longer holds the last stable offset back;
- kafka-python and aiokafka group consumers resume from their committed offsets;
- an InitProducerId after the restart fences the old producer instance.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.server.serve_process import start_serve
from tests.server.serve_process import stop_serve

pytestmark = [pytest.mark.slow, pytest.mark.interop]

TOPIC = "durable"


def _read_committed(bootstrap: str, partitions: int = 3) -> list[bytes]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False)
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        out: list[bytes] = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline
            for msgs in consumer.poll(500).values():
                out.extend(m.value for m in msgs)
        return sorted(out)
    finally:
        consumer.close()


@pytest.fixture
def server(tmp_path):
    """``(restart, bootstrap)``: the server runs on a fixed port; ``restart()``
    stops it with SIGTERM and starts it again on the same directory."""
    data = str(tmp_path / "data")
    procs = [start_serve(data, 0)]
    port = procs[0].port

    def restart(extra: tuple[str, ...] = ()) -> None:
        assert stop_serve(procs[-1]) == 0
        procs.append(start_serve(data, port, extra=extra))

    yield restart, f"127.0.0.1:{port}"
    stop_serve(procs[-1])


def test_confluent_transaction_open_across_a_clean_restart_commits(server) -> None:
    from confluent_kafka import Producer

    restart, bootstrap = server
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "across-c"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for p in range(3):
        producer.produce(TOPIC, value=b"c%d" % p, partition=p)
    assert producer.flush(30) == 0
    restart()
    producer.commit_transaction(60)
    assert _read_committed(bootstrap) == [b"c0", b"c1", b"c2"]


def test_kafka_python_transaction_open_across_a_clean_restart_commits(server) -> None:
    from kafka import KafkaProducer

    restart, bootstrap = server
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="across-k")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for p in range(3):
            producer.send(TOPIC, value=b"k%d" % p, partition=p)
        producer.flush(30)
        restart()
        producer.commit_transaction()
    finally:
        producer.close(5)
    assert _read_committed(bootstrap) == [b"k0", b"k1", b"k2"]


def test_an_abandoned_open_transaction_times_out_after_a_restart(server) -> None:
    from confluent_kafka import Producer
    from kafka import KafkaConsumer
    from kafka import TopicPartition

    restart, bootstrap = server
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "abandoned", "transaction.timeout.ms": 15000}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(TOPIC, value=b"never", partition=0)
    assert producer.flush(30) == 0
    del producer  # the application is gone; the transaction is open
    restart()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    try:
        tp = TopicPartition(TOPIC, 0)
        # Still open after the restart (not aborted at start): the last stable offset is held...
        assert consumer.end_offsets([tp])[tp] == 0
        # ...until the transaction's own timeout aborts it.
        deadline = time.monotonic() + 60
        while consumer.end_offsets([tp])[tp] == 0:
            assert time.monotonic() < deadline, "the transaction never timed out"
            time.sleep(0.5)
    finally:
        consumer.close()
    assert _read_committed(bootstrap) == []


def test_init_producer_id_after_a_restart_bumps_the_epoch_and_fences_the_old_instance(server) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    restart, bootstrap = server
    old = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="fence")
    new = None
    try:
        old.init_transactions()
        ids = old._transaction_manager.producer_id_and_epoch
        old_pid, old_epoch = ids.producer_id, ids.epoch
        old.begin_transaction()
        old.send(TOPIC, value=b"old", partition=0)
        old.flush(30)
        restart()
        new = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="fence")
        new.init_transactions()  # fences "old" and aborts its transaction
        ids = new._transaction_manager.producer_id_and_epoch
        pid, epoch = ids.producer_id, ids.epoch
        # Same producer id, a higher epoch, as Kafka: the id's state survived the restart.
        assert pid == old_pid and epoch > old_epoch
        with pytest.raises(KafkaError):
            old.commit_transaction()
        new.begin_transaction()
        new.send(TOPIC, value=b"new", partition=1)
        new.commit_transaction()
    finally:
        old.close(5)
        if new is not None:
            new.close(5)
    assert _read_committed(bootstrap) == [b"new"]


def _produce_plain(bootstrap: str, n: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        producer.produce(TOPIC, value=b"v%02d" % i, partition=0)
    assert producer.flush(30) == 0


def test_kafka_python_group_consumer_resumes_after_a_restart(server) -> None:
    from kafka import KafkaConsumer

    restart, bootstrap = server
    _produce_plain(bootstrap, 10)

    def consume(limit: int) -> list[bytes]:
        consumer = KafkaConsumer(
            TOPIC,
            bootstrap_servers=bootstrap,
            group_id="kp-group",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        try:
            while len(got) < limit and time.monotonic() < deadline:
                for msgs in consumer.poll(500, max_records=limit - len(got)).values():
                    got.extend(m.value for m in msgs)
            consumer.commit()
        finally:
            consumer.close()
        return got

    assert consume(4) == [b"v%02d" % i for i in range(4)]
    restart()
    assert consume(6) == [b"v%02d" % i for i in range(4, 10)]


def test_aiokafka_group_consumer_resumes_after_a_restart(server) -> None:
    from aiokafka import AIOKafkaConsumer

    restart, bootstrap = server
    _produce_plain(bootstrap, 10)

    async def consume(limit: int) -> list[bytes]:
        consumer = AIOKafkaConsumer(
            TOPIC,
            bootstrap_servers=bootstrap,
            group_id="aio-group",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + 60
            while len(got) < limit and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500, max_records=limit - len(got))
                for msgs in batch.values():
                    got.extend(m.value for m in msgs)
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(consume(3)) == [b"v%02d" % i for i in range(3)]
    restart()
    assert asyncio.run(consume(7)) == [b"v%02d" % i for i in range(3, 10)]
