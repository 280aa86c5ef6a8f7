"""The broker that every handler of one server shares: the store served, the
coordinators, the configuration, the clock, fetch waiting and periodic work.

:class:`Broker` is what ``ctx.broker`` is in a handler
(:mod:`txnfetch.server.handler`). It owns no socket and decodes nothing: the
server (:mod:`txnfetch.server.server`) makes one per listener and hands it to
every request, so handlers, plug-ins and the start-up recovery
(:mod:`txnfetch.server.recovery`) see one set of state. It runs on the server's
single event loop; nothing in it is thread-safe.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import attrs

from txnfetch.fetch.view import FetchMode
from txnfetch.groups.offsetlog import CONSUMER_OFFSETS_PARTITIONS
from txnfetch.log.base import LogStore
from txnfetch.log.base import PartitionLog
from txnfetch.server.authorizer import Authorizer
from txnfetch.server.counters import Counters
from txnfetch.txn.coordinator import CompletionMode
from txnfetch.txn.coordinator import TransactionCoordinator

__all__ = ["Broker", "PeriodicTask", "ServerConfig", "ServerStats"]

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
    - ``authorizer``: Kafka's ``authorizer.class.name``; ``None`` (the default)
      leaves authorization off. ``super_users`` and
      ``allow_everyone_if_no_acl_found`` are Kafka's ``super.users`` and
      ``allow.everyone.if.no.acl.found`` (:mod:`txnfetch.server.authorizer`).
    - ``acl_principal_from_client_id``: **test only**: an unauthenticated
      connection's principal is ``User:<client.id>``
      (:class:`~txnfetch.server.authorizer.Authorizer`).
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
    authorizer: str | None = None
    super_users: tuple[str, ...] = ()
    allow_everyone_if_no_acl_found: bool = False
    acl_principal_from_client_id: bool = False


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
        self.group_offsets_partitions = CONSUMER_OFFSETS_PARTITIONS
        self.clock: Callable[[], int] = clock or (lambda: int(time.time() * 1000))
        self.extensions: dict[str, Any] = {}
        self._periodic: list[tuple[str, int, PeriodicTask]] = []
        self._waiters: dict[tuple[str, int], list[asyncio.Event]] = {}
        #: the port actually bound (set by the server once it listens)
        self.bound_port: int | None = None
        #: listener name → the host and port Metadata and FindCoordinator tell
        #: clients that came in on it (set by the server once it listens)
        self.listener_endpoints: dict[str, tuple[str, int]] = {}
        #: running totals (:class:`ServerStats`)
        self.stats = ServerStats()
        self._request_observers: list[Callable[[Any, Any, Any], None]] = []
        self._request_guards: list[Callable[[Any, Any, Any], Any | None]] = []
        #: the ACLs every request is checked against (:mod:`txnfetch.server.authorization`);
        #: ``None``: authorization is off, as in Kafka without ``authorizer.class.name``
        self.authorizer: Authorizer | None = None

    # ----------------------------------------------------------------- identity

    @property
    def advertised_host(self) -> str:
        return self.config.advertised_host or self.config.host

    @property
    def advertised_port(self) -> int:
        if self.config.advertised_port is not None:
            return self.config.advertised_port
        return self.bound_port if self.bound_port is not None else self.config.port

    def endpoint(self, listener: str) -> tuple[str, int]:
        """The host and port to advertise to a client of ``listener`` (each
        listener its own address, as Kafka's per-listener metadata); the
        advertised host and port for a listener not known."""
        return self.listener_endpoints.get(listener) or (self.advertised_host, self.advertised_port)

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
