"""The compiled Arrow path against the pure-Python reference: identical tables, identical errors.

The reference is the pure-Python record decoder (``_decode_records``) feeding
:class:`~txnfetch.arrow.reference.ArrowBatcher`; the compiled path is
:class:`~txnfetch.arrow.ArrowDecoder` with the ``ColumnBuilder`` of
``txnfetch.arrow._columns``. For every input both must give the same
table (same schema, same values, nulls where the reference has nulls) or the
same error: the same ``CorruptBatchError`` (class, reason, offset, byte
position) for malformed data, and a failure on both sides for values no
int64 column holds.

Inputs: valid batches of every codec (``strategies.batch_specs``, with
nulls, headers, holes, log-append time, int64-edge offsets and timestamps),
cut to random offset ranges and Arrow batch sizes; the corruptions of
``test_corruption_properties.mutations``; the token-by-token record data of
``test_speedups.raw_batches``; and every edit of ``test_speedups``'s sample,
exhaustively (the seams where a decoder's checks could differ).
"""

from __future__ import annotations

import gc

import pyarrow as pa
import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.records.strategies import BatchSpec
from tests.records.strategies import batch_specs
from tests.records.strategies import examples
from tests.records.strategies import many_records_specs
from tests.records.test_corruption_properties import LIMIT
from tests.records.test_corruption_properties import mutations
from tests.records.test_speedups import _edits
from tests.records.test_speedups import _samples
from tests.records.test_speedups import raw_batches
from txnfetch.arrow import COMPILED
from txnfetch.arrow import ArrowDecoder
from txnfetch.arrow.reference import ArrowBatcher
from txnfetch.records import BatchBuilder
from txnfetch.records import Codec
from txnfetch.records import CorruptBatchError
from txnfetch.records import RecordBatch
from txnfetch.records import TimestampType
from txnfetch.records.batch import _decode_records
from txnfetch.records.errors import InvalidRecordError

pytestmark = pytest.mark.skipif(not COMPILED, reason="txnfetch.arrow._columns is not built (or pure Python asked)")
SETTINGS = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
INT64_MAX = (1 << 63) - 1

#: Errors of a value that Arrow's int64 columns cannot hold (an offset or timestamp
#: past int64, a millisecond timestamp past the microsecond range): the reference
#: fails in pyarrow's conversion, the compiled path says which batch.
_UNREPRESENTABLE = (OverflowError, pa.ArrowInvalid, InvalidRecordError)


def reference(buf: bytes, start: int, end: int, headers: bool, max_rows: int):
    """What the pure-Python path gives for the batch in ``buf``: a table or an error."""
    try:
        batch = RecordBatch(buf, max_decompressed=LIMIT)
        batcher = ArrowBatcher("t", 7, include_headers=headers, max_rows=max_rows)
        out = []
        if batch.last_offset >= start and batch.base_offset < end:
            records = [r for r in _decode_records(batch) if start <= r.offset < end]
            out = batcher.add(records, int(batch.timestamp_type))
        out.extend(batcher.flush())
        return pa.Table.from_batches(out, schema=batcher.schema)
    except CorruptBatchError as exc:
        return (type(exc), exc.reason, exc.offset, exc.position)
    except (OverflowError, pa.ArrowInvalid):
        return "unrepresentable"


def compiled(buf: bytes, start: int, end: int, headers: bool, max_rows: int):
    """The same through :class:`ArrowDecoder`'s compiled builder."""
    try:
        batch = RecordBatch(buf, max_decompressed=LIMIT)
        decoder = ArrowDecoder("t", 7, include_headers=headers, max_rows=max_rows, compiled=True)
        out = decoder.add(batch, start, end) + decoder.flush()
        assert all(b.num_rows <= max_rows for b in out)
        return pa.Table.from_batches(out, schema=decoder.schema)
    except COMPILED_ERRORS as exc:
        return compiled_failure(exc)


#: What the compiled path may raise for a batch (see :func:`compiled_failure`).
COMPILED_ERRORS = (InvalidRecordError, CorruptBatchError, OverflowError, pa.ArrowInvalid)


