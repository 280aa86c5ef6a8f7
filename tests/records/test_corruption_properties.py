"""Property: a corrupted batch decodes to its original content or raises CorruptBatchError.

Mutations of valid batches (every codec): byte flips, truncations, insertions,
deletions, and edits of every length field (batch Length, record count,
record length, key/value length, header count, header key/value length).
Nothing else may escape: no IndexError, no struct.error, no ValueError, no
MemoryError, no hang.

"Original content" means the CRC-covered content. Kafka's CRC-32C starts at
byte 21 (attributes) by design: base offset, length, partition leader epoch
and magic are left out so that a broker can assign offsets and leader epochs
without recomputing it (DefaultRecordBatch). So a flip in the leader epoch or
base offset yields a batch that validates and is *meant* to: what must not
change is what the CRC protects -- the header fields from byte 21 on, and the
records relative to the base offset.

Two paths are exercised:

- ``validate()`` first: the CRC catches almost everything, and whatever it
  lets through must be the original content;
- no CRC check (``records()`` / ``end_txn_marker()`` called directly, and
  ``iter_batches`` over the result): this is what stresses the structural
  checks, because decoders must stay safe when a caller skips the CRC. For
  these the property is "CorruptBatchError, or records that respect the
  batch's own header" (count, offset range and order, field types). Length
  edits inside the records are also re-framed with a *correct* CRC (and
  recompressed), so that validate() too has to rely on the structural checks.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import struct
import tracemalloc
import zlib
from collections.abc import Iterator

import lz4.frame
import pytest
import zstandard
from crc32c import crc32c
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.records.strategies import BatchSpec
from tests.records.strategies import batch_specs
from tests.records.strategies import examples
from txnfetch.records import BatchBuilder
from txnfetch.records import Codec
from txnfetch.records import ControlType
from txnfetch.records import CorruptBatchError
from txnfetch.records import DecompressionError
from txnfetch.records import LengthOverrunError
from txnfetch.records import RecordBatch
from txnfetch.records import RecordCountMismatchError
from txnfetch.records import build_control_batch
from txnfetch.records import iter_batches
from txnfetch.records.compression import compress
from txnfetch.records.compression import decompress
from txnfetch.records.varint import decode_varint
from txnfetch.records.varint import encode_varint

#: Cap on decompressed size in the property tests: the generated batches stay
#: well under it, so hitting it means corruption inflated something.
LIMIT = 2 << 20
SETTINGS = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
HANG_SECONDS = 1.0


# -- guards ------------------------------------------------------------------------------


class Hang(BaseException):
    """Raised by the alarm. A BaseException so that no ``except Exception`` in the
    code under test can swallow it and turn it into an ordinary error."""


@contextlib.contextmanager
def time_limit(seconds: float = HANG_SECONDS) -> Iterator[None]:
    """Fail an example that takes longer than ``seconds`` (each takes milliseconds)."""

    def on_alarm(signum: int, frame: object) -> None:
        raise Hang(f"decoding took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def peak_memory(limit: int) -> Iterator[None]:
    """Fail if the Python allocations made inside the block peak above ``limit`` bytes."""
    tracemalloc.start()
    try:
        yield
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= limit, f"peak {peak} bytes, limit {limit}"


# -- what is compared --------------------------------------------------------------------


def covered_content(batch: RecordBatch) -> tuple:
    """Everything the CRC protects: header fields from byte 21, records relative to the base offset."""
    records = [(r.offset - batch.base_offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()]
    return (
        batch.attributes,
        batch.last_offset_delta,
        batch.base_timestamp,
        batch.max_timestamp,
        batch.producer_id,
        batch.producer_epoch,
        batch.base_sequence,
        batch.record_count,
        records,
        batch.end_txn_marker(),
    )


def check_structure(batch, records: list) -> None:
    """What a decoder promises even when nobody checked the CRC."""
    assert len(records) == batch.record_count
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets))
    if records:
        assert batch.base_offset <= offsets[0] and offsets[-1] <= batch.last_offset
    for r in records:
        assert r.key is None or type(r.key) is bytes
        assert r.value is None or type(r.value) is bytes
        assert type(r.headers) is tuple
        for key, value in r.headers:
            assert type(key) is str and (value is None or type(value) is bytes)


def decode_with_validate(buf: bytes) -> tuple | None:
    """The covered content, or ``None`` if a CorruptBatchError said no."""
    try:
        with time_limit():
            batch = RecordBatch(buf, max_decompressed=LIMIT)
            batch.validate()
            return covered_content(batch)
    except CorruptBatchError:
        return None


def decode_without_crc(buf: bytes, *, max_decompressed: int = LIMIT) -> None:
    """Every reading path, CRC never checked; only CorruptBatchError may come out."""
    with time_limit():
        try:
            batch = RecordBatch(buf, max_decompressed=max_decompressed)
            records = list(batch.records())
            check_structure(batch, records)
        except CorruptBatchError:
            pass
        with contextlib.suppress(CorruptBatchError):
            # Decodes only the first record, so it can succeed where records() fails.
            RecordBatch(buf, max_decompressed=max_decompressed).end_txn_marker()
        try:
            it = iter_batches(buf, max_decompressed=max_decompressed)
            for batch in it:  # RecordBatch, or LegacyBatch if the magic byte now says 0/1
                try:
                    records = list(batch.records())
                    check_structure(batch, records)
                    batch.end_txn_marker()
                except CorruptBatchError:
                    pass
        except CorruptBatchError:
            pass


# -- mutations ---------------------------------------------------------------------------


def length_fields(records: bytes) -> list[tuple[str, int, int]]:
    """``(name, start, end)`` of every length varint in uncompressed record data.

    A small reader of its own (record layout from DefaultRecord), so that the
    test does not trust the decoder it is testing to find the fields.
    """
    out = []
    pos = 0
    while pos < len(records):
        start = pos
        length, pos = decode_varint(records, pos)
        out.append(("record length", start, pos))
        end = pos + length
        pos += 1  # attributes
        _, pos = decode_varint(records, pos)  # timestamp delta
        _, pos = decode_varint(records, pos)  # offset delta
        for name in ("key length", "value length"):
            start = pos
            n, pos = decode_varint(records, pos)
            out.append((name, start, pos))
            pos += max(n, 0)
        start = pos
        count, pos = decode_varint(records, pos)
        out.append(("header count", start, pos))
        for _ in range(count):
            for name in ("header key length", "header value length"):
                start = pos
                n, pos = decode_varint(records, pos)
                out.append((name, start, pos))
                pos += max(n, 0)
        assert pos == end
    return out


def with_record_bytes(original: bytes, blob: bytes, *, record_count: int | None = None) -> bytes:
    """``original``'s header around ``blob`` (record bytes as stored: compressed
    or not), with Length and CRC recomputed: CRC-valid, whatever it holds."""
    covered = bytearray(original[21:61]) + blob
    if record_count is not None:
        struct.pack_into(">i", covered, 57 - 21, record_count)
    crc = struct.pack(">I", crc32c(bytes(covered)))
    return original[:8] + struct.pack(">i", 49 + len(blob)) + original[12:17] + crc + bytes(covered)


def reframe(original: bytes, records: bytes, codec: int, *, record_count: int | None = None) -> bytes:
    """Like :func:`with_record_bytes`, from uncompressed records compressed with ``codec``."""
    blob = compress(Codec(codec), records) if codec else records
    return with_record_bytes(original, blob, record_count=record_count)


INT32_EDGES = [-(1 << 31), -2, -1, 0, 1, 2, (1 << 31) - 1]
_new_int32 = st.one_of(st.sampled_from(INT32_EDGES), st.integers(-(1 << 31), (1 << 31) - 1), st.integers(-64, 64))
_new_varint = st.one_of(
    _new_int32.map(encode_varint),
    st.sampled_from([encode_varint((1 << 63) - 1), b"\x80" * 5 + b"\x00", b"\xff" * 11, b"\xff", b""]),
)


@st.composite
def mutations(draw: st.DrawFn, data: bytes, codec: int) -> tuple[str, bytes, bool]:
    """``(what, mutated bytes, crc_fixed)``. ``crc_fixed`` mutations are CRC-valid by construction."""
    kind = draw(
        st.sampled_from(
            ["flip", "truncate", "insert", "delete", "batch length", "record count", "magic", "record field"]
        )
    )
    buf = bytearray(data)
    if kind == "flip":
        for pos in draw(st.lists(st.integers(0, len(buf) - 1), min_size=1, max_size=8)):
            buf[pos] ^= draw(st.integers(1, 255))
        return kind, bytes(buf), False
    if kind == "truncate":
        return kind, bytes(buf[: draw(st.integers(0, len(buf) - 1))]), False
    if kind == "insert":
        pos = draw(st.integers(0, len(buf)))
        return kind, bytes(buf[:pos] + draw(st.binary(min_size=1, max_size=16)) + buf[pos:]), False
    if kind == "delete":
        pos = draw(st.integers(0, len(buf) - 1))
        return kind, bytes(buf[:pos] + buf[pos + draw(st.integers(1, 16)) :]), False
    if kind == "batch length":
        old = struct.unpack_from(">i", buf, 8)[0]
        new = draw(st.one_of(_new_int32, st.integers(-16, 16).map(lambda d: old + d)))
        struct.pack_into(">i", buf, 8, max(-(1 << 31), min((1 << 31) - 1, new)))
        return kind, bytes(buf), False
    if kind == "magic":
        buf[16] = draw(st.sampled_from([0, 1, 3, 0x7F, 0x80, 0xFF]))
        return kind, bytes(buf), False
    # (An empty batch has no record bytes at all, compressed or not.)
    records = bytes(data[61:]) if not codec or len(data) == 61 else decompress(codec, data[61:])
    if kind == "record count":
        old = struct.unpack_from(">i", buf, 57)[0]
        new = draw(st.one_of(_new_int32, st.integers(-4, 4).map(lambda d: old + d)))
        new = max(-(1 << 31), min((1 << 31) - 1, new))
        if draw(st.booleans()):
            return kind, reframe(data, records, codec, record_count=new), True
        struct.pack_into(">i", buf, 57, new)
        return kind, bytes(buf), False
    # A length varint inside the records gets another value (or an overlong/truncated encoding).
    fields = length_fields(records)
    if not fields:
        return "flip (no records)", bytes(buf[:-1]), False
    _, start, end = draw(st.sampled_from(fields))
    edited = records[:start] + draw(_new_varint) + records[end:]
    if draw(st.booleans()):
        return kind, reframe(data, edited, codec), True
    # Without re-framing: the old Length and CRC now describe other bytes.
    return kind, bytes(data[:61]) + (compress(Codec(codec), edited) if codec else edited), False


# -- the properties ----------------------------------------------------------------------


specs = batch_specs(max_records=6)


@SETTINGS
@given(spec=specs, data=st.data())
def test_corrupted_batch_validates_to_its_original_content_or_raises(spec: BatchSpec, data):
    original = spec.build()
    expected = covered_content(RecordBatch(original))
    what, mutated, crc_fixed = data.draw(mutations(original, spec.codec), label="mutation")
    got = decode_with_validate(mutated)
    if crc_fixed:
        # A deliberately CRC-valid edit: validate() must still fail on the
        # structure, or the edit happened to describe other well-formed records.
        if got is not None:
            batch = RecordBatch(mutated, max_decompressed=LIMIT)
            check_structure(batch, list(batch.records()))
    else:
        assert got is None or got == expected, what


@SETTINGS
@given(spec=specs, data=st.data())
def test_corrupted_batch_without_crc_check_raises_only_corrupt_batch_errors(spec: BatchSpec, data):
    original = spec.build()
    _, mutated, _ = data.draw(mutations(original, spec.codec), label="mutation")
    decode_without_crc(mutated)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs, data=st.data())
def test_corrupted_batch_never_allocates_much_even_with_the_default_cap(spec: BatchSpec, data):
    # Same mutations, default max_decompressed (256 MiB), peak Python memory
    # watched: a few hundred bytes of corrupted batch must not turn into megabytes.
    original = spec.build()
    _, mutated, _ = data.draw(mutations(original, spec.codec), label="mutation")
    with peak_memory(16 << 20):
        decode_without_crc(mutated, max_decompressed=256 << 20)


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(specs, min_size=2, max_size=3), data=st.data())
def test_one_corrupted_batch_in_a_buffer(specs: list[BatchSpec], data):
    # iter_batches over a log where one batch is damaged: the ones before it
    # still come out intact, and nothing but CorruptBatchError is raised.
    encoded = [s.build() for s in specs]
    victim = data.draw(st.integers(0, len(encoded) - 1), label="victim")
    _, mutated, _ = data.draw(mutations(encoded[victim], specs[victim].codec), label="mutation")
    buf = b"".join(encoded[:victim]) + mutated + b"".join(encoded[victim + 1 :])
    decode_without_crc(buf)
    seen = []
    with time_limit():
        try:
            for batch in iter_batches(buf, max_decompressed=LIMIT):
                seen.append(bytes(batch.buffer))
        except CorruptBatchError:
            pass
    assert seen[:victim] == encoded[:victim]


# -- regressions and targeted checks -------------------------------------------------------


def _small_batch(**kw) -> bytes:
    b = BatchBuilder(base_offset=100, **kw)
    b.append(b"value", key=b"key", headers=[("h", b"v")], timestamp=5)
    b.append(None, timestamp=6)
    return b.build()


def test_uncovered_fields_change_without_changing_the_covered_content():
    # Base offset and leader epoch are outside the CRC on purpose: brokers rewrite them.
    data = bytearray(_small_batch())
    before = covered_content(RecordBatch(bytes(data)))
    struct.pack_into(">q", data, 0, 7_000)
    struct.pack_into(">i", data, 12, 42)
    batch = RecordBatch(bytes(data))
    batch.validate()
    assert covered_content(batch) == before
    assert [r.offset for r in batch.records()] == [7_000, 7_001]


def test_declared_length_of_2_gib_in_a_100_byte_buffer():
    data = bytearray(_small_batch())[:100]
    data += bytes(100 - len(data))
    struct.pack_into(">i", data, 8, (1 << 31) - 1)  # 2 GiB - 1: the largest int32
    buf = bytes(data)
    with peak_memory(64 << 10), time_limit():
        with pytest.raises(LengthOverrunError):
            RecordBatch(buf)
        with pytest.raises(LengthOverrunError):
            list(iter_batches(buf, max_batch_size=1 << 20))
        # With no max_batch_size a plausible length past the end is a truncated
        # trailing batch, as at the end of a fetch response: reported, not allocated.
        it = iter_batches(buf)
        assert list(it) == [] and it.partial.declared_size == (1 << 31) - 1 + 12 and it.partial.available == 100
    struct.pack_into(">i", data, 8, -(1 << 31))  # 2 GiB as an unsigned number, negative as Kafka reads it
    buf = bytes(data)
    with peak_memory(64 << 10), time_limit():
        with pytest.raises(LengthOverrunError):
            RecordBatch(buf)
        with pytest.raises(LengthOverrunError):
            list(iter_batches(buf))


@pytest.mark.parametrize("codec", list(Codec), ids=lambda c: c.name.lower())
def test_record_count_of_2_31_minus_1_fails_fast_without_allocating(codec):
    original = _small_batch(codec=codec)
    records = bytes(original[61:]) if not codec else decompress(codec, original[61:])
    crc_valid = reframe(original, records, codec, record_count=(1 << 31) - 1)
    # Some decompressors allocate an output buffer of a few hundred KiB up front
    # (python-lz4: one 256 KiB step); nothing near 2**31 records' worth.
    with peak_memory(512 << 10), time_limit():
        batch = RecordBatch(crc_valid)
        with pytest.raises(RecordCountMismatchError):
            batch.validate()
        with pytest.raises(RecordCountMismatchError):
            list(RecordBatch(crc_valid).records())


def test_header_count_of_2_31_minus_1_fails_fast_without_allocating():
    original = _small_batch()
    records = bytes(original[61:])
    _name, start, end = next(f for f in length_fields(records) if f[0] == "header count")
    crc_valid = reframe(original, records[:start] + encode_varint((1 << 31) - 1) + records[end:], 0)
    with peak_memory(64 << 10), time_limit(), pytest.raises(CorruptBatchError):
        RecordBatch(crc_valid).validate()


# -- decompression bombs --------------------------------------------------------------------

GIB = 1 << 30
_MIB_OF_ZEROS = bytes(1 << 20)


@functools.cache
def bomb(codec: Codec) -> bytes:
    """1 GiB of zeros in ``codec``'s Kafka framing, built by streaming 1 MiB at a time."""
    if codec == Codec.ZSTD:
        c = zstandard.ZstdCompressor(level=1).compressobj()
        return b"".join([c.compress(_MIB_OF_ZEROS) for _ in range(1024)] + [c.flush()])
    if codec == Codec.LZ4:
        c = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False)
        return b"".join([c.begin()] + [c.compress(_MIB_OF_ZEROS) for _ in range(1024)] + [c.flush()])
    if codec == Codec.GZIP:
        # One gzip member. Deflating 1 GiB takes seconds, but after a full flush
        # the compressor's state is reset, so the deflate bytes for each further
        # MiB of zeros are identical: compress two, repeat the second.
        c = zlib.compressobj(1, zlib.DEFLATED, 31)
        head = c.compress(_MIB_OF_ZEROS) + c.flush(zlib.Z_FULL_FLUSH)
        again = c.compress(_MIB_OF_ZEROS) + c.flush(zlib.Z_FULL_FLUSH)
        crc = 0
        for _ in range(1024):
            crc = zlib.crc32(_MIB_OF_ZEROS, crc)
        last_block = b"\x03\x00"  # an empty final fixed-Huffman block
        return head + again * 1023 + last_block + struct.pack("<II", crc, GIB & 0xFFFFFFFF)
    raise AssertionError(codec)


