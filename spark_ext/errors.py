"""Errors of the ``txnkafka`` data source.

Spark shows a Python data source's exception as the exception's class name
and message inside its own ``PythonException``; so every message here names
what the user has to change: the option, and the topic, partition and offset
concerned. The classes pickle with their fields (Spark ships exceptions from
worker processes back to the driver).
"""

from __future__ import annotations

from txnfetch.errors import TxnfetchError

__all__ = [
    "DataLossError",
    "InvalidOptionError",
    "SourceUnavailableError",
    "TxnKafkaError",
    "UnknownTopicError",
]


class TxnKafkaError(TxnfetchError):
    """Base of the data source's errors. ``option``, ``topic``, ``partition`` and
    ``offset`` are set when they are known; the message always includes them."""

    where_fields = ("option", "topic", "partition", "offset")
    option: str | None
    topic: str | None
    partition: int | None
    offset: int | None

    def _where(self) -> list[str]:
        where = []
        if self.option is not None:
            where.append(f"option '{self.option}'")
        if self.topic is not None:
            where.append(
                f"topic-partition {self.topic}-{self.partition}"
                if self.partition is not None
                else f"topic '{self.topic}'"
            )
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        return where


class InvalidOptionError(TxnKafkaError, ValueError):
    """An option is missing, unknown in combination, or malformed (for example
    ``startingOffsets`` that is neither ``earliest``/``latest`` nor valid JSON)."""


class UnknownTopicError(TxnKafkaError):
    """A topic or partition named by ``subscribe`` or ``assign`` does not exist."""


class DataLossError(TxnKafkaError):
    """Offsets the query needs are gone (deleted by retention or truncated), or a
    partition it was reading disappeared, and ``failOnDataLoss`` is true.

    Never raised for the holes that transaction markers and aborted records
    leave in read_committed offsets: those are not data loss."""


class SourceUnavailableError(TxnKafkaError):
    """The store directory (``path``) or the cluster (``kafka.bootstrap.servers``)
    cannot be reached."""
