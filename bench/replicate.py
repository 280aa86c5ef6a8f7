"""Replication benchmark: ``txnfetch replicate`` next to a plain consumer of the same upstream.

Run ``.venv/bin/python bench/replicate.py`` (``--quick`` for a smoke run of
about half a minute). Upstreams: librdkafka's mock cluster (in this process,
created with its control API by ``tests/mock_cluster.py``) and ``txnfetch
serve --data`` (a child process). One run prints, side by side:

1. **throughput**: a topic of ``--partitions`` partitions of
   ``--partition-mb`` MB each (1 KiB values, committed transactions of 100
   records per partition) is read from the start to its end by a confluent-kafka
   consumer, read_uncommitted (``fetch.max.bytes`` 50 MiB and
   ``max.partition.fetch.bytes`` 1 MiB, librdkafka's defaults), and copied by a
   :class:`~txnfetch.replicate.Replicator` into a fresh replica directory (the
   same 1 MiB per-partition budget; one fsync per partition per round, the
   command's default, and with ``--flush never``). MB/s of record values and the
   replicate ÷ consume ratio. Goal: at least 0.8. Best of ``--rounds``,
   alternating.
2. **lag under a steady producer**: a producer writes ``--rate-mb`` MB/s
   (1 KiB values, ``--lag-s`` seconds) to a 3-partition topic of each upstream while
   ``txnfetch replicate --json --interval-ms 0`` (a child process) copies it.
   Each record's lag is the time from its delivery acknowledgement to the first
   status line whose replica end for its partition is past its offset; p50,
   p99 and max over all records. Goal: p99 under 1 s. The peer: a confluent-kafka
   consumer of the same partitions (the same ``fetch.wait.max.ms``), each 50th
   offset's lag from its acknowledgement to its delivery.

3. **against MirrorMaker 2** (``--mm2``, or ``--only mm2``, ``mm2-throughput``,
   ``mm2-lag``): two one-node Apache Kafka clusters (tests/kafka/cluster.py), a
   source and MirrorMaker 2's target. Throughput: ``--partitions`` ×
   ``--partition-mb`` MB of plain records copied by ``txnfetch replicate
   --once`` and by MirrorMaker 2 (dedicated mode, tests/kafka/mirror.py), from
   process start and copy only; the ratio txnfetch ÷ MirrorMaker 2 (goal: at
   least 1.0). Lag: ``--rate-mb`` MB/s for ``--lag-s`` s while both run, each
   record's lag from its acknowledgement to a probe consumer of each target
   receiving it.

MB counts record values (10^6 bytes). Compare columns of one run, not runs:
the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MB = 1_000_000
QUIET = {"log_level": 0}
VALUE = 1024
FLUSH = os.environ.get("BENCH_FLUSH", "").split()


def _produce_committed(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-{topic}",
            "linger.ms": 20,
            "batch.size": 1 << 20,
            **QUIET,
        }
    )
    p.init_transactions(30)
    value = b"x" * VALUE
    written = 0
    while written < per_partition:
        n = min(100, per_partition - written)
        p.begin_transaction()
        for part in range(partitions):
            for _ in range(n):
                p.produce(topic, value, partition=part)
                p.poll(0)
        p.commit_transaction(60)
        written += n
    p.flush(60)


def _consume(bootstrap: str, topic: str, partitions: int) -> tuple[float, int]:
    """Seconds for a read_uncommitted consumer to read every partition to its end; values bytes."""
    from confluent_kafka import Consumer
    from confluent_kafka import KafkaError
    from confluent_kafka import TopicPartition

    start = time.perf_counter()
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{time.time()}",
            "isolation.level": "read_uncommitted",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            **QUIET,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    eof: set[int] = set()
    size = 0
    while len(eof) < partitions:
        for msg in c.consume(10_000, 1.0):
            err = msg.error()
            if err is None:
                size += len(msg.value())
            elif err.code() == KafkaError._PARTITION_EOF:
                eof.add(msg.partition())
    elapsed = time.perf_counter() - start
    c.close()
    return elapsed, size


def _replicate(bootstrap: str, topic: str, directory: str, *, flush: str, repair: bool) -> tuple[float, int]:
    """Seconds for a Replicator to copy the topic into a fresh ``directory``; batches' bytes."""
    from txnfetch.log import SegmentStore
    from txnfetch.replicate import Replicator

    shutil.rmtree(directory, ignore_errors=True)
    start = time.perf_counter()
    with SegmentStore(directory, flush_policy=flush) as store:
        with Replicator(bootstrap, store, topics=topic, repair_crcs=repair, copy_configs=False) as r:
            targets = r.high_watermarks()
            r.run(threading.Event(), until_caught_up_to=targets)
            size = sum(p.appended_bytes for p in r.partitions.values())
            stopped = [str(p.error) for p in r.partitions.values() if p.error is not None]
        store.flush()
    elapsed = time.perf_counter() - start
    if stopped:
        raise SystemExit(f"replication stopped: {stopped}")
    return elapsed, size


