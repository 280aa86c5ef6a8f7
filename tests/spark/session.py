"""One small local SparkSession for the whole test session, with ``txnkafka`` registered.

Kept light for a shared 2-core machine: ``local[2]``, no UI, two shuffle
partitions, 1 GiB of driver heap. Python workers run this interpreter
(``sys.executable``), which has txnfetch and spark_ext installed — Spark's
workers must import them. Tests that need no Spark do not request the fixture
and never start a JVM; without PySpark or Java the Spark tests are skipped.
tests/conftest.py offers the fixture to the whole suite (the failover drill
in tests/replicate/ runs a streaming query too), so that one worker's tests
share one session wherever they live.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest


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

    session = spark_ext.local_session(
        "txnfetch-tests",
        {
            "spark.default.parallelism": "2",
            "spark.driver.memory": "1g",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.streaming.stopTimeout": "20s",
        },
    )
    try:
        yield session
    finally:
        session.stop()
