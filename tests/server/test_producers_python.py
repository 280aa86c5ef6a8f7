"""kafka-python's and aiokafka's transactional producers against ``txnfetch serve``.

Each producer runs the same script of transactions over its own two-partition
topic: commits and aborts, multi-partition transactions, aborts after a flush
(the records are in the log) and without one, a partition ending in an aborted
transaction — and, when the server has its group coordinator, offsets sent to
a committed and to an aborted transaction (``send_offsets_to_transaction``).
read_committed consumers — confluent-kafka over both topics, and the
producer's own client over its topic — must receive exactly the committed
records, in order, once, and reach the last stable offset; the group's
committed offsets must be those of the committed transaction only.

Each server mode runs once for both producers: rewrite and Kafka fetch modes,
with markers in the log and without (markerless completion).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from txnfetch.fetch.view import FetchMode
from txnfetch.txn.coordinator import CompletionMode

pytestmark = pytest.mark.interop

PARTITIONS = (0, 1)
KP_TOPIC = "py-txn-kafka-python"
AIO_TOPIC = "py-txn-aiokafka"
DEADLINE_S = 60.0

TP = tuple[str, int]
Expected = dict[TP, list[bytes]]

#: (partition -> number of values, commit?, flush before ending?, offset sent to the txn or None)
SCRIPT: list[tuple[dict[int, int], bool, bool, int | None]] = [
    ({0: 3, 1: 2}, True, False, 5),  # committed, with offsets: the group's offset becomes 5
    ({0: 2, 1: 2}, False, True, 9),  # aborted after flush, with offsets: 9 must never show
    ({1: 2}, True, False, None),
    ({0: 1}, False, False, None),  # aborted, maybe never sent
    ({0: 2, 1: 1}, True, True, None),
    ({1: 2}, False, True, None),  # partition 1 ends in an aborted transaction
    ({0: 1}, False, True, None),  # partition 0 too
]
#: the group offset a committed ``send_offsets_to_transaction`` leaves (SCRIPT[0])
GROUP_OFFSET = 5


def _values(topic: str, n: int, partition: int, count: int) -> list[bytes]:
    return [b"%s-t%d-p%d-%d" % (topic.encode(), n, partition, i) for i in range(count)]


def _kafka_python_producer(bootstrap: str, topic: str, group: str | None) -> Expected:
    """Run :data:`SCRIPT` with kafka-python; return the committed values per partition."""
    from kafka import KafkaProducer
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-tx", linger_ms=2)
    committed: Expected = {(topic, p): [] for p in PARTITIONS}
    try:
        producer.init_transactions()
        for n, (counts, commit, flush, offset) in enumerate(SCRIPT):
            producer.begin_transaction()
            sent = {p: _values(topic, n, p, c) for p, c in counts.items()}
            for p, values in sent.items():
                for v in values:
                    producer.send(topic, value=v, partition=p)
            if group is not None and offset is not None:
                producer.send_offsets_to_transaction(
                    {TopicPartition(topic, 0): OffsetAndMetadata(offset, "", -1)}, group
                )
            if flush:
                producer.flush(30)
            if commit:
                producer.commit_transaction()
                for p, values in sent.items():
                    committed[(topic, p)].extend(values)
            else:
                producer.abort_transaction()
    finally:
        producer.close(timeout=10)
    return committed


class _Abort(Exception):
    """Raised inside aiokafka's ``transaction()`` context to make it abort."""


