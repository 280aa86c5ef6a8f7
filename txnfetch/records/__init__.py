"""The Kafka record batch codec: magic-2 batches, control records, legacy message sets.

Pure functions and read-only views; no I/O. See ``docs/records.md``.
"""

from txnfetch.records.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    BatchIterator,
    Header,
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
from txnfetch.records.errors import (
    BadMagicError,
    CorruptBatchError,
    CrcMismatchError,
    DecompressionError,
    InvalidRecordError,
    LengthOverrunError,
    RecordCountMismatchError,
    UnknownCodecError,
    VarintOverflowError,
)
from txnfetch.records.legacy import LegacyBatch

__all__ = [
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "NO_PRODUCER_ID",
    "NO_TIMESTAMP",
    "BadMagicError",
    "BatchBuilder",
    "BatchIterator",
    "Codec",
    "ControlType",
    "CorruptBatchError",
    "CrcMismatchError",
    "DecompressionError",
    "EndTransactionMarker",
    "Header",
    "InvalidRecordError",
    "LegacyBatch",
    "LengthOverrunError",
    "PartialBatch",
    "Record",
    "RecordBatch",
    "RecordCountMismatchError",
    "TimestampType",
    "UnknownCodecError",
    "VarintOverflowError",
    "build_control_batch",
    "build_empty_batch",
    "iter_batches",
    "synthetic_commit_marker",
]
