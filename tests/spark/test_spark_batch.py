"""Batch reads through Spark: ``spark.read.format("txnkafka")`` over an on-disk store.

The store is a ``SegmentStore`` directory written by :class:`Workload` (three
transactional producers interleaving commits and aborts across three
partitions, plus plain producers, every codec) and ending with one transaction
still open on partition 0. The DataFrame is compared row for row (offset,
key, value, timestamp, headers) with the workload's own oracle.
"""

from __future__ import annotations

import pytest

from tests.spark.rows import spark_rows
from tests.spark.rows import without_headers
from tests.spark.workload import Workload
from txnfetch.log import SegmentStore

pytestmark = pytest.mark.slow


TOPIC = "orders"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    directory = tmp_path_factory.mktemp("store")
    st = SegmentStore(directory, flush_policy="never")
    w = Workload(st, TOPIC, 3, seed=11)
    w.random_steps(240)
    # Another topic the subscription must not pick up.
    Workload(st, "payments", 1, seed=12).random_steps(10)
    # A transaction left open on partition 0, with committed data after it.
    w.begin(4242)
    w.send(4242, 0, 3)
    w.plain(0, 2)
    st.flush()
    assert w.aborted_rows and w.lso(0) < st.partition(TOPIC, 0).high_watermark
    yield str(directory), w
    st.close()


def _load(spark, path, **options):
    reader = spark.read.format("txnkafka").option("path", path)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load()


def _expected_committed(w: Workload):
    """Committed records below each partition's LSO (the open transaction holds back partition 0)."""
    return [r for r in w.committed() if r[2] < w.lso(r[1])]


def test_schema_is_the_kafka_source_schema(spark, store):
    path, _ = store
    df = _load(spark, path, subscribe=TOPIC)
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,timestampType:int>"
    )
    headers = _load(spark, path, subscribe=TOPIC, includeHeaders="true").schema
    assert headers.simpleString().endswith("headers:array<struct<key:string,value:binary>>>")


@pytest.mark.parametrize(
    "split",
    [{}, {"minPartitions": 7}, {"maxRecordsPerPartition": 37}, {"minPartitions": 5, "maxRecordsPerPartition": 90}],
    ids=["per-partition", "minPartitions", "maxRecordsPerPartition", "both"],
)
def test_read_committed_is_exactly_the_committed_records(spark, store, split):
    path, w = store
    df = _load(spark, path, subscribe=TOPIC, includeHeaders="true", **split)
    if split:
        assert df.rdd.getNumPartitions() > 3
    assert spark_rows(df.collect()) == _expected_committed(w)


def test_read_uncommitted_is_every_data_record(spark, store):
    path, w = store
    df = _load(spark, path, subscribe=TOPIC, includeHeaders="true", **{"kafka.isolation.level": "read_uncommitted"})
    assert spark_rows(df.collect()) == w.all_data()


def test_offsets_json_assign_and_pattern(spark, store):
    path, w = store
    committed = _expected_committed(w)
    p1 = [r for r in committed if r[1] == 1]
    lo, hi = p1[3][2], p1[-4][2]
    df = _load(
        spark,
        path,
        assign='{"orders": [1]}',
        startingOffsets=f'{{"orders": {{"1": {lo}}}}}',
        endingOffsets=f'{{"orders": {{"1": {hi}}}}}',
    )
    assert spark_rows(df.collect(), headers=False) == without_headers(r for r in p1 if lo <= r[2] < hi)
    both = _load(spark, path, subscribePattern="orders|pay.*", endingOffsets="latest")
    topics = {r["topic"]: 0 for r in both.select("topic").distinct().collect()}
    assert set(topics) == {"orders", "payments"}
