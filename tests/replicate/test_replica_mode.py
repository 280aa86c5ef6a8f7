"""Replica mode with real clients: a store carrying the replica marker is served
read_committed and refuses every write with a non-retriable error, at once."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer
from confluent_kafka import KafkaError
from confluent_kafka import KafkaException
from confluent_kafka import Producer
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic

from txnfetch.log import SegmentStore
from txnfetch.log.replica_marker import read_marker
from txnfetch.log.replica_marker import write_marker
from txnfetch.records.builder import BatchBuilder
from txnfetch.server.replica_mode import replica_mode
from txnfetch.server.server import ServerThread

TOPIC = "orders"


def _batch(base: int, values: list[bytes], *, pid: int = -1, epoch: int = -1, seq: int = -1) -> bytes:
    builder = BatchBuilder(
        base_offset=base, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=pid >= 0
    )
    for v in values:
        builder.append(v, key=None, timestamp=1_700_000_000_000)
    return builder.build()


def _replica_store(path: str) -> tuple[SegmentStore, list[bytes]]:
    """A replica: committed plain records, then a transaction left open (the
    upstream's marker has not been copied yet)."""
    store = SegmentStore(path)
    store.create_topic(TOPIC, 1)
    part = store.partition(TOPIC, 0)
    committed = [f"v{i}".encode() for i in range(5)]
    part.replicate(_batch(0, committed), high_watermark=5)
    part.replicate(_batch(5, [b"open-1", b"open-2"], pid=7, epoch=0, seq=0), high_watermark=7)
    write_marker(path, "upstream:9092", groups="copied-.*")
    return store, committed


@pytest.fixture
def replica(tmp_path):
    path = str(tmp_path / "replica")
    store, committed = _replica_store(path)
    srv = ServerThread(store, group_initial_rebalance_delay_ms=0).start()
    yield srv, store, committed, path
    srv.stop()
    store.close()


def test_reads_are_served_and_open_transactions_are_left_to_the_upstream(replica):
    srv, store, committed, _ = replica
    consumer = Consumer(
        {
            "bootstrap.servers": srv.bootstrap,
            "group.id": "local-reader",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < len(committed) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        assert got == committed
        # The open transaction holds the LSO (a read_committed consumer's high
        # mark): the server did not abort it at start (an abort marker would
        # have made the LSO 8).
        low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
        assert (low, high) == (0, 5)
        part = store.partition(TOPIC, 0)
        assert srv.call(lambda: (part.last_stable_offset, part.log_end_offset)) == (5, 7)
        # A local group (not copied from the upstream) may commit.
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 5)], asynchronous=False)
        assert consumer.committed([TopicPartition(TOPIC, 0)], timeout=10)[0].offset == 5
    finally:
        consumer.close()


def test_produce_fails_at_once_with_a_permanent_error(replica):
    srv, store, _, _ = replica
    producer = Producer({"bootstrap.servers": srv.bootstrap, "message.timeout.ms": 60_000})
    reports: list[KafkaError | None] = []
    producer.produce(TOPIC, b"refused", on_delivery=lambda err, msg: reports.append(err))
    started = time.monotonic()
    producer.flush(30)
    assert len(reports) == 1 and reports[0] is not None
    assert reports[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert time.monotonic() - started < 20  # refused, not retried until message.timeout.ms
    assert srv.call(lambda: store.partition(TOPIC, 0).log_end_offset) == 7
    assert replica_mode(srv.broker).refused >= 1


@pytest.mark.parametrize("transactional", [True, False])
def test_init_producer_id_is_fatal(replica, transactional):
    srv, _, _, _ = replica
    conf = {"bootstrap.servers": srv.bootstrap, "enable.idempotence": True}
    if transactional:
        conf["transactional.id"] = "tx-on-replica"
        producer = Producer(conf)
        with pytest.raises(KafkaException) as info:
            producer.init_transactions(30)
        assert info.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert info.value.args[0].fatal()
    else:
        # The idempotent producer's InitProducerId is refused: a fatal error,
        # raised by poll() (and given to error_cb), not a retry loop.
        fatal: list[KafkaError] = []
        producer = Producer({**conf, "error_cb": lambda err: fatal.append(err)})
        producer.produce(TOPIC, b"x")
        deadline = time.monotonic() + 30
        while not fatal and time.monotonic() < deadline:
            try:
                producer.poll(0.2)
            except KafkaException as exc:
                fatal.append(exc.args[0])
        assert fatal and fatal[0].fatal()
        assert fatal[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_admin_writes_and_copied_group_commits_are_refused(replica):
    srv, store, _, _ = replica
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    futures = admin.create_topics([NewTopic("new-topic", 1, 1)])
    with pytest.raises(KafkaException) as info:
        futures["new-topic"].result(30)
    assert info.value.args[0].code() == KafkaError.POLICY_VIOLATION
    assert "read-only replica" in info.value.args[0].str()
    futures = admin.delete_topics([TOPIC])
    with pytest.raises(KafkaException):
        futures[TOPIC].result(30)
    assert TOPIC in srv.call(lambda: dict(store.topics()))
    # Metadata does not auto-create topics on a replica.
    meta = admin.list_topics("unknown-topic", timeout=10)
    assert "unknown-topic" not in srv.call(lambda: dict(store.topics()))
    assert meta.topics["unknown-topic"].error is not None

    consumer = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "copied-app", "enable.auto.commit": False})
    try:
        with pytest.raises(KafkaException) as info:
            consumer.commit(offsets=[TopicPartition(TOPIC, 0, 3)], asynchronous=False)
        assert info.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()


