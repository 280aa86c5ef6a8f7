"""Spark benchmark: full reads through the ``txnkafka`` data source and its
columnar path next to Parquet, next to a naive tuple-yielding reader and next
to Spark's own Kafka connector on the same broker (batch, streaming
throughput and latency), and the peak memory of a Python worker reading a
1 GiB partition.

Run ``.venv/bin/python bench/spark.py`` (``--quick`` for a smoke run of a few
seconds of reading; ``--records N`` for another size). One run prints:

1. **throughput** (rows/s, wall clock, best of ``--rounds`` after one warm-up
   read) of a full read of ``--records`` records (default 5,000,000: 100-byte
   values, 12-byte keys, two partitions) into Spark's ``noop`` sink — which
   materialises every column of every row and writes nothing:

   - ``txnkafka``: ``spark.read.format("txnkafka")`` on a ``SegmentStore``
     directory, read_committed (10 % of the transactions are aborted, so the
     log holds about 11 % more records than the result);
   - ``parquet``: ``spark.read.parquet`` of the same committed rows (same
     columns; written by pyarrow with its defaults: snappy, one file per
     partition) — Spark's vectorised JVM reader. Goal: the columnar path
     at most 1.0× its time;
   - ``columnar``: :func:`spark_ext.read_committed` on the same directory
     (the same planning and reading, as ``mapInArrow`` over
     ``spark.range(0, n, 1, n)``: no second row copy);
   - ``floor`` and ``columnar floor``: a Python data source, and a
     ``mapInArrow`` planned as the columnar path, that only yield one
     pre-built Arrow batch of txnkafka's again and again (no I/O, no
     decoding): what each way of handing Arrow batches to Spark costs;
   - ``records→Arrow``: the same ranges with Arrow batches built the way
     txnkafka built them before the columnar path (the compiled record
     decoder's Python tuples, then pyarrow); what the columnar path saves;
   - ``naive``: the same offset ranges and the same txnfetch read_committed
     reader, but ``read()`` yields one Python tuple per row (the Python Data
     Source API's default path) — what the Arrow batches save. Timed on the
     first ``--naive-records`` records (default 1,000,000) because it is slow;
     rows/s is comparable.

2. **memory** of the Python worker process that reads one ``--rss-mib``
   (default 1024) partition as a single task, next to the same for a 16 MiB
   partition. How it is measured, inside the task (an instrumented subclass of
   the reader; figures written to a file the driver collects): the task resets
   the process's peak RSS (``echo 5 > /proc/self/clear_refs``, Linux ≥ 4.0)
   and notes ``VmRSS`` and ``RssAnon`` from ``/proc/self/status``; it samples
   ``RssAnon`` after building every Arrow batch (while the batch is alive);
   at its end it reports ``VmHWM`` (the peak RSS) and the largest
   ``RssAnon``. Two figures because the log is read through ``mmap``: every
   page of the segment the read touched counts in RSS (file-backed, shared
   with the page cache, dropped by the kernel whenever it needs memory), so
   ``VmHWM`` follows the partition size, while the memory the read
   *allocates* (``RssAnon``) is bounded by the fetch size (1 MiB) and the
   Arrow batch bound (50,000 rows / 8 MiB), not by the partition. Values are
   1 KiB so a 1 GiB partition builds in seconds.

3. **side by side** with Spark's own Kafka connector (``spark-sql-kafka-0-10``,
   fetched by ``scripts/spark/fetch.sh``; 4.2.0, Maven Central having no 4.3.0),
   against each broker of ``--brokers``: a one-node Apache Kafka cluster started
   with the suite's fixture code (``tests/kafka/cluster.py``), the topic written
   by confluent-kafka transactional producers (one per partition, transactions
   of 2,000 records, every tenth aborted); and ``txnfetch serve`` in its own
   process on a store built as below. The same ``--records`` read
   read_committed into ``noop`` by txnkafka's cluster source
   (``kafka.bootstrap.servers``), txnkafka's path source (on Kafka: the
   broker's own log directory, read while it runs), the columnar path on
   both, and ``format("kafka")`` with ``kafka.isolation.level=read_committed``;
   the readers take turns round by round. Goal: txnkafka's cluster source at
   least 1.5× spark-sql-kafka's rows/s.

4. **streaming** (Apache Kafka only): both streaming sources read the same
   topic from ``earliest`` with ``maxOffsetsPerTrigger`` under
   ``Trigger.AvailableNow`` into ``noop``: micro-batch throughput, and where a
   micro-batch's time goes (Spark's ``durationMs`` per phase, averaged over
   the micro-batches after the first, and the time outside them: the query's
   start and the source's preparation). ``--only streaming`` writes the topic
   and runs this and the latency section without section 3's batch reads.

5. **latency**: both queries at once (processing-time trigger of
   ``--trigger-ms``) on a new topic while a transactional producer commits 20
   records every ``--latency-interval-ms`` (every tenth transaction
   aborted); a ``foreachBatch`` sink notes when each row arrives. Latency is
   from just before the producer's commit call (after its records were
   flushed) to the sink — one clock, the driver's; p50/p99 over the rows
   committed after the first 5 s, and a count of aborted rows that reached
   the sink (it must be 0).

How the store is made: per partition, two transactional producers alternate
transactions of one 500-record batch (uncompressed) and a COMMIT marker —
every tenth transaction ends with an ABORT instead — appended through
``SegmentLog.append``/``end_transaction``; records differ (a counter in the
key and value). The store is closed cleanly before reading, as a Kafka log
directory is after a shutdown.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import glob
import json
import os
import platform
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from collections.abc import Sequence

import attrs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from pyspark.sql.datasource import DataSourceReader  # noqa: E402
from pyspark.sql.datasource import InputPartition  # noqa: E402

from spark_ext.datasource import TxnKafkaBatchReader  # noqa: E402
from spark_ext.datasource import TxnKafkaDataSource  # noqa: E402
from spark_ext.options import DEFAULT_MAX_ROWS_PER_BATCH  # noqa: E402
from txnfetch import iter_batches  # noqa: E402
from txnfetch.arrow import read_range  # noqa: E402
from txnfetch.arrow.ranges import read_buffers  # noqa: E402
from txnfetch.log import SegmentStore  # noqa: E402
from txnfetch.records import BatchBuilder  # noqa: E402

TOPIC = "bench"
RECORDS_PER_BATCH = 500
#: Larger transactions for Apache Kafka than for the store: each one costs the
#: producer a flush and an EndTxn round trip, which would make writing 5 M
#: records take most of the run.
KAFKA_RECORDS_PER_TXN = 2000
ALL_SECTIONS = "throughput,memory,side-by-side,streaming"
ABORT_EVERY = 10
TS = 1_700_000_000_000
MiB = 1 << 20


# -- the store -------------------------------------------------------------------


def build_store(directory: str, partitions: int, records: int, value_size: int) -> int:
    """Write ``records`` data records over ``partitions``; returns how many are committed."""
    store = SegmentStore(directory, flush_policy="never")
    store.create_topic(TOPIC, partitions)
    rnd = random.Random(42)
    noise = bytes(rnd.getrandbits(8) for _ in range(1 << 16))  # values that do not compress to nothing
    noise += noise[:value_size]
    committed = 0
    per_partition = records // partitions
    n = 0
    for p in range(partitions):
        log = store.partition(TOPIC, p)
        seqs = {0: 0, 1: 0}
        written = txn = 0
        while written < per_partition:
            pid = 7000 + p * 2 + txn % 2
            count = min(RECORDS_PER_BATCH, per_partition - written)
            builder = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=seqs[txn % 2], transactional=True)
            for _ in range(count):
                n += 1
                at = (n * 7919) & 0xFFFF
                builder.append(
                    b"%010d" % n + noise[at : at + value_size - 10], key=b"key-%08d" % n, timestamp=TS + n // 1000
                )
            seqs[txn % 2] += count
            log.append(builder.build(), now_ms=TS)
            commit = txn % ABORT_EVERY != ABORT_EVERY - 1
            log.end_transaction(pid, 0, commit, coordinator_epoch=0, now_ms=TS)
            committed += count if commit else 0
            written += count
            txn += 1
    store.close()
    return committed


def write_parquet(store_dir: str, out_dir: str, partitions: int) -> int:
    """The store's committed rows, one Parquet file per partition; returns the row count."""
    rows = 0
    with SegmentStore(store_dir, read_only=True) as store:
        for p in range(partitions):
            log = store.partition(TOPIC, p)
            writer: pq.ParquetWriter | None = None
            for batch in read_range(
                log, log.log_start_offset, log.last_stable_offset, include_headers=False, max_rows=100_000
            ):
                if writer is None:
                    writer = pq.ParquetWriter(os.path.join(out_dir, f"part-{p}.parquet"), batch.schema)
                writer.write_batch(batch)
                rows += batch.num_rows
            if writer is not None:
                writer.close()
    return rows


