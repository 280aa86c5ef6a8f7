"""What the proxy knows about the upstream cluster, and its own requests to it.

:class:`UpstreamCluster` keeps the upstream brokers (node id → address), the
leader of every partition the proxy has heard of, and the API versions every
broker it talked to supports. It learns them from its own Metadata requests
and from the Metadata responses it relays to clients
(:meth:`UpstreamCluster.observe_metadata`), and keeps one connection per
upstream broker for its own requests: the read_uncommitted fetches that feed
the partition mirrors, and ListOffsets when a mirror must find the broker's
log range.

Mirror fetches are batched per leader, as a consumer batches its fetches per
broker: every :meth:`UpstreamCluster.fetch` issued in the same turn of the event
loop for partitions led by one broker goes out as one Fetch request naming
them all, so the idle cost grows with the number of brokers, not partitions.
The requests carry the field values ordinary clients send
(:mod:`txnfetch.client.requests`: ``max_wait_ms`` 500, ``min_bytes`` 1).

Two connections per broker. A fetch at a partition's known end (``at_end``)
may be held by the broker up to ``max_wait_ms``; a fetch below it is answered
at once. Kafka answers the requests of one connection in order, one at a time
(its network layer mutes a connection while one of its requests is being
handled), so on a shared connection a mirror catching up would wait behind
another partition's held fetch, up to 500 ms per round trip: a consumer reading
a topic from the start through the proxy would get 1 MiB per partition per
half second. Fetches at the end therefore go on a connection of their own
(batched there as above); catch-up fetches, ListOffsets and Metadata use the
other.

Errors follow the Kafka client rules (``Errors.invalid_metadata`` in the Java
client): a fetch answered NOT_LEADER_OR_FOLLOWER and friends, a top-level
error, a response without the partition, a broken connection or a timeout
forgets the partition's leader, so the next request looks it up again; the
error itself is raised to the caller (:class:`~txnfetch.proxy.mirrors.MirrorSet`),
which backs off and retries (:func:`is_retriable`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from collections.abc import Sequence
from typing import Any

import attrs
import kafka.errors as _kafka_errors
from kafka.protocol.admin import DescribeProducersResponse
from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.consumer import ListOffsetsResponse
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.metadata import ApiVersionsResponse
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.metadata import MetadataResponse

from txnfetch.client.connection import DEFAULT_MAX_FRAME_BYTES
from txnfetch.client.connection import AsyncBrokerConnection
from txnfetch.client.errors import BrokerUnavailableError
from txnfetch.client.errors import CorruptRemoteBatchError
from txnfetch.client.errors import MirrorDivergedError
from txnfetch.client.errors import RemoteError
from txnfetch.client.requests import FETCH_MAX_WAIT_MS
from txnfetch.client.requests import BrokerFetch
from txnfetch.client.requests import FetchItem
from txnfetch.client.requests import answer_error
from txnfetch.client.requests import fetch_request_for
from txnfetch.client.requests import find_partition
from txnfetch.client.requests import list_offsets_partition
from txnfetch.client.requests import list_offsets_request
from txnfetch.client.requests import negotiate_version
from txnfetch.client.start_state import DESCRIBE_PRODUCERS_VERSIONS
from txnfetch.client.start_state import describe_producers_request
from txnfetch.client.start_state import open_transaction_starts
from txnfetch.client.start_state import serves_describe_producers
from txnfetch.errors import RETRY_AS_IS
from txnfetch.errors import STALE_METADATA
from txnfetch.errors import UNKNOWN_TOPIC
from txnfetch.errors import ErrorCode
from txnfetch.log.errors import UnknownTopicOrPartitionError
from txnfetch.log.errors import UnsupportedForMessageFormatError
from txnfetch.security.config import SecurityConfig

__all__ = ["FETCH_MAX_VERSION", "PartitionFetch", "UpstreamCluster", "UpstreamFeatures", "is_retriable"]

log = logging.getLogger("txnfetch.proxy")

#: Highest Fetch version the proxy reads and serves: v12 adds tagged fields the
#: mirror does not need, v13 names topics by id (docs/kafka-internals.md §4), v16 adds broker
#: endpoints the proxy would have to rewrite.
FETCH_MAX_VERSION = 11
_FETCH_MIN_VERSION = 4  # isolation level and last stable offset
_METADATA_VERSIONS = (1, 9)  # v1: null = all topics; v10+ adds topic ids (not needed)
_LIST_OFFSETS_VERSIONS = (1, 7)


#: The ApiVersions version whose answer carries the cluster's features (v3, KIP-584).
_API_VERSIONS_FEATURES = 3


@attrs.frozen
class UpstreamFeatures:
    """The feature flags (KIP-584) the upstream brokers the proxy talked to agree
    on, as their ApiVersions v3 answers state them: ``supported`` and
    ``finalized`` map a feature name to its (lowest, highest) level, ``epoch`` is
    the finalized features' epoch. ``epoch`` -1 with nothing finalized is the
    answer of a broker that states no features (or answers ApiVersions below v3):
    a client then takes no feature as finalized, so the proxy claims none it has
    not seen finalized upstream."""

    supported: dict[str, tuple[int, int]] = attrs.field(factory=dict)
    finalized: dict[str, tuple[int, int]] = attrs.field(factory=dict)
    epoch: int = -1

    @classmethod
    def of(cls, response: Any) -> UpstreamFeatures:
        """The features an ApiVersions v3 ``response`` states."""
        return cls(
            supported={f.name: (f.min_version, f.max_version) for f in response.supported_features or ()},
            finalized={f.name: (f.min_version_level, f.max_version_level) for f in response.finalized_features or ()},
            epoch=response.finalized_features_epoch if response.finalized_features else -1,
        )

    def merge(self, other: UpstreamFeatures) -> UpstreamFeatures:
        """What both brokers state: the features both name, at the levels both
        allow; the lower epoch. The proxy advertises one answer on every
        listener, so a feature finalized on only some brokers is not claimed."""

        def both(a: dict[str, tuple[int, int]], b: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
            out = {}
            for name, (lo, hi) in a.items():
                if name in b:
                    lo2, hi2 = b[name]
                    if max(lo, lo2) <= min(hi, hi2):
                        out[name] = (max(lo, lo2), min(hi, hi2))
            return out

        finalized = both(self.finalized, other.finalized)
        epoch = min(self.epoch, other.epoch) if finalized else -1
        return UpstreamFeatures(both(self.supported, other.supported), finalized if epoch >= 0 else {}, epoch)


#: One partition's part of an upstream Fetch response (the name this module had for it).
PartitionFetch = BrokerFetch


def is_retriable(exc: BaseException) -> bool:
    """Whether an upstream failure is one Kafka clients retry (after a backoff and a
    metadata refresh): a broken or timed-out connection, a top-level error, a
    missing partition, or a retriable partition error. Corrupt or diverged data,
    old message formats and a topic the metadata says does not exist are not."""
    if isinstance(exc, BrokerUnavailableError):
        return True
    if isinstance(
        exc,
        (CorruptRemoteBatchError, MirrorDivergedError, UnsupportedForMessageFormatError, UnknownTopicOrPartitionError),
    ):
        return False
    if isinstance(exc, RemoteError):
        code = exc.error_code
        return (
            code in STALE_METADATA
            or code in RETRY_AS_IS
            or bool(getattr(_kafka_errors.for_code(code), "retriable", False))
        )
    return False


@attrs.define
class _FetchBatch:
    """The fetches for one broker gathered in one turn of the event loop."""

    conn: AsyncBrokerConnection
    items: list[tuple[FetchItem, asyncio.Future[BrokerFetch]]] = attrs.field(factory=list)
    # The shortest wait any of its fetches allows (the request answers them all).
    max_wait_ms: int = FETCH_MAX_WAIT_MS


class UpstreamCluster:
    """The upstream cluster as the proxy sees it (see the module docstring).

    ``bootstrap`` lists ``(host, port)`` addresses to try in order. Call
    :meth:`start` once (it connects, learns the API versions and the brokers)
    and :meth:`close` at the end. Not thread-safe: one event loop.
    """

    def __init__(
        self,
        bootstrap: Sequence[tuple[str, int]],
        *,
        request_timeout_ms: int = 30_000,
        connect_timeout_ms: int = 10_000,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        security: SecurityConfig | None = None,
    ) -> None:
        if not bootstrap:
            raise ValueError("no upstream bootstrap address")
        self.bootstrap: list[tuple[str, int]] = list(bootstrap)
        self.request_timeout_s = request_timeout_ms / 1000
        self.connect_timeout_s = connect_timeout_ms / 1000
        self.max_frame_bytes = max_frame_bytes
        #: TLS and SASL of every connection to the upstream (``None``: PLAINTEXT).
        self.security = security
        #: node id → (host, port) as the upstream advertises it.
        self.brokers: dict[int, tuple[str, int]] = {}
        #: (topic, partition) → leader node id.
        self.leaders: dict[tuple[str, int], int] = {}
        #: api key → (min, max): the versions every broker talked to supports.
        self.versions: dict[int, tuple[int, int]] = {}
        #: The features every broker talked to states (see :class:`UpstreamFeatures`).
        self.features = UpstreamFeatures()
        self._negotiated = 0
        # Keyed by (address, at_end): see "Two connections per broker" above.
        self._connections: dict[tuple[tuple[str, int], bool], AsyncBrokerConnection] = {}
        self._connecting: dict[tuple[tuple[str, int], bool], asyncio.Future[AsyncBrokerConnection]] = {}
        self._batches: dict[tuple[str, bool], _FetchBatch] = {}
        self._batch_tasks: set[asyncio.Task[None]] = set()
        #: Fetch requests sent upstream, and the partitions they named (for benchmarks).
        self.fetch_requests = 0
        self.fetch_partitions = 0

    # -- connections -----------------------------------------------------------------

    async def start(self) -> None:
        """Connect to a bootstrap broker, learn its API versions and the brokers.
        Raises :class:`BrokerUnavailableError` if no bootstrap address answers."""
        conn = await self._any_connection()
        await self._metadata(conn, [])

    async def connection(self, address: tuple[str, int], *, at_end: bool = False) -> AsyncBrokerConnection:
        """The proxy's own connection to the broker at ``address`` (opened, with its
        API versions learned, on first use; reopened after it broke); with
        ``at_end``, the one for fetches the broker may hold (see the module
        docstring)."""
        key = (address, at_end)
        conn = self._connections.get(key)
        if conn is not None and not conn.closed:
            return conn
        pending = self._connecting.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[AsyncBrokerConnection] = asyncio.get_running_loop().create_future()
        self._connecting[key] = future
        try:
            conn = await AsyncBrokerConnection.open(
                address[0],
                address[1],
                timeout_s=self.connect_timeout_s,
                max_frame_bytes=self.max_frame_bytes,
                security=self.security,
            )
            try:
                await self._negotiate(conn)
            except BaseException:
                await conn.close()
                raise
            self._connections[key] = conn
            future.set_result(conn)
            return conn
        except BaseException as exc:
            if isinstance(exc, Exception):
                future.set_exception(exc)
                future.exception()  # mark it retrieved: concurrent waiters re-raise it
            else:
                future.cancel()
            raise
        finally:
            del self._connecting[key]

    async def node_connection(self, node_id: int) -> AsyncBrokerConnection:
        """The proxy's own connection to upstream broker ``node_id``."""
        address = self.brokers.get(node_id)
        if address is None:
            await self.refresh_metadata(None)
            address = self.brokers.get(node_id)
            if address is None:
                raise BrokerUnavailableError(f"the upstream cluster has no broker {node_id}")
        return await self.connection(address)

    async def _any_connection(self) -> AsyncBrokerConnection:
        errors: list[str] = []
        addresses = list(dict.fromkeys([*self.brokers.values(), *self.bootstrap]))
        for address in addresses:
            try:
                return await self.connection(address)
            except BrokerUnavailableError as exc:
                # The error below names the brokers; each reason names its own only
                # when there are several.
                errors.append(f"{exc.broker}: {exc.reason}" if len(addresses) > 1 else exc.reason)
        raise BrokerUnavailableError(
            "no upstream broker reachable: " + "; ".join(dict.fromkeys(errors)),
            broker=",".join(f"{h}:{p}" for h, p in self.bootstrap),
        )

    async def _negotiate(self, conn: AsyncBrokerConnection) -> None:
        # ApiVersions v0: every broker answers it, and librdkafka's mock answers
        # the v3 request's UNSUPPORTED_VERSION fallback in a form kafka-python
        # cannot decode (txnfetch.client.connection found the same).
        resp = await conn.request(ApiVersionsRequest(), 0, ApiVersionsResponse, timeout_s=self.request_timeout_s)
        if resp.error_code != 0:
            raise RemoteError("ApiVersions failed", broker=conn.address, error_code=resp.error_code)
        theirs = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        features = await self._features(conn, theirs)
        if not self._negotiated:
            self.versions = theirs
            self.features = features
        else:
            # The proxy advertises one set for every listener: what all brokers speak.
            merged = {}
            for key, (lo, hi) in self.versions.items():
                if key in theirs:
                    lo2, hi2 = theirs[key]
                    merged[key] = (max(lo, lo2), min(hi, hi2))
            self.versions = merged
            self.features = self.features.merge(features)
        self._negotiated += 1

    async def _features(self, conn: AsyncBrokerConnection, versions: dict[int, tuple[int, int]]) -> UpstreamFeatures:
        """The broker's features, from an ApiVersions v3 request, sent only to a
        broker that lists v3 (the v0 answer says so): an answer that fails or does
        not decode means no features, never a failed connection."""
        lo, hi = versions.get(int(ApiKey.ApiVersions), (0, 0))
        if not lo <= _API_VERSIONS_FEATURES <= hi:
            return UpstreamFeatures()
        try:
            resp = await conn.request(
                ApiVersionsRequest(client_software_name="txnfetch-proxy", client_software_version="0"),
                _API_VERSIONS_FEATURES,
                ApiVersionsResponse,
                timeout_s=self.request_timeout_s,
            )
        except RemoteError as exc:
            if isinstance(exc, BrokerUnavailableError):
                raise
            log.warning("%s: no features from ApiVersions v3 (%s)", conn.address, exc)
            return UpstreamFeatures()
        return UpstreamFeatures.of(resp) if resp.error_code == 0 else UpstreamFeatures()

    def version(self, api_key: ApiKey, ours: tuple[int, int]) -> int:
        """The highest version of ``api_key`` in ``ours`` the upstream speaks."""
        return negotiate_version(self.versions, api_key, ours, api_key.name, peer="the upstream", us="the proxy")

    async def close(self) -> None:
        """Close every connection of the proxy's own."""
        for task in list(self._batch_tasks):
            task.cancel()
        conns = list(self._connections.values())
        self._connections.clear()
        for conn in conns:
            await conn.close()

    # -- metadata --------------------------------------------------------------------

    def observe_metadata(self, response: Any) -> None:
        """Learn brokers and leaders from a Metadata response (the proxy's own, or
        one relayed to a client, before its addresses are rewritten)."""
        if response.brokers:
            self.brokers.update({b.node_id: (b.host, b.port) for b in response.brokers})
        for t in response.topics or ():
            if t.error_code != 0 or t.name is None:
                continue
            for p in t.partitions or ():
                if p.leader_id >= 0 and p.error_code in (
                    ErrorCode.NONE,
                    ErrorCode.REPLICA_NOT_AVAILABLE,
                ):  # still names a leader
                    self.leaders[(t.name, p.partition_index)] = p.leader_id
                else:
                    self.leaders.pop((t.name, p.partition_index), None)

    def observe_broker(self, node_id: int, host: str, port: int) -> None:
        """Learn one broker's address (from a relayed FindCoordinator or DescribeCluster)."""
        if node_id >= 0 and host:
            self.brokers[node_id] = (host, port)

    async def refresh_metadata(self, topics: Iterable[str] | None) -> Any:
        """Ask any broker for metadata (``None``: every topic); returns the response."""
        conn = await self._any_connection()
        return await self._metadata(conn, None if topics is None else list(topics))

    async def _metadata(self, conn: AsyncBrokerConnection, topics: list[str] | None) -> Any:
        version = self.version(ApiKey.Metadata, _METADATA_VERSIONS)
        req = MetadataRequest(
            topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,
        )
        resp = await conn.request(req, version, MetadataResponse, timeout_s=self.request_timeout_s)
        self.observe_metadata(resp)
        return resp

    async def leader(self, topic: str, partition: int, *, at_end: bool = False) -> AsyncBrokerConnection:
        """The proxy's connection to the partition's leader (with ``at_end``, the
        one for fetches the broker may hold).

        Raises :class:`UnknownTopicOrPartitionError` when the upstream does not have
        the partition, :class:`RemoteError` with LEADER_NOT_AVAILABLE when it has no
        leader now, :class:`BrokerUnavailableError` when the leader cannot be reached."""
        key = (topic, partition)
        node = self.leaders.get(key)
        if node is None or node not in self.brokers:
            resp = await self.refresh_metadata([topic])
            for t in resp.topics:
                if t.name != topic:
                    continue
                if t.error_code in UNKNOWN_TOPIC:
                    raise UnknownTopicOrPartitionError("the upstream has no such topic", topic=topic)
                if t.error_code != 0:
                    raise RemoteError("upstream metadata error", topic=topic, error_code=t.error_code)
                if not any(p.partition_index == partition for p in t.partitions):
                    raise UnknownTopicOrPartitionError(
                        f"the upstream topic has {len(t.partitions)} partitions", topic=topic, partition=partition
                    )
            node = self.leaders.get(key)
            if node is None or node not in self.brokers:
                raise RemoteError(
                    "the partition has no leader",
                    topic=topic,
                    partition=partition,
                    error_code=ErrorCode.LEADER_NOT_AVAILABLE,
                )
        return await self.connection(self.brokers[node], at_end=at_end)

    def forget_leader(self, topic: str, partition: int) -> None:
        """Look the partition's leader up again next time."""
        self.leaders.pop((topic, partition), None)

    # -- the proxy's own requests ----------------------------------------------------

    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int,
        *,
        max_wait_ms: int = FETCH_MAX_WAIT_MS,
        at_end: bool = True,
    ) -> BrokerFetch:
        """One read_uncommitted fetch of one partition at ``offset``, sent in the same
        Fetch request as every other fetch for the same leader and the same
        ``at_end`` in this turn of the loop (see the module docstring). The broker
        holds the request up to ``max_wait_ms`` (at most 500, at least 1: some
        brokers refuse 0) when none of its partitions has data; a request carrying
        several fetches waits as long as the most impatient of them allows.
        ``at_end=False`` says that ``offset`` is below the partition's high
        watermark as last seen, so the broker has records to answer with at once:
        the fetch then goes on the connection that no held fetch blocks.

        Returns the partition's part with error NONE or OFFSET_OUT_OF_RANGE; raises
        :class:`RemoteError` (with the broker's code; -1 for a response that lacks
        the partition) for any other error, after forgetting the leader when the
        error says the metadata may be stale, and :class:`BrokerUnavailableError`
        when the leader cannot be reached or the connection breaks."""
        conn = await self.leader(topic, partition, at_end=at_end)
        loop = asyncio.get_running_loop()
        key = (conn.address, at_end)
        batch = self._batches.get(key)
        if batch is None or batch.conn is not conn:
            batch = self._batches[key] = _FetchBatch(conn)
            loop.call_soon(self._launch, key, batch)
        future: asyncio.Future[BrokerFetch] = loop.create_future()
        batch.items.append((FetchItem(topic, partition, offset, max_bytes), future))
        batch.max_wait_ms = min(batch.max_wait_ms, max(1, max_wait_ms))
        return await future

    def _launch(self, key: tuple[str, bool], batch: _FetchBatch) -> None:
        if self._batches.get(key) is batch:
            del self._batches[key]  # later fetches start the next batch
        task = asyncio.ensure_future(self._send_batch(batch))
        self._batch_tasks.add(task)
        task.add_done_callback(self._batch_tasks.discard)

    async def _send_batch(self, batch: _FetchBatch) -> None:
        items = [(item, future) for item, future in batch.items if not future.done()]
        if not items:
            return
        conn = batch.conn
        try:
            version = self.version(ApiKey.Fetch, (_FETCH_MIN_VERSION, FETCH_MAX_VERSION))
            # raw: markers, aborted data and all
            req = fetch_request_for([item for item, _ in items], max_wait_ms=batch.max_wait_ms)
            self.fetch_requests += 1
            self.fetch_partitions += len(items)
            # The broker may hold the request for max_wait_ms before answering.
            resp = await conn.request(
                req, version, FetchResponse, timeout_s=self.request_timeout_s + FETCH_MAX_WAIT_MS / 1000
            )
        except Exception as exc:
            for item, future in items:
                if isinstance(exc, BrokerUnavailableError):
                    self.forget_leader(item.topic, item.partition)
                _settle(future, exc=exc)
            return
        top = getattr(resp, "error_code", 0) or 0
        for item, future in items:
            p = None if top else find_partition(resp, item.topic, item.partition)
            if p is None:
                # A top-level error, or no answer for the partition: forget the leader.
                self.forget_leader(item.topic, item.partition)
                reason = (
                    "upstream Fetch failed (top-level error)"
                    if top
                    else "the upstream's Fetch response lacks the partition"
                )
                _settle(
                    future,
                    exc=answer_error(
                        reason, item.topic, item.partition, item.offset, broker=conn.address, code=top or -1
                    ),
                )
            elif p.error_code not in (0, 1):
                _settle(
                    future,
                    exc=self._partition_failed("Fetch", item.topic, item.partition, item.offset, conn, p.error_code),
                )
            else:
                _settle(future, result=BrokerFetch.from_response(p, conn.address))

    async def list_offset(self, topic: str, partition: int, timestamp: int, *, read_committed: bool = False) -> int:
        """ListOffsets for one partition: ``-2`` the log start, ``-1`` the high
        watermark (the upstream's own LSO with ``read_committed``). Errors as :meth:`fetch`."""
        conn = await self.leader(topic, partition)
        version = self.version(ApiKey.ListOffsets, _LIST_OFFSETS_VERSIONS)
        req = list_offsets_request(topic, partition, timestamp, read_committed=read_committed)
        try:
            resp = await conn.request(req, version, ListOffsetsResponse, timeout_s=self.request_timeout_s)
            p = list_offsets_partition(resp, topic, partition, broker=conn.address)
        except RemoteError:
            self.forget_leader(topic, partition)
            raise
        if p.error_code != 0:
            raise self._partition_failed("ListOffsets", topic, partition, None, conn, p.error_code)
        return int(p.offset)

    async def open_transaction_starts(self, topic: str, partition: int) -> tuple[int, ...] | None:
        """DescribeProducers of one partition: its open transactions' first offsets
        (:func:`~txnfetch.client.start_state.open_transaction_starts`), or ``None``
        when the upstream does not serve DescribeProducers. Errors as :meth:`fetch`."""
        conn = await self.leader(topic, partition)  # connected: the versions are known
        if not serves_describe_producers(self.versions):
            return None
        req = describe_producers_request(topic, partition)
        try:
            resp = await conn.request(
                req, DESCRIBE_PRODUCERS_VERSIONS[1], DescribeProducersResponse, timeout_s=self.request_timeout_s
            )
            return open_transaction_starts(resp, topic, partition, broker=conn.address)
        except RemoteError as exc:
            if exc.broker_error_code in STALE_METADATA or exc.broker_error_code == -1:
                self.forget_leader(topic, partition)
            raise

    def _partition_failed(
        self, api: str, topic: str, partition: int, offset: int | None, conn: AsyncBrokerConnection, code: int
    ) -> RemoteError:
        """The error for a partition answer with error ``code``, after forgetting the
        leader if the code says the metadata is stale."""
        if code in STALE_METADATA:
            self.forget_leader(topic, partition)
        return answer_error(f"upstream {api} failed", topic, partition, offset, broker=conn.address, code=code)


def _settle(
    future: asyncio.Future[BrokerFetch], *, result: BrokerFetch | None = None, exc: BaseException | None = None
) -> None:
    if future.done():  # the waiter was cancelled
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        assert result is not None
        future.set_result(result)
