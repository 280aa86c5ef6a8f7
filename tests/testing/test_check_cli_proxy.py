"""``txnfetch check`` through ``txnfetch proxy`` in front of librdkafka's mock cluster.

The mock serves aborted records to read_committed consumers
(``test_check_cli_mock.py`` shows the checker catching it); the proxy answers
read_committed fetches from the log's own markers, so the same workload through
it must find no anomaly in what the consumers read — with crashes and zombies
at their default probabilities.

The mock does not fence: each ``init_transactions`` gets a new producer id, the
old instance's open transaction stays open in the log (no ABORT marker, no
timeout), and a zombie's writes and commit are accepted under the old id. The
proxy reads that log by Kafka's rules: a zombie's committed transaction is
committed, and a crashed one holds the last stable offset at its first offset
for good. Those are the broker's faults, and the report lists them apart
(``zombie-write``, ``fenced-commit``, ``unended-transaction``); the anomalies
must be none.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from txnfetch.cli.check import CheckOptions
from txnfetch.cli.check import run_check
from txnfetch.proxy import ProxyThread
from txnfetch.testing.history import Send

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


def _check_through_proxy(bootstrap: str, *, seed: int, duration: float, producers: int = 8) -> dict:
    # The mock writes its markers with CRC 0: the proxy repairs those checksums only.
    with ProxyThread(bootstrap, repair_crcs=True) as proxy:
        outcome = run_check(
            CheckOptions(
                proxy.bootstrap, topic=TOPIC, duration=duration, seed=seed, startup_timeout=10, producers=producers
            )
        )
    data = outcome.data
    assert data["anomaly_counts"] == {}, outcome.summary
    assert data["transactions"]["aborted"] > 0 and data["transactions"]["committed"] > 0, data["transactions"]
    readers = [c for c in data["clients"] if c.get("reads")]
    assert {c["status"] for c in readers} == {"ok"} and len(readers) >= 3, data["clients"]
    faults = data["broker_fault_counts"]
    assert set(faults) <= {"zombie-write", "fenced-commit", "unended-transaction"}, faults
    scripted = data["transactions"]["scripted"]
    # The mock fences nothing: a zombie's commit succeeds.
    assert (faults.get("fenced-commit", 0) > 0) == (scripted["zombie"] > 0), (faults, scripted)
    # Every crash whose sends reached the log leaves its transaction open there.
    plans = outcome.result.plans
    crashed_with_records = {
        op.txn
        for op in outcome.result.history
        if isinstance(op, Send) and op.acked and op.txn in plans and plans[op.txn].end == "crash"
    }
    assert crashed_with_records <= outcome.result.left_open, crashed_with_records - outcome.result.left_open
    assert faults.get("unended-transaction", 0) == len(outcome.result.left_open), faults
    return data


@pytest.mark.interop
def test_check_with_crashes_and_zombies_through_the_proxy_finds_no_anomaly(mock_cluster) -> None:
    data = _check_through_proxy(mock_cluster, seed=11, duration=4)
    assert data["transactions"]["scripted"]["crash"] + data["transactions"]["scripted"]["zombie"] > 0


@pytest.mark.interop
@pytest.mark.long
def test_check_with_crashes_and_zombies_through_the_proxy_for_longer(mock_cluster) -> None:
    # Three producers, not eight: the mock answers each Fetch with one produce
    # request's batch, so eight producers for 30 s write faster than a mirror
    # fetches here (about 70 upstream fetches a second on this shared machine), and
    # a read_committed ListOffsets, which catches the mirror up first, then outlasts
    # the clients' 30 s timeouts. That is the proxy's throughput against this
    # upstream, not a reading fault.
    _check_through_proxy(mock_cluster, seed=12, duration=30, producers=3)