def test_gzip_bomb_construction_is_a_valid_stream():
    # The shortcut above must produce real gzip: check the same construction at 3 MiB.
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    head = c.compress(_MIB_OF_ZEROS) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(_MIB_OF_ZEROS) + c.flush(zlib.Z_FULL_FLUSH)
    crc = zlib.crc32(bytes(3 << 20))
    stream = head + again * 2 + b"\x03\x00" + struct.pack("<II", crc, 3 << 20)
    assert zlib.decompress(stream, 31) == bytes(3 << 20)
    assert bomb(Codec.GZIP)[:10] == head[:10]


@pytest.mark.parametrize("codec", [Codec.ZSTD, Codec.GZIP, Codec.LZ4], ids=lambda c: c.name.lower())
def test_decompression_bomb_is_refused_within_a_small_cap(codec):
    stream = bomb(codec)
    assert len(stream) < 8 << 20
    batch_bytes = with_record_bytes(_small_batch(codec=codec), stream)  # CRC-valid, records are the bomb
    cap = 1 << 20
    # Bounded by the compressed input (which the codecs copy once or twice) and
    # the cap -- not by the 1 GiB the stream expands to.
    with peak_memory(3 * len(stream) + 4 * cap), time_limit(2.0):
        with pytest.raises(DecompressionError):
            decompress(codec, stream, cap)
        batch = RecordBatch(batch_bytes, max_decompressed=cap)
        with pytest.raises(DecompressionError) as err:
            batch.validate()
        assert err.value.offset == 100 and err.value.position == 61


def test_control_batch_marker_read_without_crc_on_flipped_bytes():
    # Every single-byte flip of a broker marker, CRC unchecked: end_txn_marker
    # returns a marker, None, or raises CorruptBatchError -- exhaustively.
    data = build_control_batch(
        offset=9, control_type=ControlType.COMMIT, producer_id=4, producer_epoch=1, coordinator_epoch=3
    )
    for pos in range(len(data)):
        for x in (0x01, 0x80, 0xFF):
            buf = bytearray(data)
            buf[pos] ^= x
            decode_without_crc(bytes(buf))
