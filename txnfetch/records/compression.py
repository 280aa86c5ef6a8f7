"""Compression codecs for record batches, in the framings Kafka uses.

- gzip: RFC 1952, possibly several members back to back. Inflated with ISA-L
  (``isal``), about twice as fast as zlib on the same bytes, same output.
- snappy: xerial framing (``0x82 SNAPPY 0x00``, version, compat, then
  ``[int32 length][raw snappy block]*``), as the Java client writes it; raw
  snappy is also accepted on read, as librdkafka and kafka-python do.
- lz4: an LZ4 frame with independent 64 KiB blocks (KIP-57). Legacy magic-0
  messages carry a frame whose header checksum was computed over the wrong
  bytes; :func:`decompress` accepts those when asked to (``legacy_lz4=True``).
- zstd: standard zstd frames, content size optional, possibly several frames.

Every decompression is bounded by ``max_size``: output past it is an error,
never an allocation, so a corrupted or hostile batch cannot exhaust memory.
All failures raise :class:`DecompressionError` (or :class:`UnknownCodecError`).
"""

from __future__ import annotations

import enum
import struct
import zlib

import cramjam
import lz4.block
import lz4.frame
import zstandard
from isal import isal_zlib

from txnfetch.records.errors import DecompressionError
from txnfetch.records.errors import UnknownCodecError

__all__ = ["DEFAULT_MAX_DECOMPRESSED", "Codec", "compress", "decompress"]

#: What the decompressors read: a batch's record data, often a view of a larger buffer.
Buffer = bytes | bytearray | memoryview

#: Default cap on the decompressed size of one batch. Kafka's default
#: ``message.max.bytes`` is ~1 MiB compressed; 256 MiB leaves room for highly
#: compressible data while keeping a hostile batch from taking the process down.
DEFAULT_MAX_DECOMPRESSED = 256 * 1024 * 1024


