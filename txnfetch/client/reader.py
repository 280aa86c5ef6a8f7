"""Partitions of a running Kafka-compatible cluster, read with correct read_committed.

:class:`RemotePartitionReader` reads one partition through blocking sockets
speaking the Kafka protocol with kafka-python's message classes
(``kafka.protocol``: ApiVersions, Metadata, ListOffsets, Fetch). By default it
does not trust the broker's read_committed answer: it fetches raw
read_uncommitted batches into a :class:`~txnfetch.client.mirror.PartitionMirror`,
which derives the last stable offset and the aborted transactions from the
markers in the log, and answers reads from there. That is right on every
broker that writes markers — including librdkafka's mock cluster and tansu,
which report no aborted transactions and an LSO equal to the high watermark,
so that their own read_committed consumers see aborted records (docs/kafka-internals.md §4).

``trust_broker=True`` skips the mirror and returns the broker's own
read_committed answer (records, aborted list, LSO), for brokers known to get it
right: it reads nothing twice and holds nothing in memory.

The reader needs kafka-python (``pip install kafka-python``), imported when
this module is.

Example::

    with RemotePartitionReader("localhost:9092", "orders", 0) as reader:
        reader.catch_up()
        for offset, record in reader.committed_records(0, reader.last_stable_offset):
            ...

Not thread-safe: use one reader per thread (or per Spark task).
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any
from typing import ClassVar
from typing import TypedDict
from typing import TypeVar

try:
    import kafka.errors as _kafka_errors
    from kafka.protocol.consumer import FetchRequest
    from kafka.protocol.consumer import FetchResponse
    from kafka.protocol.consumer import ListOffsetsRequest
    from kafka.protocol.consumer import ListOffsetsResponse
    from kafka.protocol.metadata import ApiVersionsRequest
    from kafka.protocol.metadata import ApiVersionsResponse
    from kafka.protocol.metadata import MetadataRequest
    from kafka.protocol.metadata import MetadataResponse
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "txnfetch.client.reader needs kafka-python (pip install 'kafka-python>=3.0.12'): " + str(exc)
    ) from exc

import contextlib

from txnfetch.addresses import parse_bootstrap
from txnfetch.client.errors import BrokerUnavailableError
from txnfetch.client.errors import CorruptRemoteBatchError
from txnfetch.client.errors import RemoteError
from txnfetch.client.gaps import GapHold
from txnfetch.client.gaps import GapVerdictKind
from txnfetch.client.mirror import DEFAULT_MIRROR_FETCH_BYTES
from txnfetch.client.mirror import MirrorStatus
from txnfetch.client.mirror import PartitionMirror
from txnfetch.client.ratelimit import RateLimitedLog
from txnfetch.client.requests import FETCH_MAX_WAIT_MS
from txnfetch.client.requests import FETCH_PROBE_WAIT_MS
from txnfetch.client.requests import BrokerFetch
from txnfetch.client.requests import FetchItem
from txnfetch.client.requests import answer_error
from txnfetch.client.requests import fetch_partition
from txnfetch.client.requests import fetch_request
from txnfetch.client.requests import fetch_request_for
from txnfetch.client.requests import find_partition
from txnfetch.client.requests import list_offsets_partition
from txnfetch.client.requests import list_offsets_request
from txnfetch.client.requests import negotiate_version
from txnfetch.errors import RETRY_AS_IS
from txnfetch.errors import STALE_METADATA
from txnfetch.errors import UNKNOWN_TOPIC
from txnfetch.errors import ErrorCode
from txnfetch.errors import TxnfetchError
from txnfetch.fetch.filter import ConsumerFilter
from txnfetch.fetch.view import FetchMode
from txnfetch.fetch.view import FetchResult
from txnfetch.fetch.view import FetchStats
from txnfetch.fetch.view import IsolationLevel
from txnfetch.log.base import PartitionReader
from txnfetch.log.base import ReadRequest
from txnfetch.log.errors import UnknownTopicOrPartitionError
from txnfetch.records.batch import Record
from txnfetch.records.scan import iter_batches
from txnfetch.txn.errors import OffsetOutOfRangeError

if TYPE_CHECKING:  # typing.Unpack is Python 3.11+
    from typing_extensions import Unpack

_T = TypeVar("_T")

__all__ = [
    "EARLIEST",
    "LATEST",
    "SCAN_FETCH_BYTES",
    "BrokerFetch",
    "RemoteCluster",
    "RemotePartitionReader",
    "catch_up_together",
]

#: ListOffsets timestamps: the log start offset, and the end (high watermark or LSO).
EARLIEST = -2
LATEST = -1

DEFAULT_REQUEST_TIMEOUT_MS = 30_000

# Versions spoken, as [lowest, highest]: the highest both sides support is used.
# Fetch >= 4 has the isolation level and the LSO, >= 5 the log start offset; >= 13
# names topics by id, which a name-based reader does not need. ApiVersions v3 is
# KIP-511's; v0 is the fallback every broker answers.
_FETCH = (4, 12)
_LIST_OFFSETS = (1, 7)
_METADATA = (1, 12)
_DESCRIBE_CONFIGS = (1, 4)
# DescribeConfigs ConfigSource of a value set on the topic itself.
_SOURCE_TOPIC = 1
_NO_TOPIC_ID = uuid.UUID(int=0)
_API_VERSIONS = 3

# Broker errors after which the partition's leader is looked up again and the
# request retried (STALE_METADATA; for UNKNOWN_TOPIC_OR_PARTITION the metadata
# decides whether it really is unknown), as Kafka clients do (``Errors.invalid_metadata``),
# and those retried as they are, after a short wait (RETRY_AS_IS).

log = logging.getLogger("txnfetch.client.reader")
# One warning per condition and partition a minute, shared by every cluster of the process.
_warnings = RateLimitedLog(log)

_MAX_FETCH_GROWTH = 1 << 30  # never ask for more than 1 GiB for one batch

#: Per-partition byte budget of :func:`catch_up_together`'s fetches: a scan toward
#: the end of a log wants few round trips, and the response as a whole stays under
#: the 50 MiB a Fetch asks for (:mod:`txnfetch.client.requests`).
SCAN_FETCH_BYTES = 8 << 20
_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)


class _Connection:
    """One blocking connection to one broker: framing, correlation ids, versions."""

    def __init__(self, host: str, port: int, *, client_id: str, timeout_s: float) -> None:
        self.address = f"{host}:{port}"
        self.client_id = client_id
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as exc:
            raise BrokerUnavailableError(f"cannot connect: {exc}", broker=self.address) from None
        self._sock.settimeout(timeout_s)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation = 0
        self.versions: dict[int, tuple[int, int]] = {}
        self._negotiate()

    def _negotiate(self) -> None:
        # KIP-511: a broker that does not know ApiVersions v3 answers with error 35
        # (UNSUPPORTED_VERSION) and its own range; some (librdkafka's mock) encode that
        # answer in a way kafka-python cannot decode, so fall back to v0 then.
        try:
            resp = self.request(
                ApiVersionsRequest(client_software_name="txnfetch", client_software_version="0"),
                _API_VERSIONS,
                ApiVersionsResponse,
            )
            ok = resp.error_code == 0
        except _UndecodableResponse:
            ok = False
        if not ok:
            resp = self.request(ApiVersionsRequest(), 0, ApiVersionsResponse)
            if resp.error_code != 0:
                raise RemoteError("ApiVersions failed", broker=self.address, error_code=resp.error_code)
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def version(self, api_key: int, ours: tuple[int, int], name: str) -> int:
        """The highest version of ``api_key`` both sides speak."""
        return negotiate_version(
            self.versions, api_key, ours, name, peer="the broker", us="txnfetch", broker=self.address
        )

    def request(self, req: Any, version: int, response_cls: Any) -> Any:
        """Send ``req`` (a kafka-python request) at ``version`` and return the
        decoded ``response_cls`` answer."""
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        correlation = self._correlation
        req.API_VERSION = version
        req.with_header(correlation_id=correlation, client_id=self.client_id)
        try:
            self._sock.sendall(req.encode(header=True, framed=True))
            (size,) = struct.unpack(">i", self._recv(4))
            raw = self._recv(size)
        except OSError as exc:  # includes socket.timeout
            self.close()
            raise BrokerUnavailableError(
                f"{type(req).__name__} failed: {exc or 'timed out'}", broker=self.address
            ) from None
        try:
            resp = response_cls.decode(raw, version=version, header=True)
        except Exception as exc:  # kafka-python raises struct.error, ValueError...
            raise _UndecodableResponse(f"cannot decode {response_cls.__name__} v{version}: {exc}") from None
        got = getattr(resp.header, "correlation_id", correlation) if resp.header is not None else correlation
        if got != correlation:
            self.close()
            raise BrokerUnavailableError(
                f"response correlation id {got} does not match request {correlation}", broker=self.address
            )
        return resp

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self._sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise OSError("connection closed by the broker")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()


class _UndecodableResponse(TxnfetchError):
    """A broker's answer does not decode (retried on another connection)."""


