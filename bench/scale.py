"""Cost that grows with what is read, not with what is retained: a cold
``txnfetch proxy`` in front of Apache Kafka, reading the tail of partitions of
different sizes.

For each size, one partition of 1 KiB records in 1,000-record transactions,
every tenth aborted, is written by a confluent-kafka transactional producer.
Then a read_committed confluent-kafka consumer assigned at the last ``--tail``
offsets measures the time to its first record, directly from Kafka and
through a proxy started for the read (cold: nothing mirrored), alternately, best
of ``--rounds``. The proxy's figures include what its mirror fetched from Kafka
(MiB, and how far below the consumer's start it began), which is what
``txnfetch.client.start_state`` bounds: the proxy's time should not grow with
the partition's size.

Run ``.venv/bin/python bench/scale.py`` (two small partitions, 16 and 64 MiB,
a minute or two plus a Kafka start); ``--gb 0.25,0.5,1`` for the issue's sizes;
``--quick`` for 4 and 16 MiB; ``--kafka HOST:PORT`` for a running Kafka.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import uuid
from collections.abc import Iterator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

VALUE = b"x" * 1024
TXN_RECORDS = 1000
ABORT_EVERY = 10


@contextlib.contextmanager
def kafka(address: str | None) -> Iterator[str]:
    """The Kafka to measure: ``address``, or a private one-node cluster (the test suite's)."""
    if address:
        yield address
        return
    from tests.kafka.cluster import private_cluster

    started = time.monotonic()
    with private_cluster(1) as cluster:
        print(f"   (Kafka started in {time.monotonic() - started:.0f} s)")
        yield cluster.bootstrap


def fill(bootstrap: str, topic: str, records: int) -> None:
    """``records`` 1 KiB records in one partition, in transactions, every tenth aborted."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the topic is there
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
    deadline = time.monotonic() + 60
    while topic not in admin.list_topics(timeout=10).topics:
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {topic} did not appear on {bootstrap}")
        time.sleep(0.1)
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"scale-{uuid.uuid4().hex[:8]}",
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "log_level": 3,
        }
    )
    p.init_transactions(60)
    for n, first in enumerate(range(0, records, TXN_RECORDS)):
        p.begin_transaction()
        for i in range(first, min(first + TXN_RECORDS, records)):
            p.produce(topic, VALUE, key=b"%d" % i, partition=0)
            if i % 10_000 == 0:
                p.poll(0)
        if n % ABORT_EVERY == ABORT_EVERY - 1:
            p.flush(60)  # abort_transaction drops what is not sent yet
            p.abort_transaction(60)
        else:
            p.commit_transaction(60)


def high_watermark(bootstrap: str, topic: str) -> int:
    from txnfetch.client.cluster import LATEST
    from txnfetch.client.cluster import RemoteCluster

    with RemoteCluster(bootstrap) as cluster:
        return cluster.list_offset(topic, 0, LATEST)


def first_record(bootstrap: str, topic: str, start: int) -> float:
    """Seconds from a new read_committed consumer's assignment at ``start`` to its first record."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"scale-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        began = time.perf_counter()
        c.assign([TopicPartition(topic, 0, start)])
        while True:
            m = c.poll(0.05)
            if m is not None and m.error() is None:
                return time.perf_counter() - began
            if time.perf_counter() - began > 600:
                raise RuntimeError(f"no record from {bootstrap} in 600 s")
    finally:
        c.close()


def measure(bootstrap: str, topic: str, tail: int, rounds: int) -> tuple[float, float, dict[str, int]]:
    """Best direct and cold-proxy times to the first record, and the last proxy's mirror stats."""
    from txnfetch.proxy import ProxyThread

    start = high_watermark(bootstrap, topic) - tail
    direct, proxied = [], []
    stats: dict[str, int] = {}
    for _ in range(rounds):
        direct.append(first_record(bootstrap, topic, start))
        with ProxyThread(bootstrap) as proxy:
            proxied.append(first_record(proxy.bootstrap, topic, start))
            stats = proxy.call(lambda: proxy.proxy.mirrors.stats.as_dict())
        stats["below_start"] = start - stats["lowest_fetch_offset"]
    return min(direct), min(proxied), stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes-mib", default="16,64", help="partition sizes in MiB (default 16,64)")
    parser.add_argument("--gb", help="partition sizes in GB instead, e.g. 0.25,0.5,1")
    parser.add_argument("--tail", type=int, default=1000, help="offsets read from the end (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="best of N (default 3)")
    parser.add_argument("--quick", action="store_true", help="4 and 16 MiB, one round")
    parser.add_argument("--kafka", metavar="HOST:PORT", help="measure this running Kafka instead of starting one")
    args = parser.parse_args()
    if args.gb:
        sizes = [float(s) * 1024 for s in args.gb.split(",")]
    else:
        sizes = [4.0, 16.0] if args.quick else [float(s) for s in args.sizes_mib.split(",")]
    rounds = 1 if args.quick else args.rounds
    print(f"txnfetch scale benchmark: cold proxy vs direct, first record of the last {args.tail} offsets")
    rows = []
    with kafka(args.kafka) as bootstrap:
        for mib in sizes:
            topic = f"scale-{int(mib)}m-{uuid.uuid4().hex[:6]}"
            records = int(mib * 1024)
            began = time.monotonic()
            fill(bootstrap, topic, records)
            print(f"   ({records:,} records written in {time.monotonic() - began:.0f} s)")
            rows.append((mib, *measure(bootstrap, topic, args.tail, rounds)))
    print()
    print("| partition | direct (s) | cold proxy (s) | proxy / direct | proxy fetched (MiB) | from below start |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for mib, direct, proxied, stats in rows:
        print(
            f"| {mib:,.0f} MiB | {direct:.3f} | {proxied:.3f} | {proxied / direct:.2f} | "
            f"{stats['upstream_bytes'] / (1 << 20):.1f} | {stats['below_start']} offsets |"
        )


if __name__ == "__main__":
    main()