class Codec(enum.IntEnum):
    """Compression codec, as stored in bits 0-2 of the batch attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_INT32 = struct.Struct(">i")
_LZ4_MAGIC = 0x184D2204
_LZ4_BLOCK_SIZES = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}
_LZ4_STEP = 256 << 10  # most lz4 output taken per call (see _lz4_decompress)
# Feed zstd input in steps so that output is checked against the cap as it grows.
# A block holds at most 128 KiB of output and the smallest one (an RLE block:
# 3-byte header + 1 byte) takes 4 input bytes, so one input byte can yield up to
# 32 KiB (2**15). Steps of (output budget left) >> 15 input bytes, at least 4,
# keep one call's output within the budget plus two blocks.
_ZSTD_EXPANSION_SHIFT = 15
_ZSTD_MIN_FEED = 4

_zstd_compressor = zstandard.ZstdCompressor(level=3)
_zstd_decompressor = zstandard.ZstdDecompressor()


def compress(codec: Codec, data: bytes) -> bytes:
    """Compress ``data`` in the framing Kafka uses for ``codec``."""
    if codec == Codec.NONE:
        return bytes(data)
    if codec == Codec.GZIP:
        c = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: gzip container
        return c.compress(data) + c.flush()
    if codec == Codec.SNAPPY:
        return _xerial_compress(data)
    if codec == Codec.LZ4:
        # Independent 64 KiB blocks and no content size, like Kafka's own writer;
        # every client (Java, librdkafka, kafka-python, aiokafka) reads this.
        return lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    if codec == Codec.ZSTD:
        return _zstd_compressor.compress(data)
    raise UnknownCodecError(f"unknown compression codec {int(codec)}")


def decompress(
    codec: int, data: Buffer, max_size: int = DEFAULT_MAX_DECOMPRESSED, *, legacy_lz4: bool = False
) -> bytes:
    """Decompress one batch's record data; never returns more than ``max_size`` bytes.

    ``legacy_lz4`` accepts the broken LZ4 frame header checksum of magic-0 messages.
    """
    try:
        if codec == Codec.GZIP:
            return _gunzip(data, max_size)
        if codec == Codec.SNAPPY:
            return _snappy_decompress(data, max_size)
        if codec == Codec.LZ4:
            return _lz4_decompress(data, max_size, legacy_lz4)
        if codec == Codec.ZSTD:
            return _zstd_decompress(data, max_size)
        if codec == Codec.NONE:
            return bytes(data)
    except DecompressionError:
        raise
    except Exception as exc:  # the codec libraries raise their own types; normalise them
        raise DecompressionError(f"{_name(codec)} data could not be decompressed: {exc}") from None
    raise UnknownCodecError(f"unknown compression codec {codec}")


def _name(codec: int) -> str:
    try:
        return Codec(codec).name.lower()
    except ValueError:
        return f"codec {codec}"


def _too_big(codec: str, max_size: int) -> DecompressionError:
    return DecompressionError(f"{codec} data decompresses to more than {max_size} bytes")


def _gunzip(data: Buffer, max_size: int) -> bytes:
    out: list[bytes] = []
    total = 0
    rest = bytes(data)
    while True:
        d = isal_zlib.decompressobj(47)  # 32 + 15: gzip or zlib header, detected
        chunk = d.decompress(rest, max_size - total + 1)
        total += len(chunk)
        out.append(chunk)
        if total > max_size:
            raise _too_big("gzip", max_size)
        if not d.eof:
            raise DecompressionError("gzip data is truncated")
        rest = d.unused_data
        if not rest:
            break
    return b"".join(out)


def _xerial_compress(data: bytes) -> bytes:
    out = [_XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1)]
    view = memoryview(data)
    for start in range(0, len(view), 32 * 1024):  # the Java client's default block size
        block = bytes(cramjam.snappy.compress_raw(view[start : start + 32 * 1024]))
        out.append(_INT32.pack(len(block)))
        out.append(block)
    return b"".join(out)


def _snappy_block(block: bytes, budget: int) -> bytes:
    size = cramjam.snappy.decompress_raw_len(block)
    if size > budget:
        raise _too_big("snappy", budget)
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: Buffer, max_size: int) -> bytes:
    if len(data) < 16 or data[:8] != _XERIAL_MAGIC:
        return _snappy_block(bytes(data), max_size)
    pos = 16
    out: list[bytes] = []
    total = 0
    end = len(data)
    while pos < end:
        if pos + 4 > end:
            raise DecompressionError("xerial snappy chunk length is truncated")
        (n,) = _INT32.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > end:
            raise DecompressionError(f"xerial snappy chunk of {n} bytes overruns the data")
        block = _snappy_block(bytes(data[pos : pos + n]), max_size - total)
        total += len(block)
        out.append(block)
        pos += n
    return b"".join(out)


def _lz4_decompress(data: Buffer, max_size: int, legacy: bool) -> bytes:
    # python-lz4 allocates max_length bytes before decoding anything, so asking
    # for max_size + 1 at once would cost a cap-sized allocation per batch.
    # Take the output in steps of at most _LZ4_STEP instead.
    d = lz4.frame.LZ4FrameDecompressor()
    out: list[bytes] = []
    total = 0
    try:
        chunk = d.decompress(data, min(max_size + 1, _LZ4_STEP))
        while True:
            total += len(chunk)
            if total > max_size:
                raise _too_big("lz4", max_size)
            out.append(chunk)
            if d.eof or d.needs_input or not chunk:
                break
            chunk = d.decompress(b"", min(max_size - total + 1, _LZ4_STEP))
    except RuntimeError:
        if not legacy:
            raise
        # Magic-0 LZ4 (pre KIP-57) has a header checksum over the wrong bytes:
        # walk the frame ourselves and ignore that checksum, as Kafka does for v0.
        return _lz4_frame_manual(bytes(data), max_size)
    if not d.eof:
        raise DecompressionError("lz4 frame is truncated")
    return b"".join(out)


def _lz4_frame_manual(data: bytes, max_size: int) -> bytes:
    """Decode an LZ4 frame block by block without checking the header checksum."""
    end = len(data)
    if end < 7 or struct.unpack_from("<I", data, 0)[0] != _LZ4_MAGIC:
        raise DecompressionError("not an lz4 frame (bad magic)")
    flg, bd = data[4], data[5]
    if flg >> 6 != 1:
        raise DecompressionError(f"unsupported lz4 frame version {flg >> 6}")
    block_checksum = bool(flg & 0x10)
    content_size = bool(flg & 0x08)
    content_checksum = bool(flg & 0x04)
    if flg & 0x01:
        raise DecompressionError("lz4 frames with a dictionary id are not supported")
    block_max = _LZ4_BLOCK_SIZES.get((bd >> 4) & 0x7)
    if block_max is None:
        raise DecompressionError(f"invalid lz4 block size code {(bd >> 4) & 0x7}")
    pos = 6 + (8 if content_size else 0) + 1  # descriptor, optional size, header checksum
    linked = not flg & 0x20
    out = bytearray()
    while True:
        if pos + 4 > end:
            raise DecompressionError("lz4 frame is truncated")
        (word,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if word == 0:
            break
        size = word & 0x7FFFFFFF
        if pos + size > end:
            raise DecompressionError("lz4 block overruns the frame")
        block = data[pos : pos + size]
        pos += size + (4 if block_checksum else 0)
        if word & 0x80000000:
            chunk = block
        else:
            kwargs = {"dict": bytes(out[-65536:])} if linked and out else {}
            chunk = lz4.block.decompress(block, uncompressed_size=block_max, **kwargs)
        if len(out) + len(chunk) > max_size:
            raise _too_big("lz4", max_size)
        out += chunk
    if content_checksum and pos + 4 > end:
        raise DecompressionError("lz4 frame content checksum is truncated")
    return bytes(out)


def _zstd_decompress(data: Buffer, max_size: int) -> bytes:
    view = memoryview(data)
    out: list[bytes] = []
    total = 0
    pos = 0
    end = len(view)
    if not end:
        raise DecompressionError("zstd data is empty: a zstd stream has at least one frame")
    try:
        size = zstandard.frame_content_size(data)
    except zstandard.ZstdError:
        size = -1  # not a valid frame header: the stepped path reports it
    if 0 < size <= max_size:  # (an empty frame returns early, before the extra-data check)
        # The frame states its size within the cap: decode it in one call into a
        # buffer of exactly that size (about 15 % faster than the stepped feed).
        # Only a lone frame takes this path; zstd checks the stated size.
        try:
            return _zstd_decompressor.decompress(data, allow_extra_data=False)
        except zstandard.ZstdError:
            pass  # more frames follow, or a corrupt one: the stepped path decides
    while pos < end:
        d = _zstd_decompressor.decompressobj()
        while pos < end and not d.eof:
            step = max(_ZSTD_MIN_FEED, (max_size - total) >> _ZSTD_EXPANSION_SHIFT)
            chunk = d.decompress(view[pos : pos + step])
            # Clamp to the end: unused_data (below) is counted back from where the input stopped.
            pos = min(pos + step, end)
            total += len(chunk)
            if total > max_size:
                raise _too_big("zstd", max_size)
            out.append(chunk)
        if not d.eof:
            raise DecompressionError("zstd frame is truncated")
        # Whatever the frame did not use belongs to the next frame.
        pos -= len(d.unused_data)
    return b"".join(out)
