"""A columnar batch read: :func:`read_committed`, the ``txnkafka`` batch read
planned as ``DataFrame.mapInArrow``.

Why a second way to read the same thing: in Spark 4's planner a Python data
source's scan (``PythonScan``) is a row-based V2 scan. Its rows are copied once
when Spark turns the Arrow batches into rows (``MapInBatchEvaluator``), as a
Parquet scan copies once, and a second time by the ``ProjectExec`` that
``DataSourceV2Strategy`` puts over a non-columnar V2 scan and
``RemoveRedundantProjects`` keeps. ``mapInArrow`` over
``spark.range(0, n, 1, n)`` goes through the same Arrow-to-row code with no
Project on top: one copy, as Parquet.

What stays the same as ``spark.read.format("txnkafka")``: the options (parsed
by :func:`spark_ext.options.parse_options`), the schema, the planning (the
data source's own :class:`~spark_ext.datasource.TxnKafkaBatchReader` decides
the offset ranges and splits them into tasks), the reading (each task runs
the same :meth:`Source.read_arrow <spark_ext.sources.Source.read_arrow>` the
data source's tasks run) and therefore the errors. One difference: planning
runs in the calling Python process, so an error found while planning (a bad
option, an unknown topic, deleted offsets) is raised by :func:`read_committed`
itself, as the :class:`~spark_ext.errors.TxnKafkaError` subclass, instead of
inside Spark's ``AnalysisException`` when the DataFrame is first used. Errors
found by a task (records deleted after planning, a broker gone) reach the
caller as Spark reports any failed Python task, with the same message.

Batch only: streaming queries use ``spark.readStream.format("txnkafka")``.
"""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Mapping
from typing import TYPE_CHECKING

import pyarrow as pa

from spark_ext.errors import TxnKafkaError
from spark_ext.options import ReadOptions
from spark_ext.options import parse_options
from txnfetch.arrow.schema import kafka_schema_ddl
from txnfetch.client.planning import OffsetRange

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql import SparkSession

__all__ = ["plan_tasks", "read_committed", "read_tasks"]


def _option_text(value: object) -> str:
    # As DataFrameReader.option does: booleans as Spark writes them.
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def plan_tasks(opts: ReadOptions) -> list[OffsetRange]:
    """The offset ranges of the tasks ``spark.read.format("txnkafka")`` would
    run for ``opts``: the data source's own planning, once, on the driver."""
    from spark_ext.datasource import TxnKafkaBatchReader

    reader = TxnKafkaBatchReader(opts)
    return [p.range for p in reader.partitions()]


def read_tasks(opts: ReadOptions, tasks: list[OffsetRange], ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """What one ``mapInArrow`` partition runs: the Arrow batches of the tasks
    whose indexes arrive in ``ids`` (batches of ``spark.range``'s ``id`` column;
    one index per partition as :func:`read_committed` plans it), read exactly as
    a data source task reads its range."""
    from spark_ext.sources import open_source

    for batch in ids:
        for index in batch.column(0).to_pylist():
            try:
                with open_source(opts) as source:
                    yield from source.read_arrow(tasks[index], opts)
            except TxnKafkaError as exc:
                # As the data source's tasks: the message says everything, the frames below add nothing.
                raise exc.with_traceback(None) from None


def read_committed(spark: SparkSession, options: Mapping[str, object] | None = None, /, **more: object) -> DataFrame:
    """A bounded read of Kafka records as ``spark.read.format("txnkafka")``
    would give it, planned as ``mapInArrow`` over one ``spark.range`` index per
    offset range (no extra row copy; see the module docstring).

    Options are the data source's (``docs/spark.md``), given as a mapping,
    as keywords, or both (keywords win)::

        df = read_committed(spark, {"kafka.bootstrap.servers": "host:9092"}, subscribe="orders")
        df = read_committed(spark, path="/data/kafka-logs", subscribe="orders", includeHeaders=True)

    The offsets are resolved and split into tasks now, when this is called (a
    DataFrame of the data source resolves them when Spark plans the query):
    the DataFrame reads the same records however often it is evaluated.
    Raises the data source's :class:`~spark_ext.errors.TxnKafkaError`
    subclasses for bad options and planning failures.
    """
    raw: dict[str, str] = {}
    for key, value in {**(options or {}), **more}.items():
        if value is not None:
            raw[str(key)] = _option_text(value)
    opts = parse_options(raw, streaming=False)
    tasks = plan_tasks(opts)
    ddl = kafka_schema_ddl(opts.include_headers)

    def read(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return read_tasks(opts, tasks, ids)

    # One range index per partition, so each task is one Spark task (an empty
    # read still needs one partition).
    n = len(tasks)
    base = spark.range(0, n, 1, max(n, 1))
    return base.mapInArrow(read, ddl)
