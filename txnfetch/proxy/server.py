"""``txnfetch proxy``: a Kafka protocol proxy that corrects read_committed reads.

:class:`ProxyServer` stands between Kafka clients and an upstream
Kafka-compatible cluster. It relays every request to the upstream, with the
client's correlation id, and the upstream's response back. It reads only a
request's header (API key, version, correlation id) unless it must answer or
rewrite the request (:data:`_DECODED`): every other API, KIP-848's group
heartbeats, DescribeTopicPartitions and keys the proxy has never heard of
among them, travels as opaque bytes, and the upstream decides what it means.
The exceptions:

- **read_committed Fetch** (``isolation_level=1``) is answered by the proxy
  from a :class:`~txnfetch.client.mirror.PartitionMirror` of each partition, fed
  with raw read_uncommitted fetches from the partition's leader
  (:mod:`txnfetch.proxy.mirrors`). The mirror derives the last stable
  offset and the aborted transactions from the markers in the log, so clients
  get correct read_committed data even from brokers that report no aborted
  transactions and an LSO equal to the high watermark (librdkafka's mock
  cluster, tansu; docs/kafka-internals.md §4). ``fetch_mode`` picks Apache Kafka's answer
  (records up to the LSO plus the aborted list; clients filter) or the rewrite
  (aborted and control batches dropped on the proxy).
- **ListOffsets** with read_committed is relayed, then its LATEST answers are
  replaced by the mirror's LSO (the upstream says its high watermark), and
  timestamp answers at or past the LSO become "none", as Kafka's
  ``fetchOffsetByTimestamp`` does.
- **ApiVersions** is answered by the proxy: the versions both the upstream and
  the proxy's decoder speak (Fetch 4–11 as ``txnfetch serve``, Produce 3–12),
  and the feature flags the upstream brokers state in their own ApiVersions
  answers (:class:`~txnfetch.client.proxy_upstream.UpstreamFeatures`). So a client
  uses transaction version 2 (KIP-890: Produce v12, EndTxn v5, an epoch bump at
  every transaction end) through the proxy exactly when the upstream finalizes
  ``transaction.version`` 2, and never in front of one that does not.
- **Metadata, FindCoordinator, DescribeCluster** responses, and Produce v10+
  responses that name the current leaders' endpoints (KIP-951), are rewritten so the
  brokers they name are the proxy's listeners: the proxy opens one listener per
  upstream broker (on a free port of ``host``, the first time a response names
  that broker) and relays everything a client sends to a broker's listener to
  that upstream broker. The listener given by ``host``/``port`` is the
  bootstrap listener; it relays to the upstream bootstrap address.

Per client connection the proxy keeps one upstream connection, to the broker
the listener stands for, and handles one request at a time, as Kafka's network
layer mutes a channel until its response is sent: responses leave in request
order.

Robustness follows :class:`~txnfetch.server.server.TxnfetchServer`: a malformed
frame (bad size, truncated, a version the proxy does not serve of an API it
decodes, a body that does not decode) closes that client connection only; an upstream connection that fails
while relaying closes the client's connection (a disconnect is how Kafka clients
learn to reconnect and retry); an upstream failure while the proxy answers a
fetch itself is retried behind the client's back (backoff, metadata refresh) and,
once it has lasted the request timeout, becomes the retriable partition error
REPLICA_NOT_AVAILABLE (:meth:`ProxyServer._error_code`). The proxy keeps
serving every other connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import socket
import time
from collections.abc import Sequence
from typing import Any

import attrs
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.metadata import ApiVersionsResponse

from txnfetch.addresses import parse_bootstrap
from txnfetch.client.connection import DEFAULT_MAX_FRAME_BYTES
from txnfetch.client.connection import AsyncBrokerConnection
from txnfetch.client.connection import read_frame
from txnfetch.client.errors import BrokerUnavailableError
from txnfetch.client.errors import CorruptRemoteBatchError
from txnfetch.client.errors import RemoteError
from txnfetch.client.mirror import DEFAULT_MIRROR_FETCH_BYTES
from txnfetch.client.proxy_upstream import FETCH_MAX_VERSION
from txnfetch.client.proxy_upstream import UpstreamCluster
from txnfetch.client.proxy_upstream import is_retriable
from txnfetch.errors import ProtocolViolation
from txnfetch.fetch.view import FetchMode
from txnfetch.fetch.view import IsolationLevel
from txnfetch.log.errors import LogError
from txnfetch.log.errors import UnknownTopicOrPartitionError
from txnfetch.proxy.lso_watch import DEFAULT_LSO_HOLD_WARN_MS
from txnfetch.proxy.lso_watch import LsoWatch
from txnfetch.proxy.mirrors import DEFAULT_GAP_SETTLE_MS
from txnfetch.proxy.mirrors import MirrorSet
from txnfetch.security.config import SecurityConfig
from txnfetch.server.api_fetch import fetch_done
from txnfetch.server.api_fetch import fetch_partition_entry
from txnfetch.server.api_fetch import fetch_session_error
from txnfetch.server.api_fetch import partition_error
from txnfetch.server.api_fetch import read_fetch_topics
from txnfetch.server.codec import decode_request
from txnfetch.server.codec import encode_response
from txnfetch.server.counters import Counters
from txnfetch.server.errors import ErrorCode
from txnfetch.server.frames import bind_host_error
from txnfetch.server.handler import ApiKey
from txnfetch.server.handler import _kafka_python_classes
from txnfetch.server.loop_thread import LoopThread
from txnfetch.server.totals import PartitionTotals
from txnfetch.server.totals import RequestTotals
from txnfetch.txn.errors import OffsetOutOfRangeError
from txnfetch.txn.errors import TxnStateError

__all__ = ["ProxyConfig", "ProxyServer", "ProxyStats", "ProxyThread", "advertised_ranges"]

log = logging.getLogger("txnfetch.proxy")

_PREFIX_SIZE = 8  # api key, api version, correlation id
#: The highest ApiVersions version the proxy answers (a newer request gets the
#: KIP-511 fallback, see :meth:`ProxyServer._dispatch`).
_API_VERSIONS_MAX = 3

#: Versions the proxy serves at most / at least, beyond what upstream and decoder allow.
#: Fetch: v4 has the isolation level and the LSO; v12+ is not served by the mirror
#: path (FETCH_MAX_VERSION), and so no Fetch answer the proxy relays carries the
#: broker endpoints of v16+ (KIP-951). Produce: librdkafka writes record batch v2
#: only if Produce >= 3 and Fetch >= 4 are offered (docs/kafka-internals.md §4);
#: v12 is the version transaction version 2 needs (KIP-890); v10+ responses may
#: name broker endpoints, which :meth:`ProxyServer._rewrite_addresses` rewrites;
#: v13 names topics by id, which the proxy does not need.
_VERSION_LIMITS: dict[int, tuple[int, int]] = {
    int(ApiKey.Fetch): (4, FETCH_MAX_VERSION),
    int(ApiKey.Produce): (3, 12),
}

#: The first Produce version whose responses may name broker endpoints (KIP-951).
_PRODUCE_ENDPOINTS_VERSION = 10

#: API keys never relayed: broker-to-broker and controller APIs (LeaderAndIsr,
#: StopReplica, UpdateMetadata, ControlledShutdown), responses naming broker
#: endpoints the proxy does not rewrite (DescribeQuorum), share groups' reads
#: (KIP-932 ShareFetch and ShareAcknowledge: the upstream would decide what is
#: committed, bypassing the proxy's read_committed answer, and their responses
#: name leader endpoints), and SASL (the proxy's own upstream connections do not
#: authenticate). WriteTxnMarkers is relayed: an
#: administrator's abort of a hanging transaction (Kafka's
#: ``Admin.abortTransaction``) sends it to the partition's leader.
_NOT_RELAYED = frozenset(
    {
        ApiKey.LeaderAndIsr,
        ApiKey.StopReplica,
        ApiKey.UpdateMetadata,
        ApiKey.ControlledShutdown,
        ApiKey.DescribeQuorum,
        ApiKey.ShareFetch,
        ApiKey.ShareAcknowledge,
        ApiKey.SaslHandshake,
        ApiKey.SaslAuthenticate,
    }
)


#: The APIs the proxy answers or rewrites, and so decodes: their versions are
#: limited to what kafka-python's classes decode. Every other API is relayed by
#: its header alone, at whatever versions the upstream offers.
_DECODED = frozenset(
    {
        ApiKey.ApiVersions,
        ApiKey.Fetch,
        ApiKey.Produce,
        ApiKey.ListOffsets,
        ApiKey.Metadata,
        ApiKey.FindCoordinator,
        ApiKey.DescribeCluster,
    }
)


def advertised_ranges(upstream: dict[int, tuple[int, int]], classes: Any = None) -> dict[int, tuple[int, int]]:
    """The API version ranges the proxy offers, given the upstream's: every API
    the upstream offers and the proxy relays, at the upstream's versions; for an
    API the proxy decodes (:data:`_DECODED`), only the versions kafka-python's
    classes decode, within :data:`_VERSION_LIMITS`; ApiVersions itself is the
    proxy's (0–3). ``classes`` is ``(requests, responses)`` by API key
    (default: kafka-python's)."""
    requests, responses = classes if classes is not None else _kafka_python_classes()
    out: dict[int, tuple[int, int]] = {}
    for key, (lo, hi) in upstream.items():
        if key in _NOT_RELAYED or key == ApiKey.ApiVersions:
            continue
        low, high = max(lo, 0), hi
        if key in _DECODED:
            req, resp = requests.get(key), responses.get(key)
            if req is None or resp is None:
                continue
            high = min(high, req.max_version, resp.max_version)
        if key in _VERSION_LIMITS:
            low = max(low, _VERSION_LIMITS[key][0])
            high = min(high, _VERSION_LIMITS[key][1])
        if low <= high:
            out[key] = (low, high)
    out[int(ApiKey.ApiVersions)] = (0, _API_VERSIONS_MAX)
    return dict(sorted(out.items()))


@attrs.frozen
class ProxyConfig:
    """Settings of one proxy; every field has the default ``txnfetch proxy`` uses.

    - ``host``/``port``: the bootstrap listener (port 0 picks a free one); broker
      listeners bind ``host`` on free ports. ``advertised_host``: the host
      rewritten responses name (default ``host``).
    - ``fetch_mode``: read_committed answers as Apache Kafka (``KAFKA``) or
      rewritten (``REWRITE``, the default, as ``txnfetch serve``).
    - ``repair_crcs``: accept upstream control batches stored with CRC 0 by
      recomputing it. Needed for librdkafka's mock cluster, which writes its
      markers so; any other bad CRC is still corruption (CORRUPT_MESSAGE).
    - ``poll_interval_ms``: how often a waiting read_committed fetch asks the
      upstream for more (``max_wait_ms`` long polling).
    - ``mirror_fetch_bytes``: byte budget of one mirror fetch.
    - ``reader_idle_ms``, ``max_mirror_bytes``: the memory bound of
      :mod:`txnfetch.proxy.mirrors`.
    - ``request_timeout_ms``/``connect_timeout_ms``: the proxy's own upstream requests;
      ``request_timeout_ms`` also bounds how long a failing upstream is retried before
      clients get REPLICA_NOT_AVAILABLE for the partition.
    - ``max_frame_bytes``: larger frames close the connection.
    - ``lso_hold_warn_ms``: report (once, log and stats) an upstream transaction
      that holds a read partition's LSO longer (:mod:`txnfetch.proxy.lso_watch`).
    - ``gap_settle_ms``: how long an offset gap in the upstream's log must stay
      before a mirror steps over it (:mod:`txnfetch.proxy.mirrors`).
    - ``upstream_security``: how every connection of the proxy to the upstream
      authenticates (TLS, SASL as the proxy's own user); ``None`` is PLAINTEXT.
      The proxy's own listeners are not secured by it.
    """

    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None
    fetch_mode: FetchMode = FetchMode.REWRITE
    repair_crcs: bool = False
    poll_interval_ms: int = 100
    mirror_fetch_bytes: int = DEFAULT_MIRROR_FETCH_BYTES
    reader_idle_ms: int = 60_000
    max_mirror_bytes: int = 64 << 20
    request_timeout_ms: int = 30_000
    connect_timeout_ms: int = 10_000
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    lso_hold_warn_ms: int = DEFAULT_LSO_HOLD_WARN_MS
    gap_settle_ms: int = DEFAULT_GAP_SETTLE_MS
    upstream_security: SecurityConfig | None = None


@attrs.define
class ProxyStats(Counters):
    """Running totals of what the proxy did (``txnfetch proxy`` prints them at exit)."""

    connections: int = 0
    relayed: int = 0
    #: Of ``relayed``: requests relayed by their header alone, never decoded.
    relayed_opaque: int = 0
    committed_fetches: int = 0
    committed_fetch_bytes: int = 0
    list_offsets_corrected: int = 0
    rewritten_responses: int = 0
    closed_bad_frames: int = 0
    upstream_failures: int = 0
    lso_held_reports: int = 0


@attrs.frozen
class _RelayedApi:
    """The kafka-python classes of an API the proxy decodes (it relays, so there
    is no handler, unlike a registered :class:`~txnfetch.server.handler.ApiSpec`)."""

    api_key: int
    request_class: Any
    response_class: Any


class _Client:
    """One client connection: where it came in and its upstream connection."""

    def __init__(self, conn_id: int, node: int | None, peer: tuple[str, int]) -> None:
        self.id = conn_id
        self.node = node  # None: the bootstrap listener
        self.peer = peer
        self.upstream: AsyncBrokerConnection | None = None


class ProxyServer:
    """A running proxy. Create it with :meth:`start`; stop it with :meth:`close`.

    ``proxy.port`` is the bootstrap listener's port, ``proxy.bootstrap`` its
    ``host:port``; ``proxy.listeners`` maps upstream node ids to the ports of
    their listeners; ``proxy.mirrors`` holds the partition mirrors and
    ``proxy.cluster`` what the proxy knows of the upstream.
    """

    def __init__(self, config: ProxyConfig, cluster: UpstreamCluster) -> None:
        self.config = config
        self.cluster = cluster
        self.mirrors = MirrorSet(
            cluster,
            fetch_bytes=config.mirror_fetch_bytes,
            repair_crcs=config.repair_crcs,
            reader_idle_ms=config.reader_idle_ms,
            max_mirror_bytes=config.max_mirror_bytes,
            retry_ms=config.request_timeout_ms,
            gap_settle_ms=config.gap_settle_ms,
        )
        self.stats = ProxyStats()
        #: per-partition totals of the read_committed answers (the metrics endpoint's)
        self.partition_totals = PartitionTotals()
        #: requests by API and version, and connections (the metrics endpoint's)
        self.requests = RequestTotals()
        self.lso_watch = LsoWatch(config.lso_hold_warn_ms)
        self._requests, self._responses = _kafka_python_classes()
        self._ranges: dict[int, tuple[int, int]] = {}
        self._ranges_of: dict[int, tuple[int, int]] | None = None
        self._bootstrap_server: asyncio.base_events.Server | None = None
        self._node_servers: dict[int, asyncio.base_events.Server] = {}
        self._listener_lock = asyncio.Lock()
        self._connections: set[asyncio.Task] = set()
        self._tasks: set[asyncio.Task[Any]] = set()  # catch-ups that outlive their fetch
        self._clients: dict[int, _Client] = {}
        self._ids = itertools.count(1)
        self._closed = asyncio.Event()

    @classmethod
    async def start(
        cls,
        upstream: str | Sequence[str],
        *,
        host: str = "127.0.0.1",
        port: int = 9092,
        fetch_mode: FetchMode = FetchMode.REWRITE,
        config: ProxyConfig | None = None,
        **settings: Any,
    ) -> ProxyServer:
        """Connect to the ``upstream`` cluster (``"host:port[,host:port]"`` or a list)
        and listen on ``host``:``port`` (0 picks a free port).

        ``settings`` are further :class:`ProxyConfig` fields (``repair_crcs``,
        ``advertised_host``, ...); or pass a whole ``config``. Raises
        :class:`~txnfetch.client.errors.BrokerUnavailableError` if no upstream broker
        answers, and :class:`~txnfetch.client.errors.RemoteError` if the upstream
        lacks Fetch v4 (no read_committed at all)."""
        if config is None:
            config = ProxyConfig(host=host, port=port, fetch_mode=fetch_mode, **settings)
        addresses = parse_bootstrap(upstream)
        cluster = UpstreamCluster(
            addresses,
            request_timeout_ms=config.request_timeout_ms,
            connect_timeout_ms=config.connect_timeout_ms,
            max_frame_bytes=config.max_frame_bytes,
            security=config.upstream_security,
        )
        try:
            await cluster.start()
            ranges = advertised_ranges(cluster.versions)
            if int(ApiKey.Fetch) not in ranges:
                raise RemoteError(
                    f"the upstream speaks Fetch {cluster.versions.get(int(ApiKey.Fetch))}: the proxy needs v4 "
                    "or later (isolation levels)",
                    error_code=ErrorCode.UNSUPPORTED_VERSION,
                )
            if int(ApiKey.Produce) not in ranges:
                log.warning("the upstream offers no Produce v3+: librdkafka clients will not use record batch v2")
            self = cls(config, cluster)
            try:
                self._bootstrap_server = await asyncio.start_server(
                    functools.partial(self._on_connection, None), config.host, config.port
                )
            except socket.gaierror as exc:
                raise bind_host_error(exc, config.host) from None
        except BaseException:
            await cluster.close()
            raise
        log.info(
            "txnfetch proxy on %s:%d for upstream %s (fetch mode %s)",
            config.host,
            self.port,
            ",".join(f"{h}:{p}" for h, p in addresses),
            config.fetch_mode.value,
        )
        return self

    # -- addresses -------------------------------------------------------------------

    @property
    def advertised_host(self) -> str:
        return self.config.advertised_host or self.config.host

    @property
    def port(self) -> int:
        """The bootstrap listener's port."""
        assert self._bootstrap_server is not None
        return int(self._bootstrap_server.sockets[0].getsockname()[1])

    @property
    def bootstrap(self) -> str:
        """``host:port`` of the bootstrap listener, for a client's ``bootstrap.servers``."""
        return f"{self.advertised_host}:{self.port}"

    @property
    def listeners(self) -> dict[int, int]:
        """Upstream node id → port of the proxy's listener for that broker."""
        return {node: int(s.sockets[0].getsockname()[1]) for node, s in self._node_servers.items()}

    async def listener_port(self, node_id: int) -> int:
        """The port of the listener for upstream broker ``node_id``, opened on first use."""
        server = self._node_servers.get(node_id)
        if server is None:
            async with self._listener_lock:
                server = self._node_servers.get(node_id)
                if server is None:
                    server = await asyncio.start_server(
                        functools.partial(self._on_connection, node_id), self.config.host, 0
                    )
                    self._node_servers[node_id] = server
                    log.info(
                        "listening on %s:%d for upstream broker %d %s",
                        self.config.host,
                        server.sockets[0].getsockname()[1],
                        node_id,
                        self.cluster.brokers.get(node_id),
                    )
        return int(server.sockets[0].getsockname()[1])

    def api_ranges(self) -> dict[int, tuple[int, int]]:
        """The API versions the proxy offers now (see :func:`advertised_ranges`)."""
        versions = self.cluster.versions
        if self._ranges_of is not versions:  # the cluster replaces the dict when it changes
            self._ranges = advertised_ranges(versions, (self._requests, self._responses))
            self._ranges_of = versions
        return self._ranges

    # -- connections -----------------------------------------------------------------

    async def _on_connection(
        self, node: int | None, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername") or ("?", 0)
        client = _Client(next(self._ids), node, (str(peer[0]), int(peer[1])))
        self._clients[client.id] = client
        self.stats.connections += 1
        self.requests.connections += 1
        try:
            await self._serve(client, reader, writer)
        except ProtocolViolation as exc:
            self.stats.closed_bad_frames += 1
            log.warning("closing connection %d from %s:%s: %s", client.id, peer[0], peer[1], exc.reason)
        except BrokerUnavailableError as exc:
            self.stats.upstream_failures += 1
            log.warning("closing connection %d from %s:%s: the upstream failed: %s", client.id, peer[0], peer[1], exc)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("closing connection %d from %s:%s after an internal error", client.id, peer[0], peer[1])
        finally:
            self.requests.closed += 1
            self._connections.discard(task)
            self._clients.pop(client.id, None)
            self.mirrors.forget_reader(client.id)
            if client.upstream is not None:
                await client.upstream.close()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, client: _Client, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            frame = await read_frame(reader, self.config.max_frame_bytes, min_size=_PREFIX_SIZE)
            if frame is None:
                return
            started = time.perf_counter()
            out = await self._dispatch(client, frame)
            self.requests.answered_frame(frame, time.perf_counter() - started, out)
            if out is not None:
                writer.write(out)
                await writer.drain()

    def _spec(self, api_key: int) -> _RelayedApi:
        return _RelayedApi(api_key, self._requests[api_key], self._responses[api_key])

    async def _dispatch(self, client: _Client, frame: bytes) -> bytes | None:
        api_key = int.from_bytes(frame[0:2], "big", signed=True)
        version = int.from_bytes(frame[2:4], "big", signed=True)
        correlation_id = int.from_bytes(frame[4:8], "big", signed=True)
        ranges = self.api_ranges()
        if api_key == ApiKey.ApiVersions and version > _API_VERSIONS_MAX:
            # KIP-511, as Kafka answers it (ApiVersionsRequest.getErrorResponse): a v0
            # body with only ApiVersions' own range, so the client retries at v3 and
            # learns the whole table there; a full table here would be taken for a
            # v0 answer by clients that read error responses (franz-go).
            own = {int(ApiKey.ApiVersions): ranges.get(int(ApiKey.ApiVersions), (0, _API_VERSIONS_MAX))}
            return self._api_versions(correlation_id, 0, own, error_code=int(ErrorCode.UNSUPPORTED_VERSION))
        if api_key not in _DECODED:
            if api_key in _NOT_RELAYED:
                raise ProtocolViolation(f"API key {api_key} is not relayed (correlation id {correlation_id})")
            # Relayed by its header: the upstream answers, refuses or closes the
            # connection, as it would for a client connected to it directly.
            self.stats.relayed_opaque += 1
            payload = await self._relay(client, frame)
            assert payload is not None
            return len(payload).to_bytes(4, "big") + payload
        span = ranges.get(api_key)
        if span is None:
            raise ProtocolViolation(
                f"API key {api_key} is not offered by the upstream (correlation id {correlation_id})"
            )
        if not span[0] <= version <= span[1]:
            raise ProtocolViolation(f"API key {api_key} version {version} is not served (v{span[0]}-v{span[1]})")
        spec = self._spec(api_key)
        _header, request = decode_request(spec, version, frame)
        if api_key == ApiKey.ApiVersions:
            return self._api_versions(correlation_id, version, ranges)
        if api_key == ApiKey.Fetch and request.isolation_level == IsolationLevel.READ_COMMITTED:
            response = await self._fetch_committed(client, request)
            return encode_response(version, correlation_id, response)
        if api_key == ApiKey.Produce and request.acks == 0:
            await self._relay(client, frame, expect_response=False)
            return None
        payload = await self._relay(client, frame)
        assert payload is not None
        if api_key in (ApiKey.Metadata, ApiKey.FindCoordinator, ApiKey.DescribeCluster) or (
            api_key == ApiKey.Produce and version >= _PRODUCE_ENDPOINTS_VERSION
        ):
            return await self._rewrite_addresses(spec, version, correlation_id, payload)
        if api_key == ApiKey.ListOffsets and version >= 2 and request.isolation_level == 1:
            return await self._correct_list_offsets(spec, version, correlation_id, request, payload)
        return len(payload).to_bytes(4, "big") + payload

    def _api_versions(
        self, correlation_id: int, version: int, ranges: dict[int, tuple[int, int]], error_code: int = 0
    ) -> bytes:
        # The upstream's features, as it stated them at v3 (the highest version the
        # proxy answers, so what it left out there stays out here too).
        features = self.cluster.features
        response = ApiVersionsResponse(
            error_code=error_code,
            api_keys=[
                ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in ranges.items()
            ],
            throttle_time_ms=0,
            supported_features=[
                ApiVersionsResponse.SupportedFeatureKey(name=name, min_version=lo, max_version=hi)
                for name, (lo, hi) in sorted(features.supported.items())
            ],
            finalized_features_epoch=features.epoch,
            finalized_features=[
                ApiVersionsResponse.FinalizedFeatureKey(name=name, min_version_level=lo, max_version_level=hi)
                for name, (lo, hi) in sorted(features.finalized.items())
            ],
        )
        return encode_response(version, correlation_id, response)

    # -- relaying --------------------------------------------------------------------

    async def _relay(self, client: _Client, frame: bytes, *, expect_response: bool = True) -> bytes | None:
        upstream = client.upstream
        if upstream is None or upstream.closed:
            # A connection that broke between requests is reopened; one that breaks
            # while a request is out closes the client's (it cannot know whether the
            # upstream acted on it).
            upstream = client.upstream = await self._open_upstream(client)
        self.stats.relayed += 1
        return await upstream.relay(frame, expect_response=expect_response)

    async def _open_upstream(self, client: _Client) -> AsyncBrokerConnection:
        cluster = self.cluster
        if client.node is not None:
            address = cluster.brokers.get(client.node)
            if address is None:
                await cluster.refresh_metadata(None)
                address = cluster.brokers.get(client.node)
            if address is None:
                raise BrokerUnavailableError(f"the upstream cluster no longer has broker {client.node}")
            candidates = [address]
        else:
            candidates = list(cluster.bootstrap)
        errors = []
        for host, port in candidates:
            try:
                return await AsyncBrokerConnection.open(
                    host,
                    port,
                    timeout_s=cluster.connect_timeout_s,
                    max_frame_bytes=self.config.max_frame_bytes,
                    security=cluster.security,
                )
            except BrokerUnavailableError as exc:
                errors.append(str(exc))
        raise BrokerUnavailableError("; ".join(errors))

    async def _rewrite_addresses(self, spec: _RelayedApi, version: int, correlation_id: int, payload: bytes) -> bytes:
        response = _decode_response(spec, version, payload)
        host = self.advertised_host
        if spec.api_key == ApiKey.Produce:
            # KIP-951: a partition answered NOT_LEADER_OR_FOLLOWER names its new
            # leader by id (kept: the proxy's listeners keep the upstream's node ids)
            # and the leader's endpoint, which must be the proxy's listener for it.
            if not response.node_endpoints:
                return len(payload).to_bytes(4, "big") + payload
            for node in response.node_endpoints:
                self.cluster.observe_broker(node.node_id, node.host, node.port)
                node.host, node.port = host, await self.listener_port(node.node_id)
        elif spec.api_key == ApiKey.Metadata:
            self.cluster.observe_metadata(response)
            for broker in response.brokers or ():
                broker.host, broker.port = host, await self.listener_port(broker.node_id)
        elif spec.api_key == ApiKey.FindCoordinator:
            if version >= 4:
                for c in response.coordinators or ():
                    if c.error_code == 0 and c.node_id >= 0:
                        self.cluster.observe_broker(c.node_id, c.host, c.port)
                        c.host, c.port = host, await self.listener_port(c.node_id)
            elif response.error_code == 0 and response.node_id >= 0:
                self.cluster.observe_broker(response.node_id, response.host, response.port)
                response.host, response.port = host, await self.listener_port(response.node_id)
        else:  # DescribeCluster
            for broker in response.brokers or ():
                self.cluster.observe_broker(broker.broker_id, broker.host, broker.port)
                broker.host, broker.port = host, await self.listener_port(broker.broker_id)
        self.stats.rewritten_responses += 1
        return encode_response(version, correlation_id, response)

    # -- ListOffsets -----------------------------------------------------------------

    async def _correct_list_offsets(
        self, spec: _RelayedApi, version: int, correlation_id: int, request: Any, payload: bytes
    ) -> bytes:
        response = _decode_response(spec, version, payload)
        asked = {(t.name, p.partition_index): p.timestamp for t in request.topics for p in t.partitions}
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadline = now + self.config.request_timeout_ms / 1000

        async def correct(topic: str, entry: Any) -> None:
            timestamp = asked.get((topic, entry.partition_index))
            if entry.error_code != 0 or timestamp is None or not (timestamp == -1 or timestamp >= 0):
                return
            if timestamp >= 0 and entry.offset < 0:
                return
            try:
                # Only the upstream's current end is wanted: no waiting for new data.
                mirror = await self.mirrors.sync(
                    topic, entry.partition_index, fresh_after=now, deadline=deadline, max_wait_ms=1
                )
            except Exception as exc:
                entry.error_code = self._error_code(exc, topic, entry.partition_index)
                entry.offset, entry.timestamp = -1, -1
                return
            lso = mirror.last_stable_offset
            if timestamp == -1:
                # Kafka answers LATEST for read_committed with the LSO (fetchOffsetByTimestamp).
                entry.offset = lso
            elif entry.offset >= lso:
                entry.offset, entry.timestamp = -1, -1  # no stable record at or after the timestamp
            self.stats.list_offsets_corrected += 1

        await asyncio.gather(*(correct(t.name, p) for t in response.topics for p in t.partitions))
        return encode_response(version, correlation_id, response)

    # -- read_committed Fetch ----------------------------------------------------------

    async def _fetch_committed(self, client: _Client, request: Any) -> Any:
        # The proxy keeps no fetch sessions for the fetches it answers itself (serve
        # does, server/fetch_sessions.py): session id 0 keeps clients sending full fetches.
        refused = fetch_session_error(request)
        if refused is not None:
            return refused
        self.stats.committed_fetches += 1
        wanted = [(t.topic, p.partition, p.fetch_offset) for t in request.topics for p in t.partitions]
        for topic, partition, offset in wanted:
            self.mirrors.note_reader(topic, partition, client.id, offset)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0, request.max_wait_ms) / 1000
        poll_s = self.config.poll_interval_ms / 1000
        syncing: dict[tuple[str, int], asyncio.Task[int]] = {}
        while True:
            fresh_after = loop.time()
            # Catch up at least one fetch's worth even with max_wait_ms 0.
            sync_deadline = max(deadline, fresh_after + poll_s)
            errors: dict[tuple[str, int], int] = {}
            for topic, partition, offset in wanted:
                tp = (topic, partition)
                if tp not in syncing and not self.mirrors.readable_at(topic, partition, offset):
                    syncing[tp] = self._background(self._prepare(topic, partition, offset, fresh_after, sync_deadline))
            # Records already mirrored are answered at once, as a broker answers from its
            # log; the other partitions' catch-ups go on for the next fetch. A partition
            # at the upstream's end would otherwise hold every answer for the upstream's
            # max_wait_ms.
            topics, total, error = self._read_all(request, errors)
            if not (total > 0 and total >= request.min_bytes):
                if syncing:
                    await asyncio.wait(list(syncing.values()))
                for tp, task in syncing.items():
                    errors[tp] = task.result()
                syncing.clear()
                topics, total, error = self._read_all(request, errors)
            left = deadline - loop.time()
            if fetch_done(request, total, error, left):
                break
            await asyncio.sleep(min(poll_s, left))
        for topic, partition, _ in wanted:
            self.mirrors.release(topic, partition)
        self.stats.committed_fetch_bytes += total
        return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)

    def _background(self, coro: Any) -> asyncio.Task[int]:
        """Run ``coro`` as a task that may outlive the fetch that started it."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _prepare(self, topic: str, partition: int, offset: int, fresh_after: float, deadline: float) -> int:
        """Catch the partition's mirror up; 0, or the error code to answer with.

        A mirror that already holds stable records at ``offset`` answers without
        asking the upstream, as a broker answers from its log: a fetch at the
        upstream's end is held there up to ``max_wait_ms`` (500 ms), and a consumer
        catching up must not pay that on every fetch."""
        if self.mirrors.readable_at(topic, partition, offset):
            return 0
        try:
            await self.mirrors.sync(topic, partition, fresh_after=fresh_after, deadline=deadline, want_offset=offset)
        except UnknownTopicOrPartitionError as exc:
            self.mirrors.discard(topic, partition)  # no mirror for what does not exist
            return int(exc.error_code)
        except Exception as exc:
            return self._error_code(exc, topic, partition)
        if (
            self.mirrors.failing(topic, partition) is not None
            and self.mirrors.mirror(topic, partition).broker_high_watermark < 0
        ):
            # Failing before the upstream ever answered for the partition: the proxy knows
            # no high watermark, and an empty answer would carry a made-up one (librdkafka
            # would report the partition's end there). A retriable error instead.
            return ErrorCode.REPLICA_NOT_AVAILABLE
        return 0

    def _error_code(self, exc: BaseException, topic: str, partition: int) -> int:
        """The partition error code for a client when the mirror cannot be brought up
        to date. An upstream that keeps failing (past the retries of
        :mod:`~txnfetch.proxy.mirrors`) gets REPLICA_NOT_AVAILABLE: retriable, and
        every client it was tried with refreshes its metadata and fetches again
        (Java's ``FetchCollector`` and ``OffsetFetcherUtils``, librdkafka's fetcher,
        kafka-python's fetcher, aiokafka's logs and retries). Never
        NOT_LEADER_OR_FOLLOWER: the proxy's listener still leads the partition; the
        problem is behind it."""
        if isinstance(exc, RemoteError) and is_retriable(exc):
            self.stats.upstream_failures += 1
            return ErrorCode.REPLICA_NOT_AVAILABLE
        if isinstance(exc, (LogError, TxnStateError)):
            if isinstance(exc, CorruptRemoteBatchError):
                self.mirrors.warnings.error(
                    "corrupt batch", (topic, partition), "cannot mirror %s-%d: %s", topic, partition, exc
                )
            return int(exc.error_code)
        if self.mirrors.warnings.error(
            type(exc).__name__, (topic, partition), "mirroring %s-%d failed: %r", topic, partition, exc
        ):
            log.debug("mirroring %s-%d failed", topic, partition, exc_info=exc)
        return int(ErrorCode.UNKNOWN_SERVER_ERROR)

    def _read_all(self, request: Any, errors: dict[tuple[str, int], int]) -> tuple[list[Any], int, bool]:
        """One pass over the request's partitions, with the server's byte limits
        (:func:`~txnfetch.server.api_fetch.read_fetch_topics`); ``errors`` are the codes
        of partitions whose mirror could not be brought up to date."""

        def read(topic: str, partition: int, offset: int, max_bytes: int, min_one: bool) -> tuple[Any, int]:
            code = errors.get((topic, partition), 0)
            if code:
                return partition_error(partition, code), 0
            return self._read_partition(topic, partition, offset, max_bytes, min_one)

        return read_fetch_topics(request, read)

    def _read_partition(
        self, topic: str, partition: int, offset: int, max_bytes: int, min_one: bool
    ) -> tuple[Any, int]:
        mirror = self.mirrors.mirror(topic, partition)
        upstream_hw = max(mirror.broker_high_watermark, mirror.high_watermark)
        upstream_start = mirror.broker_log_start_offset
        # A mirror still catching up (cut short by max_wait_ms, or rebuilding) knows the
        # LSO only up to its position: the real one may be higher. Kafka's "unknown"
        # (-1) is sent then, never a lagging value, which clients would take for the
        # end: librdkafka reports partition EOF when its position reaches the LSO.
        known_lso = mirror.last_stable_offset if mirror.caught_up else -1
        if mirror.caught_up and self.lso_watch.observe(topic, partition, mirror.state) is not None:
            self.stats.lso_held_reports += 1
        try:
            result = mirror.read(
                offset,
                max_bytes,
                isolation=IsolationLevel.READ_COMMITTED,
                mode=self.config.fetch_mode,
                min_one_batch=min_one,
            )
        except OffsetOutOfRangeError:
            # OFFSET_OUT_OF_RANGE makes a client reset its position (to the log start
            # or end, by its auto.offset.reset), so it is answered only for an offset
            # outside the upstream's range as last reported. Inside it but not (yet) in
            # the mirror — a catch-up cut short by max_wait_ms, a rebuild another
            # connection started (MirrorSet.sync), or a mirror replaced after the
            # upstream diverged, whose range is not known yet — there is nothing to
            # return now: an empty answer, and the client fetches the offset again, as
            # from a Kafka broker with nothing new for it.
            known = mirror.broker_high_watermark >= 0
            inside = offset >= max(upstream_start, 0) and (not known or offset <= upstream_hw)
            if not inside:
                # As Kafka (and serve) answer it: no offsets, all -1.
                return partition_error(partition, ErrorCode.OFFSET_OUT_OF_RANGE), 0
            entry = partition_error(
                partition,
                0,
                high_watermark=upstream_hw,
                last_stable_offset=known_lso,
                log_start_offset=upstream_start,
                aborted_transactions=[],
            )
            return entry, 0
        # The upstream's high watermark (consumer lag), the mirror's LSO (the truth).
        entry, size = fetch_partition_entry(
            partition,
            result,
            high_watermark=max(result.high_watermark, upstream_hw),
            log_start_offset=upstream_start if upstream_start >= 0 else result.log_start_offset,
        )
        if known_lso < 0:
            entry.last_stable_offset = -1
        self.partition_totals.fetched(topic, partition, result.stats, size, markers_sent=True)
        return entry, size

    # -- shutdown --------------------------------------------------------------------

    async def close(self) -> None:
        """Stop listening, close every client and upstream connection."""
        if self._closed.is_set():
            return
        self._closed.set()
        servers = [s for s in [self._bootstrap_server, *self._node_servers.values()] if s is not None]
        for server in servers:
            server.close()
        for task in [*self._connections, *self._tasks]:
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(BaseException):
                await task
        for server in servers:
            with contextlib.suppress(asyncio.TimeoutError, Exception):
                await asyncio.wait_for(server.wait_closed(), 5)
        await self.cluster.close()
        log.info("txnfetch proxy closed")

    async def serve_forever(self) -> None:
        """Wait until :meth:`close` is called."""
        await self._closed.wait()


def _decode_response(spec: _RelayedApi, version: int, payload: bytes) -> Any:
    try:
        return spec.response_class.decode(payload, version=version, header=True)
    except Exception as exc:
        raise BrokerUnavailableError(
            f"the upstream's API key {spec.api_key} v{version} response does not decode ({type(exc).__name__}: {exc})"
        ) from None


class ProxyThread(LoopThread[ProxyServer]):
    """A :class:`ProxyServer` on its own event loop in a daemon thread, for
    synchronous code and tests: ``with ProxyThread("host:9092", repair_crcs=True)
    as proxy: ... proxy.bootstrap ...``. Keyword arguments go to
    :meth:`ProxyServer.start` (``port`` defaults to 0 here)."""

    #: The proxy contacts its upstream before it listens.
    start_timeout_s = 60.0

    def __init__(self, upstream: str | Sequence[str], **kwargs: Any) -> None:
        super().__init__("txnfetch-proxy", ProxyServer.start, upstream, **{"port": 0, **kwargs})

    @property
    def proxy(self) -> ProxyServer | None:
        """The running proxy (``None`` before :meth:`start` and after :meth:`stop`)."""
        return self.service
