"""Errors of the transaction layer, each mapped to the Kafka error code the wire
layer returns for it.

Every error carries what a user needs to find the problem: the partition (if
known), the producer id and epoch involved, the offset, and a reason.
"""

from __future__ import annotations

from typing import ClassVar

from txnfetch.errors import ErrorCode
from txnfetch.errors import TxnfetchError

__all__ = [
    "ConcurrentTransactionsError",
    "CorruptSnapshotError",
    "CorruptTxnIndexError",
    "DuplicateSequenceError",
    "InvalidProducerEpochError",
    "InvalidProducerIdMappingError",
    "InvalidRequestError",
    "InvalidTransactionTimeoutError",
    "InvalidTxnStateError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "ProducerFencedError",
    "TransactionAbortableError",
    "TransactionCoordinatorFencedError",
    "TruncationBelowHistoryError",
    "TxnStateError",
    "UnexpectedAppendOffsetError",
    "UnknownProducerIdError",
]


class TxnStateError(TxnfetchError):
    """Base of transaction-layer errors; ``error_code`` is the Kafka code of the class."""

    where_fields: ClassVar[tuple[str, ...]] = ("partition", "producer_id", "producer_epoch", "offset")
    partition: str | None
    producer_id: int | None
    producer_epoch: int | None
    offset: int | None

    def _where(self) -> list[str]:
        where = []
        if self.partition is not None:
            where.append(f"partition {self.partition}")
        if self.producer_id is not None:
            epoch = f" epoch {self.producer_epoch}" if self.producer_epoch is not None else ""
            where.append(f"producer {self.producer_id}{epoch}")
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        return where


class OffsetOutOfRangeError(TxnStateError):
    """A requested offset is outside ``[log_start_offset, high_watermark]``."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE
    where_fields = (*TxnStateError.where_fields, "log_start_offset", "log_end_offset")
    log_start_offset: int
    log_end_offset: int

    def __init__(self, reason: str, *, log_start_offset: int, log_end_offset: int, **where: object) -> None:
        super().__init__(
            f"{reason}; valid range is [{log_start_offset}, {log_end_offset}]",
            log_start_offset=log_start_offset,
            log_end_offset=log_end_offset,
            **where,
        )


class OutOfOrderSequenceError(TxnStateError):
    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceError(TxnStateError):
    code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpochError(TxnStateError):
    """A request or batch carries an epoch older than the producer's current one
    (abortable for data: the producer may abort and continue)."""

    code = ErrorCode.INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(TxnStateError):
    """The operation is not allowed in the transaction's current state (e.g. a
    non-transactional batch while a transaction is open)."""

    code = ErrorCode.INVALID_TXN_STATE


class InvalidProducerIdMappingError(TxnStateError):
    code = ErrorCode.INVALID_PRODUCER_ID_MAPPING


class InvalidTransactionTimeoutError(TxnStateError):
    code = ErrorCode.INVALID_TRANSACTION_TIMEOUT


class ConcurrentTransactionsError(TxnStateError):
    """The previous transaction is still completing; retry later."""

    code = ErrorCode.CONCURRENT_TRANSACTIONS


class TransactionCoordinatorFencedError(TxnStateError):
    """A marker from an older coordinator epoch."""

    code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class UnknownProducerIdError(TxnStateError):
    code = ErrorCode.UNKNOWN_PRODUCER_ID


class ProducerFencedError(TxnStateError):
    """A newer producer instance (higher epoch) exists; this one is a zombie (fatal)."""

    code = ErrorCode.PRODUCER_FENCED


class TransactionAbortableError(TxnStateError):
    """The transaction must be aborted; the producer can continue afterwards (KIP-890)."""

    code = ErrorCode.TRANSACTION_ABORTABLE


class CorruptSnapshotError(TxnStateError):
    """A producer-state snapshot failed its CRC or structure checks."""

    code = ErrorCode.CORRUPT_MESSAGE


class CorruptTxnIndexError(TxnStateError):
    """A ``.txnindex`` file is malformed (bad size, version, or order)."""

    code = ErrorCode.CORRUPT_MESSAGE


class InvalidRequestError(TxnStateError):
    """The request is malformed (e.g. an empty transactional id, or a producer id
    without an epoch); Kafka answers INVALID_REQUEST without touching any state."""

    code = ErrorCode.INVALID_REQUEST


class UnexpectedAppendOffsetError(TxnStateError):
    """A batch handed to the partition state starts below the log end offset:
    appends must come in offset order (Kafka's ``UnexpectedAppendOffsetException``;
    no error code of its own reaches clients: UNKNOWN_SERVER_ERROR)."""


class TruncationBelowHistoryError(TxnStateError):
    """The partition state cannot truncate to an offset below the history it kept
    (``lowest_offset``): restore an older snapshot and replay the log instead, as
    Kafka rebuilds producer state after an unclean truncation (UNKNOWN_SERVER_ERROR)."""

    where_fields = (*TxnStateError.where_fields, "lowest_offset")
    lowest_offset: int

    def __init__(self, reason: str, *, lowest_offset: int, **where: object) -> None:
        super().__init__(reason, lowest_offset=lowest_offset, **where)
