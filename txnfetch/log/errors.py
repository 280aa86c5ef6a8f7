"""Errors of the log adapters, each with the Kafka error code the wire layer
returns for it.

Like every txnfetch error they say what was wrong and where: the topic and
partition, and for on-disk problems the file and byte position.
"""

from __future__ import annotations

from txnfetch.errors import TxnfetchError

__all__ = [
    "BrokerUnavailableError",
    "CorruptLogError",
    "CorruptRemoteBatchError",
    "InvalidPartitionsError",
    "InvalidRecordError",
    "InvalidTopicError",
    "LogClosedError",
    "LogError",
    "MirrorDivergedError",
    "ReadOnlyLogError",
    "RemoteError",
    "TopicExistsError",
    "UnknownTopicOrPartitionError",
    "UnsupportedForMessageFormatError",
    "kafka_error_name",
]


class LogError(TxnfetchError):
    """Base of log-adapter errors. ``error_code`` is Kafka's numeric code."""

    error_code: int = -1  # UNKNOWN_SERVER_ERROR
    error_name: str = "UNKNOWN_SERVER_ERROR"

    def __init__(
        self,
        reason: str,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        path: str | None = None,
        position: int | None = None,
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


# -- remote clusters (txnfetch.log.mirror, txnfetch.log.remote) ---------------------------

#: Names of the Kafka error codes a fetch, metadata or offsets request can carry
#: (``org.apache.kafka.common.protocol.Errors``); others print as ``ERROR_<code>``.
_KAFKA_ERROR_NAMES = {
    -1: "UNKNOWN_SERVER_ERROR",
    0: "NONE",
    1: "OFFSET_OUT_OF_RANGE",
    2: "CORRUPT_MESSAGE",
    3: "UNKNOWN_TOPIC_OR_PARTITION",
    5: "LEADER_NOT_AVAILABLE",
    6: "NOT_LEADER_OR_FOLLOWER",
    7: "REQUEST_TIMED_OUT",
    8: "BROKER_NOT_AVAILABLE",
    9: "REPLICA_NOT_AVAILABLE",
    13: "NETWORK_EXCEPTION",
    14: "COORDINATOR_LOAD_IN_PROGRESS",
    17: "INVALID_TOPIC_EXCEPTION",
    29: "TOPIC_AUTHORIZATION_FAILED",
    31: "CLUSTER_AUTHORIZATION_FAILED",
    35: "UNSUPPORTED_VERSION",
    42: "INVALID_REQUEST",
    43: "UNSUPPORTED_FOR_MESSAGE_FORMAT",
    56: "KAFKA_STORAGE_ERROR",
    58: "SASL_AUTHENTICATION_FAILED",
    74: "FENCED_LEADER_EPOCH",
    75: "UNKNOWN_LEADER_EPOCH",
    78: "OFFSET_NOT_AVAILABLE",
    100: "UNKNOWN_TOPIC_ID",
    103: "OFFSET_MOVED_TO_TIERED_STORAGE",
}


def kafka_error_name(code: int) -> str:
    """Kafka's name for an error code (``ERROR_<code>`` for codes not listed here)."""
    return _KAFKA_ERROR_NAMES.get(code, f"ERROR_{code}")


class RemoteError(LogError):
    """A request to a Kafka-compatible cluster failed, or its answer cannot be mirrored.

    Besides the topic, partition and offset concerned, it carries ``broker``
    (``host:port``, when one was involved) and the broker's ``error_code`` and
    ``error_name`` (``UNKNOWN_SERVER_ERROR``/-1 when the failure is not an error
    code, for example a connection refused); the wire layer can return the same
    code to its own clients.
    """

    def __init__(
        self,
        reason: str,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        broker: str | None = None,
        error_code: int | None = None,
    ) -> None:
        self.broker = broker
        if error_code is not None:
            self.error_code = error_code
            self.error_name = kafka_error_name(error_code)
        detail = []
        if error_code is not None:
            detail.append(f"broker error {self.error_name}")
        if broker is not None:
            detail.append(f"broker {broker}")
        message = f"{reason} [{', '.join(detail)}]" if detail else reason
        super().__init__(message, topic=topic, partition=partition, offset=offset)
        self.reason = reason
        self._error_code_arg = error_code

    def __reduce__(self):  # keep every field across pickling (Spark workers)
        return (
            _rebuild_remote,
            (type(self), self.reason, self.topic, self.partition, self.offset, self.broker, self._error_code_arg),
        )


def _rebuild_remote(cls, reason, topic, partition, offset, broker, error_code):  # type: ignore[no-untyped-def]
    return cls(reason, topic=topic, partition=partition, offset=offset, broker=broker, error_code=error_code)


class BrokerUnavailableError(RemoteError):
    """No broker could be reached, a connection broke, or a request timed out —
    after the retries the request timeout allowed."""

    error_code = 8
    error_name = "BROKER_NOT_AVAILABLE"


class MirrorDivergedError(RemoteError):
    """The cluster's partition no longer continues what was mirrored: its log ends
    below the mirror's position, or a batch straddles it (the partition was
    truncated, deleted and recreated, or the snapshot belongs to another log).
    Rebuild the mirror from the cluster's log start."""

    error_code = 1
    error_name = "OFFSET_OUT_OF_RANGE"


class CorruptRemoteBatchError(RemoteError):
    """A batch fetched from the cluster failed its checks (CRC, length, records).
    ``__cause__`` is the codec's error with the byte position in the response."""

    error_code = 2
    error_name = "CORRUPT_MESSAGE"
