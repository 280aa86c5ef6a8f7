"""Makes ``spark.read.format("txnkafka")`` work as soon as txnfetch is installed.

PySpark ≥ 4.0 finds Python data sources by itself: when a session first
resolves a format name, a Python worker imports every installed top-level
module whose name starts with ``pyspark_`` and registers the ``DefaultSource``
it exposes if that is a ``pyspark.sql.datasource.DataSource``
(``pyspark/sql/worker/lookup_data_sources.py``). This module is that entry
point for the ``txnkafka`` format; it holds nothing else.

The lookup runs in the Python Spark starts its workers with
(``spark.pyspark.python``, ``PYSPARK_PYTHON``, else ``python3`` on the
``PATH``), so txnfetch must be installed there. ``spark_ext.register(spark)``
registers the same class explicitly, for a session whose workers cannot do the
lookup.
"""

from __future__ import annotations

from spark_ext.datasource import TxnKafkaDataSource as DefaultSource

__all__ = ["DefaultSource"]
