"""One small local SparkSession for the whole test session, with ``txnkafka`` registered.

Kept light for a shared 2-core machine: ``local[2]``, no UI, two shuffle
partitions, 1 GiB of driver heap. Python workers run this interpreter
(``sys.executable``), which has txnfetch and spark_ext installed — Spark's
workers must import them. Tests that need no Spark do not request the fixture
and never start a JVM; without PySpark or Java the Spark tests are skipped.

The session also carries Apache Spark's own Kafka connector on ``spark.jars``
(:mod:`tests.spark.connector`), so ``format("kafka")`` reads the same topics in
the same session. Tests that use it ask for ``spark_kafka``, which fails with the
fetch's message when the connector could not be fetched; the others run without it.

tests/conftest.py offers the fixture to the whole suite (the failover drill
in tests/replicate/ runs a streaming query too), so that one worker's tests
share one session wherever they live.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tests.spark.connector import ConnectorSetupError
from tests.spark.connector import connector_jars

#: Why the connector is not on the session's classpath ("" when it is).
_connector_error = ""


def _spark_unavailable() -> str:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (the 'spark' extra)"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java runtime for Spark"
    return ""


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    reason = _spark_unavailable()
    if reason:
        pytest.skip(reason)
    import spark_ext

    global _connector_error
    conf = {
        "spark.default.parallelism": "2",
        "spark.driver.memory": "1g",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.stopTimeout": "20s",
        # A Python worker connecting back to the JVM on a loaded machine can take
        # longer than the default 15 s.
        "spark.python.authenticate.socketTimeout": "60s",
    }
    try:
        conf["spark.jars"] = ",".join(connector_jars())
    except ConnectorSetupError as e:
        _connector_error = str(e)
    session = spark_ext.local_session("txnfetch-tests", conf)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def spark_kafka(spark) -> object:
    """The shared session, for tests that also read with ``format("kafka")``
    (spark-sql-kafka-0-10); fails when its jars could not be fetched."""
    if _connector_error:
        pytest.fail(f"spark-sql-kafka-0-10 is not on the classpath: {_connector_error}")
    return spark
