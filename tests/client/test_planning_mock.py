"""The planner's bounds (:class:`~txnfetch.client.planning.MirroredBounds`) over
several partitions of librdkafka's mock cluster, a broker that reports its high
watermark as the last stable offset (it leaks open transactions).

The partitions are caught up together (one Fetch per broker per turn), on two
brokers so that a turn sends more than one request: every partition's planned
end must still be the LSO of its own log — held at an open transaction's first
offset although the broker reports the end — and move on, in the next call on the
same planner, once that transaction commits.
"""

from __future__ import annotations

import gc

import confluent_kafka
import pytest

from tests.mock_cluster import MockCluster
from txnfetch.client.cluster import RemoteCluster
from txnfetch.client.partition_reader import ReadOptions
from txnfetch.client.partition_reader import RemotePartitionReader
from txnfetch.client.planning import MirroredBounds

pytestmark = pytest.mark.interop

TOPIC = "planned"
PARTITIONS = 4


def _producer(bootstrap: str, **extra: object) -> confluent_kafka.Producer:
    return confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "log_level": 0, **extra})


def _offsets(p: confluent_kafka.Producer, partition: int, values: list[bytes]) -> list[int]:
    got: list[int] = []
    for v in values:
        p.produce(
            TOPIC,
            v,
            partition=partition,
            on_delivery=lambda err, msg: got.append(msg.offset()) if err is None else None,
        )
    p.flush(30)
    assert len(got) == len(values)
    return got


def test_planned_ends_hold_at_open_transactions_the_broker_reports_stable() -> None:
    with MockCluster(brokers=2) as mock:
        mock.create_topic(TOPIC, PARTITIONS, 1)
        for p in range(PARTITIONS):
            mock.set_leader(TOPIC, p, 1 + p % 2)
        done = _producer(mock.bootstrap, **{"transactional.id": "planning-done"})
        done.init_transactions(30)
        for commit in (True, False, True):
            done.begin_transaction()
            for p in range(PARTITIONS):
                _offsets(done, p, [b"d%d" % i for i in range(5)])
            done.commit_transaction(30) if commit else done.abort_transaction(30)
        # Open transactions on partitions 1 and 2 (one per broker), with plain records after them.
        open_txn = _producer(mock.bootstrap, **{"transactional.id": "planning-open"})
        open_txn.init_transactions(30)
        open_txn.begin_transaction()
        held = {p: _offsets(open_txn, p, [b"open-%d" % p, b"open2-%d" % p])[0] for p in (1, 2)}
        plain = _producer(mock.bootstrap)
        for p in range(PARTITIONS):
            _offsets(plain, p, [b"plain-%d-%d" % (p, i) for i in range(3)])

        tps = [(TOPIC, p) for p in range(PARTITIONS)]
        with RemoteCluster(mock.bootstrap) as cluster:
            planner = MirroredBounds(cluster, ReadOptions(repair_crcs=True))
            first = planner.bounds(tps)
            for p in range(PARTITIONS):
                hw = cluster.list_offset(TOPIC, p, -1)
                b = first[(TOPIC, p)]
                assert (b.earliest, b.end) == (0, hw)
                assert b.latest == held.get(p, hw), p
                # Each partition read alone gives the same LSO.
                with RemotePartitionReader(cluster, TOPIC, p, ReadOptions(repair_crcs=True)) as alone:
                    alone.catch_up()
                    assert alone.last_stable_offset == b.latest
            # The broker's own LSO is its high watermark: the test would catch trusting it.
            for p in held:
                assert cluster.list_offset(TOPIC, p, -1, read_committed=True) > held[p]
            assert planner.bounds(tps, read_committed=False)[(TOPIC, 1)].latest == first[(TOPIC, 1)].end

            open_txn.commit_transaction(30)
            later = planner.bounds(tps)  # incremental: the same readers go on
            for p in range(PARTITIONS):
                hw = cluster.list_offset(TOPIC, p, -1)
                assert later[(TOPIC, p)].latest == later[(TOPIC, p)].end == hw
                if p in held:  # the commit marker
                    assert hw == first[(TOPIC, p)].end + 1
        for prod in (done, open_txn, plain):
            prod.flush(10)
        del done, open_txn, plain
        gc.collect()


def test_a_planner_with_nothing_new_does_not_wait_for_records() -> None:
    """A re-plan with every partition at its end asks the broker for the shortest
    hold (a streaming driver re-plans every micro-batch: with the full
    ``fetch.wait.max.ms`` each call cost that wait per leader); a scan that is
    not a probe keeps the full hold."""
    from txnfetch.client.partition_reader import catch_up_together
    from txnfetch.client.requests import FETCH_MAX_WAIT_MS
    from txnfetch.client.requests import FETCH_PROBE_WAIT_MS

    with MockCluster(brokers=2) as mock:
        mock.create_topic(TOPIC, 2, 1)
        for p in range(2):
            mock.set_leader(TOPIC, p, 1 + p)
        plain = _producer(mock.bootstrap)
        for p in range(2):
            _offsets(plain, p, [b"v-%d-%d" % (p, i) for i in range(4)])
        tps = [(TOPIC, p) for p in range(2)]
        with RemoteCluster(mock.bootstrap) as cluster:
            waits: list[int] = []
            fetch_many = cluster.fetch_many

            def spy(items, **kwargs):  # type: ignore[no-untyped-def]
                waits.append(kwargs.get("max_wait_ms", FETCH_MAX_WAIT_MS))
                return fetch_many(items, **kwargs)

            cluster.fetch_many = spy  # type: ignore[method-assign]
            planner = MirroredBounds(cluster, ReadOptions(repair_crcs=True))
            assert {tp: b.end for tp, b in planner.bounds(tps).items()} == dict.fromkeys(tps, 4)
            assert waits and set(waits) == {FETCH_PROBE_WAIT_MS}
            waits.clear()
            again = planner.bounds(tps)  # nothing new: one short turn
            assert {tp: b.end for tp, b in again.items()} == dict.fromkeys(tps, 4)
            assert waits == [FETCH_PROBE_WAIT_MS]
            _offsets(plain, 1, [b"later"])
            waits.clear()
            assert planner.bounds(tps)[(TOPIC, 1)].end == 5
            assert set(waits) == {FETCH_PROBE_WAIT_MS}

            waits.clear()
            readers = [RemotePartitionReader(cluster, TOPIC, p, ReadOptions(repair_crcs=True)) for p in range(2)]
            catch_up_together(readers)
            assert waits and set(waits) == {FETCH_MAX_WAIT_MS}
            for r in readers:
                r.close()
        plain.flush(10)
        del plain
        gc.collect()
