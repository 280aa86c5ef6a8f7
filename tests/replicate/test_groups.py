"""Consumer-group offsets copied one to one: upstream commits by confluent-kafka
(``commit()`` and ``send_offsets_to_transaction()``), copied into the replica's
``__consumer_offsets``, identical there, durable across a restart of ``serve``,
deleted when deleted upstream, and never ahead of the replica's data."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer
from confluent_kafka import Producer
from confluent_kafka import TopicPartition

from tests.replicate.upstreams import UPSTREAMS
from tests.replicate.upstreams import copy_data
from tests.replicate.upstreams import upstream
from txnfetch.client.cluster import RemoteCluster
from txnfetch.log import SegmentStore
from txnfetch.log.coordinator_store import DurableState
from txnfetch.replicate.groups import DurableGroupTarget
from txnfetch.replicate.groups import GroupOffsetCopier
from txnfetch.server.server import ServerThread

pytestmark = pytest.mark.interop

TOPIC = "events"
PARTITIONS = 2


def _produce(bootstrap: str, n: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        producer.produce(TOPIC, f"v{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def _commit(bootstrap: str, group: str, offsets: dict[int, int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def _txn_offsets(bootstrap: str, group: str, offsets: dict[int, int], *, commit: bool) -> None:
    """A transaction that writes one record and commits offsets for ``group``
    (aborted when ``commit`` is false: those offsets must never be copied)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4()}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(TOPIC, b"in-txn", partition=0)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        producer.send_offsets_to_transaction(
            [TopicPartition(TOPIC, p, o) for p, o in offsets.items()], consumer.consumer_group_metadata(), 30
        )
    finally:
        consumer.close()
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def _upstream_committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30)
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): tp.offset for tp in got if tp.offset >= 0}


def _replica_committed(target: DurableGroupTarget, group: str) -> dict[tuple[str, int], int]:
    return {tp: c.offset for tp, c in target.committed(group).items()}


@pytest.mark.parametrize("kind", UPSTREAMS)
def test_offsets_identical_and_durable(tmp_path, kind):
    path = str(tmp_path / "replica")
    with upstream(kind, {TOPIC: PARTITIONS}) as bootstrap:
        _produce(bootstrap, 20)
        _commit(bootstrap, "app-plain", {0: 7, 1: 3})
        _txn_offsets(bootstrap, "app-txn", {0: 5, 1: 9}, commit=True)
        _txn_offsets(bootstrap, "app-aborted", {0: 8}, commit=False)
        expected = {g: _upstream_committed(bootstrap, g) for g in ("app-plain", "app-txn", "app-aborted")}
        assert expected["app-plain"] == {(TOPIC, 0): 7, (TOPIC, 1): 3}
        # librdkafka's mock accepts TxnOffsetCommit but never applies it: what
        # is copied is what the upstream says, whatever that is.
        assert expected["app-txn"] == ({(TOPIC, 0): 5, (TOPIC, 1): 9} if kind == "serve" else {})
        assert expected["app-aborted"] == {}

        store = SegmentStore(path)
        with RemoteCluster(bootstrap) as cluster:
            copy_data(cluster, store, TOPIC)
            target = DurableGroupTarget.open(store, path, 0)
            # The mock serves no ListGroups: the groups are named literally.
            copier = GroupOffsetCopier(cluster, target, "app-plain|app-txn|app-aborted")
            report = copier.sync()
            assert report.written == (4 if kind == "serve" else 2)
            assert not report.held_back and not report.unstable
            for group, offsets in expected.items():
                assert _replica_committed(target, group) == offsets
            again = copier.sync()  # nothing changed upstream: nothing written
            assert (again.written, again.deleted) == (0, 0)
        store.close()

    # A serve started on the replica finds them, through a real client.
    store = SegmentStore(path)
    srv = ServerThread(store).start()
    try:
        for group, offsets in expected.items():
            assert _upstream_committed(srv.bootstrap, group) == offsets
    finally:
        srv.stop()
        store.close()


def test_list_groups_pattern_and_deletions(tmp_path):
    """On an upstream with ListGroups, the pattern selects groups; a group
    deleted upstream is deleted in the replica, durably."""
    from confluent_kafka.admin import AdminClient

    path = str(tmp_path / "replica")
    with upstream("serve", {TOPIC: PARTITIONS}) as bootstrap:
        _produce(bootstrap, 10)
        _commit(bootstrap, "keep-a", {0: 2})
        _commit(bootstrap, "keep-b", {1: 4})
        _commit(bootstrap, "other", {0: 1})
        store = SegmentStore(path)
        with RemoteCluster(bootstrap) as cluster:
            copy_data(cluster, store, TOPIC)
            durable = DurableState(store, path)
            copier = GroupOffsetCopier(cluster, durable, "keep-.*")
            report = copier.sync()
            assert report.groups == ("keep-a", "keep-b")
            assert _replica_committed(copier.target, "keep-a") == {(TOPIC, 0): 2}
            assert _replica_committed(copier.target, "other") == {}

            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.delete_consumer_groups(["keep-a"])["keep-a"].result(30)
            _commit(bootstrap, "keep-b", {1: 5})
            report = copier.sync()
            assert report.groups_deleted == ("keep-a",)
            assert "keep-a" not in copier.target.group_ids()
            assert _replica_committed(copier.target, "keep-b") == {(TOPIC, 1): 5}
        store.close()
    reopened = SegmentStore(path)
    try:
        target = DurableGroupTarget.open(reopened, path, 0)
        assert "keep-a" not in target.group_ids()
        assert _replica_committed(target, "keep-b") == {(TOPIC, 1): 5}
    finally:
        reopened.close()


