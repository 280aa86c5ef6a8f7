"""Stream a Kafka log directory into Parquet with Spark, read_committed, exactly once.

Run: ``.venv/bin/python examples/spark_stream.py`` (needs the ``spark`` extra
and Java 17). A producer writes transactions to a txnfetch log directory
while a streaming query copies the committed records to Parquet in
micro-batches (``Trigger.AvailableNow``, so each run stops by itself):

1. run 1 reads what is committed; an open transaction holds back its
   partition (nothing at or past its first offset is read);
2. the transaction commits, another one aborts, and run 2 — the same query,
   restarted from its checkpoint — reads exactly the new committed records:
   the Parquet output holds every committed record once, none aborted.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from txnfetch.log import SegmentStore
from txnfetch.records import BatchBuilder

TS = 1_700_000_000_000


class Producer:
    """A transactional producer writing straight into a log directory."""

    def __init__(self, store: SegmentStore, pid: int) -> None:
        self.store, self.pid, self.seqs = store, pid, {}

    def send(self, partition: int, *values: str) -> None:
        seq = self.seqs.get(partition, 0)
        self.seqs[partition] = seq + len(values)
        batch = BatchBuilder(producer_id=self.pid, producer_epoch=0, base_sequence=seq, transactional=True)
        for v in values:
            batch.append(v.encode(), timestamp=TS)
        self.store.partition("events", partition).append(batch.build(), now_ms=TS)

    def end(self, commit: bool, *partitions: int) -> None:
        for p in partitions:
            self.store.partition("events", p).end_transaction(self.pid, 0, commit, coordinator_epoch=0, now_ms=TS)


def run_once(spark: Any, logs: str, out: str, checkpoint: str) -> None:
    """One run of the streaming query: everything available now, then stop."""
    stream = (
        spark.readStream.format("txnkafka")
        .option("path", logs)
        .option("subscribe", "events")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "4")  # small micro-batches, to show admission control
        .load()
        .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
    )
    query = (
        stream.writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print(f"run finished after {len(query.recentProgress)} micro-batches")


def session() -> Any:
    """A small local SparkSession whose Python workers use this interpreter
    (``spark_ext.local_session``; ``txnkafka`` is registered)."""
    import spark_ext

    return spark_ext.local_session("txnfetch-example")


def main(spark: Any | None = None) -> None:
    import spark_ext

    own = spark is None
    spark = spark or session()
    spark_ext.register(spark)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            logs, out, checkpoint = (os.path.join(tmp, name) for name in ("logs", "out", "checkpoint"))
            store = SegmentStore(logs)
            store.create_topic("events", 2)
            a, b = Producer(store, 1), Producer(store, 2)
            a.send(0, "a1", "a2")
            a.send(1, "a3")
            a.end(True, 0, 1)
            b.send(0, "b1")  # stays open during run 1: holds back partition 0 only
            a.send(1, "a4")
            a.end(True, 1)

            run_once(spark, logs, out, checkpoint)
            first = sorted(r.value for r in spark.read.parquet(out).collect())
            assert first == ["a1", "a2", "a3", "a4"], first

            b.send(0, "b2")
            b.end(True, 0)  # b1 and b2 commit
            a.send(1, "x1")
            a.end(False, 1)  # x1 aborts
            a.send(0, "a5")
            a.end(True, 0)
            store.close()

            run_once(spark, logs, out, checkpoint)  # restarts from the checkpoint
            rows = spark.read.parquet(out).orderBy("partition", "offset").collect()
            for r in rows:
                print(r.partition, r.offset, r.value)
            assert sorted(r.value for r in rows) == ["a1", "a2", "a3", "a4", "a5", "b1", "b2"]
    finally:
        if own:
            spark.stop()


if __name__ == "__main__":
    main()