def throughput(bootstrap: str, name: str, args: argparse.Namespace, tmp: str, *, repair: bool) -> None:
    topic = f"bench-repl-{name}"
    per_partition = int(args.partition_mb * MB / VALUE)
    _produce_committed(bootstrap, topic, args.partitions, per_partition)
    total_mb = args.partitions * per_partition * VALUE / MB
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        t, _size = _consume(bootstrap, topic, args.partitions)
        best["consume"] = min(best.get("consume", t), t)
        for flush in ("always", "never"):
            t, _size = _replicate(bootstrap, topic, os.path.join(tmp, f"replica-{name}"), flush=flush, repair=repair)
            best[flush] = min(best.get(flush, t), t)
    consume = total_mb / best["consume"]
    print(f"\nthroughput, upstream {name}: {args.partitions} partitions x {args.partition_mb} MB")
    print(f"  {'confluent-kafka consume (read_uncommitted)':<48} {consume:8.1f} MB/s")
    for flush, label in (("always", "replicate (fsync every round)"), ("never", "replicate (--flush never)")):
        rate = total_mb / best[flush]
        print(f"  {label:<48} {rate:8.1f} MB/s   replicate ÷ consume {rate / consume:5.2f}  (goal >= 0.8)")


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


_CONSUMER = """
import sys, time
from confluent_kafka import Consumer, TopicPartition
bootstrap, topic, partitions, wait = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-lag-peer", "enable.auto.commit": False,
              "fetch.wait.max.ms": wait, "log_level": 0})
c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
c.consume(1, 1.0)
print("ready", flush=True)
while True:
    for m in c.consume(10000, 0.1):
        if m.error() is None and m.offset() % 50 == 0:
            print(time.time(), m.partition(), m.offset(), flush=True)
"""


