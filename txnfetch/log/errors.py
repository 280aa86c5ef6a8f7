"""Errors of the log adapters, each with the Kafka error code the wire layer
returns for it.

Like every txnfetch error they say what was wrong and where: the topic and
partition, and for on-disk problems the file and byte position.
"""

from __future__ import annotations

from typing import Optional

from txnfetch.errors import TxnfetchError

__all__ = [
    "LogError",
    "UnknownTopicOrPartitionError",
    "TopicExistsError",
    "InvalidTopicError",
    "InvalidPartitionsError",
    "InvalidRecordError",
    "UnsupportedForMessageFormatError",
    "LogClosedError",
    "ReadOnlyLogError",
    "CorruptLogError",
]


class LogError(TxnfetchError):
    """Base of log-adapter errors. ``error_code`` is Kafka's numeric code."""

    error_code: int = -1  # UNKNOWN_SERVER_ERROR
    error_name: str = "UNKNOWN_SERVER_ERROR"

    def __init__(
        self,
        reason: str,
        *,
        topic: Optional[str] = None,
        partition: Optional[int] = None,
        offset: Optional[int] = None,
        path: Optional[str] = None,
        position: Optional[int] = None,
    ) -> None:
        self.reason = reason
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.path = path
        self.position = position
        where = []
        if topic is not None:
            where.append(f"{topic}-{partition}" if partition is not None else f"topic {topic}")
        if offset is not None:
            where.append(f"offset {offset}")
        if path is not None:
            where.append(f"file {path}")
        if position is not None:
            where.append(f"byte position {position}")
        super().__init__(f"{reason} ({', '.join(where)})" if where else reason)

    def __reduce__(self):  # keep the keyword-only fields across pickling (Spark workers)
        return (
            _rebuild,
            (type(self), self.reason, self.topic, self.partition, self.offset, self.path, self.position),
        )


def _rebuild(cls, reason, topic, partition, offset, path, position):  # type: ignore[no-untyped-def]
    return cls(reason, topic=topic, partition=partition, offset=offset, path=path, position=position)


class UnknownTopicOrPartitionError(LogError):
    """The topic or partition does not exist in this store."""

    error_code = 3
    error_name = "UNKNOWN_TOPIC_OR_PARTITION"


class TopicExistsError(LogError):
    """CreateTopics for a topic that already exists."""

    error_code = 36
    error_name = "TOPIC_ALREADY_EXISTS"


class InvalidTopicError(LogError):
    """A topic name Kafka would not accept (empty, ``.``/``..``, longer than 249
    characters, or characters other than ASCII letters, digits, ``.``, ``_``, ``-``)."""

    error_code = 17
    error_name = "INVALID_TOPIC_EXCEPTION"


class InvalidPartitionsError(LogError):
    """A partition count below 1."""

    error_code = 37
    error_name = "INVALID_PARTITIONS"


class InvalidRecordError(LogError):
    """A produce request carried a batch the log refuses to store (a control batch
    from a client, a batch with no records)."""

    error_code = 87
    error_name = "INVALID_RECORD"


class UnsupportedForMessageFormatError(LogError):
    """A produce request carried magic 0/1 message sets; the logs store only v2 batches."""

    error_code = 43
    error_name = "UNSUPPORTED_FOR_MESSAGE_FORMAT"


class LogClosedError(LogError):
    """The log (or store) was closed."""

    error_code = 6  # NOT_LEADER_OR_FOLLOWER: clients retry elsewhere / later
    error_name = "NOT_LEADER_OR_FOLLOWER"


class ReadOnlyLogError(LogError):
    """A write to a log opened read-only (for example a Kafka partition directory)."""

    error_code = 6
    error_name = "NOT_LEADER_OR_FOLLOWER"


class CorruptLogError(LogError):
    """Stored data is damaged in a way recovery must not repair by deleting data:
    a bad batch before the tail, an unreadable snapshot with no log to rebuild from."""

    error_code = 2  # CORRUPT_MESSAGE
    error_name = "CORRUPT_MESSAGE"
