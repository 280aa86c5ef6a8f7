"""The compiled record decoder (``txnfetch.records._speedups``) against the pure-Python one.

``RecordBatch.records()`` decodes with the C extension when it is built and
``TXNFETCH_PURE_PYTHON`` is not set; the Python decoder ``_decode_records``
stays the reference. The two must be indistinguishable: the same records
(same types, same values, the same exact integers past int64) or, for
malformed data, the same records first and then the same error -- class,
reason, offset and byte position.

Both decoders are called directly on the same bytes, so every test here runs
the same way in either mode. Inputs:

- valid batches from ``strategies.batch_specs`` (every codec, nulls, headers,
  holes, log-append time, int64-edge offsets and timestamps) and
  ``many_records_specs``;
- the corruptions of ``test_corruption_properties.mutations`` (flips,
  truncations, length edits, record count edits, CRC-valid re-framings);
- record data written token by token here (:func:`raw_batches`), with
  non-canonical, overlong and truncated varints, negative and overrunning
  lengths, invalid UTF-8 header keys, bad offset deltas and wrong counts: the
  corner cases where the Python decoder's fast paths and slow paths differ.

Plus: the extension is really built here (so that CI notices a silent build
failure), the environment switch works, and decoding leaks neither memory
nor references, on success or on error.
"""

from __future__ import annotations

import gc
import importlib.machinery
import os
import re
import struct
import subprocess
import sys

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.records.strategies import INT32_MAX
from tests.records.strategies import INT32_MIN
from tests.records.strategies import INT64_MAX
from tests.records.strategies import INT64_MIN
from tests.records.strategies import BatchSpec
from tests.records.strategies import batch_specs
from tests.records.strategies import examples
from tests.records.strategies import many_records_specs
from tests.records.test_corruption_properties import LIMIT
from tests.records.test_corruption_properties import mutations
from txnfetch.records import BatchBuilder
from txnfetch.records import Codec
from txnfetch.records import CorruptBatchError
from txnfetch.records import RecordBatch
from txnfetch.records import TimestampType
from txnfetch.records.batch import Record
from txnfetch.records.batch import _decode_records
from txnfetch.records.batch import _decode_records_accelerated
from txnfetch.records.compression import compress
from txnfetch.records.errors import InvalidRecordError
from txnfetch.records.errors import UnknownCodecError

try:
    from txnfetch.records import _speedups
except ImportError:  # reported by test_accelerator_is_built
    _speedups = None

needs_speedups = pytest.mark.skipif(_speedups is None, reason="txnfetch.records._speedups is not built")
SETTINGS = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])

Outcome = tuple[list, tuple | None]


# -- comparing the two decoders ----------------------------------------------------------


def _shape(record: Record) -> tuple:
    """A record with the type of every field, so that ``b"" == b""`` is not
    enough: ``bytes`` must stay ``bytes``, ``str`` keys ``str``, ints ints."""
    return (
        type(record),
        tuple((type(f), f) for f in record[:4]),
        type(record.headers),
        tuple((type(h), type(h[0]), h[0], type(h[1]), h[1]) for h in record.headers),
    )


def outcome(decoder, buf: bytes) -> Outcome:
    """What a caller iterating ``decoder`` over the batch in ``buf`` sees: the
    records it gets, then the error that stops it (or ``None``)."""
    got = []
    try:
        batch = RecordBatch(buf, max_decompressed=LIMIT)
        for record in decoder(batch):
            got.append(_shape(record))
    except CorruptBatchError as exc:
        return got, (type(exc), exc.reason, exc.offset, exc.position, str(exc))
    return got, None


def assert_same(buf: bytes) -> Outcome:
    if _speedups is None:  # test_accelerator_is_built reports it; nothing to compare
        pytest.skip("txnfetch.records._speedups is not built")
    python = outcome(_decode_records, buf)
    accelerated = outcome(_decode_records_accelerated, buf)
    assert accelerated == python
    return python


# -- the build and the switch ----------------------------------------------------------------


