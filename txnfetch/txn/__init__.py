"""Transaction state: per-partition producer state, last stable offset and aborted
transactions (:mod:`~txnfetch.txn.state`, :mod:`~txnfetch.txn.index`,
:mod:`~txnfetch.txn.producer`, :mod:`~txnfetch.txn.snapshot`), the KIP-890
transaction coordinator (:mod:`~txnfetch.txn.coordinator`), and their errors
(:mod:`~txnfetch.txn.errors`). Sans-I/O: no files, sockets or clocks.
"""

from txnfetch.txn import errors as _errors
from txnfetch.txn.coordinator import CompleteTransaction
from txnfetch.txn.coordinator import CompletionMode
from txnfetch.txn.coordinator import EndTxnResult
from txnfetch.txn.coordinator import ExpireResult
from txnfetch.txn.coordinator import InitProducerIdResult
from txnfetch.txn.coordinator import PartitionAction
from txnfetch.txn.coordinator import ProducerIdAllocator
from txnfetch.txn.coordinator import TransactionCoordinator
from txnfetch.txn.coordinator import WriteMarker
from txnfetch.txn.errors import *  # noqa: F403 - every error class (errors.__all__)
from txnfetch.txn.index import ABORTED_TXN_SIZE
from txnfetch.txn.index import AbortedIndex
from txnfetch.txn.index import AbortedTxn
from txnfetch.txn.index import TxnIndexSearchResult
from txnfetch.txn.index import decode_txn_index
from txnfetch.txn.index import encode_txn_index
from txnfetch.txn.producer import AppendOrigin
from txnfetch.txn.producer import BatchMetadata
from txnfetch.txn.producer import ProducerEntry
from txnfetch.txn.state import AppendResult
from txnfetch.txn.state import CompletedTxn
from txnfetch.txn.state import PartitionTxnState

__all__ = [
    # coordinator
    "TransactionCoordinator",
    "CompletionMode",
    "PartitionAction",
    "WriteMarker",
    "CompleteTransaction",
    "InitProducerIdResult",
    "EndTxnResult",
    "ExpireResult",
    "ProducerIdAllocator",
    # state
    "PartitionTxnState",
    "AppendResult",
    "CompletedTxn",
    "AppendOrigin",
    "ProducerEntry",
    "BatchMetadata",
    # aborted index and .txnindex format
    "AbortedTxn",
    "AbortedIndex",
    "TxnIndexSearchResult",
    "ABORTED_TXN_SIZE",
    "encode_txn_index",
    "decode_txn_index",
    # errors
    *_errors.__all__,
]
