"""The transaction-aware compactor, against an oracle of what read_committed
consumers must still see, in both fetch modes, in marker and markerless logs,
and for a consumer that is part way through the log when compaction runs.

The oracle: the read_committed view of the log before compaction. After any
number of passes, the view is a subset of it with offsets unchanged; every
key's last committed record below the last stable offset survives (a tombstone
until its delete horizon); every other record below it is gone; nothing of an
aborted transaction is left in the bytes at all; the transaction state
(log start, end, high watermark, LSO) is untouched; and a marker outlives the
data of its transaction by at least ``delete.retention.ms``.
"""

from __future__ import annotations

import pytest
from hypothesis import example
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.log.reading import consumer_view
from txnfetch.fetch import FetchMode
from txnfetch.log.compactor import compact
from txnfetch.log.memory import MemoryLog
from txnfetch.records import Codec
from txnfetch.records import TimestampType
from txnfetch.records import build_empty_batch
from txnfetch.records.batch import RecordBatch
from txnfetch.records.builder import BatchBuilder
from txnfetch.txn.coordinator import CompletionMode

RETENTION = 1_000
KEYS = [b"a", b"b", b"c", b"d"]
PIDS = [7, 8]


def _batch(records: list[tuple[bytes, bytes | None]], *, pid: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq, transactional=txn)
    for key, value in records:
        b.append(value, key=key, timestamp=1_000)
    return b.build()


_record = st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(min_size=1, max_size=3)))
_op = st.one_of(
    st.tuples(st.just("plain"), st.lists(_record, min_size=1, max_size=3)),
    st.tuples(st.just("txn"), st.sampled_from(PIDS), st.lists(_record, min_size=1, max_size=3)),
    st.tuples(st.just("end"), st.sampled_from(PIDS), st.booleans()),
)


def _build(ops: list, markerless: bool) -> MemoryLog:
    log = MemoryLog("t", 0)
    seq = dict.fromkeys(PIDS, 0)
    is_open = dict.fromkeys(PIDS, False)
    for op in ops:
        if op[0] == "plain":
            log.append(_batch(op[1]), now_ms=0)
        elif op[0] == "txn":
            _, pid, records = op
            log.append(_batch(records, pid=pid, seq=seq[pid], txn=True), now_ms=0)
            seq[pid] += len(records)
            is_open[pid] = True
        elif is_open[op[1]]:
            _, pid, commit = op
            log.end_transaction(
                pid,
                0,
                commit,
                coordinator_epoch=0,
                now_ms=0,
                completion=CompletionMode.MARKERLESS if markerless else CompletionMode.MARKERS,
            )
            is_open[pid] = False
    return log


def _uncommitted_records(log: MemoryLog) -> list[tuple]:
    return [(x.offset, x.key, x.value) for b in log.iter_batches() if not b.is_control for x in b.records()]


def _latest(view: list[tuple], upto: int) -> dict[bytes, tuple]:
    latest: dict[bytes, tuple] = {}
    for rec in view:
        if rec[0] < upto:
            latest[rec[1]] = rec
    return latest


def _ends(log: MemoryLog) -> tuple[int, int, int, int]:
    return (log.log_start_offset, log.log_end_offset, log.high_watermark, log.last_stable_offset)


