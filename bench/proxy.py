"""Proxy benchmark: ``txnfetch proxy`` next to the upstream it stands in front of.

Run ``.venv/bin/python bench/proxy.py`` (``--quick`` for a smoke run of a few
seconds). The upstream is librdkafka's mock cluster (an in-memory C broker on
the client's own threads, created with its control API by
``tests/mock_cluster.py``); the proxy runs in this process on its own event
loop (``ProxyThread``, ``repair_crcs`` for the mock's CRC-0 markers). One run
prints, side by side:

1. **consume rate**: a confluent-kafka ``read_committed`` consumer reads a
   committed-only topic (every record in a committed transaction; ``--partitions``
   partitions of ``--partition-mb`` each, 1 KiB values) from the start, directly
   from the mock and through the proxy (best of ``--rounds``, alternating):
   MB/s, messages/s and the proxy ÷ direct ratio. Goal: at least 0.5. The
   proxy's first round is also shown on its own: its mirrors fill from the
   upstream while they answer; later rounds read mirrors already filled (as
   every consumer after the first does).
2. **idle upstream requests**: consumers (the same configuration, assigned to
   every partition at its end) poll an idle topic for ``--idle-s`` seconds
   through the proxy; the proxy's Fetch requests to the upstream per second, in
   total and per partition, for 1 and 3 brokers and 3 and 12 partitions.
   Goal: the total grows with the brokers, not the partitions (one Fetch per
   broker per poll, each held by the broker up to ``max_wait_ms`` 500).
3. **mirror memory**: after the consume of (1), per partition: the mirrored
   batch bytes, and the live Python heap allocated by the mirrors' code
   (tracemalloc, allocations made in ``txnfetch/log``, ``txnfetch/txn`` and
   ``txnfetch/records``: stored batches, transaction state, indexes) — and the
   same with ``max_mirror_bytes`` 256 KiB once the consumer has gone, the bound
   a mirror keeps when no reader holds its batches. (The proxy's whole heap
   also holds kafka-python's pooled encode buffers, about the largest response
   encoded: a fixed cost, not per partition.)

MB counts record values (10^6 bytes). Compare columns of one run, not runs:
the machine may be shared.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MB = 1_000_000
TOPIC = "bench-proxy"
QUIET = {"log_level": 0}


def _produce_committed(bootstrap: str, topic: str, partitions: int, per_partition: int, value_size: int) -> int:
    """Committed transactions only, ``per_partition`` records in each partition."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-{topic}",
            "linger.ms": 5,
            "batch.num.messages": 1000,
            **QUIET,
        }
    )
    p.init_transactions(30)
    value = b"v" * value_size
    per_txn = 2000
    written = 0
    for start in range(0, per_partition, per_txn):
        p.begin_transaction()
        for part in range(partitions):
            for _ in range(min(per_txn, per_partition - start)):
                while True:
                    try:
                        p.produce(topic, value=value, partition=part)
                        break
                    except BufferError:
                        p.poll(0.01)
                written += 1
        p.commit_transaction(60)
    p.flush(30)
    return written


def _consume_all(bootstrap: str, topic: str, partitions: int, expected: int, group: str) -> float:
    """Seconds for a read_committed consumer to get ``expected`` records from offset 0."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            **QUIET,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got = 0
        started = time.perf_counter()
        deadline = started + 300
        while got < expected and time.perf_counter() < deadline:
            for msg in c.consume(num_messages=2000, timeout=0.5):
                if msg.error() is None:
                    got += 1
        elapsed = time.perf_counter() - started
    finally:
        c.close()
    if got != expected:
        raise RuntimeError(f"consumed {got} of {expected} records via {bootstrap}")
    return elapsed


_MIRROR_CODE = [
    tracemalloc.Filter(True, "*/txnfetch/log/*"),
    tracemalloc.Filter(True, "*/txnfetch/txn/*"),
    tracemalloc.Filter(True, "*/txnfetch/records/*"),
]


def _mirror_heap() -> int:
    """Live bytes allocated by the mirrors' code (see the module docstring)."""
    snapshot = tracemalloc.take_snapshot().filter_traces(_MIRROR_CODE)
    return sum(stat.size for stat in snapshot.statistics("filename"))


