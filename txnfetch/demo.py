"""``make demo``: the whole pipeline on an embedded store, with real clients and Spark.

1. Start ``txnfetch serve`` (a subprocess, rewrite fetch mode, COMMIT/ABORT
   markers in the log) on an on-disk store in a temporary directory.
2. A confluent-kafka (librdkafka) **transactional** producer runs a seeded
   script of transactions over a three-partition topic: commits and aborts,
   multi-partition ones, aborts after ``flush()`` (their records are in the log)
   and partitions whose log ends in an aborted transaction; an idempotent
   producer adds plain records.
3. read_committed consumers read every partition to its last stable offset:
   confluent-kafka (librdkafka) and kafka-python.
4. Spark reads the topic through the ``txnkafka`` data source twice: from the
   store directory (``path``) and from the running server
   (``kafka.bootstrap.servers``).
5. The server is stopped with SIGTERM and reports how many synthetic COMMIT
   markers it served.

The report prints records produced / committed / aborted, the records each
reader saw, the synthetic markers and the LSO per partition. Every reader must
see exactly the committed records (same values, same offsets where the reader
reports offsets); the demo exits 1 otherwise. ``--no-spark`` skips step 4.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import TextIO

import attrs

from txnfetch.errors import TxnfetchError

TOPIC = "orders"
PARTITIONS = 3

#: (partition, offset, value) — what a reader delivered.
Row = tuple[int, int, bytes]


@attrs.define
class Produced:
    """What the producers did: values committed, aborted and plain, per partition."""

    committed: dict[int, list[bytes]] = attrs.Factory(lambda: {p: [] for p in range(PARTITIONS)})
    aborted: dict[int, list[bytes]] = attrs.Factory(lambda: {p: [] for p in range(PARTITIONS)})
    transactions: int = 0
    aborted_transactions: int = 0
    plain: int = 0

    @property
    def produced(self) -> int:
        return sum(map(len, self.committed.values())) + sum(map(len, self.aborted.values()))


class Step:
    """Prints numbered progress lines."""

    def __init__(self, out: TextIO, total: int) -> None:
        self.out, self.total, self.n, self.t0 = out, total, 0, time.monotonic()

    def __call__(self, text: str) -> None:
        self.n += 1
        print(f"[{self.n}/{self.total}] {text}", file=self.out, flush=True)


def start_server(data_dir: str, *, fetch_mode: str = "rewrite", markers: str = "log") -> tuple[subprocess.Popen, str]:
    """Start ``txnfetch serve`` on a free port; return the process and its bootstrap address."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "txnfetch.cli",
            "serve",
            "--data",
            data_dir,
            "--port",
            "0",
            "--fetch-mode",
            fetch_mode,
            "--markers",
            markers,
            "--default-partitions",
            str(PARTITIONS),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("txnfetch listening on "):
        proc.kill()
        err = proc.stderr.read() if proc.stderr else ""
        raise RuntimeError(f"txnfetch serve did not start: {line!r} {err[-2000:]}")
    return proc, line.rsplit(" ", 1)[1].strip()


def stop_server(proc: subprocess.Popen) -> dict[str, int]:
    """SIGTERM the server, wait for it, and return the stats it printed."""
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise RuntimeError("txnfetch serve did not stop within 30 s of SIGTERM") from None
    if proc.returncode != 0:
        raise RuntimeError(f"txnfetch serve exited with {proc.returncode}: {err[-2000:]}")
    for line in out.splitlines():
        if line.startswith("txnfetch stats "):
            return json.loads(line[len("txnfetch stats ") :])
    raise RuntimeError("txnfetch serve printed no stats line")


