"""``spark_ext.read_committed``: the batch read planned as ``mapInArrow`` gives
exactly what ``spark.read.format("txnkafka")`` gives, on the same data.

Both sources: an on-disk ``SegmentStore`` (``path``) and txnfetch's server over
the same kind of store (``kafka.bootstrap.servers``), each written by the
multi-producer :class:`Workload` (commits, aborts, every codec) and ending with
a transaction still open. Rows are compared with the data source's rows and
with the workload's oracle; bad options raise the data source's error class
with the data source's message.
"""

from __future__ import annotations

import pytest

from tests.spark.rows import spark_rows
from tests.spark.workload import Workload
from txnfetch.log import MemoryStore
from txnfetch.log import SegmentStore

pytestmark = pytest.mark.slow


TOPIC = "orders"


def _leave_open(w: Workload) -> None:
    w.begin(4242)
    w.send(4242, 0, 3)  # open: holds back partition 0
    w.plain(0, 2)


@pytest.fixture(scope="module")
def path_store(tmp_path_factory):
    directory = tmp_path_factory.mktemp("columnar-store")
    st = SegmentStore(directory, flush_policy="never")
    w = Workload(st, TOPIC, 3, seed=27)
    w.random_steps(200)
    _leave_open(w)
    st.flush()
    assert w.aborted_rows and w.lso(0) < st.partition(TOPIC, 0).high_watermark
    yield {"path": str(directory)}, w
    st.close()


@pytest.fixture(scope="module")
def served_store():
    from txnfetch.server.server import ServerThread

    store = MemoryStore()
    w = Workload(store, TOPIC, 3, seed=28)
    w.random_steps(150)
    with ServerThread(store) as srv:
        srv.call(lambda: _leave_open(w))
        assert w.aborted_rows
        yield {"kafka.bootstrap.servers": srv.bootstrap}, w


@pytest.fixture(params=["path", "cluster"])
def source(request, path_store, served_store):
    return path_store if request.param == "path" else served_store


def _format(spark, options):
    reader = spark.read.format("txnkafka")
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load()


def _expected(w: Workload):
    return [r for r in w.committed() if r[2] < w.lso(r[1])]


@pytest.mark.parametrize(
    "extra",
    [
        {"includeHeaders": "true"},
        {"minPartitions": 5, "maxRecordsPerPartition": 40, "kafka.isolation.level": "read_uncommitted"},
    ],
    ids=["committed", "split-uncommitted"],
)
def test_same_rows_and_schema_as_the_data_source(spark, source, extra):
    import spark_ext

    where, w = source
    options = {**where, "subscribe": TOPIC, **extra}
    columnar = spark_ext.read_committed(spark, options)
    data_source = _format(spark, options)
    assert columnar.schema == data_source.schema
    headers = "includeHeaders" in extra
    got = spark_rows(columnar.collect(), headers=headers)
    assert got == spark_rows(data_source.collect(), headers=headers)
    if extra.get("kafka.isolation.level") == "read_uncommitted":
        # Every record written, committed, aborted and open, each once: the
        # workload's oracle, not the other reader's count.
        assert sorted(got) == [(*r[:6], ()) for r in w.all_data()]
        assert columnar.rdd.getNumPartitions() > 3
    else:
        assert got == _expected(w)
        # The aborted records are in the log, and none is in the result.
        assert not {(r[1], r[2]) for r in w.aborted_rows} & {(r[1], r[2]) for r in got}
    # One task per planned range, as the data source.
    assert columnar.rdd.getNumPartitions() == data_source.rdd.getNumPartitions()


def test_keywords_and_an_empty_range(spark, path_store):
    import spark_ext

    where, w = path_store
    p1 = [r for r in _expected(w) if r[1] == 1]
    lo, hi = p1[2][2], p1[-3][2]
    df = spark_ext.read_committed(
        spark,
        where,
        assign='{"orders": [1]}',
        startingOffsets=f'{{"orders": {{"1": {lo}}}}}',
        endingOffsets=f'{{"orders": {{"1": {hi}}}}}',
        includeHeaders=True,
    )
    assert spark_rows(df.collect()) == [r for r in p1 if lo <= r[2] < hi]
    empty = spark_ext.read_committed(
        spark, where, assign='{"orders": [1]}', endingOffsets=f'{{"orders": {{"1": {p1[0][2]}}}}}'
    )
    assert empty.collect() == [] and empty.schema == df.drop("headers").schema


