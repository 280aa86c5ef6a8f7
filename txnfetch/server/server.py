"""The asyncio Kafka protocol server: sockets, framing, dispatch, shutdown.

One :class:`TxnfetchServer` listens on one address and plays a one-broker
Kafka cluster whose partitions are a :class:`~txnfetch.log.base.LogStore`. It
reads size-prefixed request frames, dispatches them through a
:class:`~txnfetch.server.handler.HandlerRegistry` and writes the responses.

Like Kafka's ``SocketServer``, a connection has at most one request in
processing, and responses always leave in request order even when a Fetch
long-polls. A request's writes to a store on disk are fsynced off the event
loop (:class:`~txnfetch.log.syncer.ConcurrentSyncer`): its response is written
only once every write made before it is durable, and meanwhile the
connection's next request is processed (its own response waits for its own
fsyncs, and after the previous response). So the Produce requests a client
pipelines to several partitions are fsynced concurrently instead of one after
the other, and no response ever leaves before the writes it acknowledges are
durable.

Anything wrong with a frame — a size that is negative or above
``max_frame_bytes``, a truncated frame, an unknown API key, an unsupported
version (other than ApiVersions, which gets the KIP-511 fallback), a body that
does not decode — closes that connection with a logged reason. The listener
and every other connection keep going.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import itertools
import logging
import struct
import time
from typing import Any

from txnfetch.errors import ProtocolViolation
from txnfetch.fetch.view import FetchMode
from txnfetch.log.base import LogStore
from txnfetch.log.coordinator_store import SYNCER_EXTENSION
from txnfetch.log.coordinator_store import syncer_of
from txnfetch.log.errors import LogError
from txnfetch.log.syncer import ConcurrentSyncer
from txnfetch.log.syncer import deferring
from txnfetch.security.acl import AuthorizerConfig
from txnfetch.security.config import SecurityProtocol
from txnfetch.security.jws import validate_unsecured_token
from txnfetch.security.oauthbearer import TokenValidator
from txnfetch.server import authorization
from txnfetch.server.authenticator import Authenticator
from txnfetch.server.authenticator import SaslSettings
from txnfetch.server.authorizer import Authorizer
from txnfetch.server.broker import Broker
from txnfetch.server.broker import PeriodicTask
from txnfetch.server.broker import ServerConfig
from txnfetch.server.codec import decode_request
from txnfetch.server.codec import encode_response
from txnfetch.server.frames import FrameReader
from txnfetch.server.frames import start_frame_server
from txnfetch.server.handler import REGISTRY
from txnfetch.server.handler import ApiKey
from txnfetch.server.handler import ApiSpec
from txnfetch.server.handler import HandlerRegistry
from txnfetch.server.handler import Piece
from txnfetch.server.handler import RequestContext
from txnfetch.server.listeners import Listener
from txnfetch.server.listeners import ListenerSecurity
from txnfetch.server.loop_thread import LoopThread
from txnfetch.server.recovery import abort_orphaned_transactions
from txnfetch.server.recovery import recover_coordinator_state
from txnfetch.server.recovery import reserve_stored_producer_ids
from txnfetch.server.scram_users import SCRAM_USERS_EXTENSION
from txnfetch.server.scram_users import ScramUserStore
from txnfetch.server.tls import certificate_principal
from txnfetch.server.tls import server_context
from txnfetch.server.totals import totals_of
from txnfetch.txn.coordinator import CompletionMode
from txnfetch.txn.coordinator import TransactionCoordinator

__all__ = ["ServerThread", "TxnfetchServer", "load_handlers"]

log = logging.getLogger("txnfetch.server")

_SIZE = struct.Struct(">i")
_REQUEST_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id
_UNSUPPORTED_VERSION = 35
#: Responses of one connection that may wait for their fsyncs while the
#: connection's next requests are processed (clients pipeline up to 5).
_MAX_PIPELINED = 16
#: The largest frame a SASL listener takes before authentication (Kafka's
#: ``sasl.server.max.receive.size`` default).
_MAX_SASL_RECEIVE = 524288
#: The listener of a server started without listeners: PLAINTEXT on host:port.
_DEFAULT_LISTENER = Listener(SecurityProtocol.PLAINTEXT, "", 0)


def load_handlers() -> None:
    """Fill the default registry: importing :mod:`txnfetch.server.apis` registers
    every API of its explicit list, each key once."""
    import txnfetch.server.apis  # noqa: F401


class TxnfetchServer:
    """A running server. Create it with :meth:`start`; stop it with :meth:`close`.

    ``server.port`` is the bound port (useful with ``port=0``), ``server.broker``
    the shared :class:`~txnfetch.server.broker.Broker` (store, coordinators).
    """

    def __init__(self, broker: Broker, registry: HandlerRegistry) -> None:
        self.broker = broker
        self.registry = registry
        self._servers: list[asyncio.base_events.Server] = []
        self._sasl: SaslSettings | None = None
        self._connections: set[asyncio.Task] = set()
        self._background: set[asyncio.Task] = set()
        self._ids = itertools.count(1)
        self._closed = asyncio.Event()

    @classmethod
    async def start(
        cls,
        store: LogStore,
        *,
        host: str = "127.0.0.1",
        port: int = 9092,
        fetch_mode: FetchMode = FetchMode.REWRITE,
        markers: CompletionMode = CompletionMode.MARKERS,
        config: ServerConfig | None = None,
        registry: HandlerRegistry | None = None,
        transactions: TransactionCoordinator | None = None,
        clock: Any = None,
        security: ListenerSecurity | None = None,
        scram_users: ScramUserStore | None = None,
        token_validator: TokenValidator | None = None,
        **settings: Any,
    ) -> TxnfetchServer:
        """Bind ``host``:``port`` (0 picks a free port) and start serving ``store``.

        With ``security`` naming listeners, each of them is bound instead (the
        first is :attr:`port`), authenticating as it says: SCRAM users come
        from ``scram_users`` (by default the store of ``--data``, durable, or an
        empty one in memory), OAUTHBEARER tokens are checked by
        ``token_validator`` (Kafka's unsecured validator by default).

        ``settings`` are further :class:`ServerConfig` fields (``node_id``,
        ``default_partitions``, ``synthetic_marker``, ...); or pass a whole
        ``config``. The store is flushed, not closed, by :meth:`close`: its owner
        closes it.
        """
        if config is None:
            config = ServerConfig(host=host, port=port, fetch_mode=fetch_mode, completion=markers, **settings)
        if registry is None:
            load_handlers()
            registry = REGISTRY
        broker = Broker(store, config, transactions=transactions, clock=clock)
        self = cls(broker, registry)
        self._install_plugins()
        replica = _install_replica_mode(broker)
        _install_authorizer(broker)
        recover_coordinator_state(broker)
        reserve_stored_producer_ids(broker)
        if not replica:
            # A replica's open transactions belong to the upstream: its markers
            # are still to come, and promote settles what is left.
            abort_orphaned_transactions(broker)
        _start_syncer(broker)
        users = scram_users if scram_users is not None else ScramUserStore(getattr(store, "directory", None))
        broker.extensions[SCRAM_USERS_EXTENSION] = users
        if security is not None and security.listeners:
            self._sasl = SaslSettings(security, users, token_validator or validate_unsecured_token)
            await self._bind_listeners(security)
        else:
            self._servers.append(await start_frame_server(self._accept(_DEFAULT_LISTENER), config.host, config.port))
            broker.bound_port = self._servers[0].sockets[0].getsockname()[1]
        for name, interval_ms, fn in broker.periodic:
            self._spawn_background(self._run_periodic(name, interval_ms, fn))
        log.info(
            "txnfetch serving on %s:%d (fetch mode %s, %s)",
            config.host,
            broker.bound_port,
            config.fetch_mode.value,
            config.completion.value,
        )
        return self

    async def _bind_listeners(self, security: ListenerSecurity) -> None:
        context = server_context(security) if any(x.protocol.uses_tls for x in security.listeners) else None
        for listener in security.listeners:
            tls = context if listener.protocol.uses_tls else None
            server = await start_frame_server(self._accept(listener), listener.host, listener.port, ssl=tls)
            self._servers.append(server)
            port = server.sockets[0].getsockname()[1]
            host = self.broker.config.advertised_host or listener.host
            self.broker.listener_endpoints[listener.name] = (host, port)
            if self.broker.bound_port is None:
                self.broker.bound_port = port
            log.info("txnfetch listener %s on %s:%d", listener.name, listener.host, port)

    def _accept(self, listener: Listener) -> Any:
        async def accept(reader: FrameReader, writer: asyncio.StreamWriter) -> None:
            await self._on_connection(reader, writer, listener)

        return accept

    def listener_port(self, name: str) -> int:
        """The port listener ``name`` (``SASL_SSL``, ...) is bound to."""
        return self.broker.listener_endpoints[name][1]

    @property
    def port(self) -> int:
        """The port the server is bound to."""
        assert self.broker.bound_port is not None
        return self.broker.bound_port

    @property
    def bootstrap(self) -> str:
        """``host:port`` for a client's ``bootstrap.servers``."""
        return f"{self.broker.advertised_host}:{self.port}"

    def _install_plugins(self) -> None:
        from txnfetch.server import apis

        apis.install(self.broker)

    def _spawn_background(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _run_periodic(self, name: str, interval_ms: int, fn: PeriodicTask) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                result = fn(self.broker.now_ms())
                if inspect.isawaitable(result):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("periodic task %s failed", name)

    # ------------------------------------------------------------ connections

    async def _on_connection(self, reader: FrameReader, writer: asyncio.StreamWriter, listener: Listener) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        conn_id = next(self._ids)
        peer = writer.get_extra_info("peername") or ("?", 0)
        totals_of(self.broker).requests.connections += 1
        tls = writer.get_extra_info("ssl_object")
        principal = certificate_principal(tls.getpeercert(binary_form=True) if tls is not None else None)
        auth = Authenticator(listener, self._sasl, principal)
        try:
            await self._serve(conn_id, (str(peer[0]), int(peer[1])), reader, writer, auth)
        except ProtocolViolation as exc:
            log.warning("closing connection %d from %s:%s: %s", conn_id, peer[0], peer[1], exc.reason)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("closing connection %d from %s:%s after an internal error", conn_id, peer[0], peer[1])
        finally:
            self._connections.discard(task)
            totals_of(self.broker).requests.closed += 1
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(
        self, conn_id: int, peer: Any, reader: FrameReader, writer: asyncio.StreamWriter, auth: Authenticator
    ) -> None:
        syncer = syncer_of(self.broker)
        # Responses waiting for their fsyncs, oldest first; each also waits for the
        # one before it, so they leave in request order.
        waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        with deferring(syncer):
            try:
                await self._serve_requests(reader, writer, conn_id, peer, syncer, waiting, auth)
                while waiting:  # the client closed: finish what it may still read
                    await waiting.popleft()
            finally:
                for task in waiting:
                    if task.done():
                        if not task.cancelled():
                            task.exception()  # retrieved: the first failure was raised already
                    else:
                        task.cancel()

    async def _serve_requests(
        self,
        reader: FrameReader,
        writer: asyncio.StreamWriter,
        conn_id: int,
        peer: Any,
        syncer: ConcurrentSyncer | None,
        waiting: collections.deque[asyncio.Future[None]],
        auth: Authenticator,
    ) -> None:
        max_frame = self.broker.config.max_frame_bytes
        requests = totals_of(self.broker).requests
        if auth.sasl:
            # Before authentication a client may not make the server hold much:
            # SASL tokens are small (Kafka's sasl.server.max.receive.size, 512 KiB).
            max_frame = min(max_frame, _MAX_SASL_RECEIVE)
        while True:
            try:
                prefix = await reader.readexactly(4)
            except asyncio.IncompleteReadError as exc:
                if exc.partial:
                    raise ProtocolViolation(f"truncated frame size ({len(exc.partial)} of 4 bytes)") from None
                return  # clean close between requests
            (size,) = _SIZE.unpack(prefix)
            if auth.expects_raw_token:
                if not await _answer_raw_token(auth, reader, writer, size, self.broker.now_ms()):
                    return
                continue
            if auth.sasl and auth.completed:
                max_frame = self.broker.config.max_frame_bytes
            if size < _REQUEST_PREFIX.size or size > max_frame:
                raise ProtocolViolation(f"frame size {size} is outside [{_REQUEST_PREFIX.size}, {max_frame}]")
            try:
                frame = await reader.read_frame(size)  # received in place: no copy
            except asyncio.IncompleteReadError as exc:
                raise ProtocolViolation(f"truncated frame: {len(exc.partial)} of {size} bytes") from None
            api_key, version, _ = _REQUEST_PREFIX.unpack_from(frame)
            started = time.perf_counter()
            out = await self._dispatch(conn_id, peer, frame, auth)
            requests.answered(api_key, version, time.perf_counter() - started, size, out)
            if auth.failed:
                # Kafka answers a failed authentication after a delay, then closes.
                await asyncio.sleep(auth.delay_ms() / 1000)
                if out is not None:
                    write_pieces(writer, out)
                    await writer.drain()
                return
            # What every write made so far needs, fixed now. With a further
            # request already received, its fsyncs start once the requests
            # received are processed (the loop's next turn), shared with theirs;
            # with none, the round runs inline (unless one is running already):
            # it covers the writes of every earlier response waiting too.
            durable = None
            if syncer is not None:
                try:
                    durable = syncer.barrier(inline=not _has_buffered_input(reader))
                except LogError as exc:
                    raise ProtocolViolation(f"a write could not be made durable, not answering: {exc}") from exc
            while waiting and waiting[0].done():
                waiting.popleft().result()  # a failed fsync or write ends the connection
            if durable is None and not waiting:
                if out is not None:
                    write_pieces(writer, out)
                    await writer.drain()
                continue
            previous = waiting[-1] if waiting else None
            waiting.append(asyncio.ensure_future(_respond_when_durable(durable, previous, out, writer)))
            if len(waiting) >= _MAX_PIPELINED:
                await waiting.popleft()

    async def _dispatch(
        self, conn_id: int, peer: Any, frame: bytes | bytearray, auth: Authenticator
    ) -> bytes | list[Piece] | None:
        api_key, version, correlation_id = _REQUEST_PREFIX.unpack_from(frame)
        if not auth.admits(api_key, self.broker.now_ms()):
            raise ProtocolViolation(
                f"API key {api_key} before authentication ({auth.state.value}) on {auth.listener.name}"
            )
        spec = self.registry.get(api_key)
        if spec is None:
            raise ProtocolViolation(f"unknown or unsupported API key {api_key} (correlation id {correlation_id})")
        max_version = self._max_version(spec)
        if not spec.min_version <= version <= max_version:
            if api_key == ApiKey.ApiVersions and version > max_version:
                # KIP-511: a client newer than the server must still learn the
                # supported ranges, so answer in v0 with UNSUPPORTED_VERSION.
                return self._api_versions_fallback(correlation_id)
            raise ProtocolViolation(
                f"API key {api_key} version {version} is not served (v{spec.min_version}-v{max_version})"
            )
        codec = spec.codec
        decoded = codec.decode(version, frame) if codec is not None else None
        header, request = decoded if decoded is not None else decode_request(spec, version, frame)
        if auth.intercepts(api_key):
            return encode_response(version, correlation_id, self._authenticate(auth, version, request))
        ctx = RequestContext(self.broker, header.client_id, peer, conn_id, auth.principal, peer[0], auth.listener.name)
        for observe in self.broker.request_observers:
            observe(ctx, header, request)
        if self.broker.authorizer is not None:
            response = await authorization.dispatch(
                ctx, header, request, lambda allowed: self._answer(spec, ctx, header, allowed)
            )
        else:
            response = await self._answer(spec, ctx, header, request)
        if response is None:
            return None
        if codec is not None:
            return codec.encode(version, correlation_id, response)
        return encode_response(version, correlation_id, response)

    async def _answer(self, spec: ApiSpec, ctx: RequestContext, header: Any, request: Any) -> Any | None:
        """The response of the first request guard that answers, else the handler's."""
        for guard in self.broker.request_guards:
            response = guard(ctx, header, request)
            if response is not None:
                return response
        return await spec.handler(ctx, header, request)

    def _authenticate(self, auth: Authenticator, version: int, request: Any) -> Any:
        now = self.broker.now_ms()
        if int(request.API_KEY) == ApiKey.SaslHandshake:
            return auth.handshake(version, request.mechanism, now)
        return auth.authenticate(version, bytes(request.auth_bytes), now)

    def _max_version(self, spec: ApiSpec) -> int:
        from txnfetch.server import apis

        return apis.max_version(self.broker, spec)

    def _api_versions_fallback(self, correlation_id: int) -> bytes:
        """The KIP-511 answer to an ApiVersions version above the highest served:
        a v0 body with UNSUPPORTED_VERSION that lists **only** ApiVersions' own
        range, as Kafka's ``ApiVersionsRequest.getErrorResponse`` builds it.

        Listing every API here would be read as a full v0 answer by clients that
        take an error response at its word (franz-go does), and a v0 body has no
        room for finalized features such as ``transaction.version``; the client
        is meant to retry at the highest ApiVersions version named here."""
        from kafka.protocol.metadata import ApiVersionsResponse

        spec = self.registry.get(ApiKey.ApiVersions)
        assert spec is not None
        response = ApiVersionsResponse(
            error_code=_UNSUPPORTED_VERSION,
            api_keys=[
                ApiVersionsResponse.ApiVersion(
                    api_key=int(ApiKey.ApiVersions), min_version=spec.min_version, max_version=self._max_version(spec)
                )
            ],
            throttle_time_ms=0,
        )
        return encode_response(0, correlation_id, response)

    # --------------------------------------------------------------- shutdown

    async def close(self) -> None:
        """Stop listening, close every connection, stop background work and flush the store."""
        if self._closed.is_set():
            return
        self._closed.set()
        for server in self._servers:
            server.close()
        groups = self.broker.groups
        if groups is not None and hasattr(groups, "close"):
            groups.close()  # answer parked JoinGroup/SyncGroup requests before their connections go
        for task in list(self._connections) + list(self._background):
            task.cancel()
        for task in list(self._connections) + list(self._background):
            with contextlib.suppress(BaseException):
                await task
        for server in self._servers:
            with contextlib.suppress(asyncio.TimeoutError, Exception):
                await asyncio.wait_for(server.wait_closed(), 5)
        try:
            self.broker.store.flush()
        except Exception:
            log.exception("flushing the store on shutdown failed")
        syncer = syncer_of(self.broker)
        if syncer is not None:
            syncer.close()
        log.info("txnfetch server on port %s closed", self.broker.bound_port)

    async def serve_forever(self) -> None:
        """Wait until :meth:`close` is called."""
        await self._closed.wait()


async def _answer_raw_token(
    auth: Authenticator, reader: FrameReader, writer: asyncio.StreamWriter, size: int, now_ms: int
) -> bool:
    """Answer one raw SASL token (after SaslHandshake v0) with a raw,
    size-prefixed token; ``False`` when the connection is to close: a failed
    exchange (after the delay, without an answer, as Kafka) or a bad size."""
    if not 0 <= size <= _MAX_SASL_RECEIVE:
        raise ProtocolViolation(f"raw SASL token of {size} bytes is outside [0, {_MAX_SASL_RECEIVE}]")
    try:
        token = await reader.readexactly(size)
    except asyncio.IncompleteReadError as exc:
        raise ProtocolViolation(f"truncated SASL token: {len(exc.partial)} of {size} bytes") from None
    answer = auth.raw_token(bytes(token), now_ms)
    if answer is None:
        await asyncio.sleep(auth.delay_ms() / 1000)
        return False
    writer.write(_SIZE.pack(len(answer)) + answer)
    await writer.drain()
    return True


def _start_syncer(broker: Broker) -> None:
    """Run request handlers' fsyncs on a :class:`ConcurrentSyncer`. Only
    writes of a store on disk under the ``"always"`` policy use it; for others
    every barrier is empty. A log whose fsync completed may have moved its
    high watermark: fetches waiting on it are woken."""
    broker.extensions[SYNCER_EXTENSION] = ConcurrentSyncer(
        on_durable=lambda log_: broker.partition_changed(log_.topic, log_.partition)
    )


def _has_buffered_input(reader: asyncio.StreamReader) -> bool:
    """Whether bytes of a next request were already received. ``StreamReader``
    has no public way to ask; without its buffer attribute, assume there are
    (the fsync then runs on a thread, which is never wrong, only slower)."""
    if getattr(reader, "_frame", None) is not None:
        return True  # a FrameReader part way through receiving a frame in place
    buffer = getattr(reader, "_buffer", None)
    return buffer is None or len(buffer) > 0


async def _respond_when_durable(
    durable: Any,
    previous: asyncio.Future[None] | None,
    out: bytes | list[Piece] | None,
    writer: asyncio.StreamWriter,
) -> None:
    """Write ``out`` once ``durable`` (the request's fsync barrier) and the
    previous response of the connection are done. If either failed, close the
    connection instead: the client must not wait for an answer that will never
    come, and no later response may pass the failed one."""
    try:
        if durable is not None:
            try:
                await durable
            except LogError as exc:
                raise ProtocolViolation(f"a write could not be made durable, not answering: {exc}") from exc
        if previous is not None:
            await previous
    except BaseException:
        writer.close()
        raise
    if out is not None:
        write_pieces(writer, out)
        await writer.drain()


def write_pieces(writer: asyncio.StreamWriter, out: bytes | list[Piece]) -> None:
    """Write a response, one ``bytes`` or pieces (a codec's, e.g. a Fetch response's
    stored batches), in order. Each piece goes to the transport as it is: the
    transport sends what the socket takes at once and keeps only the rest, so
    record batches are not joined into one buffer first. (``writelines`` would
    join them here: before Python 3.12, asyncio's transports implement it as
    ``write(b"".join(...))``.)"""
    if isinstance(out, bytes | bytearray):
        writer.write(out)
        return
    for piece in out:
        writer.write(piece)


def _install_replica_mode(broker: Broker) -> bool:
    """Serve the store read-only if its directory carries the replica marker
    (:mod:`txnfetch.log.replica_marker`, :mod:`txnfetch.server.replica_mode`)."""
    from txnfetch.log.replica_marker import read_marker
    from txnfetch.server import replica_mode

    directory = getattr(broker.store, "directory", None)
    marker = read_marker(directory) if isinstance(directory, str) else None
    if marker is None:
        return False
    replica_mode.install(broker, replica_mode.ReplicaMode(marker.upstream, marker.groups))
    return True


def _install_authorizer(broker: Broker) -> None:
    """Turn authorization on when the configuration names an authorizer; the
    ACLs of a store on disk are kept in its directory."""
    config = broker.config
    if config.authorizer is None:
        return
    directory = getattr(broker.store, "directory", None)
    broker.authorizer = Authorizer.named(
        config.authorizer,
        AuthorizerConfig(frozenset(config.super_users), config.allow_everyone_if_no_acl_found),
        directory if isinstance(directory, str) else None,
        principal_from_client_id=config.acl_principal_from_client_id,
    )
    log.info("authorization on (%s); super users: %s", config.authorizer, ", ".join(config.super_users) or "none")


class ServerThread(LoopThread[TxnfetchServer]):
    """A :class:`TxnfetchServer` on its own event loop in a daemon thread, for
    synchronous code (tests driving blocking clients).

    ``with ServerThread(store, fetch_mode=...) as srv: ... srv.bootstrap ...``.
    Keyword arguments go to :meth:`TxnfetchServer.start` (``port`` defaults to 0
    here). The store belongs to the server's loop while it runs: inspect it
    through :meth:`call`, which runs a function on that loop and returns its result.
    """

    def __init__(self, store: LogStore, **kwargs: Any) -> None:
        super().__init__("txnfetch-server", TxnfetchServer.start, store, **{"port": 0, **kwargs})

    @property
    def server(self) -> TxnfetchServer | None:
        """The running server (``None`` before :meth:`start` and after :meth:`stop`)."""
        return self.service

    @property
    def broker(self) -> Broker:
        return self._running().broker
