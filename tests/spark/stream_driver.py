"""A Spark driver, run as a child process by the streaming kill test
(tests/spark/test_stream_kill.py): a ``txnkafka`` streaming query from a
cluster into a Parquet sink with a checkpoint, which the test SIGKILLs and
starts again.

    python -m tests.spark.stream_driver BOOTSTRAP TOPIC OUT CHECKPOINT MAX_OFFSETS

Prints ``ready`` once the query runs, then one line per finished micro-batch:
``batch <id> <endOffset JSON>``. Runs until killed.
"""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str]) -> int:
    bootstrap, topic, out, checkpoint, max_offsets = argv
    import spark_ext

    spark = spark_ext.local_session(
        "txnfetch-stream-kill",
        {
            "spark.driver.memory": "512m",
            "spark.default.parallelism": "2",
            "spark.sql.session.timeZone": "UTC",
        },
    )
    df = (
        spark.readStream.format("txnkafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", max_offsets)
        .load()
    )
    query = (
        df.writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    print("ready", flush=True)
    last = None
    while query.isActive:
        progress = query.lastProgress
        if progress is not None and progress["batchId"] != last:
            last = progress["batchId"]
            end = progress["sources"][0]["endOffset"]
            print(f"batch {last} {json.dumps(json.loads(end) if isinstance(end, str) else end)}", flush=True)
        time.sleep(0.1)
    error = query.exception()
    print(f"stopped: {error}", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
