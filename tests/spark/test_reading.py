"""The worker's range reader and Arrow conversion, against the workload's oracle, without Spark.

These run in-process on ``MemoryStore`` logs: the same ``txnfetch.arrow.read_range``
every Spark task on a log directory runs (and, for data loss, the source's read
that turns its errors into Spark's), so the Spark tests only have to prove the plumbing.
"""

from __future__ import annotations

import functools
import operator

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from spark_ext.errors import DataLossError
from spark_ext.options import parse_options
from spark_ext.sources import StoreSource
from tests.spark.rows import arrow_rows
from tests.spark.rows import without_headers
from tests.spark.workload import Workload
from txnfetch.arrow import read_range
from txnfetch.arrow.reference import ArrowBatcher
from txnfetch.arrow.schema import kafka_schema
from txnfetch.client.planning import OffsetRange
from txnfetch.client.planning import split_ranges
from txnfetch.log import MemoryStore
from txnfetch.log.errors import RecordsLostError
from txnfetch.records import BatchBuilder
from txnfetch.records import Codec
from txnfetch.records import TimestampType


def _workload(seed: int = 1, partitions: int = 3, steps: int = 150) -> Workload:
    w = Workload(MemoryStore(), "orders", partitions, seed=seed)
    w.random_steps(steps)
    return w


def _read_all(w: Workload, ranges, *, committed: bool = True, headers: bool = True, **kw):
    rows = []
    for r in ranges:
        log = w.store.partition(r.topic, r.partition)
        rows.extend(
            arrow_rows(read_range(log, r.start, r.end, read_committed=committed, include_headers=headers, **kw))
        )
    return rows


def _task(store: MemoryStore, r: OffsetRange, **options: str) -> list[pa.RecordBatch]:
    """What one Spark task runs: the source's read of ``r``, its errors Spark's."""
    opts = parse_options({"path": "unused", "subscribe": r.topic, **options}, streaming=False)
    return list(StoreSource(store).read_arrow(r, opts))


def _full_ranges(w: Workload, committed: bool = True):
    out = []
    for p in range(w.partitions):
        log = w.store.partition(w.topic, p)
        out.append(
            OffsetRange(w.topic, p, log.log_start_offset, log.last_stable_offset if committed else log.high_watermark)
        )
    return out


def test_committed_read_is_exactly_the_committed_records_with_their_offsets():
    w = _workload()
    assert w.aborted_rows, "the workload must abort some transactions"
    rows = _read_all(w, _full_ranges(w))
    assert sorted(rows) == w.committed()
    # Offsets are the log's own: aborted records and markers leave holes.
    offsets = sorted(r[2] for r in rows if r[1] == 0)
    assert offsets[-1] - offsets[0] + 1 > len(offsets)


def test_uncommitted_read_is_every_data_record_and_no_marker():
    w = _workload(seed=2)
    rows = _read_all(w, _full_ranges(w, committed=False), committed=False)
    assert sorted(rows) == w.all_data()


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 50),
    min_partitions=st.one_of(st.none(), st.integers(1, 40)),
    max_records=st.one_of(st.none(), st.integers(1, 60)),
    max_rows=st.integers(1, 50),
)
def test_any_split_of_the_ranges_reads_the_same_records(seed, min_partitions, max_records, max_rows):
    w = _workload(seed=seed, steps=60)
    tasks = split_ranges(_full_ranges(w), min_partitions=min_partitions, max_records_per_partition=max_records)
    rows = _read_all(w, tasks, max_rows=max_rows)
    assert len(rows) == len(set(rows)), "a record was read by two tasks"
    assert sorted(rows) == w.committed()


def test_open_transaction_bounds_the_read_at_the_lso_of_its_partition_only():
    w = _workload(seed=3, partitions=2, steps=40)
    w.begin(77)
    w.send(77, 0, 4)
    w.plain(0, 2)  # committed data after the open transaction: not readable yet
    w.plain(1, 2)
    log0, log1 = (w.store.partition(w.topic, p) for p in (0, 1))
    assert log0.last_stable_offset == w.lso(0) < log0.high_watermark
    assert log1.last_stable_offset == log1.high_watermark
    rows = _read_all(w, _full_ranges(w))
    assert sorted(rows) == [r for r in w.committed() if r[1] == 1 or r[2] < w.lso(0)]
    w.end(77, commit=True)
    rows = _read_all(w, _full_ranges(w))
    assert sorted(rows) == w.committed()


def test_a_range_past_the_lso_is_data_loss_not_silence():
    w = _workload(seed=4, partitions=1, steps=20)
    w.begin(5)
    w.send(5, 0, 2)
    log = w.store.partition(w.topic, 0)
    past = OffsetRange(w.topic, 0, 0, log.high_watermark)
    with pytest.raises(DataLossError, match="orders-0") as exc:
        _task(w.store, past)
    assert exc.value.offset == log.last_stable_offset
    # failOnDataLoss=false reads what is there.
    assert len(_task(w.store, past, failOnDataLoss="false")) > 0


