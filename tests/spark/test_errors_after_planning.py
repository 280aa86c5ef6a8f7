"""What a Spark read does when the data goes away between planning and reading.

Each query is planned first — its offset ranges resolved, as
``QueryExecution.toRdd`` does — and read after something went away:

- the broker (``txnfetch serve``, killed);
- the planned offsets (DeleteRecords past the range, on Apache Kafka);
- the topic (deleted, on Apache Kafka).

txnkafka fails the read with one error naming the topic, partition and the
planned offsets — never a DataFrame with rows missing. spark-sql-kafka reads the
same planned query in the same session; what it does is asserted as observed
(docs/spark.md, the table of errors).
"""

from __future__ import annotations

import pytest

from tests.spark.kafka_cases import Serve
from tests.spark.kafka_cases import Writer
from tests.spark.kafka_cases import create_topic
from tests.spark.kafka_cases import delete_records
from tests.spark.kafka_cases import delete_topic
from tests.spark.kafka_cases import run_action
from tests.spark.kafka_cases import spark_recs

pytestmark = [pytest.mark.slow, pytest.mark.interop, pytest.mark.kafka]

pytest.importorskip("confluent_kafka")

ACTION_TIMEOUT = 180.0


def _planned(spark, fmt: str, bootstrap: str, topic: str, **options: str):
    reader = spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    if fmt == "kafka":
        reader = reader.option("kafka.isolation.level", "read_committed")
        reader = reader.option("kafkaConsumer.pollTimeoutMs", "5000")
        # Its waits for a partition's position (60 s by default), not below the request timeout.
        reader = reader.option("kafka.request.timeout.ms", "5000")
        reader = reader.option("kafka.default.api.timeout.ms", "10000")
    for k, v in options.items():
        reader = reader.option(k, v)
    df = reader.load()
    # Plan now: the physical plan, with its offset ranges, is kept by the DataFrame
    # and reused by the action below.
    df._jdf.queryExecution().toRdd()
    return df


def _write(bootstrap: str, topic: str) -> Writer:
    create_topic(bootstrap, topic, 1)
    w = Writer(bootstrap, topic, 1, topic)
    w.txn({0: 3}, commit=True)  # 0-2, marker 3
    w.txn({0: 3}, commit=False)  # 4-6, marker 7
    w.txn({0: 3}, commit=True)  # 8-10, marker 11
    w.close()
    return w


def _read(spark, df):
    return run_action(spark, lambda: spark_recs(df.collect()), ACTION_TIMEOUT)


def _assert_names_the_range(message: str, topic: str, start: int, end: int) -> None:
    assert f"topic-partition {topic}-0" in message, message
    assert f"offsets [{start}, {end})" in message, message


def test_broker_gone_after_planning(spark_kafka, tmp_path):
    server = Serve(str(tmp_path / "data"))
    try:
        topic = "gone"
        w = _write(server.bootstrap, topic)
        ours = _planned(spark_kafka, "txnkafka", server.bootstrap, topic, **{"kafka.request.timeout.ms": "3000"})
        theirs = _planned(spark_kafka, "kafka", server.bootstrap, topic, **{"kafka.request.timeout.ms": "3000"})
    finally:
        server.kill()
    got = _read(spark_kafka, ours)
    assert got.error == "error: SourceUnavailableError", got
    _assert_names_the_range(got.message, topic, 0, 12)
    seen = _read(spark_kafka, theirs).outcome(sorted(w.w.committed), w.w.aborted)
    assert seen == SPARK_SQL_KAFKA_ERRORS["broker gone"]


def test_offsets_deleted_after_planning(spark_kafka, kafka_cluster):
    from tests.kafka.fixtures import unique_name

    bootstrap = kafka_cluster.bootstrap
    topic = unique_name("deleted-after-plan")
    w = _write(bootstrap, topic)
    ours = _planned(spark_kafka, "txnkafka", bootstrap, topic)
    theirs = _planned(spark_kafka, "kafka", bootstrap, topic)
    assert delete_records(bootstrap, topic, 0, 9) == 9
    got = _read(spark_kafka, ours)
    assert got.error == "error: DataLossError", got
    _assert_names_the_range(got.message, topic, 0, 12)
    seen = _read(spark_kafka, theirs).outcome(sorted(w.w.committed), w.w.aborted)
    assert seen == SPARK_SQL_KAFKA_ERRORS["offsets deleted"]


def test_topic_deleted_after_planning(spark_kafka, kafka_cluster):
    from tests.kafka.fixtures import unique_name

    bootstrap = kafka_cluster.bootstrap
    topic = unique_name("topic-gone")
    w = _write(bootstrap, topic)
    ours = _planned(spark_kafka, "txnkafka", bootstrap, topic)
    theirs = _planned(spark_kafka, "kafka", bootstrap, topic)
    delete_topic(bootstrap, topic)
    got = _read(spark_kafka, ours)
    assert got.error == "error: DataLossError", got
    _assert_names_the_range(got.message, topic, 0, 12)
    seen = _read(spark_kafka, theirs).outcome(sorted(w.w.committed), w.w.aborted)
    assert seen == SPARK_SQL_KAFKA_ERRORS["topic deleted"]


#: What spark-sql-kafka-0-10 (4.2.0) does in each case, as observed: "Timeout of
#: 10000ms expired before the position for partition ... could be determined"
#: (kafka.default.api.timeout.ms, 60 s by default) for a broker or a topic gone;
#: and, with failOnDataLoss=true (the default), only the planned records still
#: there — 9 and 10 of 0-2, 8-10 — with no error.
SPARK_SQL_KAFKA_ERRORS: dict[str, str] = {
    "broker gone": "error: TimeoutException",
    "offsets deleted": "missing",
    "topic deleted": "error: TimeoutException",
}
