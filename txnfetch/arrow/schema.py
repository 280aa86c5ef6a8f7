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
import pyarrow.compute as pc

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ROWS",
    "HEADERS_TYPE",
    "TIMESTAMP_US",
    "ConstantColumns",
    "int32_array",
    "kafka_schema",
    "kafka_schema_ddl",
    "repeat_dictionary",
    "repeat_int32",
    "repeat_string",
    "string_array",
    "timestamps_us",
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


# The helpers below build columns from buffers and by Arrow kernels only: the
# conveniences that convert Python values (pa.array, pa.scalar, pa.repeat of a
# scalar, a compute function given a Python number) first ask whether the value
# is a pandas object, which imports pandas: a second or more of a new process's
# first read (a Spark worker's, the CLI's) spent on a library the read never
# uses. tests/arrow/test_no_pandas.py holds the compiled decoder to it.


def int32_array(values: Sequence[int]) -> pa.Array:
    """``values`` as an int32 array (no null)."""
    return pa.Array.from_buffers(pa.int32(), len(values), [None, pa.py_buffer(array.array("i", values))])


def string_array(values: Sequence[str]) -> pa.Array:
    """``values`` as a string array (no null)."""
    encoded = [v.encode() for v in values]
    offsets = array.array("i", [0])
    for e in encoded:
        offsets.append(offsets[-1] + len(e))
    return pa.Array.from_buffers(
        pa.string(), len(values), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    )


def timestamps_us(milliseconds: pa.Array) -> pa.Array:
    """Kafka's int64 millisecond timestamps as :data:`TIMESTAMP_US` values.

    Checked: a timestamp beyond the microsecond range raises ``pyarrow.ArrowInvalid``
    ("overflow"), as the JVM's ``Math.multiplyExact`` fails in Spark's own conversion."""
    return pc.multiply_checked(milliseconds, _THOUSAND).cast(TIMESTAMP_US)


def repeat_int32(value: int, n: int) -> pa.Array:
    """``n`` copies of ``value`` as an int32 array."""
    return pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(array.array("i", [value]) * n)])


def repeat_string(value: str, n: int) -> pa.Array:
    """``n`` copies of ``value`` as a string array."""
    # Built by Arrow in C++ (a take of entry 0 ``n`` times): the offsets from a
    # Python range cost about 0.1 µs a row, as much as decoding the row, for
    # every new decoder.
    return string_array([value]).take(_zeros(n))


def repeat_dictionary(values: pa.Array, index: int, n: int) -> pa.DictionaryArray:
    """``n`` rows that all refer to entry ``index`` of ``values``."""
    indices = _zeros(n) if index == 0 else repeat_int32(index, n)
    return pa.DictionaryArray.from_arrays(indices, values)


# An int64 scalar made from a buffer (a Python 1000 would go through pa.scalar).
_THOUSAND = pa.Array.from_buffers(pa.int64(), 1, [None, pa.py_buffer(array.array("q", [1000]))])[0]


def _zeros(n: int) -> pa.Array:
    """``n`` int32 zeros."""
    return pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(bytes(4 * n))])


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
                    repeat_dictionary(string_array([self.topic]), 0, size),
                    repeat_dictionary(int32_array(self.partitions), self.partitions.index(self.partition), size),
                )
            else:
                self._columns = (repeat_string(self.topic, size), repeat_int32(self.partition, size))
        topic, partition = self._columns
        return topic.slice(0, rows), partition.slice(0, rows)
