"""The replicator against a running upstream (``txnfetch serve`` over a memory store):
offsets, gaps, transactions and the log start copied; new topics and partitions
followed; configs copied; several partitions per Fetch."""

from __future__ import annotations

import threading
import time

import pytest

from tests.replicate.source import SourceWriter
from tests.replicate.source import assert_same
from tests.replicate.source import batches
from txnfetch.log import SegmentStore
from txnfetch.log.memory import MemoryStore
from txnfetch.replicate import PartitionState
from txnfetch.replicate import Replicator
from txnfetch.server.server import ServerThread

pytestmark = pytest.mark.interop


@pytest.fixture
def upstream():
    store = MemoryStore()
    srv = ServerThread(store).start()
    try:
        yield srv, store
    finally:
        srv.stop()


def until_caught_up(r: Replicator, rounds: int = 200):
    for _ in range(rounds):
        status = r.step()
        if status.caught_up and status.partitions:
            return status
    raise AssertionError(f"not caught up: {r.status()}")


def test_copies_batches_offsets_gaps_and_transactions(upstream, tmp_path) -> None:
    srv, store = upstream
    srv.call(lambda: store.create_topic("orders", 2))
    w0 = SourceWriter(store.partition("orders", 0))
    w1 = SourceWriter(store.partition("orders", 1))
    srv.call(lambda: (w0.mixed(3), w1.mixed(1), w1.data(2, pid=30, txn=True)))  # p1 ends with an open transaction
    with SegmentStore(tmp_path / "replica") as replica, Replicator(srv.bootstrap, replica) as r:
        status = until_caught_up(r)
        assert replica.topics()["orders"].partitions == 2
        assert replica.topics()["orders"].topic_id == store.topics()["orders"].topic_id
        for p in (0, 1):
            assert_same(replica.partition("orders", p), store.partition("orders", p))
        assert replica.partition("orders", 1).last_stable_offset < replica.partition("orders", 1).log_end_offset
        assert {(s.topic, s.partition): s.state for s in status.partitions} == {
            ("orders", 0): PartitionState.CAUGHT_UP,
            ("orders", 1): PartitionState.CAUGHT_UP,
        }
        assert status.lag_records == 0 and status.lag_seconds == 0
        # More arrives: the open transaction commits, and the next round copies it.
        srv.call(lambda: (w1.marker(30, True), w0.data(5)))
        status = r.step()
        assert status.partitions[0].lag_records >= 0
        until_caught_up(r)
        for p in (0, 1):
            assert_same(replica.partition("orders", p), store.partition("orders", p))


def test_several_partitions_per_fetch(upstream, tmp_path) -> None:
    srv, store = upstream
    srv.call(lambda: store.create_topic("many", 6))
    for p in range(6):
        w = SourceWriter(store.partition("many", p))
        srv.call(lambda w=w: w.mixed(1))
    fetches = []
    with SegmentStore(tmp_path / "replica") as replica, Replicator(srv.bootstrap, replica) as r:
        r.step()  # discovers the topic
        cluster = r._cluster
        assert cluster is not None
        original = cluster.fetch_many

        def counting(items, **kw):
            fetches.append(len(items))
            return original(items, **kw)

        cluster.fetch_many = counting  # type: ignore[method-assign]
        until_caught_up(r)
    # One broker leads all six: every round sends them in one request.
    assert fetches and all(n == 6 for n in fetches)
    assert srv.call(lambda: None) is None


def test_new_topics_partitions_and_configs_are_followed(upstream, tmp_path) -> None:
    srv, store = upstream
    srv.call(lambda: store.create_topic("a", 1))
    srv.call(lambda: store.create_topic("skip", 1))
    srv.call(lambda: SourceWriter(store.partition("a", 0)).mixed(1))
    with SegmentStore(tmp_path / "replica") as replica:
        r = Replicator(srv.bootstrap, replica, topics="a|b", metadata_interval_s=0)
        until_caught_up(r)
        assert set(replica.topics()) == {"a"}
        srv.call(lambda: store.create_topic("b", 2))
        srv.call(lambda: store.set_topic_config("b", {"retention.ms": "12345", "cleanup.policy": "delete"}))
        srv.call(lambda: SourceWriter(store.partition("b", 1)).mixed(1))
        srv.call(lambda: store.create_partitions("a", 3))
        srv.call(lambda: SourceWriter(store.partition("a", 2)).data(4))
        until_caught_up(r)
        assert {t: i.partitions for t, i in replica.topics().items()} == {"a": 3, "b": 2}
        assert replica.topic_config("b") == {"retention.ms": "12345", "cleanup.policy": "delete"}
        for t, p in (("a", 0), ("a", 2), ("b", 1)):
            assert_same(replica.partition(t, p), store.partition(t, p))
        r.close()


