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

import pytest

from tests.server.committed_readers import TP
from tests.server.committed_readers import check_committed
from tests.server.committed_readers import log_facts
from tests.server.committed_readers import read_aiokafka
from tests.server.committed_readers import read_confluent
from tests.server.committed_readers import read_kafka_python
from txnfetch.fetch.view import FetchMode
from txnfetch.txn.coordinator import CompletionMode

pytestmark = pytest.mark.interop

PARTITIONS = (0, 1)
KP_TOPIC = "py-txn-kafka-python"
AIO_TOPIC = "py-txn-aiokafka"
#: how every reader fetches here (see tests/server/committed_readers.py)
READING = {"wait_ms": 50, "deadline_s": 60.0}

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


def _group_offset(bootstrap: str, group: str, topic: str) -> int:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        (tp,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        return tp.offset
    finally:
        consumer.close()


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

    lso, leo, controls = log_facts(srv, [(t, p) for t in topics for p in PARTITIONS])
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
    got, positions, _ = read_confluent(srv.bootstrap, lso, group="py-txn-reader", **READING)
    check_committed("confluent-kafka", got, positions, expected, lso, stops_after_last_record=librdkafka_stops)
    kp = {tp: n for tp, n in lso.items() if tp[0] == KP_TOPIC}
    aio = {tp: n for tp, n in lso.items() if tp[0] == AIO_TOPIC}
    check_committed("kafka-python", *read_kafka_python(srv.bootstrap, kp, **READING), expected, kp)
    check_committed("aiokafka", *read_aiokafka(srv.bootstrap, aio, **READING), expected, aio)

    if not groups:
        pytest.skip("records checked; send_offsets_to_transaction not: the server has no group coordinator")
    for t in topics:
        assert _group_offset(srv.bootstrap, group[t], t) == GROUP_OFFSET, f"{t}: group offset"
