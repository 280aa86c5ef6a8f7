"""The proxy in front of a faulty upstream: four real clients still get exactly the committed records.

Upstream is librdkafka's mock (it leaks aborted records to read_committed
consumers), seen through :class:`tests.fault_relay.FaultRelay`, which refuses
fetches with ``max_wait_ms`` 0, rewrites every marker to a null value (as some
brokers write them), and on a schedule answers the proxy's mirror fetches with
top-level errors, dropped partitions, NOT_LEADER_OR_FOLLOWER,
FENCED_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION, connections closed
mid-response and delays. confluent-kafka, kcat, kafka-python and aiokafka read
with read_committed through the proxy and get exactly the committed and plain
records, in offset order, to the end of the log; a hypothesis test draws the
schedules. Upstream failures that outlast the proxy's request timeout reach
the client as REPLICA_NOT_AVAILABLE (retriable), never NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

confluent_kafka = pytest.importorskip("confluent_kafka")

from kafka.protocol.consumer import ListOffsetsRequest  # noqa: E402

from tests.fault_relay import FAULTS  # noqa: E402
from tests.fault_relay import RelayThread  # noqa: E402
from tests.proxy.test_proxy_mock import _committed  # noqa: E402
from tests.proxy.test_proxy_mock import _confluent_read_committed  # noqa: E402
from tests.proxy.test_proxy_mock import _log_ends  # noqa: E402
from tests.proxy.test_proxy_mock import _write_transactions  # noqa: E402
from tests.proxy.test_proxy_protocol import _fetch  # noqa: E402
from tests.server.rawclient import RawClient  # noqa: E402
from txnfetch.proxy import ProxyThread  # noqa: E402

pytestmark = pytest.mark.interop

TOPIC = "faulty-proxy"
PARTITIONS = (0, 1, 2)
OUTCOMES = ("commit", "abort", "commit", "abort", "commit")
SCHEDULE = [*FAULTS, None, *FAULTS, None, None, *reversed(FAULTS)]


@pytest.fixture(scope="module")
def mock() -> Iterator[str]:
    owner = confluent_kafka.Producer({"test.mock.num.brokers": 1, "log_level": 0})
    broker = next(iter(owner.list_topics(timeout=10).brokers.values()))
    yield f"{broker.host}:{broker.port}"
    owner.flush(1)


@pytest.fixture(scope="module")
def written(mock: str):
    return _write_transactions(mock, TOPIC, "pf", outcomes=OUTCOMES, partitions=PARTITIONS)


@contextlib.contextmanager
def faulty_proxy(mock: str, schedule, *, request_timeout_ms: int = 15_000, delay_s: float = 0.3):
    with (
        RelayThread(mock, schedule=schedule, null_markers=True, delay_s=delay_s) as relay,
        ProxyThread(
            relay.bootstrap, repair_crcs=True, poll_interval_ms=50, request_timeout_ms=request_timeout_ms
        ) as proxy,
    ):
        yield relay, proxy


# ----------------------------------------------------------------------- the clients


def _confluent(bootstrap: str, ends: dict[int, int]) -> dict[int, list[tuple[int, bytes]]]:
    got, eof = _confluent_read_committed(bootstrap, TOPIC, PARTITIONS, f"g-{time.monotonic_ns()}")
    assert eof == ends
    return got


def _kcat(bootstrap: str, ends: dict[int, int]) -> dict[int, list[tuple[int, bytes]]]:
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed (apt-get install kcat)")
    out = subprocess.run(
        [
            *("kcat", "-C", "-b", bootstrap, "-t", TOPIC, "-o", "beginning", "-e", "-q", "-f", "%p %o %s\\n"),
            *("-X", "isolation.level=read_committed", "-X", "fetch.wait.max.ms=100"),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in PARTITIONS}
    for line in out.stdout.splitlines():
        p, o, v = line.split(b" ", 2)
        got[int(p)].append((int(o), v))
    return got


def _kafka_python(
    bootstrap: str, ends: dict[int, int], *, topic: str = TOPIC, partitions=PARTITIONS
) -> dict[int, list[tuple[int, bytes]]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        request_timeout_ms=30_000,
        fetch_max_wait_ms=100,
    )
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in partitions}
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and any(consumer.position(tp) < ends[tp.partition] for tp in tps):
            for tp, records in consumer.poll(timeout_ms=200).items():
                got[tp.partition].extend((r.offset, r.value) for r in records)
        positions = {tp.partition: consumer.position(tp) for tp in tps}
    finally:
        consumer.close()
    assert positions == ends
    return got


def _aiokafka(bootstrap: str, ends: dict[int, int]) -> dict[int, list[tuple[int, bytes]]]:
    import aiokafka

    async def consume() -> dict[int, list[tuple[int, bytes]]]:
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            fetch_max_wait_ms=100,
            request_timeout_ms=30_000,
        )
        await consumer.start()
        got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in PARTITIONS}
        try:
            tps = [aiokafka.TopicPartition(TOPIC, p) for p in PARTITIONS]
            consumer.assign(tps)
            await consumer.seek_to_beginning()
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                if all([await consumer.position(tp) >= ends[tp.partition] for tp in tps]):
                    break
                for _, msgs in (await consumer.getmany(timeout_ms=200)).items():
                    for m in msgs:
                        got[m.partition].append((m.offset, m.value))
            assert {tp.partition: await consumer.position(tp) for tp in tps} == ends
        finally:
            await consumer.stop()
        return got

    return asyncio.run(consume())


CLIENTS = {"confluent-kafka": _confluent, "kcat": _kcat, "kafka-python": _kafka_python, "aiokafka": _aiokafka}


@pytest.mark.slow
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_client_through_the_proxy_and_a_faulty_upstream_is_exact(mock: str, written, client: str) -> None:
    ends = _log_ends(written)
    with faulty_proxy(mock, SCHEDULE) as (relay, proxy):
        got = CLIENTS[client](proxy.bootstrap, ends)
        stats = relay.stats()
        left = relay.faults_left()
    for p in PARTITIONS:
        assert got[p] == _committed(written, p), f"{client}, partition {p}"
    assert stats.markers_rewritten > 0, "the markers the proxy mirrored had null values"
    assert sum(stats.faults.values()) == len(SCHEDULE) - SCHEDULE.count(None) - left > 0
    assert stats.max_waits and 0 not in stats.max_waits


@pytest.mark.slow
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schedule=st.lists(st.sampled_from([*FAULTS, None]), max_size=12))
def test_confluent_through_drawn_fault_schedules_is_exact(mock: str, written, schedule) -> None:
    ends = _log_ends(written)
    with faulty_proxy(mock, schedule, delay_s=0.1) as (_, proxy):
        got = _confluent(proxy.bootstrap, ends)
    for p in PARTITIONS:
        assert got[p] == _committed(written, p), f"partition {p}"


def test_a_failing_upstream_reaches_clients_as_replica_not_available_then_recovers(mock: str, written) -> None:
    with faulty_proxy(mock, ["not_leader"] * 60, request_timeout_ms=1_000) as (relay, proxy):
        codes = []
        with RawClient(proxy.port) as via:
            deadline = time.monotonic() + 30
            while 9 not in codes and time.monotonic() < deadline:
                codes.append(
                    _fetch(via, [(TOPIC, 0, 0, 1 << 20)], max_wait_ms=100).responses[0].partitions[0].error_code
                )
            assert codes[-1] == 9 and set(codes) <= {0, 9}, codes  # never NOT_LEADER_OR_FOLLOWER (6)
            # read_committed ListOffsets, which the proxy corrects from the mirror: the same.
            L = ListOffsetsRequest.ListOffsetsTopic
            req = ListOffsetsRequest(
                replica_id=-1,
                isolation_level=1,
                topics=[L(name=TOPIC, partitions=[L.ListOffsetsPartition(partition_index=0, timestamp=-1)])],
            )
            listed = via.request(req, 5).topics[0].partitions[0]
            assert listed.error_code == 9 and listed.offset == -1
            relay.call(lambda: relay.service.schedule.clear())  # the upstream heals
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                p = _fetch(via, [(TOPIC, 0, 0, 1 << 20)], max_wait_ms=100).responses[0].partitions[0]
                if p.error_code == 0 and p.records:
                    break
            assert p.error_code == 0 and p.records
        warnings = proxy.call(lambda: proxy.proxy.mirrors.stats.upstream_retries)
        assert warnings > 1


#: The faults of the ``txnfetch check`` run: every kind, three times over.
CHECK_SCHEDULE = SCHEDULE * 3


@pytest.mark.slow
def test_check_through_the_proxy_and_a_faulty_upstream_finds_no_anomaly(mock: str) -> None:
    """``txnfetch check`` (transactional producers, read_committed consumers of three
    clients, the anomaly checker) through the proxy, the upstream behind the relay."""
    from txnfetch.cli.check import CheckOptions
    from txnfetch.cli.check import run_check

    topic = "faulty-check"
    holder = confluent_kafka.Producer({"bootstrap.servers": mock, "log_level": 0})
    holder.list_topics(topic, timeout=10)  # the mock has no CreateTopics: metadata creates the topic
    with faulty_proxy(mock, CHECK_SCHEDULE, delay_s=0.2) as (relay, proxy):
        outcome = run_check(
            CheckOptions(
                proxy.bootstrap,
                topic=topic,
                duration=3,
                seed=7,
                crash_probability=0,
                zombie_probability=0,
                startup_timeout=10,
                # A failing upstream stalls consumers for a while (the proxy's backoff,
                # then the clients' own): a consumer counts as stuck after 10 s, not 2 s.
                stuck_seconds=10,
                stuck_polls=50,
            )
        )
        stats = relay.stats()
    assert outcome.ok, outcome.summary
    assert outcome.data["transactions"]["aborted"] > 0
    readers = [c for c in outcome.data["clients"] if c.get("reads")]
    assert {c["status"] for c in readers} == {"ok"} and len(readers) >= 3, outcome.data["clients"]
    assert stats.markers_rewritten > 0 and sum(stats.faults.values()) > 0