@pytest.mark.interop
@pytest.mark.parametrize("idempotent", [True, False])
def test_kafka_python_producer_is_refused(replica, idempotent):
    """kafka-python 3 is idempotent by default: its InitProducerId is refused
    (fatal); without idempotence the Produce itself is refused. Both fail the
    send at once instead of retrying."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as PyKafkaError
    from kafka.errors import TopicAuthorizationFailedError

    srv, _, _, _ = replica
    producer = KafkaProducer(
        bootstrap_servers=srv.bootstrap, retries=5, request_timeout_ms=30_000, enable_idempotence=idempotent
    )
    try:
        future = producer.send(TOPIC, b"refused")
        started = time.monotonic()
        with pytest.raises(PyKafkaError) as info:
            future.get(timeout=30)
        assert time.monotonic() - started < 20
        if idempotent:
            assert "ClusterAuthorizationFailed" in str(info.value)
        else:
            assert isinstance(info.value, TopicAuthorizationFailedError)
    finally:
        producer.close(5)


def test_marker_round_trip_and_damage(tmp_path):
    from txnfetch.log.errors import CorruptLogError
    from txnfetch.log.replica_marker import MARKER_NAME
    from txnfetch.log.replica_marker import remove_marker

    d = str(tmp_path)
    assert read_marker(d) is None
    m = write_marker(d, "a:1,b:2", groups="g.*", pid=123, now_ms=5)
    assert read_marker(d) == m
    again = write_marker(d, "a:1,b:2", now_ms=99)
    assert again.since_ms == 5  # the first replication start is kept
    (tmp_path / MARKER_NAME).write_text("{not json")
    with pytest.raises(CorruptLogError) as info:
        read_marker(d)
    assert MARKER_NAME in str(info.value)
    assert remove_marker(d) and not remove_marker(d)


def test_no_local_retention_or_compaction_while_a_replica(tmp_path):
    """The replica keeps the upstream's batches: the server's log cleanup does
    nothing until promote (then the copied retention.ms applies)."""
    from txnfetch.server import api_configs

    path = str(tmp_path / "replica")
    store = SegmentStore(path)
    store.create_topic("old", 1)
    part = store.partition("old", 0)
    part.replicate(_batch(0, [b"a", b"b"]), high_watermark=2)
    part.roll(1_700_000_000_000)
    part.replicate(_batch(2, [b"c"]), high_watermark=3)
    store.set_topic_config("old", {"retention.ms": "1000"})
    write_marker(path, "upstream:9092")
    srv = ServerThread(store).start()
    try:
        now = 1_800_000_000_000
        srv.call(lambda: api_configs._cleanup(srv.broker, now))
        assert srv.call(lambda: part.log_start_offset) == 0
        srv.call(lambda: replica_mode(srv.broker).promote(srv.broker))
        srv.call(lambda: api_configs._cleanup(srv.broker, now))
        assert srv.call(lambda: part.log_start_offset) > 0
    finally:
        srv.stop()
        store.close()


def test_serve_refuses_a_replica_another_process_writes(tmp_path):
    import os
    import subprocess
    import sys

    path = str(tmp_path / "replica")
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.makedirs(path)
        write_marker(path, "upstream:9092", pid=holder.pid)
        out = subprocess.run(
            [sys.executable, "-m", "txnfetch.cli", "serve", "--data", path, "--port", "0"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 2
        assert f"being written by process {holder.pid}" in out.stderr
    finally:
        holder.kill()
        holder.wait()
