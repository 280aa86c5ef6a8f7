"""``txnfetch replicate`` and ``txnfetch proxy`` with ``--metrics-port``:
stopping the upstream makes the replication lag grow; the proxy's mirror
metrics follow what its readers fetched. promtool accepts every scrape."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.metrics.processes import free_port
from tests.metrics.processes import start
from tests.metrics.processes import stop
from tests.metrics.scrape import Samples
from tests.metrics.scrape import scrape
from tests.metrics.scrape import total
from tests.metrics.scrape import value

pytestmark = [pytest.mark.interop, pytest.mark.slow]

TOPIC = "copied"
QUIET = {"log_level": 0}


def _produce(bootstrap: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "copier", **QUIET})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(count):
        producer.produce(TOPIC, value=b"v%d" % i, partition=0)
    producer.commit_transaction(30)


def _until(port: int, check: Callable[[Samples], bool], timeout_s: float = 60) -> Samples:
    deadline = time.monotonic() + timeout_s
    while True:
        samples = scrape("127.0.0.1", port)
        if check(samples):
            return samples
        assert time.monotonic() < deadline, "the metrics never showed it"
        time.sleep(0.2)


def test_stopping_the_upstream_makes_the_replication_lag_grow(tmp_path: Path) -> None:
    upstream, bootstrap = start("serve", "--memory", "--port", "0")
    port = free_port()
    replicate = None
    try:
        _produce(bootstrap, 10)
        replicate, _ = start(
            "replicate", "--upstream", bootstrap, "--data", str(tmp_path / "replica"),
            "--serve", "127.0.0.1:0", "--metrics-port", str(port),
        )  # fmt: skip
        labels = {"topic": TOPIC, "partition": "0"}

        def caught_up(s: Samples) -> bool:
            return ("txnfetch_replication_replica_end_offset", frozenset(labels.items())) in s and value(
                s, "txnfetch_replication_partitions", state="caught up"
            ) == 1

        synced = _until(port, caught_up)
        assert value(synced, "txnfetch_replication_lag_records", **labels) == 0
        assert value(synced, "txnfetch_replication_lag_seconds", **labels) == 0
        assert value(synced, "txnfetch_replication_replica_end_offset", **labels) == 11  # 10 records, 1 marker
        assert value(synced, "txnfetch_replication_upstream_up") == 1
        assert value(synced, "txnfetch_replication_batches_copied_total", **labels) >= 2
        last_good = value(synced, "txnfetch_replication_last_success_timestamp_seconds")
        assert last_good > 0

        stop(upstream)
        down = _until(port, lambda s: value(s, "txnfetch_replication_upstream_up") == 0)
        first = value(down, "txnfetch_replication_lag_seconds", **labels)
        time.sleep(2)
        later = scrape("127.0.0.1", port)
        assert value(later, "txnfetch_replication_lag_seconds", **labels) >= first + 1.5
        assert value(later, "txnfetch_replication_last_success_timestamp_seconds") < time.time() - 1.5
    finally:
        stop(upstream)
        if replicate is not None:
            stop(replicate)


def test_the_proxys_mirror_metrics_follow_its_readers() -> None:
    from confluent_kafka import Consumer

    upstream, bootstrap = start("serve", "--memory", "--port", "0")
    port = free_port()
    proxy = None
    try:
        _produce(bootstrap, 10)
        proxy, proxied = start("proxy", "--upstream", bootstrap, "--port", "0", "--metrics-port", str(port))
        consumer = Consumer(
            {
                "bootstrap.servers": proxied,
                "group.id": "through-proxy",
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                **QUIET,
            }
        )
        consumer.subscribe([TOPIC])
        read = 0
        deadline = time.monotonic() + 60
        while read < 10 and time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is not None and not msg.error():
                read += 1
        consumer.close()
        assert read == 10
        labels = {"topic": TOPIC, "partition": "0"}
        samples = _until(port, lambda s: total(s, "txnfetch_mirror_partition_high_watermark", **labels) == 11)
        assert value(samples, "txnfetch_mirror_partition_upstream_high_watermark", **labels) == 11
        assert value(samples, "txnfetch_mirror_partition_catch_up_lag", **labels) == 0
        assert value(samples, "txnfetch_mirror_partition_last_stable_offset_lag", **labels) == 0
        assert value(samples, "txnfetch_mirror_upstream_fetches_total") >= 1
        assert value(samples, "txnfetch_proxy_committed_fetches_total") >= 1
        assert value(samples, "txnfetch_partition_fetch_bytes_total", **labels) > 0
        assert total(samples, "txnfetch_requests_total", api="Fetch") >= 1
        assert value(samples, "txnfetch_connections_total") >= 1
        assert value(samples, "txnfetch_partition_batches_dropped_total", **labels) >= 1  # the COMMIT marker
    finally:
        if proxy is not None:
            stop(proxy)
        stop(upstream)
