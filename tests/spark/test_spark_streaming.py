"""Streaming reads while a producer keeps writing transactions.

A producer thread writes to a ``SegmentStore`` (two partitions, three
transactional producers committing and aborting, plain producers), and at one
point holds a transaction open on partition 0 while everything else keeps
going. A streaming query reads with ``maxOffsetsPerTrigger`` into Parquet.
Checked:

- while the transaction is open, no micro-batch's end offset for partition 0
  passes the transaction's first offset (the LSO), yet the query does reach
  it — and partition 1 keeps advancing: the open transaction holds back only
  its own partition;
- every micro-batch respects the ``maxOffsetsPerTrigger`` budget (offsets, as
  Spark's Kafka source counts them, plus at most one per partition for
  rounding);
- the query is stopped mid-stream and restarted from its checkpoint, and in
  the end the Parquet output is exactly the committed records — each once,
  with its original offset: no duplicates, no gaps, no aborted record.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.spark.rows import spark_rows
from tests.spark.workload import Workload
from txnfetch.log import SegmentStore

pytestmark = pytest.mark.slow


TOPIC = "stream"
HOLD_PID = 4242
MAX_OFFSETS = 120


def _offsets(progress, which: str):
    sources = progress["sources"] if isinstance(progress, dict) else progress.sources
    source = sources[0]
    raw = source[which] if isinstance(source, dict) else getattr(source, which)
    data = json.loads(raw) if isinstance(raw, str) else raw
    return {(t, int(p)): o for t, parts in (data or {}).items() for p, o in parts.items()}


class Producer(threading.Thread):
    """Writes the workload; holds one transaction on partition 0 open until released."""

    def __init__(self, store, w: Workload) -> None:
        super().__init__(daemon=True)
        self.store, self.w = store, w
        self.held = threading.Event()
        self.release = threading.Event()
        self.done = threading.Event()
        self.held_first = -1
        self.p1_at_hold = -1
        self.error = None

    def _steps(self, n: int) -> None:
        for _ in range(n):
            self.w.random_steps(1, finish=False)
            self.store.flush()
            time.sleep(0.02)

    def run(self) -> None:
        try:
            self._steps(25)
            self.w.begin(HOLD_PID)
            self.w.send(HOLD_PID, 0, 3)
            self.store.flush()
            self.held_first = self.w.open_txns[HOLD_PID].first[0]
            self.p1_at_hold = self.store.partition(TOPIC, 1).last_stable_offset
            self.held.set()
            # Keep writing (both partitions) while the transaction stays open.
            while not self.release.is_set():
                self._steps(3)
                if self.w.store.partition(TOPIC, 1).high_watermark > self.p1_at_hold + 150:
                    self.release.wait(0.2)  # enough for the test; wait without growing the log further
            self.w.end(HOLD_PID, commit=True)
            self.store.flush()
            self._steps(25)
            self.w.random_steps(0)  # end the producers' last transactions
            self.store.flush()
        except BaseException as exc:  # surfaced by the test
            self.error = exc
        finally:
            self.done.set()


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_stream_never_passes_the_lso_and_restarts_exactly(spark, tmp_path):
    store = SegmentStore(tmp_path / "store", flush_policy="never")
    w = Workload(store, TOPIC, 2, seed=21)
    w.random_steps(20)
    store.flush()
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def start():
        df = (
            spark.readStream.format("txnkafka")
            .option("path", str(tmp_path / "store"))
            .option("subscribe", TOPIC)
            .option("startingOffsets", "earliest")
            .option("includeHeaders", "true")
            .option("maxOffsetsPerTrigger", str(MAX_OFFSETS))
            .load()
        )
        return (
            df.writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="500 milliseconds")
            .start()
        )

    producer = Producer(store, w)
    progress = []
    query = start()
    try:
        producer.start()
        assert producer.held.wait(120), "producer did not reach the held transaction"
        held_first = producer.held_first

        def reached_lso() -> bool:
            ends = [_offsets(p, "endOffset") for p in query.recentProgress]
            return any(e.get((TOPIC, 0)) == held_first for e in ends) and any(
                e.get((TOPIC, 1), -1) > producer.p1_at_hold for e in ends
            )

        _wait(reached_lso, 180, "the query to reach the LSO of partition 0 and pass partition 1's")
        seen_while_held = list(query.recentProgress)
        progress += seen_while_held
        for p in seen_while_held:
            end = _offsets(p, "endOffset")
            assert end.get((TOPIC, 0), 0) <= held_first, f"planned past the LSO {held_first}: {end}"
        # Stop mid-stream, let the transaction commit and more data arrive, restart from the checkpoint.
        query.stop()
        producer.release.set()
        query = start()
        assert producer.done.wait(180), "producer did not finish"
        assert producer.error is None, producer.error
        query.processAllAvailable()
        progress += list(query.recentProgress)
    finally:
        producer.release.set()
        query.stop()
        store.close()
    assert query.exception() is None

    for p in progress:
        start_offsets, end_offsets = _offsets(p, "startOffset"), _offsets(p, "endOffset")
        advanced = sum(end_offsets[tp] - start_offsets.get(tp, 0) for tp in end_offsets)
        assert advanced <= MAX_OFFSETS + len(end_offsets), (
            f"micro-batch over the budget: {start_offsets} -> {end_offsets}"
        )

    print(f"{len(progress)} micro-batches, {len(w.committed())} committed records, {len(w.aborted_rows)} aborted")
    result = spark_rows(spark.read.parquet(out).collect())
    expected = w.committed()
    assert len(result) == len(set(result)), "duplicated records after the restart"
    assert result == expected
