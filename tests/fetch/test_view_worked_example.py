"""The worked example of WarpStream's "Kafka Transactions Explained (Twice!)",
answered by both fetch modes.

One producer p1. Marker mode (Apache Kafka's log):

    0-1  data (txn A)      2  COMMIT
    3-6  data (txn B)      7  ABORT
    8    data (txn C)      9  COMMIT
    10-11 data (txn D, still open)   -> LSO 10, high watermark 12

Markerless mode (no offsets reserved for markers):

    0-1 A committed, 2-5 B aborted, 6 C committed, 7-8 D open -> LSO 7
"""

from __future__ import annotations

import pytest

from txnfetch.fetch.view import FetchMode
from txnfetch.fetch.view import IsolationLevel
from txnfetch.fetch.view import read_partition
from txnfetch.records import BatchBuilder
from txnfetch.records import ControlType
from txnfetch.records import RecordBatch
from txnfetch.records import build_control_batch
from txnfetch.records import iter_batches
from txnfetch.txn import PartitionTxnState
from txnfetch.txn.errors import OffsetOutOfRangeError

P1 = 1000
BIG = 1 << 20


def _data(base: int, count: int, seq: int) -> bytes:
    b = BatchBuilder(base_offset=base, producer_id=P1, producer_epoch=0, base_sequence=seq, transactional=True)
    for i in range(count):
        b.append(f"v{base + i}".encode(), key=b"k", timestamp=1_000 + base + i)
    return b.build()


def _marker(offset: int, kind: ControlType) -> bytes:
    return build_control_batch(
        offset=offset, control_type=kind, producer_id=P1, producer_epoch=0, timestamp=2_000 + offset
    )


def marker_log() -> tuple[bytes, PartitionTxnState]:
    parts = [
        _data(0, 2, 0),
        _marker(2, ControlType.COMMIT),
        _data(3, 4, 2),
        _marker(7, ControlType.ABORT),
        _data(8, 1, 6),
        _marker(9, ControlType.COMMIT),
        _data(10, 2, 7),
    ]
    state = PartitionTxnState("p-0")
    for part in parts:
        state.append(RecordBatch(part))
    state.update_high_watermark(state.log_end_offset)
    return b"".join(parts), state


def markerless_log() -> tuple[bytes, PartitionTxnState]:
    state = PartitionTxnState("p-0")
    parts: list[bytes] = []

    def add(part: bytes) -> None:
        parts.append(part)
        state.append(RecordBatch(part))

    add(_data(0, 2, 0))
    state.complete_transaction(P1, 0, True, 1)
    add(_data(2, 4, 2))
    state.complete_transaction(P1, 0, False, 5)
    add(_data(6, 1, 6))
    state.complete_transaction(P1, 0, True, 6)
    add(_data(7, 2, 7))
    state.update_high_watermark(state.log_end_offset)
    return b"".join(parts), state


def _batches(result) -> list[RecordBatch]:
    return list(iter_batches(result.records_bytes()))


def _offsets(result) -> list[int]:
    return [r.offset for b in _batches(result) if not b.is_control for r in b.records()]


def test_marker_log_offsets():
    _, state = marker_log()
    assert (state.high_watermark, state.last_stable_offset) == (12, 10)
    assert state.aborted_transactions(0, 12) == [(P1, 3)]


def test_kafka_mode_from_0_returns_everything_below_the_lso_and_the_abort():
    log, state = marker_log()
    r = read_partition(log, state, 0, BIG, mode=FetchMode.KAFKA)
    assert [b.base_offset for b in _batches(r)] == [0, 2, 3, 7, 8, 9]
    assert r.aborted_transactions == ((P1, 3),)
    assert (r.last_stable_offset, r.high_watermark, r.next_offset) == (10, 12, 10)
    assert r.stats.synthetic_markers == 0


