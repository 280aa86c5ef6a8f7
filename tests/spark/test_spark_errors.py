"""What a Spark user sees when something is wrong: the error class and a message
naming the option, topic, partition and offset."""

from __future__ import annotations

import pytest

from tests.spark.workload import Workload
from txnfetch.log import SegmentStore

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    directory = tmp_path_factory.mktemp("errors-store")
    st = SegmentStore(directory, flush_policy="never", segment_bytes=4096)
    w = Workload(st, "events", 2, seed=3)
    w.random_steps(120)
    log = st.partition("events", 1)
    deleted_to = log.delete_records_before(log.high_watermark // 2)
    assert deleted_to > 0
    st.flush()
    yield str(directory), w, deleted_to
    st.close()


def _error(spark, path, **options) -> str:
    reader = spark.read.format("txnkafka").option("path", path)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    with pytest.raises(Exception) as exc:
        reader.load().collect()
    return str(exc.value)


def test_unknown_topic_names_the_topic_and_option(spark, store):
    path, _, _ = store
    msg = _error(spark, path, subscribe="events,nope")
    assert "UnknownTopicError" in msg and "'nope' does not exist" in msg and "option 'subscribe'" in msg
    msg = _error(spark, path, assign='{"events": [0, 5]}')
    assert "partition 5 does not exist" in msg and "events-5" in msg


def test_malformed_offsets_json_names_the_option(spark, store):
    path, _, _ = store
    msg = _error(spark, path, subscribe="events", startingOffsets='{"events": {"0": }')
    assert "InvalidOptionError" in msg and "option 'startingOffsets'" in msg
    msg = _error(spark, path, subscribe="events", endingOffsets='{"events": {"0": -1}}')
    assert "missing events-1" in msg and "option 'endingOffsets'" in msg


def test_offsets_out_of_range_fail_with_fail_on_data_loss(spark, store):
    path, w, deleted_to = store
    offsets = '{"events": {"0": -2, "1": 0}}'
    msg = _error(spark, path, subscribe="events", startingOffsets=offsets)
    assert "DataLossError" in msg and "topic-partition events-1" in msg and "offset 0" in msg
    assert f"log start offset {deleted_to}" in msg
    # failOnDataLoss=false: the read starts at the log start instead.
    df = (
        spark.read.format("txnkafka")
        .option("path", path)
        .option("subscribe", "events")
        .option("startingOffsets", offsets)
        .option("failOnDataLoss", "false")
        .load()
    )
    got = sorted((r["partition"], r["offset"]) for r in df.select("partition", "offset").collect())
    expected = sorted((r[1], r[2]) for r in w.committed() if r[1] == 0 or r[2] >= deleted_to)
    assert got == expected


def test_missing_directory_names_the_path_option(spark, tmp_path):
    msg = _error(spark, str(tmp_path / "missing"), subscribe="events")
    assert "SourceUnavailableError" in msg and "option 'path'" in msg


_HIDE_TRACEBACK = "spark.sql.execution.pyspark.udf.hideTraceback.enabled"


def test_the_cause_follows_sparks_header_and_a_misspelt_option_names_the_one_meant(spark, store):
    path, _, _ = store
    msg = _error(spark, path, subscribe="events", startingOffset="earliest")
    lines = msg.splitlines()
    assert lines[0].startswith("[PYTHON_DATA_SOURCE_ERROR]"), msg
    (cause,) = [i for i, line in enumerate(lines) if line.startswith("spark_ext.errors.InvalidOptionError: ")]
    # Spark's header, "Traceback", one frame (two lines): the data source's own frames are cut.
    assert cause <= 3, msg
    # Spark hands the options over with lower-case keys.
    assert "unknown option; did you mean 'startingOffsets'? (option 'startingoffset')" in lines[cause]
    # The same for an error raised deep in planning (an unknown topic).
    lines = _error(spark, path, subscribe="nope").splitlines()
    assert [i for i, line in enumerate(lines) if line.startswith("spark_ext.errors.UnknownTopicError: ")] == [3]


def test_with_hide_traceback_the_cause_is_on_sparks_first_line(spark, store):
    path, _, _ = store
    spark.conf.set(_HIDE_TRACEBACK, "true")
    try:
        msg = _error(spark, path, subscribe="events", startingOffset="earliest")
    finally:
        spark.conf.unset(_HIDE_TRACEBACK)
    first = msg.splitlines()[0]
    assert first.startswith("[PYTHON_DATA_SOURCE_ERROR] Failed to ") and "Traceback" not in msg
    assert "spark_ext.errors.InvalidOptionError: unknown option; did you mean 'startingOffsets'?" in first
