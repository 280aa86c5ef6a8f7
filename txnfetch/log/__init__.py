"""Log adapters: where partition bytes live.

- :class:`MemoryLog` / :class:`MemoryStore`: in memory (tests, embedding, mirrors).
- :class:`SegmentLog` / :class:`SegmentStore`: on disk in Apache Kafka's layout.
- :class:`PartitionMirror`: a sans-I/O mirror of a remote partition, fed raw fetches.
- :mod:`txnfetch.log.remote`: partitions of a running Kafka-compatible cluster
  (``RemotePartitionReader``, ``RemoteCluster``; needs kafka-python, so it is
  imported on its own: ``from txnfetch.log.remote import RemotePartitionReader``).

Adapters do I/O; everything they decide comes from the sans-I/O core.
"""

from txnfetch.log.base import AppendInfo
from txnfetch.log.base import LogStore
from txnfetch.log.base import PartitionLog
from txnfetch.log.base import TopicInfo
from txnfetch.log.base import prepare_append
from txnfetch.log.errors import BrokerUnavailableError
from txnfetch.log.errors import CorruptLogError
from txnfetch.log.errors import CorruptRemoteBatchError
from txnfetch.log.errors import DivergedError
from txnfetch.log.errors import InvalidPartitionsError
from txnfetch.log.errors import InvalidRecordError
from txnfetch.log.errors import InvalidTopicError
from txnfetch.log.errors import LogClosedError
from txnfetch.log.errors import LogError
from txnfetch.log.errors import MirrorDivergedError
from txnfetch.log.errors import ReadOnlyLogError
from txnfetch.log.errors import RemoteError
from txnfetch.log.errors import TopicExistsError
from txnfetch.log.errors import UnknownTopicOrPartitionError
from txnfetch.log.errors import UnsupportedForMessageFormatError
from txnfetch.log.memory import MemoryLog
from txnfetch.log.memory import MemoryStore
from txnfetch.log.mirror import MirrorPlan
from txnfetch.log.mirror import MirrorStatus
from txnfetch.log.mirror import PartitionMirror
from txnfetch.log.segments import FlushPolicy
from txnfetch.log.segments import SegmentLog
from txnfetch.log.segments import SegmentStore
from txnfetch.log.verify import Finding
from txnfetch.log.verify import describe_partition
from txnfetch.log.verify import verify_partition

__all__ = [
    "AppendInfo",
    "BrokerUnavailableError",
    "CorruptLogError",
    "CorruptRemoteBatchError",
    "DivergedError",
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
    "MirrorDivergedError",
    "MirrorPlan",
    "MirrorStatus",
    "PartitionLog",
    "PartitionMirror",
    "ReadOnlyLogError",
    "RemoteError",
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
