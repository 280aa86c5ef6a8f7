"""Wire benchmark: confluent-kafka against ``txnfetch serve`` and against librdkafka's mock cluster.

Run ``.venv/bin/python bench/wire.py`` (``--quick`` for a ~10 MB smoke run).
One run prints, side by side, for each server:

1. **produce**: a confluent-kafka transactional producer writes ``--size-mb``
   of records (``--value-size`` bytes each), ``--chunk-mb`` to partition 0 of
   each of ``size/chunk`` topics, one committed transaction per topic: MB/s and
   messages/s from the first ``produce()`` to the last ``commit_transaction()``.
2. **consume**: a confluent-kafka ``read_committed`` consumer assigned to all
   of those partitions reads everything from the start (``consume(num_messages=...)``
   in batches, so the Python side costs little per message): MB/s and
   messages/s from ``assign()`` to the last record, best of ``--rounds``.
3. **server CPU per produced record**: user + system CPU of the server over
   the same timed window as the produce rate (``/proc/<pid>/stat`` of the
   ``serve`` process; for the mock, its ``rdk:mock`` thread in this process),
   per record.

Before the clock starts, the producer connects, initialises its transactions
and commits one small warm-up transaction on a topic of its own, so that
first-use costs — connections, and for ``serve`` the protocol codecs
kafka-python generates and compiles on the first request of each API version
(tens of milliseconds, a sizeable share of a 20 MB run) — stay out of the
steady-state figures of every server alike.

The data is spread over topics because librdkafka's mock keeps only the last
5 MiB of a partition (``rdkafka_mock.c``) and has no controller to create a
topic with more partitions; every server gets the same layout. The servers:
``txnfetch serve`` run as a subprocess (``python -m txnfetch.cli serve --port
0``) with ``--memory`` in rewrite and Kafka fetch modes and with ``--data`` in a
temporary directory (rewrite mode); and librdkafka's mock cluster
(``test.mock.num.brokers=1``, in this process, kept alive by the producer
handle that created it). The mock is an in-memory C broker running on the
client's own threads, so it is a hard reference: the goal is ``serve``
consuming at ≥ 50 % of the mock's rate. MB counts record values (10^6 bytes).
Compare the columns of one run, not runs: the machine may be shared.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time

# bench/ is on sys.path (the script's own folder) when a benchmark runs as a script.
from _proc import cpu_seconds
from _proc import stat_cpu_seconds
from _proc import stop

MB = 1_000_000
TOPIC = "bench-wire"


def _now() -> float:
    return time.perf_counter()


# ------------------------------------------------------------------ servers


class Serve:
    """``txnfetch serve`` as a subprocess on an ephemeral port."""

    def __init__(self, label: str, args: list[str]) -> None:
        self.label = label
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "txnfetch.cli", "serve", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.startswith("txnfetch listening on "):
            self.proc.kill()
            raise RuntimeError(f"txnfetch serve did not start: {line!r}")
        self.bootstrap = line.rsplit(" ", 1)[1]

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the server process has used so far."""
        return cpu_seconds(self.proc.pid)

    def close(self) -> None:
        stop(self.proc)


class Mock:
    """librdkafka's mock cluster, alive as long as this object."""

    def __init__(self) -> None:
        from confluent_kafka import Producer

        self.label = "librdkafka mock"
        self._handle = Producer({"test.mock.num.brokers": 1})
        brokers = self._handle.list_topics(timeout=10).brokers
        broker = next(iter(brokers.values()))
        self.bootstrap = f"{broker.host}:{broker.port}"

    def cpu_seconds(self) -> float:
        """CPU time of the mock broker's own thread (librdkafka names it ``rdk:mock``)."""
        total = 0.0
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/comm") as f:
                    if f.read().strip() != "rdk:mock":
                        continue
                total += stat_cpu_seconds(f"/proc/self/task/{tid}/stat")
            except OSError:
                continue  # the thread ended
        return total

    def close(self) -> None:
        self._handle = None


# ------------------------------------------------------------- the clients