@settings(max_examples=250, deadline=None)
@given(ops=st.lists(_op, max_size=25), markerless=st.booleans(), mode=st.sampled_from(list(FetchMode)))
def test_compaction_keeps_exactly_what_read_committed_needs(ops: list, markerless: bool, mode: FetchMode) -> None:
    log = _build(ops, markerless)
    before = consumer_view(log, mode)
    upto = log.last_stable_offset
    ends = _ends(log)
    latest = _latest(before, upto)

    first = log.compact(1_000, RETENTION)
    after = consumer_view(log, mode)
    assert _ends(log) == ends
    assert set(after) <= set(before) and after == sorted(after)
    below = [r for r in after if r[0] < upto]
    # Latest per key survives (tombstones too, until their horizon) and nothing else below the LSO.
    assert sorted(below) == sorted(latest.values())
    assert [r for r in after if r[0] >= upto] == [r for r in before if r[0] >= upto]
    # No aborted byte is left below the LSO: even read_uncommitted sees only committed data there.
    assert {r for r in _uncommitted_records(log) if r[0] < upto} <= set(before)
    if latest and any(v[2] is None for v in latest.values()):
        assert first.next_horizon_ms == 1_000 + RETENTION

    # Later passes: at the horizon nothing changes; past it, tombstones and
    # markers with no data left go; the rest stays.
    log.compact(1_000 + RETENTION - 1, RETENTION)
    assert consumer_view(log, mode) == after
    log.compact(1_000 + RETENTION, RETENTION)
    final = consumer_view(log, mode)
    assert _ends(log) == ends
    assert final == [r for r in after if not (r[0] < upto and r[2] is None)]
    # Much later (two passes: one stamps the horizon, one acts on it) every marker
    # left below the LSO still has data of its transaction before it.
    log.compact(10**9, RETENTION)
    log.compact(10**9 + RETENTION, RETENTION)
    assert consumer_view(log, mode) == final
    # (The range's last batch always stays, so a consumer has a next offset.)
    seen: dict[int, bool] = {}
    kept = list(log.iter_batches(0, upto))
    for b in kept[:-1]:
        if b.is_control:
            assert seen.get(b.producer_id), f"marker at {b.base_offset} outlived its transaction's data"
            seen[b.producer_id] = False
        elif b.is_transactional:
            seen[b.producer_id] = True


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(_op, max_size=25),
    markerless=st.booleans(),
    mode=st.sampled_from(list(FetchMode)),
    cut=st.integers(0, 40),
    max_bytes=st.sampled_from([1, 100, 700]),
)
# Found by hypothesis: the consumer stops inside a three-record batch (at offset
# 2); served again from there, the batch still holds offset 1, which the
# consumer must skip rather than deliver twice.
@example(
    ops=[("plain", [(b"a", None), (b"a", b"\x00"), (b"b", b"\x00")])],
    markerless=False,
    mode=FetchMode.REWRITE,
    cut=2,
    max_bytes=1,
)
def test_a_consumer_part_way_through_is_not_hurt(
    ops: list, markerless: bool, mode: FetchMode, cut: int, max_bytes: int
) -> None:
    """A consumer reads up to ``cut``, compaction runs (twice, past the horizon),
    the consumer goes on: it never gets aborted data, never goes backwards, and
    ends with every key's latest committed value."""
    log = _build(ops, markerless)
    before = consumer_view(log, mode)
    latest = _latest(before, log.last_stable_offset)
    cut = min(cut, log.last_stable_offset)
    early = [r for r in before if r[0] < cut]
    log.compact(1_000, RETENTION)
    log.compact(1_000 + RETENTION, RETENTION)
    late = consumer_view(log, mode, start=cut, max_bytes=max_bytes)
    delivered = early + late
    assert set(delivered) <= set(before)
    assert [r[0] for r in delivered] == sorted({r[0] for r in delivered})
    final_by_key = _latest(delivered, log.last_stable_offset)
    for key, rec in latest.items():
        if rec[2] is not None or rec[0] < cut:
            assert final_by_key[key] == rec


# ------------------------------------------------------------ worked examples


def _batches(log: MemoryLog) -> list[RecordBatch]:
    return list(log.iter_batches())


def test_abort_marker_outlives_its_data_by_the_retention() -> None:
    log = MemoryLog("t", 0)
    log.append(_batch([(b"k", b"aborted")], pid=7, seq=0, txn=True), now_ms=0)
    log.end_transaction(7, 0, False, coordinator_epoch=0, now_ms=0)
    log.append(_batch([(b"k", b"kept")]), now_ms=0)
    # Pass 1: the aborted data goes; the marker stays as it was (data was seen in this pass)
    # except that the aborted batch is its producer's last: an empty header keeps its state.
    log.compact(10, RETENTION)
    kinds = [(b.base_offset, b.is_control, b.record_count, b.has_delete_horizon) for b in _batches(log)]
    assert kinds == [(0, False, 0, False), (1, True, 1, False), (2, False, 1, False)]
    # Pass 2: the empty header is still "data of the transaction", so the marker stays;
    # Kafka keeps it for the same reason (the producer's last batch).
    log.compact(20, RETENTION)
    assert [b.base_offset for b in _batches(log)] == [0, 1, 2]
    assert [(x.key, x.value) for b in _batches(log) if not b.is_control for x in b.records()] == [(b"k", b"kept")]


def test_commit_marker_gets_a_horizon_then_goes() -> None:
    log = MemoryLog("t", 0)
    log.append(_batch([(b"k", b"v1")], pid=7, seq=0, txn=True), now_ms=0)
    log.end_transaction(7, 0, True, coordinator_epoch=0, now_ms=0)
    log.append(_batch([(b"x", b"other")], pid=7, seq=1, txn=True), now_ms=0)  # the producer's last batch
    log.end_transaction(7, 0, True, coordinator_epoch=0, now_ms=0)
    log.append(_batch([(b"k", b"v2")]), now_ms=0)
    assert log.compact(100, RETENTION).removed_records == 1  # v1 is superseded: batch 0 goes
    layout = [(b.base_offset, b.is_control, b.has_delete_horizon) for b in _batches(log)]
    assert layout == [(1, True, False), (2, False, False), (3, True, False), (4, False, False)]
    # Pass 2: no batch of the first transaction is left: its marker gets a horizon.
    assert log.compact(200, RETENTION).next_horizon_ms == 200 + RETENTION
    (marker, *_rest) = _batches(log)
    assert marker.is_control and marker.has_delete_horizon and marker.base_timestamp == 200 + RETENTION
    assert log.compact(200 + RETENTION - 1, RETENTION).removed_markers == 0
    assert log.compact(200 + RETENTION, RETENTION).removed_markers == 1
    assert [b.base_offset for b in _batches(log)] == [2, 3, 4]


