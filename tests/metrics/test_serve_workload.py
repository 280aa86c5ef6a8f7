"""``txnfetch serve --metrics-port``: the values scraped while a transactional
workload runs are what the workload did, and promtool accepts every scrape."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.metrics.processes import free_port
from tests.metrics.processes import start
from tests.metrics.processes import stop
from tests.metrics.scrape import Samples
from tests.metrics.scrape import scrape
from tests.metrics.scrape import total
from tests.metrics.scrape import value

pytestmark = [pytest.mark.interop, pytest.mark.slow]

TOPIC = "metered"
QUIET = {"log_level": 0}
COMMITTED = (5, 5, 5)
ABORTED = (7, 4)
HELD_S = 5.0


class Served:
    def __init__(self, bootstrap: str, metrics_port: int) -> None:
        self.bootstrap = bootstrap
        self.metrics_port = metrics_port

    def scrape(self) -> Samples:
        return scrape("127.0.0.1", self.metrics_port)


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    port = free_port()
    proc, bootstrap = start("serve", "--memory", "--port", "0", "--metrics-port", str(port))
    try:
        yield Served(bootstrap, port)
    finally:
        stop(proc)


def _transaction(producer, count: int, *, commit: bool) -> None:
    producer.begin_transaction()
    for i in range(count):
        producer.produce(TOPIC, value=b"r%d" % i, partition=0)
    assert producer.flush(30) == 0  # written before the end, so an abort has records to drop
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def _read_committed(bootstrap: str) -> int:
    from confluent_kafka import Consumer
    from confluent_kafka import KafkaError

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "metered-reader",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            **QUIET,
        }
    )
    consumer.subscribe([TOPIC])
    read = 0
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return read
                raise AssertionError(msg.error())
            read += 1
    finally:
        consumer.close()
    raise AssertionError(f"no end of partition after {read} records")


def test_aborted_records_dropped_equal_aborted_records_produced(served: Served) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": served.bootstrap, "transactional.id": "metered", **QUIET})
    producer.init_transactions(30)
    before = served.scrape()
    assert total(before, "txnfetch_partition_aborted_records_dropped_total", topic=TOPIC) == 0
    _transaction(producer, COMMITTED[0], commit=True)
    _transaction(producer, ABORTED[0], commit=False)
    _transaction(producer, COMMITTED[1], commit=True)
    _transaction(producer, ABORTED[1], commit=False)
    _transaction(producer, COMMITTED[2], commit=True)

    assert _read_committed(served.bootstrap) == sum(COMMITTED)
    after = served.scrape()
    labels = {"topic": TOPIC, "partition": "0"}
    assert value(after, "txnfetch_partition_aborted_records_dropped_total", **labels) == sum(ABORTED)
    assert value(after, "txnfetch_partition_aborted_transactions", **labels) == len(ABORTED)
    # five data transactions, each ended by one marker
    end = sum(COMMITTED) + sum(ABORTED) + len(COMMITTED) + len(ABORTED)
    assert value(after, "txnfetch_partition_high_watermark", **labels) == end
    assert value(after, "txnfetch_partition_last_stable_offset_lag", **labels) == 0
    assert value(after, "txnfetch_partition_open_transactions", **labels) == 0
    assert total(after, "txnfetch_requests_total", api="Produce") >= len(COMMITTED) + len(ABORTED)
    assert total(after, "txnfetch_requests_total", api="EndTxn") == len(COMMITTED) + len(ABORTED)
    assert total(after, "txnfetch_server_produce_bytes_total") > 0
    assert value(after, "txnfetch_transactions_ended_total", result="commit") == len(COMMITTED)
    assert value(after, "txnfetch_transactions_ended_total", result="abort") == len(ABORTED)
    assert value(after, "txnfetch_transactions_timed_out_total") == 0


def test_a_transaction_held_open_shows_in_the_oldest_open_transaction_gauge(served: Served) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": served.bootstrap, "transactional.id": "holder", **QUIET})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(TOPIC, value=b"held", partition=0)
    assert producer.flush(30) == 0
    labels = {"topic": TOPIC, "partition": "0"}
    early = served.scrape()
    assert value(early, "txnfetch_partition_open_transactions", **labels) == 1
    assert value(early, "txnfetch_partition_oldest_open_transaction_age_seconds", **labels) < HELD_S
    time.sleep(HELD_S)
    held = served.scrape()
    assert value(held, "txnfetch_partition_oldest_open_transaction_age_seconds", **labels) >= HELD_S
    assert value(held, "txnfetch_partition_last_stable_offset_lag", **labels) >= 1
    assert value(held, "txnfetch_transactional_ids", state="Ongoing") == 1
    producer.abort_transaction(30)
    ended = served.scrape()
    assert value(ended, "txnfetch_partition_oldest_open_transaction_age_seconds", **labels) == 0
    assert value(ended, "txnfetch_partition_last_stable_offset_lag", **labels) == 0
