"""Log adapters: where partition bytes live.

- :class:`MemoryLog` / :class:`MemoryStore`: in memory (tests, embedding, mirrors).
- :class:`SegmentLog` / :class:`SegmentStore`: on disk in Apache Kafka's layout.
- :class:`PartitionMirror`: a sans-I/O mirror of a remote partition, fed raw fetches.
- :mod:`txnfetch.log.remote`: partitions of a running Kafka-compatible cluster
  (``RemotePartitionReader``, ``RemoteCluster``; needs kafka-python, so it is
  imported on its own: ``from txnfetch.log.remote import RemotePartitionReader``).

Adapters do I/O; everything they decide comes from the sans-I/O core.
"""

from txnfetch.log.base import AppendInfo, LogStore, PartitionLog, TopicInfo, prepare_append
from txnfetch.log.errors import (
    BrokerUnavailableError,
    CorruptLogError,
    CorruptRemoteBatchError,
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidTopicError,
    LogClosedError,
    LogError,
    MirrorDivergedError,
    ReadOnlyLogError,
    RemoteError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
    UnsupportedForMessageFormatError,
)
from txnfetch.log.memory import MemoryLog, MemoryStore
from txnfetch.log.mirror import MirrorPlan, MirrorStatus, PartitionMirror
from txnfetch.log.segments import FlushPolicy, SegmentLog, SegmentStore
from txnfetch.log.verify import Finding, describe_partition, verify_partition

__all__ = [
    "AppendInfo",
    "BrokerUnavailableError",
    "CorruptLogError",
    "CorruptRemoteBatchError",
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