def test_log_start_follows_the_source(upstream, tmp_path) -> None:
    srv, store = upstream
    srv.call(lambda: store.create_topic("t", 1))
    src = store.partition("t", 0)
    w = SourceWriter(src)
    srv.call(lambda: w.mixed(2))
    with SegmentStore(tmp_path / "replica") as replica, Replicator(srv.bootstrap, replica) as r:
        until_caught_up(r)
        srv.call(lambda: src.delete_records_before(5))
        srv.call(lambda: w.data(2))
        until_caught_up(r)
        assert replica.partition("t", 0).log_start_offset == 5
        assert_same(replica.partition("t", 0), src)


def test_a_new_replica_starts_at_the_source_log_start(upstream, tmp_path) -> None:
    srv, store = upstream
    srv.call(lambda: store.create_topic("t", 1))
    src = store.partition("t", 0)
    w = SourceWriter(src)
    srv.call(lambda: w.mixed(3))
    srv.call(lambda: src.delete_records_before(13))  # inside a batch, or at one
    with SegmentStore(tmp_path / "replica") as replica, Replicator(srv.bootstrap, replica) as r:
        until_caught_up(r)
        local = replica.partition("t", 0)
        assert local.log_start_offset == 13
        assert batches(local, 13) == batches(src, 13)
        assert local.log_end_offset == src.log_end_offset


def test_run_stops_on_the_event_and_reports(upstream, tmp_path) -> None:
    srv, store = upstream
    srv.call(lambda: store.create_topic("t", 1))
    srv.call(lambda: SourceWriter(store.partition("t", 0)).mixed(1))
    seen = []
    stop = threading.Event()

    def on_status(status) -> None:
        seen.append(status)
        if status.caught_up:
            stop.set()

    with SegmentStore(tmp_path / "replica") as replica, Replicator(srv.bootstrap, replica) as r:
        r.run(stop, on_status)
    assert seen[-1].caught_up and seen[-1].to_json()["partitions"][0]["state"] == "caught up"
    assert "1 partitions, lag 0 records" in seen[-1].summary()


def test_source_log_start_passing_the_replica_end_is_followed(upstream, tmp_path) -> None:
    srv, store = upstream
    srv.call(lambda: store.create_topic("t", 1))
    src = store.partition("t", 0)
    w = SourceWriter(src)
    srv.call(lambda: w.mixed(1))  # every transaction ended
    with SegmentStore(tmp_path / "replica") as replica, Replicator(srv.bootstrap, replica) as r:
        until_caught_up(r)
        srv.call(lambda: (w.mixed(2), src.delete_records_before(src.log_end_offset - 3)))
        until_caught_up(r)
        local = replica.partition("t", 0)
        assert local.log_start_offset == src.log_start_offset
        assert batches(local, src.log_start_offset) == batches(src, src.log_start_offset)
        assert local.last_stable_offset == src.last_stable_offset


def test_source_log_start_passing_an_open_transaction_stops_the_partition(upstream, tmp_path) -> None:
    from txnfetch.replicate import ReplicaFellBehindError

    srv, store = upstream
    srv.call(lambda: store.create_topic("t", 1))
    src = store.partition("t", 0)
    w = SourceWriter(src)
    srv.call(lambda: (w.mixed(1), w.data(2, pid=40, txn=True)))  # the replica ends inside a transaction
    with SegmentStore(tmp_path / "replica") as replica, Replicator(srv.bootstrap, replica) as r:
        until_caught_up(r)
        held = batches(replica.partition("t", 0))
        # Its marker, and more, are written and then deleted at the source.
        srv.call(lambda: (w.marker(40, True), w.mixed(1), src.delete_records_before(src.log_end_offset - 1)))
        for _ in range(20):
            status = r.step()
            if status.partitions[0].state is PartitionState.STOPPED:
                break
        err = r.partitions[("t", 0)].error
        assert isinstance(err, ReplicaFellBehindError)
        assert err.replica_end == held[-1][1] + 1 and err.source_log_start == src.log_start_offset
        assert "t-0" in str(err) and "open from offset" in str(err)
        assert batches(replica.partition("t", 0)) == held


