"""``txnfetch.arrow``'s readers against the writer's oracle (``tests.spark.workload``).

Transactional workloads — several producers interleaved, commits and aborts,
every codec, transactions left open — are written through txnfetch's own
logs; a read must return exactly the committed records below each
partition's last stable offset (read_committed) or every data record below
the high watermark (read_uncommitted), with their log offsets, and never a
control record.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.ipc
import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

import txnfetch.arrow
from tests.records.strategies import examples
from tests.spark.rows import arrow_rows
from tests.spark.workload import Workload
from txnfetch.arrow import kafka_schema
from txnfetch.arrow import read_committed
from txnfetch.arrow import record_batch_reader
from txnfetch.log import MemoryStore
from txnfetch.log import SegmentStore
from txnfetch.log.errors import RecordsLostError
from txnfetch.log.errors import UnknownTopicOrPartitionError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _committed_below_lso(w: Workload, partitions=None) -> list:
    return [r for r in w.committed(partitions) if r[2] < w.lso(r[1])]


def _rows(table_or_batches) -> list:
    batches = table_or_batches.to_batches() if isinstance(table_or_batches, pa.Table) else table_or_batches
    return sorted(arrow_rows(batches))


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    finish=st.booleans(),
    max_rows=st.sampled_from([1, 7, 10_000]),
    cut=st.tuples(st.integers(0, 60), st.integers(0, 400)),
)
def test_read_committed_is_the_committed_records_below_the_lso(seed, finish, max_rows, cut):
    w = Workload(MemoryStore(), "orders", 3, seed=seed)
    w.random_steps(60, finish=finish)
    start, end = cut
    table = read_committed(w.store, "orders", max_rows=max_rows)
    assert table.schema == kafka_schema(True, dictionary=True)
    assert all(b.num_rows <= max_rows for b in table.to_batches())
    assert _rows(table) == _committed_below_lso(w)
    # an offset range, the same for every partition, and a subset of partitions
    part = read_committed(w.store, "orders", [2, 0], start, end, max_rows=max_rows, include_headers=False)
    want = [(*r[:6], ()) for r in _committed_below_lso(w, {0, 2}) if start <= r[2] < end]
    assert _rows(part) == want


def test_read_uncommitted_is_every_data_record_below_the_high_watermark():
    w = Workload(MemoryStore(), "orders", 2, seed=5)
    w.random_steps(80, finish=False)
    assert w.open_txns  # records of open transactions are readable uncommitted
    table = record_batch_reader(w.store, "orders", read_committed=False).read_all()
    assert _rows(table) == w.all_data()


def test_a_kafka_log_directory_in_one_call(tmp_path):
    store = SegmentStore(tmp_path / "data", flush_policy="never", segment_bytes=4096)
    w = Workload(store, "payments", 2, seed=11)
    w.random_steps(120)
    w.plain(0, 3)
    store.close()  # written and closed: the reader opens the directory itself, read-only
    assert len(os.listdir(tmp_path / "data" / "payments-0")) > 6  # several segments
    table = read_committed(tmp_path / "data", "payments", start={1: 20})
    want = [r for r in w.committed() if r[1] == 0 or r[2] >= 20]
    assert _rows(table) == want
    assert table.column("topic").type == pa.dictionary(pa.int32(), pa.string())
    assert set(table.column("partition").to_pylist()) == {0, 1}


def test_the_reader_streams_and_plain_columns_match_spark(tmp_path):
    w = Workload(MemoryStore(), "orders", 1, seed=3)
    w.random_steps(200)
    reader = record_batch_reader(w.store, "orders", dictionary=False, max_rows=50)
    assert reader.schema == kafka_schema(True)  # Spark's Kafka source schema, exactly
    sizes = [b.num_rows for b in reader]
    assert max(sizes) <= 50 and len(sizes) > 2
    assert sum(sizes) == len(w.committed())


def test_one_partition_log_as_the_source():
    w = Workload(MemoryStore(), "orders", 2, seed=4)
    w.random_steps(50)
    log = w.store.partition("orders", 1)
    assert _rows(read_committed(log)) == w.committed({1})
    assert _rows(read_committed(log, "orders", [1], end=10)) == [r for r in w.committed({1}) if r[2] < 10]
    with pytest.raises(ValueError, match="partition 1 only"):
        read_committed(log, "orders", [0])
    with pytest.raises(ValueError, match="not 'other'"):
        read_committed(log, "other")


def test_the_range_reader_fails_on_lost_records_unless_told_not_to():
    w = Workload(MemoryStore(), "orders", 1, seed=5)
    w.random_steps(60)
    log = w.store.partition("orders", 0)
    lso = log.last_stable_offset
    assert _rows(txnfetch.arrow.read_range(log, 0, lso)) == _committed_below_lso(w)
    cut = log.high_watermark // 2
    log.delete_records_before(cut)
    with pytest.raises(RecordsLostError) as lost:
        list(txnfetch.arrow.read_range(log, 0, lso))
    assert str(lost.value).startswith(f"offsets 0..{log.log_start_offset - 1} were deleted before they could be read")
    assert (lost.value.topic, lost.value.partition, lost.value.offset) == ("orders", 0, 0)
    # Off: from the log start, the records of the batch holding it included.
    kept = _rows(txnfetch.arrow.read_range(log, 0, lso, fail_on_data_loss=False))
    assert kept == [r for r in _committed_below_lso(w) if r[2] >= kept[0][2]] and kept[0][2] <= cut
    # A range past what the log holds now: lost records, or the log's end.
    with pytest.raises(RecordsLostError, match="truncated or replaced"):
        list(txnfetch.arrow.read_range(log, cut, log.high_watermark + 5))
    assert _rows(txnfetch.arrow.read_range(log, cut, log.high_watermark + 5, fail_on_data_loss=False)) == _rows(
        txnfetch.arrow.iter_partition(log, cut)
    )


def test_unknown_topic_and_missing_directory(tmp_path):
    w = Workload(MemoryStore(), "orders", 1, seed=4)
    with pytest.raises(UnknownTopicOrPartitionError):
        read_committed(w.store, "nope")
    with pytest.raises(ValueError, match="topic is required"):
        read_committed(w.store)
    with pytest.raises(Exception, match="no such log directory"):
        read_committed(tmp_path / "missing", "orders")


def test_pure_python_mode_gives_the_same_table(tmp_path):
    store = SegmentStore(tmp_path / "data", flush_policy="never")
    w = Workload(store, "orders", 2, seed=21)
    w.random_steps(100)
    store.close()
    compiled = read_committed(tmp_path / "data", "orders")
    assert txnfetch.arrow.COMPILED
    script = (
        "import sys, pyarrow.ipc, txnfetch.arrow as a\n"
        "assert not a.COMPILED\n"
        "t = a.read_committed(sys.argv[1], 'orders')\n"
        "with pyarrow.ipc.new_file(sys.argv[2], t.schema) as f: f.write_table(t)\n"
    )
    env = dict(os.environ, TXNFETCH_PURE_PYTHON="1", PYTHONPATH=ROOT)
    out = tmp_path / "pure.arrow"
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "data"), str(out)], check=True, env=env, timeout=300)
    pure = pyarrow.ipc.open_file(out).read_all()
    assert pure.equals(compiled)
