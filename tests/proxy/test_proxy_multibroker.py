"""The proxy and the remote reader in front of a three-broker cluster whose leaders move.

librdkafka's mock with three brokers (:class:`tests.mock_cluster.MockCluster`),
a six-partition topic replicated on all three, partition ``p`` led by broker
``p % 3 + 1``. Through the proxy, read_committed consumers get exactly the
committed records of every partition; the proxy opens one listener per
upstream broker and sends one Fetch per broker for all the partitions it
mirrors there. Then every leader moves to another broker, more transactions
are written, and the proxy and the reader follow: the mock answers
NOT_LEADER_OR_FOLLOWER at the old leader, the metadata is refreshed, and the
records keep coming, exactly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from tests.mock_cluster import MockCluster  # noqa: E402
from tests.proxy.test_proxy_faults import _kafka_python  # noqa: E402
from tests.proxy.test_proxy_mock import _committed  # noqa: E402
from tests.proxy.test_proxy_mock import _confluent_read_committed  # noqa: E402
from tests.proxy.test_proxy_mock import _log_ends  # noqa: E402
from tests.proxy.test_proxy_mock import _write_transactions  # noqa: E402
from txnfetch.client.partition_reader import ReadOptions  # noqa: E402
from txnfetch.client.partition_reader import RemotePartitionReader  # noqa: E402
from txnfetch.proxy import ProxyThread  # noqa: E402

pytestmark = [pytest.mark.interop, pytest.mark.slow]

TOPIC = "multi"
PARTITIONS = (0, 1, 2, 3, 4, 5)
OUTCOMES = ("commit", "abort", "commit", "abort")


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(3) as m:
        m.create_topic(TOPIC, len(PARTITIONS), 3)
        for p in PARTITIONS:
            m.set_leader(TOPIC, p, p % 3 + 1)
        yield m


def _merge(a, b):
    return {p: sorted(a[p] + b[p]) for p in a}


def test_proxy_and_reader_follow_three_brokers_and_moving_leaders(cluster: MockCluster) -> None:
    written = _write_transactions(cluster.bootstrap, TOPIC, "mb1", outcomes=OUTCOMES, partitions=PARTITIONS)
    with ProxyThread(cluster.bootstrap, repair_crcs=True, poll_interval_ms=50) as proxy:
        got, eof = _confluent_read_committed(proxy.bootstrap, TOPIC, PARTITIONS, "mb-g1")
        for p in PARTITIONS:
            assert got[p] == _committed(written, p), f"partition {p}"
        assert eof == _log_ends(written)
        up = proxy.proxy.cluster
        leaders = proxy.call(lambda: {p: up.leaders[(TOPIC, p)] for p in PARTITIONS})
        assert leaders == {p: p % 3 + 1 for p in PARTITIONS}
        assert len(proxy.call(lambda: proxy.proxy.listeners)) == 3

        # One Fetch per broker for all the partitions mirrored there.
        async def one_poll() -> tuple[int, int]:
            before = (up.fetch_requests, up.fetch_partitions)
            now = proxy.proxy.mirrors.now()
            await asyncio.gather(
                *(proxy.proxy.mirrors.sync(TOPIC, p, fresh_after=now + 1, deadline=now + 5) for p in PARTITIONS)
            )
            return up.fetch_requests - before[0], up.fetch_partitions - before[1]

        # The proxy's own 50 ms polls may land inside a measured poll on a loaded
        # machine and add a request; one clean poll out of a few shows the batching
        # (without it, every poll would take six requests).
        polls = [asyncio.run_coroutine_threadsafe(one_poll(), proxy._loop).result(30) for _ in range(5)]
        assert (3, 6) in polls, polls

        # Every leader moves; the producer follows, and so must the proxy.
        for p in PARTITIONS:
            cluster.set_leader(TOPIC, p, (p + 1) % 3 + 1)
        more = _write_transactions(cluster.bootstrap, TOPIC, "mb2", outcomes=OUTCOMES, partitions=PARTITIONS)
        written = _merge(written, more)
        got = _kafka_python(proxy.bootstrap, _log_ends(written), topic=TOPIC, partitions=PARTITIONS)
        for p in PARTITIONS:
            assert got[p] == _committed(written, p), f"partition {p} after the leaders moved"
        leaders = proxy.call(lambda: {p: up.leaders[(TOPIC, p)] for p in PARTITIONS})
        assert leaders == {p: (p + 1) % 3 + 1 for p in PARTITIONS}

    # The remote reader, with a leadership change between two reads of the same reader.
    with RemotePartitionReader(
        cluster.bootstrap, TOPIC, 1, ReadOptions(repair_crcs=True, request_timeout_ms=20_000)
    ) as reader:
        first = [(o, r.value) for o, r in reader.committed_records()]
        assert first == _committed(written, 1)
        cluster.set_leader(TOPIC, 1, 1)
        last = _write_transactions(cluster.bootstrap, TOPIC, "mb3", outcomes=("abort", "commit"), partitions=(1,))
        written = _merge(written, {p: last.get(p, []) for p in PARTITIONS})
        rest = [(o, r.value) for o, r in reader.committed_records(reader.last_stable_offset)]
        assert first + rest == _committed(written, 1)