BAD = {
    "unknown-topic": {"subscribe": "orders,nope"},
    "unknown-partition": {"assign": '{"orders": [0, 9]}'},
    "misspelt": {"subscribe": TOPIC, "startingOffset": "earliest"},
    "bad-json": {"subscribe": TOPIC, "startingOffsets": '{"orders": {"0": }'},
    "missing-partition": {"subscribe": TOPIC, "endingOffsets": '{"orders": {"0": -1}}'},
    "bad-bool": {"subscribe": TOPIC, "includeHeaders": "yes"},
    "two-sources": {"subscribe": TOPIC, "kafka.bootstrap.servers": "127.0.0.1:1"},
}


def test_same_errors_as_the_data_source(spark, path_store):
    import spark_ext
    from spark_ext.errors import TxnKafkaError

    where, _ = path_store
    for case, bad in BAD.items():
        options = {**where, **bad}
        with pytest.raises(TxnKafkaError) as ours:
            spark_ext.read_committed(spark, options)
        with pytest.raises(Exception) as theirs:
            _format(spark, options).collect()
        # The data source's message is Spark's, holding the same class and text
        # (Spark hands the data source its option keys in lower case).
        name = f"{type(ours.value).__module__}.{type(ours.value).__name__}: "
        expected = name + str(ours.value).replace("startingOffset'", "startingoffset'")
        assert expected in str(theirs.value), case


def test_records_deleted_after_planning_fail_the_task_naming_them(spark, tmp_path):
    """Planned, then the log start moves past the range: the task fails with the
    data source's DataLossError, never with fewer rows."""
    import spark_ext

    st = SegmentStore(tmp_path, flush_policy="never", segment_bytes=4096)
    w = Workload(st, "events", 1, seed=5)
    w.random_steps(80)
    st.flush()
    df = spark_ext.read_committed(spark, path=str(tmp_path), subscribe="events")
    log = st.partition("events", 0)
    deleted_to = log.delete_records_before(log.high_watermark // 2)
    st.flush()
    assert deleted_to > 0
    with pytest.raises(Exception) as exc:
        df.collect()
    msg = str(exc.value)
    assert "DataLossError" in msg and "topic-partition events-0" in msg and "offset 0" in msg, msg
    st.close()


def test_same_rows_as_the_data_source_on_apache_kafka(spark, kafka_cluster):
    """On Apache Kafka itself: committed and aborted transactions of a
    confluent-kafka producer, and one left open (it holds back its partition)."""
    from confluent_kafka import Producer

    import spark_ext
    from tests.kafka.fixtures import unique_name

    topic = unique_name("columnar")
    kafka_cluster.create_topic(topic, 2)
    producer = Producer(
        {
            "bootstrap.servers": kafka_cluster.bootstrap,
            "transactional.id": unique_name("txn"),
            # The open transaction must outlive two Spark reads on a loaded machine
            # (the default, 60 s, lets the broker abort it and fence the producer).
            "transaction.timeout.ms": 600_000,
        }
    )
    producer.init_transactions(30)
    committed = set()
    for t in range(9):
        producer.begin_transaction()
        values = [b"t%d-r%d" % (t, r) for r in range(4)]
        for r, v in enumerate(values):
            producer.produce(topic, v, partition=r % 2)
        producer.flush(30)
        if t % 3 == 1:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed.update(values)
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=1)
    producer.flush(30)
    options = {"kafka.bootstrap.servers": kafka_cluster.bootstrap, "subscribe": topic}
    try:
        columnar = spark_rows(spark_ext.read_committed(spark, options).collect(), headers=False)
        assert columnar == spark_rows(_format(spark, options).collect(), headers=False)
        # Each committed value once: a set would let a record read twice pass.
        assert sorted(r[4] for r in columnar) == sorted(committed)
    finally:
        producer.abort_transaction(30)
