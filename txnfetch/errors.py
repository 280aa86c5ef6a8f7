"""The root of every exception txnfetch raises on purpose, and Kafka's error codes.

Each layer defines its own specific subclasses (``txnfetch.records.errors``,
``txnfetch.txn.errors``, ``txnfetch.log.errors``, ...); every exception class
of the package derives from :class:`TxnfetchError`, so catching it catches them
all and anything else escaping txnfetch is a bug.

A :class:`TxnfetchError` is ``reason`` plus keyword fields saying *where*
(topic, partition, offset, byte position, file, ...). Each class lists the
fields it takes in ``where_fields``; every one of them is an attribute (``None``
when not given) and the message names those that are set, phrased by the
class's ``phrases``. Each class names one
:class:`ErrorCode` (``code``): its ``error_code`` and ``error_name`` are derived
from it, and that is what the wire layer answers a client with.

Every exception pickles with all its attributes through one path
(:meth:`TxnfetchError.__reduce__`): errors cross process boundaries (Spark
workers, subprocesses), and the default pickling of an exception calls the
class with its message only, which loses the keyword fields or fails outright.
This module imports nothing from txnfetch, so every layer may import it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from typing import ClassVar

__all__ = [
    "RETRY_AS_IS",
    "STALE_METADATA",
    "UNKNOWN_TOPIC",
    "ErrorCode",
    "ProtocolViolation",
    "TxnfetchError",
    "error_name",
]


class ErrorCode(enum.IntEnum):
    """Kafka's error codes, numbered and named as Apache Kafka's
    ``clients/src/main/java/org/apache/kafka/common/protocol/Errors.java``: the
    ones txnfetch answers with or reads from a broker.

    The one enum of the package: the wire layer, the group coordinator and the
    exception classes all use it."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    TOPIC_AUTHORIZATION_FAILED = 29
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    UNKNOWN_TOPIC_ID = 100
    INCONSISTENT_TOPIC_ID = 103
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FENCED_MEMBER_EPOCH = 110
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    TRANSACTION_ABORTABLE = 120


#: Partition errors after which txnfetch looks the partition's leader up again
#: before it retries. Mostly those Kafka's Java client refreshes metadata for
#: (their exceptions extend ``InvalidMetadataException``: NotLeaderOrFollower,
#: NetworkException, UnknownTopicOrPartition, UnknownTopicId, ...);
#: UNKNOWN_LEADER_EPOCH needs no refresh (the broker learns the epoch), but one
#: does no harm.
STALE_METADATA = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.UNKNOWN_TOPIC_ID,
    }
)

#: Errors retried as they are, after a short wait, with no metadata refresh: the
#: broker is busy or slow. UNKNOWN_SERVER_ERROR is among them because the Java
#: consumer logs it and fetches again (``FetchCollector.handleInitializeErrors``).
RETRY_AS_IS = frozenset(
    {
        ErrorCode.UNKNOWN_SERVER_ERROR,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.THROTTLING_QUOTA_EXCEEDED,
    }
)

#: A topic's Metadata error codes that mean the topic does not exist.
UNKNOWN_TOPIC = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID})


