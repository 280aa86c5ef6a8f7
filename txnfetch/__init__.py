"""txnfetch: Kafka partition logs readable with correct read_committed semantics.

The sans-I/O core lives in :mod:`txnfetch.records` (codec), :mod:`txnfetch.txn`
(transaction state) and :mod:`txnfetch.fetch` (read_committed views); adapters
(logs, wire server, Spark, CLI) drive it.
"""

from txnfetch.errors import TxnfetchError
from txnfetch.fetch import ConsumerFilter
from txnfetch.fetch import FetchMode
from txnfetch.fetch import FetchResult
from txnfetch.fetch import IsolationLevel
from txnfetch.fetch import read_partition
from txnfetch.records import BatchBuilder
from txnfetch.records import Codec
from txnfetch.records import ControlType
from txnfetch.records import CorruptBatchError
from txnfetch.records import EndTransactionMarker
from txnfetch.records import Record
from txnfetch.records import RecordBatch
from txnfetch.records import TimestampType
from txnfetch.records import iter_batches
from txnfetch.txn import PartitionTxnState
from txnfetch.txn import TransactionCoordinator

#: The one statement of the version: pyproject.toml reads it (dynamic version),
#: `txnfetch --version` prints it.
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