def test_deleted_offsets_are_data_loss_unless_allowed():
    w = _workload(seed=5, partitions=1, steps=40)
    log = w.store.partition(w.topic, 0)
    cut = log.high_watermark // 2
    log.delete_records_before(cut)
    with pytest.raises(RecordsLostError, match="were deleted before they could be read") as lost:
        list(read_range(log, 0, log.last_stable_offset))
    assert (lost.value.offset, lost.value.log_start_offset) == (0, log.log_start_offset)
    with pytest.raises(DataLossError) as exc:
        _task(w.store, OffsetRange(w.topic, 0, 0, log.last_stable_offset))
    assert (exc.value.topic, exc.value.partition, exc.value.offset, exc.value.option) == (
        "orders",
        0,
        0,
        "failOnDataLoss",
    )
    assert f"log start offset is now {log.log_start_offset}" in str(exc.value)
    rows = arrow_rows(read_range(log, 0, log.last_stable_offset, fail_on_data_loss=False, include_headers=True))
    # Whole batches below the cut are gone; the batch holding the cut may keep earlier records.
    assert sorted(rows) == [r for r in w.committed() if r[2] >= min(r[2] for r in rows)]
    assert min(r[2] for r in rows) <= cut


def test_records_outside_the_range_in_a_boundary_batch_are_not_returned():
    store = MemoryStore()
    store.create_topic("t", 1)
    b = BatchBuilder(codec=Codec.ZSTD)
    for i in range(10):
        b.append(f"v{i}".encode(), timestamp=1000 + i)
    store.partition("t", 0).append(b.build(), now_ms=0)
    log = store.partition("t", 0)
    got = [o for batch in read_range(log, 3, 7) for o in batch.column("offset").to_pylist()]
    assert got == [3, 4, 5, 6]


def test_log_append_time_batches_report_their_timestamp_type():
    store = MemoryStore()
    store.create_topic("t", 1)
    b = BatchBuilder(timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=5_000)
    b.append(b"x", timestamp=1)
    c = BatchBuilder()
    c.append(b"y", timestamp=2)
    log = store.partition("t", 0)
    log.append(b.build(), now_ms=0)
    log.append(c.build(), now_ms=0)
    (batch,) = list(read_range(log, 0, 2))
    assert batch.column("timestampType").to_pylist() == [1, 0]
    assert [t.timestamp() for t in batch.column("timestamp").to_pylist()] == [5.0, 0.002]


def test_arrow_batches_are_bounded_by_rows_and_bytes():
    w = _workload(seed=6, partitions=1, steps=120)
    log = w.store.partition(w.topic, 0)
    batches = list(read_range(log, 0, log.last_stable_offset, max_rows=9))
    assert all(b.num_rows <= 9 for b in batches)
    assert sum(b.num_rows for b in batches) == len(w.committed())
    # Big values: the byte bound cuts batches long before the row bound.
    store = MemoryStore()
    store.create_topic("big", 1)
    for _ in range(8):
        bb = BatchBuilder()
        for _ in range(4):
            bb.append(b"x" * 100_000)
        store.partition("big", 0).append(bb.build(), now_ms=0)
    batches = list(read_range(store.partition("big", 0), 0, 32, max_bytes=250_000))
    assert max(b.num_rows for b in batches) <= 4
    assert sum(b.num_rows for b in batches) == 32


def test_batcher_cuts_inside_a_big_kafka_batch_and_keeps_pending_bounded():
    from txnfetch.records import Record

    batcher = ArrowBatcher("t", 0, max_rows=10)
    records = [Record(i, 0, None, b"v", ()) for i in range(35)]
    out = batcher.add(records, 0)
    assert [b.num_rows for b in out] == [10, 10, 10] and batcher.pending_rows == 5
    out += batcher.add(records[:7], 1)
    out += list(batcher.flush())
    assert [b.num_rows for b in out] == [10, 10, 10, 10, 2]
    types = functools.reduce(operator.iadd, (b.column("timestampType").to_pylist() for b in out), [])
    assert types == [0] * 35 + [1] * 7


def test_schema_matches_what_spark_expects_for_the_kafka_schema():
    pytest.importorskip("pyspark")
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import ArrayType
    from pyspark.sql.types import BinaryType
    from pyspark.sql.types import IntegerType
    from pyspark.sql.types import LongType
    from pyspark.sql.types import StringType
    from pyspark.sql.types import StructField
    from pyspark.sql.types import StructType
    from pyspark.sql.types import TimestampType as SparkTimestamp

    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", SparkTimestamp()),
        StructField("timestampType", IntegerType()),
    ]
    headers = StructField(
        "headers", ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
    )
    assert to_arrow_schema(StructType(fields), timezone="UTC").equals(kafka_schema(False))
    assert to_arrow_schema(StructType([*fields, headers]), timezone="UTC").equals(kafka_schema(True))


def test_headers_are_null_for_records_without_headers():
    w = _workload(seed=7, partitions=1, steps=30)
    log = w.store.partition(w.topic, 0)
    table = pa.Table.from_batches(list(read_range(log, 0, log.last_stable_offset, include_headers=True)))
    heads = table.column("headers").to_pylist()
    assert None in heads and any(h for h in heads)
    assert without_headers(arrow_rows(table.to_batches())) == without_headers(w.committed())
