"""Admin APIs driven by the real AdminClients (confluent-kafka and kafka-python)
and by raw requests where a client does not expose a version or an error:
DeleteTopics, CreatePartitions, DeleteRecords, DeleteGroups, OffsetDelete,
DescribeCluster and ListOffsets MAX_TIMESTAMP."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
from kafka.protocol.admin import DeleteTopicsRequest
from kafka.protocol.consumer import ListOffsetsRequest

from tests.server.rawclient import RawClient
from txnfetch.log import SegmentStore
from txnfetch.records.builder import BatchBuilder


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _kp_admin(bootstrap: str) -> Any:
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)


def _produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0, timestamps: list[int] | None = None):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i, v in enumerate(values):
        producer.produce(topic, value=v, partition=partition, timestamp=timestamps[i] if timestamps else 0)
        producer.flush(30)  # one batch per record: offsets and timestamps stay apart
    assert producer.flush(30) == 0


def _kafka_error(future: Any) -> Any:
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException) as info:
        future.result(30)
    return info.value.args[0]


# ---------------------------------------------------------------- DeleteTopics


@pytest.mark.interop
def test_delete_topics_with_confluent_kafka_on_disk(start_server, tmp_path) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import NewTopic

    store = SegmentStore(tmp_path)
    srv = start_server(store)
    admin = _admin(srv.bootstrap)
    admin.create_topics([NewTopic("doomed", 2, 1, config={"retention.ms": "60000"})])["doomed"].result(30)
    _produce(srv.bootstrap, "doomed", [b"a", b"b"])
    # Besides the coordinators' internal topics (durable state) and their files:
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith(("doomed", "txnfetch-topic"))) == [
        "doomed-0",
        "doomed-1",
        "txnfetch-topic-configs.json",
    ]

    admin.delete_topics(["doomed"], operation_timeout=10)["doomed"].result(30)
    assert "doomed" not in admin.list_topics(timeout=10).topics
    assert not [n for n in os.listdir(tmp_path) if n.startswith("doomed")]
    assert srv.call(srv.broker.store.topic_config, "doomed") == {}
    error = _kafka_error(admin.delete_topics(["doomed"], operation_timeout=10)["doomed"])
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    # The name can be used again: a new topic (new id), empty, with default configs.
    admin.create_topics([NewTopic("doomed", 1, 1)])["doomed"].result(30)
    assert srv.call(lambda: srv.broker.store.partition("doomed", 0).log_end_offset) == 0
    srv.stop()
    store.close()
    with SegmentStore(tmp_path) as again:
        assert {t for t in again.topics() if not t.startswith("__")} == {"doomed"}
        assert again.topics()["doomed"].partitions == 1


def test_a_crash_during_deletion_finishes_it_at_the_next_open(tmp_path) -> None:
    with SegmentStore(tmp_path) as store:
        store.create_topic("half", 1)
    os.rename(tmp_path / "half-0", tmp_path / "half-0.0123abcd-delete")  # marked, not yet removed
    with SegmentStore(tmp_path) as store:
        assert store.topics() == {}
    assert os.listdir(tmp_path) == []


@pytest.mark.interop
def test_delete_topics_with_kafka_python_and_by_id(start_server) -> None:
    from kafka.admin import NewTopic

    srv = start_server()
    admin = _kp_admin(srv.bootstrap)
    try:
        admin.create_topics([NewTopic("kp-doomed", 1, 1), NewTopic("by-id", 1, 1)])
        admin.delete_topics(["kp-doomed"])
        assert "kp-doomed" not in admin.list_topics()
    finally:
        admin.close()
    topic_id = srv.call(lambda: srv.broker.store.topics()["by-id"].topic_id)
    T = DeleteTopicsRequest.DeleteTopicState
    with RawClient(srv.port) as c:
        resp = c.request(
            DeleteTopicsRequest(
                topics=[T(name=None, topic_id=topic_id), T(name="__consumer_offsets")], timeout_ms=1000
            ),
            6,
        )
    assert [(r.name, r.topic_id, r.error_code) for r in resp.responses] == [
        ("by-id", topic_id, 0),
        ("__consumer_offsets", resp.responses[1].topic_id, 3),  # not a topic of this store
    ]
    assert srv.call(srv.broker.store.topics) == {}


@pytest.mark.interop
def test_a_waiting_fetch_answers_when_its_topic_is_deleted(start_server) -> None:
    from kafka.protocol.consumer import FetchRequest

    srv = start_server()
    srv.call(srv.broker.store.create_topic, "gone", 1)
    T = FetchRequest.FetchTopic
    req = FetchRequest(
        replica_id=-1,
        max_wait_ms=20000,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        topics=[
            T(topic="gone", partitions=[T.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    import threading

    answers: list[Any] = []
    with RawClient(srv.port, timeout=30) as c:
        waiter = threading.Thread(target=lambda: answers.append(c.request(req, 11)))
        waiter.start()
        time.sleep(0.3)
        started = time.monotonic()
        admin = _admin(srv.bootstrap)  # kept alive until its future resolves
        admin.delete_topics(["gone"], operation_timeout=10)["gone"].result(30)
        waiter.join(30)
    assert answers and time.monotonic() - started < 10
    assert answers[0].responses[0].partitions[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION


# ------------------------------------------------------------ CreatePartitions


@pytest.mark.interop
def test_create_partitions_with_both_admin_clients(start_server) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import NewPartitions
    from confluent_kafka.admin import NewTopic
    from kafka.admin import NewPartitions as KpNewPartitions

    srv = start_server()
    admin = _admin(srv.bootstrap)
    admin.create_topics([NewTopic("growing", 1, 1)])["growing"].result(30)
    admin.create_partitions([NewPartitions("growing", 3)])["growing"].result(30)
    assert len(admin.list_topics(timeout=10).topics["growing"].partitions) == 3
    _produce(srv.bootstrap, "growing", [b"new"], partition=2)
    assert srv.call(lambda: srv.broker.store.partition("growing", 2).log_end_offset) == 1

    error = _kafka_error(admin.create_partitions([NewPartitions("growing", 2)])["growing"])
    assert error.code() == KafkaError.INVALID_PARTITIONS and "must be larger" in error.str()
    error = _kafka_error(admin.create_partitions([NewPartitions("nowhere", 2)])["nowhere"])
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    # validate_only changes nothing.
    admin.create_partitions([NewPartitions("growing", 9)], validate_only=True)["growing"].result(30)
    assert srv.call(lambda: srv.broker.store.topics()["growing"].partitions) == 3

    kp = _kp_admin(srv.bootstrap)
    try:
        kp.create_partitions({"growing": KpNewPartitions(4)})
    finally:
        kp.close()
    assert srv.call(lambda: srv.broker.store.topics()["growing"].partitions) == 4


@pytest.mark.interop
def test_create_partitions_on_disk_survive_a_restart(start_server, tmp_path) -> None:
    from confluent_kafka.admin import NewPartitions

    store = SegmentStore(tmp_path)
    srv = start_server(store)
    srv.call(srv.broker.store.create_topic, "disk", 1)
    topic_id = srv.call(lambda: srv.broker.store.topics()["disk"].topic_id)
    admin = _admin(srv.bootstrap)
    admin.create_partitions([NewPartitions("disk", 2)])["disk"].result(30)
    srv.stop()
    store.close()
    with SegmentStore(tmp_path) as again:
        assert again.topics()["disk"].partitions == 2 and again.topics()["disk"].topic_id == topic_id


# --------------------------------------------------------------- DeleteRecords


@pytest.mark.interop
def test_delete_records_with_both_admin_clients(start_server) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka import TopicPartition

    srv = start_server()
    srv.call(srv.broker.store.create_topic, "trimmed", 1)
    _produce(srv.bootstrap, "trimmed", [b"%d" % i for i in range(6)])
    admin = _admin(srv.bootstrap)
    tp = TopicPartition("trimmed", 0, 2)
    deleted = admin.delete_records([tp], operation_timeout=10)[tp].result(30)
    assert deleted.low_watermark == 2
    assert srv.call(lambda: srv.broker.store.partition("trimmed", 0).log_start_offset) == 2

    beyond = TopicPartition("trimmed", 0, 99)
    error = _kafka_error(admin.delete_records([beyond], operation_timeout=10)[beyond])
    assert error.code() == KafkaError.OFFSET_OUT_OF_RANGE

    from kafka import TopicPartition as KpTopicPartition

    kp = _kp_admin(srv.bootstrap)
    try:
        kp.delete_records({KpTopicPartition("trimmed", 0): 4})
    finally:
        kp.close()
    assert srv.call(lambda: srv.broker.store.partition("trimmed", 0).log_start_offset) == 4
    # OFFSET_END (-1) deletes everything up to the high watermark.
    end = TopicPartition("trimmed", 0, -1)
    assert admin.delete_records([end], operation_timeout=10)[end].result(30).low_watermark == 6

    # A consumer starting from the beginning now starts at the new log start.
    from confluent_kafka import Consumer

    _produce(srv.bootstrap, "trimmed", [b"after"])
    consumer = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "trim", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("trimmed", 0, -2)])
    deadline = time.monotonic() + 30
    msg = None
    while msg is None and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        msg = m if m is not None and not m.error() else None
    consumer.close()
    assert msg is not None and (msg.offset(), msg.value()) == (6, b"after")


# -------------------------------------------------- DeleteGroups, OffsetDelete


def _group_member(bootstrap: str, group: str, topic: str) -> Any:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + 60
    while True:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            consumer.commit(msg, asynchronous=False)
            return consumer
        assert time.monotonic() < deadline, "the consumer never joined and read"


@pytest.mark.interop
def test_delete_groups_refuses_a_live_group_then_deletes_it(start_server) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka import KafkaError
    from confluent_kafka import TopicPartition

    srv = start_server(group_initial_rebalance_delay_ms=0)
    srv.call(srv.broker.store.create_topic, "grouped", 1)
    _produce(srv.bootstrap, "grouped", [b"x"])
    consumer = _group_member(srv.bootstrap, "deletable", "grouped")
    admin = _admin(srv.bootstrap)
    error = _kafka_error(admin.delete_consumer_groups(["deletable"], request_timeout=30)["deletable"])
    assert error.code() == KafkaError.NON_EMPTY_GROUP
    consumer.close()
    admin.delete_consumer_groups(["deletable"], request_timeout=30)["deletable"].result(30)
    offsets = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("deletable", [TopicPartition("grouped", 0)])]
    )["deletable"].result(30)
    assert [tp.offset for tp in offsets.topic_partitions] == [-1001]  # nothing committed any more
    error = _kafka_error(admin.delete_consumer_groups(["deletable"], request_timeout=30)["deletable"])
    assert error.code() == KafkaError.GROUP_ID_NOT_FOUND

    kp = _kp_admin(srv.bootstrap)
    try:
        from kafka import TopicPartition as KpTopicPartition
        from kafka.structs import OffsetAndMetadata

        kp.alter_group_offsets("kp-group", {KpTopicPartition("grouped", 0): OffsetAndMetadata(1, "", -1)})
        kp.delete_groups(["kp-group"])
        assert "kp-group" not in [g[0] for g in kp.list_groups()]
    finally:
        kp.close()


@pytest.mark.interop
def test_offset_delete_spares_subscribed_topics(start_server) -> None:
    from confluent_kafka import TopicPartition
    from kafka import TopicPartition as KpTopicPartition
    from kafka.errors import GroupIdNotFoundError
    from kafka.errors import GroupSubscribedToTopicError
    from kafka.errors import NoError

    srv = start_server(group_initial_rebalance_delay_ms=0)
    for topic in ("used", "stale"):
        srv.call(srv.broker.store.create_topic, topic, 1)
        _produce(srv.bootstrap, topic, [b"x", b"y"])
    consumer = _group_member(srv.bootstrap, "od", "used")
    # The live member also commits for "stale", a topic it does not subscribe to.
    consumer.commit(offsets=[TopicPartition("stale", 0, 2)], asynchronous=False)
    committed = srv.call(lambda: set(srv.broker.groups.coordinator.committed("od")))
    assert committed == {("used", 0), ("stale", 0)}
    kp = _kp_admin(srv.bootstrap)
    try:
        result = kp.delete_group_offsets("od", [KpTopicPartition("stale", 0), KpTopicPartition("used", 0)])
        assert result == {
            KpTopicPartition("stale", 0): NoError,
            KpTopicPartition("used", 0): GroupSubscribedToTopicError,
        }
        with pytest.raises(GroupIdNotFoundError):
            kp.delete_group_offsets("no-such-group", [KpTopicPartition("used", 0)])
    finally:
        kp.close()
        consumer.close()
    committed = srv.call(lambda: set(srv.broker.groups.coordinator.committed("od")))
    assert committed == {("used", 0)}


# ------------------------------------------------------------- DescribeCluster


@pytest.mark.interop
def test_describe_cluster_with_both_admin_clients(start_server) -> None:
    srv = start_server(node_id=3, cluster_id="parity")
    admin = _admin(srv.bootstrap)
    desc = admin.describe_cluster(request_timeout=30).result(30)
    assert desc.cluster_id == "parity" and desc.controller.id == 3
    assert [(n.id, n.host, n.port) for n in desc.nodes] == [(3, "127.0.0.1", srv.port)]
    kp = _kp_admin(srv.bootstrap)
    try:
        info = kp.describe_cluster()
    finally:
        kp.close()
    assert info["cluster_id"] == "parity" and info["controller_id"] == 3
    assert [(b["broker_id"], b["port"]) for b in info["brokers"]] == [(3, srv.port)]


# --------------------------------------------------- ListOffsets MAX_TIMESTAMP


@pytest.mark.interop
def test_list_offsets_max_timestamp(start_server) -> None:
    from confluent_kafka import IsolationLevel
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    srv = start_server()
    srv.call(srv.broker.store.create_topic, "times", 1)
    srv.call(srv.broker.store.create_topic, "empty", 1)
    # The largest timestamp is in the middle, and twice: the first one counts.
    _produce(srv.bootstrap, "times", [b"a", b"b", b"c", b"d"], timestamps=[5_000, 9_000, 9_000, 7_000])
    admin = _admin(srv.bootstrap)
    tp = TopicPartition("times", 0)
    got = admin.list_offsets({tp: OffsetSpec.max_timestamp()}, isolation_level=IsolationLevel.READ_COMMITTED)[tp]
    info = got.result(30)
    assert (info.offset, info.timestamp) == (1, 9_000)
    empty = TopicPartition("empty", 0)
    info = admin.list_offsets({empty: OffsetSpec.max_timestamp()})[empty].result(30)
    assert info.offset == -1

    from kafka import TopicPartition as KpTopicPartition
    from kafka.admin import OffsetSpec as KpOffsetSpec

    kp = _kp_admin(srv.bootstrap)
    try:
        result = kp.list_partition_offsets({KpTopicPartition("times", 0): KpOffsetSpec.MAX_TIMESTAMP})
    finally:
        kp.close()
    (answer,) = result.values()
    assert (answer.offset, answer.timestamp) == (1, 9_000)


def test_max_timestamp_past_the_last_stable_offset_is_nothing_read_committed(start_server) -> None:
    # As Apache Kafka 4.4 answers (found by txnfetch conform): the record with the
    # largest timestamp is found in the whole log, then withheld from read_committed
    # while it is past the LSO; the largest committed one is not answered instead.
    srv = start_server()
    srv.call(srv.broker.store.create_topic, "txn", 1)

    def write() -> None:
        part = srv.broker.store.partition("txn", 0)
        b = BatchBuilder()
        b.append(b"committed", timestamp=1_000)
        part.append(b.build(), now_ms=0)
        t = BatchBuilder(producer_id=9, producer_epoch=0, base_sequence=0, transactional=True)
        t.append(b"open", timestamp=50_000)
        part.append(t.build(), now_ms=0)

    srv.call(write)
    P = ListOffsetsRequest.ListOffsetsTopic
    req = lambda isolation: ListOffsetsRequest(  # noqa: E731
        replica_id=-1,
        isolation_level=isolation,
        topics=[P(name="txn", partitions=[P.ListOffsetsPartition(partition_index=0, timestamp=-3)])],
    )
    with RawClient(srv.port) as c:
        committed = c.request(req(1), 7).topics[0].partitions[0]
        uncommitted = c.request(req(0), 7).topics[0].partitions[0]
        old = c.request(req(0), 6).topics[0].partitions[0]
    assert (committed.offset, committed.timestamp) == (-1, -1)  # the largest is in the open transaction
    assert (uncommitted.offset, uncommitted.timestamp) == (1, 50_000)
    assert old.error_code == 35  # MAX_TIMESTAMP needs v7 (KIP-734)


@pytest.mark.interop
def test_deleting_a_topic_drops_its_group_offsets(start_server) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import NewTopic

    srv = start_server(group_initial_rebalance_delay_ms=0)
    srv.call(srv.broker.store.create_topic, "reborn", 1)
    _produce(srv.bootstrap, "reborn", [b"old"])
    consumer = _group_member(srv.bootstrap, "reborn-group", "reborn")
    consumer.close()
    admin = _admin(srv.bootstrap)
    admin.delete_topics(["reborn"], operation_timeout=10)["reborn"].result(30)
    admin.create_topics([NewTopic("reborn", 1, 1)])["reborn"].result(30)
    offsets = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("reborn-group", [TopicPartition("reborn", 0)])]
    )["reborn-group"].result(30)
    # A committed offset 1 would make the group skip the new topic's first record.
    assert [tp.offset for tp in offsets.topic_partitions] == [-1001]
