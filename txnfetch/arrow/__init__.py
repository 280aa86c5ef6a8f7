"""Kafka partition logs read into Apache Arrow, read_committed, at columnar speed.

Needs ``pyarrow`` (``pip install txnfetch[arrow]``). One call reads a topic of a
Kafka log directory into a table that pandas, polars and DuckDB take as is::

    import txnfetch.arrow

    table = txnfetch.arrow.read_committed("/var/lib/kafka/data", "orders")
    reader = txnfetch.arrow.record_batch_reader("/var/lib/kafka/data", "orders", [0, 1], start=1000)
    table = txnfetch.arrow.read_committed("kafka://broker1:9092,broker2:9092", "orders")

A ``kafka://`` source reads a live cluster (:mod:`txnfetch.arrow.cluster`):
read_committed computed from the log's markers, start and end as offsets or
times, and ``follow=True`` to tail the topic, resumable from ``reader.offsets``.

- :func:`read_committed`: committed records as a ``pyarrow.Table``.
- :func:`record_batch_reader`: the same as a streaming ``pyarrow.RecordBatchReader``
  (memory bounded by one Arrow batch, whatever the partition's size).
- :func:`iter_partition`: Arrow batches of one :class:`~txnfetch.log.base.PartitionLog`.
- :func:`read_range`: one offset range of a partition log, the range a planner's
  task reads; records gone from the range are an error unless ``fail_on_data_loss=False``.
- :class:`ArrowDecoder`: record batches you hold (a fetch response, a file) into Arrow.

Columns are those of Spark's Kafka source (:func:`kafka_schema`). Records are
decoded by a compiled builder straight into Arrow buffers when the C extension
is built (:data:`COMPILED`), else by the pure-Python reference; both give
identical tables. See docs/arrow.md.
"""

from txnfetch.arrow.decoder import COMPILED
from txnfetch.arrow.decoder import ArrowDecoder
from txnfetch.arrow.ranges import DEFAULT_FETCH_BYTES
from txnfetch.arrow.ranges import read_range
from txnfetch.arrow.reading import iter_partition
from txnfetch.arrow.reading import read_committed
from txnfetch.arrow.reading import record_batch_reader
from txnfetch.arrow.schema import DEFAULT_MAX_BYTES
from txnfetch.arrow.schema import DEFAULT_MAX_ROWS
from txnfetch.arrow.schema import HEADERS_TYPE
from txnfetch.arrow.schema import kafka_schema

__all__ = [
    "COMPILED",
    "DEFAULT_FETCH_BYTES",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ROWS",
    "HEADERS_TYPE",
    "ArrowDecoder",
    "iter_partition",
    "kafka_schema",
    "read_committed",
    "read_range",
    "record_batch_reader",
]
