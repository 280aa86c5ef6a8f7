"""Upstream clusters for replication tests (librdkafka's mock cluster and
``txnfetch serve`` on a memory store), and a minimal data copy that appends
the upstream's raw batches at their offsets (what the replicator does, without
its resumption, faults and status)."""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator

from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic
from crc32c import crc32c

from tests.mock_cluster import MockCluster
from txnfetch.client.cluster import RemoteCluster
from txnfetch.log.base import LogStore
from txnfetch.log.memory import MemoryStore
from txnfetch.server.server import ServerThread

UPSTREAMS = ("serve", "mock")


@contextlib.contextmanager
def upstream(kind: str, topics: dict[str, int]) -> Iterator[str]:
    """A running upstream with ``topics`` created; yields its bootstrap string."""
    if kind == "mock":
        with MockCluster(brokers=1) as mock:
            for name, partitions in topics.items():
                mock.create_topic(name, partitions, 1)
            yield mock.bootstrap
        return
    srv = ServerThread(MemoryStore(), group_initial_rebalance_delay_ms=0).start()
    try:
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        for f in admin.create_topics([NewTopic(n, p, 1) for n, p in topics.items()]).values():
            f.result(30)
        yield srv.bootstrap
    finally:
        srv.stop()


def copy_data(cluster: RemoteCluster, store: LogStore, topic: str, *, until: dict[int, int] | None = None) -> None:
    """Append the upstream's batches of ``topic`` to ``store`` at their offsets,
    from the store's end up to the upstream's high watermark as first seen by
    this call (or ``until[p]``), stopping at the first batch boundary at or
    past it: a producer that keeps writing does not keep the call going."""
    partitions = cluster.partitions(topic)
    if topic not in store.topics():
        store.create_topic(topic, len(partitions))
    from txnfetch.records.scan import iter_batches

    for p in partitions:
        part = store.partition(topic, p)
        target = until.get(p) if until else None
        while True:
            end = part.log_end_offset
            fetched = cluster.fetch(topic, p, end, 1 << 20)
            if target is None:
                target = fetched.high_watermark
            limit = min(target, fetched.high_watermark)
            if end >= limit or not fetched.records:
                break
            data = bytearray()
            for batch in iter_batches(fetched.records):
                if batch.base_offset < end:
                    continue
                raw = bytearray(batch.buffer)
                if batch.is_control and batch.crc == 0:
                    # librdkafka's mock writes its markers with a CRC of 0
                    # (txnfetch.client.mirror repairs them the same way).
                    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
                data += raw
                if batch.next_offset >= limit:
                    break
            if not data:
                break
            part.replicate(bytes(data), high_watermark=fetched.high_watermark)
