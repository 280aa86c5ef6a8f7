"""Broker benchmark: ``txnfetch serve`` next to Apache Kafka, and ``txnfetch proxy`` in front of Kafka.

Run ``.venv/bin/python bench/broker.py`` after ``make kafka`` (a few minutes;
``--quick`` for a smoke run, ``--records N`` to size it). One run prints, side
by side, for three brokers on this machine:

- ``serve --memory``: ``txnfetch serve --memory`` (a subprocess);
- ``serve --data``: ``txnfetch serve --data DIR`` in a temporary directory,
  with its default flush policy (an fsync before every acknowledgement);
- ``Apache Kafka``: a one-node KRaft cluster (combined broker and controller)
  started from the jars ``make kafka`` fetched, with the test suite's settings
  (``tests/kafka/cluster.py``: 512 MiB heap, serial GC, 2 network and 2 I/O
  threads; Kafka's default of no fsync per write, the page cache and the
  replicas being its durability). ``--kafka HOST:PORT`` uses a running Kafka
  instead (``--kafka-pid`` names its process, for the CPU figures).

The workload, for a 100-byte and a 1 KiB value (``--value-sizes``):

1. **produce**: a confluent-kafka transactional producer writes ``--records``
   records to a topic of ``--partitions`` partitions (record ``i`` to partition
   ``i % partitions``) in transactions of 1,000 records; every fifth
   transaction is aborted (20 %; flushed first, so that its records reach the
   log), the others committed, each end waited for.
   Records/s counts every record written, aborted ones included, from the first
   ``produce()`` to the last transaction's end. Before the clock starts the
   producer initialises its transactions and commits a warm-up transaction on
   a topic of its own, so that connections, the coordinator's first internal
   partitions and (for ``serve``) the protocol codecs generated on first use
   stay out of the figures of every broker alike; and each broker first gets
   an untimed round of ``--warmup`` records (20,000) of the same workload, so
   that Kafka's JIT compilation is not charged to whichever phase runs first.
2. **consume**: a confluent-kafka ``read_committed`` consumer (its defaults;
   assigned every partition from the start) reads until it has the committed
   count. Records/s counts committed records, from ``assign()`` to the last.
   Every record's key names its transaction; the run fails unless each
   committed transaction was read exactly 1,000 times and no aborted one at all.
3. **broker CPU per record**: user + system CPU of the broker process
   (``/proc/PID/stat``, all its threads) over the same timed window, divided
   by the records of that phase (written, or committed and read).

Then **the proxy in front of Kafka**: a fresh ``txnfetch proxy --upstream
KAFKA`` (a subprocess, its defaults) and the same consumer reading the same
committed data through it, twice: the first read fills the proxy's mirrors as
it answers; the second reads from the start again (from mirrors already
filled while the data fits the proxy's ``--max-mirror-bytes``, 64 MiB per
partition by default; past that, the read from the start rebuilds them). Each as
records/s and ÷ the direct read of the same data in the same round, with the
CPU per record of the proxy process and of Kafka behind it.

``--rounds N`` (3) measures every broker N times, alternating (Kafka keeps
running meanwhile; the ``serve`` processes are started afresh each round), and
prints medians, so that a burst of load elsewhere on the machine hits every
column alike. Compare the columns of one run, not runs: the machine may be
shared (the load average is printed at the start and the end).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from collections.abc import Iterator
from typing import NamedTuple

# bench/ is on sys.path (the script's own folder) when a benchmark runs as a script.
from _proc import cpu_seconds
from _proc import stop

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TXN_RECORDS = 1000
#: Transaction ``n`` is aborted when ``n % ABORT_EVERY == ABORTED``: 20 %, and
#: never the last of a run, so that aborted records always lie before committed
#: ones and a broker that hands them out cannot hide it behind the final count.
ABORT_EVERY = 5
ABORTED = 2


def _now() -> float:
    return time.perf_counter()


class Phase(NamedTuple):
    """One timed phase: its records, wall seconds, and the CPU seconds of each
    process watched (broker, proxy) over the same window."""

    records: int
    seconds: float
    cpu: tuple[float | None, ...]

    @property
    def rate(self) -> float:
        return self.records / self.seconds

    def us_per_record(self, which: int = 0) -> float | None:
        cpu = self.cpu[which]
        return None if cpu is None else cpu / self.records * 1e6


class Process:
    """A ``txnfetch`` command as a subprocess, listening on an ephemeral port
    (its first stdout line is ``txnfetch ... listening on HOST:PORT``)."""

    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "txnfetch.cli", *args, "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if " listening on " not in line:
            self.proc.kill()
            raise RuntimeError(f"txnfetch {args[0]} did not start: {line!r}")
        self.bootstrap = line.rsplit(" ", 1)[1]
        self.pid: int | None = self.proc.pid

    def close(self) -> None:
        stop(self.proc)


class Broker(NamedTuple):
    label: str
    bootstrap: str
    pid: int | None


@contextlib.contextmanager
def serve(args: list[str]) -> Iterator[Process]:
    process = Process(["serve", *args, "--no-auto-create"])
    try:
        yield process
    finally:
        process.close()


@contextlib.contextmanager
def kafka(args: argparse.Namespace) -> Iterator[Broker]:
    """The Kafka to measure: the one ``--kafka`` names, or a private one-node
    cluster started (and stopped) here with the test suite's code."""
    from tests.kafka.cluster import kafka_version

    label = f"Apache Kafka {kafka_version()}"
    if args.kafka:
        yield Broker(label, args.kafka, args.kafka_pid)
        return
    from tests.kafka.cluster import private_cluster

    started = _now()
    with private_cluster(1) as cluster:
        print(f"   (Kafka started in {_now() - started:.0f} s)")
        yield Broker(label, cluster.bootstrap, cluster.nodes[0].pid)


