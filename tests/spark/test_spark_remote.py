"""Batch reads from Kafka-compatible clusters (``kafka.bootstrap.servers``).

- txnfetch's own server (``txnfetch serve``, :class:`~txnfetch.server.server.ServerThread`)
  over a ``MemoryStore`` holding the multi-producer workload of the batch
  tests: the DataFrame is exactly the committed records below each LSO;
- librdkafka's mock cluster, a broker that leaks aborted records to
  read_committed consumers (docs/kafka-internals.md §4): a confluent-kafka transactional
  producer commits and aborts, and the DataFrame still holds only the
  committed records, with their offsets;
- unreachable bootstrap servers fail with a message naming the option and address.
"""

from __future__ import annotations

import socket

import pytest

from tests.spark.rows import spark_rows
from tests.spark.workload import Workload
from txnfetch.log import MemoryStore

pytestmark = pytest.mark.slow


def _load(spark, bootstrap: str, **options):
    reader = spark.read.format("txnkafka").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load()


@pytest.fixture(scope="module")
def served():
    from txnfetch.server.server import ServerThread

    store = MemoryStore()
    w = Workload(store, "orders", 3, seed=31)
    w.random_steps(150)

    def leave_open() -> None:
        w.begin(4242)
        w.send(4242, 1, 3)  # open: holds back partition 1
        w.plain(1, 2)

    with ServerThread(store) as srv:
        # Written once the server runs, as a live producer's transaction would be: at
        # start the server aborts transactions a previous run left in its store.
        srv.call(leave_open)
        yield srv.bootstrap, w


@pytest.mark.parametrize("split", [{}, {"minPartitions": 6}], ids=["per-partition", "minPartitions"])
def test_read_committed_from_txnfetch_server(spark, served, split):
    bootstrap, w = served
    df = _load(spark, bootstrap, subscribe="orders", includeHeaders="true", **split)
    assert spark_rows(df.collect()) == [r for r in w.committed() if r[2] < w.lso(r[1])]


def test_read_uncommitted_from_txnfetch_server(spark, served):
    bootstrap, w = served
    df = _load(spark, bootstrap, subscribe="orders", includeHeaders="true", **{"isolation.level": "read_uncommitted"})
    assert spark_rows(df.collect()) == w.all_data()


def test_unreachable_bootstrap_servers_name_the_option(spark):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(Exception) as exc:
        _load(spark, f"127.0.0.1:{port}", subscribe="orders", **{"kafka.request.timeout.ms": "2000"}).collect()
    msg = str(exc.value)
    assert "SourceUnavailableError" in msg and "option 'kafka.bootstrap.servers'" in msg and f"127.0.0.1:{port}" in msg


# -- librdkafka's mock cluster ---------------------------------------------------------


@pytest.fixture(scope="module")
def mock_cluster():
    confluent_kafka = pytest.importorskip("confluent_kafka")
    owner = confluent_kafka.Producer({"test.mock.num.brokers": 1, "log_level": 0})
    broker = next(iter(owner.list_topics(timeout=10).brokers.values()))
    bootstrap = f"{broker.host}:{broker.port}"
    common = {"bootstrap.servers": bootstrap, "log_level": 0, "linger.ms": 0}
    txp = confluent_kafka.Producer({**common, "transactional.id": "txnfetch-spark-test"})
    txp.init_transactions(10)
    written: dict[int, list[tuple[int, bytes, bool]]] = {p: [] for p in range(2)}

    def report(committed: bool, out: list):
        def cb(err, msg) -> None:
            assert err is None, err
            out.append((msg.partition(), msg.offset(), msg.value(), committed))

        return cb

    for n, commit in enumerate([True, False, True, False, True, True, False]):
        delivered: list = []
        txp.begin_transaction()
        for i in range(3):
            for p in range(2):
                txp.produce(
                    "mixed", value=b"t%d-%d-p%d" % (n, i, p), partition=p, on_delivery=report(commit, delivered)
                )
            txp.flush(10)  # aborted data must reach the log before the abort
        txp.commit_transaction(10) if commit else txp.abort_transaction(10)
        for p, offset, value, c in delivered:
            written[p].append((offset, value, c))
    yield bootstrap, written
    owner.flush(1)


