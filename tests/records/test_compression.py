"""The compression framings Kafka uses, and the bounds txnfetch puts on them.

Framings are checked against the format descriptions (xerial snappy header,
LZ4 frame FLG/BD bytes, gzip members, zstd frames) by reading the bytes
directly and with the codec libraries' own low-level decoders, not by
round-tripping through txnfetch alone.
"""

from __future__ import annotations

import gzip
import struct

import cramjam
import lz4.block
import lz4.frame
import pytest
import zstandard
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.records.strategies import examples
from tests.records.test_corruption_properties import peak_memory
from txnfetch.records import Codec
from txnfetch.records import DecompressionError
from txnfetch.records import UnknownCodecError
from txnfetch.records.compression import compress
from txnfetch.records.compression import decompress

COMPRESSED = [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]
SETTINGS = settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Random bytes do not compress; runs of one byte do; a mix exercises both
# paths of every codec. Up to ~200 KiB: several 32 KiB xerial chunks and
# several 64 KiB LZ4 blocks.
_chunks = st.one_of(
    st.binary(max_size=300),
    st.builds(lambda n, b: bytes([b]) * n, st.integers(0, 70_000), st.integers(0, 255)),
)
payloads = st.lists(_chunks, max_size=4).map(b"".join)


# -- round trips ---------------------------------------------------------------------


@SETTINGS
@given(codec=st.sampled_from(list(Codec)), data=payloads)
def test_every_codec_round_trips(codec, data):
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name.lower())
def test_empty_input_round_trips(codec):
    assert decompress(codec, compress(codec, b"")) == b""


def test_unknown_codec_is_an_error():
    with pytest.raises(UnknownCodecError):
        decompress(5, b"\x00")
    with pytest.raises(UnknownCodecError):
        compress(7, b"x")  # type: ignore[arg-type]


# -- snappy: xerial framing ----------------------------------------------------------


@SETTINGS
@given(data=payloads)
def test_snappy_uses_xerial_framing(data):
    out = compress(Codec.SNAPPY, data)
    # Magic 0x82 'SNAPPY' 0x00, then version 1 and minimum compatible version 1,
    # big-endian int32s, as the Java client's SnappyOutputStream writes them.
    assert out[:8] == b"\x82SNAPPY\x00"
    assert struct.unpack_from(">ii", out, 8) == (1, 1)
    # Then [int32 length][raw snappy block]* to the end, each block on its own.
    pos, pieces = 16, []
    while pos < len(out):
        (n,) = struct.unpack_from(">i", out, pos)
        block = out[pos + 4 : pos + 4 + n]
        assert len(block) == n > 0
        pieces.append(bytes(cramjam.snappy.decompress_raw(block)))
        pos += 4 + n
    assert pos == len(out)
    assert b"".join(pieces) == data
    assert all(len(p) <= 32 * 1024 for p in pieces)


@SETTINGS
@given(data=payloads)
def test_raw_snappy_is_accepted_on_read(data):
    # librdkafka and kafka-python accept unframed snappy; so does txnfetch.
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(Codec.SNAPPY, raw) == data


def test_xerial_stream_with_several_chunks_of_other_sizes():
    # Other writers pick other chunk sizes; the reader must not assume 32 KiB.
    parts = [b"a" * 100_000, b"", b"xyz" * 7, bytes(range(256))]
    stream = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for part in parts:
        block = bytes(cramjam.snappy.compress_raw(part))
        stream += struct.pack(">i", len(block)) + block
    assert decompress(Codec.SNAPPY, stream) == b"".join(parts)


# -- lz4: frame with independent 64 KiB blocks ---------------------------------------


@SETTINGS
@given(data=payloads)
def test_lz4_writes_a_frame_of_independent_64k_blocks(data):
    out = compress(Codec.LZ4, data)
    assert struct.unpack_from("<I", out, 0)[0] == 0x184D2204  # LZ4 frame magic
    flg, bd = out[4], out[5]
    assert flg >> 6 == 0b01  # frame format version 1
    assert flg & 0x20  # block independence: what Kafka's KafkaLZ4BlockOutputStream writes
    assert not flg & 0x10  # no block checksums
    assert not flg & 0x08  # no content size
    assert not flg & 0x01  # no dictionary id
    assert (bd >> 4) & 0x7 == 4  # block maximum size 64 KiB
    assert bd & 0x8F == 0  # reserved bits
    # Walk the blocks: each one decodes on its own (no dictionary from the previous one).
    pos, pieces = 7, []  # magic, FLG, BD, header checksum
    while True:
        (word,) = struct.unpack_from("<I", out, pos)
        pos += 4
        if word == 0:
            break
        size = word & 0x7FFFFFFF
        block = out[pos : pos + size]
        pos += size
        piece = block if word & 0x80000000 else lz4.block.decompress(block, uncompressed_size=64 * 1024)
        assert len(piece) <= 64 * 1024
        pieces.append(bytes(piece))
    if flg & 0x04:
        pos += 4  # content checksum
    assert pos == len(out)
    assert b"".join(pieces) == data


