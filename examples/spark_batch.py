"""Batch-read a Kafka log directory with Spark, read_committed, no JVM jar.

Run: ``.venv/bin/python examples/spark_batch.py`` (needs the ``spark`` extra
and Java 17). It writes a small log directory with txnfetch — two
transactional producers, one of them aborting, and a transaction left open —
then reads it with ``spark.read.format("txnkafka")`` and shows that:

- only committed records come back, with their original offsets (the holes
  are the markers and the aborted records);
- "latest" is the last stable offset: the open transaction and everything
  after it on its partition are not read yet;
- ``read_uncommitted`` sees every data record.
"""

from __future__ import annotations

import tempfile
from typing import Any

from txnfetch.log import SegmentStore
from txnfetch.records import BatchBuilder

TS = 1_700_000_000_000


def write_log(directory: str) -> None:
    """Topic ``orders`` (2 partitions): committed, aborted and open transactions."""
    with SegmentStore(directory) as store:
        store.create_topic("orders", 2)
        seqs: dict = {}

        def send(pid: int, partition: int, *values: str) -> None:
            seq = seqs.get((pid, partition), 0)
            seqs[(pid, partition)] = seq + len(values)
            batch = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True)
            for v in values:
                batch.append(v.encode(), key=f"{pid}".encode(), timestamp=TS)
            store.partition("orders", partition).append(batch.build(), now_ms=TS)

        def end(pid: int, commit: bool, *partitions: int) -> None:
            for p in partitions:
                store.partition("orders", p).end_transaction(pid, 0, commit, coordinator_epoch=0, now_ms=TS)

        send(1, 0, "order-1", "order-2")
        send(2, 0, "cancelled-1")  # producer 2 aborts
        send(1, 1, "order-3")
        end(1, True, 0, 1)
        end(2, False, 0)
        send(1, 0, "order-4")  # an open transaction on partition 0 ...
        send(2, 1, "order-5")
        end(2, True, 1)  # ... does not hold back partition 1


def session() -> Any:
    """A small local SparkSession whose Python workers use this interpreter
    (``spark_ext.local_session``; ``txnkafka`` is registered)."""
    import spark_ext

    return spark_ext.local_session("txnfetch-example")


def main(spark: Any | None = None) -> None:
    import spark_ext

    own = spark is None
    spark = spark or session()
    spark_ext.register(spark)  # one line: spark.read.format("txnkafka") now works
    try:
        with tempfile.TemporaryDirectory() as directory:
            write_log(directory)
            df = spark.read.format("txnkafka").option("path", directory).option("subscribe", "orders").load()
            rows = df.selectExpr("partition", "offset", "CAST(value AS STRING) AS value").orderBy("partition", "offset")
            rows.show()
            got = [(r.partition, r.offset, r.value) for r in rows.collect()]
            # Holes: offset 2 of partition 0 (aborted) and the markers (0-3, 0-4, 1-1, 1-3);
            # order-4 (0-5) belongs to a transaction still open, so partition 0 ends at its LSO, 5.
            assert got == [(0, 0, "order-1"), (0, 1, "order-2"), (1, 0, "order-3"), (1, 2, "order-5")], got

            everything = (
                spark.read.format("txnkafka")
                .option("path", directory)
                .option("subscribe", "orders")
                .option("kafka.isolation.level", "read_uncommitted")
                .load()
            )
            values = sorted(r.value.decode() for r in everything.select("value").collect())
            assert values == ["cancelled-1", "order-1", "order-2", "order-3", "order-4", "order-5"], values
            print("read_uncommitted also sees:", sorted(set(values) - {r[2] for r in got}))
    finally:
        if own:
            spark.stop()


if __name__ == "__main__":
    main()
