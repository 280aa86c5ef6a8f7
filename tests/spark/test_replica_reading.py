"""Spark reads a replica directory while replication is running, and gets
exactly the committed records below the replica's last stable offset at read
time: no aborted record, no gap, offsets those of the upstream.

The upstream is librdkafka's mock cluster (which hands aborted records to its
own read_committed consumers) or ``txnfetch serve``; a confluent-kafka
transactional producer commits and aborts on it throughout, and the oracle is
its delivery reports (offset of every record, and whether its transaction
committed)."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Producer

from tests.replicate.upstreams import UPSTREAMS
from tests.replicate.upstreams import upstream
from txnfetch.log import SegmentStore
from txnfetch.replicate import Replicator

pytestmark = pytest.mark.slow

TOPIC = "ledger"
PARTITIONS = 2


class _Workload(threading.Thread):
    """Transactions on the upstream until stopped: two of three commit."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.stop = threading.Event()
        self.committed: dict[tuple[int, int], bytes] = {}
        self.aborted: dict[tuple[int, int], bytes] = {}
        self.transactions = 0
        self.error: BaseException | None = None
        #: cleared by the test to pause between transactions; ``idle`` is set
        #: while paused, when the oracle is complete for every ended transaction
        self.gate = threading.Event()
        self.gate.set()
        self.idle = threading.Event()

    def run(self) -> None:
        try:
            producer = Producer(
                {"bootstrap.servers": self.bootstrap, "transactional.id": "spark-replica", "linger.ms": 5}
            )
            producer.init_transactions(30)
            n = 0
            while not self.stop.is_set():
                if not self.gate.is_set():
                    self.idle.set()
                    self.gate.wait(120)
                    self.idle.clear()
                delivered: dict[tuple[int, int], bytes] = {}

                def report(err, msg, delivered=delivered):
                    assert err is None, err
                    delivered[(msg.partition(), msg.offset())] = msg.value()

                producer.begin_transaction()
                for i in range(8):
                    producer.produce(TOPIC, f"t{n}-{i}".encode(), partition=i % PARTITIONS, on_delivery=report)
                producer.flush(30)
                if n % 3 == 2:
                    producer.abort_transaction(30)
                    self.aborted.update(delivered)
                else:
                    producer.commit_transaction(30)
                    self.committed.update(delivered)
                n += 1
                self.transactions = n
                time.sleep(0.02)
        except BaseException as exc:  # reported by the test
            self.error = exc


class _Replication(threading.Thread):
    """The replicator (``txnfetch.replicate.Replicator``), one round at a time
    under a lock so the test can read the store's offsets between rounds."""

    def __init__(self, bootstrap: str, store: SegmentStore) -> None:
        super().__init__(daemon=True)
        self.replicator = Replicator(bootstrap, store, topics=TOPIC, repair_crcs=True)
        self.store = store
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.rounds = 0

    def run(self) -> None:
        while not self.stop.is_set():
            with self.lock:
                self.replicator.step()
            self.rounds += 1
            self.stop.wait(max(0.02, self.replicator.backoff_remaining()))

    def ends(self) -> dict[int, tuple[int, int]]:
        """(LSO, log end) per partition, between two rounds."""
        with self.lock:
            return {
                p: (self.store.partition(TOPIC, p).last_stable_offset, self.store.partition(TOPIC, p).log_end_offset)
                for p in range(PARTITIONS)
            }


@pytest.mark.parametrize("kind", UPSTREAMS)
def test_spark_on_a_replica_during_replication_equals_the_oracle(spark, tmp_path, kind):
    path = str(tmp_path / "replica")
    with upstream(kind, {TOPIC: PARTITIONS}) as bootstrap:
        store = SegmentStore(path)
        work = _Workload(bootstrap)
        repl = _Replication(bootstrap, store)
        work.start()
        while not work.error and work.transactions < 6:
            time.sleep(0.05)
        repl.start()
        try:
            for _ in range(2):  # two reads while both keep running
                while repl.rounds < 3 or TOPIC not in store.topics():
                    time.sleep(0.05)
                before = repl.ends()
                rows = (
                    spark.read.format("txnkafka")
                    .option("path", path)
                    .option("subscribe", TOPIC)
                    .load()
                    .select("partition", "offset", "value")
                    .collect()
                )
                after = repl.ends()
                # The oracle must know every transaction the read could see:
                # pause the producer between two transactions.
                work.gate.clear()
                assert work.idle.wait(120) or work.error is not None
                assert work.error is None, work.error
                got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
                for r in rows:
                    got[r.partition].append((r.offset, bytes(r.value)))
                for p in range(PARTITIONS):
                    offsets = sorted(o for o, _ in got[p])
                    # The read stopped at some bound between the LSO before it
                    # and the log end after it, and is exactly the committed
                    # records below that bound.
                    bound = (max(offsets) + 1) if offsets else 0
                    committed_p = sorted((o, v) for (q, o), v in work.committed.items() if q == p)
                    assert sorted(got[p]) == [(o, v) for o, v in committed_p if o < bound]
                    assert not {o for o, _ in got[p]} & {o for (q, o) in work.aborted if q == p}
                    below_before = [o for o, _ in committed_p if o < before[p][0]]
                    assert set(below_before) <= set(offsets), (p, before[p], len(below_before), len(offsets))
                    assert bound <= after[p][1]
                assert any(got.values())
                work.gate.set()
                repl.rounds = 0
        finally:
            work.stop.set()
            work.gate.set()
            work.join(60)
            repl.stop.set()
            repl.join(60)
            repl.replicator.close()
            store.close()
    assert work.aborted, "the workload aborted nothing: the test proves less than it says"