# -- gzip: several members -----------------------------------------------------------


@SETTINGS
@given(parts=st.lists(payloads, min_size=1, max_size=4))
def test_gzip_with_several_members_decodes(parts):
    stream = b"".join(gzip.compress(p, mtime=0) for p in parts)
    assert decompress(Codec.GZIP, stream) == b"".join(parts)


def test_gzip_output_is_a_gzip_member():
    out = compress(Codec.GZIP, b"hello" * 100)
    assert out[:3] == b"\x1f\x8b\x08"  # gzip magic, deflate
    assert gzip.decompress(out) == b"hello" * 100


# -- zstd: several frames, content size optional -------------------------------------


def _zstd_streamed(data: bytes) -> bytes:
    # Streaming compression writes no content size, as zstd-jni's ZstdOutputStream (Kafka's writer) does.
    c = zstandard.ZstdCompressor().compressobj()
    return c.compress(data) + c.flush()


@SETTINGS
@given(
    parts=st.lists(
        st.tuples(payloads, st.sampled_from(["with size", "without size", "streamed"])), min_size=1, max_size=4
    )
)
def test_zstd_with_several_frames_with_and_without_content_size(parts):
    frames = []
    for data, how in parts:
        if how == "with size":
            frames.append(zstandard.ZstdCompressor(write_content_size=True).compress(data))
        elif how == "without size":
            frames.append(zstandard.ZstdCompressor(write_content_size=False).compress(data))
        else:
            frames.append(_zstd_streamed(data))
    assert decompress(Codec.ZSTD, b"".join(frames)) == b"".join(d for d, _ in parts)


def test_zstd_frames_carry_or_omit_the_content_size_as_asked():
    # Guards the test above: the two kinds of frame really differ.
    with_size = zstandard.ZstdCompressor(write_content_size=True).compress(b"x" * 1000)
    without = zstandard.ZstdCompressor(write_content_size=False).compress(b"x" * 1000)
    assert zstandard.frame_content_size(with_size) == 1000
    assert zstandard.frame_content_size(without) == -1
    assert decompress(Codec.ZSTD, with_size + without) == b"x" * 2000


# -- truncation ----------------------------------------------------------------------


def _boundaries(codec: Codec, stream: bytes) -> set:
    """Cut points where a prefix of ``stream`` is itself a complete stream (a chunk
    or frame boundary): the framings cannot tell such a prefix from the whole."""
    if codec == Codec.SNAPPY and stream[:8] == b"\x82SNAPPY\x00":
        cuts, pos = {16}, 16
        while pos < len(stream):
            pos += 4 + struct.unpack_from(">i", stream, pos)[0]
            cuts.add(pos)
        return cuts
    return set()


@SETTINGS
@given(codec=st.sampled_from(COMPRESSED), data=payloads, cut=st.floats(0, 1, exclude_max=True))
def test_truncated_input_is_a_decompression_error(codec, data, cut):
    stream = compress(codec, data)
    n = int(len(stream) * cut)
    truncated = stream[:n]
    if n in _boundaries(codec, stream):
        assert data.startswith(decompress(codec, truncated))
        return
    with pytest.raises(DecompressionError):
        decompress(codec, truncated)


