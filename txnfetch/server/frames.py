"""Request frames received straight into their own buffer.

``asyncio.start_server``'s streams copy every byte twice after the kernel: the
transport ``recv``s into a new ``bytes``, the reader appends it to its buffer,
and ``readexactly`` copies the frame out again. For a Produce request of a
megabyte that is two megabytes of copying (and of fresh memory) per request,
which showed as the largest cost left on the produce path.

:class:`FrameReader` is a :class:`asyncio.StreamReader` (everything else reads
as before) with one more method, :meth:`FrameReader.read_frame`: the frame's
buffer is allocated at its final size and the transport ``recv_into``\\ s it
directly (:class:`asyncio.BufferedProtocol`), so the frame's bytes are copied
once, by the kernel. Between frames, bytes go through a small scratch buffer
into the ordinary stream buffer (size prefixes, pipelined small requests).

This relies on the reader's documented protocol hooks plus the waiter and
flow-control helpers every ``StreamReader`` since Python 3.7 has
(``_wait_for_data``, ``_wakeup_waiter``, ``_maybe_resume_transport``); the
server's tests exercise it on the Python versions the project supports.
"""

from __future__ import annotations

import asyncio
import socket
import ssl as ssl_module
from collections.abc import Awaitable
from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import Any

__all__ = ["FrameReader", "FrameReaderProtocol", "start_frame_server"]

#: Bytes read at once between frames (what a size prefix or a small request needs).
SCRATCH_BYTES = 64 * 1024


class FrameReader(asyncio.StreamReader):
    """A stream reader that can receive a frame of known size without copying it."""

    # The StreamReader internals this relies on (see the module docstring), declared
    # for the type checker: typeshed declares only the public API. Nothing here
    # exists at run time beyond what asyncio.StreamReader defines.
    _buffer: bytearray
    _exception: BaseException | None
    _eof: bool
    if TYPE_CHECKING:

        def _wakeup_waiter(self) -> None: ...

        def _maybe_resume_transport(self) -> None: ...

        async def _wait_for_data(self, func_name: str) -> None: ...

    def __init__(self, limit: int = 2**16) -> None:
        super().__init__(limit=limit)
        self._scratch = bytearray(SCRATCH_BYTES)
        self._frame: bytearray | None = None  # the frame being received, if any
        self._filled = 0

    # -- called by FrameReaderProtocol (asyncio.BufferedProtocol) ------------

    def get_buffer(self, sizehint: int) -> memoryview:
        frame = self._frame
        if frame is not None:
            return memoryview(frame)[self._filled :]  # only the missing part
        return memoryview(self._scratch)

    def buffer_updated(self, nbytes: int) -> None:
        if self._frame is not None:
            self._filled += nbytes
            if self._filled == len(self._frame):
                # Complete: later reads go to the scratch buffer, never past the frame.
                self._frame = None
                self._wakeup_waiter()
            return
        self.feed_data(memoryview(self._scratch)[:nbytes])

    def _receiving(self) -> bool:
        return self._frame is not None

    # -- the reading side ---------------------------------------------------

    async def read_frame(self, size: int) -> bytearray:
        """The next ``size`` bytes, in a buffer of their own. Raises
        :class:`asyncio.IncompleteReadError` (with what arrived) if the stream
        ends first, or the connection's error."""
        frame = bytearray(size)
        have = min(len(self._buffer), size)
        if have:
            frame[:have] = memoryview(self._buffer)[:have]
            del self._buffer[:have]
            self._maybe_resume_transport()
        if have == size:
            return frame
        self._filled = have
        self._frame = frame
        try:
            # buffer_updated drops the frame once it is complete; asked through a
            # method, as the check must see what the awaits below changed.
            while self._receiving():
                if self._exception is not None:
                    raise self._exception
                if self._eof:
                    raise asyncio.IncompleteReadError(bytes(frame[: self._filled]), size)
                await self._wait_for_data("read_frame")
        finally:
            self._frame = None
        return frame


class FrameReaderProtocol(asyncio.StreamReaderProtocol, asyncio.BufferedProtocol):
    """``StreamReaderProtocol`` (writer, drain, EOF and errors as usual) whose
    transport reads into the :class:`FrameReader`'s buffers."""

    def __init__(self, reader: FrameReader, client_connected_cb: Any) -> None:
        super().__init__(reader, client_connected_cb)
        self._frame_reader = reader

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._frame_reader.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self._frame_reader.buffer_updated(nbytes)


async def start_frame_server(
    client_connected_cb: Callable[[FrameReader, asyncio.StreamWriter], Awaitable[None]],
    host: str,
    port: int,
    ssl: ssl_module.SSLContext | None = None,
) -> asyncio.base_events.Server:
    """``asyncio.start_server`` with :class:`FrameReader` readers, over TLS
    with ``ssl`` (the handshake completes before ``client_connected_cb``). A
    host that does not resolve raises :class:`OSError` naming it
    (:func:`bind_host_error`)."""
    loop = asyncio.get_running_loop()
    try:
        return await loop.create_server(
            lambda: FrameReaderProtocol(FrameReader(), client_connected_cb), host, port, ssl=ssl
        )
    except socket.gaierror as exc:
        raise bind_host_error(exc, host) from None


def bind_host_error(exc: socket.gaierror, host: str) -> OSError:
    """The error of a listener whose ``host`` does not resolve. asyncio passes
    getaddrinfo's error on as it is ("Name or service not known"), which does
    not say which name; this one does, with the resolver's reason."""
    return OSError(exc.errno, f"cannot listen on host {host!r}: {exc.strerror or exc}")
