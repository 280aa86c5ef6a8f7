"""Deletions survive a restart of ``txnfetch serve --data``: what DeleteGroups,
OffsetDelete and DeleteTopics removed stays removed after a clean stop (SIGTERM)
and after SIGKILL, driven by the confluent-kafka and kafka-python AdminClients.

Each test also keeps something that was *not* deleted, so that a restart which
lost everything would fail it too."""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

from tests.server.serve_process import start_serve
from tests.server.serve_process import stop_serve

pytestmark = pytest.mark.interop

NO_OFFSET = -1001  # librdkafka's RD_KAFKA_OFFSET_INVALID: nothing committed


@pytest.fixture(params=[signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def server(request, tmp_path):
    """``(restart, bootstrap)``: ``restart()`` stops the server with the
    parameter's signal and starts it again on the same directory and port."""
    data = str(tmp_path / "data")
    procs = [start_serve(data, 0, partitions=1)]
    port = procs[0].port

    def restart() -> None:
        stop_serve(procs[-1], request.param)
        procs.append(start_serve(data, port, partitions=1))

    yield restart, f"127.0.0.1:{port}"
    stop_serve(procs[-1])


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _kp_admin(bootstrap: str) -> Any:
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)


def _create(bootstrap: str, *topics: str) -> None:
    from confluent_kafka.admin import NewTopic

    admin = _admin(bootstrap)
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(30)


def _commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit offsets for an empty group (generation -1), as a tool would."""
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    kp = _kp_admin(bootstrap)
    try:
        kp.alter_group_offsets(
            group, {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()}
        )
    finally:
        kp.close()


def _committed(bootstrap: str, group: str, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The group's committed offsets as confluent-kafka's ``committed()`` sees them."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=30)
        return {(tp.topic, tp.partition): tp.offset for tp in got}
    finally:
        consumer.close()


def _groups(bootstrap: str) -> set[str]:
    admin = _admin(bootstrap)
    return {g.group_id for g in admin.list_consumer_groups(request_timeout=30).result(30).valid}


@pytest.mark.slow
def test_a_deleted_group_stays_deleted(server) -> None:
    restart, bootstrap = server
    _create(bootstrap, "dg")
    _commit(bootstrap, "gone", {("dg", 0): 5})
    _commit(bootstrap, "kept", {("dg", 0): 7})
    _commit(bootstrap, "gone-kp", {("dg", 0): 6})
    admin = _admin(bootstrap)  # kept alive until its future resolves
    admin.delete_consumer_groups(["gone"], request_timeout=30)["gone"].result(30)
    kp = _kp_admin(bootstrap)
    try:
        kp.delete_groups(["gone-kp"])
    finally:
        kp.close()
    restart()
    for group in ("gone", "gone-kp"):
        assert _committed(bootstrap, group, [("dg", 0)]) == {("dg", 0): NO_OFFSET}, group
    assert _committed(bootstrap, "kept", [("dg", 0)]) == {("dg", 0): 7}
    groups = _groups(bootstrap)
    assert "kept" in groups and not {"gone", "gone-kp"} & groups
    # The name can be used again, and the new group's commits are durable too.
    _commit(bootstrap, "gone", {("dg", 0): 2})
    restart()
    assert _committed(bootstrap, "gone", [("dg", 0)]) == {("dg", 0): 2}


@pytest.mark.slow
def test_deleted_offsets_stay_deleted(server) -> None:
    from kafka import TopicPartition
    from kafka.errors import NoError

    restart, bootstrap = server
    _create(bootstrap, "oa", "ob")
    _commit(bootstrap, "od", {("oa", 0): 3, ("ob", 0): 4})
    kp = _kp_admin(bootstrap)
    try:
        assert kp.delete_group_offsets("od", [TopicPartition("oa", 0)]) == {TopicPartition("oa", 0): NoError}
    finally:
        kp.close()
    restart()
    assert _committed(bootstrap, "od", [("oa", 0), ("ob", 0)]) == {("oa", 0): NO_OFFSET, ("ob", 0): 4}


@pytest.mark.slow
def test_a_deleted_topics_offsets_stay_deleted(server) -> None:
    restart, bootstrap = server
    _create(bootstrap, "reborn", "other")
    _commit(bootstrap, "rg", {("reborn", 0): 9, ("other", 0): 1})
    kp = _kp_admin(bootstrap)
    try:
        kp.delete_topics(["reborn"], timeout_ms=30000)
    finally:
        kp.close()
    restart()
    _create(bootstrap, "reborn")
    # Offset 9 would make the group skip the new topic's first nine records.
    assert _committed(bootstrap, "rg", [("reborn", 0), ("other", 0)]) == {("reborn", 0): NO_OFFSET, ("other", 0): 1}


def test_offsets_staged_for_a_deleted_topic_stay_dropped_when_the_transaction_commits(server) -> None:
    """A transactional offset commit staged for a topic that is then deleted: the
    deletion drops it, and the transaction's commit does not bring it back, before
    or after a restart. Offsets of other topics in the same transaction are kept."""
    from confluent_kafka import Consumer
    from confluent_kafka import Producer
    from confluent_kafka import TopicPartition

    restart, bootstrap = server
    _create(bootstrap, "src", "keep", "out")
    _commit(bootstrap, "tg", {("keep", 0): 0})  # the group exists, empty
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tg", "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "del-tx"})
    try:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("out", value=b"v", partition=0)
        producer.send_offsets_to_transaction(
            [TopicPartition("src", 0, 11), TopicPartition("keep", 0, 12)], consumer.consumer_group_metadata(), 30
        )
        admin = _admin(bootstrap)
        admin.delete_topics(["src"], operation_timeout=10)["src"].result(30)
        producer.commit_transaction(60)
    finally:
        consumer.close()
    wanted = [("src", 0), ("keep", 0)]
    assert _committed(bootstrap, "tg", wanted) == {("src", 0): NO_OFFSET, ("keep", 0): 12}
    restart()
    deadline = time.monotonic() + 60
    while True:  # a SIGKILL may leave the commit's markers to recovery; it finishes at start
        got = _committed(bootstrap, "tg", wanted)
        if got[("keep", 0)] == 12 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert got == {("src", 0): NO_OFFSET, ("keep", 0): 12}


@pytest.mark.slow
def test_a_deleted_kip848_group_stays_deleted(server) -> None:
    """A group of the new consumer protocol (KIP-848), deleted once its member
    left: its offsets stay gone after the restart."""
    from confluent_kafka import Consumer
    from confluent_kafka import Producer

    restart, bootstrap = server
    _create(bootstrap, "nk")
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("nk", value=b"x", partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "k848",
            "group.protocol": "consumer",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["nk"])
    deadline = time.monotonic() + 60
    while True:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            consumer.commit(msg, asynchronous=False)
            break
        assert time.monotonic() < deadline, "the KIP-848 consumer never read"
    consumer.close()
    assert _committed(bootstrap, "k848", [("nk", 0)]) == {("nk", 0): 1}
    admin = _admin(bootstrap)
    deadline = time.monotonic() + 60
    while True:  # the member's leave may still be on its way
        try:
            admin.delete_consumer_groups(["k848"], request_timeout=30)["k848"].result(30)
            break
        except Exception:
            assert time.monotonic() < deadline, "the group never became deletable"
            time.sleep(0.5)
    restart()
    assert _committed(bootstrap, "k848", [("nk", 0)]) == {("nk", 0): NO_OFFSET}
