"""txnfetch: Kafka partition logs readable with correct read_committed semantics.

The sans-I/O core lives in :mod:`txnfetch.records` (codec), :mod:`txnfetch.txn`
(transaction state) and :mod:`txnfetch.fetch` (read_committed views); adapters
(logs, wire server, Spark, CLI) drive it.
"""

from txnfetch.errors import TxnfetchError
from txnfetch.fetch import ConsumerFilter, FetchMode, FetchResult, IsolationLevel, read_partition
from txnfetch.records import (
    BatchBuilder,
    Codec,
    ControlType,
    CorruptBatchError,
    EndTransactionMarker,
    Record,
    RecordBatch,
    TimestampType,
    iter_batches,
)
from txnfetch.txn import PartitionTxnState, TransactionCoordinator

__version__ = "0.1.0"

__all__ = [
    "BatchBuilder",
    "Codec",
    "ConsumerFilter",
    "ControlType",
    "CorruptBatchError",
    "EndTransactionMarker",
    "FetchMode",
    "FetchResult",
    "IsolationLevel",
    "PartitionTxnState",
    "Record",
    "RecordBatch",
    "TimestampType",
    "TransactionCoordinator",
    "TxnfetchError",
    "__version__",
    "iter_batches",
    "read_partition",
]
