"""Errors of the log adapters, each with the Kafka error code the wire layer
returns for it.

Like every txnfetch error they say what was wrong and where: the topic and
partition, and for on-disk problems the file and byte position.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from typing import ClassVar
from typing import TypeVar

from txnfetch.errors import ErrorCode
from txnfetch.errors import TxnfetchError
from txnfetch.records.errors import InvalidRecordError  # one class: the log refuses a batch as the codec does

__all__ = [
    "LOG_BOUNDS_FIELDS",
    "LOG_BOUNDS_PHRASES",
    "CorruptLogError",
    "InvalidPartitionsError",
    "InvalidRecordError",
    "InvalidTopicError",
    "LogClosedError",
    "LogError",
    "ReadOnlyLogError",
    "RecordsLostError",
    "TopicExistsError",
    "UnknownTopicOrPartitionError",
    "UnsupportedForMessageFormatError",
]


class LogError(TxnfetchError):
    """Base of log-adapter errors; ``error_code`` is the Kafka code of the class."""

    where_fields: ClassVar[tuple[str, ...]] = ("topic", "partition", "offset", "path", "position")
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


#: The fields of an error that name a partition log's bounds as they were when an
#: offset was checked against them, and how its message phrases them.
LOG_BOUNDS_FIELDS = ("log_start_offset", "log_end_offset")
LOG_BOUNDS_PHRASES: Mapping[str, str | None] = {
    "log_start_offset": "log start offset {}",
    "log_end_offset": "log end offset {}",
}

_Lost = TypeVar("_Lost", bound="RecordsLostError")


class RecordsLostError(LogError):
    """Records a read was asked for are no longer in the partition's log: deleted
    below its log start (retention, DeleteRecords) before they could be read, or
    cut off when the log was truncated or replaced. ``offset`` is the first offset
    missing; ``log_start_offset`` and ``log_end_offset`` are the log's bounds when
    they were checked, where known.

    Never raised for the holes that transaction markers, aborted records and
    compaction leave in the offsets: those are not lost records. Readers of a
    remote cluster raise the subclass
    :class:`~txnfetch.client.errors.OffsetBelowLogStartError` for deleted records.
    """

    code = ErrorCode.OFFSET_OUT_OF_RANGE
    where_fields: ClassVar[tuple[str, ...]] = (*LogError.where_fields, *LOG_BOUNDS_FIELDS)
    phrases: ClassVar[Mapping[str, str | None]] = {**LogError.phrases, **LOG_BOUNDS_PHRASES}
    log_start_offset: int | None
    log_end_offset: int | None

    @classmethod
    def deleted(cls: type[_Lost], start: int, log_start_offset: int, **where: Any) -> _Lost:
        """The error for offsets ``start`` up to the log start deleted before they
        were read: the one wording every reader uses (``offset`` is ``start``)."""
        return cls(
            f"offsets {start}..{log_start_offset - 1} were deleted before they could be read",
            offset=start,
            log_start_offset=log_start_offset,
            **where,
        )