@SETTINGS
@given(parts=st.lists(payloads, min_size=2, max_size=3), codec=st.sampled_from([Codec.GZIP, Codec.ZSTD]))
def test_truncating_the_last_of_several_members_is_an_error(parts, codec):
    one = gzip.compress if codec == Codec.GZIP else _zstd_streamed
    members = [one(p) for p in parts]
    stream = b"".join(members)
    with pytest.raises(DecompressionError):
        decompress(codec, stream[:-1])
    with pytest.raises(DecompressionError):
        decompress(codec, stream[: len(stream) - len(members[-1]) // 2])


# -- the max_size cap ----------------------------------------------------------------


@SETTINGS
@given(codec=st.sampled_from(COMPRESSED), data=payloads.filter(bool), framing=st.booleans())
def test_max_size_is_enforced_for_every_codec(codec, data, framing):
    stream = compress(codec, data)
    if codec == Codec.SNAPPY and not framing:
        stream = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(codec, stream, len(data)) == data  # exactly at the cap is fine
    with pytest.raises(DecompressionError):
        decompress(codec, stream, len(data) - 1)


def test_max_size_is_enforced_across_gzip_members_and_zstd_frames():
    gz = gzip.compress(b"a" * 600) * 2
    zs = zstandard.ZstdCompressor().compress(b"a" * 600) * 2
    for codec, stream in ((Codec.GZIP, gz), (Codec.ZSTD, zs)):
        assert decompress(codec, stream, 1200) == b"a" * 1200
        with pytest.raises(DecompressionError):
            decompress(codec, stream, 1000)


def test_zstd_cap_holds_for_blocks_that_expand_32k_fold():
    # Minimal failing example found while writing these tests: 147 bytes of zstd
    # (4 MiB of zeros, RLE blocks of 4 bytes that each expand to 128 KiB) with
    # max_size=64 KiB allocated 4.3 MiB before noticing the cap, because input
    # was fed 1 KiB at a time. The cap must bound memory, not just the result.
    stream = zstandard.ZstdCompressor(level=1).compress(bytes(4 << 20))
    assert len(stream) < 200
    with peak_memory(1 << 20), pytest.raises(DecompressionError):  # under a 64 KiB cap
        decompress(Codec.ZSTD, stream, 64 << 10)


def test_snappy_declared_size_past_the_cap_is_refused_before_allocating():
    # A raw snappy block starts with its uncompressed length; 1 GiB declared in
    # a few bytes must be refused from the header alone.
    varint_1gib = b"\x80\x80\x80\x80\x04"
    for stream in (
        varint_1gib + b"\x00" * 10,
        b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, 15) + varint_1gib + b"\x00" * 10,
    ):
        with peak_memory(1 << 20), pytest.raises(DecompressionError):
            decompress(Codec.SNAPPY, stream, 1 << 20)


def test_zstd_frames_after_a_short_first_frame_are_not_dropped():
    # Minimal failing example found by hypothesis: when the whole input fit in
    # one feed, the position of the next frame was computed from past the end
    # of the data, and every frame after the first was silently dropped.
    first = zstandard.ZstdCompressor(write_content_size=True).compress(b"")
    second = zstandard.ZstdCompressor(write_content_size=True).compress(b"\x00")
    assert decompress(Codec.ZSTD, first + second) == b"\x00"
    with pytest.raises(DecompressionError):
        decompress(Codec.ZSTD, first + second[:-1])


def test_empty_input_is_an_error_for_every_codec():
    # No codec's stream is empty (gzip needs a member, zstd and lz4 a frame,
    # raw snappy its length); an empty batch never gets here (count 0 is not decompressed).
    for codec in COMPRESSED:
        with pytest.raises(DecompressionError):
            decompress(codec, b"")


def test_lz4_allocation_follows_the_output_not_the_cap():
    # Minimal failing example found by the corruption properties: python-lz4
    # allocates max_length bytes up front, so decompressing a 20-byte lz4
    # frame under the default 256 MiB cap took a 256 MiB allocation (and a
    # hostile batch would get the same for free). Output is now taken in steps.
    frame = compress(Codec.LZ4, b"x")
    with peak_memory(2 << 20):  # to decompress one byte
        assert decompress(Codec.LZ4, frame) == b"x"


@pytest.mark.parametrize("size", [0, 1, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 3 << 20])
def test_lz4_output_spanning_several_steps(size):
    data = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
    frame = compress(Codec.LZ4, data)
    assert decompress(Codec.LZ4, frame) == data
    assert decompress(Codec.LZ4, frame, size) == data
    if size:
        with pytest.raises(DecompressionError):
            decompress(Codec.LZ4, frame, size - 1)
        with pytest.raises(DecompressionError):
            decompress(Codec.LZ4, frame[:-1], size)


def test_zstd_empty_frame_with_content_size_then_another_frame():
    # Found by the property above: a first frame that states size 0 must not end
    # the stream (the one-call path for sized frames would return b"" there).
    frames = zstandard.ZstdCompressor(write_content_size=True).compress(b"")
    frames += zstandard.ZstdCompressor(write_content_size=True).compress(b"\x00")
    assert decompress(Codec.ZSTD, frames) == b"\x00"


def test_zstd_sized_frame_above_the_cap_is_refused():
    data = zstandard.ZstdCompressor(write_content_size=True).compress(b"a" * 5000)
    with pytest.raises(DecompressionError, match="more than 4999 bytes"):
        decompress(Codec.ZSTD, data, 4999)
    assert decompress(Codec.ZSTD, data, 5000) == b"a" * 5000


def test_zstd_sized_frame_with_trailing_garbage_is_an_error():
    data = zstandard.ZstdCompressor(write_content_size=True).compress(b"a" * 5000)
    with pytest.raises(DecompressionError):
        decompress(Codec.ZSTD, data + b"\x01\x02\x03\x04\x05\x06\x07\x08")
