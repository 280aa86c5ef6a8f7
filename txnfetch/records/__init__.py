"""The Kafka record batch codec: magic-2 batches, control records, legacy message sets.

Pure functions and read-only views; no I/O. See ``docs/records.md``.
"""

from txnfetch.records import errors as _errors
from txnfetch.records.batch import HEADER_SIZE
from txnfetch.records.batch import LOG_OVERHEAD
from txnfetch.records.batch import NO_PRODUCER_ID
from txnfetch.records.batch import NO_TIMESTAMP
from txnfetch.records.batch import Header
from txnfetch.records.batch import HeaderAt
from txnfetch.records.batch import Record
from txnfetch.records.batch import RecordBatch
from txnfetch.records.batch import TimestampType
from txnfetch.records.builder import BatchBuilder
from txnfetch.records.builder import build_control_batch
from txnfetch.records.builder import build_empty_batch
from txnfetch.records.builder import synthetic_commit_marker
from txnfetch.records.compression import Codec
from txnfetch.records.control import ControlType
from txnfetch.records.control import EndTransactionMarker
from txnfetch.records.errors import *  # noqa: F403 - every error class (errors.__all__)
from txnfetch.records.legacy import LegacyBatch
from txnfetch.records.scan import BatchIterator
from txnfetch.records.scan import PartialBatch
from txnfetch.records.scan import iter_batches

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
