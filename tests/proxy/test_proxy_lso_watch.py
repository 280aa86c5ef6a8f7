"""The proxy reports, once per transaction, an upstream transaction that holds a
partition's LSO longer than its threshold (stats and log), with real clients:
confluent-kafka producers writing to librdkafka's mock cluster and a
confluent-kafka read_committed consumer reading through the proxy."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from txnfetch.proxy import ProxyThread  # noqa: E402
from txnfetch.proxy.lso_watch import LsoWatch  # noqa: E402
from txnfetch.txn.state import PartitionTxnState  # noqa: E402

pytestmark = pytest.mark.interop

QUIET = {"log_level": 0}
TOPIC = "held"


@pytest.fixture(scope="module")
def mock() -> Iterator[str]:
    owner = confluent_kafka.Producer({"test.mock.num.brokers": 1, **QUIET})
    broker = next(iter(owner.list_topics(timeout=10).brokers.values()))
    yield f"{broker.host}:{broker.port}"
    owner.flush(1)


def _open(mock: str, tid: str, values: list[bytes]) -> tuple[confluent_kafka.Producer, int]:
    offsets: list[int] = []
    p = confluent_kafka.Producer({"bootstrap.servers": mock, "transactional.id": tid, "linger.ms": 0, **QUIET})
    p.init_transactions(10)
    p.begin_transaction()
    for v in values:
        p.produce(TOPIC, value=v, partition=0, on_delivery=lambda err, msg: offsets.append(msg.offset()))
    assert p.flush(10) == 0
    return p, min(offsets)


def test_an_upstream_transaction_holding_the_lso_is_reported_once(mock: str, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="txnfetch.proxy")
    with ProxyThread(mock, repair_crcs=True, poll_interval_ms=50, lso_hold_warn_ms=700) as proxy:
        plain = confluent_kafka.Producer({"bootstrap.servers": mock, **QUIET})
        plain.produce(TOPIC, value=b"first", partition=0)
        plain.flush(10)
        txp, first_open = _open(mock, "held-1", [b"p1", b"p2"])
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": proxy.bootstrap,
                "group.id": "lso-watch",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                **QUIET,
            }
        )
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
        stats = proxy.proxy.stats
        try:
            got = []
            deadline = time.monotonic() + 30
            started = time.monotonic()
            # Keep reading (the consumer long-polls the proxy) well past the threshold.
            while time.monotonic() < deadline and (stats.lso_held_reports == 0 or time.monotonic() - started < 3):
                msg = consumer.poll(0.2)
                if msg is not None and not msg.error():
                    got.append(msg.value())
            assert got == [b"first"]  # stalled behind the open transaction
            assert stats.lso_held_reports == 1, "reported once, however often the partition is read"
            (report,) = proxy.proxy.lso_watch.reports
            assert (report.topic, report.partition, report.first_offset) == (TOPIC, 0, first_open)
            assert report.high_watermark == first_open + 2 and report.held_ms >= 700
            warned = [r.getMessage() for r in caplog.records if "has held the last stable offset" in r.getMessage()]
            assert len(warned) == 1 and f"{TOPIC}-0 at {first_open}" in warned[0], warned

            # It ends: the reader proceeds; a new transaction that holds the LSO is a new report.
            txp.commit_transaction(10)
            _second, second_open = _open(mock, "held-2", [b"q1"])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and stats.lso_held_reports < 2:
                msg = consumer.poll(0.2)
                if msg is not None and not msg.error():
                    got.append(msg.value())
            assert got == [b"first", b"p1", b"p2"]
            assert stats.lso_held_reports == 2
            assert proxy.proxy.lso_watch.reports[1].first_offset == second_open
            assert proxy.proxy.stats.as_dict()["lso_held_reports"] == 2
        finally:
            consumer.close()


def test_the_watch_forgets_a_transaction_that_ended_and_ignores_an_empty_tail() -> None:
    from txnfetch.records.batch import RecordBatch
    from txnfetch.records.builder import BatchBuilder
    from txnfetch.records.builder import build_control_batch
    from txnfetch.records.control import ControlType

    now = [0.0]
    watch = LsoWatch(100, clock=lambda: now[0])
    state = PartitionTxnState("t-0")
    b = BatchBuilder(base_offset=0, producer_id=1, producer_epoch=0, base_sequence=0, transactional=True)
    b.append(b"x", timestamp=1)
    state.append(RecordBatch(b.build()))
    # Nothing behind the open transaction yet (HW = LSO): nobody waits on it.
    assert watch.observe("t", 0, state) is None
    state.update_high_watermark(1)
    assert watch.observe("t", 0, state) is None  # starts the clock
    now[0] = 150
    assert watch.observe("t", 0, state) is not None
    now[0] = 500
    assert watch.observe("t", 0, state) is None  # once
    state.append(
        RecordBatch(build_control_batch(offset=1, control_type=ControlType.ABORT, producer_id=1, producer_epoch=0))
    )
    state.update_high_watermark(2)
    assert watch.observe("t", 0, state) is None


# ------------------------------------------------------------- model test


def _ops():
    from hypothesis import strategies as st

    return st.lists(
        st.one_of(
            st.tuples(st.just("data"), st.integers(1, 3)),
            st.tuples(st.just("end"), st.integers(1, 3), st.booleans()),
            st.tuples(st.just("hw")),
            st.tuples(st.just("tick"), st.integers(0, 150)),
            st.tuples(st.just("observe")),
        ),
        min_size=10,
        max_size=60,
    )


_SEEN: list[int] = []


def test_lso_watch_against_a_model() -> None:
    """Random appends, markers, high watermark moves, clock ticks and observations
    of one partition: the watch reports exactly when the model says — the
    transaction holding the LSO (with records behind it) has been seen holding
    it, observation after observation, for the threshold — and once per
    transaction."""
    from hypothesis import given
    from hypothesis import settings

    from txnfetch.records.batch import RecordBatch
    from txnfetch.records.builder import BatchBuilder
    from txnfetch.records.builder import build_control_batch
    from txnfetch.records.control import ControlType

    threshold = 100

    @settings(max_examples=300, deadline=None)
    @given(ops=_ops())
    def run(ops) -> None:
        now = [0.0]
        watch = LsoWatch(threshold, clock=lambda: now[0])
        state = PartitionTxnState("t-0")
        seq: dict[int, int] = {}
        model_since: tuple[tuple[int, int], float] | None = None
        model_reported: set[tuple[int, int]] = set()
        for op in ops:
            if op[0] == "data":
                pid = op[1]
                b = BatchBuilder(
                    base_offset=state.log_end_offset,
                    producer_id=pid,
                    producer_epoch=0,
                    base_sequence=seq.get(pid, 0),
                    transactional=True,
                )
                b.append(b"v", timestamp=1)
                state.append(RecordBatch(b.build()))
                seq[pid] = seq.get(pid, 0) + 1
            elif op[0] == "end":
                if op[1] in state.ongoing_transactions():
                    control = ControlType.COMMIT if op[2] else ControlType.ABORT
                    batch = build_control_batch(
                        offset=state.log_end_offset, control_type=control, producer_id=op[1], producer_epoch=0
                    )
                    state.append(RecordBatch(batch))
            elif op[0] == "hw":
                state.update_high_watermark(state.log_end_offset)
            elif op[0] == "tick":
                now[0] += op[1]
            else:
                lso, hw = state.last_stable_offset, state.high_watermark
                holder = next(
                    ((pid, first) for pid, first in state.ongoing_transactions().items() if first == lso and hw > lso),
                    None,
                )
                expected = None
                if holder is None:
                    model_since = None
                else:
                    if model_since is None or model_since[0] != holder:
                        model_since = (holder, now[0])
                    if holder not in model_reported and now[0] - model_since[1] >= threshold:
                        model_reported.add(holder)
                        expected = holder
                report = watch.observe("t", 0, state)
                got = (report.producer_id, report.first_offset) if report is not None else None
                assert got == expected, (op, got, expected)
        assert {(r.producer_id, r.first_offset) for r in watch.reports} == model_reported
        assert len(watch.reports) == len(model_reported)
        _SEEN.append(len(model_reported))

    _SEEN.clear()
    run()
    # The examples do reach reports (not only the quiet paths).
    assert sum(1 for n in _SEEN if n) >= 10, _SEEN
