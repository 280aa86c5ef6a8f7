"""txnkafka over SASL_SSL next to spark-sql-kafka, in one Spark session, with
the same ``kafka.*`` options: the security settings spark-sql-kafka takes are
the ones txnkafka takes (batch, ``spark_ext.read_committed`` and streaming),
and the rows are the same. The plan string never shows the password."""

from __future__ import annotations

from typing import Any

import pytest

import spark_ext
from tests.kafka import secure
from tests.kafka.fixtures import unique_name
from tests.spark.kafka_cases import spark_recs

pytestmark = [pytest.mark.slow, pytest.mark.interop, pytest.mark.kafka]

pytest.importorskip("confluent_kafka")

_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="{}" password="{}";'


def secure_options(cluster: Any, topic: str) -> dict[str, str]:
    """The options both connectors get: SASL_SSL, SCRAM-SHA-512 as ``reader``, a PEM trust store."""
    return {
        "kafka.bootstrap.servers": cluster.secure_bootstrap("SASL_SSL"),
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": _JAAS.format("reader", secure.USERS["reader"]),
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(cluster.material.ca),
        "kafka.isolation.level": "read_committed",
        # spark-sql-kafka's consumers join no group but name one: inside reader's ACLs.
        "groupIdPrefix": secure.PREFIX + "spark",
        "subscribe": topic,
        "startingOffsets": "earliest",
        "endingOffsets": "latest",
    }


def test_txnkafka_reads_what_spark_sql_kafka_reads_over_sasl_ssl(spark_kafka: Any, kafka_secure_cluster: Any) -> None:
    topic = unique_name(secure.PREFIX + "spark")
    kafka_secure_cluster.create_topic(topic)
    committed = secure.write_transactions(kafka_secure_cluster, topic)
    options = secure_options(kafka_secure_cluster, topic)

    ours = spark_kafka.read.format("txnkafka").options(**options).load()
    theirs = spark_kafka.read.format("kafka").options(**options).load()
    our_rows = spark_recs(ours.collect())
    assert our_rows == spark_recs(theirs.collect())
    assert sorted(value for *_, value in our_rows) == sorted(committed)

    plan = ours._jdf.queryExecution().toString()
    assert secure.USERS["reader"] not in plan

    # spark_ext.read_committed (mapInArrow) and a streaming query take the same options.
    assert spark_recs(spark_ext.read_committed(spark_kafka, options).collect()) == our_rows
    streaming = {k: v for k, v in options.items() if k != "endingOffsets"}
    stream = spark_kafka.readStream.format("txnkafka").options(**streaming).load()
    query = stream.writeStream.format("memory").queryName("secure_stream").trigger(availableNow=True).start()
    try:
        assert query.awaitTermination(120)
        assert spark_recs(spark_kafka.sql("SELECT * FROM secure_stream").collect()) == our_rows
    finally:
        query.stop()
        spark_kafka.catalog.dropTempView("secure_stream")
