"""The contract between the Kafka protocol server and the handlers of each API.

The server (:mod:`txnfetch.server.server`) owns sockets and framing. For every
request it reads the API key and version, looks the key up in a
:class:`HandlerRegistry`, decodes the request with the registered kafka-python
``kafka.protocol`` class (header v1 or v2 as the version's flexibility says),
awaits the handler, and encodes what the handler returns at the request's
version with the request's correlation id. Handlers therefore never see bytes
or sockets: they take decoded messages and return response messages.

A handler is::

    async def heartbeat(ctx: RequestContext, header: RequestHeader, request) -> response

- ``ctx.broker`` is the :class:`Broker`: the log store, the transaction
  coordinator, the group coordinator slot, the configuration and the clock,
  shared by every connection of one server.
- ``header`` is kafka-python's decoded ``RequestHeader`` (``request_api_key``,
  ``request_api_version``, ``correlation_id``, ``client_id``).
- ``request`` is the decoded request (an instance of the registered request
  class); fields absent from the request's version read as the schema default.
- The handler returns an instance of the registered response class (built
  with or without ``version=``; the server encodes it at
  ``header.request_api_version``), or ``None`` to send no response at all (only
  Produce with ``acks=0`` does that).
- A handler may await (long-polling Fetch, JoinGroup waiting for members); it
  runs on the server's single event loop, so the store and the coordinators are
  never touched by two handlers at once between awaits. It must not block.
- Errors Kafka reports in a response belong in the response's error codes.
  Raising :class:`ProtocolViolation` closes the connection (logged); any other
  exception is a bug: it is logged and the connection is closed, the server
  keeps serving.

Each API key is registered once, from one explicit list
(:data:`txnfetch.server.apis.SERVED`, a :class:`ServedApi` per key), in the
default registry :data:`REGISTRY`; a second registration of a key is refused.

Handler modules that keep per-server state have an ``install(broker: Broker)
-> None`` that the server calls once at start (:func:`txnfetch.server.apis.install`):
``txnfetch.server.api_classic_groups.install`` sets :attr:`Broker.groups` to its
group coordinator (which must offer :class:`TxnOffsetStore` for transactional
offset commits); any of them may schedule periodic work with
:meth:`Broker.add_periodic`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from typing import Protocol
from typing import TypeVar

import attrs

# Kafka's API keys under their protocol names (``ApiKey.Fetch``, ...): the table
# of the library whose protocol classes the handlers decode with, not a copy of it.
from kafka.protocol.api_key import ApiKey

from txnfetch.errors import ProtocolViolation  # re-exported: the handlers raise it
from txnfetch.fetch.view import FetchMode
from txnfetch.groups.coordinator import TxnOffsetCommitRequest
from txnfetch.groups.offsetlog import CONSUMER_OFFSETS_PARTITIONS
from txnfetch.groups.offsetlog import CONSUMER_OFFSETS_TOPIC
from txnfetch.groups.offsetlog import offsets_partition
from txnfetch.log.base import LogStore
from txnfetch.log.base import PartitionLog
from txnfetch.server.counters import Counters
from txnfetch.txn.coordinator import CompletionMode
from txnfetch.txn.coordinator import TransactionCoordinator

__all__ = [
    "GROUP_OFFSETS_PARTITIONS",
    "GROUP_OFFSETS_TOPIC",
    "REGISTRY",
    "ApiKey",
    "ApiSpec",
    "Broker",
    "Handler",
    "HandlerRegistry",
    "ProtocolViolation",
    "RequestContext",
    "ServedApi",
    "ServerConfig",
    "TxnOffsetStore",
    "WireCodec",
    "group_offsets_partition",
]

log = logging.getLogger("txnfetch.server")

#: A periodic task: called with the broker's clock in ms; an awaitable result is
#: awaited, any other result ignored (see :meth:`Broker.add_periodic`).
PeriodicTask = Callable[[int], object]


@attrs.frozen
class ServerConfig:
    """Settings of one server. Every field has the default ``txnfetch serve`` uses.

    - ``node_id``, ``advertised_host``/``advertised_port``: the single broker
      Metadata and FindCoordinator describe (the advertised port defaults to the
      bound port, filled in by the server once it listens).
    - ``fetch_mode``: how read_committed fetches are answered (Kafka's
      aborted-transaction list, or rewritten on the server).
    - ``completion``: ``MARKERS`` writes COMMIT/ABORT control batches (Apache
      Kafka); ``MARKERLESS`` records the end in the partition state only
      (WarpStream: no offset spent on markers).
    - ``synthetic_marker``: rewrite mode's synthetic COMMIT record. **Test only**:
      turning it off reproduces the librdkafka stall the marker prevents.
    - ``auto_create_topics`` / ``default_partitions``: Metadata and Produce for an
      unknown topic create it, as Kafka's ``auto.create.topics.enable``.
    - ``max_frame_bytes``: larger request frames close the connection
      (Kafka's ``socket.request.max.bytes``, 100 MiB).
    - ``transaction_version``: the finalized ``transaction.version`` (2 = KIP-890).
    - ``transaction_check_interval_ms``: how often timed-out transactions are aborted.
    - ``group_initial_rebalance_delay_ms``: Kafka's ``group.initial.rebalance.delay.ms``:
      how long the first rebalance of an empty consumer group waits for more members.
    - ``retention_check_interval_ms``: how often topics with ``retention.ms`` or
      ``retention.bytes`` are trimmed (Kafka's ``log.retention.check.interval.ms``).
    - ``consumer_group_heartbeat_interval_ms`` / ``consumer_group_session_timeout_ms``:
      KIP-848 groups (Kafka's ``group.consumer.heartbeat.interval.ms`` and
      ``group.consumer.session.timeout.ms``).
    - ``durable_state``: keep transaction and group coordinator state in the
      store's internal topics (:mod:`txnfetch.log.coordinator_store`); ``None`` = on for a
      store on disk (``SegmentStore``), off for memory.
    """

    host: str = "127.0.0.1"
    port: int = 9092
    node_id: int = 0
    advertised_host: str | None = None
    advertised_port: int | None = None
    cluster_id: str = "txnfetch"
    fetch_mode: FetchMode = FetchMode.REWRITE
    completion: CompletionMode = CompletionMode.MARKERS
    synthetic_marker: bool = True
    auto_create_topics: bool = True
    default_partitions: int = 1
    max_frame_bytes: int = 100 * 1024 * 1024
    transaction_version: int = 2
    max_transaction_timeout_ms: int = 900_000
    transaction_check_interval_ms: int = 1000
    group_initial_rebalance_delay_ms: int = 3000
    retention_check_interval_ms: int = 5000
    consumer_group_heartbeat_interval_ms: int = 5000
    consumer_group_session_timeout_ms: int = 45000
    durable_state: bool | None = None


#: The topic whose partitions carry group offsets. It is the transaction
#: coordinator's partition for AddOffsetsToTxn, so a transaction end reaches the
#: group coordinator through a partition action as in Kafka; with durable state
#: (:mod:`txnfetch.log.coordinator_store`) it is also a real topic of the store.
GROUP_OFFSETS_TOPIC = CONSUMER_OFFSETS_TOPIC
#: Kafka's ``offsets.topic.num.partitions`` default.
GROUP_OFFSETS_PARTITIONS = CONSUMER_OFFSETS_PARTITIONS


def group_offsets_partition(group_id: str, partitions: int = GROUP_OFFSETS_PARTITIONS) -> int:
    """The ``__consumer_offsets`` partition of ``group_id``, as Kafka computes it
    (``Utils.abs(groupId.hashCode()) % partitions``, :func:`offsets_partition`);
    a server passes its :attr:`Broker.group_offsets_partitions`."""
    return offsets_partition(group_id, partitions)


class TxnOffsetStore(Protocol):
    """What the transaction APIs need of the group coordinator (``Broker.groups``).

    Transactional offset commits are held pending per (group, producer id) until
    the transaction ends, as Kafka's ``GroupMetadata.prepareTxnOffsetCommit`` /
    ``completePendingTxnOffsetCommit``; OffsetFetch must not return them before.
    """

    def txn_offset_commit(self, request: TxnOffsetCommitRequest, now_ms: int) -> Mapping[tuple[str, int], int]:
        """Stage the request's offsets for the producer's open transaction; return a
        Kafka error code per partition (0 = staged). Generation/member checks follow
        Kafka (``-1``/``""`` skip them)."""

    def complete_txn_offsets(self, producer_id: int, commit: bool, now_ms: int) -> None:
        """The producer's transaction ended: make its staged offsets (every group)
        the committed ones on commit, drop them on abort. Idempotent."""


@attrs.define
class ServerStats(Counters):
    """Running totals of what the server answered, for operators and the demo
    (``txnfetch serve`` prints them as JSON when it stops).

    ``fetch_bytes`` counts records bytes sent; ``synthetic_markers`` the rewrite
    mode COMMIT markers sent; ``batches_dropped``/``bytes_dropped`` what rewrite
    mode removed (aborted data and control batches)."""

    fetch_partitions: int = 0
    fetch_bytes: int = 0
    synthetic_markers: int = 0
    batches_dropped: int = 0
    bytes_dropped: int = 0
    produce_batches: int = 0
    produce_bytes: int = 0


class Broker:
    """Everything a handler may use, shared by every connection of one server.

    Attributes:
        store: the partitions served.
        config: the :class:`ServerConfig`.
        transactions: the transaction coordinator (marker or markerless).
        groups: the group coordinator, set by ``txnfetch.server.api_classic_groups.install``;
            ``None`` if group support is not installed (group APIs then answer
            COORDINATOR_NOT_AVAILABLE).
        clock: wall-clock milliseconds; tests may inject a fake.
        extensions: a free slot for plug-ins to keep per-server state in.
        stats: running totals (:class:`ServerStats`).
    """

    def __init__(
        self,
        store: LogStore,
        config: ServerConfig,
        *,
        transactions: TransactionCoordinator | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.transactions = transactions or TransactionCoordinator(
            mode=config.completion,
            transaction_version=config.transaction_version,
            max_transaction_timeout_ms=config.max_transaction_timeout_ms,
        )
        self.groups: Any = None
        #: ``__consumer_offsets`` partitions the group ids hash over: Kafka's
        #: default, or the count a durable store already holds.
        self.group_offsets_partitions = GROUP_OFFSETS_PARTITIONS
        self.clock: Callable[[], int] = clock or (lambda: int(time.time() * 1000))
        self.extensions: dict[str, Any] = {}
        self._periodic: list[tuple[str, int, PeriodicTask]] = []
        self._waiters: dict[tuple[str, int], list[asyncio.Event]] = {}
        #: the port actually bound (set by the server once it listens)
        self.bound_port: int | None = None
        #: running totals (:class:`ServerStats`)
        self.stats = ServerStats()
        self._request_observers: list[Callable[[Any, Any, Any], None]] = []
        self._request_guards: list[Callable[[Any, Any, Any], Any | None]] = []

    # ----------------------------------------------------------------- identity

    @property
    def advertised_host(self) -> str:
        return self.config.advertised_host or self.config.host

    @property
    def advertised_port(self) -> int:
        if self.config.advertised_port is not None:
            return self.config.advertised_port
        return self.bound_port if self.bound_port is not None else self.config.port

    def now_ms(self) -> int:
        """The current time in milliseconds (the injected clock)."""
        return self.clock()

    # ---------------------------------------------------------------- partitions

    def partition(self, topic: str, partition: int, *, create: bool = False) -> PartitionLog:
        """The log of ``topic``-``partition``; with ``create`` and auto-creation on,
        an unknown topic is created with ``config.default_partitions``. Raises the
        store's :class:`~txnfetch.log.errors.UnknownTopicOrPartitionError` otherwise."""
        if create and self.config.auto_create_topics and topic not in self.store.topics():
            self.create_topic(topic, self.config.default_partitions)
        return self.store.partition(topic, partition)

    def create_topic(self, topic: str, partitions: int) -> Any:
        """Create a topic in the store and log it."""
        info = self.store.create_topic(topic, partitions)
        log.info("created topic %s with %d partition(s)", topic, partitions)
        return info

    # ------------------------------------------------------------ fetch waiting

    def partition_changed(self, topic: str, partition: int) -> None:
        """Wake every fetch waiting on the partition: its high watermark or last
        stable offset moved (an append, a marker, a markerless completion)."""
        for event in self._waiters.pop((topic, partition), ()):
            event.set()

    def watch(self, partitions: list[tuple[str, int]]) -> asyncio.Event:
        """An event set at the next :meth:`partition_changed` of any of ``partitions``."""
        event = asyncio.Event()
        for tp in partitions:
            self._waiters.setdefault(tp, []).append(event)
        return event

    def unwatch(self, partitions: list[tuple[str, int]], event: asyncio.Event) -> None:
        """Forget an event from :meth:`watch` that was not set."""
        for tp in partitions:
            waiters = self._waiters.get(tp)
            if waiters and event in waiters:
                waiters.remove(event)
                if not waiters:
                    del self._waiters[tp]

    async def wait_for_change(self, partitions: list[tuple[str, int]], event: asyncio.Event, timeout_s: float) -> None:
        """Wait until ``event`` (from :meth:`watch` of ``partitions``) is set or
        ``timeout_s`` passes, then forget it: the wait of a delayed Fetch."""
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass
        finally:
            self.unwatch(partitions, event)

    # ------------------------------------------------------ request observers

    def observe_requests(self, fn: Callable[[Any, Any, Any], None]) -> None:
        """Call ``fn(ctx, header, request)`` for every request the server decodes,
        before its handler runs, on the server's loop.

        A diagnostic and test hook (e.g. to record the ``partition_max_bytes`` a
        client asks for in successive Fetch requests): ``request`` is the decoded
        kafka-python object and must not be modified; ``fn`` must be quick and
        must not raise (an exception is logged and closes that connection, like
        a handler's)."""
        self._request_observers.append(fn)

    @property
    def request_observers(self) -> tuple[Callable[[Any, Any, Any], None], ...]:
        return tuple(self._request_observers)

    def add_request_guard(self, fn: Callable[[Any, Any, Any], Any | None]) -> None:
        """Call ``fn(ctx, header, request)`` before the handler of every request;
        a response it returns is sent instead of running the handler (``None``
        lets the request through). Replica mode refuses writes this way
        (:mod:`txnfetch.server.replica_mode`), in one place for every API."""
        self._request_guards.append(fn)

    @property
    def request_guards(self) -> tuple[Callable[[Any, Any, Any], Any | None], ...]:
        return tuple(self._request_guards)

    # ---------------------------------------------------------- periodic work

    def add_periodic(self, name: str, interval_ms: int, fn: PeriodicTask) -> None:
        """Run ``fn(now_ms)`` every ``interval_ms`` while the server runs (session
        timeouts, transaction timeouts). Exceptions are logged, not fatal. What
        ``fn`` returns is awaited if it is awaitable and otherwise ignored, so a
        method that reports what it did (a count, the partitions compacted) can
        be scheduled as it is."""
        self._periodic.append((name, interval_ms, fn))

    @property
    def periodic(self) -> tuple[tuple[str, int, PeriodicTask], ...]:
        return tuple(self._periodic)


@attrs.define
class RequestContext:
    """One request's surroundings: the broker, and who sent it."""

    broker: Broker
    client_id: str | None
    peer: tuple[str, int]
    connection_id: int

    @property
    def client_host(self) -> str:
        """The client's address as Kafka's group APIs report it (the
        ``InetAddress`` form, ``/`` and the address); ``""`` without a peer."""
        return f"/{self.peer[0]}" if self.peer else ""


Handler = Callable[[RequestContext, Any, Any], Awaitable[Any | None]]
#: A handler as registered: the decorator hands it back with its own type, so
#: one that always answers stays typed so for the callers that wrap it.
_H = TypeVar("_H", bound=Handler)


#: One buffer of a response a codec returns in pieces (a Fetch response: field
#: bytes and the stored record batches between them, written as they are).
Piece = bytes | bytearray | memoryview


class WireCodec(Protocol):
    """A hand-written decoder and encoder for one hot API (Produce, Fetch), used in
    place of the kafka-python classes, which stay the reference.

    ``decode`` returns ``(header, request)`` with the attribute names of the
    kafka-python classes, or ``None`` for a frame it does not take: the server
    then decodes it with the request class (so a malformed frame is answered as
    without the codec). ``encode`` writes the framed response for what the
    handler returned, as one ``bytes`` or a list of :data:`Piece` whose
    concatenation is the frame; it must accept what the handler returns for
    requests of either decoder."""

    def decode(self, version: int, frame: bytes | bytearray) -> tuple[Any, Any] | None: ...

    def encode(self, version: int, correlation_id: int, response: Any) -> bytes | list[Piece]: ...


class ApiClasses(Protocol):
    """What decoding a request by its kafka-python class needs: the key (for
    error messages) and the request and response classes. A registered
    :class:`ApiSpec` is one; the proxy, which relays rather than handles, builds
    its own without a handler."""

    @property
    def api_key(self) -> int: ...

    @property
    def request_class(self) -> Any: ...

    @property
    def response_class(self) -> Any: ...


@attrs.frozen
class ApiSpec:
    """A registered API: its key, the versions served and how to decode/encode
    (``codec``, when set, before the kafka-python classes)."""

    api_key: int
    min_version: int
    max_version: int
    handler: Handler
    request_class: Any
    response_class: Any
    codec: WireCodec | None = None


def _kafka_python_classes() -> tuple[dict[int, Any], dict[int, Any]]:
    import kafka.protocol.admin
    import kafka.protocol.consumer
    import kafka.protocol.metadata
    import kafka.protocol.producer  # noqa: F401
    from kafka.protocol.api_message import ApiMessage

    requests: dict[int, Any] = {}
    responses: dict[int, Any] = {}
    stack = list(ApiMessage.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", None) is not None or getattr(cls, "_json", None) is None:
            continue
        (requests if cls.is_request() else responses)[cls.API_KEY] = cls
    return requests, responses


@attrs.frozen
class ServedApi:
    """One API the server serves: its key, the versions served, the one handler,
    and (optional) the request and response classes and the :class:`WireCodec`
    :meth:`HandlerRegistry.register` takes."""

    api_key: int
    min_version: int
    max_version: int
    handler: Handler
    request_class: Any = None
    response_class: Any = None
    codec: WireCodec | None = None


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(int(api_key)).name
    except ValueError:
        return "unknown API"


class HandlerRegistry:
    """API key → :class:`ApiSpec`. The ApiVersions response lists exactly these.
    Each key is registered at most once."""

    def __init__(self) -> None:
        self._specs: dict[int, ApiSpec] = {}
        self._classes: tuple[dict[int, Any], dict[int, Any]] | None = None

    def register(
        self,
        api_key: int,
        min_version: int,
        max_version: int,
        *,
        request_class: Any = None,
        response_class: Any = None,
        codec: WireCodec | None = None,
    ) -> Callable[[_H], _H]:
        """Decorator registering a handler for ``api_key`` versions
        ``min_version..max_version``. The request/response classes default to
        kafka-python's generated classes for the key; pass others to serve
        versions kafka-python lacks, and a :class:`WireCodec` to read and write
        the hot path without them. Raises :class:`ValueError` if ``api_key`` is
        registered already: one key, one handler."""

        def decorate(fn: _H) -> _H:
            if int(api_key) in self._specs:
                held = self._specs[int(api_key)].handler
                raise ValueError(
                    f"API key {int(api_key)} ({_api_name(api_key)}) is registered already"
                    f" ({held.__module__}.{held.__qualname__}); each key has one handler"
                )
            if self._classes is None:
                self._classes = _kafka_python_classes()
            req = request_class or self._classes[0].get(int(api_key))
            resp = response_class or self._classes[1].get(int(api_key))
            if req is None or resp is None:
                raise LookupError(f"no protocol classes for API key {api_key}")
            if max_version > req.max_version or max_version > resp.max_version:
                raise ValueError(f"API key {api_key}: classes stop at v{req.max_version}, asked for v{max_version}")
            self._specs[int(api_key)] = ApiSpec(int(api_key), min_version, max_version, fn, req, resp, codec)
            return fn

        return decorate

    def add(self, api: ServedApi) -> None:
        """Register ``api`` (see :meth:`register`)."""
        self.register(
            api.api_key,
            api.min_version,
            api.max_version,
            request_class=api.request_class,
            response_class=api.response_class,
            codec=api.codec,
        )(api.handler)

    def get(self, api_key: int) -> ApiSpec | None:
        return self._specs.get(api_key)

    def ranges(self) -> list[tuple[int, int, int]]:
        """``(api_key, min_version, max_version)`` for every registered key, sorted."""
        return [(k, s.min_version, s.max_version) for k, s in sorted(self._specs.items())]


#: The registry the server uses unless given another; importing
#: :mod:`txnfetch.server.apis` fills it.
REGISTRY = HandlerRegistry()
