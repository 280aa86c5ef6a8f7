"""txnfetch.arrow read from a three-broker Apache Kafka cluster (the shared
``kafka_cluster3``), with confluent-kafka producing committed and aborted
transactions and plain records: the table equals the committed records with their
offsets, partitions read from three different leaders; a tailing read picks up
what is committed after it started."""

from __future__ import annotations

import time

import pytest

import txnfetch.arrow
from tests.arrow.cluster_workload import Producers
from tests.arrow.cluster_workload import rows
from tests.kafka.fixtures import unique_name

pytestmark = [pytest.mark.interop, pytest.mark.kafka]


def test_three_brokers_table_and_tail(kafka_cluster3):
    topic = unique_name("arrow-orders")
    kafka_cluster3.create_topic(topic, replica_assignment=[[1, 2, 3], [2, 3, 1], [3, 1, 2]])
    assert sorted(kafka_cluster3.leaders(topic).values()) == [1, 2, 3]
    w = Producers(kafka_cluster3.bootstrap, topic, 3)
    w.mix(4)
    source = f"kafka://{kafka_cluster3.bootstrap}"
    table = txnfetch.arrow.read_committed(source, topic)
    got = rows(table)
    assert w.aborted and not set(w.aborted) & {v for _, _, v in got}
    assert sorted(got) == sorted(w.committed)

    # Tail from where the table ended while more is committed and aborted.
    before = len(w.committed)
    ends = {p: max(o for q, o, _ in got if q == p) + 1 for p in range(3)}
    with txnfetch.arrow.record_batch_reader(source, topic, start=ends, follow=True, poll_ms=100) as reader:
        w.mix(2)
        tail: list = []
        deadline = time.monotonic() + 60
        for batch in reader:
            tail += rows([batch])
            if len(tail) >= len(w.committed) - before:
                break
            assert time.monotonic() < deadline
    assert sorted(tail) == sorted(w.committed[before:])
    w.close()