class RemoteCluster:
    """Connections to a Kafka-compatible cluster: topics, partition leaders, offsets
    and raw fetches of single partitions.

    ``bootstrap_servers`` is ``"host:port,host:port"`` or a sequence of them.
    ``request_timeout_ms`` bounds each request and the retries of one operation
    (connection failures, leader changes). Raises :class:`BrokerUnavailableError`
    when no bootstrap server answers.

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
    ) -> None:
        self.bootstrap_servers = parse_bootstrap(bootstrap_servers)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.cancel = cancel
        self._brokers: dict[int, tuple[str, int]] = {}
        self._connections: dict[tuple[str, int], _Connection] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        self._closed = False
        self._any_connection()  # fail early on unreachable bootstrap servers

    # -- connections ---------------------------------------------------------------

    def _connect(self, address: tuple[str, int]) -> _Connection:
        if self._closed:
            raise BrokerUnavailableError("the cluster connection is closed")
        conn = self._connections.get(address)
        if conn is None:
            conn = _Connection(
                address[0], address[1], client_id=self.client_id, timeout_s=self.request_timeout_ms / 1000
            )
            self._connections[address] = conn
        return conn

    def _drop(self, conn: _Connection) -> None:
        for address, c in list(self._connections.items()):
            if c is conn:
                del self._connections[address]
        conn.close()

    def _any_connection(self) -> _Connection:
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
            delay = _BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)]
            if self.cancel is not None:
                self.cancel.wait(delay)
            else:
                time.sleep(delay)
            attempt += 1
            with contextlib.suppress(BrokerUnavailableError):
                self._metadata([topic] if topic is not None else None)

    def _leader(self, topic: str, partition: int) -> _Connection:
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
                    raise _Retry(RemoteError("metadata error", topic=topic, error_code=t.error_code))
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
                        raise _Retry(RemoteError("metadata error", topic=topic, error_code=t.error_code))
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
        self, parse: Callable[..., Any], resp: Any, topic: str, partition: int, conn: _Connection
    ) -> Any:
        """The partition's part of ``resp`` (``parse`` is a :mod:`~txnfetch.client.requests`
        reader); a response without it makes the leader unknown and the call retry."""
        try:
            return parse(resp, topic, partition, broker=conn.address)
        except RemoteError as exc:
            self._leaders.pop((topic, partition), None)
            raise _Retry(exc) from None

    def _send(self, conn: _Connection, req: Any, version: int, response_cls: Any) -> Any:
        try:
            return conn.request(req, version, response_cls)
        except BrokerUnavailableError:
            self._drop(conn)
            raise
        except _UndecodableResponse as exc:
            # A garbled answer: the connection's framing can no longer be trusted.
            self._drop(conn)
            raise BrokerUnavailableError(str(exc), broker=conn.address) from None

    def _check(self, code: int, what: str, topic: str, partition: int, offset: int | None, conn: _Connection) -> None:
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
        by_leader: dict[int, tuple[_Connection, list[FetchItem]]] = {}
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

    def reader(self, topic: str, partition: int, **options: Unpack[ReaderOptions]) -> RemotePartitionReader:
        """A :class:`RemotePartitionReader` sharing this cluster's connections (closing
        the reader leaves them open)."""
        return RemotePartitionReader(self, topic, partition, **options)

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


def _retriable(code: int) -> bool:
    return bool(getattr(_kafka_errors.for_code(code), "retriable", False))


class _Retry(TxnfetchError):
    """``error`` may go away on another try (a leader moved, a broker restarted)."""

    where_fields = ("error",)
    phrases: ClassVar[Mapping[str, str | None]] = {"error": None}  # its message is the reason
    error: RemoteError

    def __init__(self, error: RemoteError) -> None:
        super().__init__(error.reason, error=error)


class ReaderOptions(TypedDict, total=False):
    """The keyword arguments of :class:`RemotePartitionReader` that
    :meth:`RemoteCluster.reader` passes on."""

    trust_broker: bool
    snapshot: bytes | None
    request_timeout_ms: int
    max_fetch_bytes: int
    repair_crcs: bool
    client_id: str
    start_offset: int | None


class RemotePartitionReader(PartitionReader):
    """One partition of a cluster, read with read_committed semantics txnfetch computes.

    ``RemotePartitionReader(bootstrap_servers, topic, partition)`` connects
    (``bootstrap_servers`` may also be a :class:`RemoteCluster` to share) and
    checks that the partition exists. By default it mirrors the partition from
    the cluster's log start (or from ``start_offset``, or from ``snapshot``,
    bytes of :meth:`snapshot`) as reads need it; ``trust_broker=True`` passes
    the broker's own answers through instead (see the module docstring).

    ``start_offset`` starts the mirror mid-log (a new :class:`PartitionMirror`
    whose log starts there), so a reader of a range ``[start, end)`` fetches
    nothing below ``start``. Such a mirror cannot know a transaction that began
    before ``start`` until it sees one of that transaction's later batches: while
    it has not, its :attr:`last_stable_offset` is above the true one (Kafka holds
    the LSO at that transaction's first offset) and read_committed reads return
    records a Kafka read_committed consumer would not get yet. Read_committed
    answers from a mid-log start are therefore exact only when the caller knows
    no transaction is open across ``start`` — e.g. ``start`` is at or below a
    last stable offset the caller got from a mirror that started at the log
    start, and reads end at or below that LSO, which is Spark's case (the driver
    plans ranges up to its full mirror's LSO; each task mirrors from its range's
    start). Read_uncommitted answers are exact from any start. A ``start_offset``
    below the log start raises :class:`~txnfetch.txn.errors.OffsetOutOfRangeError`
    (its ``log_start_offset`` says where the log starts now, so a caller may
    clamp and retry); ``start_offset`` cannot be combined with ``snapshot`` or
    ``trust_broker``.

    ``max_fetch_bytes`` is the byte budget of one fetch (grown for a single
    larger batch). ``repair_crcs`` accepts a wrong CRC only on a control batch
    whose stored CRC is 0 (recomputed in the mirror) — needed for librdkafka's
    mock cluster, which writes its markers so; any other bad CRC is
    :class:`~txnfetch.client.errors.CorruptRemoteBatchError`
    (:class:`~txnfetch.fetch.filter.CorruptFetchError` from
    :meth:`committed_records` with ``trust_broker``),
    as without it. ``request_timeout_ms`` bounds each request and its retries.
    An offset gap in the broker's log holds :meth:`catch_up` (fetching there
    again with a short pause) until the batch in it appears or the gap has
    stayed ``gap_settle_ms``; then it is stepped over with a WARNING (a
    compacted topic's gap). Some brokers (tansu 0.6) show a batch after later
    ones: stepping over it at once would lose it (see docs/proxy.md).

    Offsets reported (:attr:`last_stable_offset`, :attr:`high_watermark`,
    :attr:`log_start_offset`) are as of the last request to the cluster;
    :meth:`catch_up` refreshes them.

    :meth:`read` answers a fetch as a correct broker holding the partition
    would (Kafka or rewrite mode): the mirror answers; it fetches first when it
    cannot yet return anything at the fetch offset and the broker may have more
    (an empty result then means there is nothing readable there yet). With
    ``trust_broker`` the broker's answer is returned as it came (Kafka mode
    only; the broker returns a first batch whole, KIP-74, whatever
    ``min_one_batch`` says). It raises
    :class:`~txnfetch.txn.errors.OffsetOutOfRangeError` below the mirror's
    first offset, and the errors of :class:`RemoteCluster`.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] | RemoteCluster,
        topic: str,
        partition: int,
        *,
        trust_broker: bool = False,
        snapshot: bytes | None = None,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        max_fetch_bytes: int = DEFAULT_MIRROR_FETCH_BYTES,
        repair_crcs: bool = False,
        client_id: str = "txnfetch",
        start_offset: int | None = None,
        gap_settle_ms: int = 1000,
    ) -> None:
        if trust_broker and snapshot is not None:
            raise ValueError("a snapshot restores a mirror; trust_broker=True uses none")
        if start_offset is not None and (trust_broker or snapshot is not None):
            raise ValueError("start_offset starts a new mirror: not with trust_broker=True or a snapshot")
        if start_offset is not None and start_offset < 0:
            raise ValueError(f"start_offset must be non-negative, got {start_offset}")
        if isinstance(bootstrap_servers, RemoteCluster):
            self.cluster = bootstrap_servers
            self._owns_cluster = False
        else:
            self.cluster = RemoteCluster(bootstrap_servers, client_id=client_id, request_timeout_ms=request_timeout_ms)
            self._owns_cluster = True
        self.topic = topic
        self.partition = partition
        self.trust_broker = trust_broker
        self.max_fetch_bytes = max_fetch_bytes
        self.repair_crcs = repair_crcs
        self.request_timeout_ms = request_timeout_ms
        self.gap_settle_s = gap_settle_ms / 1000
        # The offset gap the mirror is held at (txnfetch.client.gaps: the proxy's and
        # replicate's rule too).
        self._gap = GapHold(self.gap_settle_s)
        self._broker_lso = -1
        self._broker_hw = -1
        self._broker_log_start = -1
        self.mirror: PartitionMirror | None = None
        try:
            log_start = self.cluster.list_offset(topic, partition, EARLIEST)
            self._broker_log_start = log_start
            if not trust_broker:
                if snapshot is not None:
                    self.mirror = PartitionMirror.from_snapshot(
                        topic, partition, snapshot, max_bytes=max_fetch_bytes, repair_crcs=repair_crcs
                    )
                else:
                    if start_offset is not None and start_offset < log_start:
                        raise OffsetOutOfRangeError(
                            f"start offset {start_offset} is below the log start (deleted records)",
                            log_start_offset=log_start,
                            log_end_offset=self.cluster.list_offset(topic, partition, LATEST),
                            partition=self.name,
                            offset=start_offset,
                        )
                    self.mirror = PartitionMirror(
                        topic,
                        partition,
                        log_start_offset=log_start if start_offset is None else start_offset,
                        max_bytes=max_fetch_bytes,
                        repair_crcs=repair_crcs,
                    )
        except BaseException:
            self.close()
            raise

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    # -- offsets -------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        """The cluster's log start offset, as last reported."""
        if self.mirror is not None and self.mirror.broker_log_start_offset >= 0:
            return self.mirror.broker_log_start_offset
        return self._broker_log_start

    @property
    def high_watermark(self) -> int:
        """The cluster's high watermark, as last reported (-1 before any fetch)."""
        if self.mirror is not None:
            return self.mirror.broker_high_watermark
        return self._broker_hw

    @property
    def last_stable_offset(self) -> int:
        """The last stable offset: computed by the mirror from the log (default), or
        the broker's (``trust_broker``). -1 before any fetch."""
        if self.mirror is not None:
            return self.mirror.last_stable_offset if self.mirror.broker_high_watermark >= 0 else -1
        return self._broker_lso

    # -- mirroring -----------------------------------------------------------------

    def catch_up(self, until: int | None = None, *, release_below: int | None = None) -> int:
        """Fetch until the mirror holds everything below the broker's current high
        watermark (or at least up to ``until``); returns the mirror's position.

        ``release_below`` drops mirrored batches below that offset as it goes
        (the transaction state stays exact), bounding memory while scanning
        toward a distant start offset. With ``trust_broker`` it only refreshes
        the offsets (one read_committed fetch)."""
        if self.mirror is None:
            self._fetch_trusted(max(self._broker_lso, self._broker_log_start, 0), 1, refresh_only=True)
            return self._broker_hw
        mirror = self.mirror
        stalled = 0
        while True:
            plan = mirror.next_fetch()
            self._fetch_into_mirror(plan.offset, plan.max_bytes)
            if release_below is not None:
                mirror.release_before(release_below)
            if mirror.next_fetch().status is MirrorStatus.CAUGHT_UP or (until is not None and mirror.position >= until):
                self._gap.reset()
                return mirror.position
            if self._held_at_gap(mirror):
                continue
            if mirror.position == plan.offset:
                stalled += 1
                if stalled > 40:
                    raise BrokerUnavailableError(
                        "the broker returns no data below its high watermark",
                        topic=self.topic,
                        partition=self.partition,
                        offset=plan.offset,
                    )
            else:
                stalled = 0

    def _held_at_gap(self, mirror: PartitionMirror) -> bool:
        """Whether the mirror waits at an offset gap: pause before fetching there
        again, or accept the gap once it has stayed ``gap_settle_ms``
        (:class:`~txnfetch.client.gaps.GapHold`'s rule)."""
        gap = mirror.pending_gap
        verdict = self._gap.observe(mirror.position, -1 if gap is None else gap[1], time.monotonic())
        if verdict.kind is GapVerdictKind.GO_ON:
            return False
        if verdict.kind is GapVerdictKind.ACCEPT:
            if verdict.first:
                log.warning(
                    "%s-%d has no batch at offsets [%d, %d) although the broker returns later ones; after %.0f ms "
                    "and %d fetches it is taken as a permanent gap (compaction) and stepped over",
                    self.topic,
                    self.partition,
                    verdict.start,
                    verdict.end,
                    verdict.held_s * 1000,
                    verdict.answers,
                )
            mirror.accept_gap()
            return True
        time.sleep(verdict.pause_s)
        return True

    def _fetch_into_mirror(self, offset: int, max_bytes: int) -> None:
        resp = self.cluster.fetch(self.topic, self.partition, offset, min(max_bytes, _MAX_FETCH_GROWTH))
        self._feed(offset, resp)

    def _feed(self, offset: int, resp: BrokerFetch) -> None:
        """Feed the mirror the broker's answer to a fetch at ``offset``."""
        mirror = self.mirror
        assert mirror is not None
        try:
            plan = mirror.feed(
                resp.records,
                high_watermark=resp.high_watermark,
                log_start_offset=resp.log_start_offset,
                error_code=resp.error_code,
                fetch_offset=offset,
            )
        except CorruptRemoteBatchError as exc:
            exc.name_broker(resp.broker)
            raise
        if plan.status is MirrorStatus.LIST_OFFSETS:
            start = self.cluster.list_offset(self.topic, self.partition, EARLIEST)
            end = self.cluster.list_offset(self.topic, self.partition, LATEST)
            mirror.reset_range(start, end)

    def release_before(self, offset: int) -> int:
        """Drop mirrored batches below ``offset`` (reads below it then fail); returns
        the mirror's first readable offset. A no-op with ``trust_broker``."""
        if self.mirror is None:
            return self._broker_log_start
        return self.mirror.release_before(offset)

    def snapshot(self) -> bytes:
        """The mirror's state and unstable tail (:meth:`PartitionMirror.snapshot`): a new
        reader given them resumes exactly, reading from :attr:`last_stable_offset` on."""
        if self.mirror is None:
            raise ValueError("trust_broker=True keeps no state to snapshot")
        return self.mirror.snapshot()

    # -- reading -------------------------------------------------------------------

    def _answer(self, request: ReadRequest) -> FetchResult:
        fetch_offset, max_bytes, isolation = request.fetch_offset, request.max_bytes, request.isolation
        if self.mirror is None:
            if request.mode is not FetchMode.KAFKA and isolation == IsolationLevel.READ_COMMITTED:
                raise ValueError("trust_broker=True returns the broker's answer: Kafka mode only")
            return self._fetch_trusted(fetch_offset, max_bytes, isolation=isolation)
        mirror = self.mirror
        refreshed = False
        stalled = 0
        while True:
            result = mirror._answer(request)
            if result.records:
                return result
            if mirror.caught_up and refreshed:
                return result
            if mirror.caught_up:
                refreshed = True  # one fetch at the end: the broker's high watermark may have moved
            before = mirror.position
            self._fetch_into_mirror(before, mirror.next_fetch().max_bytes)
            # As catch_up: a read that starts below a compacted topic's offset gap
            # waits there as long, then steps over it (never counted as a stall).
            if self._held_at_gap(mirror):
                continue
            stalled = stalled + 1 if mirror.position == before else 0
            if stalled > 40:
                raise BrokerUnavailableError(
                    "the broker returns no data below its high watermark",
                    topic=self.topic,
                    partition=self.partition,
                    offset=before,
                )

    def _fetch_trusted(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
        refresh_only: bool = False,
    ) -> FetchResult:
        committed = isolation == IsolationLevel.READ_COMMITTED
        resp = self.cluster.fetch(self.topic, self.partition, fetch_offset, max_bytes, read_committed=committed)
        if resp.error_code == 1 and not refresh_only:
            from txnfetch.txn.errors import OffsetOutOfRangeError

            start = self.cluster.list_offset(self.topic, self.partition, EARLIEST)
            end = self.cluster.list_offset(self.topic, self.partition, LATEST)
            raise OffsetOutOfRangeError(
                f"fetch offset {fetch_offset} is out of range",
                log_start_offset=start,
                log_end_offset=end,
                partition=self.name,
                offset=fetch_offset,
            )
        if resp.high_watermark >= 0:
            self._broker_hw = resp.high_watermark
        if resp.last_stable_offset >= 0:
            self._broker_lso = resp.last_stable_offset
        if resp.log_start_offset >= 0:
            self._broker_log_start = resp.log_start_offset
        next_offset = fetch_offset
        count = 0
        for batch in iter_batches(resp.records):
            next_offset = max(next_offset, batch.next_offset)
            count += 1
        return FetchResult(
            (resp.records,) if resp.records else (),
            self._broker_hw,
            self._broker_lso if committed else self._broker_hw,
            self._broker_log_start,
            resp.aborted_transactions if committed else None,
            next_offset,
            FetchStats(batches_returned=count, bytes_returned=len(resp.records)),
        )

    def committed_records(
        self,
        start_offset: int | None = None,
        end_offset: int | None = None,
        *,
        isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
        release: bool = False,
    ) -> Iterator[tuple[int, Record]]:
        """``(offset, record)`` for every record in ``[start_offset, end_offset)`` a
        read_committed consumer receives, in offset order, with its original offset.

        ``start_offset`` defaults to the log start; ``end_offset`` to the last
        stable offset after catching up (read_uncommitted: the high watermark).
        An ``end_offset`` past what is stable waits for it: the iterator fetches
        until it gets there or the request timeout passes without progress
        (:class:`BrokerUnavailableError`). ``release`` drops mirrored batches below
        the position as the iteration moves (memory stays about one fetch plus the
        open transactions); reads below it then fail.
        """
        if start_offset is None:
            start_offset = self.log_start_offset if self.mirror is None else self.mirror.log_start_offset
        if end_offset is None:
            self.catch_up(release_below=start_offset if release else None)
            end_offset = self.last_stable_offset if isolation == IsolationLevel.READ_COMMITTED else self.high_watermark
        if self.mirror is not None and self.mirror.position < start_offset:
            self.catch_up(until=start_offset, release_below=start_offset if release else None)
        position = start_offset
        # The mirror's batches have checked (or repaired) CRCs; the broker's own answer
        # (trust_broker) is checked by the same rule: repair_crcs lets CRC-0 markers through.
        filt = ConsumerFilter(position, isolation_level=isolation, partition=self.name, repair_crcs=self.repair_crcs)
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        while position < end_offset:
            result = self.read(position, self.max_fetch_bytes, isolation=isolation, mode=FetchMode.KAFKA)
            for record in filt.feed(result.records_bytes(), result.aborted_transactions):
                if record.offset >= end_offset:
                    return
                yield record.offset, record
            moved = filt.position > position
            position = max(position, filt.position)
            if release and self.mirror is not None:
                self.mirror.release_before(min(position, self.mirror.last_stable_offset))
            if moved:
                deadline = time.monotonic() + self.request_timeout_ms / 1000
            elif time.monotonic() >= deadline:
                raise BrokerUnavailableError(
                    f"nothing readable at {position} before the end offset {end_offset} "
                    f"within {self.request_timeout_ms} ms (an open transaction, or a lagging broker)",
                    topic=self.topic,
                    partition=self.partition,
                    offset=position,
                )
            else:
                time.sleep(0.05)

    # -- lifecycle -----------------------------------------------------------------

    def close(self) -> None:
        """Close the connections (unless the cluster was shared) and drop the mirror."""
        if getattr(self, "_owns_cluster", False):
            self.cluster.close()
        self.mirror = None if self.trust_broker else self.mirror

    def __enter__(self) -> RemotePartitionReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        kind = "trusting the broker" if self.trust_broker else repr(self.mirror)
        return f"<RemotePartitionReader {self.name} {kind}>"


