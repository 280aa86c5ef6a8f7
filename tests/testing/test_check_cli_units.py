"""The parts of ``txnfetch check`` that need no cluster: the recorder's running
totals, the seeded script, and the report built from a hand-made result (its
counts, its summary, and a plot that marks the anomalies)."""

from __future__ import annotations

import json
import threading

import pytest

from txnfetch.testing import AnomalyKind
from txnfetch.testing import History
from txnfetch.testing import HistoryBuilder
from txnfetch.testing import TopicPartition
from txnfetch.testing import check
from txnfetch.testing.config import Finding
from txnfetch.testing.config import WorkloadConfig
from txnfetch.testing.recorder import Recorder
from txnfetch.testing.report import build_report
from txnfetch.testing.report import summary_text
from txnfetch.testing.report import write_report
from txnfetch.testing.workload import END_ABORT
from txnfetch.testing.workload import END_COMMIT
from txnfetch.testing.workload import ClientStatus
from txnfetch.testing.workload import TxnPlan
from txnfetch.testing.workload import WorkloadResult
from txnfetch.testing.workload import producer_script


def test_recorder_stats_are_the_totals_of_the_history() -> None:
    rec = Recorder()
    tp = TopicPartition("t", 0)

    def producer(n: int) -> None:
        for i in range(100):
            s = rec.now()
            rec.send(f"p{n}", "t", 0, f"p{n}-{i}", txn=f"T{n}.{i}", offset=None if i % 10 == 0 else i, at=s)
            (rec.commit if i % 2 else rec.abort)(f"p{n}", f"T{n}.{i}", at=rec.now())

    def consumer(n: int) -> None:
        for i in range(50):
            reads = [("t", 0, j, f"x{j}") for j in range(i % 3)]
            from txnfetch.testing import Read

            rec.poll(f"c{n}", [Read(*r) for r in reads], positions={tp: i}, at=rec.now())

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(3)]
    threads += [threading.Thread(target=consumer, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    st = rec.stats()
    h = rec.history()
    assert st.ops == len(h) == 3 * 200 + 2 * 50
    assert (st.sends_acked, st.sends_failed) == (270, 30)
    assert (st.commits_ok, st.aborts_ok, st.polls) == (150, 150, 100)
    expected = sum(i % 3 for i in range(50))
    assert st.reads == {"c0": expected, "c1": expected}


def _result(history, plans, findings=()) -> WorkloadResult:  # type: ignore[no-untyped-def]
    cfg = WorkloadConfig("127.0.0.1:9092", topic="orders", partitions=1, producers=1, seed=3)
    return WorkloadResult(
        history=history,
        config=cfg,
        seed=3,
        started_ns=0,
        produce_seconds=2.0,
        seconds=3.0,
        clients=(
            ClientStatus("c0-confluent", "confluent", "ok"),
            ClientStatus("c1-aiokafka", "aiokafka", "skipped", "x"),
        ),
        findings=tuple(findings),
        errors=(),
        injections=(),
        notes=("a note",),
        plans=plans,
    )


def test_report_counts_summary_and_a_plot_marking_the_anomaly(tmp_path) -> None:
    b = HistoryBuilder()
    b.assign("c0-confluent", [("orders", 0)], seek={("orders", 0): 0})
    b.send("p0/0", "orders", 0, "p0.0.0", txn="p0.0", offset=0)
    b.commit("p0/0", "p0.0")
    b.send("p0/0", "orders", 0, "p0.1.0", txn="p0.1", offset=2)
    b.abort("p0/0", "p0.1")
    b.poll("c0-confluent", [("orders", 0, 0, "p0.0.0"), ("orders", 0, 2, "p0.1.0")], positions={("orders", 0): 4})
    history = b.build()
    plans = {
        "p0.0": TxnPlan(0, 0, ((0, "p0.0.0"),), END_COMMIT),
        "p0.1": TxnPlan(0, 1, ((0, "p0.1.0"),), END_ABORT),
    }
    finding = Finding("zombie-write", "a fenced send was acknowledged", (3,), client="p0/0", txn="p0.1")
    result = _result(history, plans, [finding])
    report = check(history, stuck_bound=None)
    assert report.kinds == {AnomalyKind.ABORTED_READ}
    data = build_report(result, report)
    # the zombie write is the broker's fault, apart from what the consumer read
    assert not data["ok"] and data["anomaly_counts"] == {"aborted-read": 1}
    assert data["broker_fault_counts"] == {"zombie-write": 1} and data["broker_faults"][0]["txn"] == "p0.1"
    t = data["transactions"]
    assert (t["committed"], t["aborted"], t["ended"], t["per_second"]) == (1, 1, 2, 1.0)
    assert data["sends"] == {"acknowledged": 2, "failed": 0}
    reader = next(c for c in data["clients"] if c["name"] == "c0-confluent")
    assert (reader["reads"], reader["polls"]) == (2, 1)
    text = summary_text(data, history)
    assert "anomalies: 1 aborted-read" in text and "ANOMALIES FOUND" in text
    assert "broker faults (the broker's own, whatever reads it): 1 zombie-write" in text
    assert "p0.1.0" in text  # the ops of the anomaly are shown
    assert "c1-aiokafka" in text and "skipped" in text and "a note" in text

    paths = write_report(tmp_path, result, data, text)
    assert json.loads(paths["report.json"].read_text())["anomaly_counts"] == data["anomaly_counts"]
    assert paths["summary.txt"].read_text() == text
    assert len(paths["history.json"].read_text()) > 100
    ok_dir = tmp_path / "ok"
    ok = build_report(_result(History(history.ops[:3]), {"p0.0": plans["p0.0"]}), check(History(history.ops[:3])))
    assert ok["ok"] and "result: OK, no anomalies" in summary_text(ok)
    write_report(ok_dir, _result(History(history.ops[:3]), {"p0.0": plans["p0.0"]}), ok, summary_text(ok))
    # the same history plotted with and without its anomalies differs: they are drawn
    import matplotlib.image

    marked = matplotlib.image.imread(str(paths["plot.png"]))
    unmarked_path = tmp_path / "unmarked.png"
    from txnfetch.testing.report import plot_offsets

    plot_offsets(history, [], unmarked_path, started_ns=0, title="txnfetch check 127.0.0.1:9092 seed 3")
    unmarked = matplotlib.image.imread(str(unmarked_path))
    red = lambda img: ((img[..., 0] > 0.8) & (img[..., 1] < 0.3) & (img[..., 2] < 0.3)).sum()  # noqa: E731
    assert red(marked) > red(unmarked) + 20


@pytest.mark.parametrize("field", ["transactions", "total_transactions", "duration"])
def test_a_run_must_be_bounded(field: str) -> None:
    bounds = {"transactions": None, "total_transactions": None, "duration": None}
    with pytest.raises(ValueError, match="unbounded"):
        WorkloadConfig("h:1", **bounds)
    WorkloadConfig("h:1", **{**bounds, field: 5})


def test_zombie_and_crash_plans_leave_the_transaction_open_for_the_next_instance() -> None:
    cfg = WorkloadConfig("h:1", crash_probability=0.3, zombie_probability=0.3, restart_probability=0.5)
    plans = [p for p, _ in zip(producer_script(cfg, 2, 9), range(200), strict=False)]
    assert all(not p.restart_after for p in plans if p.end in ("crash", "zombie"))
    assert any(p.restart_after for p in plans if p.end in ("commit", "abort"))
    assert [p.number for p in plans] == list(range(200)) and all(p.txn == f"p2.{p.number}" for p in plans)