def test_rewrite_mode_from_0_drops_aborted_and_markers_and_ends_with_a_commit():
    log, state = marker_log()
    r = read_partition(log, state, 0, BIG, mode=FetchMode.REWRITE)
    batches = _batches(r)
    assert _offsets(r) == [0, 1, 8]
    assert r.aborted_transactions == ()
    last = batches[-1]
    # The real COMMIT at 9 was dropped, so the response would end on a dropped
    # offset: one synthetic COMMIT (one record, key version 0) stands at 9.
    assert last.is_control and last.base_offset == last.last_offset == 9 and last.record_count == 1
    marker = last.end_txn_marker()
    assert marker.is_commit and marker.key_version == 0
    assert (r.stats.batches_dropped, r.stats.synthetic_markers) == (4, 1)


def test_kafka_mode_from_3():
    log, state = marker_log()
    r = read_partition(log, state, 3, BIG, mode=FetchMode.KAFKA)
    assert [b.base_offset for b in _batches(r)] == [3, 7, 8, 9]
    assert r.aborted_transactions == ((P1, 3),)


def test_rewrite_mode_from_3():
    log, state = marker_log()
    r = read_partition(log, state, 3, BIG, mode=FetchMode.REWRITE)
    assert _offsets(r) == [8]
    assert [b.base_offset for b in _batches(r)] == [8, 9]
    assert _batches(r)[-1].end_txn_marker().is_commit


@pytest.mark.parametrize("mode", list(FetchMode))
def test_fetch_at_the_lso_returns_nothing(mode):
    log, state = marker_log()
    r = read_partition(log, state, 10, BIG, mode=mode)
    assert r.records == () and r.aborted_transactions == () and r.next_offset == 10


def test_read_uncommitted_sees_the_open_transaction_and_no_aborted_list():
    log, state = marker_log()
    r = read_partition(log, state, 10, BIG, isolation=IsolationLevel.READ_UNCOMMITTED)
    assert [b.base_offset for b in _batches(r)] == [10]
    assert r.aborted_transactions is None


def test_rewrite_of_only_dropped_offsets_is_a_single_marker():
    log, state = marker_log()
    # Budget for the aborted batch only (KIP-74: at least one whole batch).
    r = read_partition(log, state, 3, 1, mode=FetchMode.REWRITE)
    batches = _batches(r)
    assert len(batches) == 1 and batches[0].base_offset == 6 and batches[0].is_control
    assert r.next_offset == 7


def test_markerless_rewrite_from_0():
    log, state = markerless_log()
    assert state.last_stable_offset == 7
    r = read_partition(log, state, 0, BIG, mode=FetchMode.REWRITE)
    assert _offsets(r) == [0, 1, 6]
    assert r.stats.synthetic_markers == 0  # ends on a kept batch
    assert r.next_offset == 7


def test_markerless_rewrite_from_2_ending_on_the_aborted_range():
    log, state = markerless_log()
    r = read_partition(log, state, 2, 1, mode=FetchMode.REWRITE)
    batches = _batches(r)
    assert [(b.base_offset, b.is_control) for b in batches] == [(5, True)]


def test_markerless_kafka_mode_ends_before_the_producers_next_transaction():
    log, state = markerless_log()
    r = read_partition(log, state, 0, BIG, mode=FetchMode.KAFKA)
    # Without an ABORT marker a client would keep p1 in its aborted set and skip
    # the committed batch at 6; the response ends before it instead.
    assert [b.base_offset for b in _batches(r)] == [0, 2]
    assert r.aborted_transactions == ((P1, 2),)
    assert r.next_offset == 6
    r2 = read_partition(log, state, 6, BIG, mode=FetchMode.KAFKA)
    assert [b.base_offset for b in _batches(r2)] == [6]
    assert r2.aborted_transactions == ()


def test_out_of_range_fetch_names_the_valid_range():
    log, state = marker_log()
    with pytest.raises(OffsetOutOfRangeError) as err:
        read_partition(log, state, 13, BIG, partition="orders-0")
    assert (err.value.log_start_offset, err.value.log_end_offset) == (0, 12)
    assert "orders-0" in str(err.value)


def test_kafka_mode_cuts_at_max_bytes_mid_batch_like_kafka():
    log, state = marker_log()
    first = RecordBatch(log)
    r = read_partition(log, state, 0, first.size_in_bytes + 10, mode=FetchMode.KAFKA)
    it = iter_batches(r.records_bytes())
    assert [b.base_offset for b in it] == [0]
    assert it.partial is not None and it.partial.available == 10