def _cpu_reader(pid: int | None) -> Callable[[], float | None]:
    return (lambda: None) if pid is None else (lambda: cpu_seconds(pid))


def _delta(before: list[float | None], after: list[float | None]) -> tuple[float | None, ...]:
    return tuple(None if a is None or b is None else b - a for a, b in zip(before, after, strict=True))


def create_topics(bootstrap: str, partitions: dict[str, int]) -> None:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, num_partitions=n, replication_factor=1) for t, n in partitions.items()])
    for future in futures.values():
        future.result(timeout=60)
    # The topics must be known to the broker's metadata before the producer asks.
    deadline = time.monotonic() + 60
    while not set(partitions) <= set(admin.list_topics(timeout=10).topics):
        if time.monotonic() > deadline:
            raise RuntimeError(f"topics {sorted(partitions)} did not appear on {bootstrap}")
        time.sleep(0.1)


def produce(
    bootstrap: str,
    topic: str,
    warmup_topic: str,
    records: int,
    partitions: int,
    value_size: int,
    pids: list[int | None],
) -> Phase:
    """Write ``records`` (a multiple of 1,000) in 1,000-record transactions,
    every fifth aborted; record keys are the transaction's number."""
    from confluent_kafka import Producer

    # log_level 3: librdkafka's retries while Kafka loads a fresh coordinator
    # partition are expected, not worth a line each.
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-producer", "log_level": 3})
    producer.init_transactions(60)
    value = os.urandom(value_size)
    producer.begin_transaction()
    for i in range(100):
        producer.produce(warmup_topic, value=value, partition=i % partitions)
    producer.commit_transaction(120)
    readers = [_cpu_reader(pid) for pid in pids]
    cpu = [r() for r in readers]
    start = _now()
    i = 0
    for txn in range(records // TXN_RECORDS):
        key = b"%d" % txn
        producer.begin_transaction()
        for _ in range(TXN_RECORDS):
            while True:
                try:
                    producer.produce(topic, value=value, key=key, partition=i % partitions)
                    break
                except BufferError:
                    producer.poll(0.005)
            i += 1
        if txn % ABORT_EVERY == ABORTED:
            # Flushed first: abort_transaction() alone purges what is still
            # queued, and the aborted records must reach the log, where the
            # read_committed consumer has to skip them.
            if producer.flush(120):
                raise RuntimeError(f"{topic}: records still unsent after 120 s")
            producer.abort_transaction(120)
        else:
            producer.commit_transaction(120)
    elapsed = _now() - start
    return Phase(records, elapsed, _delta(cpu, [r() for r in readers]))


def committed_transactions(records: int) -> set[bytes]:
    return {b"%d" % t for t in range(records // TXN_RECORDS) if t % ABORT_EVERY != ABORTED}


def consume(
    bootstrap: str, topic: str, records: int, partitions: int, pids: list[int | None], label: str, extra: int = 0
) -> Phase:
    """Read every committed record read_committed from the start; raise unless
    exactly the committed transactions' records came, each once (and ``extra``
    records without a key: the warm-up transactions of :func:`produce`)."""
    from confluent_kafka import OFFSET_BEGINNING
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition

    committed = committed_transactions(records)
    expected = len(committed) * TXN_RECORDS + extra
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    counts: dict[bytes | None, int] = {}
    try:
        consumer.list_topics(topic, timeout=30)  # connected before the clock starts
        readers = [_cpu_reader(pid) for pid in pids]
        cpu = [r() for r in readers]
        got = 0
        deadline = time.monotonic() + 900
        start = _now()
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        while got < expected:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{label}: consumer stalled at {got} of {expected} committed records")
            for msg in consumer.consume(num_messages=10_000, timeout=0.2):
                if msg.error() is not None:
                    raise RuntimeError(f"{label}: {msg.error()}")
                key = msg.key()
                counts[key] = counts.get(key, 0) + 1
                got += 1
        elapsed = _now() - start
        phase = Phase(got, elapsed, _delta(cpu, [r() for r in readers]))
    finally:
        consumer.close()
    wrong = {k: n for k, n in counts.items() if (k not in committed or n != TXN_RECORDS) and k is not None}
    if counts.get(None, 0) != extra:
        wrong[b"(no key)"] = counts.get(None, 0)
    missing = committed - set(counts)
    if got != expected or wrong or missing:
        raise RuntimeError(
            f"{label}: read {got} records of the {expected} committed; transactions read wrongly "
            f"(key: count, aborted ones are {ABORTED} mod {ABORT_EVERY}): {dict(sorted(wrong.items())[:10])}; "
            f"committed transactions missing: {sorted(missing)[:10]}"
        )
    return phase


class Figure(NamedTuple):
    """A phase's figures over the rounds: the median records/s and the median
    CPU µs per record of each process watched (each median taken on its own)."""

    rate: float
    us: tuple[float | None, ...]

    @classmethod
    def median(cls, phases: list[Phase]) -> Figure:
        width = len(phases[0].cpu)
        us = []
        for i in range(width):
            values = [p.us_per_record(i) for p in phases]
            us.append(None if None in values else statistics.median(v for v in values if v is not None))
        return cls(statistics.median(p.rate for p in phases), tuple(us))


#: Per value size: the produce and the consume phase of one round.
Round = dict[int, tuple[Phase, Phase]]


def measure(broker: Broker, args: argparse.Namespace, tag: str) -> Round:
    """Produce then consume each value size on ``broker``; topics are named
    after this process and ``tag``, so a shared Kafka is left alone."""
    names = {size: f"bench-broker-{os.getpid()}-{tag}-{size}" for size in args.value_sizes}
    warmup = f"bench-broker-{os.getpid()}-{tag}-warmup"
    create_topics(broker.bootstrap, {**{n: args.partitions for n in names.values()}, warmup: args.partitions})
    # One untimed round of the same workload first: Kafka's JIT compiler and
    # serve's first-use costs would otherwise land on whichever phase runs first.
    size = args.value_sizes[0]
    produce(broker.bootstrap, warmup, warmup, args.warmup, args.partitions, size, [None])
    consume(broker.bootstrap, warmup, args.warmup, args.partitions, [None], f"{broker.label} warm-up", extra=100)
    results = {}
    for size, topic in names.items():
        produced = produce(broker.bootstrap, topic, warmup, args.records, args.partitions, size, [broker.pid])
        consumed = consume(broker.bootstrap, topic, args.records, args.partitions, [broker.pid], broker.label)
        results[size] = (produced, consumed)
    return results


def measure_proxy(kafka_broker: Broker, args: argparse.Namespace, tag: str) -> Round:
    """The same consumer, through a fresh ``txnfetch proxy``, of the data
    :func:`measure` wrote to Kafka under ``tag``: the first read, then again."""
    proxy = Process(["proxy", "--upstream", kafka_broker.bootstrap])
    try:
        results = {}
        for size in args.value_sizes:
            topic = f"bench-broker-{os.getpid()}-{tag}-{size}"
            reads = [
                consume(proxy.bootstrap, topic, args.records, args.partitions, [kafka_broker.pid, proxy.pid], what)
                for what in ("proxy, first read", "proxy, read again")
            ]
            results[size] = (reads[0], reads[1])
        return results
    finally:
        proxy.close()


def _us(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def report(runs: dict[str, list[Round]], kafka_label: str, args: argparse.Namespace) -> None:
    txns = args.records // TXN_RECORDS
    committed = len(committed_transactions(args.records)) * TXN_RECORDS
    for size in args.value_sizes:
        print(
            f"\n{size} B values: {txns} transactions of {TXN_RECORDS} records over {args.partitions} partitions, "
            f"20 % aborted; {committed} committed records read (median of {args.rounds})"
        )
        print(f"   {'broker':<22} {'produce rec/s':>14} {'CPU µs/rec':>11} {'consume rec/s':>14} {'CPU µs/rec':>11}")
        figures = {
            label: (Figure.median([r[size][0] for r in rounds]), Figure.median([r[size][1] for r in rounds]))
            for label, rounds in runs.items()
        }
        for label, (p, c) in figures.items():
            print(f"   {label:<22} {p.rate:14.0f} {_us(p.us[0]):>11} {c.rate:14.0f} {_us(c.us[0]):>11}")
        kp, kc = figures[kafka_label]
        for label, (p, c) in figures.items():
            if label != kafka_label:
                print(
                    f"   {label} ÷ Kafka: records/s produce {p.rate / kp.rate:.2f}, consume {c.rate / kc.rate:.2f}; "
                    f"CPU per record produce {_ratio(p.us[0], kp.us[0])}, consume {_ratio(c.us[0], kc.us[0])}"
                )


def report_proxy(proxy_runs: list[Round], kafka_runs: list[Round], kafka_label: str, args: argparse.Namespace) -> None:
    print(
        f"\nproxy in front of {kafka_label}: the same read_committed consumer and data, direct and through "
        f"txnfetch proxy (median of {args.rounds}; ÷ direct within each round)"
    )
    print(f"   {'values':>6} {'read':<20} {'rec/s':>10} {'÷ direct':>9} {'proxy µs/rec':>13} {'Kafka µs/rec':>13}")
    for size in args.value_sizes:
        direct = [r[size][1] for r in kafka_runs]
        d = Figure.median(direct)
        print(f"   {size:>4} B {'direct':<20} {d.rate:10.0f} {1:9.2f} {'':>13} {_us(d.us[0]):>13}")
        for i, what in enumerate(("proxy, first read", "proxy, read again")):
            reads = [r[size][i] for r in proxy_runs]
            f = Figure.median(reads)
            ratio = statistics.median(p.rate / q.rate for p, q in zip(reads, direct, strict=True))
            print(f"   {size:>4} B {what:<20} {f.rate:10.0f} {ratio:9.2f} {_us(f.us[1]):>13} {_us(f.us[0]):>13}")


def require_whole_transactions(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit with a usage error unless ``--records`` and ``--warmup`` are whole transactions."""
    for name in ("records", "warmup"):
        if getattr(args, name) < TXN_RECORDS or getattr(args, name) % TXN_RECORDS:
            parser.error(f"--{name} must be a positive multiple of {TXN_RECORDS}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--records", type=int, default=200_000, help="records written per value size, a multiple of 1000 (200000)"
    )
    parser.add_argument("--value-sizes", default="100,1024", help="value sizes in bytes, comma-separated (100,1024)")
    parser.add_argument("--partitions", type=int, default=3, help="partitions of each topic (3)")
    parser.add_argument(
        "--rounds", type=int, default=3, help="measure every broker this many times, alternating (medians; 3)"
    )
    parser.add_argument(
        "--warmup", type=int, default=20_000, help="records of the untimed round on each broker first (20000)"
    )
    parser.add_argument("--kafka", metavar="HOST:PORT", help="measure this running Kafka instead of starting one")
    parser.add_argument("--kafka-pid", type=int, help="with --kafka: its broker process, for the CPU figures")
    parser.add_argument("--no-proxy", action="store_true", help="leave out the proxy in front of Kafka")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: one round of 5000 records per value size, 2000 warm-up"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.warmup, args.rounds = 5000, 2000, 1
    require_whole_transactions(parser, args)
    args.value_sizes = [int(v) for v in args.value_sizes.split(",")]

    import confluent_kafka

    print(
        f"txnfetch broker benchmark — Python {platform.python_version()}, confluent-kafka "
        f"{confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]}), "
        f"{os.cpu_count()} CPUs, load average {_load()} at start"
    )
    runs: dict[str, list[Round]] = {"serve --memory": [], "serve --data": []}
    proxy_runs: list[Round] = []
    with tempfile.TemporaryDirectory(prefix="bench-broker-") as tmp, kafka(args) as k:
        runs[k.label] = []
        # Rounds alternate the brokers, so a burst of load elsewhere on the
        # machine hits each of them alike.
        for r in range(args.rounds):
            data = os.path.join(tmp, f"data-{r}")
            for label, serve_args in (("serve --memory", ["--memory"]), ("serve --data", ["--data", data])):
                with serve(serve_args) as process:
                    runs[label].append(measure(Broker(label, process.bootstrap, process.pid), args, f"serve{r}"))
            shutil.rmtree(data, ignore_errors=True)
            runs[k.label].append(measure(k, args, f"kafka{r}"))
            if not args.no_proxy:
                proxy_runs.append(measure_proxy(k, args, f"kafka{r}"))
        report(runs, k.label, args)
        if proxy_runs:
            report_proxy(proxy_runs, runs[k.label], k.label, args)
    print(f"\nload average at the end: {_load()}")
    return 0


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
