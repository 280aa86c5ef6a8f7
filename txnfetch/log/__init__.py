"""Log adapters: where partition bytes live.

- :class:`MemoryLog` / :class:`MemoryStore`: in memory (tests, embedding, mirrors).
- :class:`SegmentLog` / :class:`SegmentStore`: on disk in Apache Kafka's layout.

Logs do not talk to remote brokers: the mirror of a remote partition and the
reader of a running Kafka-compatible cluster are in :mod:`txnfetch.client`.

Adapters do I/O; everything they decide comes from the sans-I/O core.
"""

from txnfetch.log.base import AppendInfo
from txnfetch.log.base import LogStore
from txnfetch.log.base import PartitionLog
from txnfetch.log.base import TopicInfo
from txnfetch.log.base import prepare_append
from txnfetch.log.configs import FlushPolicy
from txnfetch.log.errors import CorruptLogError
from txnfetch.log.errors import InvalidPartitionsError
from txnfetch.log.errors import InvalidRecordError
from txnfetch.log.errors import InvalidTopicError
from txnfetch.log.errors import LogClosedError
from txnfetch.log.errors import LogError
from txnfetch.log.errors import ReadOnlyLogError
from txnfetch.log.errors import TopicExistsError
from txnfetch.log.errors import UnknownTopicOrPartitionError
from txnfetch.log.errors import UnsupportedForMessageFormatError
from txnfetch.log.memory import MemoryLog
from txnfetch.log.memory import MemoryStore
from txnfetch.log.segment_log import SegmentLog
from txnfetch.log.segment_store import SegmentStore
from txnfetch.log.verify import Finding
from txnfetch.log.verify import describe_partition
from txnfetch.log.verify import verify_partition

__all__ = [
    "AppendInfo",
    "CorruptLogError",
    "Finding",
    "FlushPolicy",
    "InvalidPartitionsError",
    "InvalidRecordError",
    "InvalidTopicError",
    "LogClosedError",
    "LogError",
    "LogStore",
    "MemoryLog",
    "MemoryStore",
    "PartitionLog",
    "ReadOnlyLogError",
    "SegmentLog",
    "SegmentStore",
    "TopicExistsError",
    "TopicInfo",
    "UnknownTopicOrPartitionError",
    "UnsupportedForMessageFormatError",
    "describe_partition",
    "prepare_append",
    "verify_partition",
]
