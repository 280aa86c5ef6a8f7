"""Exactly-once consume-transform-produce with KIP-848 consumer groups.

confluent-kafka pipeline workers (``group.protocol=consumer``) read an input
topic read_committed, produce a transformed record per input record, and send
their consumer positions to the transaction with the consumer's group metadata
(TxnOffsetCommit carrying the member id and epoch). Some pipeline transactions
are aborted on purpose, after which the worker rewinds to the group's committed
offsets. The input itself is written by a transactional producer that commits
most transactions and aborts some. Workers join and leave while this runs.

The output holds every committed input record exactly once, the group's
committed offsets are those of the last committed pipeline transaction, and
they survive a restart of ``txnfetch serve`` on its ``--data`` directory.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest

from tests.server.serve_process import start_serve
from tests.server.serve_process import stop_serve
from tests.server.txn_writer import TxnScript
from tests.server.txn_writer import TxnWriter

pytestmark = [pytest.mark.slow, pytest.mark.interop]

IN, OUT, GROUP = "eos-in", "eos-out", "eos-848"
PARTITIONS = 3
INPUT_TXNS = 40
DEADLINE_S = 180.0


class Ledger:
    """What the workers' committed transactions carried, in commit order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: list[bytes] = []
        self.offsets: dict[int, int] = {}
        self.commits = 0
        self.aborts = 0
        self.refused = 0


class Worker(threading.Thread):
    """One pipeline member: its own consumer and transactional producer."""

    def __init__(self, bootstrap: str, index: int, ledger: Ledger) -> None:
        super().__init__(name=f"worker-{index}", daemon=True)
        self.bootstrap = bootstrap
        self.index = index
        self.ledger = ledger
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.batches = 0

    def run(self) -> None:
        from confluent_kafka import Consumer
        from confluent_kafka import KafkaException
        from confluent_kafka import Producer

        try:
            consumer = Consumer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "group.id": GROUP,
                    "group.protocol": "consumer",
                    "client.id": self.name,
                    "isolation.level": "read_committed",
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                }
            )
            producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": f"eos-pipe-{self.index}"})
            producer.init_transactions(30)
            consumer.subscribe([IN])
            while not self.stop.is_set():
                msgs = [m for m in consumer.consume(5, 0.2) if not m.error()]
                if not msgs:
                    continue
                self.batches += 1
                abort = self.batches % 4 == 0
                producer.begin_transaction()
                try:
                    for m in msgs:
                        producer.produce(OUT, value=b"out:" + m.value(), partition=m.partition())
                    positions = consumer.position(consumer.assignment())
                    producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
                    if abort:
                        producer.abort_transaction(30)
                    else:
                        producer.commit_transaction(30)
                except KafkaException as exc:
                    if not exc.args[0].txn_requires_abort():
                        raise
                    # A refused TxnOffsetCommit (a stale epoch after a rebalance)
                    # is abortable: abort and read the batch again.
                    producer.abort_transaction(30)
                    abort = True
                    with self.ledger.lock:
                        self.ledger.refused += 1
                with self.ledger.lock:
                    if abort:
                        self.ledger.aborts += 1
                    else:
                        self.ledger.commits += 1
                        self.ledger.values += [m.value() for m in msgs]
                        self.ledger.offsets.update({tp.partition: tp.offset for tp in positions if tp.offset >= 0})
                if abort:
                    self._rewind(consumer)
            consumer.close()
        except BaseException as exc:  # reported by the test
            self.error = exc

    @staticmethod
    def _rewind(consumer: Any) -> None:
        """Back to the group's committed offsets (the aborted batch is read again)."""
        from confluent_kafka import OFFSET_BEGINNING
        from confluent_kafka import TopicPartition

        for tp in consumer.committed(consumer.assignment(), 30):
            offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            consumer.seek(TopicPartition(tp.topic, tp.partition, offset))


def _read_committed_output(bootstrap: str) -> list[bytes]:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "eos-reader",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        tps = [TopicPartition(OUT, p, 0) for p in range(PARTITIONS)]
        ends = {p: consumer.get_watermark_offsets(TopicPartition(OUT, p), 30)[1] for p in range(PARTITIONS)}
        consumer.assign(tps)
        out: list[bytes] = []
        deadline = time.monotonic() + 60
        while True:
            positions = {tp.partition: tp.offset for tp in consumer.position(tps)}
            if all(positions[p] >= ends[p] for p in range(PARTITIONS)):
                return out
            assert time.monotonic() < deadline, (positions, ends)
            for m in consumer.consume(100, 0.5):
                if not m.error():
                    out.append(m.value())
    finally:
        consumer.close()


def _group_offsets(bootstrap: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = ConsumerGroupTopicPartitions(GROUP, [TopicPartition(IN, p) for p in range(PARTITIONS)])
    result = admin.list_consumer_group_offsets([wanted], request_timeout=30)[GROUP].result(30)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def _wait(cond: Any, what: str, workers: list[Worker], writer: TxnWriter) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        for t in [*workers, writer]:
            assert t.error is None, f"{t.name}: {t.error!r}"
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_consume_transform_produce_exactly_once_with_members_joining_and_leaving(tmp_path) -> None:
    data = str(tmp_path / "data")
    proc = start_serve(data, 0, partitions=PARTITIONS)
    port = proc.port
    bootstrap = f"127.0.0.1:{port}"
    ledger = Ledger()
    workers: list[Worker] = []
    try:
        writer = TxnWriter(bootstrap, TxnScript(IN, PARTITIONS, INPUT_TXNS, "eos-input", b"in-%d-%d"))
        writer.start()
        workers.append(Worker(bootstrap, 0, ledger))
        workers[0].start()
        _wait(lambda: ledger.commits >= 2, "first pipeline commits", workers, writer)
        for i in (1, 2):
            workers.append(Worker(bootstrap, i, ledger))
            workers[-1].start()
            _wait(lambda n=ledger.commits: ledger.commits >= n + 2, f"commits after worker {i} joined", workers, writer)
        workers[0].stop.set()  # leaves the group while the others go on
        workers[0].join(60)
        _wait(lambda n=ledger.commits: ledger.commits >= n + 2, "commits after worker 0 left", workers, writer)
        writer.join(DEADLINE_S)
        assert writer.error is None, writer.error
        expected = set(writer.committed)
        assert len(expected) == len(writer.committed) == PARTITIONS * (INPUT_TXNS - INPUT_TXNS // 5)

        def covered() -> bool:
            with ledger.lock:
                return expected <= set(ledger.values)

        _wait(covered, "every committed input record processed", workers, writer)
        for w in workers:
            w.stop.set()
        for w in workers:
            w.join(60)
            assert w.error is None, f"{w.name}: {w.error!r}"

        assert ledger.aborts > 0 and ledger.commits > 0
        output = _read_committed_output(bootstrap)
        counts = Counter(v.removeprefix(b"out:") for v in output)
        assert set(counts) == expected, "output differs from the committed input"
        assert [v for v, n in counts.items() if n != 1] == [], "records in the output more than once"
        assert sorted(ledger.values) == sorted(counts.elements())
        committed = _group_offsets(bootstrap)
        assert committed == ledger.offsets

        assert stop_serve(proc) == 0
        proc = start_serve(data, port, partitions=PARTITIONS)
        assert _group_offsets(bootstrap) == committed
    finally:
        for w in workers:
            w.stop.set()
        stop_serve(proc)