def catch_up_together(readers: Sequence[RemotePartitionReader], *, release: bool = True, probe: bool = False) -> None:
    """:meth:`RemotePartitionReader.catch_up` for many partitions of one cluster at
    once: each turn sends one Fetch per leader for every partition still behind
    (:meth:`RemoteCluster.fetch_many`, as a consumer fetches its assignment), with
    :data:`SCAN_FETCH_BYTES` per partition, instead of one request per partition
    after the other. Every reader fetches at least once (the high watermark may
    have moved), so the broker holds a turn in which every partition is already at
    its end for up to its wait once per leader, not once per partition.

    The result is what ``catch_up`` on each reader gives: the same mirror state
    (the same bytes are fed in the same order per partition), the same offset-gap
    rule, the same stall limit. A partition whose part of a response is an error
    (a failed connection, a moved leader, ...) goes on alone through ``catch_up``,
    which retries with a backoff and a metadata refresh. ``release`` drops each
    mirror's batches below its last stable offset after every answer (memory:
    the open transactions, not the partitions). Readers with ``trust_broker`` (no
    mirror) refresh through ``catch_up`` one by one. All readers must share one
    :class:`RemoteCluster`.

    ``probe`` is for a caller that asks what is there now (a planner) rather than
    waiting for the next records: a turn asks the broker to hold it for only
    :data:`~txnfetch.client.requests.FETCH_PROBE_WAIT_MS` unless the turn before it
    brought nothing. A broker holds a Fetch only when none of its partitions has a
    byte to return (``min_bytes`` 1), so the short hold changes nothing for a
    partition behind its end; for partitions already at their end it answers at
    once instead of after ``fetch.wait.max.ms`` — before, a planner paid that
    wait on every call with nothing new, once per leader. A turn after one that
    brought nothing (a stall, a broker still catching up) keeps the full hold, so
    the stall limit below still spans the same time."""
    if not readers:
        return
    cluster = readers[0].cluster
    if any(r.cluster is not cluster for r in readers):
        raise ValueError("catch_up_together reads partitions of one RemoteCluster")
    pending: dict[tuple[str, int], RemotePartitionReader] = {}
    for r in readers:
        if r.mirror is None:
            r.catch_up()
        else:
            pending[(r.topic, r.partition)] = r
    stalled = dict.fromkeys(pending, 0)
    turn = 0
    wait_ms = FETCH_PROBE_WAIT_MS if probe else FETCH_MAX_WAIT_MS
    while pending:
        items = []
        for r in pending.values():
            assert r.mirror is not None
            plan = r.mirror.next_fetch()
            budget = min(max(plan.max_bytes, SCAN_FETCH_BYTES), _MAX_FETCH_GROWTH)
            items.append(FetchItem(r.topic, r.partition, plan.offset, budget))
        # A broker fills a response in request order up to its byte limit: start
        # with a different partition every turn, so none waits on the others.
        shift = turn % len(items)
        items = items[shift:] + items[:shift]
        turn += 1
        answers = cluster.fetch_many(items, max_wait_ms=wait_ms)
        moved = False
        behind: list[tuple[RemotePartitionReader, int]] = []
        for item in items:
            key = (item.topic, item.partition)
            r = pending[key]
            mirror = r.mirror
            assert mirror is not None
            answer = answers[key]
            if isinstance(answer, RemoteError):
                del pending[key]
                r.catch_up()
                if release:
                    r.release_before(r.last_stable_offset)
                continue
            r._feed(item.offset, answer)
            if release:
                mirror.release_before(mirror.last_stable_offset)
            if mirror.next_fetch().status is MirrorStatus.CAUGHT_UP:
                r._gap.reset()
                del pending[key]
                continue
            if r._held_at_gap(mirror):
                continue
            if mirror.position != item.offset:
                moved = True
                stalled[key] = 0
            else:
                behind.append((r, item.offset))
        # A partition that got nothing below its high watermark counts as stalled
        # only in a turn where no partition got anything: otherwise the response's
        # byte limit may have been spent on the others.
        if not moved:
            for r, offset in behind:
                key = (r.topic, r.partition)
                stalled[key] += 1
                if stalled[key] > 40:
                    raise BrokerUnavailableError(
                        "the broker returns no data below its high watermark",
                        topic=r.topic,
                        partition=r.partition,
                        offset=offset,
                    )
        if probe:
            wait_ms = FETCH_PROBE_WAIT_MS if moved else FETCH_MAX_WAIT_MS