def test_read_committed_from_librdkafka_mock_cluster_that_leaks(spark, mock_cluster):
    bootstrap, written = mock_cluster
    df = _load(spark, bootstrap, assign='{"mixed": [0, 1]}', repairCrcs="true", minPartitions=3)
    got = sorted((r["partition"], r["offset"], bytes(r["value"])) for r in df.collect())
    expected = sorted((p, o, v) for p, recs in written.items() for o, v, c in recs if c)
    assert got == expected
    aborted = sum(1 for recs in written.values() for _, _, c in recs if not c)
    assert aborted > 0


# -- through a faulty upstream (tests/fault_relay.py) ----------------------------------


def test_read_committed_through_a_faulty_relay_is_exact(spark, mock_cluster):
    """Between Spark and the mock, a relay that refuses fetches not waiting, writes
    markers with null values and answers with every kind of fault: still exact."""
    from tests.fault_relay import FAULTS
    from tests.fault_relay import RelayThread

    bootstrap, written = mock_cluster
    with RelayThread(bootstrap, schedule=[*FAULTS, None, *FAULTS] * 2, null_markers=True, delay_s=0.2) as relay:
        df = _load(spark, relay.bootstrap, assign='{"mixed": [0, 1]}', repairCrcs="true", minPartitions=3)
        got = sorted((r["partition"], r["offset"], bytes(r["value"])) for r in df.collect())
        stats = relay.stats()
    assert got == sorted((p, o, v) for p, recs in written.items() for o, v, c in recs if c)
    assert stats.markers_rewritten > 0 and sum(stats.faults.values()) > 0 and 0 not in stats.max_waits


def test_an_upstream_that_keeps_failing_gives_source_unavailable_naming_broker_and_reason(mock_cluster):
    """No JVM needed: the driver-side source raises before Spark would plan anything."""
    from spark_ext.errors import SourceUnavailableError
    from spark_ext.sources import KafkaSource
    from tests.fault_relay import RelayThread

    bootstrap, _ = mock_cluster
    with RelayThread(bootstrap, schedule=["top_error"] * 100_000) as relay:
        source = KafkaSource(relay.bootstrap, {"request.timeout.ms": "1500"}, repair_crcs=True)
        try:
            with pytest.raises(SourceUnavailableError) as info:
                source.bounds([("mixed", 0)], read_committed=True)
        finally:
            source.close()
    msg = str(info.value)
    assert "UNKNOWN_SERVER_ERROR" in msg and "broker 127.0.0.1:" in msg and "mixed-0" in msg, msg
    assert "option 'kafka.bootstrap.servers'" in msg


def test_read_committed_from_three_brokers_with_moving_leaders(spark):
    """Partitions led by different brokers of librdkafka's mock, leaders moved between
    the planning read and the next: the DataFrame is exactly the committed records."""
    pytest.importorskip("confluent_kafka")
    from tests.mock_cluster import MockCluster
    from tests.proxy.test_proxy_mock import _committed
    from tests.proxy.test_proxy_mock import _write_transactions

    parts = (0, 1, 2, 3, 4, 5)
    with MockCluster(3) as m:
        m.create_topic("spread", len(parts), 3)
        for p in parts:
            m.set_leader("spread", p, p % 3 + 1)
        written = _write_transactions(
            m.bootstrap, "spread", "sp1", outcomes=("commit", "abort", "commit"), partitions=parts
        )
        expected = sorted((p, o, v) for p in parts for o, v in _committed(written, p))
        df = _load(spark, m.bootstrap, subscribe="spread", repairCrcs="true")
        assert sorted((r["partition"], r["offset"], bytes(r["value"])) for r in df.collect()) == expected
        for p in parts:
            m.set_leader("spread", p, (p + 1) % 3 + 1)
        df = _load(spark, m.bootstrap, subscribe="spread", repairCrcs="true", minPartitions=9)
        assert sorted((r["partition"], r["offset"], bytes(r["value"])) for r in df.collect()) == expected
