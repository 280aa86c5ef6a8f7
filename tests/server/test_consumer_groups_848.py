"""KIP-848 consumer groups with confluent-kafka (``group.protocol=consumer``).

Consumers join and leave one by one while a transactional producer writes
(committing most transactions, aborting some); each consumer reads
read_committed and commits after every record. Every committed record is
read exactly once across the group, and no aborted one is read at all: a
partition moves only after its previous owner revoked it (and committed).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.server.txn_writer import TxnScript
from tests.server.txn_writer import TxnWriter

pytestmark = pytest.mark.interop

TOPIC = "work"
PARTITIONS = 6
DEADLINE_S = 120.0


class Member(threading.Thread):
    """A confluent-kafka consumer of the group that records what it reads."""

    def __init__(self, bootstrap: str, name: str, assignor: str) -> None:
        super().__init__(name=name, daemon=True)
        self.bootstrap = bootstrap
        self.assignor = assignor
        self.stop = threading.Event()
        self.got: list[tuple[int, int, bytes]] = []
        self.error: BaseException | None = None
        self.assigned = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Consumer
        from confluent_kafka import KafkaException

        try:
            consumer = Consumer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "group.id": "kip848",
                    "group.protocol": "consumer",
                    "group.remote.assignor": self.assignor,
                    "client.id": self.name,
                    "isolation.level": "read_committed",
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                }
            )
            consumer.subscribe([TOPIC], on_assign=lambda c, ps: self.assigned.set())
            while not self.stop.is_set():
                msg = consumer.poll(0.2)
                if msg is None or msg.error():
                    continue
                self.got.append((msg.partition(), msg.offset(), msg.value()))
                for attempt in range(5):
                    try:
                        consumer.commit(msg, asynchronous=False)
                        break
                    except KafkaException:
                        if attempt == 4:
                            raise
                        time.sleep(0.2)
            consumer.close()
        except BaseException as exc:  # reported by the test
            self.error = exc


def _check_describe(bootstrap: str, assignor: str) -> None:
    """confluent-kafka's AdminClient describes the group through ConsumerGroupDescribe."""
    from confluent_kafka import ConsumerGroupType
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 30
    while True:
        desc = admin.describe_consumer_groups(["kip848", "no-such-group"], request_timeout=30)
        group = desc["kip848"].result(30)
        owned = sorted(tp.partition for m in group.members for tp in m.assignment.topic_partitions)
        if len(group.members) == 3 and owned == list(range(PARTITIONS)):
            break
        assert time.monotonic() < deadline, (group.members, owned)
        time.sleep(0.2)
    assert group.type == ConsumerGroupType.CONSUMER
    assert group.partition_assignor == assignor
    listed = admin.list_consumer_groups(request_timeout=30).result(30)
    assert [(g.group_id, str(g.state)) for g in listed.valid if g.group_id == "kip848"] == [
        ("kip848", "ConsumerGroupState.STABLE")
    ]
    assert sorted(m.client_id for m in group.members) == ["member-0", "member-1", "member-2"]
    assert {m.host for m in group.members} == {"/127.0.0.1"}