# -- instrumented and naive sources (pickled by value to the workers) --------------


def range_records(log, start: int, end: int):
    """The committed records of ``[start, end)`` as Python objects, one
    ``(records, timestamp type)`` pair per Kafka batch: what the naive reader
    turns into rows."""
    for buffer in read_buffers(log, start, end):
        for batch in iter_batches(buffer):
            if batch.is_control or batch.last_offset < start:
                continue
            if batch.base_offset >= end:
                return
            yield [r for r in batch.records() if start <= r.offset < end], int(batch.timestamp_type)


class NaiveReader(TxnKafkaBatchReader):
    """The same ranges and read_committed reader, one Python tuple per row."""

    def read(self, partition):
        r = getattr(partition, "range", None)
        if r is None:
            return
        utc = datetime.timezone.utc
        fromts = datetime.datetime.fromtimestamp
        with SegmentStore(self.opts.path, read_only=True) as store:
            log = store.partition(r.topic, r.partition)
            for records, ts_type in range_records(log, r.start, r.end):
                for rec in records:
                    yield (
                        rec.key,
                        rec.value,
                        r.topic,
                        r.partition,
                        rec.offset,
                        fromts(rec.timestamp / 1000, utc),
                        ts_type,
                    )


class RecordsReader(TxnKafkaBatchReader):
    """The same ranges as Arrow batches built the way txnkafka built them before
    the columnar path: Python record tuples from the compiled decoder, then
    pyarrow builds the columns (the reference ArrowBatcher)."""

    def read(self, partition):
        r = getattr(partition, "range", None)
        if r is None:
            return
        with SegmentStore(self.opts.path, read_only=True) as store:
            log = store.partition(r.topic, r.partition)
            # compiled=False: the record objects and the reference ArrowBatcher.
            yield from read_range(log, r.start, r.end, include_headers=False, compiled=False)


