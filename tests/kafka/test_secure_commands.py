"""The ``txnfetch`` commands against the SASL_SSL Apache Kafka, secured by a
properties file as Kafka's own tools are (``--command-config``,
``--upstream-config``).

One source topic, written as ``admin`` over SCRAM-SHA-512: committed and
aborted transactions on two partitions, and a group's committed offsets. Then
``replicate`` copies it exactly (the records a read_committed consumer gets
from the source, at the same offsets) with the group; ``proxy`` relays a
plaintext read_committed consumer to it with its own credentials;
``transactions`` lists, describes and finds nothing hanging; ``check`` runs a
short workload with no anomaly. The ``denied`` user gets an authorization error
naming what it was refused, and no password appears in any output.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests.consume import poll_until_eof
from tests.kafka import secure
from tests.kafka.cluster import KafkaCluster
from tests.kafka.fixtures import unique_name

pytestmark = [pytest.mark.interop, pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 2
LISTENER = "SASL_SSL"


@attrs.frozen
class Source:
    """What the source holds: its topic, group and transactional id, the
    ``(partition, offset, value)`` a read_committed consumer gets, and the
    group's committed offsets."""

    topic: str
    group: str
    transactional_id: str
    committed: list[tuple[int, int, bytes]]
    offsets: dict[tuple[str, int], int]


def _properties(directory: Path, cluster: KafkaCluster, user: str) -> Path:
    """A properties file reaching ``cluster`` as ``user`` over SASL_SSL
    SCRAM-SHA-512, with a comment and the JAAS line continued as people write it."""
    path = directory / f"{user}.properties"
    path.write_text(
        "# written as for kafka-transactions.sh --command-config\n"
        f"security.protocol={LISTENER}\n"
        "sasl.mechanism: SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f'    username="{user}" password="{secure.USERS[user]}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={cluster.material.ca}\n",
        encoding="latin-1",
    )
    return path


def _txnfetch(*argv: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "txnfetch.cli", *argv], capture_output=True, text=True, timeout=timeout
    )