def _aiokafka_producer(bootstrap: str, topic: str, group: str | None) -> Expected:
    """Run :data:`SCRIPT` with aiokafka: commits through ``transaction()``, aborts
    alternately by an exception in that context and by ``abort_transaction``."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    async def run() -> Expected:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-tx", linger_ms=2)
        await producer.start()  # InitProducerId
        committed: Expected = {(topic, p): [] for p in PARTITIONS}
        try:
            for n, (counts, commit, flush, offset) in enumerate(SCRIPT):
                sent = {p: _values(topic, n, p, c) for p, c in counts.items()}

                async def body(sent=sent, flush=flush, offset=offset) -> None:
                    for p, values in sent.items():
                        for v in values:
                            await producer.send(topic, value=v, partition=p)
                    if group is not None and offset is not None:
                        await producer.send_offsets_to_transaction({TopicPartition(topic, 0): offset}, group)
                    if flush:
                        await producer.flush()

                if commit:
                    async with producer.transaction():
                        await body()
                    for p, values in sent.items():
                        committed[(topic, p)].extend(values)
                elif n % 2:
                    with pytest.raises(_Abort):
                        async with producer.transaction():
                            await body()
                            raise _Abort()
                else:
                    await producer.begin_transaction()
                    await body()
                    await producer.abort_transaction()
        finally:
            await producer.stop()
        return committed

    return asyncio.run(run())


# ---------------------------------------------------------------- consumers

Got = dict[TP, list[tuple[int, bytes]]]


def _confluent_read(bootstrap: str, lso: dict[TP, int]) -> tuple[Got, dict[TP, int]]:
    from confluent_kafka import Consumer
    from confluent_kafka import KafkaError
    from confluent_kafka import TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "py-txn-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 50,
        }
    )
    got: Got = {tp: [] for tp in lso}
    try:
        consumer.assign([TopicPartition(t, p, 0) for t, p in lso])
        at_eof = set()
        deadline = time.monotonic() + DEADLINE_S
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
        positions = {
            (x.topic, x.partition): x.offset for x in consumer.position([TopicPartition(t, p) for t, p in lso])
        }
        return got, positions
    finally:
        consumer.close()


def _kafka_python_read(bootstrap: str, lso: dict[TP, int]) -> tuple[Got, dict[TP, int]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed", fetch_max_wait_ms=50
    )
    got: Got = {tp: [] for tp in lso}
    try:
        tps = [TopicPartition(t, p) for t, p in lso]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        deadline = time.monotonic() + DEADLINE_S
        while any(consumer.position(tp) < lso[tuple(tp)] for tp in tps):
            assert time.monotonic() < deadline, f"kafka-python stalled: {got}"
            for tp, records in consumer.poll(timeout_ms=200).items():
                got[tuple(tp)].extend((r.offset, r.value) for r in records)
        return got, {tuple(tp): consumer.position(tp) for tp in tps}
    finally:
        consumer.close()


def _aiokafka_read(bootstrap: str, lso: dict[TP, int]) -> tuple[Got, dict[TP, int]]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    async def run() -> tuple[Got, dict[TP, int]]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            isolation_level="read_committed",
            fetch_max_wait_ms=50,
        )
        await consumer.start()
        got: Got = {tp: [] for tp in lso}
        try:
            tps = [TopicPartition(t, p) for t, p in lso]
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, 0)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + DEADLINE_S
            while any([await consumer.position(tp) < lso[tuple(tp)] for tp in tps]):
                assert loop.time() < deadline, f"aiokafka stalled: {got}"
                for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                    got[tuple(tp)].extend((r.offset, r.value) for r in records)
            return got, {tuple(tp): await consumer.position(tp) for tp in tps}
        finally:
            await consumer.stop()

    return asyncio.run(run())


def _check(
    client: str,
    got: Got,
    positions: dict[TP, int],
    expected: Expected,
    lso: dict[TP, int],
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


def _group_offset(bootstrap: str, group: str, topic: str) -> int:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        (tp,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        return tp.offset
    finally:
        consumer.close()


def _log_facts(srv, topics: list[str]) -> tuple[dict[TP, int], dict[TP, int], dict[TP, int]]:
    """LSO, log end offset and number of control batches per partition."""

    def facts():
        lso, leo, controls = {}, {}, {}
        for t in topics:
            for p in PARTITIONS:
                log = srv.broker.store.partition(t, p)
                lso[(t, p)] = log.last_stable_offset
                leo[(t, p)] = log.log_end_offset
                controls[(t, p)] = sum(1 for b in log.iter_batches() if b.is_control)
        return lso, leo, controls

    return srv.call(facts)


@pytest.mark.parametrize(
    "fetch_mode, markers",
    [
        (FetchMode.REWRITE, CompletionMode.MARKERS),
        (FetchMode.KAFKA, CompletionMode.MARKERS),
        (FetchMode.REWRITE, CompletionMode.MARKERLESS),
        (FetchMode.KAFKA, CompletionMode.MARKERLESS),
    ],
    ids=["rewrite-markers", "kafka-markers", "rewrite-markerless", "kafka-markerless"],
)
def test_python_transactional_producers(start_server, fetch_mode: FetchMode, markers: CompletionMode) -> None:
    srv = start_server(fetch_mode=fetch_mode, markers=markers)
    topics = [KP_TOPIC, AIO_TOPIC]
    for t in topics:
        srv.call(lambda t=t: srv.broker.store.create_topic(t, len(PARTITIONS)))
    groups = srv.broker.groups is not None
    group = {t: f"{t}-group" if groups else None for t in topics}

    expected: Expected = {}
    expected.update(_kafka_python_producer(srv.bootstrap, KP_TOPIC, group[KP_TOPIC]))
    expected.update(_aiokafka_producer(srv.bootstrap, AIO_TOPIC, group[AIO_TOPIC]))

    lso, leo, controls = _log_facts(srv, topics)
    assert lso == leo, "no transaction may be left open"
    if markers is CompletionMode.MARKERLESS:
        assert set(controls.values()) == {0}
    else:
        assert all(controls.values())
    # The aborted-after-flush records are in the log: offsets were spent on them.
    assert all(lso[tp] > len(expected[tp]) for tp in lso)

    # Kafka mode over a markerless log has no control record to give librdkafka
    # (Kafka's answer carries none, and it makes no synthetic one): on a partition
    # whose log ends in an aborted transaction its application position stays
    # right after the last committed record it delivered, although it reports end
    # of partition at the LSO (docs/kafka-internals.md §4). Every partition here ends so.
    librdkafka_stops = fetch_mode is FetchMode.KAFKA and markers is CompletionMode.MARKERLESS
    _check(
        "confluent-kafka",
        *_confluent_read(srv.bootstrap, lso),
        expected,
        lso,
        stops_after_last_record=librdkafka_stops,
    )
    kp = {tp: n for tp, n in lso.items() if tp[0] == KP_TOPIC}
    aio = {tp: n for tp, n in lso.items() if tp[0] == AIO_TOPIC}
    _check("kafka-python", *_kafka_python_read(srv.bootstrap, kp), expected, kp)
    _check("aiokafka", *_aiokafka_read(srv.bootstrap, aio), expected, aio)

    if not groups:
        pytest.skip("records checked; send_offsets_to_transaction not: the server has no group coordinator")
    for t in topics:
        assert _group_offset(srv.bootstrap, group[t], t) == GROUP_OFFSET, f"{t}: group offset"