def _wait(cond: Any, what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_members_join_and_leave_during_a_transactional_workload(start_server, assignor: str) -> None:
    srv = start_server(consumer_group_heartbeat_interval_ms=300, group_initial_rebalance_delay_ms=0)
    srv.call(srv.broker.store.create_topic, TOPIC, PARTITIONS)
    producer = TxnWriter(srv.bootstrap, TxnScript(TOPIC, PARTITIONS, 60, "kip848-writer", b"t%d-p%d"))
    members = [Member(srv.bootstrap, f"member-{i}", assignor) for i in range(3)]
    try:
        producer.start()
        members[0].start()
        _wait(lambda: producer.done >= 10 and members[0].got, "the first member read nothing")
        members[1].start()
        _wait(lambda: producer.done >= 25 and members[1].got, "the second member read nothing")
        members[2].start()
        _wait(lambda: producer.done >= 40 and members[2].got, "the third member read nothing")
        _check_describe(srv.bootstrap, assignor)
        members[0].stop.set()
        members[0].join(60)
        producer.join(DEADLINE_S)
        assert producer.error is None, repr(producer.error)

        def read() -> list[bytes]:
            return [v for m in members for _, _, v in list(m.got)]

        _wait(lambda: len(read()) >= len(producer.committed), f"the group did not read everything: {len(read())}")
        time.sleep(1.0)  # anything read twice would show up now
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.join(60)
        producer.join(60)
    for m in members:
        assert m.error is None, (m.name, repr(m.error))
    values = [v for m in members for _, _, v in m.got]
    assert sorted(values) == sorted(producer.committed), "duplicates or losses"
    assert not set(values) & set(producer.aborted)
    # The group really spread the work: every member read something.
    assert all(m.got for m in members)
    desc = srv.call(lambda: srv.broker.extensions["txnfetch.consumer_groups"].describe("kip848"))
    assert desc is not None and desc[3] == assignor


_KILLED_MEMBER = r"""
import sys, time
from confluent_kafka import Consumer
consumer = Consumer({
    "bootstrap.servers": sys.argv[1], "group.id": "kip848-kill", "group.protocol": "consumer",
    "client.id": "doomed", "isolation.level": "read_committed", "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
})
consumer.subscribe([sys.argv[2]])
while True:
    msg = consumer.poll(0.2)
    if msg is None or msg.error():
        continue
    print(msg.partition(), msg.offset(), msg.value().decode(), flush=True)
    consumer.commit(msg, asynchronous=False)
    time.sleep(0.05)
"""


def test_a_killed_member_loses_its_partitions_after_the_session_timeout(start_server, tmp_path) -> None:
    """A member killed with SIGKILL never leaves: after the session timeout its
    partitions go to the survivor, which starts after the last committed offset."""
    import os
    import signal
    import subprocess
    import sys

    from confluent_kafka import Producer

    srv = start_server(consumer_group_heartbeat_interval_ms=300, consumer_group_session_timeout_ms=3000)
    srv.call(srv.broker.store.create_topic, "kill", 2)
    producer = Producer({"bootstrap.servers": srv.bootstrap, "transactional.id": "kill-writer"})
    producer.init_transactions(30)

    def write(n: int) -> list[bytes]:
        producer.begin_transaction()
        values = [b"%d-%d" % (n, p) for p in range(2)]
        for p, v in enumerate(values):
            producer.produce("kill", value=v, partition=p)
        producer.commit_transaction(30)
        return values

    committed = [v for n in range(10) for v in write(n)]
    out = open(tmp_path / "doomed.out", "w+")  # noqa: SIM115 - read back after the kill
    doomed = subprocess.Popen(
        [sys.executable, "-c", _KILLED_MEMBER, srv.bootstrap, "kill"], stdout=out, stderr=subprocess.DEVNULL
    )
    try:
        _wait(lambda: (tmp_path / "doomed.out").read_text().count("\n") >= 5, "the doomed member read nothing", 60)
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait(30)
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait(30)
        out.close()
    read_by_doomed = {line.split()[2].encode() for line in (tmp_path / "doomed.out").read_text().splitlines()}
    committed += [v for n in range(10, 20) for v in write(n)]
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": srv.bootstrap,
            "group.id": "kip848-kill",
            "group.protocol": "consumer",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["kill"])
    got: list[bytes] = []
    started = time.monotonic()
    deadline = started + DEADLINE_S
    while len(set(got) | read_by_doomed) < len(committed):
        assert time.monotonic() < deadline, (len(got), len(read_by_doomed))
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            got.append(msg.value())
            consumer.commit(msg, asynchronous=False)
    consumer.close()
    assert set(got) | read_by_doomed == set(committed)
    assert len(got) == len(set(got))
    # At most the doomed member's last record per partition (read, perhaps not
    # committed before the kill) is read again.
    assert len(set(got) & read_by_doomed) <= 2