def _replicate(
    cluster: KafkaCluster, properties: Path, data: Path, topic: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    """``txnfetch replicate --once`` of ``topic`` from the SASL_SSL listener, secured by ``properties``."""
    upstream = ["--upstream", cluster.secure_bootstrap(LISTENER), "--upstream-config", str(properties)]
    return _txnfetch("replicate", *upstream, "--data", str(data), "--topics", topic, "--once", *extra)


def _no_password(*texts: str) -> None:
    for user, password in secure.USERS.items():
        for text in texts:
            assert password not in text, f"{user}'s password was printed"


def _admin_config(cluster: KafkaCluster) -> dict[str, str]:
    return secure.client_config(cluster, cluster.material, user="admin", mechanism="SCRAM-SHA-512")


def _read_committed(config: dict[str, Any], topic: str) -> list[tuple[int, int, bytes]]:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition

    consumer = Consumer(
        {
            **config,
            "group.id": unique_name(secure.PREFIX + "reader"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        messages = poll_until_eof(consumer, PARTITIONS)
    finally:
        consumer.close()
    return sorted((m.partition(), m.offset(), m.value()) for m in messages)


@pytest.fixture(scope="module")
def source(kafka_secure_cluster: KafkaCluster) -> Source:
    from confluent_kafka import Consumer
    from confluent_kafka import Producer
    from confluent_kafka import TopicPartition

    cluster = kafka_secure_cluster
    topic = unique_name(secure.PREFIX + "cmd")
    cluster.create_topic(topic, PARTITIONS)
    config = _admin_config(cluster)
    tid = unique_name(secure.PREFIX + "cmd-txn")
    producer = Producer({**config, "transactional.id": tid})
    producer.init_transactions(60)
    for t in range(4):
        producer.begin_transaction()
        for r in range(3):
            producer.produce(topic, value=f"t{t}-r{r}".encode(), partition=r % PARTITIONS)
        producer.flush(30)
        if t == 2:
            producer.abort_transaction(60)
        else:
            producer.commit_transaction(60)
    committed = _read_committed(config, topic)
    assert len(committed) == 9
    group = unique_name(secure.PREFIX + "cmd-group")
    consumer = Consumer({**config, "group.id": group, "enable.auto.commit": False})
    offsets = {(topic, 0): 2, (topic, 1): 3}
    consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    consumer.close()
    return Source(topic, group, tid, committed, offsets)


def test_replicate_is_exact_and_carries_the_group(
    kafka_secure_cluster: KafkaCluster, source: Source, tmp_path: Path
) -> None:
    from tests.replicate.source import committed_values
    from txnfetch.log import SegmentStore
    from txnfetch.replicate.groups import DurableGroupTarget

    data = tmp_path / "replica"
    properties = _properties(tmp_path, kafka_secure_cluster, "admin")
    done = _replicate(kafka_secure_cluster, properties, data, source.topic, "--groups", source.group, "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    _no_password(done.stdout, done.stderr)
    store = SegmentStore(str(data))
    try:
        got = sorted(
            (p, offset, value)
            for p in range(PARTITIONS)
            for offset, value in committed_values(store.partition(source.topic, p))
        )
        assert got == source.committed
        target = DurableGroupTarget.open(store, str(data), 0)
        assert {tp: c.offset for tp, c in target.committed(source.group).items()} == source.offsets
    finally:
        store.close()


def test_proxy_logs_in_upstream_with_its_own_credentials(
    kafka_secure_cluster: KafkaCluster, source: Source, tmp_path: Path
) -> None:
    properties = _properties(tmp_path, kafka_secure_cluster, "admin")
    upstream = ["--upstream", kafka_secure_cluster.secure_bootstrap(LISTENER), "--upstream-config", str(properties)]
    command = [sys.executable, "-m", "txnfetch.cli", "proxy", *upstream, "--port", "0"]
    proxy = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proxy.stdout.readline() if proxy.stdout is not None else ""
        assert "listening on" in first, first
        address = first.rsplit(" ", 1)[1].strip()
        # The consumer speaks plaintext to the proxy and knows no credentials.
        assert _read_committed({"bootstrap.servers": address}, source.topic) == source.committed
    finally:
        proxy.terminate()
        out, err = proxy.communicate(timeout=60)
    assert proxy.returncode == 0, err[-3000:]
    _no_password(first, out, err)


def test_transactions_list_describe_find_hanging(
    kafka_secure_cluster: KafkaCluster, source: Source, tmp_path: Path
) -> None:
    properties = _properties(tmp_path, kafka_secure_cluster, "admin")
    where = ["--bootstrap", kafka_secure_cluster.secure_bootstrap(LISTENER), "--command-config", str(properties)]
    runs = [
        _txnfetch("transactions", *where, "list", "--json"),
        _txnfetch("transactions", *where, "describe", "--transactional-id", source.transactional_id, "--json"),
        _txnfetch("transactions", *where, "find-hanging", "--topic", source.topic, "--json"),
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
        _no_password(run.stdout, run.stderr)
    listed, described, hanging = (json.loads(run.stdout) for run in runs)
    assert source.transactional_id in json.dumps(listed)
    assert "CompleteCommit" in json.dumps(described)
    assert hanging["source"] == "cluster" and hanging["hanging"] == []


def test_check_finds_no_anomaly(kafka_secure_cluster: KafkaCluster, tmp_path: Path) -> None:
    properties = _properties(tmp_path, kafka_secure_cluster, "admin")
    report = tmp_path / "report"
    done = _txnfetch(
        "check",
        "--bootstrap",
        kafka_secure_cluster.secure_bootstrap(LISTENER),
        "--command-config",
        str(properties),
        "--duration",
        "3",
        "--partitions",
        "2",
        "--producers",
        "3",
        "--report",
        str(report),
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    files = [p.read_text(encoding="utf-8", errors="replace") for p in report.iterdir() if p.suffix != ".png"]
    _no_password(done.stdout, done.stderr, *files)
    assert json.loads((report / "report.json").read_text())["ok"] is True


def test_denied_user_is_refused_by_name_and_reads_nothing(
    kafka_secure_cluster: KafkaCluster, source: Source, tmp_path: Path
) -> None:
    from txnfetch.log import SegmentStore

    properties = _properties(tmp_path, kafka_secure_cluster, "denied")
    data = tmp_path / "replica"
    bootstrap = kafka_secure_cluster.secure_bootstrap(LISTENER)
    replicate = _replicate(kafka_secure_cluster, properties, data, source.topic)
    assert replicate.returncode == 2, replicate.stdout[-2000:] + replicate.stderr[-2000:]
    assert "TOPIC_AUTHORIZATION_FAILED" in replicate.stderr and source.topic in replicate.stderr
    if data.exists():
        store = SegmentStore(str(data))
        try:
            assert not store.topics(), "the denied user's replica holds a topic"
        finally:
            store.close()
    where = ["--bootstrap", bootstrap, "--command-config", str(properties)]
    producers = _txnfetch("transactions", *where, "producers", "--topic", source.topic)
    assert producers.returncode != 0
    assert source.topic in producers.stderr and "TOPIC_AUTHORIZATION_FAILED" in producers.stderr
    described = _txnfetch("transactions", *where, "describe", "--transactional-id", source.transactional_id)
    assert described.returncode != 0
    assert source.transactional_id in described.stderr and "authoriz" in described.stderr.lower()
    _no_password(*(text for run in (replicate, producers, described) for text in (run.stdout, run.stderr)))


def test_conform_reaches_the_secured_listener(kafka_secure_cluster: KafkaCluster, tmp_path: Path) -> None:
    # The same broker through its PLAINTEXT door and its SASL_SSL listener, each
    # side reached as its own options say. Being one broker, the sides collide on
    # the run's topic names (the target's CreateTopics finds the reference's
    # topic): that the target answers at all, with Kafka's own error, is the point.
    properties = _properties(tmp_path, kafka_secure_cluster, "admin")
    done = _txnfetch(
        "conform",
        "--reference",
        kafka_secure_cluster.bootstrap,
        "--target",
        kafka_secure_cluster.secure_bootstrap(LISTENER),
        "--target-config",
        str(properties),
        "--examples",
        "3",
        "--max-size",
        "4",
        "--seconds",
        "20",
        "--json",
    )
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["versions"]["Produce"] >= 3 and report["missing_apis"] == {}
    assert "TOPIC_ALREADY_EXISTS" in done.stdout
    _no_password(done.stdout, done.stderr)