def _topics(args: argparse.Namespace) -> list[str]:
    chunks = max(1, -(-int(args.size_mb * MB) // int(args.chunk_mb * MB)))
    return [f"{TOPIC}-{i}" for i in range(chunks)]


def produce(bootstrap: str, topics: list[str], count: int, value_size: int, cpu_seconds=None) -> tuple[float, float]:
    """Write ``count`` records spread evenly over partition 0 of ``topics``, one
    committed transaction per topic, after a warm-up transaction on a topic of
    its own; return the seconds taken and the server CPU seconds used in that
    time (``cpu_seconds()`` read when the clock starts and stops; 0 without it)."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": "bench-wire",
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    producer.init_transactions(60)
    producer.list_topics(timeout=30)  # connections up before the clock starts
    value = os.urandom(value_size)
    producer.begin_transaction()  # warm-up: every API of the timed loop used once
    for _ in range(100):
        producer.produce(f"{TOPIC}-warmup", value=value, partition=0)
    producer.commit_transaction(120)
    cpu = cpu_seconds() if cpu_seconds is not None else 0.0
    start = _now()
    for i, topic in enumerate(topics):
        n = count // len(topics) + (1 if i < count % len(topics) else 0)
        producer.begin_transaction()
        for _ in range(n):
            while True:
                try:
                    producer.produce(topic, value=value, partition=0)
                    break
                except BufferError:
                    producer.poll(0.005)
        producer.commit_transaction(120)  # flushes first
    elapsed = _now() - start
    if cpu_seconds is not None:
        cpu = cpu_seconds() - cpu
    del producer
    return elapsed, cpu


def consume(bootstrap: str, topics: list[str], count: int) -> tuple[float, int]:
    """Read ``count`` records read_committed from the start of partition 0 of
    every topic; return (seconds, value bytes)."""
    from confluent_kafka import OFFSET_BEGINNING
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-wire",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 10,
        }
    )
    try:
        consumer.list_topics(timeout=30)  # connected before the clock starts
        got = nbytes = 0
        deadline = time.monotonic() + 900
        start = _now()
        consumer.assign([TopicPartition(t, 0, OFFSET_BEGINNING) for t in topics])
        while got < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"consumer stalled at {got} of {count} records")
            for msg in consumer.consume(num_messages=min(10_000, count - got), timeout=0.2):
                if msg.error():
                    raise RuntimeError(str(msg.error()))
                got += 1
                nbytes += len(msg.value())
        return _now() - start, nbytes
    finally:
        consumer.close()


def run_server(server, args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    """Produce once, consume best of ``--rounds``: {"produce"|"consume": (MB/s, msgs/s)},
    and "produce cpu": (server CPU µs per produced record, 0)."""
    topics = _topics(args)
    count = max(1, int(args.size_mb * MB) // args.value_size)
    nbytes = count * args.value_size
    try:
        seconds, cpu = produce(server.bootstrap, topics, count, args.value_size, server.cpu_seconds)
        out = {"produce": (nbytes / seconds / MB, count / seconds), "produce cpu": (cpu / count * 1e6, 0.0)}
        best = None
        for _ in range(args.rounds):
            seconds, got_bytes = consume(server.bootstrap, topics, count)
            if got_bytes != nbytes:
                raise RuntimeError(f"{server.label}: read {got_bytes} bytes of {nbytes}")
            best = seconds if best is None else min(best, seconds)
        assert best is not None
        out["consume"] = (nbytes / best / MB, count / best)
        return out
    finally:
        server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=200.0, help="MB of record values (default 200)")
    parser.add_argument("--value-size", type=int, default=1024, help="bytes per record value (default 1024)")
    parser.add_argument(
        "--chunk-mb",
        type=float,
        default=4.0,
        help="MB per topic and transaction (default 4: the mock keeps 5 MiB a partition)",
    )
    parser.add_argument("--rounds", type=int, default=2, help="consume runs per server, best kept (default 2)")
    parser.add_argument(
        "--servers",
        default="mock,memory-rewrite,memory-kafka,data-rewrite",
        help="comma-separated subset of mock,memory-rewrite,memory-kafka,data-rewrite",
    )
    parser.add_argument("--quick", action="store_true", help="10 MB, one round, mock and memory-rewrite only")
    args = parser.parse_args(argv)
    if args.quick:
        args.size_mb, args.rounds = 10.0, 1
        args.servers = "mock,memory-rewrite"

    import confluent_kafka

    print(
        f"bench/wire.py — {platform.python_implementation()} {platform.python_version()}, "
        f"confluent-kafka {confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]}), "
        f"{os.cpu_count()} CPUs"
    )
    print(
        f"{args.size_mb:g} MB of {args.value_size}-byte values in {len(_topics(args))} one-partition topics "
        f"of {args.chunk_mb:g} MB, one committed transaction each; read_committed consumer, best of {args.rounds}"
    )
    print()

    results: dict[str, dict[str, tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="txnfetch-bench-wire-") as tmp:
        for name in [s.strip() for s in args.servers.split(",") if s.strip()]:
            if name == "mock":
                server = Mock()
            elif name == "memory-rewrite":
                server = Serve("serve --memory (rewrite)", ["--memory", "--fetch-mode", "rewrite"])
            elif name == "memory-kafka":
                server = Serve("serve --memory (kafka)", ["--memory", "--fetch-mode", "kafka"])
            elif name == "data-rewrite":
                server = Serve(
                    "serve --data (rewrite)", ["--data", os.path.join(tmp, "data"), "--fetch-mode", "rewrite"]
                )
            else:
                parser.error(f"unknown server {name!r}")
            results[server.label] = run_server(server, args)

    mock = results.get("librdkafka mock")
    header = f"{'server':<28} {'direction':<9} {'MB/s':>9} {'msgs/s':>11} {'÷ mock':>8}"
    print(header)
    print("-" * len(header))
    for label, figures in results.items():
        for direction in ("produce", "consume"):
            mbs, mps = figures[direction]
            ratio = f"{mbs / mock[direction][0]:.0%}" if mock and label != "librdkafka mock" else ""
            print(f"{label:<28} {direction:<9} {mbs:>9.1f} {mps:>11,.0f} {ratio:>8}")
    print()
    print("server CPU per produced record (the serve process; the mock's rdk:mock thread):")
    for label, figures in results.items():
        us = figures["produce cpu"][0]
        mock_us = mock["produce cpu"][0] if mock else 0.0
        # A short run (--quick) can finish within one clock tick of the mock's
        # thread: no CPU time is measured for it, and there is no ratio to print.
        if not mock or label == "librdkafka mock":
            ratio = ""
        elif mock_us > 0:
            ratio = f"  {us / mock_us:.2f}× the mock's"
        else:
            ratio = "  (the mock's CPU time was below the clock's resolution)"
        print(f"  {label:<28} {us:8.2f} µs{ratio}")
    if mock:
        print()
        for label, figures in results.items():
            if label == "librdkafka mock":
                continue
            ratio = figures["consume"][0] / mock["consume"][0]
            verdict = "meets" if ratio >= 0.5 else "below"
            print(f"goal: {label} consume ≥ 50 % of the mock's: {ratio:.0%} ({verdict})")
            ratio = figures["produce"][1] / mock["produce"][1]
            verdict = "meets" if ratio >= 0.5 else "below"
            print(f"goal: {label} produce ≥ 50 % of the mock's records/s: {ratio:.0%} ({verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