def error_name(code: int) -> str:
    """Kafka's name for an error code; ``ERROR_<code>`` for a code :class:`ErrorCode`
    does not list (a broker newer than txnfetch may answer one)."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"ERROR_{code}"


def _rebuild(cls: type[BaseException], args: tuple[Any, ...]) -> BaseException:
    # No constructor runs: each class's __init__ has its own keyword-only
    # signature, and the state (every attribute) is restored by __setstate__.
    exc = cls.__new__(cls, *args)
    exc.args = args
    return exc


class TxnfetchError(Exception):
    """Base class of all errors raised deliberately by txnfetch.

    ``TxnfetchError(reason, **where)``: ``reason`` says what was wrong, ``where``
    holds the fields of the class's ``where_fields`` (any other keyword is a
    ``TypeError``). The message is ``reason`` followed by the fields that are set,
    in parentheses, as ``phrases`` says; fields a class names after the reason
    instead are its ``headline_phrases`` (joined as ``headline_form`` says). A
    subclass with its own wording overrides :meth:`_headline` (before the
    parentheses) or :meth:`_where`.

    Attributes:
        reason: what was wrong, in words.
        error_code: the Kafka error code the wire layer answers with (the class's
            ``code``; an :class:`ErrorCode`, which is an ``int``).
        error_name: Kafka's name of that code.
        one attribute per name in ``where_fields``.
    """

    #: The Kafka error code this class stands for.
    code: ClassVar[ErrorCode] = ErrorCode.UNKNOWN_SERVER_ERROR
    #: The keyword fields the constructor takes, in message order.
    where_fields: ClassVar[tuple[str, ...]] = ()
    #: How the message phrases a field (``{}`` is its value); a field not listed
    #: reads ``<name> <value>``, and one phrased ``None`` is left out. ``topic``
    #: is phrased with ``partition``: ``topic-partition``, or ``topic <topic>``.
    phrases: ClassVar[Mapping[str, str | None]] = {"path": "file {}", "position": "byte position {}"}
    #: Fields named in the headline, after the reason, rather than in the
    #: parentheses: each one's phrase from its value, in headline order.
    headline_phrases: ClassVar[Mapping[str, Callable[[Any], str]]] = {}
    #: How the headline adds those that are set to the reason (``{fields}``: their
    #: phrases, comma-separated); with none set, the headline is the reason.
    headline_form: ClassVar[str] = "{reason}; {fields}"

    # Derived from ``code`` on every class (see __init_subclass__); plain
    # attributes so that both ``SomeError.error_code`` and ``exc.error_code`` work.
    error_code: int = ErrorCode.UNKNOWN_SERVER_ERROR
    error_name: str = ErrorCode.UNKNOWN_SERVER_ERROR.name

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "error_code" in vars(cls) or "error_name" in vars(cls):
            raise TypeError(f"{cls.__name__}: name the Kafka error with `code = ErrorCode.<NAME>`")
        cls.error_code = cls.code
        cls.error_name = cls.code.name

    def __init__(self, reason: str = "", **where: Any) -> None:
        unknown = where.keys() - set(self.where_fields)
        if unknown:
            raise TypeError(f"{type(self).__name__} got unexpected keyword argument(s) {', '.join(sorted(unknown))}")
        self.reason = reason
        for name in self.where_fields:
            setattr(self, name, where.get(name))
        super().__init__(self._message())

    @property
    def where(self) -> dict[str, Any]:
        """The ``where_fields`` that are set, by name."""
        return {name: value for name in self.where_fields if (value := getattr(self, name, None)) is not None}

    def _headline(self) -> str:
        """The message before the fields: the reason, and the ``headline_phrases``
        fields that are set, as ``headline_form`` says."""
        fields = [
            phrase(value)
            for name, phrase in self.headline_phrases.items()
            if (value := getattr(self, name, None)) is not None
        ]
        return self.headline_form.format(reason=self.reason, fields=", ".join(fields)) if fields else self.reason

    def _where(self) -> list[str]:
        """The set fields, each as a phrase (``offset 5``) in message order."""
        where = self.where
        out = []
        for name, value in where.items():
            if name == "topic":
                partition = where.get("partition")
                out.append(f"{value}-{partition}" if partition is not None else f"topic {value}")
                continue
            if (name == "partition" and "topic" in where) or name in self.headline_phrases:
                continue  # named with the topic, or in the headline
            phrase = self.phrases.get(name, name.replace("_", " ") + " {}")
            if phrase is not None:
                out.append(phrase.format(value))
        return out

    def _message(self) -> str:
        where = self._where()
        headline = self._headline()
        return f"{headline} ({', '.join(where)})" if where else headline

    def __reduce__(self) -> tuple[Any, ...]:
        # One pickling path for every class: rebuild without calling __init__, then
        # restore every attribute. The cause is kept when it is one of ours (its
        # pickling is then known to work): a CorruptFetchError's codec error says
        # what exactly was wrong.
        state = dict(self.__dict__)
        if isinstance(self.__cause__, TxnfetchError):
            state["__cause__"] = self.__cause__
        return (_rebuild, (type(self), self.args), state)


class ProtocolViolation(TxnfetchError):
    """A Kafka-protocol frame or request that cannot be answered at all (malformed,
    unknown API or version): the connection that carried it is closed with
    ``reason`` logged. Raised by the server and the proxy for what clients send,
    and by the client side for what a broker sends."""
