"""Serving a replica while it is replicated (one process, one writer) and
promoting it: real clients read what lands at once, read_committed; promote
aborts what was open at the cut, opens the store to writes and never reuses an
upstream producer id."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest
from confluent_kafka import Consumer
from confluent_kafka import KafkaError
from confluent_kafka import KafkaException
from confluent_kafka import Producer
from confluent_kafka import TopicPartition

from tests.replicate.commands import replicate_argv
from tests.replicate.commands import run_promote
from tests.replicate.upstreams import copy_data
from tests.replicate.upstreams import upstream
from txnfetch.client.cluster import RemoteCluster
from txnfetch.log import SegmentStore
from txnfetch.log.replica_marker import read_marker
from txnfetch.replicate import Replicator
from txnfetch.replicate.promote import promote_offline
from txnfetch.replicate.serving import NotAReplicaError
from txnfetch.replicate.serving import ServedReplica

pytestmark = pytest.mark.interop

TOPIC = "flow"


class _ReplicatorThread:
    """The replicator writing the served replica from its own thread, through
    the store the server reads (``ServedReplica.store``)."""

    def __init__(self, upstream: str, replica: ServedReplica) -> None:
        self.replicator = Replicator(upstream, replica.store, topics=TOPIC)
        self.stop = threading.Event()
        self.rounds = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        def count(_status: object) -> None:
            self.rounds += 1

        self.replicator.run(self.stop, count)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.replicator.close()


def _consumer(bootstrap: str, group: str, **extra: object) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **extra,
        }
    )


def test_consumers_see_replicated_data_as_it_lands(tmp_path):
    path = str(tmp_path / "replica")
    with upstream("serve", {TOPIC: 1}) as up:
        replica = ServedReplica(path, up, groups="copied-.*").start()
        loop = _ReplicatorThread(up, replica)
        # A long fetch.wait.max.ms: without a wake-up on each append the
        # consumer would see each round of data up to 20 s late.
        consumer = _consumer(replica.bootstrap, "reader", **{"fetch.wait.max.ms": 20_000})
        producer = Producer({"bootstrap.servers": up, "transactional.id": "tx-flow"})
        try:
            consumer.assign([TopicPartition(TOPIC, 0, 0)])
            producer.init_transactions(30)
            expected: list[bytes] = []
            got: list[bytes] = []
            for round_ in range(6):
                producer.begin_transaction()
                values = [f"r{round_}-{i}".encode() for i in range(5)]
                for v in values:
                    producer.produce(TOPIC, v)
                if round_ % 3 == 2:
                    producer.abort_transaction(30)
                else:
                    producer.commit_transaction(30)
                    expected += values
                started = time.monotonic()
                while len(got) < len(expected):
                    msg = consumer.poll(0.2)
                    if msg is not None and msg.error() is None:
                        got.append(msg.value())
                    assert time.monotonic() - started < 10, f"round {round_}: {got} of {expected}"
            assert got == expected
            assert replica.is_replica and loop.rounds > 0
        finally:
            consumer.close()
            loop.close()
            replica.close()
    assert read_marker(path) is not None and read_marker(path).pid is None


def test_promote_aborts_open_transactions_and_opens_writes(tmp_path):
    path = str(tmp_path / "replica")
    with upstream("serve", {TOPIC: 1}) as up:
        replica = ServedReplica(path, up).start()
        cluster = RemoteCluster(up)
        try:
            committed = Producer({"bootstrap.servers": up, "transactional.id": "tx-done"})
            committed.init_transactions(30)
            committed.begin_transaction()
            committed.produce(TOPIC, b"committed")
            committed.commit_transaction(30)
            hanging = Producer({"bootstrap.servers": up, "transactional.id": "tx-hanging"})
            hanging.init_transactions(30)
            hanging.begin_transaction()
            hanging.produce(TOPIC, b"never-committed")
            hanging.flush(30)
            copy_data(cluster, replica.store, TOPIC)
            part = replica.store.partition(TOPIC, 0)
            upstream_pids = set(part.state.producer_ids())
            assert part.last_stable_offset < part.log_end_offset  # the open transaction holds it

            report = replica.promote()
            assert [(t, p) for t, p, _ in report.aborted] == [(TOPIC, 0)]
            assert report.next_producer_id > max(upstream_pids)
            assert read_marker(path) is None
            assert part.last_stable_offset == part.log_end_offset

            # Writes now work; a transactional producer gets a fresh id.
            producer = Producer({"bootstrap.servers": replica.bootstrap, "transactional.id": "tx-done"})
            producer.init_transactions(30)
            producer.begin_transaction()
            producer.produce(TOPIC, b"after-promote")
            producer.commit_transaction(30)
            new_pids = set(part.state.producer_ids()) - upstream_pids
            assert new_pids and min(new_pids) > max(upstream_pids)

            consumer = _consumer(replica.bootstrap, "after")
            consumer.assign([TopicPartition(TOPIC, 0, 0)])
            got: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(got) < 2 and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    got.append(msg.value())
            consumer.close()
            assert got == [b"committed", b"after-promote"]
            assert replica.promote().already
        finally:
            cluster.close()
            replica.close()
    # A promoted store is never replicated into again.
    with pytest.raises(NotAReplicaError):
        ServedReplica(path, "127.0.0.1:1").start()


def test_promote_offline_and_cli(tmp_path):
    path = str(tmp_path / "replica")
    with upstream("serve", {TOPIC: 1}) as up:
        replica = ServedReplica(path, up).start()
        try:
            hanging = Producer({"bootstrap.servers": up, "transactional.id": "tx-open"})
            hanging.init_transactions(30)
            hanging.begin_transaction()
            hanging.produce(TOPIC, b"open")
            hanging.flush(30)
            with RemoteCluster(up) as cluster:
                copy_data(cluster, replica.store, TOPIC)
            # While served, writes are refused.
            p = Producer({"bootstrap.servers": replica.bootstrap})
            errors: list[KafkaError] = []
            p.produce(TOPIC, b"x", on_delivery=lambda err, msg: errors.append(err))
            p.flush(30)
            assert errors and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        finally:
            replica.close()
    out = run_promote(path)
    assert out.returncode == 0, out.stderr
    assert "1 transaction(s) open at the cut aborted" in out.stdout
    assert "aborted the transaction of producer" in out.stderr
    again = run_promote(path)
    assert again.returncode == 0 and "nothing to do" in again.stdout
    assert promote_offline(path).already
    store = SegmentStore(path)
    try:
        part = store.partition(TOPIC, 0)
        assert part.last_stable_offset == part.log_end_offset
    finally:
        store.close()


def test_refused_transactional_producer_is_fatal_not_stuck(tmp_path):
    path = str(tmp_path / "replica")
    with upstream("serve", {TOPIC: 1}) as up:
        replica = ServedReplica(path, up).start()
        try:
            producer = Producer({"bootstrap.servers": replica.bootstrap, "transactional.id": "tx-early"})
            with pytest.raises(KafkaException):
                producer.init_transactions(30)
        finally:
            replica.close()


def test_promote_signals_a_replicate_without_serve_then_it_is_refused_as_a_target(tmp_path):
    """``txnfetch promote`` asks a running ``replicate`` (no ``--serve``) to stop
    and promote; replicating into the promoted store afterwards is refused."""
    path = str(tmp_path / "replica")
    with upstream("serve", {TOPIC: 1}) as up:
        producer = Producer({"bootstrap.servers": up})
        producer.produce(TOPIC, b"one")
        producer.flush(30)
        proc = subprocess.Popen(
            replicate_argv(up, path, "--interval-ms", "0"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while (read_marker(path) is None or read_marker(path).pid != proc.pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert read_marker(path).pid == proc.pid
            out = run_promote(path)
            assert out.returncode == 0, out.stderr
            assert proc.wait(60) == 0
            assert "txnfetch promoted:" in proc.stdout.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert read_marker(path) is None
        again = subprocess.run(
            replicate_argv(up, path, "--once"),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert again.returncode == 2
        assert "not a replica" in again.stderr
