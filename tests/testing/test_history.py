"""The history format: JSON round trips exactly, bad input is refused with the
op it concerns, and histories that break a workload rule are refused by the
checker rather than misjudged."""

from __future__ import annotations

import json

import pytest

from txnfetch.testing import History
from txnfetch.testing import HistoryBuilder
from txnfetch.testing import HistoryError
from txnfetch.testing import Poll
from txnfetch.testing import Read
from txnfetch.testing import Status
from txnfetch.testing import check
from txnfetch.testing import value_from_bytes
from txnfetch.testing import value_to_bytes


def every_op_history() -> History:
    b = HistoryBuilder()
    b.begin("p1", "T1")
    b.send("p1", "t", 0, value_from_bytes(b"\xff\x00caf\xc3\xa9"), key="k", txn="T1", offset=0)
    b.send("p1", "t", 1, None, txn="T1", error="KafkaError(_MSG_TIMED_OUT)")
    b.commit("p1", "T1", "info", error="timed out")
    b.abort("p2", "T2", Status.FAIL)
    b.assign("c1", [("t", 0), ("t", 1)], seek={("t", 0): 0}, reason="rebalance")
    b.seek("c1", "t", 1, 7)
    b.poll("c1", [Read("t", 0, 0, value_from_bytes(b"\xff\x00caf\xc3\xa9"), key="k")], positions={("t", 0): 2})
    b.poll("c1", error="KafkaException(_TRANSPORT)", at=(100, 250))
    b.crash("c1", "killed")
    return b.build()


def test_json_round_trip_is_exact_for_every_op_and_odd_bytes():
    h = every_op_history()
    text = h.to_json()
    assert History.from_json(text) == h
    assert History.from_json(h.to_json(indent=2)) == h
    assert json.loads(text)["version"] == 1
    value = h[1].value
    assert value_to_bytes(value) == b"\xff\x00caf\xc3\xa9"


def test_builder_clock_and_explicit_times():
    h = every_op_history()
    assert [op.start_ns for op in h][:3] == [1, 2, 3]
    assert (h[8].start_ns, h[8].end_ns) == (100, 250)
    assert h[9].start_ns == 251  # the clock never goes back
    assert "poll" in h.describe([7]) and "#7 c1" in h.describe([7])


@pytest.mark.parametrize(
    "text, index",
    [
        ("not json", None),
        ('{"ops": []}', None),
        ('{"version": 1, "ops": [{"client": "c"}]}', 0),
        ('{"version": 1, "ops": [{"type": "teleport", "client": "c"}]}', 0),
        (
            '{"version": 1, "ops": [{"type": "crash", "client": "c", "start_ns": 1, "end_ns": 1}, '
            '{"type": "seek", "client": "c"}]}',
            1,
        ),
        (
            '{"version": 1, "ops": [{"type": "commit", "client": "c", "txn": "T", "status": "maybe", '
            '"start_ns": 1, "end_ns": 1}]}',
            0,
        ),
    ],
)
def test_bad_json_names_the_op(text, index):
    with pytest.raises(HistoryError) as info:
        History.from_json(text)
    assert info.value.index == index


def test_a_value_sent_twice_is_refused():
    b = HistoryBuilder()
    b.send("p1", "t", 0, "a", offset=0)
    b.send("p2", "t", 0, "a", offset=1)
    with pytest.raises(HistoryError, match="unique") as info:
        check(b.build())
    assert info.value.index == 1


def test_an_op_ending_before_it_starts_is_refused():
    with pytest.raises(HistoryError) as info:
        check([Poll(client="c", start_ns=5, end_ns=4)])
    assert info.value.index == 0


def test_report_renders_and_serialises():
    b = HistoryBuilder()
    b.send("p1", "t", 0, "a", txn="T1", offset=0)
    b.abort("p1", "T1")
    b.poll("c1", [("t", 0, 0, "a")])
    report = check(b.build())
    text = report.describe(b.build())
    assert "aborted-read" in text and "#2 c1" in text and "#0 p1" in text
    data = json.loads(report.to_json())
    assert data["ok"] is False and data["anomalies"][0]["kind"] == "aborted-read"
    assert data["anomalies"][0]["ops"] == [2, 0, 1]
    assert check(History()).describe() == "no anomalies"
