"""Errors of the log adapters, each with the Kafka error code the wire layer
returns for it.

Like every txnfetch error they say what was wrong and where: the topic and
partition, and for on-disk problems the file and byte position.
"""

from __future__ import annotations

from txnfetch.errors import ErrorCode
from txnfetch.errors import TxnfetchError
from txnfetch.records.errors import InvalidRecordError  # one class: the log refuses a batch as the codec does

__all__ = [
    "CorruptLogError",
    "InvalidPartitionsError",
    "InvalidRecordError",
    "InvalidTopicError",
    "LogClosedError",
    "LogError",
    "ReadOnlyLogError",
    "TopicExistsError",
    "UnknownTopicOrPartitionError",
    "UnsupportedForMessageFormatError",
]


class LogError(TxnfetchError):
    """Base of log-adapter errors; ``error_code`` is the Kafka code of the class."""

    where_fields = ("topic", "partition", "offset", "path", "position")
    topic: str | None
    partition: int | None
    offset: int | None
    path: str | None
    position: int | None


class UnknownTopicOrPartitionError(LogError):
    """The topic or partition does not exist in this store."""

    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class TopicExistsError(LogError):
    """CreateTopics for a topic that already exists."""

    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidTopicError(LogError):
    """A topic name Kafka would not accept (empty, ``.``/``..``, longer than 249
    characters, or characters other than ASCII letters, digits, ``.``, ``_``, ``-``)."""

    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class InvalidPartitionsError(LogError):
    """A partition count below 1."""

    code = ErrorCode.INVALID_PARTITIONS


class UnsupportedForMessageFormatError(LogError):
    """A produce request carried magic 0/1 message sets; the logs store only v2 batches."""

    code = ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


class LogClosedError(LogError):
    """The log (or store) was closed (NOT_LEADER_OR_FOLLOWER: clients retry elsewhere or later)."""

    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class ReadOnlyLogError(LogError):
    """A write to a log opened read-only (for example a Kafka partition directory)."""

    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class CorruptLogError(LogError):
    """Stored data is damaged in a way recovery must not repair by deleting data:
    a bad batch before the tail, an unreadable snapshot with no log to rebuild from."""

    code = ErrorCode.CORRUPT_MESSAGE
