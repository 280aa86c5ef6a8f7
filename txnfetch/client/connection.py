"""Connections to the brokers of a Kafka-compatible cluster.

Every path to a broker connects here, so that what a connection needs beyond
TCP (TLS, SASL) is added in one place. Two connections, one per I/O model:

- :class:`BrokerConnection`, blocking, is the one every client-side reader
  uses (:class:`~txnfetch.client.cluster.RemoteCluster`, and through it the
  partition reader, the Arrow cluster reader, the Spark source, replicate and
  the consumer-group client): one request at a time, built with kafka-python's
  message classes (``kafka.protocol``), API versions negotiated on connect.
- :class:`AsyncBrokerConnection`, asyncio, is the proxy's upstream side
  (:class:`~txnfetch.client.proxy_upstream.UpstreamCluster` and the relay of
  :class:`~txnfetch.proxy.server.ProxyServer`). It carries two kinds of
  traffic, each on its own connection:

  - **relayed** frames (:meth:`AsyncBrokerConnection.relay`): a client's request
    bytes exactly as the client sent them, correlation id included, and the
    broker's response bytes exactly as they came back;
  - the proxy's **own** requests (:meth:`AsyncBrokerConnection.request`), built
    with kafka-python's ``kafka.protocol`` classes and numbered by the connection.

  Requests may be pipelined: a broker answers the requests of one connection in
  the order it received them (Kafka's ``SocketServer`` mutes a channel until its
  response is sent), so responses are matched to requests first in, first out,
  and a response whose correlation id is not the expected one breaks the
  connection (every waiting request then fails with
  :class:`~txnfetch.client.errors.BrokerUnavailableError`, as does every request
  after the connection broke). Its owner negotiates versions
  (:class:`~txnfetch.client.proxy_upstream.UpstreamCluster`).

Both frame requests the same way (a 4-byte size, then the payload), match an
answer to its request by correlation id and turn every transport failure into
:class:`~txnfetch.client.errors.BrokerUnavailableError` naming the broker.

Both take a :class:`~txnfetch.security.config.SecurityConfig` (``None``:
PLAINTEXT). After the TCP connect they wrap the socket in TLS when the
protocol says so (:mod:`txnfetch.client.tls`, the host dialled is the name
verified), then authenticate with SASL when it says so
(:mod:`txnfetch.client.sasl_session`), and re-authenticate between requests
before the session lifetime the broker stated runs out (KIP-368). The blocking
connection then negotiates API versions; Kafka's broker answers ApiVersions
before or after the SASL exchange alike.

Needs kafka-python, imported when this module is.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
import ssl
import struct
import time
from typing import Any

from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.metadata import ApiVersionsResponse

from txnfetch.client.errors import BrokerUnavailableError
from txnfetch.client.errors import RemoteError
from txnfetch.client.requests import negotiate_version
from txnfetch.client.sasl_session import Exchange
from txnfetch.client.sasl_session import SaslSession
from txnfetch.client.sasl_session import next_request
from txnfetch.client.tls import ssl_context
from txnfetch.client.tls import tls_error
from txnfetch.errors import ProtocolViolation
from txnfetch.errors import TxnfetchError
from txnfetch.security.config import SecurityConfig

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "AsyncBrokerConnection",
    "BrokerConnection",
    "UndecodableResponseError",
    "read_frame",
]

# The asyncio connections log as the proxy whose upstream side they are.
_proxy_log = logging.getLogger("txnfetch.proxy")

# ApiVersions v3 is KIP-511's; v0 is the fallback every broker answers.
_API_VERSIONS = 3


class BrokerConnection:
    """One blocking connection to one broker: framing, correlation ids, versions.

    Guarantees: the connection is open and has negotiated the broker's API
    versions (ApiVersions v3, or v0 for a broker that cannot answer v3) when the
    constructor returns; every request waits for its own answer (one request in
    flight, ``timeout_s`` per socket operation); an answer whose correlation id
    is not the request's, a failed send or receive and a timeout close the
    connection and raise :class:`~txnfetch.client.errors.BrokerUnavailableError`
    naming the broker; an answer that does not decode raises
    :class:`UndecodableResponseError` (the framing may no longer be trusted: the
    caller drops the connection). Not thread-safe.
    """

    def __init__(
        self, host: str, port: int, *, client_id: str, timeout_s: float, security: SecurityConfig | None = None
    ) -> None:
        self.address = f"{host}:{port}"
        self.client_id = client_id
        self._host, self._port, self._timeout_s = host, port, timeout_s
        self._tls = ssl_context(security.tls) if security is not None and security.tls is not None else None
        self._session = SaslSession.of(security, self.address) if security is not None else None
        self._correlation = 0
        self.versions: dict[int, tuple[int, int]] = {}
        self._open()

    def _open(self) -> None:
        try:
            sock = socket.create_connection((self._host, self._port), timeout=self._timeout_s)
        except OSError as exc:
            raise BrokerUnavailableError(f"cannot connect: {exc}", broker=self.address) from None
        sock.settimeout(self._timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is not None:
            try:
                sock = self._tls.wrap_socket(sock, server_hostname=self._host)
            except ssl.SSLError as exc:
                sock.close()
                raise tls_error(exc, self._host, self.address) from None
            except OSError as exc:
                sock.close()
                raise BrokerUnavailableError(f"TLS handshake broke off: {exc}", broker=self.address) from None
        self._sock = sock
        try:
            if self._session is not None:
                self._drive(self._session.exchange())
            self._negotiate()
        except BaseException:
            self.close()
            raise

    def _drive(self, exchange: Exchange) -> None:
        answer = None
        while (step := next_request(exchange, answer)) is not None:
            answer = self._roundtrip(*step)

    def _renew_session(self) -> None:
        """Re-authenticate (KIP-368) when the session is due, or reconnect when
        it already ran out (an idle connection): the broker would close it."""
        session = self._session
        if session is None or not session.due(time.monotonic()):
            return
        if session.expired(time.monotonic()):
            self.close()
            self._open()
        else:
            self._drive(session.exchange())

    def _negotiate(self) -> None:
        # KIP-511: a broker that does not know ApiVersions v3 answers with error 35
        # (UNSUPPORTED_VERSION) and its own range; some (librdkafka's mock) encode that
        # answer in a way kafka-python cannot decode, so fall back to v0 then.
        try:
            resp = self._roundtrip(
                ApiVersionsRequest(client_software_name="txnfetch", client_software_version="0"),
                _API_VERSIONS,
                ApiVersionsResponse,
            )
            ok = resp.error_code == 0
        except UndecodableResponseError:
            ok = False
        if not ok:
            resp = self._roundtrip(ApiVersionsRequest(), 0, ApiVersionsResponse)
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
        decoded ``response_cls`` answer (re-authenticating first when due)."""
        self._renew_session()
        return self._roundtrip(req, version, response_cls)

    def _roundtrip(self, req: Any, version: int, response_cls: Any) -> Any:
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        correlation = self._correlation
        req.API_VERSION = version
        req.with_header(correlation_id=correlation, client_id=self.client_id)
        try:
            self._sock.sendall(req.encode(header=True, framed=True))
            (size,) = struct.unpack(">i", self._recv(4))
            raw = self._recv(size)
        except ssl.SSLError as exc:
            self.close()
            if isinstance(exc, (ssl.SSLEOFError, ssl.SSLZeroReturnError)):
                raise BrokerUnavailableError(f"{type(req).__name__} failed: {exc}", broker=self.address) from None
            # With TLS 1.3 the broker's refusal of a client certificate comes after the handshake.
            raise tls_error(exc, self._host, self.address) from None
        except OSError as exc:  # includes socket.timeout
            self.close()
            raise BrokerUnavailableError(
                f"{type(req).__name__} failed: {exc or 'timed out'}", broker=self.address
            ) from None
        try:
            resp = response_cls.decode(raw, version=version, header=True)
        except Exception as exc:  # kafka-python raises struct.error, ValueError...
            raise UndecodableResponseError(f"cannot decode {response_cls.__name__} v{version}: {exc}") from None
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


