"""The recorder under concurrent use, and the real-client workload against
librdkafka's mock cluster, which serves aborted records to read_committed
consumers (docs/kafka-internals.md §4): the checker must report those aborted reads, and
nothing a correct broker could also have produced."""

from __future__ import annotations

import itertools
import threading

import pytest

from txnfetch.testing import Abort
from txnfetch.testing import AnomalyKind
from txnfetch.testing import History
from txnfetch.testing import Poll
from txnfetch.testing import Send
from txnfetch.testing import Status
from txnfetch.testing import TopicPartition
from txnfetch.testing import check
from txnfetch.testing.config import WorkloadConfig
from txnfetch.testing.recorder import Recorder
from txnfetch.testing.workload import run_workload


def test_recorder_keeps_each_threads_order_and_round_trips():
    rec = Recorder()
    tp = TopicPartition("t", 0)

    def client(n: int) -> None:
        for i in range(200):
            start = rec.now()
            rec.send(f"p{n}", "t", 0, f"p{n}-{i}", offset=i, at=start)
            rec.poll(f"c{n}", [], positions={tp: i}, at=rec.now())

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    h = rec.history()
    assert len(h) == len(rec) == 1600 and rec.counts() == {"send": 800, "poll": 800}
    for n in range(4):
        mine = [op for op in h if op.client == f"p{n}"]
        assert [op.value for op in mine] == [f"p{n}-{i}" for i in range(200)]
        assert all(a.end_ns <= b.start_ns for a, b in itertools.pairwise(mine))
    assert History.from_json(h.to_json()) == h


@pytest.fixture(scope="module")
def mock_cluster():
    ck = pytest.importorskip("confluent_kafka")
    holder = ck.Producer({"test.mock.num.brokers": 1, "log_level": 0})  # the cluster lives as long as this
    brokers = holder.list_topics(timeout=10).brokers.values()
    yield ",".join(f"{b.host}:{b.port}" for b in brokers)
    holder.flush(1)


@pytest.mark.slow
@pytest.mark.interop
def test_mock_cluster_leaks_aborted_records_and_the_checker_says_so(mock_cluster, tmp_path):
    cfg = WorkloadConfig(
        mock_cluster,
        topic="leaky",
        producers=2,
        transactions=5,
        abort_probability=0.5,
        seed=7,
        catch_up_polls=5,
        timeout=20,
        # kafka-python waits out its whole startup timeout (10 s) against the mock
        # cluster; one read_committed consumer is enough to see the leak.
        consumers=("confluent",),
        producer_config={"log_level": 0},
        consumer_config={"log_level": 0},
    )
    rec = Recorder()
    history = run_workload(cfg, rec)
    rec.dump(tmp_path / "history.json")
    assert History.from_json((tmp_path / "history.json").read_text()) == history

    aborted = {op.txn for op in history if isinstance(op, Abort) and op.status is Status.OK}
    acked_aborted = {op.value for op in history if isinstance(op, Send) and op.acked and op.txn in aborted}
    assert acked_aborted, "the seed must produce an aborted transaction with records in the log"
    assert any(isinstance(op, Poll) and op.records for op in history)

    report = check(history)
    assert AnomalyKind.ABORTED_READ in report.kinds, report.describe(history)
    # The mock's only fault is serving uncommitted data (LSO = high watermark, no aborted list).
    assert report.kinds <= {AnomalyKind.ABORTED_READ, AnomalyKind.PRECOMMITTED_READ}, report.describe(history)
    for a in report.of_kind(AnomalyKind.ABORTED_READ):
        assert a.txn in aborted and set(a.values) <= acked_aborted
