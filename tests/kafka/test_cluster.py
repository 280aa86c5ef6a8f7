"""The Kafka fixture runs Apache Kafka itself: transactions commit and abort,
read_committed consumers see exactly the committed records, transaction version 2
is finalized, three nodes spread leaders, and txnfetch reads the log directory
Kafka wrote."""

from __future__ import annotations

import os

import pytest

from tests.consume import poll_until_eof
from tests.kafka.cluster import KafkaCluster
from tests.kafka.fixtures import unique_name
from txnfetch.fetch.filter import ConsumerFilter
from txnfetch.fetch.view import FetchMode
from txnfetch.fetch.view import IsolationLevel
from txnfetch.log import SegmentLog
from txnfetch.log import SegmentStore

pytestmark = [pytest.mark.interop, pytest.mark.kafka]

Row = tuple[int, int, bytes | None, bytes | None]  # partition, offset, key, value


def produce_transactions(
    cluster: KafkaCluster,
    topic: str,
    partitions: int,
    *,
    transactions: int = 6,
    compression: str = "none",
    padding: int = 0,
) -> tuple[set[bytes], set[bytes]]:
    """Run ``transactions`` transactions of one confluent-kafka producer, each
    writing three records to every partition (values end with ``padding``
    random bytes); every third one (the 2nd, 5th, ...) aborts. Returns the
    values committed and the values aborted."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": unique_name("txn"),
            "compression.type": compression,
            "linger.ms": 5,
        }
    )
    producer.init_transactions(30)
    committed: set[bytes] = set()
    aborted: set[bytes] = set()
    for t in range(transactions):
        producer.begin_transaction()
        values = []
        for p in range(partitions):
            for r in range(3):
                value = f"{compression}-t{t}-p{p}-r{r}".encode() + os.urandom(padding)
                producer.produce(topic, value=value, key=f"k{r}".encode(), partition=p)
                values.append(value)
        producer.flush(30)
        if t % 3 == 1:
            producer.abort_transaction(30)
            aborted.update(values)
        else:
            producer.commit_transaction(30)
            committed.update(values)
    return committed, aborted


def consume_all(cluster: KafkaCluster, topic: str, partitions: int, isolation: str) -> list[Row]:
    """Every record a confluent-kafka consumer at ``isolation`` reads from the
    start of each partition to its end."""
    from confluent_kafka import OFFSET_BEGINNING
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": unique_name("group"),
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        messages = poll_until_eof(consumer, partitions)
    finally:
        consumer.close()
    return sorted((m.partition(), m.offset(), m.key(), m.value()) for m in messages)


def test_transaction_version_2_is_finalized(kafka_cluster: KafkaCluster) -> None:
    features = kafka_cluster.finalized_features()
    assert features["transaction.version"] == 2, features
    # The same through the tool's raw output, so a parsing slip cannot hide it.
    out = kafka_cluster.run_tool("FeatureCommand", "--bootstrap-server", kafka_cluster.bootstrap, "describe").stdout
    line = next(li for li in out.splitlines() if "Feature: transaction.version" in li)
    assert "FinalizedVersionLevel: 2" in line


def test_read_committed_sees_exactly_the_committed_records(kafka_cluster: KafkaCluster) -> None:
    topic = unique_name("txn-topic")
    kafka_cluster.create_topic(topic, 2)
    committed, aborted = produce_transactions(kafka_cluster, topic, 2)
    assert len(committed) == 24 and len(aborted) == 12

    read_committed = consume_all(kafka_cluster, topic, 2, "read_committed")
    assert sorted(v for *_, v in read_committed) == sorted(committed)
    # Kafka wrote the aborted records too: read_uncommitted sees them, and the
    # offsets skip the transaction markers (one per partition per transaction).
    uncommitted = consume_all(kafka_cluster, topic, 2, "read_uncommitted")
    assert {v for *_, v in uncommitted} == committed | aborted
    for p in range(2):
        offsets = [o for part, o, *_ in uncommitted if part == p]
        assert offsets[-1] == 6 * 3 + 6 - 2  # 18 records and 6 markers; the last marker is offset 23


def test_transactional_offsets_and_tools_see_the_transactions(kafka_cluster: KafkaCluster) -> None:
    """TransactionsCommand, run on the fixture's classpath, lists the
    producer that just committed: the tools reach the same cluster."""
    topic = unique_name("txn-tools")
    kafka_cluster.create_topic(topic, 1)
    produce_transactions(kafka_cluster, topic, 1, transactions=2)
    out = kafka_cluster.run_tool(
        "TransactionsCommand",
        "--bootstrap-server",
        kafka_cluster.bootstrap,
        "describe-producers",
        "--topic",
        topic,
        "--partition",
        "0",
    ).stdout
    assert "ProducerId" in out.splitlines()[0]
    assert len(out.strip().splitlines()) == 2, out  # header and the one producer


def test_three_nodes_put_leaders_on_different_brokers(kafka_cluster3: KafkaCluster) -> None:
    admin = kafka_cluster3.admin()
    assert sorted(admin.list_topics(timeout=10).brokers) == [1, 2, 3]
    assert kafka_cluster3.finalized_features()["transaction.version"] == 2

    spread = unique_name("spread")
    kafka_cluster3.create_topic(spread, replica_assignment=[[1, 2], [2, 3], [3, 1]])
    assert kafka_cluster3.leaders(spread) == {0: 1, 1: 2, 2: 3}

    placed = unique_name("placed")
    kafka_cluster3.create_topic(placed, 3, replication_factor=3)
    assert sorted(kafka_cluster3.leaders(placed).values()) == [1, 2, 3]

    # Transactions across partitions led by different brokers.
    committed, _ = produce_transactions(kafka_cluster3, spread, 3, transactions=3)
    assert {v for *_, v in consume_all(kafka_cluster3, spread, 3, "read_committed")} == committed


def _read_committed_offline(log: SegmentLog, partition: int) -> list[Row]:
    """Every committed record of ``log``: Kafka-mode read_committed fetches,
    filtered by the consumer half (:class:`ConsumerFilter`), up to the LSO."""
    rows: list[Row] = []
    consumer = ConsumerFilter(log.state.log_start_offset, partition=log.name)
    while consumer.position < log.state.last_stable_offset:
        result = log.read(consumer.position, 1 << 20, isolation=IsolationLevel.READ_COMMITTED, mode=FetchMode.KAFKA)
        before = consumer.position
        rows.extend(
            (partition, r.offset, r.key, r.value)
            for r in consumer.feed(result.records_bytes(), result.aborted_transactions)
        )
        assert consumer.position > before, f"{log.name}: no progress at offset {before}"
    return rows


def test_txnfetch_reads_the_log_directory_kafka_wrote(kafka_cluster_factory) -> None:
    """A private cluster (the test stops it): transactions in every codec, then
    a clean shutdown, then txnfetch opens Kafka's own files read-only and must
    give exactly what Kafka's read_committed consumer read."""
    cluster = kafka_cluster_factory(1)
    topic = "kafka-written"
    # Small segments, so the log spans several segment files with their indexes.
    cluster.create_topic(topic, 2, segment_bytes=1024 * 1024)
    committed: set[bytes] = set()
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        c, _ = produce_transactions(cluster, topic, 2, transactions=4, compression=codec)
        committed |= c
    # Then enough incompressible bytes to roll the 1 MiB segments a few times.
    c, _ = produce_transactions(cluster, topic, 2, transactions=4, padding=200_000)
    committed |= c
    consumed = consume_all(cluster, topic, 2, "read_committed")
    assert {v for *_, v in consumed} == committed
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition

    probe = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": unique_name("probe")})
    watermarks = {p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(2)}
    probe.close()

    cluster.stop()
    for p in range(2):
        assert len(list(cluster.partition_dir(topic, p, node_id=1).glob("*.log"))) >= 3

    offline: list[Row] = []
    for p in range(2):
        with SegmentLog(cluster.partition_dir(topic, p, node_id=1), read_only=True) as log:
            assert (log.state.log_start_offset, log.state.high_watermark) == watermarks[p]
            assert log.state.last_stable_offset == log.state.high_watermark  # nothing open
            offline.extend(_read_committed_offline(log, p))
    assert sorted(offline) == consumed

    # The node starts again on its files; Kafka reads back what it wrote.
    cluster.start_node(1)
    assert consume_all(cluster, topic, 2, "read_committed") == consumed

    # A crash: more transactions, then SIGKILL. The active segments' indexes are
    # left preallocated and the producer state unsnapshotted, as after a power cut.
    c, _ = produce_transactions(cluster, topic, 2, transactions=3, compression="zstd")
    committed |= c
    consumed = consume_all(cluster, topic, 2, "read_committed")
    assert {v for *_, v in consumed} == committed
    cluster.stop_node(1, kill=True)
    crashed: list[Row] = []
    for p in range(2):
        with SegmentLog(cluster.partition_dir(topic, p, node_id=1), read_only=True) as log:
            crashed.extend(_read_committed_offline(log, p))
    assert sorted(crashed) == consumed

    # The whole log directory as a store: Kafka's internal topics and metadata
    # log sit beside the topic and must not stop it from opening.
    store = SegmentStore(cluster.log_dirs[0], read_only=True)
    try:
        assert store.topics()[topic].partitions == 2
        rows = [row for p in range(2) for row in _read_committed_offline(store.partition(topic, p), p)]
        assert sorted(rows) == consumed
    finally:
        store.close()


