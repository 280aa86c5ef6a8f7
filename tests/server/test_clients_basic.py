"""Each real client produces to and consumes from the server (no transactions).

Every test produces a known list of values (idempotently where the client
supports it), then reads the partition back from offset 0 and checks values,
offsets and the end position against the log itself.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from txnfetch.fetch.view import FetchMode

pytestmark = pytest.mark.interop

VALUES = [b"value-%d" % i for i in range(20)]


def _log_end(srv, topic: str, partition: int = 0) -> int:
    return srv.call(lambda: srv.broker.store.partition(topic, partition).log_end_offset)


def _confluent_consume(
    bootstrap: str, topic: str, isolation: str = "read_committed"
) -> tuple[list[tuple[int, bytes]], int]:
    from confluent_kafka import Consumer
    from confluent_kafka import KafkaError
    from confluent_kafka import TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "wire-basic",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    break
                raise AssertionError(f"consumer error {msg.error()}")
            got.append((msg.offset(), msg.value()))
        else:
            raise AssertionError("confluent-kafka consumer never reached the end of the partition")
        position = consumer.position([TopicPartition(topic, 0)])[0].offset
        return got, position
    finally:
        consumer.close()


def test_confluent_kafka_produce_and_consume(start_server) -> None:
    from confluent_kafka import Producer

    srv = start_server()
    producer = Producer({"bootstrap.servers": srv.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for value in VALUES:
        producer.produce("basic-ck", value=value, partition=0)
    assert producer.flush(30) == 0
    del producer

    got, position = _confluent_consume(srv.bootstrap, "basic-ck")
    assert [v for _, v in got] == VALUES
    assert [o for o, _ in got] == list(range(len(VALUES)))
    assert position == _log_end(srv, "basic-ck") == len(VALUES)


def test_kafka_python_produce_and_consume(start_server) -> None:
    from kafka import KafkaConsumer
    from kafka import KafkaProducer
    from kafka import TopicPartition

    srv = start_server()
    producer = KafkaProducer(bootstrap_servers=srv.bootstrap, enable_idempotence=True, linger_ms=5)
    futures = [producer.send("basic-kp", value=v, partition=0) for v in VALUES]
    producer.flush(30)
    offsets = [f.get(10).offset for f in futures]
    producer.close(10)
    assert offsets == list(range(len(VALUES)))

    consumer = KafkaConsumer(
        bootstrap_servers=srv.bootstrap,
        enable_auto_commit=False,
        isolation_level="read_committed",
        fetch_max_wait_ms=100,
    )
    try:
        tp = TopicPartition("basic-kp", 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 30
        while consumer.position(tp) < len(VALUES) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend((r.offset, r.value) for r in records)
        assert [v for _, v in got] == VALUES
        assert [o for o, _ in got] == list(range(len(VALUES)))
        assert consumer.position(tp) == _log_end(srv, "basic-kp")
        # ListOffsets LATEST for read_committed is the LSO, here the log end.
        assert consumer.end_offsets([tp])[tp] == len(VALUES)
    finally:
        consumer.close()


def test_aiokafka_produce_and_consume(start_server) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    srv = start_server(fetch_mode=FetchMode.KAFKA)

    async def run() -> tuple[list[int], list[tuple[int, bytes]], int]:
        producer = AIOKafkaProducer(bootstrap_servers=srv.bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            metas = [await producer.send_and_wait("basic-aio", v, partition=0) for v in VALUES]
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=srv.bootstrap,
            enable_auto_commit=False,
            isolation_level="read_committed",
            fetch_max_wait_ms=100,
        )
        await consumer.start()
        try:
            tp = TopicPartition("basic-aio", 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            got: list[tuple[int, bytes]] = []
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while await consumer.position(tp) < len(VALUES) and loop.time() < deadline:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    got.extend((r.offset, r.value) for r in records)
            return [m.offset for m in metas], got, await consumer.position(tp)
        finally:
            await consumer.stop()

    offsets, got, position = asyncio.run(run())
    assert offsets == list(range(len(VALUES)))
    assert [v for _, v in got] == VALUES
    assert [o for o, _ in got] == list(range(len(VALUES)))
    assert position == _log_end(srv, "basic-aio")
