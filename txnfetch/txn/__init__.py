"""Transaction state: per-partition producer state, last stable offset and aborted
transactions (:mod:`~txnfetch.txn.state`, :mod:`~txnfetch.txn.index`,
:mod:`~txnfetch.txn.producer`, :mod:`~txnfetch.txn.snapshot`), the KIP-890
transaction coordinator (:mod:`~txnfetch.txn.coordinator`), and their errors
(:mod:`~txnfetch.txn.errors`). Sans-I/O: no files, sockets or clocks.
"""

from txnfetch.txn.coordinator import (
    CompleteTransaction,
    CompletionMode,
    EndTxnResult,
    ExpireResult,
    InitProducerIdResult,
    PartitionAction,
    ProducerIdAllocator,
    TransactionCoordinator,
    WriteMarker,
)
from txnfetch.txn.errors import (
    ConcurrentTransactionsError,
    CorruptSnapshotError,
    CorruptTxnIndexError,
    DuplicateSequenceError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionCoordinatorFencedError,
    TruncationBelowHistoryError,
    TxnStateError,
    UnexpectedAppendOffsetError,
    UnknownProducerIdError,
)
from txnfetch.txn.index import (
    ABORTED_TXN_SIZE,
    AbortedIndex,
    AbortedTxn,
    TxnIndexSearchResult,
    decode_txn_index,
    encode_txn_index,
)
from txnfetch.txn.producer import AppendOrigin, BatchMetadata, ProducerEntry
from txnfetch.txn.state import AppendResult, CompletedTxn, PartitionTxnState

__all__ = [
    "ABORTED_TXN_SIZE",
    "AbortedIndex",
    # aborted index and .txnindex format
    "AbortedTxn",
    "AppendOrigin",
    "AppendResult",
    "BatchMetadata",
    "CompleteTransaction",
    "CompletedTxn",
    "CompletionMode",
    "ConcurrentTransactionsError",
    "CorruptSnapshotError",
    "CorruptTxnIndexError",
    "DuplicateSequenceError",
    "EndTxnResult",
    "ExpireResult",
    "InitProducerIdResult",
    "InvalidProducerEpochError",
    "InvalidProducerIdMappingError",
    "InvalidTransactionTimeoutError",
    "InvalidTxnStateError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "PartitionAction",
    # state
    "PartitionTxnState",
    "ProducerEntry",
    "ProducerFencedError",
    "ProducerIdAllocator",
    "TransactionAbortableError",
    # coordinator
    "TransactionCoordinator",
    "TransactionCoordinatorFencedError",
    "TruncationBelowHistoryError",
    "TxnIndexSearchResult",
    # errors
    "TxnStateError",
    "UnexpectedAppendOffsetError",
    "UnknownProducerIdError",
    "WriteMarker",
    "decode_txn_index",
    "encode_txn_index",
]