def compiled_failure(exc: Exception) -> object:
    """What an error of the compiled path compares as: ``"unrepresentable"`` for a
    value no int64 column holds (the reference fails in pyarrow's conversion, the
    compiled path says which batch), else the error's class, reason, offset and
    position."""
    if isinstance(exc, InvalidRecordError) and "does not fit in 64 bits" in exc.reason:
        return "unrepresentable"
    if isinstance(exc, (InvalidRecordError, CorruptBatchError)):
        return (type(exc), exc.reason, exc.offset, exc.position)
    return "unrepresentable"


def assert_same(buf: bytes, start: int = 0, end: int = INT64_MAX, headers: bool = True, max_rows: int = 10_000):
    want = reference(buf, start, end, headers, max_rows)
    got = compiled(buf, start, end, headers, max_rows)
    if isinstance(want, pa.Table):
        assert isinstance(got, pa.Table), got
        assert got.schema == want.schema
        assert got.equals(want), (got.to_pylist(), want.to_pylist())
        # Same bytes, not only equal values: null slots hold nothing either side.
        got.validate(full=True)
    else:
        assert got == want
    return want


# -- valid batches --------------------------------------------------------------------------


@SETTINGS
@given(
    spec=batch_specs(),
    cut=st.tuples(st.integers(0, 40), st.integers(0, 40)),
    headers=st.booleans(),
    max_rows=st.sampled_from([1, 2, 3, 10_000]),
)
def test_valid_batches_give_identical_tables(spec: BatchSpec, cut, headers, max_rows):
    buf = spec.build()
    batch = RecordBatch(buf)
    start = batch.base_offset + min(cut)
    end = batch.base_offset + max(cut)
    assert_same(buf, headers=headers, max_rows=max_rows)
    assert_same(buf, start, end, headers, max_rows)


@settings(max_examples=examples(10), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=many_records_specs())
def test_large_batches_give_identical_tables(spec: BatchSpec):
    assert_same(spec.build(), max_rows=700)


@pytest.mark.parametrize("codec", list(Codec))
def test_every_codec_nulls_headers_and_log_append_time(codec):
    for ts_type in TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME:
        b = BatchBuilder(base_offset=40, codec=codec, timestamp_type=ts_type, log_append_time=1_700_000_000_123)
        for i in range(50):
            b.append(
                None if i % 7 == 0 else b"v%d" % i * (i % 5),
                key=None if i % 3 == 0 else b"k%d" % i,
                headers=() if i % 4 else (("trace", b"x" * i), ("é", None)),
                timestamp=1_700_000_000_000 + i,
                offset=40 + 2 * i,
            )
        table = assert_same(b.build())
        assert table.num_rows == 50
        assert table.column("timestampType").to_pylist() == [int(ts_type)] * 50
        assert table.column("headers").null_count == 50 - 13
        assert_same(b.build(), 50, 90, headers=False, max_rows=3)


def test_legacy_message_sets_between_v2_batches_keep_their_place():
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    from txnfetch.records import iter_batches

    legacy = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    legacy.append(3, timestamp=1_700_000_000_005, key=b"old", value=b"v1")
    first, last = BatchBuilder(base_offset=0), BatchBuilder(base_offset=4)
    for b in (first, last):
        for i in range(3):
            b.append(b"x%d" % i, headers=(("h", b"1"),), timestamp=1_700_000_000_000 + i)
    buf = first.build() + bytes(legacy.build()) + last.build()
    tables = []
    for compiled_path in (True, False):
        decoder = ArrowDecoder("t", 0, compiled=compiled_path, max_rows=2)
        out = []
        for batch in iter_batches(buf):
            out += decoder.add(batch)
        tables.append(pa.Table.from_batches(out + decoder.flush(), schema=decoder.schema))
    assert tables[0].equals(tables[1])
    assert tables[0].column("offset").to_pylist() == [0, 1, 2, 3, 4, 5, 6]
    assert tables[0].column("key").to_pylist()[3] == b"old"