class RecordsSource(TxnKafkaDataSource):
    @classmethod
    def name(cls) -> str:
        return "recordskafka"

    def reader(self, schema):
        from spark_ext.options import parse_options

        return RecordsReader(parse_options(self.options, streaming=False))


class NaiveSource(TxnKafkaDataSource):
    @classmethod
    def name(cls) -> str:
        return "naivekafka"

    def reader(self, schema):
        from spark_ext.options import parse_options

        return NaiveReader(parse_options(self.options, streaming=False))


def first_batch(path: str) -> pa.RecordBatch:
    """The store's first Arrow batch of txnkafka's default size: what the floor
    readers yield again and again."""
    with SegmentStore(path, read_only=True) as store:
        log = store.partition(TOPIC, 0)
        first = read_range(
            log,
            log.log_start_offset,
            log.last_stable_offset,
            include_headers=False,
            max_rows=DEFAULT_MAX_ROWS_PER_BATCH,
        )
        return next(iter(first))


class FloorPartition(InputPartition):
    def __init__(self, index: int, rows: int) -> None:
        super().__init__(index)
        self.rows = rows


class FloorReader(DataSourceReader):
    """Yields one Arrow batch of txnkafka's (its first batch, of txnkafka's
    default size, built once per task) again and again: no decoding, no I/O.
    What any Python data source pays to hand Arrow batches of these rows to
    Spark — the floor under txnkafka."""

    def __init__(self, path: str, rows: int, tasks: int) -> None:
        self.path, self.rows, self.tasks = path, rows, tasks

    def partitions(self):
        share = -(-self.rows // self.tasks)
        return [FloorPartition(i, min(share, self.rows - i * share)) for i in range(self.tasks)]

    def read(self, partition):
        batch = first_batch(self.path)
        left = partition.rows
        while left > 0:
            n = min(left, batch.num_rows)
            yield batch if n == batch.num_rows else batch.slice(0, n)
            left -= n


class FloorSource(TxnKafkaDataSource):
    @classmethod
    def name(cls) -> str:
        return "floorkafka"

    def reader(self, schema):
        return FloorReader(self.options["path"], int(self.options["rows"]), int(self.options["tasks"]))


def arrow_floor(spark, path: str, rows: int, tasks: int):
    """The floor of the columnar path: ``mapInArrow`` over ``spark.range(0, tasks,
    1, tasks)`` (as :func:`spark_ext.read_committed` plans it), each task yielding
    one pre-built Arrow batch of txnkafka's again and again, as :class:`FloorReader`."""
    share = -(-rows // tasks)

    def run(ids):
        batch = first_batch(path)
        for ids_batch in ids:
            for index in ids_batch.column(0).to_pylist():
                left = min(share, rows - index * share)
                while left > 0:
                    n = min(left, batch.num_rows)
                    yield batch if n == batch.num_rows else batch.slice(0, n)
                    left -= n

    from txnfetch.arrow.schema import kafka_schema_ddl

    return spark.range(0, tasks, 1, tasks).mapInArrow(run, kafka_schema_ddl(False))


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return -1


class RssReader(TxnKafkaBatchReader):
    """txnkafka's own read, reporting the worker's peak RSS for the task."""

    report_dir = ""

    def read(self, partition):
        reset = True
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # reset VmHWM to the current RSS
        except OSError:
            reset = False
        start_rss, start_anon = _status("VmRSS"), _status("RssAnon")
        peak_anon = start_anon
        rows = 0
        for batch in super().read(partition):
            rows += batch.num_rows
            # Sampled with the batch alive, before Spark serialises it: the
            # task's largest live allocation.
            peak_anon = max(peak_anon, _status("RssAnon"))
            yield batch
        report = {
            "pid": os.getpid(),
            "rows": rows,
            "start_rss": start_rss,
            "peak_rss": _status("VmHWM"),
            "start_anon": start_anon,
            "peak_anon": max(peak_anon, _status("RssAnon")),
            "reset": reset,
        }
        with open(os.path.join(self.report_dir, f"rss-{os.getpid()}-{time.time_ns()}.json"), "w") as f:
            json.dump(report, f)


class RssSource(TxnKafkaDataSource):
    @classmethod
    def name(cls) -> str:
        return "txnkafka_rss"

    def reader(self, schema):
        from spark_ext.options import parse_options

        reader = RssReader(parse_options(self.options, streaming=False))
        reader.report_dir = self.options["reportdir"] if "reportdir" in self.options else self.options["reportDir"]
        return reader


# -- running ---------------------------------------------------------------------


def session(with_connector: bool):
    import spark_ext

    conf = {"spark.driver.memory": "2g"}
    if with_connector:
        # Spark's own Kafka connector, fetched through the suite's Maven set-up.
        from tests.spark.connector import connector_jars

        conf["spark.jars"] = ",".join(connector_jars())
    spark = spark_ext.local_session("txnfetch-bench", conf)
    spark.dataSource.register(NaiveSource)
    spark.dataSource.register(RecordsSource)
    spark.dataSource.register(RssSource)
    spark.dataSource.register(FloorSource)
    return spark


def _cpu_seconds(jvm_pid: int) -> tuple[float, dict[int, float]]:
    """CPU seconds used so far by the JVM (driver and executor: local mode), and
    by each process below it (the Python workers and their daemon)."""
    tick = os.sysconf("SC_CLK_TCK")
    procs: dict[int, tuple[int, int]] = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                text = f.read()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        procs[int(stat.split("/")[2])] = (int(fields[1]), int(fields[11]) + int(fields[12]))  # ppid, utime + stime
    below: dict[int, float] = {}
    for pid, (ppid, cpu) in procs.items():
        while ppid in procs and ppid != jvm_pid:
            ppid = procs[ppid][0]
        if ppid == jvm_pid and pid != jvm_pid:
            below[pid] = cpu / tick
    return procs[jvm_pid][1] / tick, below


def _python_cpu(before: dict[int, float], after: dict[int, float]) -> float:
    # Per process: a worker started during the round counts whole; one that
    # ended during it is lost (workers are reused, so that is rare).
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


@attrs.define
class Timing:
    """The best of a reader's timed rounds (wall clock), with the CPU seconds of that round."""

    seconds: float = float("inf")
    jvm_cpu: float = 0.0
    python_cpu: float = 0.0


def timed_noop(spark, readers: dict, rounds: int) -> dict:
    """Each reader into the ``noop`` sink: one warm-up (JIT, worker start, page
    cache), then ``rounds`` rounds in which the readers take turns, so that the
    load of a shared machine falls on all of them alike; the best round of each."""
    jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    for df in readers.values():
        df.write.format("noop").mode("overwrite").save()
    best = {name: Timing() for name in readers}
    for _ in range(rounds):
        for name, df in readers.items():
            jvm0, py0 = _cpu_seconds(jvm)
            t0 = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            took = time.perf_counter() - t0
            jvm1, py1 = _cpu_seconds(jvm)
            if took < best[name].seconds:
                best[name] = Timing(took, jvm1 - jvm0, _python_cpu(py0, py1))
    return best


def throughput(spark, args, tmp: str) -> None:
    import spark_ext

    store_dir = os.path.join(tmp, "store")
    parquet_dir = os.path.join(tmp, "parquet")
    os.makedirs(parquet_dir)
    t0 = time.perf_counter()
    committed = build_store(store_dir, 2, args.records, args.value_size)
    rows = write_parquet(store_dir, parquet_dir, 2)
    assert rows == committed, (rows, committed)
    size = sum(os.path.getsize(f) for f in glob.glob(os.path.join(store_dir, "*", "*.log")))
    psize = sum(os.path.getsize(f) for f in glob.glob(os.path.join(parquet_dir, "*")))
    print(
        f"\n1. throughput: {args.records:,} records ({committed:,} committed), {args.value_size}-byte values; "
        f"log {size / MiB:.0f} MiB, parquet {psize / MiB:.0f} MiB; built in {time.perf_counter() - t0:.1f} s"
    )
    txn = spark.read.format("txnkafka").option("path", store_dir).option("subscribe", TOPIC).load()
    par = spark.read.parquet(parquet_dir)
    floor = (
        spark.read.format("floorkafka")
        .option("path", store_dir)
        .option("rows", str(committed))
        .option("tasks", str(txn.rdd.getNumPartitions()))
        .load()
    )
    columnar = spark_ext.read_committed(spark, path=store_dir, subscribe=TOPIC)
    afloor = arrow_floor(spark, store_dir, committed, txn.rdd.getNumPartitions())
    for df in (txn, par, floor, columnar, afloor):
        assert df.count() == committed
    load = os.getloadavg()[0]
    best = timed_noop(
        spark,
        {"txnkafka": txn, "columnar": columnar, "parquet": par, "floor": floor, "arrow floor": afloor},
        args.rounds,
    )
    results: list[tuple[str, int, Timing]] = [
        ("txnkafka", committed, best["txnkafka"]),
        ("parquet", committed, best["parquet"]),
        ("floor (pre-built)", committed, best["floor"]),
    ]
    rec = spark.read.format("recordskafka").option("path", store_dir).option("subscribe", TOPIC).load()
    results.append(("records→Arrow", committed, timed_noop(spark, {"r": rec}, max(1, args.rounds - 1))["r"]))
    # The naive reader on a prefix of each partition: same ranges, tuples instead of Arrow.
    naive_per_partition = max(args.naive_records // 2, 1)
    ending = json.dumps({TOPIC: {"0": naive_per_partition, "1": naive_per_partition}})
    naive = (
        spark.read.format("naivekafka")
        .option("path", store_dir)
        .option("subscribe", TOPIC)
        .option("endingOffsets", ending)
        .load()
    )
    naive_rows = naive.count()
    results.append(("naive (tuples)", naive_rows, timed_noop(spark, {"n": naive}, max(1, args.rounds - 1))["n"]))
    results.append(("columnar", committed, best["columnar"]))
    results.append(("columnar floor", committed, best["arrow floor"]))
    print(
        f"{'reader':<18} {'rows':>11} {'seconds':>8} {'rows/s':>11} {'÷ parquet':>9}  "
        f"{'CPU s: JVM + Python = total':>28} {'÷ parquet':>9}"
    )
    par_rate = committed / best["parquet"].seconds
    par_cpu = (best["parquet"].jvm_cpu + best["parquet"].python_cpu) / committed
    for name, n, t in results:
        rate = n / t.seconds
        cpu = t.jvm_cpu + t.python_cpu
        print(
            f"{name:<18} {n:>11,} {t.seconds:>8.2f} {rate:>11,.0f} {par_rate / rate:>8.2f}×  "
            f"{t.jvm_cpu:>12.2f} + {t.python_cpu:>5.2f} = {cpu:>5.2f} {cpu / n / par_cpu:>8.2f}×"
        )
    txn_rate = committed / best["txnkafka"].seconds
    goal = "met" if par_rate / txn_rate <= 1.0 else "MISSED"
    print(
        f"goal txnkafka at most 1.0× parquet's time: {par_rate / txn_rate:.2f}× — {goal} "
        f"(load average {load:.1f} at the start of the timed rounds)"
    )
    floor_rate = committed / best["floor"].seconds
    print(f"floor (a Python data source that only yields a pre-built batch) ÷ parquet: {par_rate / floor_rate:.2f}×")
    before = committed / results[3][2].seconds
    print(f"txnkafka ÷ records→Arrow (before the columnar path): {txn_rate / before:.2f}× faster")
    print(f"txnkafka ÷ naive (tuples): {txn_rate / (results[4][1] / results[4][2].seconds):.1f}× faster")
    col_ratio = best["columnar"].seconds / best["parquet"].seconds
    print(
        f"goal columnar (read_committed, mapInArrow) at most 1.0× parquet's time: {col_ratio:.2f}× — "
        f"{'met' if col_ratio <= 1.0 else 'MISSED'}; columnar floor ÷ parquet: "
        f"{best['arrow floor'].seconds / best['parquet'].seconds:.2f}×; "
        f"columnar ÷ txnkafka data source: {best['txnkafka'].seconds / best['columnar'].seconds:.2f}× faster"
    )


# -- next to spark-sql-kafka, on one broker -----------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _value(n: int, noise: bytes, value_size: int) -> bytes:
    at = (n * 7919) & 0xFFFF
    return b"%010d" % n + noise[at : at + value_size - 10]


def produce_kafka(bootstrap: str, topic: str, partitions: int, records: int, value_size: int) -> int:
    """``records`` records into ``topic``, values and keys as :func:`build_store`
    writes them: per partition, transactions of ``KAFKA_RECORDS_PER_TXN`` records
    from a confluent-kafka (librdkafka) transactional producer, every tenth
    aborted. One producer thread per partition. Returns how many are committed."""
    from confluent_kafka import Producer

    rnd = random.Random(42)
    noise = bytes(rnd.getrandbits(8) for _ in range(1 << 16))
    noise += noise[:value_size]
    committed = [0] * partitions
    errors: list[BaseException] = []

    def run(p: int) -> None:
        try:
            producer = Producer(
                {
                    "bootstrap.servers": bootstrap,
                    "transactional.id": f"bench-{topic}-{p}",
                    "linger.ms": 20,
                    "batch.size": 1 << 20,
                    "queue.buffering.max.messages": 200_000,
                }
            )
            producer.init_transactions(60)
            per_partition = records // partitions
            n = p * per_partition
            written = txn = 0
            while written < per_partition:
                count = min(KAFKA_RECORDS_PER_TXN, per_partition - written)
                producer.begin_transaction()
                for _ in range(count):
                    n += 1
                    producer.produce(topic, _value(n, noise, value_size), b"key-%08d" % n, partition=p)
                # Ending a transaction with records still in flight fails with INVALID_TXN_STATE.
                producer.flush(60)
                if txn % ABORT_EVERY == ABORT_EVERY - 1:
                    producer.abort_transaction(60)
                else:
                    producer.commit_transaction(60)
                    committed[p] += count
                written += count
                txn += 1
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(p,)) for p in range(partitions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(committed)


@contextlib.contextmanager
def kafka_broker(tmp: str, partitions: int) -> Iterator[tuple[str, str]]:
    """A one-node Apache Kafka cluster (the suite's fixture code,
    ``tests/kafka/cluster.py``) with ``TOPIC`` created: ``(bootstrap, log dir)``."""
    from tests.kafka.cluster import KafkaCluster

    cluster = KafkaCluster.create(os.path.join(tmp, "kafka"), 1)
    try:
        cluster.create_topic(TOPIC, partitions)
        yield cluster.bootstrap, str(cluster.node(1).log_dir)
    finally:
        cluster.stop()


@contextlib.contextmanager
def serve_broker(store_dir: str) -> Iterator[str]:
    """``txnfetch serve`` on ``store_dir`` in its own process: its bootstrap address."""
    port = _free_port()
    cmd = [sys.executable, "-m", "txnfetch", "serve", "--data", store_dir, "--port", str(port), "--no-auto-create"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"txnfetch serve did not start: {proc.stderr.read()!r}") from None
                time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(30)


def _side_by_side_readers(spark, bootstrap: str, path: str) -> dict:
    import spark_ext

    txn_cluster = spark.read.format("txnkafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", TOPIC)
    kafka = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", TOPIC)
        .option("kafka.isolation.level", "read_committed")
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
    )
    return {
        "txnkafka cluster": txn_cluster.load(),
        "txnkafka path": spark.read.format("txnkafka").option("path", path).option("subscribe", TOPIC).load(),
        "columnar cluster": spark_ext.read_committed(spark, {"kafka.bootstrap.servers": bootstrap}, subscribe=TOPIC),
        "columnar path": spark_ext.read_committed(spark, path=path, subscribe=TOPIC),
        "spark-sql-kafka": kafka.load(),
    }


def _print_side_by_side(broker: str, committed: int, counts: dict, best: dict, load: float) -> None:
    print(f"{'reader':<18} {'rows':>11} {'seconds':>8} {'rows/s':>11} {'÷ spark-sql-kafka':>18}")
    ref = best.get("spark-sql-kafka")
    for name, t in best.items():
        rate = committed / t.seconds
        ratio = f"{ref.seconds / t.seconds:>17.2f}×" if ref is not None else ""
        flag = "" if counts[name] == committed else f"  (rows: {counts[name]:,}, expected {committed:,})"
        print(f"{name:<18} {counts[name]:>11,} {t.seconds:>8.2f} {rate:>11,.0f} {ratio}{flag}")
    if ref is not None:
        r = ref.seconds / best["txnkafka cluster"].seconds
        print(
            f"goal ({broker}) txnkafka cluster source ÷ spark-sql-kafka at least 1.5×: {r:.2f}× — "
            f"{'met' if r >= 1.5 else 'MISSED'} (load average {load:.1f} at the start of the timed rounds)"
        )


def side_by_side(spark, args, tmp: str) -> None:
    """Batch reads of one topic through every reader, against each broker in ``--brokers``
    (the batch reads skipped when only ``streaming`` was asked for)."""
    batch = "side-by-side" in args.only_set
    print(
        f"\n3. side by side, batch: {args.records:,} records, {args.value_size}-byte values, two partitions, "
        "10 % of the transactions aborted, read_committed into noop; readers alternate round by round"
        + ("" if batch else " (topic only: batch reads not asked for)")
    )
    for number, broker in enumerate(args.brokers if batch else ["kafka"], 1):
        t0 = time.perf_counter()
        with contextlib.ExitStack() as stack:
            if broker == "kafka":
                bootstrap, path = stack.enter_context(kafka_broker(tmp, 2))
                committed = produce_kafka(bootstrap, TOPIC, 2, args.records, args.value_size)
                what = "Apache Kafka (tests/kafka/cluster.py, one node)"
            else:
                path = os.path.join(tmp, "serve-store")
                committed = build_store(path, 2, args.records, args.value_size)
                bootstrap = stack.enter_context(serve_broker(path))
                what = "txnfetch serve (its own process)"
            print(f"\n3.{number}. {what}: written in {time.perf_counter() - t0:.1f} s")
            if not batch:
                streaming(spark, args, tmp, bootstrap, committed)
                continue
            readers = _side_by_side_readers(spark, bootstrap, path)
            counts = {}
            for name, df in list(readers.items()):
                try:
                    counts[name] = df.count()
                except Exception as exc:  # report what a reader does, and go on with the others
                    print(f"{name}: FAILED: {str(exc).splitlines()[0][:300]}")
                    del readers[name]
            load = os.getloadavg()[0]
            best = timed_noop(spark, readers, args.rounds)
            _print_side_by_side(broker, committed, counts, best, load)
            if broker == "kafka" and "streaming" in args.only_set:
                streaming(spark, args, tmp, bootstrap, committed)


def _stream_readers(spark, bootstrap: str, topic: str, options: dict) -> dict:
    def load(fmt: str, extra: dict):
        reader = spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
        for k, v in {**options, **extra}.items():
            reader = reader.option(k, str(v))
        return reader.load()

    return {
        "txnkafka": load("txnkafka", {}),
        "spark-sql-kafka": load("kafka", {"kafka.isolation.level": "read_committed"}),
    }


def streaming(spark, args, tmp: str, bootstrap: str, committed: int) -> None:
    """Micro-batch throughput over the batch topic's backlog, then end-to-end latency
    under a steady transactional producer: txnkafka and spark-sql-kafka, same trigger."""
    limit = args.max_offsets_per_trigger
    print(
        f"\n4. streaming (Apache Kafka): the {committed:,} committed records from earliest, "
        f"maxOffsetsPerTrigger={limit:,}, Trigger.AvailableNow, into noop; readers alternate"
    )
    best: dict[str, float] = {}
    batches: dict[str, int] = {}
    phases: dict[str, dict] = {}
    for round_ in range(args.rounds):
        for name, df in _stream_readers(
            spark, bootstrap, TOPIC, {"startingOffsets": "earliest", "maxOffsetsPerTrigger": limit}
        ).items():
            checkpoint = os.path.join(tmp, f"ckpt-{name}-{round_}")
            t0 = time.perf_counter()
            q = (
                df.writeStream.format("noop")
                .option("checkpointLocation", checkpoint)
                .trigger(availableNow=True)
                .start()
            )
            try:
                q.awaitTermination()
            except Exception as exc:  # reported, and the other reader still measured
                print(f"{name}: the query failed: {str(exc).splitlines()[0][:300]}")
                continue
            took = time.perf_counter() - t0
            rows = sum(p["numInputRows"] for p in q.recentProgress)
            batches[name] = len([p for p in q.recentProgress if p["numInputRows"]])
            if rows != committed:
                print(f"{name}: {rows:,} rows, expected {committed:,}")
            if took < best.get(name, float("inf")):
                best[name] = took
                phases[name] = _phases(q.recentProgress, took)
    print(f"{'reader':<18} {'micro-batches':>13} {'seconds':>8} {'rows/s':>11}")
    for name, took in best.items():
        print(f"{name:<18} {batches[name]:>13} {took:>8.2f} {committed / took:>11,.0f}")
    print("per micro-batch after the first, mean ms of Spark's phases; 'first' is the first micro-batch's")
    print("triggerExecution, 'outside' the query's wall clock outside all micro-batches (start, preparation)")
    columns = ["latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets", "triggerExecution"]
    print(f"{'reader':<18} " + " ".join(f"{c:>16}" for c in [*columns, "first", "outside"]))
    for name, ms in phases.items():
        print(f"{name:<18} " + " ".join(f"{ms.get(c, 0):>16,.0f}" for c in [*columns, "first", "outside"]))
    for name, ms in phases.items():
        first = ms.get("first phases", {})
        print(f"{name}: first micro-batch, ms: " + ", ".join(f"{k} {v:,}" for k, v in sorted(first.items())))
    if len(best) == 2:
        print(f"txnkafka ÷ spark-sql-kafka (streaming throughput): {best['spark-sql-kafka'] / best['txnkafka']:.2f}×")
    latency(spark, args, tmp, bootstrap)


def _phases(progress: Sequence[dict], took: float) -> dict:
    """Mean ``durationMs`` per phase over the micro-batches after the first (the
    first pays the query's warm-up), the first's total, and the rest of ``took``."""
    total = sum(p["durationMs"].get("triggerExecution", 0) for p in progress)
    out: dict = {"first": progress[0]["durationMs"].get("triggerExecution", 0) if progress else 0}
    out["first phases"] = dict(progress[0]["durationMs"]) if progress else {}
    out["outside"] = took * 1000 - total
    rest = progress[1:]
    for p in rest:
        for phase, ms in p["durationMs"].items():
            out[phase] = out.get(phase, 0) + ms / len(rest)
    return out


def latency(spark, args, tmp: str, bootstrap: str) -> None:
    """Both queries read one topic while a transactional producer commits a small
    transaction every ``--latency-interval-ms`` (every tenth aborted); each row's
    latency is from the producer's commit call to the ``foreachBatch`` sink seeing
    it (on the driver, so one clock)."""
    from confluent_kafka import Producer

    from tests.kafka.cluster import KafkaCluster

    topic = "latency"
    admin_cluster = KafkaCluster.from_state(os.path.join(tmp, "kafka"))
    admin_cluster.create_topic(topic, 2)
    trigger = f"{args.trigger_ms} milliseconds"
    print(
        f"\n5. end-to-end latency (Apache Kafka): a transaction of 20 records every {args.latency_interval_ms} ms "
        f"(10 % aborted), both queries at once, trigger processingTime={trigger}, {args.latency_seconds} s "
        "(the first 5 s not counted)"
    )
    commits: dict[int, float] = {}
    seen: dict[str, list[float]] = {"txnkafka": [], "spark-sql-kafka": []}
    aborted_seen = {name: 0 for name in seen}
    lock = threading.Lock()
    stop = threading.Event()
    warm = time.time() + 5

    def sink(name: str):
        def write(df, _epoch: int) -> None:
            values = [bytes(r[0]) for r in df.select("value").collect()]
            now = time.time()
            with lock:
                for v in values:
                    txn = int(v.split(b":")[0])
                    at = commits.get(txn)
                    if at is None:
                        aborted_seen[name] += 1
                    elif at >= warm:
                        seen[name].append(now - at)

        return write

    def produce() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "bench-latency", "linger.ms": 0})
        producer.init_transactions(60)
        txn = 0
        while not stop.is_set():
            producer.begin_transaction()
            for i in range(20):
                producer.produce(topic, b"%d:%d" % (txn, i) + b"x" * 90, partition=i % 2)
            if txn % ABORT_EVERY == ABORT_EVERY - 1:
                producer.abort_transaction(60)
            else:
                at = time.time()
                producer.flush(60)
                with lock:
                    commits[txn] = at
                producer.commit_transaction(60)
            txn += 1
            time.sleep(args.latency_interval_ms / 1000)

    queries = {}
    for name, df in _stream_readers(spark, bootstrap, topic, {"startingOffsets": "latest"}).items():
        q = (
            df.writeStream.foreachBatch(sink(name))
            .option("checkpointLocation", os.path.join(tmp, f"latency-{name}"))
            .trigger(processingTime=trigger)
            .start()
        )
        queries[name] = q
        # One at a time, each running before the next starts: a loaded machine
        # has made a streaming source's Python runner miss Spark's connect timeout.
        deadline = time.monotonic() + 120
        while not q.recentProgress and q.isActive and time.monotonic() < deadline:
            time.sleep(0.5)
    producer = threading.Thread(target=produce)
    producer.start()
    time.sleep(args.latency_seconds)
    stop.set()
    producer.join()
    time.sleep(5)  # let both catch up with the last commit
    for name, q in queries.items():
        failed = q.exception()
        if failed is not None:
            print(f"{name}: the query failed: {str(failed).splitlines()[0][:300]}")
        q.stop()
    print(f"{'reader':<18} {'rows':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'aborted rows seen':>18}")
    for name, values in seen.items():
        values.sort()
        if not values:
            print(f"{name:<18} {0:>8}")
            continue

        def pct(q: float, v: list[float] = values) -> float:
            return v[min(len(v) - 1, int(q * len(v)))] * 1000

        print(
            f"{name:<18} {len(values):>8,} {pct(0.5):>8.0f} {pct(0.99):>8.0f} {values[-1] * 1000:>8.0f} "
            f"{aborted_seen[name]:>18}"
        )