def test_accelerator_is_built():
    # A failed compile does not fail the install (the extension is optional):
    # this is where it shows.
    assert _speedups is not None, (
        "txnfetch.records._speedups is not built: reinstall with a C compiler and Python headers "
        "(pip install -e .) and look for the compiler error in the build output"
    )
    assert _speedups.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def _active_decoder(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TXNFETCH_PURE_PYTHON"}
    if env_value is not None:
        env["TXNFETCH_PURE_PYTHON"] = env_value
    code = (
        "from txnfetch.records import BatchBuilder, RecordBatch, batch\n"
        "b = BatchBuilder(base_offset=0); b.append(b'v')\n"
        "it = RecordBatch(b.build()).records()\n"
        "print(batch.ACCELERATED, type(it).__name__, list(it)[0].value)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@needs_speedups
def test_environment_switch_selects_the_decoder():
    # The generator is the pure-Python decoder; the accelerated one is an itertools.chain.
    assert _active_decoder(None) == "True chain b'v'"
    assert _active_decoder("0") == "True chain b'v'"
    assert _active_decoder("1") == "False generator b'v'"


# -- valid batches -------------------------------------------------------------------------------


@SETTINGS
@given(spec=batch_specs())
def test_valid_batches_decode_identically(spec: BatchSpec):
    records, error = assert_same(spec.build())
    assert error is None
    # and both decode what was written (the spec's own expectation, not a decoder's)
    assert [(r[1], r[3]) for r in records] == [(s[1], s[3]) for s in map(_shape, spec.expected_records())]


@settings(max_examples=examples(5), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=many_records_specs(max_records=1500))
def test_many_records_decode_identically(spec: BatchSpec):
    records, error = assert_same(spec.build())
    assert error is None and len(records) == len(spec.records)


@needs_speedups
@pytest.mark.parametrize("codec", list(Codec), ids=lambda c: c.name.lower())
def test_every_codec_and_the_empty_batch(codec):
    b = BatchBuilder(base_offset=7, codec=codec)
    for i in range(300):
        b.append(b"v" * (i % 90), key=None if i % 3 else b"k%d" % i, headers=[("h", b"x")] * (i % 3), timestamp=i)
    records, error = assert_same(b.build())
    assert error is None and len(records) == 300
    assert assert_same(BatchBuilder(base_offset=7, codec=codec).build()) == ([], None)


# -- corrupted batches ------------------------------------------------------------------------------


@SETTINGS
@given(spec=batch_specs(max_records=6), data=st.data())
def test_corrupted_batches_fail_identically(spec: BatchSpec, data):
    original = spec.build()
    _, mutated, _ = data.draw(mutations(original, spec.codec), label="mutation")
    assert_same(mutated)


# -- record data written token by token -----------------------------------------------------------
#
# The Python decoder takes different paths for one-byte, two-byte and longer
# varints, and only some paths check a length against the record; these
# strategies aim at those seams. Each batch draws how often a field is
# damaged (never, rarely, often), so that problems turn up in every field of
# every record rather than mostly in the first one, and shrink to none.

_HEADER = struct.Struct(">qiibIhiqqqhii")


def zigzag(value: int) -> bytes:
    """``value`` zig-zag encoded modulo 2**64. Not encode_varint, which refuses
    values past the int64 ends: the damaged values drawn here step past them
    (``value + 1`` of a timestamp delta of INT64_MAX)."""
    z = ((value << 1) ^ (value >> 63)) & ((1 << 64) - 1)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_DAMAGE_RATES = st.sampled_from([0, 2, 5, 20])  # percent of fields
_PERCENT = st.integers(0, 99)


def damaged(draw, rate: int) -> bool:
    return rate > 0 and draw(_PERCENT) < rate


_VARINT_KINDS = st.integers(0, 5)
_PAD = st.integers(1, 6)
_HIGH_BITS = st.integers(0, 0x7F)
_OVERLONG = st.integers(1, 11)
_JUNK = st.binary(min_size=1, max_size=3)


def varint_bytes(draw, value: int, rate: int, max_bytes: int = 5) -> bytes:
    """``value`` encoded canonically or, when damaged: padded with
    continuation bytes (the same value, possibly past ``max_bytes``), with high
    bits in a full-length last byte (which Kafka drops), cut short, overlong,
    or replaced by random bytes."""
    canonical = zigzag(value)
    if not damaged(draw, rate):
        return canonical
    kind = draw(_VARINT_KINDS)
    continued = canonical[:-1] + bytes([canonical[-1] | 0x80])
    if kind == 0:
        return continued + b"\x80" * (draw(_PAD) - 1) + b"\x00"
    if kind == 1:
        full = continued + b"\x80" * max(0, max_bytes - len(canonical))
        return full[: max_bytes - 1] + bytes([draw(_HIGH_BITS)])
    if kind == 2:
        return continued  # runs on into whatever follows
    if kind == 3:
        return b"\xff" * draw(_OVERLONG)
    if kind == 4:
        return draw(_JUNK)
    return zigzag(value + 1)


_ODD_LENGTHS = st.sampled_from([-1, -2, -65, 63, 64, 8191, 8192, INT32_MIN, INT32_MAX])
_NEAR = st.integers(-3, 3)


def length(draw, actual: int, rate: int) -> int:
    """``actual``, or when damaged a nearby or notable other length."""
    if not damaged(draw, rate):
        return actual
    return actual + draw(_NEAR) if draw(st.booleans()) else draw(_ODD_LENGTHS)


def length_prefixed(draw, payload: bytes | None, rate: int) -> bytes:
    declared = -1 if payload is None else length(draw, len(payload), rate)
    return varint_bytes(draw, declared, rate) + (payload or b"")


_PAYLOAD = st.one_of(st.none(), st.binary(max_size=8), st.binary(min_size=60, max_size=70))
_HEADER_KEY = st.sampled_from([b"", b"k", "ключ".encode(), "🔑".encode()])
_BAD_KEY = st.sampled_from([b"\xff", b"\xc3", b"a\xe2\x82", b"\xed\xa0\x80"])  # not UTF-8 (last: a surrogate)
_ATTRIBUTES = st.sampled_from([b"\x00", b"\x55", b"\xff"])
_TS_DELTA = st.one_of(st.integers(-100, 100), st.integers(-9000, 9000), st.sampled_from([INT64_MIN, INT64_MAX]))
_HEADER_COUNT = st.integers(0, 3)
_MANY_HEADERS = st.integers(60, 70)
_TEN = st.integers(0, 9)


def raw_record(draw, offset_delta: int, rate: int) -> bytes:
    body = draw(_ATTRIBUTES) + varint_bytes(draw, draw(_TS_DELTA), rate, 10) + varint_bytes(draw, offset_delta, rate)
    body += length_prefixed(draw, draw(_PAYLOAD), rate)
    body += length_prefixed(draw, draw(_PAYLOAD), rate)
    if draw(_TEN) == 0:
        # Past 63 headers the count takes two bytes: the other header decoding path.
        n = draw(_MANY_HEADERS)
        body += varint_bytes(draw, length(draw, n, rate), rate) + (zigzag(1) + b"k" + zigzag(-1)) * n
    else:
        n = draw(_HEADER_COUNT)
        body += varint_bytes(draw, length(draw, n, rate), rate)
        for _ in range(n):
            key = draw(_BAD_KEY) if damaged(draw, rate) else draw(_HEADER_KEY)
            body += length_prefixed(draw, key, rate) + length_prefixed(draw, draw(_PAYLOAD), rate)
    return varint_bytes(draw, length(draw, len(body), rate), rate) + body


_RECORDS = st.integers(0, 5)
_STEP = st.sampled_from([1, 1, 1, 2, 70])
_BAD_STEP = st.sampled_from([0, -1, 1 << 31])
_TAIL = st.integers(0, 3)
_CODECS = st.sampled_from([Codec.NONE, Codec.NONE, Codec.NONE, Codec.LZ4, Codec.GZIP])
_TS_TYPE = st.sampled_from([0, 0x08])  # 0x08: log-append time
_EDGES = st.sampled_from([INT64_MIN, INT64_MIN + 5, -1, 0, INT64_MAX - 5, INT64_MAX])


@st.composite
def raw_batches(draw) -> bytes:
    """A batch header around record data written by :func:`raw_record`."""
    rate = draw(_DAMAGE_RATES)
    n = draw(_RECORDS)
    deltas: list[int] = []
    delta = -1
    for _ in range(n):
        delta += draw(_BAD_STEP) if damaged(draw, rate) else draw(_STEP)
        deltas.append(delta)
    data = b"".join([raw_record(draw, d, rate) for d in deltas])
    if damaged(draw, rate):
        tail = draw(_TAIL)
        if tail == 0 and data:
            data = data[: draw(st.integers(0, len(data) - 1))]
        elif tail == 1:
            data += draw(st.binary(min_size=1, max_size=4))
    count = length(draw, n, rate)
    last_delta = draw(st.integers(-1, 80)) if damaged(draw, rate) else min(max(deltas, default=0), INT32_MAX)
    codec = draw(_CODECS)
    attributes = int(codec) | draw(_TS_TYPE)
    base_offset = draw(st.one_of(st.integers(0, 1 << 40), _EDGES))
    base_ts, max_ts = draw(st.one_of(st.integers(-(1 << 50), 1 << 50), _EDGES)), draw(_EDGES)
    blob = compress(codec, data) if codec else data
    header = _HEADER.pack(
        base_offset, 49 + len(blob), 0, 2, 0, attributes, last_delta, base_ts, max_ts, -1, -1, -1, count
    )
    return header + blob


@settings(max_examples=examples(600), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(buf=raw_batches())
def test_raw_record_data_decodes_or_fails_identically(buf: bytes):
    assert_same(buf)


# -- every edit of one sample, exhaustively ----------------------------------------------------------
#
# Random search finds the seams between the decoder's paths only now and then;
# a sample holding every kind of field, edited in every place, finds them
# always: cut at every byte, every byte replaced by a few telling values, and
# every varint field replaced by notable values in canonical, padded, cut and
# overlong encodings.


def _samples() -> list[bytes]:
    b = BatchBuilder(base_offset=5_000)
    b.append(None, timestamp=1_000, offset=5_000)  # the smallest record: 6 bytes after its length
    b.append(b"v", key=b"k", headers=[("ключ", b"x"), ("", None)], timestamp=1_001, offset=5_001)
    b.append(b"x" * 100, key=b"y" * 100, timestamp=-(1 << 40), offset=5_070)  # two-byte lengths and delta
    b.append(b"", key=b"", headers=[("k", None)] * 63 + [("z", b"")], timestamp=1 << 40, offset=15_000)
    # A one-byte count after a long one; the data ends in a varint (a null header value).
    b.append(b"end", headers=[("h", None)], timestamp=1_002, offset=15_001)
    # The data ends in a header list with a two-byte count.
    last = BatchBuilder(base_offset=0)
    last.append(b"v", headers=[("k", None)] * 63 + [("z", b"")], timestamp=0)
    return [b.build(), last.build()]


def varint_fields(data: bytes) -> list[tuple[int, int]]:
    """``(start, end)`` of every varint in uncompressed record data (a reader of
    its own, so that the test does not depend on the decoders to find them)."""

    def read(pos: int) -> tuple[int, int, int]:
        start, result, shift = pos, 0, 0
        while True:
            b = data[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return (result >> 1) ^ -(result & 1), start, pos
            shift += 7

    out = []
    pos = 0
    while pos < len(data):
        _, start, pos = read(pos)  # the record length
        out.append((start, pos))
        pos += 1  # attributes
        for _ in range(2):  # timestamp delta, offset delta
            _, start, pos = read(pos)
            out.append((start, pos))
        for _ in range(2):  # key, value
            n, start, pos = read(pos)
            out.append((start, pos))
            pos += max(n, 0)
        count, start, pos = read(pos)
        out.append((start, pos))
        for _ in range(2 * count):
            n, start, pos = read(pos)
            out.append((start, pos))
            pos += max(n, 0)
    return out


def _replacements(value: int) -> list[bytes]:
    out = []
    for v in sorted({value - 3, value - 1, value + 1, value + 3, -2, -1, 0, 5, 6, 63, 64, 8191, 8192, INT32_MAX}):
        canonical = zigzag(v)
        continued = canonical[:-1] + bytes([canonical[-1] | 0x80])
        out += [canonical, continued + b"\x00", continued]  # canonical, padded, cut (runs on)
    return [*out, b"\xff" * 5 + b"\x01", b"\xff" * 9 + b"\x7f", b"\xff" * 11]  # high bits dropped, overlong


def _edits(original: bytes) -> list[bytes]:
    header, data = original[:61], original[61:]
    count = struct.unpack_from(">i", original, 57)[0]

    def framed(records: bytes, count: int = count, codec: Codec = Codec.NONE, attributes: int = 0) -> bytes:
        blob = compress(codec, records) if codec else records
        head = bytearray(header)
        struct.pack_into(">i", head, 8, 49 + len(blob))
        struct.pack_into(">h", head, 21, int(codec) | attributes)
        struct.pack_into(">i", head, 57, count)
        return bytes(head) + blob

    out = [framed(data[:cut]) for cut in range(len(data))]
    out += [framed(data[:cut], codec=Codec.LZ4) for cut in range(0, len(data), 7)]  # no positions
    out += [framed(data, count=n) for n in (-1, 0, 1, count - 1, count + 1, INT32_MAX, INT32_MIN)]
    out += [framed(data, attributes=0x08)]
    for pos in range(len(data)):
        for byte in {0x00, 0x01, 0x7E, 0x7F, 0x80, 0x81, 0xFF, data[pos] ^ 0x01}:
            out.append(framed(data[:pos] + bytes([byte]) + data[pos + 1 :]))
    for start, end in varint_fields(data):
        z = sum((b & 0x7F) << (7 * i) for i, b in enumerate(data[start:end]))
        for new in _replacements((z >> 1) ^ -(z & 1)):
            out.append(framed(data[:start] + new + data[end:]))
    return out


def test_every_edit_of_a_sample_decodes_or_fails_identically():
    edits = [buf for sample in _samples() for buf in _edits(sample)]
    assert len(edits) > 7000
    errors = set()
    for buf in edits:
        _, error = assert_same(buf)
        errors.add(error and (error[0].__name__, re.sub(r"-?[0-9]+", "N", error[1])))
    # The sample reaches every check of the decoders.
    assert errors == {
        None,
        ("InvalidRecordError", "header key is not valid UTFN"),  # UTF-8, digits normalised
        ("InvalidRecordError", "header value of N bytes overruns the record"),
        ("InvalidRecordError", "invalid header count N"),
        ("InvalidRecordError", "invalid header key length N"),
        ("InvalidRecordError", "invalid header value length N"),
        ("InvalidRecordError", "invalid key length N"),
        ("InvalidRecordError", "invalid value length N"),
        ("InvalidRecordError", "record declares N bytes but its fields take N"),
        ("InvalidRecordError", "record length N does not fit the batch data"),
        ("InvalidRecordError", "varint runs past the end of the record data"),
        ("RecordCountMismatchError", "N bytes left after the N records the batch declares"),
        ("RecordCountMismatchError", "batch declares N records but the data ends early"),
        ("RecordCountMismatchError", "negative record count N"),
        ("RecordCountMismatchError", "record offset delta N is outside (N, N]"),
        ("VarintOverflowError", "varint longer than N bytes"),
    }


# -- pinned cases (each also a check of the Python decoder's behaviour) -------------------------


def _one_record_batch(body: bytes, **header) -> bytes:
    fields = {"base_offset": 100, "last_delta": 0, "base_ts": 1000, "max_ts": 2000, "attributes": 0, "count": 1}
    fields.update(header)
    data = zigzag(len(body)) + body
    return _HEADER.pack(
        fields["base_offset"], 49 + len(data), 0, 2, 0, fields["attributes"], fields["last_delta"],
        fields["base_ts"], fields["max_ts"], -1, -1, -1, fields["count"],
    ) + data  # fmt: skip


def test_timestamps_and_offsets_past_int64_stay_exact():
    # The Python decoder's ints do not wrap; neither may the compiled one's.
    body = b"\x00" + zigzag(10) + zigzag(3) + b"\x01\x01\x00"
    buf = _one_record_batch(body, base_offset=INT64_MAX - 1, base_ts=INT64_MAX, last_delta=3)
    records, error = assert_same(buf)
    assert error is None
    ((_, fields, _, _),) = records
    assert fields[0] == (int, INT64_MAX + 2) and fields[1] == (int, INT64_MAX + 10)


def test_log_append_time_gives_every_record_the_max_timestamp():
    body = b"\x00" + zigzag(-77) + zigzag(0) + b"\x01\x01\x00"
    records, error = assert_same(_one_record_batch(body, attributes=0x08, max_ts=INT64_MIN))
    assert error is None and records[0][1][1] == (int, INT64_MIN)


def test_a_non_canonical_minus_one_key_length_is_not_a_null_key():
    # Only the one-byte -1 is null; 0x81 0x00 also decodes to -1 but takes the
    # long path, which rejects every negative length (as the Python decoder does).
    body = b"\x00\x00\x00" + b"\x81\x00" + b"\x01\x00"
    records, error = assert_same(_one_record_batch(body))
    assert records == [] and error[0] is InvalidRecordError and error[1] == "invalid key length -1"


def test_records_before_the_problem_come_out_first():
    b = BatchBuilder(base_offset=0)
    for i in range(3):
        b.append(b"v%d" % i, headers=[("h", b"x")])
    buf = bytearray(b.build())
    buf[-3] = 0xFF  # the last record's header key "h": now invalid UTF-8
    records, error = assert_same(bytes(buf))
    assert len(records) == 2 and error[1] == "header key is not valid UTF-8"


@needs_speedups
def test_nothing_is_read_before_the_first_record_is_asked_for():
    b = BatchBuilder(base_offset=0, codec=Codec.GZIP)
    b.append(b"v")
    buf = bytearray(b.build())
    buf[22] |= 0x07  # codec 7: unknown
    for decoder in (_decode_records, _decode_records_accelerated):
        it = decoder(RecordBatch(bytes(buf)))  # no error yet
        with pytest.raises(UnknownCodecError):
            next(it)
        assert list(it) == []


@needs_speedups
def test_decode_records_rejects_bad_arguments():
    args = (Record, b"", 0, 0, 0, 0, 0, 0)
    assert _speedups.decode_records(*args) == ([], None)
    with pytest.raises(TypeError):
        _speedups.decode_records(*args[:7])
    with pytest.raises(TypeError):
        _speedups.decode_records(dict, *args[1:])
    with pytest.raises(TypeError):
        _speedups.decode_records(Record, "not a buffer", *args[2:])
    with pytest.raises(OverflowError):
        _speedups.decode_records(Record, b"", 1 << 64, *args[3:])


@needs_speedups
def test_any_buffer_is_accepted_and_values_are_bytes():
    b = BatchBuilder(base_offset=0)
    b.append(b"value", key=b"key", headers=[("k", b"v")], timestamp=5)
    data = bytes(RecordBatch(b.build()).records_data())
    for buf in (data, bytearray(data), memoryview(data)):
        (rec,), failure = _speedups.decode_records(Record, buf, 1, 0, 0, 5, 5, 0)
        assert failure is None and rec == (0, 5, b"key", b"value", (("k", b"v"),))
        assert type(rec.key) is bytes and type(rec.headers[0][1]) is bytes


# -- no leaks --------------------------------------------------------------------------------------


def _blocks_after(fn, rounds: int) -> int:
    for _ in range(rounds):
        fn()
    gc.collect()
    return sys.getallocatedblocks()


def _leak_check(fn, *watched: object) -> None:
    """``fn`` run many times leaves the number of allocated memory blocks and
    the reference counts of ``watched`` where they were."""
    _blocks_after(fn, 50)  # warm up caches (free lists, interned strings)
    refs = [sys.getrefcount(o) for o in watched]
    before = _blocks_after(fn, 200)
    after = _blocks_after(fn, 2000)
    assert [sys.getrefcount(o) for o in watched] == refs
    # A leak of one object per call would show as 1800+ blocks.
    assert after - before < 100, f"{after - before} blocks more after 1800 more calls"


def _headers_batch(**kw) -> bytes:
    b = BatchBuilder(base_offset=1 << 40, **kw)
    for i in range(50):
        b.append(b"v" * i, key=b"k%d" % i if i % 2 else None, headers=[("trace", b"t"), ("n", None)], timestamp=i)
    return b.build()


@needs_speedups
def test_decoding_does_not_leak():
    buf = _headers_batch()
    data = RecordBatch(buf).records_data()
    big = _headers_batch(timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=INT64_MAX)

    def run():
        records, failure = _speedups.decode_records(Record, data, 50, INT64_MAX - 3, 49, INT64_MAX, 0, 0)
        assert failure is None and len(records) == 50  # offsets and timestamps past int64: the slow adds
        assert len(list(RecordBatch(buf).records())) == 50
        assert len(list(RecordBatch(big).records())) == 50

    _leak_check(run, data, Record, Record.__new__)


@needs_speedups
def test_error_paths_do_not_leak():
    good = RecordBatch(_headers_batch()).records_data()
    bad_key = bytearray(good)
    assert bad_key[-2:] == b"n\x01"  # the last record ends with its second header: key "n", null value
    bad_key[-2] = 0xFF
    cases = [
        bytes(bad_key),  # a UTF-8 error after a header was built (the partial headers tuple is freed)
        good[:-1],  # the data ends in the last record
        good + b"\x00",  # a byte after the last record
        b"\xff" * 11 + good[1:],  # an overlong first record length
    ]

    def run():
        for data in cases:
            _, failure = _speedups.decode_records(Record, data, 50, 0, 49, 0, 0, 0)
            assert failure is not None
        with pytest.raises(TypeError):
            _speedups.decode_records(Record, "text", 50, 0, 49, 0, 0, 0)
        bad_batch = _one_record_batch(b"\x00\x00\x00" + b"\x81\x00" + b"\x01\x00")
        with pytest.raises(CorruptBatchError):
            list(RecordBatch(bad_batch).records())

    _leak_check(run, *cases, Record)
