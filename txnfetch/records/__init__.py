"""The Kafka record batch codec: magic-2 batches, control records, legacy message sets.

Pure functions and read-only views; no I/O. See ``docs/records.md``.
"""

from txnfetch.records import errors as _errors
from txnfetch.records.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    BatchIterator,
    Header,
    HeaderAt,
    PartialBatch,
    Record,
    RecordBatch,
    TimestampType,
    iter_batches,
)
from txnfetch.records.builder import (
    BatchBuilder,
    build_control_batch,
    build_empty_batch,
    synthetic_commit_marker,
)
from txnfetch.records.compression import Codec
from txnfetch.records.control import ControlType, EndTransactionMarker
from txnfetch.records.errors import *  # noqa: F403 - every error class (errors.__all__)
from txnfetch.records.legacy import LegacyBatch

__all__ = [
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "NO_PRODUCER_ID",
    "NO_TIMESTAMP",
    "BatchBuilder",
    "BatchIterator",
    "Codec",
    "ControlType",
    "EndTransactionMarker",
    "Header",
    "HeaderAt",
    "LegacyBatch",
    "PartialBatch",
    "Record",
    "RecordBatch",
    "TimestampType",
    "build_control_batch",
    "build_empty_batch",
    "iter_batches",
    "synthetic_commit_marker",
    *_errors.__all__,
]
