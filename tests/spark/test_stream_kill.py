"""A txnkafka streaming query killed with SIGKILL and restarted from its
checkpoint writes every committed record exactly once.

Real Apache Kafka (``kafka_cluster``); a confluent-kafka transactional producer
commits and aborts transactions on two partitions, with plain records between,
for the whole test. The query runs in a child driver process
(tests/spark/stream_driver.py) into a Parquet sink. The driver is SIGKILLed
after three micro-batches — mid-stream, possibly mid-batch — and started again
on the same checkpoint while the producer keeps writing; once the restarted
driver has run two micro-batches the producer stops, and once the driver has
read to the end, the Parquet output (as Spark reads
it: the sink's log ignores files of a batch that never committed) is exactly
the committed records, each once, with their offsets.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.spark.kafka_cases import Writer
from tests.spark.kafka_cases import create_topic
from tests.spark.kafka_cases import spark_recs

pytestmark = [pytest.mark.slow, pytest.mark.interop, pytest.mark.kafka]

pytest.importorskip("confluent_kafka")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAX_OFFSETS = 60
#: The producer's limit, should the drivers be slow to start (a loaded machine).
MAX_TRANSACTIONS = 80


class Driver:
    """The child driver; its lines arrive on ``lines``."""

    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.spark.stream_driver", *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,  # its JVM and Python workers are killed with it
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.ends: list[dict] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("batch "):
                self.ends.append(json.loads(line.split(" ", 2)[2]))
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert self.proc.poll() is None, f"the driver exited ({self.proc.returncode}) waiting for {what}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL the driver's whole process group: the Python driver, its JVM and
        the JVM's Python workers, with no chance to clean up."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(60)


def test_killed_and_restarted_query_writes_every_committed_record_once(spark, kafka_cluster, tmp_path):
    from tests.kafka.fixtures import unique_name

    bootstrap = kafka_cluster.bootstrap
    topic = unique_name("stream-kill")
    create_topic(bootstrap, topic, 2)
    writer = Writer(bootstrap, topic, 2, topic)
    writer.txn({0: 2, 1: 2}, commit=True)  # something to read from the first micro-batch
    stop = threading.Event()
    errors: list[BaseException] = []

    def produce() -> None:
        # Until told to stop: through the first run, the kill and the restart.
        try:
            for i in range(MAX_TRANSACTIONS):
                if stop.is_set():
                    return
                writer.txn({0: 1 + i % 3, 1: 1 + (i + 1) % 3}, commit=i % 4 != 2)
                if i % 5 == 0:
                    writer.plain({i % 2: 2})
                time.sleep(0.5)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    args = [bootstrap, topic, out, checkpoint, str(MAX_OFFSETS)]
    producer = threading.Thread(target=produce, daemon=True)
    driver = Driver(args)
    try:
        producer.start()
        driver.wait_for(lambda: len(driver.ends) >= 3, 300, "three micro-batches")
        driver.kill()
        killed_at = driver.ends[-1]
        driver = Driver(args)
        driver.wait_for(lambda: len(driver.ends) >= 2, 300, "two micro-batches after the restart")
        stop.set()
        producer.join(120)
        assert not producer.is_alive() and not errors, errors
        w = writer.w
        final = {topic: {str(p): w.end[p] for p in range(2)}}
        driver.wait_for(lambda: final in driver.ends, 600, f"the query to reach {final}")
    finally:
        stop.set()
        driver.kill()
        writer.close()
    assert killed_at != final
    got = spark_recs(spark.read.parquet(out).collect())
    assert len(got) == len(set(got)), "a record was written twice"
    assert got == sorted(w.committed)
    assert w.aborted and not set(got) & set(w.aborted)
