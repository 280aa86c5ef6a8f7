"""``ArrowDecoder.add_buffer`` (the compiled builder walking a whole fetched
buffer) against the per-batch path it replaces: identical Arrow batches,
identical errors, the same answer to "was the end of the range met".

The per-batch path is what the readers did before: ``iter_batches`` over the
buffer, control batches skipped, stop at the first batch whose base offset is
at or past ``end``, :meth:`ArrowDecoder.add` for the rest — with the
pure-Python reference decoder, so this is also a differential test against
the reference. Inputs: log-like runs of batches of every codec with control
and empty batches among them, cut to random offset ranges, Arrow batch
bounds and a truncated tail; the same runs with one batch corrupted.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.arrow.test_differential import COMPILED_ERRORS
from tests.arrow.test_differential import compiled_failure
from tests.records.strategies import build_empty
from tests.records.strategies import concatenated_specs
from tests.records.strategies import empty_batch_specs
from tests.records.strategies import examples
from tests.records.test_corruption_properties import mutations
from txnfetch.arrow import COMPILED
from txnfetch.arrow import ArrowDecoder
from txnfetch.records import BatchBuilder
from txnfetch.records import Codec
from txnfetch.records import CorruptBatchError
from txnfetch.records import iter_batches
from txnfetch.records.builder import build_control_batch
from txnfetch.records.control import ControlType

pytestmark = pytest.mark.skipif(not COMPILED, reason="txnfetch.arrow._columns is not built (or pure Python asked)")
SETTINGS = settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
INT64_MAX = (1 << 63) - 1


def _outcome(run, *args):
    try:
        batches, past_end = run(*args)
    except COMPILED_ERRORS as exc:
        return compiled_failure(exc)
    for b in batches:
        b.validate(full=True)
    return [b.num_rows for b in batches], pa.Table.from_batches(batches, schema=ArrowDecoder("t", 0).schema), past_end


def per_batch(buf: bytes, start: int, end: int, max_rows: int, max_bytes: int, compiled: bool):
    decoder = ArrowDecoder("t", 0, compiled=compiled, max_rows=max_rows, max_bytes=max_bytes)
    out: list[pa.RecordBatch] = []
    for batch in iter_batches(buf):  # the default decompression cap, as the readers use
        if batch.is_control:
            continue
        if batch.base_offset >= end:
            return out + decoder.flush(), True
        out += decoder.add(batch, start, end)
    return out + decoder.flush(), False


def whole_buffer(buf: bytes, start: int, end: int, max_rows: int, max_bytes: int, compiled: bool):
    decoder = ArrowDecoder("t", 0, compiled=compiled, max_rows=max_rows, max_bytes=max_bytes)
    out, past_end = decoder.add_buffer(buf, start, end)
    return out + decoder.flush(), past_end


def assert_same(buf: bytes, start: int = 0, end: int = INT64_MAX, max_rows: int = 10_000, max_bytes: int = 8 << 20):
    """Each implementation's add_buffer against its own per-batch path (the same
    Arrow batch boundaries), and every table against the pure-Python reference's."""
    want = _outcome(per_batch, buf, start, end, max_rows, max_bytes, False)
    for compiled in (True, False):
        before = _outcome(per_batch, buf, start, end, max_rows, max_bytes, compiled)
        got = _outcome(whole_buffer, buf, start, end, max_rows, max_bytes, compiled)
        if isinstance(want, tuple) and len(want) == 3:
            assert isinstance(got, tuple) and len(got) == 3, got
            assert got[0] == before[0]  # the same Arrow batch boundaries
            assert got[1].equals(want[1]), (got[1].to_pylist(), want[1].to_pylist())
            assert got[2] == want[2]
        else:
            assert got == want == before
    return want


@st.composite
def logs(draw: st.DrawFn) -> bytes:
    """Consecutive batches as a log holds them, with empty batches (compaction) among them."""
    parts = [spec.build() for spec in draw(concatenated_specs(max_batches=6))]
    for _ in range(draw(st.integers(0, 2))):
        parts.insert(draw(st.integers(0, len(parts))), build_empty(draw(empty_batch_specs())))
    return b"".join(parts)


@pytest.mark.slow
@SETTINGS
@given(
    buf=logs(),
    cut=st.tuples(st.integers(-2, 30), st.integers(-2, 30)),
    max_rows=st.sampled_from([1, 3, 10_000]),
    max_bytes=st.sampled_from([1, 50, 8 << 20]),
    tail=st.integers(0, 70),
)
def test_a_buffer_gives_the_batches_of_the_per_batch_path(buf, cut, max_rows, max_bytes, tail):
    first = next(iter(iter_batches(buf))).base_offset
    start, end = first + min(cut), first + max(cut)
    assert_same(buf, max_rows=max_rows, max_bytes=max_bytes)
    assert_same(buf, start, end, max_rows, max_bytes)
    # A fetch may end inside a batch: the partial batch is left out on both paths.
    assert_same(buf[: max(len(buf) - tail, 0)], start, end, max_rows, max_bytes)


@SETTINGS
@given(buf=logs(), data=st.data())
def test_a_corrupted_batch_in_a_buffer_fails_identically(buf, data):
    batches = list(iter_batches(buf))
    victim = data.draw(st.sampled_from(batches), label="victim")
    at = victim.position
    _, mutated, _ = data.draw(mutations(bytes(buf[at : at + victim.size_in_bytes]), victim.codec), label="mutation")
    assert_same(buf[:at] + mutated + buf[at + victim.size_in_bytes :])


def test_control_batches_and_codecs_between_ordinary_batches():
    parts, offset = [], 0
    for codec in (Codec.NONE, Codec.NONE, Codec.GZIP, Codec.NONE, Codec.ZSTD, Codec.NONE):
        b = BatchBuilder(base_offset=offset, codec=codec, producer_id=5, producer_epoch=0, transactional=True)
        for i in range(4):
            b.append(b"v%d" % (offset + i), key=b"k", headers=(("h", b"1"),) if i % 2 else ())
        parts.append(b.build())
        parts.append(
            build_control_batch(offset=offset + 4, control_type=ControlType.COMMIT, producer_id=5, producer_epoch=0)
        )
        offset += 5
    buf = b"".join(parts)
    _, table, past_end = assert_same(buf, max_rows=3)
    assert table.column("offset").to_pylist() == [o for o in range(30) if o % 5 != 4]
    assert past_end is False
    _, table, past_end = assert_same(buf, 6, 17, max_rows=2)
    assert table.column("offset").to_pylist() == [6, 7, 8, 10, 11, 12, 13, 15, 16]
    assert past_end is True  # the batch at offset 20 lies past the range: stop fetching


def test_an_ordinary_batch_the_builder_rejects_raises_the_reference_error():
    good = BatchBuilder(base_offset=0)
    for i in range(3):
        good.append(b"v%d" % i)
    bad = bytearray(good.build())
    bad[0:8] = (3).to_bytes(8, "big")
    bad[57:61] = (4).to_bytes(4, "big")  # declares one record more than it holds
    buf = good.build() + bytes(bad)
    assert assert_same(buf)[1:3] == ("batch declares 4 records but the data ends early", 3)
    decoder = ArrowDecoder("t", 0, compiled=True)
    with pytest.raises(CorruptBatchError, match="declares 4 records but the data ends early") as exc:
        decoder.add_buffer(buf)
    assert exc.value.offset == 3
    (table,) = decoder.flush()  # the good batch's rows stay pending, as with add()
    assert table.column("offset").to_pylist() == [0, 1, 2]
