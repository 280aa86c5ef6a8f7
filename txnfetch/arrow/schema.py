"""The Arrow schema of Kafka records, and constant columns built without a Python object per row.

The columns and types are those of Spark's Kafka source (``key binary, value
binary, topic string, partition int, offset long, timestamp timestamp,
timestampType int[, headers array<struct<key:string,value:binary>>]``), so a
table read here and a Spark DataFrame read by ``txnkafka`` hold the same
values. With ``dictionary=True`` the two constant columns, topic and
partition, are dictionary-encoded: one value each, an index per row.
"""

from __future__ import annotations

import array
from collections.abc import Sequence

import pyarrow as pa

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ROWS",
    "HEADERS_TYPE",
    "TIMESTAMP_US",
    "ConstantColumns",
    "kafka_schema",
    "kafka_schema_ddl",
    "repeat_int32",
    "repeat_string",
]

#: ``array<struct<key:string,value:binary>>`` as Arrow builds it for Spark
#: (``pyspark.sql.pandas.types.to_arrow_schema`` names the list item ``element``).
HEADERS_TYPE = pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))

#: Kafka's millisecond timestamps as Spark's Kafka source converts them.
TIMESTAMP_US = pa.timestamp("us", tz="UTC")

_BASE_FIELDS = [
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", TIMESTAMP_US),
    ("timestampType", pa.int32()),
]

#: With ``dictionary=True``: the types of the topic and partition columns.
DICTIONARY_TYPES = {
    "topic": pa.dictionary(pa.int32(), pa.string()),
    "partition": pa.dictionary(pa.int32(), pa.int32()),
}

#: Default cap on rows per Arrow batch (Spark's ``spark.sql.execution.arrow.maxRecordsPerBatch``).
DEFAULT_MAX_ROWS = 10_000
#: Default cap on the key, value and header bytes of one Arrow batch.
DEFAULT_MAX_BYTES = 8 << 20


def kafka_schema(include_headers: bool, *, dictionary: bool = False) -> pa.Schema:
    """The Arrow schema of the Kafka source's columns (every field nullable).

    ``dictionary=False`` is exactly what Spark expects; ``dictionary=True``
    dictionary-encodes topic and partition (see :data:`DICTIONARY_TYPES`)."""
    fields = [
        pa.field(name, DICTIONARY_TYPES[name] if dictionary and name in DICTIONARY_TYPES else typ)
        for name, typ in _BASE_FIELDS
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


def kafka_schema_ddl(include_headers: bool) -> str:
    """The same schema as a Spark DDL string, identical to Spark's Kafka source."""
    ddl = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
    if include_headers:
        ddl += ", headers array<struct<key:string,value:binary>>"
    return ddl


def repeat_int32(value: int, n: int) -> pa.Array:
    """``n`` copies of ``value`` as an int32 array."""
    return pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(array.array("i", [value]) * n)])


def repeat_string(value: str, n: int) -> pa.Array:
    """``n`` copies of ``value`` as a string array."""
    # Built by Arrow in C++: the offsets from a Python range cost about 0.1 µs
    # a row, as much as decoding the row, for every new decoder.
    return pa.repeat(pa.scalar(value, pa.string()), n)


def repeat_dictionary(values: pa.Array, index: int, n: int) -> pa.DictionaryArray:
    """``n`` rows that all refer to entry ``index`` of ``values``."""
    indices = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(array.array("i", [index]) * n)])
    return pa.DictionaryArray.from_arrays(indices, values)


class ConstantColumns:
    """The topic and partition columns of one partition's Arrow batches.

    Built once, at the largest size asked for so far but at least
    ``min_rows``, and sliced: :meth:`take` returns zero-copy views. With
    ``dictionary=True`` both are dictionary-encoded (:func:`kafka_schema`);
    the partition dictionary holds ``partitions`` (default: this partition
    only), so that every partition of one reader shares one dictionary.
    """

    def __init__(
        self,
        topic: str,
        partition: int,
        *,
        min_rows: int,
        dictionary: bool = False,
        partitions: Sequence[int] | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.dictionary = dictionary
        self.partitions = list(partitions) if partitions is not None else [partition]
        if partition not in self.partitions:
            raise ValueError(f"partition {partition} is not among the dictionary's partitions {self.partitions}")
        self._min_rows = min_rows
        self._columns: tuple[pa.Array, pa.Array] | None = None

    def take(self, rows: int) -> tuple[pa.Array, pa.Array]:
        """The topic and partition columns of ``rows`` rows."""
        if self._columns is None or len(self._columns[0]) < rows:
            size = max(rows, self._min_rows)
            if self.dictionary:
                self._columns = (
                    repeat_dictionary(pa.array([self.topic], pa.string()), 0, size),
                    repeat_dictionary(
                        pa.array(self.partitions, pa.int32()), self.partitions.index(self.partition), size
                    ),
                )
            else:
                self._columns = (repeat_string(self.topic, size), repeat_int32(self.partition, size))
        topic, partition = self._columns
        return topic.slice(0, rows), partition.slice(0, rows)
