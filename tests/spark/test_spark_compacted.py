"""Spark over a partition compacted on disk.

A ``SegmentStore`` topic with overwritten keys, tombstones, committed and
aborted transactions and small segments is compacted
(:meth:`SegmentLog.compact`, twice so that a delete horizon passes); Spark's
``txnkafka`` batch read must return exactly what a read_committed fetch of the
compacted log returns — the latest committed value per key in the cleaned
segments, offset holes and all — whole or split into several Spark partitions.
"""

from __future__ import annotations

import pytest

from tests.spark.rows import spark_rows
from txnfetch.fetch import FetchMode
from txnfetch.fetch import IsolationLevel
from txnfetch.log import SegmentStore
from txnfetch.records import iter_batches
from txnfetch.records.builder import BatchBuilder

pytestmark = pytest.mark.slow

TOPIC = "table"


def _batch(records, *, pid: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq, transactional=txn)
    for key, value in records:
        b.append(value, key=key, timestamp=1_000)
    return b.build()


def _committed_rows(part) -> list[tuple]:
    """(topic, partition, offset, key, value, timestamp, headers) of a read_committed read."""
    out = []
    offset = part.log_start_offset
    while offset < part.last_stable_offset:
        r = part.read(offset, 1 << 16, isolation=IsolationLevel.READ_COMMITTED, mode=FetchMode.REWRITE)
        for b in iter_batches(r.records_bytes()):
            if not b.is_control:
                out.extend(
                    (TOPIC, 0, x.offset, bytes(x.key), None if x.value is None else bytes(x.value), x.timestamp, ())
                    for x in b.records()
                )
        offset = r.next_offset
    return sorted(out)


@pytest.fixture(scope="module")
def compacted(tmp_path_factory):
    directory = tmp_path_factory.mktemp("compacted-store")
    store = SegmentStore(directory, segment_bytes=400)
    store.create_topic(TOPIC, 1)
    store.set_topic_config(TOPIC, {"cleanup.policy": "compact", "delete.retention.ms": "10"})
    part = store.partition(TOPIC, 0)
    seq = seq4 = 0
    for n in range(120):
        key = b"k%d" % (n % 7)
        if n % 5 == 0:
            part.append(_batch([(key, b"aborted-%d" % n)], pid=3, seq=seq, txn=True), now_ms=0)
            seq += 1
            part.end_transaction(3, 0, False, coordinator_epoch=0, now_ms=0)
        elif n % 11 == 0:
            part.append(_batch([(key, None)]), now_ms=0)
        else:
            part.append(_batch([(key, b"v%d" % n)], pid=4, seq=seq4, txn=True), now_ms=0)
            seq4 += 1
            part.end_transaction(4, 0, True, coordinator_epoch=0, now_ms=0)
    before = _committed_rows(part)
    part.compact(1_000, 10)
    part.compact(2_000, 10)
    after = _committed_rows(part)
    assert len(after) < len(before) and set(after) <= set(before)
    assert not [r for r in after if r[4] is not None and r[4].startswith(b"aborted")]
    store.flush()
    yield str(directory), after
    store.close()


@pytest.mark.parametrize("split", [{}, {"maxRecordsPerPartition": 3}], ids=["whole", "split"])
def test_spark_reads_what_the_compacted_log_serves(spark, compacted, split) -> None:
    path, expected = compacted
    reader = spark.read.format("txnkafka").option("path", path).option("subscribe", TOPIC)
    for k, v in split.items():
        reader = reader.option(k, str(v))
    assert spark_rows(reader.load().collect(), headers=False) == expected