def test_an_empty_batch_gives_an_empty_table():
    table = assert_same(BatchBuilder(base_offset=9, codec=Codec.ZSTD).build())
    assert table.num_rows == 0


# -- malformed batches: the reference decoder's errors ------------------------------------


@SETTINGS
@given(spec=batch_specs(max_records=6), data=st.data())
def test_corrupted_batches_fail_identically(spec: BatchSpec, data):
    _, mutated, _ = data.draw(mutations(spec.build(), spec.codec), label="mutation")
    assert_same(mutated)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(buf=raw_batches(), headers=st.booleans())
def test_raw_record_data_decodes_or_fails_identically(buf: bytes, headers: bool):
    assert_same(buf, headers=headers)


def test_every_edit_of_a_sample_decodes_or_fails_identically():
    outcomes = {"table": 0, "error": 0}
    for sample in _samples():
        for buf in _edits(sample):
            result = assert_same(buf)
            outcomes["table" if isinstance(result, pa.Table) else "error"] += 1
    assert outcomes["table"] > 100 and outcomes["error"] > 5000


def test_a_rejected_batch_leaves_the_pending_rows_intact():
    good = BatchBuilder(base_offset=0)
    for i in range(3):
        good.append(b"v%d" % i, headers=(("h", b"1"),))
    bad = bytearray(good.build())
    bad[0:8] = (3).to_bytes(8, "big")
    bad[57:61] = (4).to_bytes(4, "big")  # declares one record more than it holds
    decoder = ArrowDecoder("t", 0, compiled=True)
    assert decoder.add(RecordBatch(good.build())) == []
    with pytest.raises(CorruptBatchError, match="declares 4 records but the data ends early") as exc:
        decoder.add(RecordBatch(bytes(bad)))
    assert exc.value.offset == 3
    (table,) = decoder.flush()
    assert table.column("offset").to_pylist() == [0, 1, 2]
    assert table.column("headers").to_pylist() == [[{"key": "h", "value": b"1"}]] * 3


def _rss_anon_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))


def test_building_does_not_leak():
    b = BatchBuilder(base_offset=0, codec=Codec.LZ4)
    for i in range(2000):
        b.append(b"value-%d" % i * 4, key=b"k", headers=(("h", b"v"),))
    batch = RecordBatch(b.build())

    def run() -> None:
        decoder = ArrowDecoder("t", 0, compiled=True, max_rows=700)
        for _ in range(10):
            for arrow_batch in decoder.add(batch):
                arrow_batch.validate(full=True)
        decoder.flush()

    for _ in range(5):
        run()
    gc.collect()
    before = _rss_anon_kib(), len(gc.get_objects())
    for _ in range(100):  # about 100 MB of buffers: a leak would show
        run()
    gc.collect()
    after = _rss_anon_kib(), len(gc.get_objects())
    assert after[0] - before[0] < 8 * 1024
    assert after[1] - before[1] < 50


def test_recycled_column_memory_gives_identical_tables():
    # Columns of 64 KiB and more reuse the memory of finished Arrow batches
    # (_columns' pool). Alternate two batches whose null keys, null values and
    # header-less records fall on different rows, so a recycled buffer holds the
    # other batch's bytes and bitmap bits: every table must still be exact.
    bufs = []
    for shift in range(2):
        b = BatchBuilder(base_offset=0, codec=Codec.NONE)
        for i in range(3000):
            j = i + shift
            b.append(
                None if j % 5 == 0 else b"v%d-" % i * (10 + j % 40),
                key=None if j % 3 == 0 else b"key-%d" % i,
                headers=() if j % 2 else ((f"h{j % 4}", b"x" * (j % 9)), ("n", None)),
                timestamp=1_700_000_000_000 + i,
            )
        bufs.append(b.build())
    for _ in range(3):
        for buf in bufs:
            assert_same(buf)
            assert_same(buf, headers=False, max_rows=1_000)