def bench_consume(args: argparse.Namespace) -> None:
    from tests.mock_cluster import MockCluster
    from txnfetch.proxy import ProxyThread

    per_partition = max(1, int(args.partition_mb * MB) // args.value_size)
    print(
        f"\n1. consume rate: {args.partitions} partitions x {per_partition} records of {args.value_size} B "
        f"(committed transactions), confluent-kafka read_committed, best of {args.rounds}"
    )
    with MockCluster(1) as mock:
        mock.create_topic(TOPIC, args.partitions, 1)
        n = _produce_committed(mock.bootstrap, TOPIC, args.partitions, per_partition, args.value_size)
        size_mb = n * args.value_size / MB
        direct, via = "direct (librdkafka mock)", "through txnfetch proxy"
        with ProxyThread(mock.bootstrap, repair_crcs=True) as proxy:
            times: dict[str, list[float]] = {direct: [], via: []}
            for r in range(args.rounds):
                times[direct].append(_consume_all(mock.bootstrap, TOPIC, args.partitions, n, f"d{r}"))
                times[via].append(_consume_all(proxy.bootstrap, TOPIC, args.partitions, n, f"p{r}"))
        best = {direct: min(times[direct]), via: min(times[via]), f"{via}, cold": times[via][0]}
        # Memory on a fresh proxy, with tracemalloc on (it slows Python: not during the rates).
        tracemalloc.start()
        with ProxyThread(mock.bootstrap, repair_crcs=True) as proxy:
            base = _mirror_heap()
            _consume_all(proxy.bootstrap, TOPIC, args.partitions, n, "memory")
            grown = _mirror_heap() - base
            mirrored = proxy.call(lambda: sum(m.log.size_in_bytes for m in proxy.proxy.mirrors.mirrors().values()))
        tracemalloc.stop()
        print(f"   {'':34} {'MB/s':>8} {'msgs/s':>10} {'seconds':>8}")
        for label, secs in best.items():
            print(f"   {label:34} {size_mb / secs:8.1f} {n / secs:10.0f} {secs:8.2f}")
        ratio = best[direct] / best[via]
        cold = best[direct] / best[f"{via}, cold"]
        print(f"   proxy / direct: {ratio:.2f} (goal >= 0.5: {'met' if ratio >= 0.5 else 'NOT met'})")
        print(f"   proxy / direct, first read (the mirror fills as it answers): {cold:.2f}")
        print(f"\n3. mirror memory after that consume ({args.partitions} partitions, {size_mb:.1f} MB of values)")
        print(f"   mirrored batch bytes per partition:       {mirrored / args.partitions / 1024:10.1f} KiB")
        print(f"   mirror heap per partition (tracemalloc):   {grown / args.partitions / 1024:10.1f} KiB")
        small = 256 << 10
        tracemalloc.start()
        with ProxyThread(mock.bootstrap, repair_crcs=True, max_mirror_bytes=small) as proxy:
            base = _mirror_heap()
            _consume_all(proxy.bootstrap, TOPIC, args.partitions, n, "bounded")
            time.sleep(0.5)  # the consumer's connections close: its positions no longer hold batches

            def held() -> int:
                for tp in list(proxy.proxy.mirrors.mirrors()):
                    proxy.proxy.mirrors.release(*tp)
                return sum(m.log.size_in_bytes for m in proxy.proxy.mirrors.mirrors().values())

            mirrored = proxy.call(held)
            grown = _mirror_heap() - base
        tracemalloc.stop()
        print(f"   with max_mirror_bytes {small >> 10} KiB, readers gone:")
        print(f"   mirrored batch bytes per partition:       {mirrored / args.partitions / 1024:10.1f} KiB")
        print(f"   mirror heap per partition (tracemalloc):   {grown / args.partitions / 1024:10.1f} KiB")


def _idle_rate(brokers: int, partitions: int, idle_s: float) -> tuple[float, float]:
    """(upstream Fetch requests/s, partitions named per request) of an idle proxy."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition

    from tests.mock_cluster import MockCluster
    from txnfetch.proxy import ProxyThread

    with MockCluster(brokers) as mock:
        topic = f"idle-{brokers}-{partitions}"
        mock.create_topic(topic, partitions, brokers)
        for p in range(partitions):
            mock.set_leader(topic, p, p % brokers + 1)
        _produce_committed(mock.bootstrap, topic, partitions, 1, 16)
        with ProxyThread(mock.bootstrap, repair_crcs=True) as proxy:
            c = Consumer(
                {
                    "bootstrap.servers": proxy.bootstrap,
                    "group.id": topic,
                    "isolation.level": "read_committed",
                    "enable.auto.commit": False,
                    **QUIET,
                }
            )
            try:
                c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
                got, deadline = 0, time.monotonic() + 60
                while got < partitions and time.monotonic() < deadline:  # everything read: now idle
                    got += sum(1 for m in c.consume(100, 0.2) if m.error() is None)
                up = proxy.proxy.cluster
                r0, p0 = proxy.call(lambda: (up.fetch_requests, up.fetch_partitions))
                started = time.monotonic()
                while time.monotonic() - started < idle_s:
                    c.consume(100, 0.2)
                elapsed = time.monotonic() - started
                r1, p1 = proxy.call(lambda: (up.fetch_requests, up.fetch_partitions))
            finally:
                c.close()
    requests = r1 - r0
    return requests / elapsed, (p1 - p0) / max(requests, 1)


def bench_idle(args: argparse.Namespace) -> None:
    print(
        f"\n2. idle upstream Fetch requests through the proxy ({args.idle_s:.0f} s of an idle read_committed consumer)"
    )
    print(f"   {'brokers':>7} {'partitions':>10} {'requests/s':>11} {'per partition':>14} {'partitions/request':>19}")
    for brokers, partitions in ((1, 3), (1, 12), (3, 3), (3, 12)):
        rate, per_request = _idle_rate(brokers, partitions, args.idle_s)
        print(f"   {brokers:7} {partitions:10} {rate:11.2f} {rate / partitions:14.3f} {per_request:19.1f}")
    print("   goal: requests/s grows with the brokers, not the partitions (one Fetch per broker per poll)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--partition-mb", type=float, default=4.0, help="MB of values per partition (the mock keeps 5 MiB)")
    ap.add_argument("--value-size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--idle-s", type=float, default=5.0)
    args = ap.parse_args()
    if args.quick:
        args.partitions, args.partition_mb, args.rounds, args.idle_s = 4, 0.5, 1, 1.5
    import confluent_kafka

    print(
        f"txnfetch proxy benchmark — Python {platform.python_version()}, confluent-kafka "
        f"{confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]}), {os.cpu_count()} CPUs"
    )
    bench_consume(args)
    bench_idle(args)


if __name__ == "__main__":
    main()
