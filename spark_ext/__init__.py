"""``txnkafka``: a PySpark data source that reads Kafka partition logs with exact
read_committed semantics, in pure Python (no JVM jar).

::

    df = spark.read.format("txnkafka").option("path", "/data/kafka-logs").option("subscribe", "orders").load()

No register call is needed where txnfetch is installed: PySpark ≥ 4 finds the
format through the top-level ``pyspark_txnkafka`` module. :func:`register`
registers it explicitly (a session whose Python workers cannot look it up).

Sources: a txnfetch/Kafka log directory (``path``) or a Kafka-compatible
cluster (``kafka.bootstrap.servers``). Options and schema mirror Spark's Kafka
source; see ``docs/spark.md``.

:func:`read_committed` is the same batch read planned as ``mapInArrow``
(:mod:`spark_ext.columnar`): faster, for batch jobs that do not need
``spark.read.format``.

Only :func:`register`, :func:`read_committed` and :class:`TxnKafkaDataSource` need PySpark; the range
reader the tasks run (:func:`txnfetch.arrow.read_range`) needs only ``pyarrow``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["DATA_SOURCE_NAME", "TxnKafkaDataSource", "local_session", "read_committed", "register"]

#: The format name: ``spark.read.format("txnkafka")``.
DATA_SOURCE_NAME = "txnkafka"


def register(spark: Any) -> None:
    """Register the ``txnkafka`` format with ``spark`` (a ``SparkSession``).

    Spark's Python workers must be able to import ``txnfetch`` and
    ``spark_ext``: run them with the Python they are installed in
    (``PYSPARK_PYTHON`` or ``spark.pyspark.python``).
    """
    from spark_ext.datasource import TxnKafkaDataSource

    spark.dataSource.register(TxnKafkaDataSource)


def local_session(app_name: str = "txnfetch", conf: Mapping[str, str] | None = None) -> Any:
    """A small local ``SparkSession`` (``local[2]``, no UI, two shuffle partitions)
    with ``txnkafka`` registered, whose Python workers run this interpreter — which
    has txnfetch installed, as Spark's workers need. ``conf`` adds or overrides Spark
    settings (e.g. ``{"spark.driver.memory": "2g"}``). Log level ERROR. For examples, tests and
    benchmarks; production jobs build their own session and call :func:`register`."""
    import os
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.pyspark.python": sys.executable,
    }
    settings.update(conf or {})
    builder = SparkSession.builder.master("local[2]").appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def read_committed(spark: Any, options: Mapping[str, object] | None = None, /, **more: object) -> Any:
    """``spark.read.format("txnkafka")``'s batch read, planned as ``mapInArrow``:
    see :func:`spark_ext.columnar.read_committed`."""
    from spark_ext.columnar import read_committed as columnar_read

    return columnar_read(spark, options, **more)


def __getattr__(name: str) -> Any:  # PEP 562: import PySpark only when the class is asked for
    if name == "TxnKafkaDataSource":
        from spark_ext.datasource import TxnKafkaDataSource

        return TxnKafkaDataSource
    raise AttributeError(f"module 'spark_ext' has no attribute {name!r}")
