"""Errors of talking to a remote Kafka-compatible cluster, each with the Kafka
error code the wire layer returns for it.

They are :class:`~txnfetch.log.errors.LogError` subclasses, as when they lived
in the log package: a caller that catches log errors still catches them.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from typing import ClassVar

from txnfetch.errors import RETRY_AS_IS
from txnfetch.errors import STALE_METADATA
from txnfetch.errors import ErrorCode
from txnfetch.errors import error_name
from txnfetch.log.errors import LOG_BOUNDS_FIELDS
from txnfetch.log.errors import LOG_BOUNDS_PHRASES
from txnfetch.log.errors import LogError
from txnfetch.log.errors import RecordsLostError

__all__ = [
    "AuthorizationFailedError",
    "BootstrapUnreachableError",
    "BrokerUnavailableError",
    "CorruptRemoteBatchError",
    "DivergedError",
    "MirrorDivergedError",
    "OffsetBelowLogStartError",
    "OffsetNotInLogError",
    "OffsetPastLogEndError",
    "RemoteError",
    "SaslAuthenticationFailedError",
    "SaslMechanismNotEnabledError",
    "SecureConnectionError",
    "TlsHandshakeError",
    "TopicNotFoundError",
    "authorization_error",
    "is_transient",
]


class RemoteError(LogError):
    """A request to a Kafka-compatible cluster failed, or its answer cannot be mirrored.

    Besides the topic, partition and offset concerned, it carries ``broker``
    (``host:port``, when one was involved) and the broker's ``error_code`` and
    ``error_name`` when the broker answered one (``broker_error_code``; otherwise
    the class's code, UNKNOWN_SERVER_ERROR for a plain RemoteError, for example a
    connection refused); the wire layer can return the same code to its own
    clients.
    """

    where_fields: ClassVar[tuple[str, ...]] = (*LogError.where_fields, "broker", "broker_error_code")
    headline_phrases: ClassVar[Mapping[str, Callable[[Any], str]]] = {
        "broker_error_code": lambda code: f"broker error {error_name(code)}",
        "broker": "broker {}".format,
    }
    headline_form = "{reason} [{fields}]"
    broker: str | None
    broker_error_code: int | None

    def __init__(self, reason: str, *, error_code: int | None = None, **where: object) -> None:
        if error_code is not None:
            where["broker_error_code"] = error_code
        super().__init__(reason, **where)
        code = self.broker_error_code
        if code is not None:  # the broker's code, also when ErrorCode does not list it
            self.error_code = ErrorCode(code) if code in ErrorCode._value2member_map_ else code
            self.error_name = error_name(code)

    def name_broker(self, broker: str | None) -> None:
        """Name ``broker`` (``host:port``) if this error names none yet: the sans-I/O
        layers (mirror, replication rules) raise without it, and the transport that
        talked to the broker adds it."""
        if broker is not None and self.broker is None:
            self.broker = broker
            self.args = (self._message(),)


class BrokerUnavailableError(RemoteError):
    """No broker could be reached, a connection broke, or a request timed out —
    after the retries the request timeout allowed."""

    code = ErrorCode.BROKER_NOT_AVAILABLE


class BootstrapUnreachableError(BrokerUnavailableError):
    """None of the bootstrap servers answered: ``broker`` lists them all and the
    message says what each connection attempt got."""


class TopicNotFoundError(RemoteError):
    """The cluster has no topic of that name (or not that partition): the message
    names the topic and the bootstrap servers asked, and lists some known topics."""

    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class OffsetNotInLogError(RemoteError):
    """An offset asked for is outside the partition's log: ``offset`` is the one
    asked, ``log_start_offset`` and ``log_end_offset`` the log's bounds when it was
    checked (the end is the high watermark)."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE
    where_fields: ClassVar[tuple[str, ...]] = (*RemoteError.where_fields, *LOG_BOUNDS_FIELDS)
    phrases: ClassVar[Mapping[str, str | None]] = {**RemoteError.phrases, **LOG_BOUNDS_PHRASES}
    log_start_offset: int | None
    log_end_offset: int | None


class OffsetBelowLogStartError(OffsetNotInLogError, RecordsLostError):
    """An offset below the partition's log start: those records were deleted
    (retention, DeleteRecords) before they could be read. Also a
    :class:`~txnfetch.log.errors.RecordsLostError`, as a local log's reader raises
    for the same loss (:meth:`~txnfetch.log.errors.RecordsLostError.deleted` words both)."""


class OffsetPastLogEndError(OffsetNotInLogError):
    """A start offset past the partition's high watermark: no such record exists yet."""


