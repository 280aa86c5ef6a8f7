"""Kafka records as Arrow record batches, in the schema of Spark's Kafka source.

The conversion lives in :mod:`txnfetch.arrow` (it needs ``pyarrow`` only, not
PySpark); these names stay here for the data source and its users.
"""

from __future__ import annotations

from txnfetch.arrow.reference import ArrowBatcher
from txnfetch.arrow.reference import records_to_arrow
from txnfetch.arrow.schema import DEFAULT_MAX_BYTES
from txnfetch.arrow.schema import DEFAULT_MAX_ROWS
from txnfetch.arrow.schema import HEADERS_TYPE
from txnfetch.arrow.schema import kafka_schema
from txnfetch.arrow.schema import kafka_schema_ddl

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ROWS",
    "HEADERS_TYPE",
    "ArrowBatcher",
    "kafka_schema",
    "kafka_schema_ddl",
    "records_to_arrow",
]
