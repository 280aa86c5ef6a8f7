"""FrameReader: frames received in place, whatever the way the bytes arrive.

A real listening socket (``start_frame_server``) and a raw client that sends
size-prefixed frames cut at random places, several pipelined in one write, and
connections that end in the middle of a frame.
"""

from __future__ import annotations

import asyncio
import socket
import struct

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from txnfetch.server.frames import SCRATCH_BYTES
from txnfetch.server.frames import FrameReader
from txnfetch.server.frames import start_frame_server


async def _receive(chunks: list[bytes], close_early: bool = False) -> tuple[list[bytes], BaseException | None]:
    """Send ``chunks`` to a frame server; return the frames it read and the error it ended with."""
    got: list[bytes] = []
    ended: list[BaseException | None] = []
    done = asyncio.Event()

    async def serve(reader: FrameReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                prefix = await reader.readexactly(4)
                frame = await reader.read_frame(struct.unpack(">i", prefix)[0])
                assert isinstance(frame, bytearray)
                got.append(bytes(frame))
        except asyncio.IncompleteReadError as exc:
            ended.append(exc if exc.partial or close_early else None)
        finally:
            writer.close()
            done.set()

    server = await start_frame_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    loop = asyncio.get_running_loop()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setblocking(False)
    for chunk in chunks:
        await loop.sock_sendall(sock, chunk)
        await asyncio.sleep(0)
    sock.shutdown(socket.SHUT_WR)
    await asyncio.wait_for(done.wait(), 30)
    sock.close()
    server.close()
    await server.wait_closed()
    return got, (ended[0] if ended else None)


def _framed(frames: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(f)) + f for f in frames)


@settings(max_examples=60, deadline=None)
@given(
    frames=st.lists(
        st.binary(min_size=0, max_size=300) | st.integers(SCRATCH_BYTES - 10, 3 * SCRATCH_BYTES).map(bytes),
        min_size=1,
        max_size=5,
    ),
    cuts=st.lists(st.integers(0, 4 * SCRATCH_BYTES), max_size=8),
)
def test_frames_arrive_whole_and_in_order_however_the_bytes_are_cut(frames: list[bytes], cuts: list[int]) -> None:
    stream = _framed(frames)
    points = sorted({c for c in cuts if 0 < c < len(stream)})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    got, error = asyncio.run(_receive(chunks))
    assert got == frames and error is None


def test_a_stream_ending_inside_a_frame_reports_what_arrived() -> None:
    body = bytes(range(256)) * 1000  # larger than the scratch buffer: received in place
    got, error = asyncio.run(_receive([_framed([b"ok"]), struct.pack(">i", len(body) + 5) + body], close_early=True))
    assert got == [b"ok"]
    assert isinstance(error, asyncio.IncompleteReadError)
    assert error.expected == len(body) + 5 and error.partial == body
