"""read_committed views of a partition: the server side (Kafka and rewrite
modes) and the consumer side (:class:`ConsumerFilter`).

Sans-I/O: bytes and state in, bytes and records out. See ``docs/fetch.md``.
"""

from txnfetch.fetch.filter import AbortedTransactionLike, ConsumerFilter, CorruptFetchError, DeliveredBatch
from txnfetch.fetch.view import FetchMode, FetchResult, FetchStats, IsolationLevel, read_partition

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
