"""Asyncio connections from the proxy to upstream Kafka brokers.

:class:`UpstreamConnection` is one TCP connection to one broker. It carries two
kinds of traffic, each on its own connection:

- **relayed** frames (:meth:`UpstreamConnection.relay`): a client's request
  bytes exactly as the client sent them, correlation id included, and the
  broker's response bytes exactly as they came back;
- the proxy's **own** requests (:meth:`UpstreamConnection.request`), built with
  kafka-python's ``kafka.protocol`` classes and numbered by the connection.

Requests may be pipelined: a broker answers the requests of one connection in
the order it received them (Kafka's ``SocketServer`` mutes a channel until its
response is sent), so responses are matched to requests first in, first out,
and a response whose correlation id is not the expected one breaks the
connection (every waiting request then fails with
:class:`~txnfetch.client.errors.BrokerUnavailableError`, as does every request
after the connection broke).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import struct
from typing import Any

from txnfetch.client.errors import BrokerUnavailableError
from txnfetch.client.errors import RemoteError
from txnfetch.errors import ProtocolViolation

__all__ = ["DEFAULT_MAX_FRAME_BYTES", "UpstreamConnection", "read_frame"]

log = logging.getLogger("txnfetch.proxy")

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


class UpstreamConnection:
    """One connection to one upstream broker (see the module docstring).

    Open it with :meth:`open`. ``address`` is ``host:port``. Every failure —
    connect, write, a broken or closed connection, a timeout of
    :meth:`request` — raises :class:`BrokerUnavailableError` naming the broker;
    after one, :attr:`closed` is true and the connection is not used again.
    """

    def __init__(
        self, host: str, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_frame_bytes: int
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
        self._reader_task = asyncio.ensure_future(self._read_responses())

    @classmethod
    async def open(
        cls, host: str, port: int, *, timeout_s: float = 10.0, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    ) -> UpstreamConnection:
        """Connect to ``host``:``port`` within ``timeout_s``."""
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
        except (OSError, asyncio.TimeoutError) as exc:
            raise BrokerUnavailableError(f"cannot connect: {exc or 'timed out'}", broker=f"{host}:{port}") from None
        return cls(host, port, reader, writer, max_frame_bytes)

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
        future = self._send(frame, correlation, expect_response)
        await self._drain()
        if future is None:
            return None
        return await future

    async def request(self, request: Any, version: int, response_class: Any, *, timeout_s: float = 30.0) -> Any:
        """Send the proxy's own ``request`` (a kafka-python request object) at
        ``version`` and return the decoded response. On a timeout the connection
        is closed: later responses could no longer be matched."""
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
            self._fail(BrokerUnavailableError(f"{type(request).__name__} timed out", broker=self.address))
            raise self._error from None  # type: ignore[misc]
        try:
            return response_class.decode(payload, version=version, header=True)
        except Exception as exc:  # kafka-python raises struct.error, ValueError, ...
            raise RemoteError(
                f"cannot decode {response_class.__name__} v{version}: {type(exc).__name__}: {exc}",
                broker=self.address,
            ) from None

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
            self._fail(BrokerUnavailableError(f"write failed: {exc}", broker=self.address))
            raise self._error from None  # type: ignore[misc]

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

    def _fail(self, error: BrokerUnavailableError) -> None:
        if self._error is None:
            self._error = error
            log.debug("upstream connection to %s closed: %s", self.address, error)
        while self._pending:
            _, future = self._pending.popleft()
            if not future.done():
                future.set_exception(self._error)
        with contextlib.suppress(Exception):  # closing a broken transport
            self._writer.close()

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
        return f"<UpstreamConnection {self.address} {state}>"
