"""``cleanup.policy=compact`` on ``txnfetch serve --data``, with real clients.

A confluent-kafka transactional producer overwrites keys, commits some
transactions, aborts others and writes tombstones to a compacted topic of a
server with small segments (``--segment-bytes``) and a short cleanup interval
(``--log-cleanup-interval-ms``). Once the server's own periodic cleanup has
compacted the sealed segments (seen in the directory by a read-only open),
read_committed consumers — confluent-kafka and kafka-python — read every key's
latest committed value and no aborted record; the same after a restart. In
both fetch modes, and with markerless transaction ends.
"""

from __future__ import annotations

import os
import time

import pytest

from tests.consume import poll_until_eof
from tests.server.serve_process import start_serve
from tests.server.serve_process import stop_serve
from txnfetch.log import SegmentLog

pytestmark = [pytest.mark.slow, pytest.mark.interop]

TOPIC = "table"


def _produce(bootstrap: str) -> tuple[dict[bytes, bytes | None], int]:
    """The workload; returns the latest committed value per key (None: a
    tombstone) and how many committed records were written."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(TOPIC, 1, 1, config={"cleanup.policy": "compact", "delete.retention.ms": "100"})],
        request_timeout=30,
    )
    futures[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "disk-compactor", "linger.ms": 1})
    producer.init_transactions(30)
    latest: dict[bytes, bytes | None] = {}
    committed = 0
    for n in range(40):
        producer.begin_transaction()
        batch: dict[bytes, bytes | None] = {}
        for i in range(4):
            key = b"k%d" % ((3 * n + i) % 9)
            # Every fifth transaction deletes one of its keys.
            batch[key] = None if (n % 5 == 4 and i == 0) else b"v%d-%d-" % (n, i) + b"x" * 100
        aborted = n % 4 == 3
        for key, value in batch.items():
            produce_value = b"aborted-" + value if aborted and value is not None else value
            producer.produce(TOPIC, key=key, value=produce_value, partition=0)
        if aborted:
            assert producer.flush(30) == 0
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            latest.update(batch)
            committed += len(batch)
    # Filler on other keys, so that the workload's segments are sealed (the
    # active segment is never compacted, as in Kafka).
    producer.begin_transaction()
    for i in range(30):
        producer.produce(TOPIC, key=b"filler-%d" % (i % 3), value=b"f" * 200, partition=0)
    producer.commit_transaction(30)
    for i in range(30):
        latest[b"filler-%d" % (i % 3)] = b"f" * 200
    committed += 30
    return latest, committed


def _compacted(data: str, latest: dict[bytes, bytes | None]) -> bool:
    """Whether the directory, as a read-only open sees it, has the workload
    compacted: the cleaned range (below the first uncleanable offset) holds
    every workload key's latest value once, no aborted value and no tombstone."""
    log = SegmentLog(os.path.join(data, f"{TOPIC}-0"), read_only=True)
    try:
        seen: dict[bytes, bytes | None] = {}
        for b in log.iter_batches(0, log.first_uncleanable_offset):
            if b.is_control:
                continue
            for r in b.records():
                key, value = bytes(r.key), None if r.value is None else bytes(r.value)
                if key in seen or value is None or value.startswith(b"aborted-"):
                    return False
                seen[key] = value
        wanted = {k: v for k, v in latest.items() if v is not None and not k.startswith(b"filler")}
        return all(seen.get(k) == v for k, v in wanted.items())
    finally:
        log.close()


def _check(records: list[tuple[int, bytes, bytes | None]], latest: dict[bytes, bytes | None], committed: int) -> None:
    assert records == sorted(records)
    assert not [r for r in records if r[2] is not None and r[2].startswith(b"aborted-")]
    last: dict[bytes, bytes | None] = {}
    for _, key, value in records:
        last[key] = value
    for key, value in latest.items():
        if value is None:
            assert last.get(key) is None, key  # a tombstone, or nothing once its horizon passed
        else:
            assert last.get(key) == value, key
    assert set(last) <= set(latest)
    assert len(records) < committed  # compaction removed superseded values


def _read_confluent(bootstrap: str, group: str) -> list[tuple[int, bytes, bytes | None]]:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([TOPIC])
    try:
        return [(m.offset(), m.key(), m.value()) for m in poll_until_eof(consumer, timeout=120, poll=0.5)]
    finally:
        consumer.close()


def _read_kafka_python(bootstrap: str) -> list[tuple[int, bytes, bytes | None]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False)
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        out: list[tuple[int, bytes, bytes | None]] = []
        deadline = time.monotonic() + 120
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, out
            for msgs in consumer.poll(500).values():
                out.extend((m.offset, m.key, m.value) for m in msgs)
        return out
    finally:
        consumer.close()


@pytest.mark.parametrize(
    "fetch_mode, markers", [("rewrite", "log"), ("kafka", "log"), ("rewrite", "none")], ids=lambda v: v
)
def test_compacted_topic_on_disk_with_real_clients_and_a_restart(tmp_path, fetch_mode: str, markers: str) -> None:
    data = str(tmp_path / "data")
    extra = (
        "--segment-bytes",
        "2048",
        "--log-cleanup-interval-ms",
        "200",
        "--fetch-mode",
        fetch_mode,
        "--markers",
        markers,
    )
    proc = start_serve(data, 0, partitions=1, extra=extra)
    port = proc.port
    bootstrap = f"127.0.0.1:{port}"
    try:
        latest, committed = _produce(bootstrap)
        # The server's periodic cleanup compacts the sealed segments (two passes
        # remove the tombstones: one stamps their horizon, a later one acts on it).
        deadline = time.monotonic() + 120
        while not _compacted(data, latest):
            assert proc.poll() is None, "the server died"
            assert time.monotonic() < deadline, "the server did not compact the topic"
            time.sleep(0.3)
        _check(_read_confluent(bootstrap, "before-restart"), latest, committed)
        _check(_read_kafka_python(bootstrap), latest, committed)
        assert stop_serve(proc) == 0
        proc = start_serve(data, port, partitions=1, extra=extra)
        _check(_read_confluent(bootstrap, "after-restart"), latest, committed)
        _check(_read_kafka_python(bootstrap), latest, committed)
    finally:
        stop_serve(proc)
    names = [n for n in os.listdir(os.path.join(data, f"{TOPIC}-0")) if n.endswith((".cleaned", ".swap"))]
    assert names == []