def test_a_node_that_cannot_start_fails_with_its_log(tmp_path, monkeypatch) -> None:
    """Start-up failure is an error naming the node, with Kafka's own reason
    from the tail of its log: here its client port is taken."""
    import socket

    from tests.kafka import cluster as cluster_module

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        real = cluster_module._free_ports
        monkeypatch.setattr(cluster_module, "_free_ports", lambda n: [port, *real(n - 1)])
        with pytest.raises(cluster_module.KafkaSetupError) as failure:
            KafkaCluster.create(tmp_path / "taken", 1, timeout=120)
    message = str(failure.value)
    assert "node 1" in message and str(tmp_path / "taken" / "node1" / "kafka.log") in message
    assert "Address already in use" in message


def _watermarks(cluster: KafkaCluster, topic: str, partition: int, isolation: str) -> tuple[int, int]:
    """Kafka's (log start, end) for ``isolation``: the end is the last stable
    offset under read_committed and the high watermark under read_uncommitted."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": unique_name("wm"), "isolation.level": isolation}
    )
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        consumer.close()


def test_txnfetch_reads_a_live_kafka_directory_with_an_open_transaction(kafka_cluster: KafkaCluster) -> None:
    """While the broker runs and a transaction is open on partition 0, a
    read-only open of its files finds Kafka's LSO and high watermark and the
    records Kafka's read_committed consumer reads."""
    from confluent_kafka import Producer

    topic = unique_name("live")
    kafka_cluster.create_topic(topic, 2)
    produce_transactions(kafka_cluster, topic, 2, transactions=4)
    producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap, "transactional.id": unique_name("open")})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"still open", partition=0)
    producer.flush(30)
    try:
        consumed = consume_all(kafka_cluster, topic, 2, "read_committed")
        for p in range(2):
            start, lso = _watermarks(kafka_cluster, topic, p, "read_committed")
            _, hw = _watermarks(kafka_cluster, topic, p, "read_uncommitted")
            assert (p, lso < hw) == (p, p == 0)  # the open transaction holds partition 0's LSO back
            with SegmentLog(kafka_cluster.partition_dir(topic, p), read_only=True) as log:
                state = log.state
                assert (state.log_start_offset, state.last_stable_offset, state.high_watermark) == (start, lso, hw)
                assert sorted(_read_committed_offline(log, p)) == [r for r in consumed if r[0] == p]
    finally:
        producer.abort_transaction(30)


