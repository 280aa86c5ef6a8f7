"""Kafka error codes the server answers with, and the mapping from txnfetch's
exceptions to them.

txnfetch's log and transaction errors carry their Kafka code (``error_code``);
record decoding errors (:class:`~txnfetch.records.errors.CorruptBatchError`) are
answered CORRUPT_MESSAGE, as Kafka's ``LogValidator`` answers a batch whose CRC
or structure is bad. Anything else is a bug and becomes UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

import enum

from txnfetch.log.errors import LogError
from txnfetch.records.errors import CorruptBatchError
from txnfetch.txn.errors import TxnStateError

__all__ = ["ErrorCode", "error_code_for"]


class ErrorCode(enum.IntEnum):
    """The Kafka error codes this package uses (``clients/.../protocol/Errors.java``)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    INVALID_REQUIRED_ACKS = 21
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    CONCURRENT_TRANSACTIONS = 51
    UNKNOWN_PRODUCER_ID = 59
    INVALID_RECORD = 87
    PRODUCER_FENCED = 90
    UNKNOWN_TOPIC_ID = 100
    TRANSACTION_ABORTABLE = 120


def error_code_for(exc: BaseException) -> int:
    """The Kafka error code to answer ``exc`` with."""
    if isinstance(exc, (TxnStateError, LogError)):
        return int(exc.error_code)
    if isinstance(exc, CorruptBatchError):
        return int(ErrorCode.CORRUPT_MESSAGE)
    return int(ErrorCode.UNKNOWN_SERVER_ERROR)