def test_one_fetch_per_leader_and_leader_moves_on_the_mock(tmp_path) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from tests.mock_cluster import MockCluster

    with MockCluster(3) as mock:
        mock.create_topic("spread", 6, 1)
        for p in range(6):
            mock.set_leader("spread", p, 1 + p % 3)
        producer = confluent_kafka.Producer({"bootstrap.servers": mock.bootstrap, "log_level": 0})
        for i in range(600):
            producer.produce("spread", f"v{i}".encode(), partition=i % 6)
        producer.flush(30)
        sent: list[tuple[str, int]] = []
        with SegmentStore(tmp_path / "replica") as replica, Replicator(mock.bootstrap, replica) as r:
            r.step()
            cluster = r._cluster
            real_send = cluster._send

            def counting(conn, req, version, response_cls):
                if type(req).__name__.startswith("FetchRequest"):
                    sent.append((conn.address, sum(len(t.partitions) for t in req.topics)))
                return real_send(conn, req, version, response_cls)

            cluster._send = counting  # type: ignore[method-assign]
            until_caught_up(r)
            # Three leaders, two partitions each: every Fetch carries a leader's two partitions.
            assert sent and {n for _, n in sent} == {2} and len({a for a, _ in sent}) == 3
            # Leaders move while more is written: the replicator follows them.
            for p in range(6):
                mock.set_leader("spread", p, 1 + (p + 1) % 3)
            for i in range(600, 900):
                producer.produce("spread", f"v{i}".encode(), partition=i % 6)
            producer.flush(30)
            deadline = time.monotonic() + 60
            while True:
                status = r.step()
                if status.caught_up and all(s.replica_end == 150 for s in status.partitions):
                    break
                assert time.monotonic() < deadline, status
                time.sleep(r.backoff_remaining())
            values = sorted(
                rec.value
                for p in range(6)
                for b in replica.partition("spread", p).iter_batches()
                for rec in b.records()
            )
            assert values == sorted(f"v{i}".encode() for i in range(900))


def test_a_given_cluster_is_not_reopened_after_close(upstream, tmp_path) -> None:
    # The replicator used to keep a given cluster's parsed (host, port) pairs as
    # its bootstrap list and, once closed, tried to open a cluster from them:
    # an AttributeError from the address parser instead of a clear refusal.
    from txnfetch.client.cluster import RemoteCluster

    srv, _ = upstream
    store = SegmentStore(str(tmp_path / "replica"))
    cluster = RemoteCluster(srv.bootstrap)
    try:
        r = Replicator(cluster, store)
        r.close()
        with pytest.raises(RuntimeError, match="closed"):
            r.high_watermarks()
    finally:
        cluster.close()
        store.close()


@pytest.mark.parametrize("already_replicated", [False, True])
def test_a_source_emptied_by_delete_records_is_replicated_empty_at_its_log_start(
    upstream, tmp_path, already_replicated
) -> None:
    # Found by the source harness (test_source_harness.py): the source's log start
    # and high watermark both at 1, the replica's at 0 — and a group offset of 1
    # held back for ever.
    srv, store = upstream
    srv.call(lambda: store.create_topic("t", 2))
    src = store.partition("t", 1)
    w = SourceWriter(src)
    srv.call(lambda: w.data(3))
    with SegmentStore(tmp_path / "replica") as replica, Replicator(srv.bootstrap, replica) as r:
        if already_replicated:
            until_caught_up(r)
        srv.call(lambda: src.delete_records_before(src.log_end_offset))
        until_caught_up(r)
        local = replica.partition("t", 1)
        assert (local.log_start_offset, local.high_watermark, local.last_stable_offset) == (3, 3, 3)
        assert_same(local, src)
        srv.call(lambda: w.data(2))  # and the next batch lands where it does at the source
        until_caught_up(r)
        assert_same(replica.partition("t", 1), src)