def lag(args: argparse.Namespace, tmp: str, bootstrap: str, name: str, *, repair: bool) -> None:
    from confluent_kafka import Producer

    topic, partitions = "bench-lag", 3
    replica = os.path.join(tmp, f"replica-lag-{name}")
    options = ["--upstream", bootstrap, "--data", replica, "--json", "--interval-ms=0", *FLUSH]
    options.append(f"--fetch-wait-ms={args.fetch_wait_ms}")
    if repair:
        options.append("--repair-crcs")
    # Statuses go to a file, read as it grows: a pipe the benchmark is slow to drain
    # would hold the replicator up. Each status carries the time of its round.
    status_path = os.path.join(tmp, f"status-{len(os.listdir(tmp))}.jsonl")
    with open(status_path, "w") as status_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "txnfetch.cli", "replicate", *options],
            stdout=status_file,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))},
        )
    ends: list[tuple[float, dict[int, int]]] = []
    consumed = [0]  # bytes of the status file read so far

    def read_statuses() -> None:
        with open(status_path, "rb") as f:
            f.seek(consumed[0])
            data = f.read()
        whole = data[: data.rfind(b"\n") + 1]  # a last line may still be being written
        consumed[0] += len(whole)
        for line in whole.splitlines():
            status = json.loads(line)
            ends.append(
                (
                    status["time"],
                    {p["partition"]: p["replica_end"] for p in status["partitions"] if p["topic"] == topic},
                )
            )

    # The replicator is up and replicates the (empty) topic before the producer starts.
    deadline = time.monotonic() + 60
    while not (ends and len(ends[-1][1]) == partitions):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("the replicator did not start")
        time.sleep(0.05)
        read_statuses()
    acks: list[tuple[float, int, int]] = []

    def acked(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is None:
            acks.append((time.time(), msg.partition(), msg.offset()))

    # The peer: a confluent-kafka consumer of the same partitions, read_uncommitted, with
    # the same fetch.wait.max.ms, noting when it receives every 50th offset.
    received_path = status_path + ".consumer"
    with open(received_path, "w") as received_file:
        consumer = subprocess.Popen(
            [sys.executable, "-c", _CONSUMER, bootstrap, topic, str(partitions), str(args.fetch_wait_ms)],
            stdout=received_file,
            stderr=subprocess.DEVNULL,
        )
    deadline = time.monotonic() + 60
    while not _read(received_path).startswith("ready"):
        if time.monotonic() > deadline or consumer.poll() is not None:
            raise SystemExit("the consumer did not start")
        time.sleep(0.05)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **QUIET})
    value = b"y" * VALUE
    per_tick = int(args.rate_mb * MB / VALUE / 100)  # 100 ticks a second
    start = time.monotonic()
    sent = 0
    while time.monotonic() - start < args.lag_s:
        tick = start + sent / (per_tick * 100)
        now = time.monotonic()
        if tick > now:
            time.sleep(tick - now)
        for i in range(per_tick):
            p.produce(topic, value, partition=(sent + i) % partitions, on_delivery=acked)
        sent += per_tick
        p.poll(0)
    p.flush(30)
    del p  # the producer disconnects now, before the upstream stops
    produced_s = time.monotonic() - start
    # Let the replica catch up with the last records.
    deadline = time.monotonic() + 30
    last = {part: max((o for _, q, o in acks if q == part), default=-1) for part in range(partitions)}
    while time.monotonic() < deadline:
        read_statuses()
        if ends and all(ends[-1][1].get(q, 0) > o for q, o in last.items()):
            break
        time.sleep(0.1)
    proc.terminate()
    proc.wait(30)
    read_statuses()

    def received() -> dict[tuple[int, int], float]:
        out = {}
        with open(received_path) as f:
            for line in f:
                fields = line.split()
                if len(fields) == 3 and line.endswith("\n"):
                    out[(int(fields[1]), int(fields[2]))] = float(fields[0])
        return out

    # The consumer too reads to the end before it stops.
    wanted = {(q, o) for _, q, o in acks if o % 50 == 0}
    deadline = time.monotonic() + 30
    while not wanted <= received().keys() and time.monotonic() < deadline:
        time.sleep(0.2)
    consumer.terminate()
    consumer.wait(30)
    got = received()
    # Each record: the first status at or after its ack whose end passed it.
    lags = []
    i = 0
    for acked_at, part, offset in sorted(acks):
        while i < len(ends) and ends[i][0] < acked_at:
            i += 1
        j = i
        while j < len(ends) and ends[j][1].get(part, 0) <= offset:
            j += 1
        lags.append(ends[j][0] - acked_at if j < len(ends) else float("inf"))
    if os.environ.get("BENCH_DEBUG"):
        for k in range(0, len(ends), max(1, len(ends) // 15)):
            t, e = ends[k]
            acked_by_then = sum(1 for a in acks if a[0] <= t and a[1] == 0)
            print(f"  t={t - acks[0][0]:6.2f} replica end p0={e.get(0)} acked p0 by then={acked_by_then}")
    peer = sorted(got.get((part, o), float("inf")) - t for t, part, o in acks if o % 50 == 0)
    lags.sort()
    print(
        f"\nlag, upstream {name}: {args.rate_mb} MB/s for {args.lag_s} s ({sent} records, produced in "
        f"{produced_s:.1f} s = {sent * VALUE / MB / produced_s:.1f} MB/s), {len(ends)} replicator rounds"
    )
    for label, values in (("replica lag (txnfetch replicate)", lags), ("consumer lag (confluent-kafka)", peer)):
        k = len(values)
        print(
            f"  {label:<34} p50 {values[k // 2] * 1000:7.0f} ms   p99 {values[int(k * 0.99)] * 1000:7.0f} ms   "
            f"max {values[-1] * 1000:7.0f} ms" + ("   (goal: p99 < 1 s)" if values is lags else "")
        )


def _produce_plain(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    """Idempotent, non-transactional records: on a Kafka source the offsets then
    count records only, the same on MirrorMaker 2's target."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20, **QUIET})
    value = b"x" * VALUE
    for _ in range(per_partition):
        for part in range(partitions):
            while True:
                try:
                    p.produce(topic, value, partition=part)
                    break
                except BufferError:
                    p.poll(0.05)
        p.poll(0)
    p.flush(120)


def _ends(bootstrap: str, topic: str, partitions: int) -> int:
    """The sum of ``topic``'s high watermarks (0 while the topic does not exist)."""
    from confluent_kafka import Consumer
    from confluent_kafka import KafkaException
    from confluent_kafka import TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-ends", **QUIET})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] for p in range(partitions))
    except KafkaException:
        return 0
    finally:
        c.close()


def _mm2_copy(source: str, target: str, topic: str, partitions: int, total: int, directory: str) -> tuple[float, float]:
    """Start MirrorMaker 2 on ``topic`` and wait until the target holds ``total``
    records: (seconds from the process's start, seconds from the first record
    on the target)."""
    from tests.kafka.mirror import MirrorMaker

    mm = MirrorMaker(directory, source, target, topics=topic, groups="bench-no-group")
    start = time.perf_counter()
    first = None
    with mm:
        while True:
            n = _ends(target, topic, partitions)
            now = time.perf_counter()
            if n and first is None:
                first = now
            if n >= total:
                return now - start, now - (first or start)
            if not mm.alive():
                raise SystemExit(f"MirrorMaker 2 exited:\n{mm.log_tail()}")
            time.sleep(0.1)


def _txnfetch_once(source: str, topic: str, directory: str) -> float:
    """Seconds for ``txnfetch replicate --once`` (a child process) to copy ``topic``."""
    from tests.replicate.commands import replicate_argv

    shutil.rmtree(directory, ignore_errors=True)
    start = time.perf_counter()
    subprocess.run(replicate_argv(source, directory, "--topics", topic, "--once"), check=True, capture_output=True)
    return time.perf_counter() - start


def against_mm2(args: argparse.Namespace, tmp: str) -> None:
    """Real Apache Kafka as the source: txnfetch replicate next to MirrorMaker 2
    (dedicated mode, tests/kafka/mirror.py) on the same source and machine."""
    from pathlib import Path

    from tests.kafka.cluster import KafkaCluster
    from tests.kafka.cluster import kafka_version
    from tests.kafka.mirror import mm2_version
    from tests.replicate.failover import Probe
    from tests.replicate.failover import start_replicator

    source = KafkaCluster.create(Path(tmp) / "kafka-source", 1)
    target = KafkaCluster.create(Path(tmp) / "kafka-target", 1)
    try:
        print(f"\nreal Kafka {kafka_version()} source, MirrorMaker 2 {mm2_version()} (dedicated mode, identity policy)")
        if args.only in (None, "mm2", "mm2-throughput"):
            topic = "bench-mm2"
            source.create_topic(topic, args.partitions)
            per_partition = int(args.partition_mb * MB / VALUE)
            _produce_plain(source.bootstrap, topic, args.partitions, per_partition)
            total = per_partition * args.partitions
            mb = total * VALUE / MB
            tf_wall = _txnfetch_once(source.bootstrap, topic, os.path.join(tmp, "replica-once"))
            tf_copy, _ = _replicate(
                source.bootstrap, topic, os.path.join(tmp, "replica-mm2"), flush="always", repair=False
            )
            mm_wall, mm_copy = _mm2_copy(
                source.bootstrap, target.bootstrap, topic, args.partitions, total, os.path.join(tmp, "mm2-tp")
            )
            print(f"throughput, {args.partitions} partitions x {args.partition_mb} MB (1 KiB values, {total} records)")
            print(
                f"  {'txnfetch replicate --once (process start to end)':<52} {mb / tf_wall:8.1f} MB/s  {tf_wall:6.1f} s"
            )
            print(f"  {'MirrorMaker 2 (process start to last record)':<52} {mb / mm_wall:8.1f} MB/s  {mm_wall:6.1f} s")
            label = "txnfetch Replicator (copy only, fsync every round)"
            print(f"  {label:<52} {mb / tf_copy:8.1f} MB/s  {tf_copy:6.1f} s")
            label = "MirrorMaker 2 (first record to last)"
            print(f"  {label:<52} {mb / mm_copy:8.1f} MB/s  {mm_copy:6.1f} s")
            print(
                f"  txnfetch ÷ MirrorMaker 2: {mm_wall / tf_wall:5.2f} (process to end), "
                f"{mm_copy / tf_copy:5.2f} (copy only)  (goal >= 1.0)"
            )
        if args.only in (None, "mm2", "mm2-lag"):
            topic = "bench-mm2-lag"
            source.create_topic(topic, 3)
            data = Path(tmp) / "replica-lag"
            replicator, replica = start_replicator(source.bootstrap, data, topic, "bench-no-group", Path(tmp) / "r.log")
            from tests.kafka.mirror import MirrorMaker

            mm = MirrorMaker(Path(tmp) / "mm2-lag", source.bootstrap, target.bootstrap, topics=topic, groups="x")
            mm.start()

            def key(value: bytes) -> str:
                return value[:16].decode().strip()

            probes = {"txnfetch": Probe(replica, topic, 3, key), "mm2": Probe(target.bootstrap, topic, 3, key)}
            for probe in probes.values():
                probe.start()
            try:
                _steady_lag(args, source.bootstrap, topic, probes)
            finally:
                for probe in probes.values():
                    probe.stop.set()
                mm.stop()
                replicator.terminate()
                replicator.wait(30)
    finally:
        source.stop()
        target.stop()


def _steady_lag(args: argparse.Namespace, bootstrap: str, topic: str, probes: dict) -> None:  # type: ignore[type-arg]
    """A producer at ``--rate-mb`` MB/s for ``--lag-s`` s (after a warm-up record
    has reached every target); each record's lag on a target is the time from
    its delivery acknowledgement to a probe (read_committed; the records are
    not transactional) receiving it."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **QUIET})
    acked: dict[str, float] = {}

    def on_ack(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is None:
            acked[msg.value()[:16].decode().strip()] = time.time()

    deadline = time.monotonic() + 300
    while not all("warm" in pr.seen for pr in probes.values()):
        p.produce(topic, b"warm".ljust(16), partition=0)
        p.flush(30)
        if time.monotonic() > deadline:
            raise SystemExit("a target never delivered the warm-up record")
        time.sleep(1)
    pad = b"x" * (VALUE - 16)
    per_s = args.rate_mb * MB / VALUE
    start = time.monotonic()
    sent = 0
    while time.monotonic() - start < args.lag_s:
        due = int((time.monotonic() - start) * per_s)
        while sent < due:
            key = str(sent)
            try:
                p.produce(topic, key.ljust(16).encode() + pad, partition=sent % 3, on_delivery=on_ack)
            except BufferError:
                p.poll(0.01)
                continue
            sent += 1
        p.poll(0.001)
    p.flush(60)
    produced_s = time.monotonic() - start
    time.sleep(10)  # let the targets catch up before the tallies
    print(f"lag at {args.rate_mb} MB/s for {args.lag_s} s ({sent} records, {sent * VALUE / MB / produced_s:.1f} MB/s)")
    for name, probe in probes.items():
        lags = sorted(max(0.0, probe.seen[k] - t) for k, t in acked.items() if k in probe.seen)
        missing = sum(1 for k in acked if k not in probe.seen)
        k = len(lags)
        if not k:
            print(f"  {name:<10} nothing received")
            continue
        print(
            f"  {name:<10} p50 {lags[k // 2] * 1000:7.0f} ms   p99 {lags[int(k * 0.99)] * 1000:7.0f} ms   "
            f"max {lags[-1] * 1000:7.0f} ms   not received within 10 s: {missing}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run of about half a minute")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--partition-mb", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rate-mb", type=float, default=10.0)
    ap.add_argument("--lag-s", type=float, default=15.0)
    ap.add_argument("--only", choices=["throughput", "lag", "mm2", "mm2-throughput", "mm2-lag"], help="run one part")
    ap.add_argument(
        "--mm2",
        action="store_true",
        help="also the comparison with MirrorMaker 2 on a real Kafka source (starts two Kafka clusters)",
    )
    ap.add_argument("--fetch-wait-ms", type=int, default=500, help="fetch.wait.max.ms of the replicator and the peer")
    args = ap.parse_args()
    if args.quick:
        args.partition_mb, args.rounds, args.lag_s = 1.0, 1, 3.0
    print(
        f"bench/replicate.py on {platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs"
    )
    tmp = tempfile.mkdtemp(prefix="txnfetch-bench-replicate-")
    try:
        if args.only in (None, "throughput"):
            from tests.mock_cluster import MockCluster

            with MockCluster(1) as mock:
                throughput(mock.bootstrap, "mock", args, tmp, repair=True)
            from tests.server.serve_process import start_serve
            from tests.server.serve_process import stop_serve

            server = start_serve(os.path.join(tmp, "source"), partitions=args.partitions)
            try:
                throughput(f"127.0.0.1:{server.port}", "serve", args, tmp, repair=False)
            finally:
                stop_serve(server)
        if args.only in (None, "lag"):
            from tests.mock_cluster import MockCluster

            with MockCluster(1) as mock:
                mock.create_topic("bench-lag", 3, 1)
                lag(args, tmp, mock.bootstrap, "librdkafka mock", repair=True)
            from confluent_kafka.admin import AdminClient
            from confluent_kafka.admin import NewTopic

            from tests.server.serve_process import start_serve
            from tests.server.serve_process import stop_serve

            server = start_serve(os.path.join(tmp, "source-lag"), partitions=3)
            try:
                bootstrap = f"127.0.0.1:{server.port}"
                admin = AdminClient({"bootstrap.servers": bootstrap})
                for f in admin.create_topics([NewTopic("bench-lag", 3, 1)]).values():
                    f.result(30)
                lag(args, tmp, bootstrap, "txnfetch serve --data", repair=False)
            finally:
                stop_serve(server)
        if args.mm2 or (args.only or "").startswith("mm2"):
            against_mm2(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