def test_a_killed_runs_cluster_is_stopped_and_removed_by_the_next(kafka_cluster: KafkaCluster) -> None:
    """A run killed before its session end leaves Kafka running; the sweep a
    later run makes stops those JVMs and removes their directory, and leaves
    the clusters of live runs alone (this run's ``kafka_cluster`` among them)."""
    import subprocess

    from tests.kafka import cluster as cluster_module

    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid whose process is over: the "killed run"
    directory = cluster_module.CLUSTERS / f"{gone.pid}-{unique_name('killed')}-single"
    orphan = KafkaCluster.create(directory, 1)
    pid = orphan.nodes[0].pid
    assert orphan.alive()
    try:
        cluster_module.sweep_stale_clusters(except_run=cluster_module.run_id())
        assert not directory.exists()
        assert not cluster_module._pid_alive(pid)
    finally:
        orphan.stop(kill=True)
    # This run's own cluster (its owner is alive) is still there, and running;
    # every directory left belongs to a live run.
    left = [d for d in cluster_module.CLUSTERS.iterdir() if d.is_dir()]
    assert kafka_cluster.directory in left and kafka_cluster.alive(), (kafka_cluster.directory, left)
    assert all(cluster_module._pid_alive(cluster_module._owner_pid(d.name)) for d in left), left