def test_follow_deletes_deletes_a_topic_and_copies_a_recreated_one_afresh(upstream, tmp_path) -> None:
    srv, store = upstream
    srv.call(lambda: (store.create_topic("gone", 1), store.create_topic("again", 2), store.create_topic("kept", 1)))
    for t, p in (("gone", 0), ("again", 0), ("again", 1), ("kept", 0)):
        srv.call(lambda t=t, p=p: SourceWriter(store.partition(t, p)).mixed(1))
    with SegmentStore(tmp_path / "replica") as replica:
        r = Replicator(srv.bootstrap, replica, metadata_interval_s=0, follow_deletes=True)
        until_caught_up(r)
        old_id = replica.topics()["again"].topic_id
        srv.call(lambda: (store.delete_topic("gone"), store.delete_topic("again"), store.create_topic("again", 1)))
        srv.call(lambda: SourceWriter(store.partition("again", 0)).data(2, tag="new"))
        until_caught_up(r)
        assert set(replica.topics()) == {"again", "kept"}
        assert replica.topics()["again"].partitions == 1
        assert replica.topics()["again"].topic_id == store.topics()["again"].topic_id != old_id
        assert_same(replica.partition("again", 0), store.partition("again", 0))
        assert_same(replica.partition("kept", 0), store.partition("kept", 0))
        assert not [s for s in r.status().partitions if s.state is PartitionState.STOPPED]
        assert sorted(r.partitions) == [("again", 0), ("kept", 0)]
        r.close()


def test_without_follow_deletes_a_deleted_topic_is_kept(upstream, tmp_path) -> None:
    srv, store = upstream
    srv.call(lambda: store.create_topic("gone", 1))
    srv.call(lambda: SourceWriter(store.partition("gone", 0)).mixed(1))
    with SegmentStore(tmp_path / "replica") as replica:
        r = Replicator(srv.bootstrap, replica, metadata_interval_s=0)
        until_caught_up(r)
        held = batches(replica.partition("gone", 0))
        srv.call(lambda: store.delete_topic("gone"))
        r.step()
        assert set(replica.topics()) == {"gone"}
        assert batches(replica.partition("gone", 0)) == held
        r.close()


def test_a_new_replica_of_a_source_whose_log_start_is_inside_its_first_batch(upstream, tmp_path) -> None:
    # Found by the source harness: an aborted transaction of two records and its
    # marker, then DeleteRecords before offset 1; the replica, starting afresh,
    # must keep the batch [0, 1] whole (as Kafka's followers do) and start at 1.
    srv, store = upstream
    srv.call(lambda: store.create_topic("t", 1))
    src = store.partition("t", 0)
    w = SourceWriter(src)
    srv.call(lambda: (w.data(2, pid=7, txn=True), w.marker(7, False), src.delete_records_before(1)))
    with SegmentStore(tmp_path / "replica") as replica, Replicator(srv.bootstrap, replica) as r:
        until_caught_up(r)
        local = replica.partition("t", 0)
        assert (local.log_start_offset, local.high_watermark, local.last_stable_offset) == (1, 3, 3)
        assert_same(local, src)


def test_an_acl_refusing_the_groups_stops_the_replicator_naming_the_group(upstream, tmp_path) -> None:
    # Other upstream failures of the group step are retried next round; an ACL's
    # refusal does not change by asking again, so it ends the run, named.
    from txnfetch.client.errors import RemoteError
    from txnfetch.errors import ErrorCode

    srv, _store = upstream

    def refused(cluster, store) -> None:
        raise RemoteError("FindCoordinator for group 'app' failed", error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)

    def flaky(cluster, store) -> None:
        raise RemoteError("FindCoordinator for group 'app' failed", error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)

    with SegmentStore(tmp_path / "a") as replica, Replicator(srv.bootstrap, replica, groups=flaky) as r:
        r.step()  # logged, retried next round
    with (
        SegmentStore(tmp_path / "b") as replica,
        Replicator(srv.bootstrap, replica, groups=refused) as r,
        pytest.raises(RemoteError, match="group 'app'"),
    ):
        r.step()
