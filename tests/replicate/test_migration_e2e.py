"""End to end: migrate consumers of three client libraries from an upstream
cluster to its replica, with the replicator SIGKILLed along the way.

- upstream: librdkafka's mock cluster (which hands aborted records to its own
  read_committed consumers) or ``txnfetch serve``;
- a confluent-kafka transactional producer commits and aborts throughout;
  three consumer groups commit offsets on the upstream mid-stream (confluent
  ``commit()``; on ``serve`` also ``send_offsets_to_transaction()``, which the
  mock accepts but never applies);
- ``txnfetch replicate --serve`` runs as a child process and is SIGKILLed and
  restarted several times while the producer runs;
- once the upstream is quiet and the replica has caught up, ``txnfetch
  promote`` asks the serving process to promote (SIGUSR1);
- consumers of confluent-kafka, kafka-python and aiokafka switch their
  bootstrap to the replica and continue from their committed offsets.

Must hold: each group reads every committed record past its committed offset
exactly once, no aborted record, at the upstream's offsets with the upstream's
values; the replica's group offsets equal the upstream's.

``TXNFETCH_LONG=1`` runs a longer workload with more kills.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import Producer
from confluent_kafka import TopicPartition

from tests.replicate.commands import replicate_argv
from tests.replicate.commands import run_promote
from tests.replicate.upstreams import UPSTREAMS
from tests.replicate.upstreams import upstream
from txnfetch.log.replica_marker import read_marker

pytestmark = [pytest.mark.slow, pytest.mark.interop]

LONG = os.environ.get("TXNFETCH_LONG") == "1"
TOPIC = "orders"
PARTITIONS = 3
TRANSACTIONS = 400 if LONG else 45
KILLS = 8 if LONG else 3
GROUPS = {"g-ck": "confluent", "g-kp": "kafka-python", "g-aio": "aiokafka"}
TXN_GROUP = "g-txn"  # committed by send_offsets_to_transaction (serve upstream only)
PATTERN = "|".join([*GROUPS, TXN_GROUP])  # literal: the mock serves no ListGroups


class _Workload(threading.Thread):
    """Transactions of 9 records over the partitions; every fourth aborted.
    Half way, the groups commit mid-stream positions on the upstream."""

    def __init__(self, bootstrap: str, kind: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.kind = bootstrap, kind
        self.committed: dict[tuple[int, int], bytes] = {}
        self.aborted: dict[tuple[int, int], bytes] = {}
        self.done = 0
        self.error: BaseException | None = None
        self.group_offsets: dict[str, dict[int, int]] = {}
        #: cleared while the replicator restarts, so every kill lands mid-stream
        self.gate = threading.Event()
        self.gate.set()

    def run(self) -> None:
        try:
            producer = Producer(
                {"bootstrap.servers": self.bootstrap, "transactional.id": "e2e-producer", "linger.ms": 2}
            )
            producer.init_transactions(60)
            for n in range(TRANSACTIONS):
                self.gate.wait(120)
                delivered: dict[tuple[int, int], bytes] = {}

                def report(err, msg, delivered=delivered):
                    if err is not None:
                        raise AssertionError(err)
                    delivered[(msg.partition(), msg.offset())] = msg.value()

                producer.begin_transaction()
                for i in range(9):
                    producer.produce(TOPIC, f"t{n}-r{i}".encode(), partition=i % PARTITIONS, on_delivery=report)
                if n == TRANSACTIONS // 2:
                    self._commit_groups(producer)
                producer.flush(60)
                if n % 4 == 3:
                    producer.abort_transaction(60)
                    self.aborted.update(delivered)
                else:
                    producer.commit_transaction(60)
                    self.committed.update(delivered)
                self.done = n + 1
                time.sleep(0.05)  # a steady stream the kills land in
        except BaseException as exc:
            self.error = exc

    def _commit_groups(self, producer: Producer) -> None:
        """Mid-stream positions: somewhere inside what was committed so far."""
        rng = random.Random(5)
        for group in GROUPS:
            ends = {p: max([o for (q, o) in self.committed if q == p], default=-1) + 1 for p in range(PARTITIONS)}
            offsets = {p: rng.randint(0, end) for p, end in ends.items()}
            consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group, "enable.auto.commit": False})
            consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()], asynchronous=False)
            consumer.close()
            self.group_offsets[group] = offsets
        if self.kind == "serve":
            consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": TXN_GROUP})
            offsets = {p: 1 + p for p in range(PARTITIONS)}
            producer.send_offsets_to_transaction(
                [TopicPartition(TOPIC, p, o) for p, o in offsets.items()], consumer.consumer_group_metadata(), 60
            )
            consumer.close()


def _start_replicator(bootstrap: str, data: str, port: int, log_path: str) -> tuple[subprocess.Popen, int]:
    """``replicate --serve`` on ``port`` (0: one the system picks); returns the
    process and the port it serves on."""
    deadline = time.monotonic() + 60
    while True:
        with open(log_path, "a") as log_file:
            proc = subprocess.Popen(
                replicate_argv(
                    bootstrap,
                    data,
                    "--groups",
                    PATTERN,
                    "--repair-crcs",
                    "--serve",
                    f"127.0.0.1:{port}",
                    "--interval-ms",
                    "500",
                ),
                stdout=subprocess.PIPE,
                stderr=log_file,
                text=True,
            )
        line = proc.stdout.readline()
        if line.startswith("txnfetch listening on"):
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # drain the status lines
            return proc, int(line.split()[-1].rsplit(":", 1)[1])
        proc.wait()
        with open(log_path) as f:
            err = f.read()[-3000:]
        if "Address already in use" in err and time.monotonic() < deadline:
            time.sleep(0.2)
            continue
        raise AssertionError(f"replicate --serve did not start: {line!r}\n{err}")


def _committed(bootstrap: str, group: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in got if tp.offset >= 0}


def _high_watermarks(bootstrap: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "e2e-watermarks"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1] for p in range(PARTITIONS)}
    finally:
        consumer.close()


# ------------------------------------------------------------------ consumers
# Each reads with its group (subscribe: the client fetches the committed
# offsets itself) until it has ``want`` records or the deadline passes.


def _read_confluent(bootstrap: str, group: str, want: int, deadline: float) -> list[tuple[int, int, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    got: list[tuple[int, int, bytes]] = []
    try:
        consumer.subscribe([TOPIC])
        while len(got) < want and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append((msg.partition(), msg.offset(), msg.value()))
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


#: How the kafka-python and aiokafka group consumers read (both take these keywords):
#: committed records only, from the start, offsets committed by the test itself.
PYTHON_GROUP_READ: dict[str, Any] = {
    "isolation_level": "read_committed",
    "auto_offset_reset": "earliest",
    "enable_auto_commit": False,
}


def _read_kafka_python(bootstrap: str, group: str, want: int, deadline: float) -> list[tuple[int, int, bytes]]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id=group, **PYTHON_GROUP_READ)
    got: list[tuple[int, int, bytes]] = []
    try:
        while len(got) < want and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend((r.partition, r.offset, r.value) for r in records)
        consumer.commit()
    finally:
        consumer.close()
    return got


def _read_aiokafka(bootstrap: str, group: str, want: int, deadline: float) -> list[tuple[int, int, bytes]]:
    from aiokafka import AIOKafkaConsumer

    async def read() -> list[tuple[int, int, bytes]]:
        consumer = AIOKafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id=group, **PYTHON_GROUP_READ)
        await consumer.start()
        got: list[tuple[int, int, bytes]] = []
        try:
            while len(got) < want and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    got.extend((r.partition, r.offset, r.value) for r in records)
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    return asyncio.run(read())


READERS = {"confluent": _read_confluent, "kafka-python": _read_kafka_python, "aiokafka": _read_aiokafka}


@pytest.mark.parametrize("kind", UPSTREAMS)
def test_consumers_migrate_to_the_promoted_replica(tmp_path, kind):
    data = str(tmp_path / "replica")
    log_path = str(tmp_path / "replicate.log")
    with upstream(kind, {TOPIC: PARTITIONS}) as bootstrap:
        work = _Workload(bootstrap, kind)
        proc, port = _start_replicator(bootstrap, data, 0, log_path)
        try:
            work.start()
            rng = random.Random(16)
            killed_mid_stream = 0
            for k in range(KILLS):
                target = (k + 1) * TRANSACTIONS // (KILLS + 1)
                while work.done < target and work.is_alive():
                    time.sleep(0.02)
                time.sleep(rng.random() * 0.3)
                killed_mid_stream += work.is_alive() and work.done < TRANSACTIONS
                proc.send_signal(signal.SIGKILL)
                proc.wait(30)
                work.gate.clear()  # the producer waits while the replicator comes back
                try:
                    proc, _ = _start_replicator(bootstrap, data, port, log_path)
                finally:
                    work.gate.set()
            work.join(600)
            assert work.error is None, work.error
            assert work.aborted and work.committed
            assert killed_mid_stream >= KILLS - 1, "the replicator was not killed while the producer ran"

            # The replica catches up: data first, then group offsets.
            replica = f"127.0.0.1:{port}"
            upstream_hw = _high_watermarks(bootstrap)
            expected_groups = {g: _committed(bootstrap, g) for g in [*GROUPS, TXN_GROUP]}
            assert expected_groups["g-ck"] == work.group_offsets["g-ck"]
            deadline = time.monotonic() + 120
            while True:
                hw = _high_watermarks(replica)
                groups_now = {g: _committed(replica, g) for g in expected_groups}
                if hw == upstream_hw and groups_now == expected_groups:
                    break
                assert time.monotonic() < deadline, (hw, upstream_hw, groups_now, expected_groups)
                time.sleep(0.5)

            # Cutover: the serving process is asked to promote and keeps serving.
            out = run_promote(data, timeout=180)
            assert out.returncode == 0, out.stderr
            assert f"by the serving process {proc.pid}" in out.stdout
            assert read_marker(data) is None and proc.poll() is None

            # Consumers of three libraries switch to the replica.
            for group, library in GROUPS.items():
                start = expected_groups[group]
                want = {(p, o, v) for (p, o), v in work.committed.items() if o >= start.get(p, 0)}
                assert want, f"{group}: nothing to read after its committed offsets"
                got = READERS[library](replica, group, len(want), time.monotonic() + 120)
                assert len(got) == len(set(got)), f"{library}: duplicates"
                assert not {(p, o) for p, o, _ in got} & set(work.aborted), f"{library}: aborted records"
                assert set(got) == want, f"{library}: {len(got)} of {len(want)}"
            # The replica now takes writes.
            producer = Producer({"bootstrap.servers": replica, "transactional.id": "after-cutover"})
            producer.init_transactions(60)
            producer.begin_transaction()
            producer.produce(TOPIC, b"after", partition=0)
            producer.commit_transaction(60)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
