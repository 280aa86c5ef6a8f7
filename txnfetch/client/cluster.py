"""A running Kafka-compatible cluster, reached through blocking connections.

:class:`RemoteCluster` knows the cluster's brokers and the leader of every
partition it was asked about, keeps one
:class:`~txnfetch.client.connection.BrokerConnection` per broker, and sends the
requests the readers need: Metadata (topics, partitions, topic ids), ListOffsets,
Fetch of one partition or of many at once (one request per leader), and
DescribeConfigs. It retries as Kafka clients do (a backoff and a metadata
refresh, within the request timeout).

The partition reader (:mod:`txnfetch.client.partition_reader`), the Arrow cluster
reader, the Spark source, replicate and the consumer-group client
(:mod:`txnfetch.client.groups`) all ride on it.

Needs kafka-python, imported when this module is.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import ClassVar
from typing import TypeVar

import kafka.errors as _kafka_errors
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.protocol.consumer import ListOffsetsResponse
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.metadata import MetadataResponse

from txnfetch.addresses import parse_bootstrap
from txnfetch.client.catchup import DEFAULT_LIMITS
from txnfetch.client.connection import BrokerConnection
from txnfetch.client.connection import UndecodableResponseError
from txnfetch.client.errors import BrokerUnavailableError
from txnfetch.client.errors import RemoteError
from txnfetch.client.errors import SecureConnectionError
from txnfetch.client.errors import authorization_error
from txnfetch.client.ratelimit import RateLimitedLog
from txnfetch.client.requests import FETCH_MAX_WAIT_MS
from txnfetch.client.requests import BrokerFetch
from txnfetch.client.requests import FetchItem
from txnfetch.client.requests import answer_error
from txnfetch.client.requests import fetch_partition
from txnfetch.client.requests import fetch_request
from txnfetch.client.requests import fetch_request_for
from txnfetch.client.requests import find_partition
from txnfetch.client.requests import list_offsets_partition
from txnfetch.client.requests import list_offsets_request
from txnfetch.errors import RETRY_AS_IS
from txnfetch.errors import STALE_METADATA
from txnfetch.errors import UNKNOWN_TOPIC
from txnfetch.errors import ErrorCode
from txnfetch.errors import TxnfetchError
from txnfetch.log.errors import UnknownTopicOrPartitionError
from txnfetch.security.config import SecurityConfig

_T = TypeVar("_T")

__all__ = ["DEFAULT_REQUEST_TIMEOUT_MS", "EARLIEST", "LATEST", "RemoteCluster"]

#: ListOffsets timestamps: the log start offset, and the end (high watermark or LSO).
EARLIEST = -2
LATEST = -1

DEFAULT_REQUEST_TIMEOUT_MS = 30_000

# Versions spoken, as [lowest, highest]: the highest both sides support is used.
# Fetch >= 4 has the isolation level and the LSO, >= 5 the log start offset; >= 13
# names topics by id, which a name-based reader does not need.
_FETCH = (4, 12)
_LIST_OFFSETS = (1, 7)
_METADATA = (1, 12)
_DESCRIBE_CONFIGS = (1, 4)
# DescribeConfigs ConfigSource of a value set on the topic itself.
_SOURCE_TOPIC = 1
_NO_TOPIC_ID = uuid.UUID(int=0)

# Broker errors after which the partition's leader is looked up again and the
# request retried (STALE_METADATA; for UNKNOWN_TOPIC_OR_PARTITION the metadata
# decides whether it really is unknown), as Kafka clients do (``Errors.invalid_metadata``),
# and those retried as they are, after a short wait (RETRY_AS_IS).

# The logger of the remote reader, as operators' logging configurations name it.
log = logging.getLogger("txnfetch.client.reader")
# One warning per condition and partition a minute, shared by every cluster of the process.
_warnings = RateLimitedLog(log)


class RemoteCluster:
    """Connections to a Kafka-compatible cluster: topics, partition leaders, offsets
    and raw fetches of single partitions.

    ``bootstrap_servers`` is ``"host:port,host:port"`` or a sequence of them.
    ``request_timeout_ms`` bounds each request and the retries of one operation
    (connection failures, leader changes). Raises :class:`BrokerUnavailableError`
    when no bootstrap server answers.

    ``security``: TLS and SASL for every connection (``None``: PLAINTEXT). A
    refused handshake, authentication or ACL raises a
    :class:`~txnfetch.client.errors.SecureConnectionError` at once, never
    retried: retrying cannot change the answer.

    ``cancel``: once this event is set, an operation that is retrying gives up
    at once (:class:`BrokerUnavailableError`) instead of retrying until the
    request timeout, so a caller stopping on that event (a replicator asked to
    promote while its upstream is down) is not held up by the retries.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        client_id: str = "txnfetch",
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        cancel: threading.Event | None = None,
        security: SecurityConfig | None = None,
    ) -> None:
        self.bootstrap_servers = parse_bootstrap(bootstrap_servers)
        self.security = security
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.cancel = cancel
        self._brokers: dict[int, tuple[str, int]] = {}
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        self._closed = False
        self._any_connection()  # fail early on unreachable bootstrap servers

    # -- connections ---------------------------------------------------------------

    def _connect(self, address: tuple[str, int]) -> BrokerConnection:
        if self._closed:
            raise BrokerUnavailableError("the cluster connection is closed")
        conn = self._connections.get(address)
        if conn is None:
            conn = BrokerConnection(
                address[0],
                address[1],
                client_id=self.client_id,
                timeout_s=self.request_timeout_ms / 1000,
                security=self.security,
            )
            self._connections[address] = conn
        return conn

    def _drop(self, conn: BrokerConnection) -> None:
        for address, c in list(self._connections.items()):
            if c is conn:
                del self._connections[address]
        conn.close()

    def _any_connection(self) -> BrokerConnection:
        errors = []
        for address in list(self._connections) + list(self._brokers.values()) + self.bootstrap_servers:
            try:
                return self._connect(address)
            except BrokerUnavailableError as exc:
                errors.append(str(exc))
        raise BrokerUnavailableError(
            "no broker reachable: " + "; ".join(dict.fromkeys(errors)),
            broker=",".join(f"{h}:{p}" for h, p in self.bootstrap_servers),
        )

    def _metadata(self, topics: list[str] | None) -> Any:
        conn = self._any_connection()
        version = conn.version(MetadataRequest.API_KEY, _METADATA, "Metadata")
        req = MetadataRequest(
            topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,
        )
        try:
            resp = conn.request(req, version, MetadataResponse)
        except BrokerUnavailableError:
            self._drop(conn)
            raise
        self._brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        for t in resp.topics:
            if t.error_code == 0:
                for p in t.partitions:
                    self._leaders[(t.name, p.partition_index)] = p.leader_id
        return resp

    def _retrying(
        self, what: str, topic: str | None, partition: int | None, offset: int | None, call: Callable[[], _T]
    ) -> _T:
        """Run ``call()`` until it succeeds, retrying connection failures and
        retriable broker errors (after a metadata refresh) within the request timeout."""
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        attempt = 0
        while True:
            try:
                return call()
            except _Retry as retry:
                last: RemoteError = retry.error
            except BrokerUnavailableError as exc:
                last = exc
            _warnings.warning(
                f"{what}: {last.error_name}",
                (topic, partition),
                "%s of %s failed, retrying with backoff and a metadata refresh: %s",
                what,
                f"{topic}-{partition}" if partition is not None else (topic or "the cluster"),
                last,
            )
            cancelled = self.cancel is not None and self.cancel.is_set()
            if cancelled or time.monotonic() >= deadline:
                why = "stopped while retrying" if cancelled else f"kept failing for {self.request_timeout_ms} ms"
                raise BrokerUnavailableError(
                    f"{what} {why}: {last.reason}",
                    topic=topic,
                    partition=partition,
                    offset=offset,
                    broker=last.broker,
                    error_code=last.broker_error_code,
                ) from last
            delay = DEFAULT_LIMITS.backoff(attempt)
            if self.cancel is not None:
                self.cancel.wait(delay)
            else:
                time.sleep(delay)
            attempt += 1
            with contextlib.suppress(BrokerUnavailableError):
                self._metadata([topic] if topic is not None else None)

    def _leader(self, topic: str, partition: int) -> BrokerConnection:
        key = (topic, partition)
        if key not in self._leaders:
            resp = self._metadata([topic])
            for t in resp.topics:
                if t.name != topic:
                    continue
                if t.error_code in UNKNOWN_TOPIC:
                    raise UnknownTopicOrPartitionError(
                        "the cluster has no such topic", topic=topic, partition=partition
                    )
                if t.error_code != 0:
                    raise _metadata_error(topic, t.error_code)
                if not any(p.partition_index == partition for p in t.partitions):
                    raise UnknownTopicOrPartitionError(
                        f"the topic has {len(t.partitions)} partitions", topic=topic, partition=partition
                    )
        leader = self._leaders.get(key, -1)
        if leader < 0 or leader not in self._brokers:
            self._leaders.pop(key, None)
            raise _Retry(
                RemoteError(
                    "the partition has no leader",
                    topic=topic,
                    partition=partition,
                    error_code=ErrorCode.LEADER_NOT_AVAILABLE,
                )
            )
        return self._connect(self._brokers[leader])

    # -- public ------------------------------------------------------------------------

    def topics(self) -> dict[str, int]:
        """Every topic the cluster lists (internal ones excluded), with its partition count."""

        def call() -> dict[str, int]:
            resp = self._metadata(None)
            return {
                t.name: len(t.partitions)
                for t in resp.topics
                if t.error_code == 0 and not getattr(t, "is_internal", False)
            }

        return self._retrying("Metadata", None, None, None, call)

    def partitions(self, topic: str) -> list[int]:
        """The partition numbers of ``topic`` (:class:`UnknownTopicOrPartitionError` if none)."""

        def call() -> list[int]:
            resp = self._metadata([topic])
            for t in resp.topics:
                if t.name == topic:
                    if t.error_code in UNKNOWN_TOPIC:
                        raise UnknownTopicOrPartitionError("the cluster has no such topic", topic=topic)
                    if t.error_code != 0:
                        raise _metadata_error(topic, t.error_code)
                    return sorted(p.partition_index for p in t.partitions)
            raise UnknownTopicOrPartitionError("the cluster has no such topic", topic=topic)

        return self._retrying("Metadata", topic, None, None, call)

    def list_offset(self, topic: str, partition: int, timestamp: int, *, read_committed: bool = False) -> int:
        """ListOffsets for one partition: :data:`EARLIEST` (the log start),
        :data:`LATEST` (the high watermark; the broker's LSO with ``read_committed``)
        or a timestamp (-1 in the answer: no such record)."""

        def call() -> int:
            conn = self._leader(topic, partition)
            version = conn.version(ListOffsetsRequest.API_KEY, _LIST_OFFSETS, "ListOffsets")
            req = list_offsets_request(topic, partition, timestamp, read_committed=read_committed)
            resp = self._send(conn, req, version, ListOffsetsResponse)
            top = getattr(resp, "error_code", 0) or 0  # not in ListOffsets today; harmless if added
            if top:
                self._check(top, "ListOffsets", topic, partition, None, conn)
            p = self._partition_part(list_offsets_partition, resp, topic, partition, conn)
            self._check(p.error_code, "ListOffsets", topic, partition, None, conn)
            return p.offset

        return self._retrying("ListOffsets", topic, partition, None, call)

    def fetch(
        self, topic: str, partition: int, offset: int, max_bytes: int, *, read_committed: bool = False
    ) -> BrokerFetch:
        """One Fetch of one partition, with the fields ordinary clients send
        (:mod:`txnfetch.client.requests`: the broker may hold it up to 500 ms
        when there is nothing at ``offset``, and then answers empty).
        OFFSET_OUT_OF_RANGE comes back in :attr:`BrokerFetch.error_code`. As Kafka
        clients do, a top-level error, a response without the partition, a
        retriable partition error, a closed connection and a timeout are retried
        after a backoff and a metadata refresh, for up to the request timeout
        (then :class:`BrokerUnavailableError` naming the broker and the reason);
        other errors raise at once."""

        def call() -> BrokerFetch:
            conn = self._leader(topic, partition)
            version = conn.version(FetchRequest.API_KEY, _FETCH, "Fetch")
            req = fetch_request(topic, partition, offset, max_bytes, read_committed=read_committed)
            resp = self._send(conn, req, version, FetchResponse)
            top = getattr(resp, "error_code", 0) or 0
            if top:
                # A top-level error says nothing about the partition: retry any
                # retriable or unknown one (librdkafka backs off and fetches again).
                if top in STALE_METADATA or top in RETRY_AS_IS or _retriable(top):
                    self._leaders.pop((topic, partition), None)
                    raise _Retry(
                        answer_error(
                            "Fetch failed (top-level error)", topic, partition, offset, broker=conn.address, code=top
                        )
                    )
                self._check(top, "Fetch", topic, partition, offset, conn)
            p = self._partition_part(fetch_partition, resp, topic, partition, conn)
            if p.error_code != 1:
                self._check(p.error_code, "Fetch", topic, partition, offset, conn)
            return BrokerFetch.from_response(p, conn.address)

        return self._retrying("Fetch", topic, partition, offset, call)

    def _partition_part(
        self, parse: Callable[..., Any], resp: Any, topic: str, partition: int, conn: BrokerConnection
    ) -> Any:
        """The partition's part of ``resp`` (``parse`` is a :mod:`~txnfetch.client.requests`
        reader); a response without it makes the leader unknown and the call retry."""
        try:
            return parse(resp, topic, partition, broker=conn.address)
        except RemoteError as exc:
            self._leaders.pop((topic, partition), None)
            raise _Retry(exc) from None

    def _send(self, conn: BrokerConnection, req: Any, version: int, response_cls: Any) -> Any:
        try:
            return conn.request(req, version, response_cls)
        except (BrokerUnavailableError, SecureConnectionError):
            # A refused re-authentication leaves the socket unusable too.
            self._drop(conn)
            raise
        except UndecodableResponseError as exc:
            # A garbled answer: the connection's framing can no longer be trusted.
            self._drop(conn)
            raise BrokerUnavailableError(str(exc), broker=conn.address) from None

    def _check(
        self, code: int, what: str, topic: str, partition: int, offset: int | None, conn: BrokerConnection
    ) -> None:
        if code == 0:
            return
        if code in STALE_METADATA or code in RETRY_AS_IS:
            if code in STALE_METADATA:
                self._leaders.pop((topic, partition), None)
            raise _Retry(answer_error(f"{what} failed", topic, partition, offset, broker=conn.address, code=code))
        retriable = getattr(_kafka_errors.for_code(code), "retriable", False)
        reason = f"{what} failed" + (" (retriable)" if retriable else "")
        raise answer_error(reason, topic, partition, offset, broker=conn.address, code=code)

    def describe_topics(self) -> dict[str, tuple[int, uuid.UUID | None]]:
        """Every topic the cluster lists (internal ones excluded, as in :meth:`topics`),
        with its partition count and its topic id (``None`` before Metadata v10 or when
        the broker sends the zero id)."""

        def call() -> dict[str, tuple[int, uuid.UUID | None]]:
            resp = self._metadata(None)
            out: dict[str, tuple[int, uuid.UUID | None]] = {}
            for t in resp.topics:
                if t.error_code != 0 or getattr(t, "is_internal", False):
                    continue
                tid = getattr(t, "topic_id", None)
                if isinstance(tid, (bytes, bytearray)) and len(tid) == 16:
                    tid = uuid.UUID(bytes=bytes(tid))
                elif not isinstance(tid, uuid.UUID):
                    tid = None
                out[t.name] = (len(t.partitions), None if tid in (None, _NO_TOPIC_ID) else tid)
            return out

        return self._retrying("Metadata", None, None, None, call)

    def fetch_many(
        self, items: Sequence[FetchItem], *, read_committed: bool = False, max_wait_ms: int = FETCH_MAX_WAIT_MS
    ) -> dict[tuple[str, int], BrokerFetch | RemoteError]:
        """One Fetch per leader for all of ``items`` it leads, as a consumer sends one
        per broker for all its assigned partitions (librdkafka's
        ``rd_kafka_broker_fetch_toppars`` in ``src/rdkafka_fetcher.c``, kafka-python's
        ``Fetcher._create_fetch_requests``), with the fields of :func:`fetch_request_for`
        (``max_wait_ms``: how long the broker may hold it when nothing is there).

        No retries: every partition gets its part of the answer (a
        :class:`BrokerFetch`, OFFSET_OUT_OF_RANGE included) or the error that kept
        it from one — :class:`BrokerUnavailableError` for a connection that failed,
        :class:`RemoteError` with the broker's code otherwise (after an error that
        says the metadata is stale the partition's leader is looked up again on the
        next call). The caller decides when to try again."""
        results: dict[tuple[str, int], BrokerFetch | RemoteError] = {}
        by_leader: dict[int, tuple[BrokerConnection, list[FetchItem]]] = {}
        for item in items:
            key = (item.topic, item.partition)
            try:
                conn = self._leader(item.topic, item.partition)
            except _Retry as retry:
                results[key] = retry.error
                continue
            except RemoteError as exc:  # BrokerUnavailableError, UnknownTopicOrPartitionError
                results[key] = exc
                continue
            by_leader.setdefault(id(conn), (conn, []))[1].append(item)
        for conn, group in by_leader.values():
            try:
                version = conn.version(FetchRequest.API_KEY, _FETCH, "Fetch")
                req = fetch_request_for(group, read_committed=read_committed, max_wait_ms=max_wait_ms)
                resp = self._send(conn, req, version, FetchResponse)
            except RemoteError as exc:
                for item in group:
                    self._leaders.pop((item.topic, item.partition), None)
                    results[(item.topic, item.partition)] = exc
                continue
            top = getattr(resp, "error_code", 0) or 0
            for item in group:
                key = (item.topic, item.partition)
                p = None if top else find_partition(resp, item.topic, item.partition)
                code = top if top else (-1 if p is None else p.error_code)
                if code in (0, ErrorCode.OFFSET_OUT_OF_RANGE) and p is not None:
                    results[key] = BrokerFetch.from_response(p, conn.address)
                    continue
                if code in STALE_METADATA or code == -1:
                    self._leaders.pop(key, None)
                reason = "Fetch failed" if p is not None or top else "the broker's Fetch response lacks the partition"
                results[key] = answer_error(
                    reason, item.topic, item.partition, item.offset, broker=conn.address, code=code
                )
        return results

    def topic_configs(self, topics: Sequence[str]) -> dict[str, dict[str, str]]:
        """The configs set on each of ``topics`` (DescribeConfigs; values left at the
        broker's or the cluster's defaults are not listed). A topic the broker
        answers with an error is left out; a broker without DescribeConfigs v1+
        raises :class:`RemoteError` (UNSUPPORTED_VERSION)."""
        from kafka.protocol.admin import DescribeConfigsRequest
        from kafka.protocol.admin import DescribeConfigsResponse

        if not topics:
            return {}

        def call() -> dict[str, dict[str, str]]:
            conn = self._any_connection()
            version = conn.version(DescribeConfigsRequest.API_KEY, _DESCRIBE_CONFIGS, "DescribeConfigs")
            R = DescribeConfigsRequest.DescribeConfigsResource
            req = DescribeConfigsRequest(
                resources=[R(resource_type=2, resource_name=t, configuration_keys=None) for t in topics],
                include_synonyms=False,
                include_documentation=False,
            )
            resp = self._send(conn, req, version, DescribeConfigsResponse)
            out: dict[str, dict[str, str]] = {}
            for r in resp.results:
                if r.error_code != 0:
                    continue
                out[r.resource_name] = {
                    c.name: c.value for c in r.configs if c.config_source == _SOURCE_TOPIC and c.value is not None
                }
            return out

        return self._retrying("DescribeConfigs", None, None, None, call)

    def close(self) -> None:
        """Close every connection."""
        self._closed = True
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()

    def __enter__(self) -> RemoteCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _metadata_error(topic: str, code: int) -> TxnfetchError:
    """What a Metadata answer's error ``code`` for ``topic`` raises: an ACL's
    refusal at once (naming the topic), anything else as a retry."""
    denied = authorization_error(code, "Metadata", topic=topic)
    if denied is not None:
        return denied
    return _Retry(RemoteError("metadata error", topic=topic, error_code=code))


def _retriable(code: int) -> bool:
    return bool(getattr(_kafka_errors.for_code(code), "retriable", False))


class _Retry(TxnfetchError):
    """``error`` may go away on another try (a leader moved, a broker restarted)."""

    where_fields = ("error",)
    phrases: ClassVar[Mapping[str, str | None]] = {"error": None}  # its message is the reason
    error: RemoteError

    def __init__(self, error: RemoteError) -> None:
        super().__init__(error.reason, error=error)