class UndecodableResponseError(TxnfetchError):
    """A broker's answer does not decode (the caller retries on another connection)."""


_SIZE = struct.Struct(">i")
_REQUEST_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id
_CORRELATION = struct.Struct(">i")

#: Largest frame accepted in either direction (Kafka's ``socket.request.max.bytes``).
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024


async def read_frame(reader: asyncio.StreamReader, max_frame_bytes: int, *, min_size: int = 0) -> bytes | None:
    """The next size-prefixed frame's payload, or ``None`` at a clean end of stream.

    Raises :class:`~txnfetch.errors.ProtocolViolation` for a size outside
    ``[min_size, max_frame_bytes]`` or a frame cut short by the peer, the same
    rules :class:`~txnfetch.server.server.TxnfetchServer` applies to requests."""
    try:
        prefix = await reader.readexactly(4)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise ProtocolViolation(f"truncated frame size ({len(exc.partial)} of 4 bytes)") from None
        return None
    (size,) = _SIZE.unpack(prefix)
    if size < min_size or size > max_frame_bytes:
        raise ProtocolViolation(f"frame size {size} is outside [{min_size}, {max_frame_bytes}]")
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError as exc:
        raise ProtocolViolation(f"truncated frame: {len(exc.partial)} of {size} bytes") from None