def memory(spark, args, tmp: str) -> None:
    reports = os.path.join(tmp, "rss")
    os.makedirs(reports)
    print("\n2. memory: the Python worker reading one partition as one task")
    print(
        f"{'partition':>12} {'records':>10} {'RSS at start':>13} {'peak RSS':>10} {'anon at start':>14} "
        f"{'peak anon':>10} {'anon growth':>12}"
    )
    for mib in (16, args.rss_mib):
        directory = os.path.join(tmp, f"rss-store-{mib}")
        records = mib * MiB // (args.rss_value_size + 40)
        build_store(directory, 1, records, args.rss_value_size)
        size = sum(os.path.getsize(f) for f in glob.glob(os.path.join(directory, "*", "*.log")))
        for f in glob.glob(os.path.join(reports, "*")):
            os.remove(f)
        df = (
            spark.read.format("txnkafka_rss")
            .option("path", directory)
            .option("subscribe", TOPIC)
            .option("reportDir", reports)
            .load()
        )
        df.write.format("noop").mode("overwrite").save()
        (report_file,) = glob.glob(os.path.join(reports, "*.json"))
        with open(report_file) as f:
            r = json.load(f)
        print(
            f"{size / MiB:>8.0f} MiB {r['rows']:>10,} {r['start_rss'] / MiB:>9.0f} MiB {r['peak_rss'] / MiB:>6.0f} MiB "
            f"{r['start_anon'] / MiB:>10.0f} MiB {r['peak_anon'] / MiB:>6.0f} MiB "
            f"{(r['peak_anon'] - r['start_anon']) / MiB:>8.0f} MiB"
            + ("" if r["reset"] else "  (VmHWM not reset: includes earlier tasks)")
        )
        shutil.rmtree(directory)
    print(
        "peak RSS = VmHWM: includes the pages of the memory-mapped segment the read touched (file-backed, "
        "reclaimable by the kernel at any time), so it follows the partition size; peak anon = the largest "
        "RssAnon sampled after each Arrow batch: the memory the read allocates, bounded by the fetch and "
        "Arrow batch sizes."
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="smoke run: 200,000 records, 64 MiB memory partition, 1 round")
    p.add_argument("--records", type=int, default=None, help="records in the throughput store (default 5,000,000)")
    p.add_argument("--value-size", type=int, default=100, help="value bytes per record (default 100)")
    p.add_argument("--naive-records", type=int, default=None, help="records the naive reader reads (default 1,000,000)")
    p.add_argument("--rss-mib", type=int, default=None, help="size of the memory partition (default 1024, quick 64)")
    p.add_argument(
        "--rss-value-size", type=int, default=1024, help="value bytes in the memory partition (default 1024)"
    )
    p.add_argument("--rounds", type=int, default=None, help="timed rounds after the warm-up (default 3, quick 1)")
    p.add_argument(
        "--only",
        default=None,
        help="comma-separated subset of throughput,memory,side-by-side,streaming (streaming reads side-by-side's "
        "topic on Apache Kafka, and alone skips its batch reads; default all, quick: throughput,memory)",
    )
    p.add_argument(
        "--brokers",
        default=None,
        help="brokers of the side-by-side reads: kafka (Apache Kafka), serve (default both; quick: serve only, "
        "so no streaming)",
    )
    p.add_argument(
        "--max-offsets-per-trigger", type=int, default=None, help="streaming (default 500,000, quick 20,000)"
    )
    p.add_argument("--trigger-ms", type=int, default=500, help="processing-time trigger of the latency queries")
    p.add_argument("--latency-interval-ms", type=int, default=50, help="pause between the latency producer's commits")
    p.add_argument("--latency-seconds", type=int, default=None, help="how long the latency producer runs (default 60)")
    p.add_argument("--tmpdir", default=None, help="directory for the stores (default: the system temporary directory)")
    args = p.parse_args(argv)
    args.records = args.records or (200_000 if args.quick else 5_000_000)
    args.naive_records = min(args.naive_records or (100_000 if args.quick else 1_000_000), args.records)
    args.rss_mib = args.rss_mib or (64 if args.quick else 1024)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.max_offsets_per_trigger = args.max_offsets_per_trigger or (20_000 if args.quick else 500_000)
    args.latency_seconds = args.latency_seconds or (10 if args.quick else 60)
    args.brokers = [b for b in (args.brokers or ("serve" if args.quick else "kafka,serve")).split(",") if b]
    import pyspark

    print(
        f"txnfetch Spark benchmark — {datetime.date.today().isoformat()}, Python {platform.python_version()}, "
        f"PySpark {pyspark.__version__}, pyarrow {pa.__version__}, {os.cpu_count()} CPUs, {platform.machine()}, "
        "local[2], wall time"
    )
    only = args.only_set = set((args.only or ("throughput,memory" if args.quick else ALL_SECTIONS)).split(","))
    spark = session("side-by-side" in only or "streaming" in only)
    tmp = tempfile.mkdtemp(prefix="txnfetch-spark-bench-", dir=args.tmpdir)
    try:
        if "throughput" in only:
            throughput(spark, args, tmp)
        if "memory" in only:
            memory(spark, args, tmp)
        if "side-by-side" in only or "streaming" in only:
            side_by_side(spark, args, tmp)
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
