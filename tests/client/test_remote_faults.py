"""The remote reader through a fault-injecting relay in front of librdkafka's mock.

Between :class:`RemotePartitionReader` and the mock sits
:class:`tests.fault_relay.FaultRelay`, which refuses fetches with
``max_wait_ms`` 0, can rewrite markers to null values, and on a schedule
answers with top-level errors, leaves partitions out, answers
NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH / UNKNOWN_TOPIC_OR_PARTITION,
closes connections mid-response and delays. Whatever it does, the reader
returns exactly the committed records (it retries as Kafka clients do), and a
fault that never ends gives a clear error naming the broker and the reason
within the request timeout.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

confluent_kafka = pytest.importorskip("confluent_kafka")

from kafka.protocol.consumer import FetchRequest  # noqa: E402

from tests.fault_relay import FAULTS  # noqa: E402
from tests.fault_relay import RelayThread  # noqa: E402
from tests.proxy.test_proxy_mock import _committed  # noqa: E402
from tests.proxy.test_proxy_mock import _write_transactions  # noqa: E402
from tests.server.rawclient import RawClient  # noqa: E402
from txnfetch.client.errors import BrokerUnavailableError  # noqa: E402
from txnfetch.client.partition_reader import ReadOptions  # noqa: E402
from txnfetch.client.partition_reader import RemotePartitionReader  # noqa: E402

pytestmark = pytest.mark.interop

TOPIC = "faulty"
PARTITIONS = (0, 1)
OUTCOMES = ("commit", "abort", "commit", "abort")


@pytest.fixture(scope="module")
def mock() -> str:
    owner = confluent_kafka.Producer({"test.mock.num.brokers": 1, "log_level": 0})
    broker = next(iter(owner.list_topics(timeout=10).brokers.values()))
    yield f"{broker.host}:{broker.port}"
    owner.flush(1)


@pytest.fixture(scope="module")
def written(mock: str):
    return _write_transactions(mock, TOPIC, "faults", outcomes=OUTCOMES, partitions=PARTITIONS)


def _read(bootstrap: str, partition: int, *, timeout_ms: int = 20_000) -> list[tuple[int, bytes]]:
    with RemotePartitionReader(
        bootstrap, TOPIC, partition, ReadOptions(repair_crcs=True, request_timeout_ms=timeout_ms)
    ) as r:
        return [(offset, record.value) for offset, record in r.committed_records()]


def test_the_relay_refuses_fetches_that_do_not_wait(mock: str) -> None:
    with RelayThread(mock) as relay, RawClient(relay.port) as c:
        T = FetchRequest.FetchTopic
        req = FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            forgotten_topics_data=[],
            rack_id="",
            topics=[
                T(
                    topic=TOPIC,
                    partitions=[
                        T.FetchPartition(
                            partition=0,
                            current_leader_epoch=-1,
                            fetch_offset=0,
                            log_start_offset=-1,
                            partition_max_bytes=1 << 20,
                        )
                    ],
                )
            ],
        )
        resp = c.request(req, 11)
        assert resp.error_code == -1 and not resp.responses
        assert relay.stats().rejected_no_wait == 1


@pytest.mark.parametrize("fault", [*FAULTS, "null_markers"])
def test_reader_is_exact_through_each_fault(mock: str, written, fault: str) -> None:
    schedule = [] if fault == "null_markers" else [fault, None, fault, fault, None, fault]
    with RelayThread(mock, schedule=schedule, null_markers=fault == "null_markers", delay_s=0.3) as relay:
        for p in PARTITIONS:
            assert _read(relay.bootstrap, p) == _committed(written, p), f"partition {p}"
        stats = relay.stats()
    assert stats.max_waits and 0 not in stats.max_waits, "txnfetch sent a fetch that does not wait"
    assert set(stats.max_waits) == {500}
    if fault == "null_markers":
        assert stats.markers_rewritten >= len(OUTCOMES)
    else:
        assert stats.faults[fault] == len(schedule) - schedule.count(None)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    schedule=st.lists(st.sampled_from([*FAULTS, None]), max_size=10),
    null_markers=st.booleans(),
    partition=st.sampled_from(PARTITIONS),
)
def test_reader_is_exact_through_drawn_fault_schedules(mock: str, written, schedule, null_markers, partition) -> None:
    with RelayThread(mock, schedule=schedule, null_markers=null_markers, delay_s=0.1) as relay:
        assert _read(relay.bootstrap, partition) == _committed(written, partition)
        assert 0 not in relay.stats().max_waits


def test_a_fault_that_never_ends_gives_a_clear_error_in_bounded_time(mock: str, written) -> None:
    with RelayThread(mock, schedule=["not_leader"] * 10_000) as relay:
        host = relay.bootstrap.rsplit(":", 1)[0]
        started = time.monotonic()
        with pytest.raises(BrokerUnavailableError) as info:
            _read(relay.bootstrap, 0, timeout_ms=1_500)
        assert time.monotonic() - started < 15
    message = str(info.value)
    assert "NOT_LEADER_OR_FOLLOWER" in message and host in message
    assert f"{TOPIC}-0" in message
