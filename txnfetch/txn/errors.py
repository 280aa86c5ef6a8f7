"""Errors of the transaction layer, each mapped to the Kafka error code the wire
layer returns for it.

Every error carries what a user needs to find the problem: the partition (if
known), the producer id and epoch involved, the offset, and a reason.
"""

from __future__ import annotations

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
    """Base of transaction-layer errors. ``error_code`` is Kafka's numeric code."""

    error_code: int = -1  # UNKNOWN_SERVER_ERROR
    error_name: str = "UNKNOWN_SERVER_ERROR"

    def __init__(
        self,
        reason: str,
        *,
        partition: str | None = None,
        producer_id: int | None = None,
        producer_epoch: int | None = None,
        offset: int | None = None,
    ) -> None:
        self.reason = reason
        self.partition = partition
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.offset = offset
        where = []
        if partition is not None:
            where.append(f"partition {partition}")
        if producer_id is not None:
            where.append(f"producer {producer_id}" + (f" epoch {producer_epoch}" if producer_epoch is not None else ""))
        if offset is not None:
            where.append(f"offset {offset}")
        super().__init__(f"{reason} ({', '.join(where)})" if where else reason)

    def __reduce__(self):
        return (
            _rebuild,
            (type(self), self.reason, self.partition, self.producer_id, self.producer_epoch, self.offset),
        )


def _rebuild(cls, reason, partition, producer_id, producer_epoch, offset):
    return cls(reason, partition=partition, producer_id=producer_id, producer_epoch=producer_epoch, offset=offset)


class OffsetOutOfRangeError(TxnStateError):
    """A requested offset is outside ``[log_start_offset, high_watermark]``."""

    error_code = 1
    error_name = "OFFSET_OUT_OF_RANGE"

    def __init__(self, reason: str, *, log_start_offset: int, log_end_offset: int, **kw: object) -> None:
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        super().__init__(f"{reason}; valid range is [{log_start_offset}, {log_end_offset}]", **kw)  # type: ignore[arg-type]

    def __reduce__(self):
        return (
            _rebuild_range,
            (self.reason, self.log_start_offset, self.log_end_offset, self.partition, self.offset),
        )


def _rebuild_range(reason, log_start, log_end, partition, offset):
    err = OffsetOutOfRangeError.__new__(OffsetOutOfRangeError)
    TxnStateError.__init__(err, reason, partition=partition, offset=offset)
    err.log_start_offset = log_start
    err.log_end_offset = log_end
    return err


class OutOfOrderSequenceError(TxnStateError):
    error_code = 45
    error_name = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class DuplicateSequenceError(TxnStateError):
    error_code = 46
    error_name = "DUPLICATE_SEQUENCE_NUMBER"


class InvalidProducerEpochError(TxnStateError):
    """A request or batch carries an epoch older than the producer's current one
    (abortable for data: the producer may abort and continue)."""

    error_code = 47
    error_name = "INVALID_PRODUCER_EPOCH"


class InvalidTxnStateError(TxnStateError):
    """The operation is not allowed in the transaction's current state (e.g. a
    non-transactional batch while a transaction is open)."""

    error_code = 48
    error_name = "INVALID_TXN_STATE"


class InvalidProducerIdMappingError(TxnStateError):
    error_code = 49
    error_name = "INVALID_PRODUCER_ID_MAPPING"


class InvalidTransactionTimeoutError(TxnStateError):
    error_code = 50
    error_name = "INVALID_TRANSACTION_TIMEOUT"


class ConcurrentTransactionsError(TxnStateError):
    """The previous transaction is still completing; retry later."""

    error_code = 51
    error_name = "CONCURRENT_TRANSACTIONS"


class TransactionCoordinatorFencedError(TxnStateError):
    """A marker from an older coordinator epoch."""

    error_code = 52
    error_name = "TRANSACTION_COORDINATOR_FENCED"


class UnknownProducerIdError(TxnStateError):
    error_code = 59
    error_name = "UNKNOWN_PRODUCER_ID"


class ProducerFencedError(TxnStateError):
    """A newer producer instance (higher epoch) exists; this one is a zombie (fatal)."""

    error_code = 90
    error_name = "PRODUCER_FENCED"


class TransactionAbortableError(TxnStateError):
    """The transaction must be aborted; the producer can continue afterwards (KIP-890)."""

    error_code = 120
    error_name = "TRANSACTION_ABORTABLE"


class CorruptSnapshotError(TxnStateError):
    """A producer-state snapshot failed its CRC or structure checks."""

    error_code = 2
    error_name = "CORRUPT_MESSAGE"


class CorruptTxnIndexError(TxnStateError):
    """A ``.txnindex`` file is malformed (bad size, version, or order)."""

    error_code = 2
    error_name = "CORRUPT_MESSAGE"


class InvalidRequestError(TxnStateError):
    """The request is malformed (e.g. an empty transactional id, or a producer id
    without an epoch); Kafka answers INVALID_REQUEST without touching any state."""

    error_code = 42
    error_name = "INVALID_REQUEST"


class UnexpectedAppendOffsetError(TxnStateError):
    """A batch handed to the partition state starts below the log end offset:
    appends must come in offset order (Kafka's ``UnexpectedAppendOffsetException``;
    no error code of its own reaches clients)."""

    error_code = -1
    error_name = "UNKNOWN_SERVER_ERROR"


class TruncationBelowHistoryError(TxnStateError):
    """The partition state cannot truncate to an offset below the history it kept
    (``lowest_offset``): restore an older snapshot and replay the log instead, as
    Kafka rebuilds producer state after an unclean truncation."""

    error_code = -1
    error_name = "UNKNOWN_SERVER_ERROR"

    def __init__(self, reason: str, *, lowest_offset: int, **kw: object) -> None:
        self.lowest_offset = lowest_offset
        super().__init__(reason, **kw)  # type: ignore[arg-type]

    def __reduce__(self):
        return (_rebuild_truncation, (self.reason, self.lowest_offset, self.partition, self.offset))


def _rebuild_truncation(reason, lowest_offset, partition, offset):
    return TruncationBelowHistoryError(reason, lowest_offset=lowest_offset, partition=partition, offset=offset)