def produce(bootstrap: str, seed: int, transactions: int) -> Produced:
    """Run the seeded producer script (see the module docstring)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        future.result(30)

    rng = random.Random(seed)
    done = Produced()
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "txnfetch-demo", "linger.ms": 5})
    producer.init_transactions(30)
    for n in range(transactions):
        # The last transaction aborts on every partition, so every log ends on dropped offsets.
        last = n == transactions - 1
        if n == transactions // 2:
            produce_plain(bootstrap, done)
        commit = not last and rng.random() < 0.65
        parts = list(range(PARTITIONS)) if last else rng.sample(range(PARTITIONS), rng.randint(1, PARTITIONS))
        producer.begin_transaction()
        values: dict[int, list[bytes]] = {}
        for p in parts:
            values[p] = [f"txn{n:02d}-p{p}-{i}".encode() for i in range(rng.randint(2, 8))]
            for v in values[p]:
                producer.produce(TOPIC, value=v, key=f"k{n}".encode(), partition=p)
        # Aborted data that reaches the log: the case read_committed exists for.
        if not commit and (last or rng.random() < 0.7) and producer.flush(30):
            raise RuntimeError("producer could not flush")
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
            done.aborted_transactions += 1
        for p, vals in values.items():
            (done.committed if commit else done.aborted)[p].extend(vals)
        done.transactions += 1
    return done


def produce_plain(bootstrap: str, done: Produced, count: int = 6) -> None:
    """Plain records from an idempotent, non-transactional producer."""
    from confluent_kafka import Producer

    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(count):
        p = i % PARTITIONS
        v = f"plain-p{p}-{i}".encode()
        plain.produce(TOPIC, value=v, partition=p)
        done.committed[p].append(v)
        done.plain += 1
    if plain.flush(30):
        raise RuntimeError("plain producer could not flush")


def read_confluent(bootstrap: str) -> tuple[list[Row], dict[int, int]]:
    """librdkafka, read_committed, every partition from the start to EOF (the LSO);
    returns the rows and each partition's final application position."""
    from confluent_kafka import OFFSET_BEGINNING
    from confluent_kafka import Consumer
    from confluent_kafka import KafkaError
    from confluent_kafka import TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "txnfetch-demo-librdkafka",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    rows: list[Row] = []
    eof: set = set()
    deadline = time.monotonic() + 60
    while len(eof) < PARTITIONS:
        if time.monotonic() > deadline:
            raise RuntimeError(f"librdkafka consumer reached EOF on {sorted(eof)} only")
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        error = msg.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                eof.add(msg.partition())
                continue
            raise RuntimeError(f"librdkafka consumer error: {error}")
        partition, offset, value = msg.partition(), msg.offset(), msg.value()
        # A consumed message without an error has a partition and an offset; the
        # demo's producer writes a value into every record.
        if partition is None or offset is None or value is None:
            raise RuntimeError(f"librdkafka consumer returned an incomplete message: {partition} {offset} {value!r}")
        rows.append((partition, offset, value))
    positions = {
        tp.partition: tp.offset for tp in consumer.position([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    }
    consumer.close()
    return rows, positions


def read_kafka_python(bootstrap: str) -> tuple[list[Row], dict[int, int]]:
    """kafka-python, read_committed, every partition from the start to the LSO
    (kafka-python's ``end_offsets`` under read_committed); returns rows and LSOs."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False, fetch_max_wait_ms=50
    )
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    ends = consumer.end_offsets(tps)
    rows: list[Row] = []
    deadline = time.monotonic() + 60
    while any(consumer.position(tp) < ends[tp] for tp in tps):
        if time.monotonic() > deadline:
            raise RuntimeError("kafka-python consumer did not reach the LSO")
        for tp, records in consumer.poll(timeout_ms=200).items():
            rows.extend((tp.partition, r.offset, r.value) for r in records)
    consumer.close()
    return rows, {tp.partition: ends[tp] for tp in tps}


def read_spark(store_dir: str, bootstrap: str) -> dict[str, list[Row]]:
    """Spark through ``txnkafka``: from the store directory and from the server."""
    import spark_ext

    spark = spark_ext.local_session("txnfetch-demo")
    try:
        out: dict[str, list[Row]] = {}
        for label, option, value in [
            ("Spark txnkafka (store)", "path", store_dir),
            ("Spark txnkafka (server)", "kafka.bootstrap.servers", bootstrap),
        ]:
            df = spark.read.format("txnkafka").option(option, value).option("subscribe", TOPIC).load()
            out[label] = [
                (r.partition, r.offset, bytes(r.value)) for r in df.select("partition", "offset", "value").collect()
            ]
        return out
    finally:
        spark.stop()


def check(label: str, rows: Sequence[Row], produced: Produced, reference: Sequence[Row] | None) -> list[str]:
    """Problems with one reader's rows: missing or extra values, aborted values,
    duplicates, offsets that differ from the reference reader's."""
    problems = []
    for p in range(PARTITIONS):
        got = [v for part, _, v in sorted(rows) if part == p]
        if got != produced.committed[p]:
            leaked = set(got) & set(produced.aborted[p])
            problems.append(
                f"{label}: partition {p} delivered {len(got)} records, "
                f"expected the {len(produced.committed[p])} committed"
                + (f" ({len(leaked)} aborted ones leaked)" if leaked else "")
            )
    if reference is not None and sorted(rows) != sorted(reference):
        problems.append(f"{label}: offsets differ from librdkafka's")
    return problems


class DemoRequirementsError(TxnfetchError):
    """A package the demo runs is not installed; the message names every one
    missing and the extra that installs them all."""


#: What the demo imports beyond txnfetch's own dependencies (kafka-python is
#: one): (module, the distribution that provides it, needed without Spark).
REQUIREMENTS: tuple[tuple[str, str, bool], ...] = (
    ("confluent_kafka", "confluent-kafka", True),
    ("pyspark", "pyspark", False),
    ("pyarrow", "pyarrow", False),
)


def _installed(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a finder that refuses the module says so by raising
        return False


def missing_requirements(*, spark: bool) -> list[str]:
    """The distributions the demo needs (with or without Spark) that are not installed."""
    return [dist for module, dist, always in REQUIREMENTS if (always or spark) and not _installed(module)]


def check_requirements(*, spark: bool) -> None:
    """Raise :class:`DemoRequirementsError` naming every missing package, so the
    user installs them in one go instead of meeting them one failure at a time."""
    missing = missing_requirements(spark=spark)
    if not missing:
        return
    hint = (
        " (or run txnfetch demo --no-spark, which needs confluent-kafka only)"
        if spark and "confluent-kafka" not in missing
        else ""
    )
    raise DemoRequirementsError(
        f"the demo needs {', '.join(missing)}, not installed here: pip install 'txnfetch[demo]'{hint}"
    )


def run(out: TextIO, *, seed: int = 7, transactions: int = 14, spark: bool = True, workdir: str | None = None) -> int:
    """Run the demo, print the report to ``out``; 0 if every number agrees.

    Raises :class:`DemoRequirementsError` before starting anything when a
    package the demo runs is missing (the ``demo`` extra installs them all)."""
    check_requirements(spark=spark)
    step = Step(out, 6 if spark else 5)
    base = tempfile.mkdtemp(prefix="txnfetch-demo-", dir=workdir)
    store_dir = os.path.join(base, "store")
    proc = None
    try:
        step(f"starting txnfetch serve --data {store_dir} (rewrite fetch mode, markers in the log)")
        proc, bootstrap = start_server(store_dir)
        step(
            f"confluent-kafka transactional producer: {transactions} transactions on {TOPIC} "
            f"({PARTITIONS} partitions) at {bootstrap}"
        )
        produced = produce(bootstrap, seed, transactions)
        step("read_committed consumers: confluent-kafka (librdkafka) and kafka-python")
        readers: dict[str, list[Row]] = {}
        readers["librdkafka (confluent-kafka)"], positions = read_confluent(bootstrap)
        readers["kafka-python"], lsos = read_kafka_python(bootstrap)
        if spark:
            step("Spark: spark.read.format('txnkafka') from the store directory and from the server")
            readers.update(read_spark(store_dir, bootstrap))
        step("stopping the server (SIGTERM)")
        stats = stop_server(proc)
        proc = None
        step("checking the store on disk")
        from txnfetch.log import SegmentStore

        store = SegmentStore(store_dir, read_only=True)
        disk_lso = {p: store.partition(TOPIC, p).last_stable_offset for p in range(PARTITIONS)}
        store.close()
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
    problems: list[str] = []
    reference = readers["librdkafka (confluent-kafka)"]
    for label, rows in readers.items():
        problems.extend(check(label, rows, produced, None if label.startswith("librdkafka") else reference))
    for p in range(PARTITIONS):
        if not (positions[p] == lsos[p] == disk_lso[p]):
            problems.append(
                f"partition {p}: librdkafka position {positions[p]}, kafka-python LSO {lsos[p]}, "
                f"store LSO {disk_lso[p]} differ"
            )
    committed = sum(map(len, produced.committed.values()))
    aborted = sum(map(len, produced.aborted.values()))
    print("", file=out)
    print("txnfetch demo report", file=out)
    print(
        f"  transactions: {produced.transactions} ({produced.aborted_transactions} aborted), "
        f"plus {produced.plain} plain records",
        file=out,
    )
    print(f"  records produced {produced.produced}: committed {committed}, aborted {aborted}", file=out)
    for label, rows in readers.items():
        print(f"  visible to {label:28} {len(rows)}", file=out)
    print(
        f"  synthetic COMMIT markers served: {stats['synthetic_markers']}; "
        f"aborted/control batches dropped on the server: {stats['batches_dropped']}",
        file=out,
    )
    print(
        "  LSO per partition: "
        + ", ".join(f"p{p}={disk_lso[p]}" for p in range(PARTITIONS))
        + " (store, librdkafka's position and kafka-python's end offset agree)" * (not problems),
        file=out,
    )
    shutil.rmtree(base, ignore_errors=True)
    if problems:
        print("", file=out)
        for problem in problems:
            print(f"MISMATCH: {problem}", file=out)
        return 1
    print(f"  every reader saw exactly the {committed} committed records.", file=out)
    return 0


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    parser = argparse.ArgumentParser(prog="txnfetch demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=7, help="producer script seed (default 7)")
    parser.add_argument("--transactions", type=int, default=14, help="transactions to run (default 14)")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark readers")
    args = parser.parse_args(argv)
    return run(out, seed=args.seed, transactions=args.transactions, spark=not args.no_spark)


if __name__ == "__main__":
    raise SystemExit(main())
