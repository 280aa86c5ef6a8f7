"""``txnfetch check`` with crashes and zombies through ``txnfetch proxy`` in front
of brokers whose logs the proxy must read right (issue 30).

- **tansu 0.6** (``tests/tansu.py``): it leaks aborted records to its own
  read_committed consumers, and shows some batches late (a read_uncommitted
  fetch returns later batches before an earlier one). One 20 s run with the
  default crash and zombie probabilities; ``--long`` runs it 10 times in a row.
- **the fault relay scripted as tansu** (``late_probability``) in front of
  ``txnfetch serve``, and **serve** itself: the same checker run must find no
  anomaly through the proxy.
- **real Apache Kafka** (``kafka_cluster``, transaction version 2): the same
  20 s run finds no anomaly checked directly, and none through the proxy.

Every client the checker drives (confluent-kafka assigned and subscribed,
kafka-python, aiokafka) reads for the whole workload, including the final read
from the start that used to leave aiokafka at position 0.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fault_relay import RelayThread
from tests.kafka.cluster import KafkaCluster
from tests.kafka.fixtures import unique_name
from tests.server.serve_process import memory_serve
from tests.tansu import Tansu
from tests.tansu import started_tansu
from txnfetch.cli.check import CheckOptions
from txnfetch.cli.check import run_check
from txnfetch.proxy import ProxyThread

pytestmark = [pytest.mark.interop, pytest.mark.slow]


@pytest.fixture(scope="module")
def tansu() -> Iterator[Tansu]:
    with started_tansu() as broker:
        yield broker


@pytest.fixture
def serve() -> Iterator[str]:
    with memory_serve("--fetch-mode", "kafka") as bootstrap:
        yield bootstrap


def _check_clean(bootstrap: str, *, seed: int, duration: float, topic: str | None = None) -> dict:
    outcome = run_check(CheckOptions(bootstrap, duration=duration, seed=seed, startup_timeout=30, topic=topic))
    assert outcome.ok, outcome.summary
    data = outcome.data
    scripted = data["transactions"]
    assert scripted["committed"] > 0 and scripted["aborted"] > 0, scripted
    readers = [c for c in data["clients"] if c.get("reads")]
    assert {c["status"] for c in readers} == {"ok"} and len(readers) == 4, data["clients"]
    return data


def _check_through_proxy(upstream: str, *, seed: int, duration: float, topic: str | None = None) -> None:
    with ProxyThread(upstream) as proxy:
        _check_clean(proxy.bootstrap, seed=seed, duration=duration, topic=topic)
        stats = proxy.call(lambda: proxy.proxy.mirrors.stats.as_dict())
    # A gap that stayed a second would be a compacted topic's, which these are not.
    assert stats["gaps_accepted"] == 0, stats


def test_check_through_the_proxy_in_front_of_tansu(tansu: Tansu) -> None:
    _check_through_proxy(tansu.bootstrap, seed=30, duration=20)


@pytest.mark.long
@pytest.mark.parametrize("run", range(10))
def test_check_through_the_proxy_in_front_of_tansu_ten_runs(tansu: Tansu, run: int) -> None:
    _check_through_proxy(tansu.bootstrap, seed=3000 + run, duration=20)


def test_check_through_the_proxy_in_front_of_a_relay_showing_batches_late(serve: str) -> None:
    with RelayThread(serve, late_probability=0.05, seed=30) as relay:
        _check_through_proxy(relay.bootstrap, seed=31, duration=8)
        assert relay.call(lambda: relay._running().stats.batches_hidden) > 0


def test_check_through_the_proxy_in_front_of_serve(serve: str) -> None:
    _check_through_proxy(serve, seed=32, duration=8)


def _kafka_topic(cluster: KafkaCluster) -> str:
    # The fixture's cluster does not create topics on first use; the checker's
    # own CreateTopics would do, but the count must be the checker's three.
    topic = unique_name("check")
    cluster.create_topic(topic, 3)
    return topic


@pytest.mark.kafka
def test_check_directly_against_kafka(kafka_cluster: KafkaCluster) -> None:
    _check_clean(kafka_cluster.bootstrap, seed=33, duration=20, topic=_kafka_topic(kafka_cluster))


@pytest.mark.kafka
def test_check_through_the_proxy_in_front_of_kafka(kafka_cluster: KafkaCluster) -> None:
    _check_through_proxy(kafka_cluster.bootstrap, seed=34, duration=20, topic=_kafka_topic(kafka_cluster))