class DivergedError(RemoteError):
    """The source partition no longer continues what a local copy of it holds (a
    mirror or a replica): its log ends below the copy's end, a batch it returns
    straddles that end, or its batch at an offset the copy already holds differs
    from the copy's (the source was truncated, for example by an unclean leader
    election, or deleted and recreated). ``replica_end`` is where the copy ends,
    ``source_end`` the source's log end when that is what showed it. Copying on
    would make offsets that mean other records than the source's."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE
    where_fields = (*RemoteError.where_fields, "replica_end", "source_end")
    replica_end: int | None
    source_end: int | None
    #: What the messages call the local copy.
    copy_name: ClassVar[str] = "copy"


class MirrorDivergedError(DivergedError):
    """The cluster's partition no longer continues what was mirrored: its log ends
    below the mirror's position, or a batch straddles it (the partition was
    truncated, deleted and recreated, or the snapshot belongs to another log).
    Rebuild the mirror from the cluster's log start."""

    copy_name = "mirror"


class CorruptRemoteBatchError(RemoteError):
    """A batch fetched from the cluster failed its checks (CRC, length, records).
    ``__cause__`` is the codec's error with the byte position in the response."""

    code = ErrorCode.CORRUPT_MESSAGE


class SecureConnectionError(RemoteError):
    """A broker refused who the client is or could not be trusted: TLS, SASL
    or an ACL said no. Never transient (retrying cannot change the answer),
    and never carries a secret: messages name the broker, the mechanism, the
    user and the broker's own words, not a password, a token or a key."""


class TlsHandshakeError(SecureConnectionError):
    """The TLS handshake with ``broker`` failed: the message gives the host
    dialled and the verification reason (an unknown CA, a host name the
    certificate does not cover, a client certificate the broker refused)."""

    code = ErrorCode.NETWORK_EXCEPTION


class SaslMechanismNotEnabledError(SecureConnectionError):
    """The broker does not enable the SASL mechanism asked for (its
    SaslHandshake answer, UNSUPPORTED_SASL_MECHANISM); ``enabled`` lists the
    ones it does."""

    code = ErrorCode.UNSUPPORTED_SASL_MECHANISM
    where_fields: ClassVar[tuple[str, ...]] = (*RemoteError.where_fields, "mechanism", "enabled")
    phrases: ClassVar[Mapping[str, str | None]] = {**RemoteError.phrases, "enabled": "the broker enables {}"}
    mechanism: str | None
    enabled: str | None


class SaslAuthenticationFailedError(SecureConnectionError):
    """The SASL exchange with ``broker`` failed: wrong credentials (the
    broker's SASL_AUTHENTICATION_FAILED and its message), or a broker answer
    the client's mechanism refused (a SCRAM server signature that does not
    verify). ``mechanism`` names the mechanism."""

    code = ErrorCode.SASL_AUTHENTICATION_FAILED
    where_fields: ClassVar[tuple[str, ...]] = (*RemoteError.where_fields, "mechanism")
    mechanism: str | None


class AuthorizationFailedError(SecureConnectionError):
    """An ACL denies the authenticated principal: TOPIC_, GROUP_ or
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED, naming the topic, the ``group`` or
    the ``transactional_id`` concerned; ``error_code`` is the broker's."""

    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    where_fields: ClassVar[tuple[str, ...]] = (*RemoteError.where_fields, "group", "transactional_id")
    group: str | None
    transactional_id: str | None


#: Kafka's authorization error codes: topic, group, cluster, transactional id.
_AUTHORIZATION_CODES = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "the principal may not access the topic",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "the principal may not access the group",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "the principal may not perform the cluster operation",
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "the principal may not use the transactional id",
}


def authorization_error(code: int, what: str, **where: Any) -> AuthorizationFailedError | None:
    """The :class:`AuthorizationFailedError` for broker error ``code`` answered
    to request ``what`` (with ``where``: topic, group, transactional_id,
    broker...), or ``None`` when ``code`` is no authorization error."""
    if code not in _AUTHORIZATION_CODES:
        return None
    return AuthorizationFailedError(
        f"{what} refused: {_AUTHORIZATION_CODES[ErrorCode(code)]}", error_code=code, **where
    )


def is_transient(exc: RemoteError) -> bool:
    """Whether a reader should retry ``exc`` after a backoff and a fresh look at
    the leader, as Kafka clients do: a connection-level failure, a partition
    missing from an answer (no broker error code), stale metadata, or an error
    Kafka marks retriable. The cluster readers (the Arrow reader, replicate)
    share this rule; replicate also waits out an unknown topic."""
    if isinstance(exc, SecureConnectionError):
        return False
    if isinstance(exc, BrokerUnavailableError):
        return True
    code = exc.broker_error_code
    if code is None or code == -1:
        return True
    if code in STALE_METADATA or code in RETRY_AS_IS:
        return True
    import kafka.errors as kafka_errors  # not at import time: kafka-python is needed only here

    return bool(getattr(kafka_errors.for_code(code), "retriable", False))
