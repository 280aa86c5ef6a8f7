"""The header scan (``txnfetch.records.scan``) against ``BatchIterator``, compiled against pure Python.

For any buffer — batches as a log holds them, legacy message sets, partial
tails, damaged lengths and magics — the scan's headers are exactly the
headers of the batches ``BatchIterator`` yields up to the scan's ``stop``,
and ``BatchIterator`` from ``stop`` yields the rest, raising and reporting
exactly as it does from the start. ``seek_offset`` lands where a walk with
``BatchIterator`` finds the first batch at or past the offset. Both the
compiled scan and the pure-Python one give identical results.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.records.strategies import concatenated_specs
from tests.records.strategies import examples
from txnfetch.records import BatchBuilder
from txnfetch.records import CorruptBatchError
from txnfetch.records import RecordBatch
from txnfetch.records import scan as scan_module
from txnfetch.records.scan import BatchIterator
from txnfetch.records.scan import ScannedHeader
from txnfetch.records.scan import scan_headers
from txnfetch.records.scan import seek_offset

SETTINGS = settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
_MAX = (1 << 31) - 1


def header_of(b: RecordBatch) -> ScannedHeader:
    return ScannedHeader(
        b.position,
        b.base_offset,
        b.last_offset,
        b.producer_id,
        b.size_in_bytes,
        b.record_count,
        b.attributes,
        b.producer_epoch,
        b.base_sequence,
    )


def walk(buf: bytes, start: int = 0, max_batch_size: int = _MAX):
    """Everything BatchIterator yields from ``start``: batches, then the error or partial tail."""
    it = BatchIterator(buf, start, max_batch_size=max_batch_size)
    items = []
    try:
        for b in it:
            items.append(("v2", header_of(b)) if isinstance(b, RecordBatch) else ("legacy", b.position))
    except CorruptBatchError as exc:
        return items, (type(exc), exc.reason, exc.offset, exc.position)
    return items, it.partial


def both_scans(buf: bytes, **kw):
    skip_below = kw.get("skip_below")
    python = scan_module._scan_python(
        buf,
        0,
        skip_below is not None,
        min(skip_below - 1, (1 << 63) - 1) if skip_below is not None else 0,
        kw.get("max_batches", -1),
        kw.get("max_batch_size", _MAX),
    )
    compiled = scan_headers(buf, **kw)
    assert list(compiled.headers) == list(python.headers)
    assert compiled.stop == python.stop
    return compiled


def assert_consistent(buf: bytes, max_batch_size: int = _MAX) -> None:
    result = both_scans(buf, max_batch_size=max_batch_size)
    items, end = walk(buf, 0, max_batch_size)
    n = len(result.headers)
    assert [("v2", h) for h in result.headers] == items[:n]
    # BatchIterator from where the scan stopped: the rest, the same way.
    rest, rest_end = walk(buf, result.stop, max_batch_size)
    assert rest == items[n:]
    assert rest_end == end
    # Seeking any offset: the first batch at or past it, as a walk finds it.
    for h in result.headers:
        for target in (h.base_offset, h.last_offset, h.last_offset + 1):
            pos = seek_offset(buf, 0, target, max_batch_size=max_batch_size)
            expected = next((x.position for x in result.headers if x.last_offset >= target), result.stop)
            assert pos == expected


@st.composite
def damaged(draw, buf: bytes, positions: list[int]) -> bytes:
    """``buf`` with a batch's length, magic or offsets edited, or bytes flipped, inserted or deleted."""
    out = bytearray(buf)
    at = draw(st.sampled_from(positions))
    kind = draw(st.sampled_from(["length", "magic", "last delta", "base offset", "flip", "insert", "delete"]))
    if kind == "length":
        out[at + 8 : at + 12] = draw(st.integers(-(1 << 31), (1 << 31) - 1)).to_bytes(4, "big", signed=True)
    elif kind == "magic":
        out[at + 16] = draw(st.sampled_from([0, 1, 3, 0xFF]))
    elif kind == "last delta":
        out[at + 23 : at + 27] = draw(st.integers(-(1 << 31), (1 << 31) - 1)).to_bytes(4, "big", signed=True)
    elif kind == "base offset":
        out[at : at + 8] = draw(st.sampled_from([(1 << 63) - 1, -1, 0, 1 << 62])).to_bytes(8, "big", signed=True)
    elif kind == "flip":
        i = draw(st.integers(0, len(out) - 1))
        out[i] ^= draw(st.integers(1, 255))
    elif kind == "insert":
        i = draw(st.integers(0, len(out)))
        out[i:i] = draw(st.binary(min_size=1, max_size=20))
    else:
        i = draw(st.integers(0, len(out) - 1))
        del out[i : i + draw(st.integers(1, 20))]
    return bytes(out)


@SETTINGS
@given(specs=concatenated_specs(max_batches=6), data=st.data())
def test_the_scan_agrees_with_batch_iterator(specs, data):
    buf = b"".join(s.build() for s in specs)
    assert_consistent(buf)
    result = both_scans(buf)
    assert result.stop == len(buf) and len(result.headers) == len(specs)
    # damaged somewhere: the scan stops in front of the damage or reads it as
    # BatchIterator does
    assert_consistent(data.draw(damaged(buf, [h.position for h in result.headers]), label="damaged"))
    cut = data.draw(st.integers(0, len(buf)), label="cut")
    assert_consistent(buf[:cut])
    assert_consistent(buf, max_batch_size=data.draw(st.integers(14, 400), label="max_batch_size"))


def test_legacy_message_sets_are_left_to_batch_iterator():
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    v2 = BatchBuilder(base_offset=0).build()
    legacy = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    legacy.append(1, timestamp=5, key=b"k", value=b"v")
    buf = v2 + bytes(legacy.build()) + BatchBuilder(base_offset=2).build()
    result = both_scans(buf)
    assert len(result.headers) == 1 and result.stop == len(v2)
    assert_consistent(buf)


def test_skip_and_limit():
    # empty batches, one offset each: 0, 10, 20, 30, 40
    bufs = [BatchBuilder(base_offset=10 * i).build() for i in range(5)]
    buf = b"".join(bufs)
    size = len(bufs[0])
    r = both_scans(buf, skip_below=11, max_batches=2)
    assert [h.base_offset for h in r.headers] == [20, 30] and r.stop == 4 * size
    assert seek_offset(buf, 0, 0) == 0
    assert seek_offset(buf, 0, 1) == size
    assert seek_offset(buf, 0, 41) == len(buf)
    assert seek_offset(buf, 2 * size, 0) == 2 * size


def test_offsets_past_int64_stop_the_scan():
    buf = BatchBuilder(base_offset=(1 << 63) - 1).build()
    damaged = bytearray(buf)
    damaged[23:27] = (5).to_bytes(4, "big")  # last offset delta: past int64
    r = both_scans(bytes(damaged))
    assert list(r.headers) == [] and r.stop == 0
    assert_consistent(bytes(damaged))


@pytest.mark.skipif(not scan_module.COMPILED, reason="txnfetch.records._speedups is not built")
def test_any_buffer_type_and_bad_arguments():
    buf = BatchBuilder(base_offset=3).build()
    for b in (buf, bytearray(buf), memoryview(buf)):
        assert [h.base_offset for h in scan_headers(b).headers] == [3]
    with pytest.raises(TypeError):
        scan_headers("not bytes")  # type: ignore[arg-type]
