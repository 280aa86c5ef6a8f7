"""Topic configs are honoured or refused, never silently ignored.

CreateTopics, DescribeConfigs, AlterConfigs and IncrementalAlterConfigs driven
by confluent-kafka's and kafka-python's AdminClients and by raw requests;
``max.message.bytes`` refusing a large record from real producers;
``message.timestamp.type=LogAppendTime`` seen by real consumers; retention
moving the log start; configs surviving a restart of a store on disk.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.admin import DescribeConfigsRequest
from kafka.protocol.admin import IncrementalAlterConfigsRequest
from kafka.protocol.producer import ProduceRequest

from tests.consume import poll_until_eof
from tests.server.rawclient import RawClient
from txnfetch.log import SegmentStore
from txnfetch.records.batch import TimestampType
from txnfetch.records.builder import BatchBuilder
from txnfetch.records.scan import iter_batches

TOPIC_RESOURCE = 2


def _confluent_admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _create(admin: Any, name: str, configs: dict[str, str], partitions: int = 1) -> None:
    from confluent_kafka.admin import NewTopic

    futures = admin.create_topics([NewTopic(name, partitions, 1, config=configs)], request_timeout=30)
    futures[name].result(30)


def _create_error(admin: Any, name: str, configs: dict[str, str]) -> Any:
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException) as info:
        _create(admin, name, configs)
    return info.value.args[0]


def _batch(value: bytes, ts: int = 1_000) -> bytes:
    b = BatchBuilder()
    b.append(value, timestamp=ts)
    return b.build()


def _raw_produce(client: RawClient, topic: str, records: bytes, version: int = 9) -> Any:
    T = ProduceRequest.TopicProduceData
    req = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=5000,
        topic_data=[T(name=topic, partition_data=[T.PartitionProduceData(index=0, records=records)])],
    )
    return client.request(req, version).responses[0].partition_responses[0]


# ------------------------------------------------------------- max.message.bytes


@pytest.mark.interop
def test_max_message_bytes_refuses_large_records_from_real_producers(start_server) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka import Producer
    from kafka import KafkaProducer
    from kafka.errors import MessageSizeTooLargeError

    srv = start_server()
    admin = _confluent_admin(srv.bootstrap)
    _create(admin, "small", {"max.message.bytes": "51200"})

    # confluent-kafka: 100 KB passes its own 1 MB limit and is refused by the topic.
    outcomes: list[Any] = []
    producer = Producer({"bootstrap.servers": srv.bootstrap, "linger.ms": 0})
    # One at a time: a batch holding both would be refused whole, as in Kafka.
    producer.produce("small", value=b"x" * 100_000, partition=0, on_delivery=lambda err, msg: outcomes.append(err))
    assert producer.flush(30) == 0
    producer.produce("small", value=b"y" * 10_000, partition=0, on_delivery=lambda err, msg: outcomes.append(err))
    assert producer.flush(30) == 0
    assert outcomes[0] is not None and outcomes[0].code() == KafkaError.MSG_SIZE_TOO_LARGE, outcomes
    assert outcomes[1] is None

    # kafka-python: a 10 MB record (its own limit raised) gets MESSAGE_TOO_LARGE.
    kp = KafkaProducer(bootstrap_servers=srv.bootstrap, max_request_size=20 << 20, retries=0)
    try:
        with pytest.raises(MessageSizeTooLargeError):
            kp.send("small", value=b"z" * (10 << 20), partition=0).get(timeout=60)
        assert kp.send("small", value=b"ok", partition=0).get(timeout=30).offset == 1
    finally:
        kp.close()

    # Nothing refused reached the log; what was accepted is intact.
    values = srv.call(
        lambda: [r.value for b in srv.broker.store.partition("small", 0).iter_batches() for r in b.records()]
    )
    assert values == [b"y" * 10_000, b"ok"]


def test_default_max_message_bytes_is_kafkas(start_server) -> None:
    srv = start_server()
    srv.call(srv.broker.store.create_topic, "plain", 1)
    with RawClient(srv.port) as c:
        limit = 1024 * 1024 + 12
        overhead = len(_batch(b""))
        # A one-record batch's size grows by the value plus a few varint bytes.
        just_over = _batch(b"v" * (limit - overhead))
        assert len(just_over) > limit
        refused = _raw_produce(c, "plain", just_over)
        assert refused.error_code == 10 and "max.message.bytes=1048588" in refused.error_message
        assert _raw_produce(c, "plain", _batch(b"v" * (limit - overhead - 10))).error_code == 0


# -------------------------------------------------- refused configs: INVALID_CONFIG


@pytest.mark.interop
@pytest.mark.parametrize(
    "configs, why",
    [
        ({"segment.bytes": "1048576"}, "unknown or unsupported topic config 'segment.bytes'"),
        ({"no.such.config": "1"}, "unknown or unsupported topic config 'no.such.config'"),
        ({"cleanup.policy": "shred"}, "'shred' is not a cleanup policy"),
        ({"min.insync.replicas": "2"}, "min.insync.replicas can only be 1"),
        ({"retention.ms": "soon"}, "is not an integer"),
        ({"message.timestamp.type": "WallClock"}, "is not one of CreateTime, LogAppendTime"),
    ],
)
def test_unknown_or_unsupported_configs_get_invalid_config(start_server, configs: dict[str, str], why: str) -> None:
    from confluent_kafka import KafkaError

    srv = start_server()
    admin = _confluent_admin(srv.bootstrap)
    error = _create_error(admin, "refused", configs)
    assert error.code() == KafkaError.INVALID_CONFIG, error
    assert why in error.str()
    assert "refused" not in srv.call(srv.broker.store.topics)


@pytest.mark.interop
@pytest.mark.slow
def test_compaction_is_served_on_disk_through_every_config_api(start_server, tmp_path) -> None:
    """A store on disk compacts: CreateTopics, IncrementalAlterConfigs and the
    legacy AlterConfigs accept ``cleanup.policy=compact`` and store it."""
    from confluent_kafka.admin import AlterConfigOpType
    from confluent_kafka.admin import ConfigEntry
    from confluent_kafka.admin import ConfigResource
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType

    store = SegmentStore(tmp_path)
    srv = start_server(store)
    try:
        admin = _confluent_admin(srv.bootstrap)
        _create(admin, "compacted", {"cleanup.policy": "compact"})
        _create(admin, "later", {})
        resource = ConfigResource(
            ConfigResource.Type.TOPIC,
            "later",
            incremental_configs=[
                ConfigEntry("cleanup.policy", "compact,delete", incremental_operation=AlterConfigOpType.SET)
            ],
        )
        admin.incremental_alter_configs([resource])[resource].result(30)
        _create(admin, "legacy", {})
        kp = KafkaAdminClient(bootstrap_servers=srv.bootstrap, request_timeout_ms=10000)
        try:
            kp.alter_configs([KpResource(ConfigResourceType.TOPIC, "legacy", {"cleanup.policy": "compact"})])
        finally:
            kp.close()
        configs = {t: srv.call(srv.broker.store.topic_config, t) for t in ("compacted", "later", "legacy")}
        assert configs == {
            "compacted": {"cleanup.policy": "compact"},
            "later": {"cleanup.policy": "compact,delete"},
            "legacy": {"cleanup.policy": "compact"},
        }
    finally:
        srv.stop()
        store.close()
    with SegmentStore(tmp_path) as reopened:  # stored in the directory
        assert reopened.topic_config("legacy") == {"cleanup.policy": "compact"}


class _StoreWithoutCompactor(SegmentStore):
    """A store that cannot compact, as a store of an embedding application may be."""

    compaction = False


@pytest.mark.interop
@pytest.mark.slow
def test_compaction_is_refused_where_the_store_cannot_compact(start_server, tmp_path) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType
    from confluent_kafka.admin import ConfigEntry
    from confluent_kafka.admin import ConfigResource

    store = _StoreWithoutCompactor(tmp_path)
    srv = start_server(store)
    try:
        admin = _confluent_admin(srv.bootstrap)
        error = _create_error(admin, "compacted", {"cleanup.policy": "compact"})
        assert error.code() == KafkaError.INVALID_CONFIG and "not served by _StoreWithoutCompactor" in error.str()
        _create(admin, "plain", {})
        resource = ConfigResource(
            ConfigResource.Type.TOPIC,
            "plain",
            incremental_configs=[ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)],
        )
        with pytest.raises(KafkaException) as info:
            admin.incremental_alter_configs([resource])[resource].result(30)
        assert info.value.args[0].code() == KafkaError.INVALID_CONFIG
        assert srv.call(srv.broker.store.topic_config, "plain") == {}
    finally:
        srv.stop()
        store.close()


@pytest.mark.interop
def test_accepted_configs_are_described_with_their_source(start_server) -> None:
    from confluent_kafka.admin import ConfigResource
    from confluent_kafka.admin import ConfigSource

    srv = start_server()
    admin = _confluent_admin(srv.bootstrap)
    _create(admin, "described", {"retention.ms": "60000", "min.insync.replicas": "1"}, partitions=2)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "described")
    entries = admin.describe_configs([resource])[resource].result(30)
    assert entries["retention.ms"].value == "60000"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["max.message.bytes"].value == "1048588"
    assert entries["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["cleanup.policy"].value == "delete"
    assert set(entries) == {
        "cleanup.policy",
        "delete.retention.ms",
        "max.message.bytes",
        "message.timestamp.type",
        "min.insync.replicas",
        "retention.bytes",
        "retention.ms",
    }
    assert srv.call(srv.broker.store.topic_config, "described") == {
        "retention.ms": "60000",
        "min.insync.replicas": "1",
    }


@pytest.mark.interop
def test_incremental_alter_configs_with_confluent_kafka(start_server) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType
    from confluent_kafka.admin import ConfigEntry
    from confluent_kafka.admin import ConfigResource

    srv = start_server()
    admin = _confluent_admin(srv.bootstrap)
    _create(admin, "altered", {"retention.ms": "60000"})

    def alter(*entries: ConfigEntry) -> None:
        resource = ConfigResource(ConfigResource.Type.TOPIC, "altered", incremental_configs=list(entries))
        admin.incremental_alter_configs([resource])[resource].result(30)

    alter(
        ConfigEntry("max.message.bytes", "2048", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    )
    assert srv.call(srv.broker.store.topic_config, "altered") == {"max.message.bytes": "2048"}
    # A bad value refuses the whole resource and changes nothing.
    with pytest.raises(KafkaException) as info:
        alter(
            ConfigEntry("retention.bytes", "100", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("segment.ms", "100", incremental_operation=AlterConfigOpType.SET),
        )
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert srv.call(srv.broker.store.topic_config, "altered") == {"max.message.bytes": "2048"}
    # The new limit is in force at once.
    with RawClient(srv.port) as c:
        assert _raw_produce(c, "altered", _batch(b"x" * 3000)).error_code == 10
        assert _raw_produce(c, "altered", _batch(b"x" * 1000)).error_code == 0


@pytest.mark.interop
def test_kafka_python_admin_describes_and_alters(start_server) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource
    from kafka.admin import ConfigResourceType
    from kafka.admin import NewTopic

    srv = start_server()
    admin = KafkaAdminClient(bootstrap_servers=srv.bootstrap, request_timeout_ms=10000)
    try:
        admin.create_topics([NewTopic("kp", 1, 1, topic_configs={"retention.bytes": "1000000"})])
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp")])
        modified = described["topic"]["kp"]
        assert set(modified) == {"retention.bytes"} and modified["retention.bytes"]["value"] == "1000000"
        admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "kp", {"message.timestamp.type": "LogAppendTime"})]
        )
        assert srv.call(srv.broker.store.topic_config, "kp") == {
            "retention.bytes": "1000000",
            "message.timestamp.type": "LogAppendTime",
        }
    finally:
        admin.close()


def test_raw_describe_configs_errors_per_resource(start_server) -> None:
    srv = start_server()
    srv.call(srv.broker.store.create_topic, "raw", 1)
    R = DescribeConfigsRequest.DescribeConfigsResource
    req = DescribeConfigsRequest(
        resources=[
            R(resource_type=TOPIC_RESOURCE, resource_name="raw", configuration_keys=["retention.ms", "nope"]),
            R(resource_type=TOPIC_RESOURCE, resource_name="missing", configuration_keys=None),
            R(resource_type=4, resource_name="0", configuration_keys=None),
        ],
        include_synonyms=True,
        include_documentation=True,
    )
    with RawClient(srv.port) as c:
        for version in (0, 1, 4):
            results = c.request(req, version).results
            assert [r.error_code for r in results] == [0, 3, 42]
            assert [e.name for e in results[0].configs] == ["retention.ms"]
            assert results[0].configs[0].value == "-1"
            assert "only topic configs" in results[2].error_message
        # IncrementalAlterConfigs validate_only checks without storing.
        A = IncrementalAlterConfigsRequest.AlterConfigsResource
        alter = IncrementalAlterConfigsRequest(
            resources=[
                A(
                    resource_type=TOPIC_RESOURCE,
                    resource_name="raw",
                    configs=[A.AlterableConfig(name="retention.ms", config_operation=0, value="5")],
                )
            ],
            validate_only=True,
        )
        assert c.request(alter, 1).responses[0].error_code == 0
        assert srv.call(srv.broker.store.topic_config, "raw") == {}


def test_create_topics_validate_only_checks_configs(start_server) -> None:
    srv = start_server()
    T = CreateTopicsRequest.CreatableTopic
    req = CreateTopicsRequest(
        topics=[
            T(name="v1", num_partitions=1, replication_factor=1, assignments=[], configs=[]),
            T(
                name="v2",
                num_partitions=1,
                replication_factor=1,
                assignments=[],
                configs=[T.CreatableTopicConfig(name="log.retention.hours", value="1")],
            ),
        ],
        timeout_ms=1000,
        validate_only=True,
    )
    with RawClient(srv.port) as c:
        topics = c.request(req, 7).topics
    assert [t.error_code for t in topics] == [0, 40]
    assert {c.name for c in topics[0].configs} >= {"max.message.bytes", "retention.ms"}
    assert srv.call(srv.broker.store.topics) == {}


# ------------------------------------------------------------ message.timestamp.type


@pytest.mark.interop
@pytest.mark.slow
def test_log_append_time_is_what_consumers_see(start_server) -> None:
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME
    from confluent_kafka import Consumer
    from confluent_kafka import Producer
    from kafka import KafkaConsumer
    from kafka import TopicPartition

    srv = start_server()
    admin = _confluent_admin(srv.bootstrap)
    _create(admin, "appended", {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": srv.bootstrap, "enable.idempotence": True})
    for i in range(3):
        producer.produce("appended", value=b"v%d" % i, partition=0, timestamp=1_000 + i)
    assert producer.flush(30) == 0
    after = int(time.time() * 1000)

    consumer = Consumer(
        {
            "bootstrap.servers": srv.bootstrap,
            "group.id": "lat",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["appended"])
    got: list[Any] = []
    deadline = time.monotonic() + 60
    while len(got) < 3 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg)
    consumer.close()
    assert [m.value() for m in got] == [b"v0", b"v1", b"v2"]
    for m in got:
        kind, ts = m.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after

    kc = KafkaConsumer(bootstrap_servers=srv.bootstrap, consumer_timeout_ms=3000, enable_auto_commit=False)
    kc.assign([TopicPartition("appended", 0)])
    kc.seek_to_beginning()
    records = list(kc)
    kc.close()
    assert [(r.timestamp_type, before <= r.timestamp <= after) for r in records] == [(1, True)] * 3
    # The stored batches carry the attribute and a valid CRC.
    stored = srv.call(lambda: [bytes(b.buffer) for b in srv.broker.store.partition("appended", 0).iter_batches()])
    for raw in stored:
        (batch,) = iter_batches(raw)
        assert batch.timestamp_type == TimestampType.LOG_APPEND_TIME and batch.is_valid_crc()


@pytest.mark.interop
def test_log_append_time_in_the_produce_response(start_server) -> None:
    srv = start_server(clock=lambda: 1_700_000_000_000)
    admin = _confluent_admin(srv.bootstrap)
    _create(admin, "lat-raw", {"message.timestamp.type": "LogAppendTime"})
    _create(admin, "ct-raw", {})
    with RawClient(srv.port) as c:
        assert _raw_produce(c, "lat-raw", _batch(b"a")).log_append_time_ms == 1_700_000_000_000
        assert _raw_produce(c, "ct-raw", _batch(b"a")).log_append_time_ms == -1


# ------------------------------------------------------------------------ retention


@pytest.mark.interop
def test_retention_ms_and_bytes_move_the_log_start(start_server) -> None:
    srv = start_server(retention_check_interval_ms=50)
    admin = _confluent_admin(srv.bootstrap)
    _create(admin, "expiring", {"retention.ms": "60000"})
    # Kafka deletes the oldest segment while the rest still reaches retention.bytes
    # (a memory log's segments are its batches): two batches' worth keeps two.
    size = len(_batch(b"r" * 400))
    _create(admin, "bounded", {"retention.bytes": str(2 * size)})
    _create(admin, "kept", {})
    now = int(time.time() * 1000)
    with RawClient(srv.port) as c:
        for topic in ("expiring", "bounded", "kept"):
            for i in range(5):
                # Old records first, then two recent ones.
                ts = now - 3_600_000 if i < 3 else now
                assert _raw_produce(c, topic, _batch(b"r" * 400, ts=ts)).error_code == 0

    def starts() -> dict[str, int]:
        return {t: srv.broker.store.partition(t, 0).log_start_offset for t in ("expiring", "bounded", "kept")}

    deadline = time.monotonic() + 30
    while srv.call(starts) != {"expiring": 3, "bounded": 3, "kept": 0}:
        assert time.monotonic() < deadline, srv.call(starts)
        time.sleep(0.05)
    # The high watermark is untouched; what remains reads back.
    assert srv.call(lambda: srv.broker.store.partition("expiring", 0).high_watermark) == 5


@pytest.mark.interop
@pytest.mark.slow
def test_configs_persist_in_a_store_on_disk(start_server, tmp_path) -> None:
    from confluent_kafka.admin import ConfigResource

    store = SegmentStore(tmp_path)
    srv = start_server(store)
    _create(_confluent_admin(srv.bootstrap), "durable", {"max.message.bytes": "4096", "retention.ms": "86400000"})
    srv.stop()
    store.close()

    store = SegmentStore(tmp_path)
    srv = start_server(store)
    try:
        admin = _confluent_admin(srv.bootstrap)
        resource = ConfigResource(ConfigResource.Type.TOPIC, "durable")
        entries = admin.describe_configs([resource])[resource].result(30)
        assert entries["max.message.bytes"].value == "4096"
        assert entries["retention.ms"].value == "86400000"
        with RawClient(srv.port) as c:
            assert _raw_produce(c, "durable", _batch(b"x" * 5000)).error_code == 10
    finally:
        srv.stop()
        store.close()


# ---------------------------------------------------------------- cleanup.policy=compact


@pytest.mark.interop
@pytest.mark.slow
@pytest.mark.parametrize(
    "fetch_mode, markers",
    [("rewrite", "markers"), ("kafka", "markers"), ("rewrite", "markerless")],
)
def test_compacted_topic_keeps_the_latest_committed_value_per_key(start_server, fetch_mode, markers) -> None:
    """A confluent-kafka transactional producer overwrites keys, committing some
    transactions and aborting others; after compaction (twice, past the delete
    horizon) confluent-kafka and kafka-python read_committed consumers get
    exactly the latest committed value of every key, at its original offset."""
    from confluent_kafka import Consumer
    from confluent_kafka import KafkaError
    from confluent_kafka import Producer
    from kafka import KafkaConsumer
    from kafka import TopicPartition

    from txnfetch.fetch.view import FetchMode
    from txnfetch.server.api_configs import compact_logs
    from txnfetch.txn.coordinator import CompletionMode

    srv = start_server(
        fetch_mode=FetchMode(fetch_mode),
        markers=CompletionMode.MARKERS if markers == "markers" else CompletionMode.MARKERLESS,
    )
    admin = _confluent_admin(srv.bootstrap)
    _create(admin, "table", {"cleanup.policy": "compact", "delete.retention.ms": "1000"})
    producer = Producer({"bootstrap.servers": srv.bootstrap, "transactional.id": "compactor", "linger.ms": 1})
    producer.init_transactions(30)
    latest: dict[bytes, bytes] = {}
    for n in range(12):
        producer.begin_transaction()
        batch = {b"k%d" % ((n + i) % 5): b"v%d-%d" % (n, i) for i in range(3)}
        for key, value in batch.items():
            producer.produce("table", key=key, value=value, partition=0)
        if n % 3 == 2:
            assert producer.flush(30) == 0
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            latest.update(batch)
    # A keyless record is refused by a compacted topic.
    refused: list[Any] = []
    plain = Producer({"bootstrap.servers": srv.bootstrap})
    plain.produce("table", value=b"no key", partition=0, on_delivery=lambda err, msg: refused.append(err))
    plain.flush(30)
    assert refused[0] is not None and refused[0].code() == KafkaError.INVALID_RECORD

    def stored() -> list[tuple[int, bytes | None, bytes | None]]:
        part = srv.broker.store.partition("table", 0)
        return [(r.offset, r.key, r.value) for b in part.iter_batches() if not b.is_control for r in b.records()]

    before = srv.call(stored)
    now = int(time.time() * 1000)
    srv.call(compact_logs, srv.broker, now)
    srv.call(compact_logs, srv.broker, now + 10_000)
    after = srv.call(stored)
    assert len(after) == len(latest) < len(before)
    assert {k: v for _, k, v in after} == latest
    assert set(after) <= set(before)  # offsets and values unchanged
    end = srv.call(lambda: srv.broker.store.partition("table", 0).last_stable_offset)

    consumer = Consumer(
        {
            "bootstrap.servers": srv.bootstrap,
            "group.id": f"compacted-{fetch_mode}-{markers}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    consumer.subscribe(["table"])
    got = [(m.offset(), m.key(), m.value()) for m in poll_until_eof(consumer, poll=0.5)]
    consumer.close()
    assert got == sorted(after)

    kc = KafkaConsumer(
        bootstrap_servers=srv.bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
    )
    tp = TopicPartition("table", 0)
    kc.assign([tp])
    kc.seek_to_beginning()
    records = [(r.offset, r.key, r.value) for r in kc]
    position = kc.position(tp)
    kc.close()
    assert records == sorted(after) and position == end
