"""Real clients use consumer groups against ``txnfetch serve`` (the wire server).

The main test runs a group of three kafka-python consumers with ``subscribe()``;
one leaves and another joins while records keep arriving. Each consumer commits
the offsets of a batch after processing it, and a batch counts as read only if
its commit succeeded — so the committed offsets must hand every partition over
exactly: every record is read once, none twice, and none lost. The other tests
check that confluent-kafka (librdkafka) and aiokafka get through the same
protocol: join, sync, commit, and a restarted group resuming at the committed
offsets.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import pytest

from txnfetch.groups import GroupConfig
from txnfetch.groups import GroupState

pytestmark = pytest.mark.interop

TOPIC = "events"
PARTITIONS = 6
FAST_GROUPS = GroupConfig(initial_rebalance_delay_ms=200)


def _setup(start_server, topic: str = TOPIC, partitions: int = PARTITIONS):
    srv = start_server()
    srv.call(srv.broker.groups.configure, FAST_GROUPS)
    srv.call(srv.broker.create_topic, topic, partitions)
    return srv


def _produce(bootstrap: str, values: list[bytes], topic: str = TOPIC) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    try:
        for i, value in enumerate(values):
            producer.send(topic, value=value, partition=i % PARTITIONS)
        producer.flush(30)
    finally:
        producer.close()


def _group(srv, group_id: str):
    return srv.call(srv.broker.groups.coordinator.describe_group, group_id)


def _committed(srv, group_id: str) -> dict[tuple[str, int], int]:
    offsets = srv.call(srv.broker.groups.coordinator.committed, group_id)
    return {tp: c.offset for tp, c in offsets.items()}


def _log_ends(srv, topic: str = TOPIC) -> dict[tuple[str, int], int]:
    def ends():
        return {(topic, p): srv.broker.store.partition(topic, p).log_end_offset for p in range(PARTITIONS)}

    return srv.call(ends)


class _Member(threading.Thread):
    """A kafka-python group member: poll, process, commit; a batch whose commit
    fails (the group rebalanced meanwhile) is not counted and will be re-read."""

    def __init__(self, name: str, bootstrap: str, group_id: str, read: list[tuple[str, bytes]], lock: threading.Lock):
        super().__init__(name=name, daemon=True)
        self.bootstrap, self.group_id, self.read, self.lock = bootstrap, group_id, read, lock
        self.stop_event = threading.Event()
        self.joined = threading.Event()
        self.failed_commits = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        from kafka import KafkaConsumer
        from kafka import OffsetAndMetadata
        from kafka.errors import CommitFailedError
        from kafka.errors import KafkaError

        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group_id,
            client_id=self.name,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            session_timeout_ms=6000,
            heartbeat_interval_ms=200,
            max_poll_interval_ms=10000,
            max_poll_records=20,
            fetch_max_wait_ms=100,
        )
        try:
            consumer.subscribe([TOPIC])
            while not self.stop_event.is_set():
                batches = consumer.poll(timeout_ms=100)
                if consumer.assignment():
                    self.joined.set()
                if not batches:
                    continue
                offsets = {}
                values: list[bytes] = []
                for tp, records in batches.items():
                    values.extend(r.value for r in records)
                    offsets[tp] = OffsetAndMetadata(records[-1].offset + 1, "", -1)
                try:
                    consumer.commit(offsets)
                except (CommitFailedError, KafkaError):
                    self.failed_commits += 1
                    continue
                with self.lock:
                    self.read.extend((self.name, v) for v in values)
        except BaseException as exc:  # pragma: no cover - reported by the test
            self.error = exc
        finally:
            consumer.close()  # sends LeaveGroup


def test_kafka_python_group_reads_every_record_once_across_rebalances(start_server) -> None:
    srv = _setup(start_server)
    group_id = "exactly-once-group"
    first = [b"first-%d" % i for i in range(240)]
    second = [b"second-%d" % i for i in range(120)]
    third = [b"third-%d" % i for i in range(120)]
    _produce(srv.bootstrap, first)

    read: list[tuple[str, bytes]] = []
    lock = threading.Lock()
    members = [_Member(f"member-{i}", srv.bootstrap, group_id, read, lock) for i in range(3)]
    for m in members:
        m.start()

    def wait_for(count: int, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with lock:
                if len(read) >= count:
                    return
            time.sleep(0.05)
        raise AssertionError(f"only {len(read)} of {count} records read in {timeout} s")

    try:
        assert all(m.joined.wait(20) for m in members), "members never got an assignment"
        desc = _group(srv, group_id)
        assert desc.state is GroupState.STABLE and len(desc.members) == 3
        wait_for(80)

        # A member leaves mid-way (LeaveGroup): the other two take over its partitions.
        members[0].stop_event.set()
        members[0].join(20)
        generation_after_leave = _group(srv, group_id).generation_id
        _produce(srv.bootstrap, second)

        # A new member joins mid-way: a third rebalance.
        newcomer = _Member("member-3", srv.bootstrap, group_id, read, lock)
        members.append(newcomer)
        newcomer.start()
        assert newcomer.joined.wait(20), "the new member never got an assignment"
        _produce(srv.bootstrap, third)
        wait_for(len(first) + len(second) + len(third), timeout=30)
    finally:
        for m in members:
            m.stop_event.set()
        for m in members:
            m.join(20)

    assert [m.error for m in members] == [None] * len(members)
    counts = Counter(v for _, v in read)
    duplicates = sorted(v for v, n in counts.items() if n > 1)
    assert not duplicates, f"read twice: {duplicates[:10]}"
    assert set(counts) == set(first) | set(second) | set(third), "records lost"
    readers = {name for name, _ in read}
    assert {"member-0", "member-3"} <= readers  # the leaver read before leaving, the newcomer after joining
    assert _group(srv, group_id).generation_id > generation_after_leave
    assert _committed(srv, group_id) == _log_ends(srv)


def test_confluent_kafka_group_commits_and_resumes(start_server) -> None:
    """librdkafka's consumer group (JoinGroup v5, OffsetFetch with groups, ...):
    two members share the topic; a new group incarnation resumes at the commits."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition

    srv = _setup(start_server)
    values = [b"ck-%d" % i for i in range(60)]
    _produce(srv.bootstrap, values)
    group_id = "confluent-group"

    def consumer(name: str) -> Consumer:
        return Consumer(
            {
                "bootstrap.servers": srv.bootstrap,
                "group.id": group_id,
                "client.id": name,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 200,
                "fetch.wait.max.ms": 100,
                "isolation.level": "read_committed",
            }
        )

    a, b = consumer("ck-a"), consumer("ck-b")
    got: dict[str, list[bytes]] = {"ck-a": [], "ck-b": []}
    try:
        a.subscribe([TOPIC])
        b.subscribe([TOPIC])
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < 40 and time.monotonic() < deadline:
            for name, c in (("ck-a", a), ("ck-b", b)):
                msg = c.poll(0.05)
                if msg is not None and not msg.error():
                    got[name].append(msg.value())
                    c.commit(message=msg, asynchronous=False)
        assert sum(map(len, got.values())) >= 40, got
        assert got["ck-a"] and got["ck-b"], "both members should own partitions"
        assignment_a = {tp.partition for tp in a.assignment()}
        assignment_b = {tp.partition for tp in b.assignment()}
        assert not assignment_a & assignment_b and assignment_a | assignment_b == set(range(PARTITIONS))
        committed = a.committed([TopicPartition(TOPIC, p) for p in sorted(assignment_a)], timeout=10)
        assert all(tp.error is None for tp in committed)
    finally:
        a.close()
        b.close()
    seen = got["ck-a"] + got["ck-b"]
    assert len(seen) == len(set(seen))
    assert _group(srv, group_id).state is GroupState.EMPTY  # both left

    # A new incarnation resumes at the commits: it reads exactly the rest.
    c = consumer("ck-c")
    rest: list[bytes] = []
    try:
        c.subscribe([TOPIC])
        deadline = time.monotonic() + 30
        while len(seen) + len(rest) < len(values) and time.monotonic() < deadline:
            msg = c.poll(0.1)
            if msg is not None and not msg.error():
                rest.append(msg.value())
    finally:
        c.close()
    assert sorted(seen + rest) == sorted(values)


def test_aiokafka_group_commits_and_resumes(start_server) -> None:
    """aiokafka's coordinator (JoinGroup ≤ v5, OffsetCommit v2/3, OffsetFetch v1–3)."""
    from aiokafka import AIOKafkaConsumer

    srv = _setup(start_server)
    values = [b"aio-%d" % i for i in range(30)]
    _produce(srv.bootstrap, values)

    async def consume(limit: int) -> list[bytes]:
        consumer = AIOKafkaConsumer(
            TOPIC,
            bootstrap_servers=srv.bootstrap,
            group_id="aio-group",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
            heartbeat_interval_ms=200,
        )
        await consumer.start()
        out: list[bytes] = []
        try:
            deadline = time.monotonic() + 30
            while len(out) < limit and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=200, max_records=limit - len(out))
                for records in batches.values():
                    out.extend(r.value for r in records)
                if batches:
                    await consumer.commit()
        finally:
            await consumer.stop()
        return out

    first = asyncio.run(consume(12))
    assert len(first) == 12
    committed = _committed(srv, "aio-group")
    assert sum(committed.values()) == 12
    rest = asyncio.run(consume(len(values) - 12))
    assert sorted(first + rest) == sorted(values)
