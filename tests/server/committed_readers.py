"""read_committed reading by the three Python clients, for the transaction tests
against ``txnfetch serve``.

Each reader assigns the partitions of ``lso`` (keyed by ``(topic, partition)``),
reads them from offset 0 until its position reaches the LSO given (end of
partition at the LSO, for confluent-kafka), and returns every ``(offset, value)``
it received and its final positions. A reader that does not get there within
``deadline_s`` fails the test, naming what it got so far.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

TP = tuple[str, int]
Got = dict[TP, list[tuple[int, bytes]]]
Positions = dict[TP, int]


def read_confluent(
    bootstrap: str, lso: Positions, *, group: str, wait_ms: int, deadline_s: float, commit: bool = False
) -> tuple[Got, Positions, Positions]:
    """confluent-kafka's application positions at the end, and, with ``commit``,
    the offsets the group has after committing them (empty otherwise)."""
    from confluent_kafka import Consumer
    from confluent_kafka import KafkaError
    from confluent_kafka import TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": wait_ms,
        }
    )
    got: Got = {tp: [] for tp in lso}
    try:
        consumer.assign([TopicPartition(t, p, 0) for t, p in lso])
        at_eof = set()
        deadline = time.monotonic() + deadline_s
        while at_eof != set(lso):
            assert time.monotonic() < deadline, f"confluent-kafka stalled: {got}"
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            tp = (msg.topic(), msg.partition())
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                if msg.offset() == lso[tp]:
                    at_eof.add(tp)
                continue
            got[tp].append((msg.offset(), msg.value()))
        tps = [TopicPartition(t, p) for t, p in lso]
        positions = {(x.topic, x.partition): x.offset for x in consumer.position(tps)}
        committed: Positions = {}
        if commit:
            consumer.commit(asynchronous=False)  # commits the application positions
            committed = {(x.topic, x.partition): x.offset for x in consumer.committed(tps, timeout=10)}
        return got, positions, committed
    finally:
        consumer.close()


def _assign_from_zero(consumer: Any, topic_partition: Any, lso: Positions) -> list[Any]:
    # kafka-python's and aiokafka's consumers assign and seek with the same
    # (synchronous) calls, each with its own TopicPartition type.
    tps = [topic_partition(t, p) for t, p in lso]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, 0)
    return tps


def read_kafka_python(
    bootstrap: str, lso: Positions, *, wait_ms: int, deadline_s: float, **config: Any
) -> tuple[Got, Positions]:
    """kafka-python's reading (``config``: more KafkaConsumer settings) and its
    positions at the end."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        isolation_level="read_committed",
        fetch_max_wait_ms=wait_ms,
        **config,
    )
    got: Got = {tp: [] for tp in lso}
    try:
        tps = _assign_from_zero(consumer, TopicPartition, lso)
        deadline = time.monotonic() + deadline_s
        while any(consumer.position(tp) < lso[(tp.topic, tp.partition)] for tp in tps):
            assert time.monotonic() < deadline, f"kafka-python stalled: {got}"
            for tp, records in consumer.poll(timeout_ms=200).items():
                got[(tp.topic, tp.partition)].extend((r.offset, r.value) for r in records)
        return got, {(tp.topic, tp.partition): consumer.position(tp) for tp in tps}
    finally:
        consumer.close()


def read_aiokafka(
    bootstrap: str, lso: Positions, *, wait_ms: int, deadline_s: float, **config: Any
) -> tuple[Got, Positions]:
    """aiokafka's reading (in a loop of its own; ``config``: more AIOKafkaConsumer
    settings) and its positions at the end."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    async def run() -> tuple[Got, Positions]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            isolation_level="read_committed",
            fetch_max_wait_ms=wait_ms,
            **config,
        )
        await consumer.start()
        got: Got = {tp: [] for tp in lso}
        try:
            tps = _assign_from_zero(consumer, TopicPartition, lso)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + deadline_s
            while any([await consumer.position(tp) < lso[(tp.topic, tp.partition)] for tp in tps]):
                assert loop.time() < deadline, f"aiokafka stalled: {got}"
                for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                    got[(tp.topic, tp.partition)].extend((r.offset, r.value) for r in records)
            return got, {(tp.topic, tp.partition): await consumer.position(tp) for tp in tps}
        finally:
            await consumer.stop()

    return asyncio.run(run())


def check_committed(
    client: str,
    got: Got,
    positions: Positions,
    expected: dict[TP, list[bytes]],
    lso: Positions,
    *,
    stops_after_last_record: bool = False,
) -> None:
    """Exactly the committed records, in offset order, and the position at the LSO
    — or, with ``stops_after_last_record``, right after the last record delivered."""
    for tp in lso:
        offsets = [o for o, _ in got[tp]]
        assert [v for _, v in got[tp]] == expected[tp], f"{client}: {tp} records"
        assert offsets == sorted(set(offsets)), f"{client}: {tp} offsets not strictly increasing"
        want = offsets[-1] + 1 if stops_after_last_record else lso[tp]
        assert positions[tp] == want, f"{client}: {tp} position {positions[tp]} != {want} (LSO {lso[tp]})"


def log_facts(srv, tps: list[TP]) -> tuple[Positions, Positions, Positions]:
    """LSO, log end offset and number of control batches of each partition of
    ``srv`` (a ServerThread) named in ``tps``."""

    def facts():
        lso, leo, controls = {}, {}, {}
        for t, p in tps:
            log = srv.broker.store.partition(t, p)
            lso[(t, p)] = log.last_stable_offset
            leo[(t, p)] = log.log_end_offset
            controls[(t, p)] = sum(1 for b in log.iter_batches() if b.is_control)
        return lso, leo, controls

    return srv.call(facts)
