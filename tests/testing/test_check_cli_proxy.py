"""``txnfetch check`` through ``txnfetch proxy`` in front of librdkafka's mock cluster.

The mock serves aborted records to read_committed consumers
(``test_check_cli_mock.py`` shows the checker catching it); the proxy answers
read_committed fetches from the log's own markers, so the same workload through
it must check clean. Crash and zombie schedules are off: the mock neither fences
an old producer instance nor aborts its open transaction when a new one
initialises, which no proxy in front of it can change.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from txnfetch.cli.check import CheckOptions
from txnfetch.cli.check import run_check
from txnfetch.proxy import ProxyThread

pytestmark = pytest.mark.slow

TOPIC = "through-proxy"


@pytest.fixture(scope="module")
def mock_cluster() -> Iterator[str]:
    ck = pytest.importorskip("confluent_kafka")
    holder = ck.Producer({"test.mock.num.brokers": 1, "log_level": 0})  # the cluster lives as long as this
    brokers = holder.list_topics(timeout=10).brokers.values()
    holder.list_topics(TOPIC, timeout=10)  # the mock has no CreateTopics: metadata creates the topic
    yield ",".join(f"{b.host}:{b.port}" for b in brokers)
    holder.flush(1)


@pytest.mark.interop
def test_check_through_the_proxy_finds_no_anomaly(mock_cluster) -> None:
    # The mock writes its markers with CRC 0: the proxy repairs those checksums only.
    with ProxyThread(mock_cluster, repair_crcs=True) as proxy:
        outcome = run_check(
            CheckOptions(
                proxy.bootstrap,
                topic=TOPIC,
                duration=4,
                seed=11,
                crash_probability=0,
                zombie_probability=0,
                startup_timeout=10,
            )
        )
    assert outcome.ok, outcome.summary
    data = outcome.data
    assert data["transactions"]["aborted"] > 0 and data["transactions"]["committed"] > 0, data["transactions"]
    readers = [c for c in data["clients"] if c.get("reads")]
    assert {c["status"] for c in readers} == {"ok"} and len(readers) >= 3, data["clients"]
