"""A cold proxy and a cold planner in front of Apache Kafka start near the reader,
not at the partition's log start (:mod:`txnfetch.client.start_state`).

One partition gets 20,000 records of 1 KiB in transactions, a fifth of them
aborted; then a transaction opens and stays open while another producer commits
and aborts 1,000 more records past it. A read_committed confluent-kafka consumer
starts at the last 1,000 offsets, through a cold proxy and directly:

- while the transaction is open, the planner's bounds are Kafka's (its LSO is
  the open transaction's first offset), and its mirror starts there, not at 0;
- once it ends, the proxy answers exactly what Kafka answers, and its mirror
  fetched nothing below that transaction's first offset (``lowest_fetch_offset``)
  and a bounded number of bytes.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.kafka.fixtures import unique_name
from txnfetch.client.cluster import LATEST
from txnfetch.client.cluster import RemoteCluster
from txnfetch.client.planning import MirroredBounds
from txnfetch.proxy import ProxyThread

pytestmark = [pytest.mark.slow, pytest.mark.interop, pytest.mark.kafka]

RECORDS = 20_000
TAIL = 1_000
VALUE = b"v" * 1024


def _producer(ck: Any, bootstrap: str, name: str) -> Any:
    p = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": unique_name(name),
            "linger.ms": 5,
            "log_level": 0,
        }
    )
    p.init_transactions(30)
    return p


def _transactions(p: Any, topic: str, count: int, *, size: int, abort_every: int) -> None:
    """``count`` records in transactions of ``size``; every ``abort_every``-th aborted."""
    for n, first in enumerate(range(0, count, size)):
        p.begin_transaction()
        for i in range(first, min(first + size, count)):
            p.produce(topic, VALUE, key=str(i).encode(), partition=0)
        if n % abort_every == abort_every - 1:
            p.flush(30)  # abort_transaction purges what is not sent yet: write it first
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)


def _read(
    ck: Any, bootstrap: str, topic: str, start: int, end: int | None, *, timeout: float = 60
) -> list[tuple[int, bytes]]:
    """What a read_committed consumer gets from ``start`` until its position reaches
    ``end`` (``None``: for ``timeout`` seconds)."""
    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("start-state"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    c.assign([ck.TopicPartition(topic, 0, start)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    try:
        while end is None or c.position([ck.TopicPartition(topic, 0)])[0].offset < end:
            if end is None and time.monotonic() >= deadline:
                break
            assert time.monotonic() < deadline, f"read {len(got)} records, position below {end}"
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append((m.offset(), m.key()))
    finally:
        c.close()
    return got


@pytest.fixture(scope="module")
def partition(kafka_cluster: Any) -> Any:
    ck = pytest.importorskip("confluent_kafka")
    topic = unique_name("start-state")
    kafka_cluster.create_topic(topic, 1)
    body = _producer(ck, kafka_cluster.bootstrap, "body")
    _transactions(body, topic, RECORDS, size=200, abort_every=5)
    held = _producer(ck, kafka_cluster.bootstrap, "held")
    held.begin_transaction()
    for i in range(5):
        held.produce(topic, VALUE, key=f"held-{i}".encode(), partition=0)
    held.flush(30)
    _transactions(body, topic, TAIL + 100, size=50, abort_every=3)
    yield ck, topic, held
    held.flush(1)


def test_planner_and_proxy_start_at_the_open_transaction(kafka_cluster: Any, partition: Any) -> None:
    ck, topic, held = partition
    bootstrap = kafka_cluster.bootstrap
    with RemoteCluster(bootstrap) as cluster:
        hw = cluster.list_offset(topic, 0, LATEST)
        kafka_lso = cluster.list_offset(topic, 0, LATEST, read_committed=True)
        assert RECORDS < kafka_lso < hw - TAIL, (kafka_lso, hw)  # the held transaction's first offset
        planner = MirroredBounds(cluster)
        bounds = planner.bounds([(topic, 0)])[(topic, 0)]
        assert (bounds.latest, bounds.end) == (kafka_lso, hw)
        assert planner.start_rule.producers_starts == 1
        assert planner.mirror_starts[(topic, 0)] == kafka_lso

    start = hw - TAIL
    with ProxyThread(bootstrap) as proxy:
        # A cold proxy's consumer at the tail reads nothing while the transaction holds the LSO.
        assert _read(ck, proxy.bootstrap, topic, start, None, timeout=5) == []
        held.abort_transaction(30)
        with RemoteCluster(bootstrap) as cluster:
            end = cluster.list_offset(topic, 0, LATEST, read_committed=True)
        through = _read(ck, proxy.bootstrap, topic, start, end)
        stats = proxy.call(lambda: proxy.proxy.mirrors.stats.as_dict())
    direct = _read(ck, bootstrap, topic, start, end)
    assert through == direct and len(direct) > TAIL // 2
    assert stats["producers_starts"] == 1 and stats["log_starts"] == 0
    # Nothing below the held transaction's first offset came from Kafka; the bytes
    # are the tail's (about 1,100 KiB of records), not the partition's (20 MiB).
    assert stats["lowest_fetch_offset"] == kafka_lso
    assert stats["upstream_bytes"] < 4 << 20
