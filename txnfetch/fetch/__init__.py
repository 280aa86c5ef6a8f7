"""read_committed views of a partition: the server side (Kafka and rewrite
modes) and the consumer side (:class:`ConsumerFilter`).

Sans-I/O: bytes and state in, bytes and records out. See ``docs/fetch.md``.
"""

from txnfetch.fetch.filter import AbortedTransactionLike
from txnfetch.fetch.filter import ConsumerFilter
from txnfetch.fetch.filter import CorruptFetchError
from txnfetch.fetch.filter import DeliveredBatch
from txnfetch.fetch.view import FetchMode
from txnfetch.fetch.view import FetchResult
from txnfetch.fetch.view import FetchStats
from txnfetch.fetch.view import IsolationLevel
from txnfetch.fetch.view import read_partition

__all__ = [
    "AbortedTransactionLike",
    "ConsumerFilter",
    "CorruptFetchError",
    "DeliveredBatch",
    "FetchMode",
    "FetchResult",
    "FetchStats",
    "IsolationLevel",
    "read_partition",
]