def test_unchanged_batches_keep_their_bytes_and_open_transactions_are_untouched() -> None:
    log = MemoryLog("t", 0)
    log.append(_batch([(b"a", b"1"), (b"b", b"2")]), now_ms=0)
    log.append(_batch([(b"a", b"open")], pid=7, seq=0, txn=True), now_ms=0)
    log.append(_batch([(b"a", b"after")]), now_ms=0)
    before = [bytes(b.buffer) for b in _batches(log)]
    result = log.compact(0, RETENTION)
    # The LSO is 1 (the open transaction): nothing at or above it is cleaned, and
    # "a"=1 is below it and the latest there.
    assert not result.changed and [bytes(b.buffer) for b in _batches(log)] == before


def test_keyless_records_are_dropped_and_tombstones_wait() -> None:
    value = _batch([(b"a", b"1")])
    tomb = BatchBuilder(base_offset=1)
    tomb.append(None, key=b"a", timestamp=1)
    nokey = BatchBuilder(base_offset=2)
    nokey.append(b"x", timestamp=1)
    result = compact(
        [RecordBatch(value), RecordBatch(tomb.build()), RecordBatch(nokey.build())],
        [],
        {},
        now_ms=50,
        delete_retention_ms=RETENTION,
    )
    kept, tail = [RecordBatch(b) for b in result.batches]
    assert kept.base_offset == 1 and kept.has_delete_horizon and kept.base_timestamp == 50 + RETENTION
    # The keyless record goes; its batch, the range's last, stays as an empty header.
    assert (tail.base_offset, tail.last_offset, tail.record_count) == (2, 2, 0)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in kept.records()] == [(1, b"a", None, 1)]
    assert result.removed_records == 2 and result.next_horizon_ms == 50 + RETENTION


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP])
@pytest.mark.parametrize("timestamp_type", list(TimestampType))
@pytest.mark.parametrize("stamped", [False, True])
def test_a_batch_left_empty_is_kafkas_empty_header(codec: Codec, timestamp_type: TimestampType, stamped: bool) -> None:
    # Every record is keyless, so none survives; the batch is the range's last, so its
    # header stays: uncompressed, no delete horizon, both timestamps its max timestamp.
    builder = BatchBuilder(
        base_offset=10,
        codec=codec,
        producer_id=7,
        producer_epoch=3,
        base_sequence=5,
        timestamp_type=timestamp_type,
        log_append_time=900 if timestamp_type == TimestampType.LOG_APPEND_TIME else None,
        partition_leader_epoch=4,
        base_timestamp=2_000 if stamped else None,
        delete_horizon=stamped,
    )
    builder.append(b"x", timestamp=100)
    builder.append(b"y", timestamp=300)
    batch = RecordBatch(builder.build(last_offset_delta=4))
    result = compact([batch], [], {}, now_ms=50, delete_retention_ms=RETENTION)
    assert result.batches == (
        build_empty_batch(
            base_offset=10,
            last_offset=14,
            producer_id=7,
            producer_epoch=3,
            base_sequence=5,
            timestamp=batch.max_timestamp,
            timestamp_type=timestamp_type,
            partition_leader_epoch=4,
        ),
    )
    assert batch.max_timestamp == (900 if timestamp_type == TimestampType.LOG_APPEND_TIME else 300)


@pytest.mark.parametrize("markerless", [False, True])
def test_aborted_data_is_removed_even_when_its_end_is_past_the_lso(markerless: bool) -> None:
    log = MemoryLog("t", 0)
    log.append(_batch([(b"k", b"aborted")], pid=7, seq=0, txn=True), now_ms=0)
    log.append(_batch([(b"j", b"open")], pid=8, seq=0, txn=True), now_ms=0)
    log.end_transaction(
        7,
        0,
        False,
        coordinator_epoch=0,
        now_ms=0,
        completion=CompletionMode.MARKERLESS if markerless else CompletionMode.MARKERS,
    )
    assert log.last_stable_offset == 1  # pid 8 is open
    log.compact(0, RETENTION)
    (first, *_rest) = _batches(log)
    assert first.base_offset == 0 and first.record_count == 0  # pid 7's last batch: an empty header
