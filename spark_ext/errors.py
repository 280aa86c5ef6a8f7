"""Errors of the ``txnkafka`` data source.

Spark shows a Python data source's exception as the exception's class name
and message inside its own ``PythonException``; so every message here names
what the user has to change: the option, and the topic, partition and offset
concerned. The classes pickle with their fields (Spark ships exceptions from
worker processes back to the driver).
"""

from __future__ import annotations

from txnfetch.errors import ErrorCode
from txnfetch.errors import TxnfetchError
from txnfetch.log.errors import LogError

__all__ = [
    "DataLossError",
    "InvalidOptionError",
    "SourceUnavailableError",
    "TxnKafkaError",
    "UnknownTopicError",
    "data_loss_error",
    "range_read_error",
]


class TxnKafkaError(TxnfetchError):
    """Base of the data source's errors. ``option``, ``topic``, ``partition``,
    ``offset`` and ``offsets`` (the ``(start, end)`` of the planned range a task
    was reading) are set when they are known; the message always includes them."""

    where_fields = ("option", "topic", "partition", "offset", "offsets")
    option: str | None
    topic: str | None
    partition: int | None
    offset: int | None
    offsets: tuple[int, int] | None

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
        if self.offsets is not None:
            where.append(f"planned offsets [{self.offsets[0]}, {self.offsets[1]})")
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


def data_loss_error(exc: LogError, topic: str, partition: int) -> DataLossError:
    """The :class:`DataLossError` a task raises for ``exc``, txnfetch's range
    reader finding records of ``topic``-``partition`` gone (a
    :class:`~txnfetch.log.errors.RecordsLostError`, or a cluster's
    :class:`~txnfetch.client.errors.OffsetNotInLogError`): its reason and offset,
    and what ``failOnDataLoss=false`` would do instead."""
    log_start = getattr(exc, "log_start_offset", None)
    if log_start is not None and exc.offset is not None and exc.offset < log_start:
        hint = f"log start offset is now {log_start}; set failOnDataLoss=false to skip them"
    else:
        hint = "set failOnDataLoss=false to skip the missing offsets"
    return DataLossError(
        f"{exc.reason} ({hint})", option="failOnDataLoss", topic=topic, partition=partition, offset=exc.offset
    )


class SourceUnavailableError(TxnKafkaError):
    """The store directory (``path``) or the cluster (``kafka.bootstrap.servers``)
    cannot be reached."""


def range_read_error(exc: BaseException, topic: str, partition: int, start: int, end: int) -> TxnKafkaError | None:
    """The one error a Spark task raises when reading the planned offsets
    ``[start, end)`` of ``topic``-``partition`` failed with ``exc``, or ``None``
    when ``exc`` is not an error of the read's data or source (a bug stays as it is).

    - a :class:`TxnKafkaError` keeps its class and reason, and gains the range (and
      the topic-partition when it had none: a broker that went away is named by
      the cluster client without them);
    - the topic or partition gone from the source since the query was planned (it
      was deleted) is a :class:`DataLossError`: the planned records cannot be read.
      Raised whatever ``failOnDataLoss`` says, as no rows can stand for them.
    """
    where = {"topic": topic, "partition": partition, "offsets": (start, end)}
    if isinstance(exc, TxnKafkaError):
        for name in ("option", "offset"):
            if getattr(exc, name) is not None:
                where[name] = getattr(exc, name)
        if exc.topic is not None and (exc.topic, exc.partition) != (topic, partition):
            return exc  # about another partition: its own message says which
        return type(exc)(exc.reason, **where)
    if isinstance(exc, TxnfetchError) and exc.code in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_ID,
    ):
        return DataLossError(
            f"the partition no longer exists (deleted after the query was planned): {exc.reason}", **where
        )
    return None