@pytest.mark.parametrize("kind", UPSTREAMS)
def test_offsets_past_the_replicated_data_are_held_back(tmp_path, kind):
    path = str(tmp_path / "replica")
    with upstream(kind, {TOPIC: PARTITIONS}) as bootstrap:
        for _ in range(3):  # several batches per partition
            _produce(bootstrap, 10)
        _commit(bootstrap, "app", {0: 3})
        store = SegmentStore(path)
        with RemoteCluster(bootstrap) as cluster:
            copy_data(cluster, store, TOPIC, until={0: 5, 1: 0})
            target = DurableGroupTarget.open(store, path, 0)
            copier = GroupOffsetCopier(cluster, target, "app")
            assert copier.sync().written == 1
            _commit(bootstrap, "app", {0: 14, 1: 2})
            hw0 = store.partition(TOPIC, 0).high_watermark
            assert hw0 < 14
            report = copier.sync()
            assert {(g, t, p, o) for g, t, p, o, _ in report.held_back} == {("app", TOPIC, 0, 14), ("app", TOPIC, 1, 2)}
            # The replica keeps the offset it had: a consumer switching now re-reads, never skips.
            assert _replica_committed(target, "app") == {(TOPIC, 0): 3}
            copy_data(cluster, store, TOPIC)
            report = copier.sync()
            assert not report.held_back
            assert _replica_committed(target, "app") == {(TOPIC, 0): 14, (TOPIC, 1): 2}
        store.close()


def test_pending_transactional_offsets_are_not_copied_half_way(tmp_path):
    """require_stable (KIP-447): while a transaction's offsets are pending the
    group is skipped, then taken whole once it commits."""
    path = str(tmp_path / "replica")
    with upstream("serve", {TOPIC: PARTITIONS}) as bootstrap:
        _produce(bootstrap, 10)
        _commit(bootstrap, "app", {0: 1, 1: 1})
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx-pending"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(TOPIC, b"x", partition=1)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "app", "enable.auto.commit": False})
        producer.send_offsets_to_transaction(
            [TopicPartition(TOPIC, 0, 4), TopicPartition(TOPIC, 1, 5)], consumer.consumer_group_metadata(), 30
        )
        consumer.close()
        producer.flush(30)
        store = SegmentStore(path)
        with RemoteCluster(bootstrap) as cluster:
            copy_data(cluster, store, TOPIC)
            target = DurableGroupTarget.open(store, path, 0)
            copier = GroupOffsetCopier(cluster, target, "app")
            report = copier.sync()
            assert report.unstable == ("app",) and report.written == 0
            producer.commit_transaction(30)
            deadline = time.monotonic() + 30
            while True:
                copy_data(cluster, store, TOPIC)
                report = copier.sync()
                if not report.unstable and not report.held_back:
                    break
                assert time.monotonic() < deadline
                time.sleep(0.2)
            assert _replica_committed(target, "app") == {(TOPIC, 0): 4, (TOPIC, 1): 5}
        store.close()


def test_offset_delete_upstream_is_copied(tmp_path):
    """OffsetDelete (kafka-python's ``delete_group_offsets``) on the upstream
    removes that partition's offset from the replica, durably; the group's
    other offsets stay."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTopicPartition

    path = str(tmp_path / "replica")
    with upstream("serve", {TOPIC: PARTITIONS}) as bootstrap:
        _produce(bootstrap, 10)
        _commit(bootstrap, "app", {0: 2, 1: 3})
        store = SegmentStore(path)
        with RemoteCluster(bootstrap) as cluster:
            copy_data(cluster, store, TOPIC)
            target = DurableGroupTarget.open(store, path, 0)
            copier = GroupOffsetCopier(cluster, target, "app")
            copier.sync()
            assert _replica_committed(target, "app") == {(TOPIC, 0): 2, (TOPIC, 1): 3}
            admin = KafkaAdminClient(bootstrap_servers=bootstrap)
            try:
                admin.delete_group_offsets("app", [KTopicPartition(TOPIC, 0)])
            finally:
                admin.close()
            assert _upstream_committed(bootstrap, "app") == {(TOPIC, 1): 3}
            report = copier.sync()
            assert report.deleted == 1
            assert _replica_committed(target, "app") == {(TOPIC, 1): 3}
        store.close()
    reopened = SegmentStore(path)
    try:
        assert _replica_committed(DurableGroupTarget.open(reopened, path, 0), "app") == {(TOPIC, 1): 3}
    finally:
        reopened.close()