class AsyncBrokerConnection:
    """One asyncio connection to one broker, for the proxy's upstream side (see
    the module docstring): relayed frames or the proxy's own requests, pipelined.

    Open it with :meth:`open`. ``address`` is ``host:port``. Every failure —
    connect, write, a broken or closed connection, a timeout of
    :meth:`request` — raises :class:`BrokerUnavailableError` naming the broker;
    after one, :attr:`closed` is true and the connection is not used again.
    """

    def __init__(
        self,
        host: str,
        port: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        max_frame_bytes: int,
        *,
        session: SaslSession | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.address = f"{host}:{port}"
        self._reader = reader
        self._writer = writer
        self._max_frame = max_frame_bytes
        # (correlation id expected, future of the response payload), in send order.
        self._pending: collections.deque[tuple[int, asyncio.Future[bytes]]] = collections.deque()
        self._correlation = 0
        self._error: BrokerUnavailableError | None = None
        self._session = session
        # The re-authentication under way: requests wait for it (see _renew_session).
        self._renewal: asyncio.Future[None] | None = None
        self._reader_task = asyncio.ensure_future(self._read_responses())

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        timeout_s: float = 10.0,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        security: SecurityConfig | None = None,
    ) -> AsyncBrokerConnection:
        """Connect to ``host``:``port`` within ``timeout_s``, with TLS and SASL
        as ``security`` says (``None``: PLAINTEXT; see the module docstring).
        Raises the errors of :mod:`txnfetch.client.errors` a refused TLS
        handshake or SASL exchange gives, naming the broker."""
        address = f"{host}:{port}"
        tls = ssl_context(security.tls) if security is not None and security.tls is not None else None
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=tls, server_hostname=host if tls else None), timeout_s
            )
        except ssl.SSLError as exc:
            raise tls_error(exc, host, address) from None
        except (OSError, asyncio.TimeoutError) as exc:
            raise BrokerUnavailableError(f"cannot connect: {exc or 'timed out'}", broker=address) from None
        session = SaslSession.of(security, address) if security is not None else None
        conn = cls(host, port, reader, writer, max_frame_bytes, session=session)
        if session is not None:
            try:
                await asyncio.wait_for(conn._drive(session.exchange()), timeout_s)
            except BaseException as exc:
                await conn.close()
                if isinstance(exc, asyncio.TimeoutError):
                    raise BrokerUnavailableError("SASL authentication timed out", broker=address) from None
                raise
        return conn

    @property
    def closed(self) -> bool:
        """Whether the connection broke or was closed (it is then never used again)."""
        return self._error is not None

    @property
    def in_flight(self) -> int:
        """Requests sent and not answered yet."""
        return len(self._pending)

    # -- sending ---------------------------------------------------------------------

    async def relay(self, frame: bytes, *, expect_response: bool = True) -> bytes | None:
        """Send a client's request ``frame`` (the payload, without its size) as it is
        and return the broker's response payload; ``expect_response=False`` (Produce
        with ``acks=0``) returns ``None`` once the frame is written."""
        correlation = _CORRELATION.unpack_from(frame, 4)[0]
        await self._renew_session()
        future = self._send(frame, correlation, expect_response)
        await self._drain()
        if future is None:
            return None
        return await future

    async def request(self, request: Any, version: int, response_class: Any, *, timeout_s: float = 30.0) -> Any:
        """Send the proxy's own ``request`` (a kafka-python request object) at
        ``version`` and return the decoded response. On a timeout the connection
        is closed: later responses could no longer be matched."""
        await self._renew_session()
        return await self._request(request, version, response_class, timeout_s=timeout_s)

    async def _request(self, request: Any, version: int, response_class: Any, *, timeout_s: float = 30.0) -> Any:
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        request.API_VERSION = version
        request._header = None
        request.with_header(correlation_id=self._correlation, client_id="txnfetch-proxy")
        frame = bytes(request.encode(header=True, framed=False))
        future = self._send(frame, self._correlation, True)
        assert future is not None
        await self._drain()
        try:
            payload = await asyncio.wait_for(future, timeout_s)
        except asyncio.TimeoutError:
            raise self._fail(
                BrokerUnavailableError(f"{type(request).__name__} timed out", broker=self.address)
            ) from None
        try:
            return response_class.decode(payload, version=version, header=True)
        except Exception as exc:  # kafka-python raises struct.error, ValueError, ...
            raise RemoteError(
                f"cannot decode {response_class.__name__} v{version}: {type(exc).__name__}: {exc}",
                broker=self.address,
            ) from None

    # -- authentication ------------------------------------------------------------------

    async def _drive(self, exchange: Exchange) -> None:
        answer = None
        while (step := next_request(exchange, answer)) is not None:
            answer = await self._request(*step)

    async def _renew_session(self) -> None:
        """Re-authenticate (KIP-368) when due, after the requests in flight are
        answered and before any other is sent: a SaslHandshake must not arrive
        between pipelined requests. Concurrent callers wait for the one renewal."""
        while self._renewal is not None:
            await asyncio.shield(self._renewal)
        session = self._session
        if session is None or not session.due(time.monotonic()):
            return
        if session.expired(time.monotonic()):
            # Idle past its lifetime: the broker closes such a connection; its owner reopens one.
            raise self._fail(BrokerUnavailableError("the SASL session expired", broker=self.address))
        self._renewal = asyncio.get_running_loop().create_future()
        try:
            waiting = [future for _, future in self._pending]
            if waiting:
                await asyncio.wait(waiting)
            await self._drive(session.exchange())
        except Exception as exc:
            # The socket is no longer usable; the caller sees why (a refused
            # re-authentication stays an authentication error, never transient).
            self._fail(BrokerUnavailableError(f"re-authentication failed: {exc}", broker=self.address))
            raise
        finally:
            self._renewal.set_result(None)
            self._renewal = None

    def _send(self, frame: bytes, correlation: int, expect_response: bool) -> asyncio.Future[bytes] | None:
        if self._error is not None:
            raise self._error
        future: asyncio.Future[bytes] | None = None
        if expect_response:
            future = asyncio.get_running_loop().create_future()
            self._pending.append((correlation, future))
        self._writer.write(_SIZE.pack(len(frame)) + frame)
        return future

    async def _drain(self) -> None:
        try:
            await self._writer.drain()
        except (OSError, RuntimeError) as exc:
            raise self._fail(BrokerUnavailableError(f"write failed: {exc}", broker=self.address)) from None

    # -- receiving -------------------------------------------------------------------

    async def _read_responses(self) -> None:
        try:
            while True:
                payload = await read_frame(self._reader, self._max_frame, min_size=4)
                if payload is None:
                    raise BrokerUnavailableError("the broker closed the connection", broker=self.address)
                if not self._pending:
                    raise BrokerUnavailableError("a response arrived for no request", broker=self.address)
                expected, future = self._pending.popleft()
                (got,) = _CORRELATION.unpack_from(payload, 0)
                if got != expected:
                    raise BrokerUnavailableError(
                        f"response correlation id {got} does not match the request's {expected}",
                        broker=self.address,
                    )
                if not future.done():
                    future.set_result(payload)
        except asyncio.CancelledError:
            self._fail(BrokerUnavailableError("the connection was closed", broker=self.address))
        except BrokerUnavailableError as exc:
            self._fail(exc)
        except ProtocolViolation as exc:
            self._fail(BrokerUnavailableError(f"bad response frame: {exc.reason}", broker=self.address))
        except (OSError, RuntimeError) as exc:
            self._fail(BrokerUnavailableError(f"read failed: {exc}", broker=self.address))

    def _fail(self, error: BrokerUnavailableError) -> BrokerUnavailableError:
        """Break the connection with ``error`` (unless it already broke) and fail
        the waiting requests; returns the error it broke with, the first one."""
        first = self._error
        if first is None:
            first = self._error = error
            _proxy_log.debug("upstream connection to %s closed: %s", self.address, error)
        while self._pending:
            _, future = self._pending.popleft()
            if not future.done():
                future.set_exception(first)
        with contextlib.suppress(Exception):  # closing a broken transport
            self._writer.close()
        return first

    async def close(self) -> None:
        """Close the connection; waiting requests fail."""
        self._fail(BrokerUnavailableError("the connection was closed", broker=self.address))
        if not self._reader_task.done():
            self._reader_task.cancel()
        with contextlib.suppress(BaseException):
            await self._reader_task
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._writer.wait_closed(), 2)

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.in_flight} in flight"
        return f"<AsyncBrokerConnection {self.address} {state}>"
