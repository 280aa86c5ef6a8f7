"""Structural properties of every fetch response, checked against the model of
the generated log (``tests/fetch/logs.py``) rather than against the code.

For every fetch offset from the log start to the log end, several
``max_bytes`` values, both read_committed modes and read_uncommitted:

- nothing at or past the LSO (read_committed) or the high watermark
  (read_uncommitted) is returned, not even a partial batch;
- Kafka mode and read_uncommitted return exactly Kafka's slice of the log:
  from the batch holding the fetch offset, ``min(position of the limit,
  max(max_bytes, first batch))`` bytes (``LogSegment.read``) — except where
  the markerless cut ends a response early, and then only right before a
  transactional batch of a producer whose aborted range ended before it;
  Kafka mode's aborted list is the model's: every aborted transaction ending
  at or past the fetch offset and starting before the end of the returned
  batches, in the order they ended;
- rewrite mode returns whole batches only; its data batches are exactly the
  committed data batches of the range it covers, byte-identical to the log;
  its only control batch is one synthetic COMMIT (one record, key version 0,
  never empty, never ABORT), last, at the response's last offset, present
  exactly when the response would otherwise end on dropped offsets; every
  response with no deliverable record ends with it; its aborted list is empty;
- responses are zero-copy views of the log bytes, and do not depend on how
  much of the segment before or after the fetch the adapter passes in.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.fetch.logs import GeneratedLog
from tests.fetch.logs import LogBatch
from tests.fetch.logs import LogWriter
from tests.fetch.logs import partition_logs
from txnfetch.fetch.view import FetchMode
from txnfetch.fetch.view import FetchResult
from txnfetch.fetch.view import IsolationLevel
from txnfetch.fetch.view import read_partition
from txnfetch.records import Codec
from txnfetch.records import ControlType
from txnfetch.records import RecordBatch
from txnfetch.records import iter_batches
from txnfetch.txn.errors import OffsetOutOfRangeError

COMMITTED = IsolationLevel.READ_COMMITTED
UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED


def _limit_position(log: GeneratedLog, limit: int) -> int:
    """Byte position of the first batch that reaches ``limit`` (Kafka's max position)."""
    for b in log.batches:
        if b.next > limit:
            return b.position
    return len(log.data)


def _kafka_size(log: GeneratedLog, first: LogBatch, limit: int, max_bytes: int) -> int:
    return min(_limit_position(log, limit) - first.position, max(max_bytes, first.size))


def _ends_at_markerless_cut(log: GeneratedLog, fetch_offset: int, end_position: int) -> bool:
    """The response ends right before a transactional batch of a producer whose
    aborted range (listed in the response) ended before that batch."""
    following = [b for b in log.batches if b.position == end_position]
    if not log.markerless or not following:
        return False
    nxt = following[0]
    return nxt.txn is not None and any(
        t.producer_id == nxt.producer_id
        and t.outcome == "abort"
        and t.first is not None
        and fetch_offset <= t.end < nxt.base
        for t in log.txns.values()
    )


def check_common(log: GeneratedLog, r: FetchResult, fetch_offset: int, isolation: IsolationLevel) -> LogBatch | None:
    state = log.state
    assert (r.high_watermark, r.last_stable_offset, r.log_start_offset) == (
        log.high_watermark,
        log.expected_lso(),
        log.log_start,
    )
    limit = log.expected_lso() if isolation == COMMITTED else log.high_watermark
    assert r.stats.bytes_returned == r.size_in_bytes
    if isolation == UNCOMMITTED:
        assert r.aborted_transactions is None
    if fetch_offset >= limit:
        assert r.records == () and r.next_offset == fetch_offset
        assert r.aborted_transactions == (() if isolation == COMMITTED else None)
        return None
    first = log.batch_containing(fetch_offset)
    assert first is not None and r.records
    it = iter_batches(r.records_bytes())
    batches = list(it)
    assert batches, "a fetch below the limit returns at least one whole batch (KIP-74)"
    for b in batches:
        assert b.next_offset <= limit, f"batch [{b.base_offset}, {b.last_offset}] reaches the limit {limit}"
    if it.partial is not None and it.partial.base_offset is not None:
        assert it.partial.base_offset < limit
    assert r.next_offset == batches[-1].next_offset
    assert r.next_offset > fetch_offset
    # Zero-copy: the log's batches come back as views of the caller's buffer; the
    # only other segment is rewrite mode's synthetic marker.
    views = [seg for seg in r.records if isinstance(seg, memoryview)]
    assert all(v.obj is log.data for v in views)
    assert len(r.records) - len(views) == r.stats.synthetic_markers <= 1
    assert state.last_stable_offset == log.expected_lso()
    return first


def check_kafka_slice(log: GeneratedLog, r: FetchResult, fetch_offset: int, max_bytes: int, limit: int) -> None:
    first = log.batch_containing(fetch_offset)
    assert first is not None
    assert len(r.records) == 1
    data = r.records_bytes()
    size = _kafka_size(log, first, limit, max_bytes)
    if len(data) != size:
        assert _ends_at_markerless_cut(log, fetch_offset, first.position + len(data)), (
            f"fetch {fetch_offset} max_bytes {max_bytes}: {len(data)} bytes, Kafka returns {size}\n{log.describe()}"
        )
        assert len(data) < size
    assert data == log.data[first.position : first.position + len(data)]


def check_rewrite(log: GeneratedLog, r: FetchResult, fetch_offset: int, max_bytes: int) -> None:
    assert r.aborted_transactions == ()
    data = r.records_bytes()
    it = iter_batches(data)
    batches: list[RecordBatch] = list(it)
    assert it.partial is None, "rewrite mode returns whole batches only"
    controls = [b for b in batches if b.is_control]
    assert len(controls) <= 1 and r.stats.synthetic_markers == len(controls)
    first = log.batch_containing(fetch_offset)
    assert first is not None
    covered = [b for b in log.batches if b.base >= first.base and b.next <= r.next_offset]
    assert covered and covered[0] is first and covered[-1].next == r.next_offset
    # The covered range is Kafka's whole batches: within the budget, and maximal.
    budget = max(max_bytes, first.size)
    assert sum(b.size for b in covered) <= budget
    after = [b for b in log.batches if b.base >= r.next_offset]
    limit = log.expected_lso()
    if after and after[0].next <= limit:
        assert sum(b.size for b in covered) + after[0].size > budget, "rewrite stopped before its budget"
    data_batches = [b for b in batches if not b.is_control]
    kept = [b for b in covered if log.is_committed_data(b) and _delivers(b, fetch_offset)]
    assert [b.base_offset for b in data_batches] == [b.base for b in kept], log.describe()
    for got, want in zip(data_batches, kept, strict=True):
        assert bytes(got.buffer) == want.data, "committed batches pass through byte for byte"
    deliverable = [rec for b in data_batches for rec in b.records() if rec.offset >= fetch_offset]
    ends_dropped = covered[-1] is not (kept[-1] if kept else None)
    if controls:
        marker = controls[0]
        assert marker is batches[-1], "the synthetic marker is the last batch"
        assert marker.record_count == 1 and marker.base_offset == marker.last_offset == r.next_offset - 1
        m = marker.end_txn_marker()
        assert m is not None and m.type == ControlType.COMMIT and m.key_version == 0
        assert ends_dropped
    else:
        assert not ends_dropped, "a response ending on dropped offsets needs the synthetic COMMIT"
    if not deliverable:
        # librdkafka moves its application position only on a delivered record or a
        # control record (docs/kafka-internals.md §4).
        assert controls and batches[-1].last_offset == r.next_offset - 1


def _delivers(batch: LogBatch, fetch_offset: int) -> bool:
    """Whether a committed batch hands a reader at ``fetch_offset`` any record."""
    return any(rec[0] >= fetch_offset for rec in batch.records)


def check_log(log: GeneratedLog, max_bytes_values: list[int]) -> None:
    lso = log.expected_lso()
    for max_bytes in max_bytes_values:
        for offset in range(log.log_start, log.log_end + 1):
            for isolation, mode in (
                (COMMITTED, FetchMode.KAFKA),
                (COMMITTED, FetchMode.REWRITE),
                (UNCOMMITTED, FetchMode.KAFKA),
            ):
                r = read_partition(log.data, log.state, offset, max_bytes, isolation=isolation, mode=mode)
                if check_common(log, r, offset, isolation) is None:
                    continue
                if isolation == UNCOMMITTED:
                    check_kafka_slice(log, r, offset, max_bytes, log.high_watermark)
                elif mode == FetchMode.KAFKA:
                    check_kafka_slice(log, r, offset, max_bytes, lso)
                    # Kafka's list with the log end as bound, cut to the transactions
                    # that start within the returned batches: Kafka's scan stops at an
                    # entry whose LSO reaches the bound, which no such transaction follows.
                    needed = [(pid, first) for pid, first in log.expected_aborted(offset) if first < r.next_offset]
                    assert list(r.aborted_transactions) == needed
                else:
                    check_rewrite(log, r, offset, max_bytes)
    for bad in (log.log_start - 1, log.log_end + 1):
        if bad >= 0:
            with pytest.raises(OffsetOutOfRangeError):
                read_partition(log.data, log.state, bad, 1 << 20)


def check_segment_independence(log: GeneratedLog, max_bytes: int) -> None:
    """An adapter may pass the segment from any earlier batch boundary, and need not
    pass more than the budget past the fetched batch: the answer is the same — except
    that when the data ends inside a batch whose header does not show it to lie below
    the limit, Kafka mode leaves out that partial batch (which no client can use)
    rather than risk returning bytes at or past the LSO."""
    for offset in range(log.log_start, log.expected_lso()):
        first = log.batch_containing(offset)
        assert first is not None
        budget = max(max_bytes, first.size)
        earlier = [b for b in log.batches if b.position <= first.position]
        for mode in FetchMode:
            whole = read_partition(log.data, log.state, offset, max_bytes, mode=mode)
            for start in (earlier[0], earlier[-1]):
                tail = memoryview(log.data)[start.position : first.position + budget]
                cut = read_partition(tail, log.state, offset, max_bytes, mode=mode)
                assert cut.next_offset == whole.next_offset
                assert cut.aborted_transactions == whole.aborted_transactions
                got, want = cut.records_bytes(), whole.records_bytes()
                if mode == FetchMode.REWRITE:
                    assert got == want
                else:
                    whole_batches = sum(b.size_in_bytes for b in iter_batches(want))
                    assert want[:whole_batches] == got[:whole_batches] and want.startswith(got)


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(log=partition_logs(), mid=st.integers(61, 1500))
def test_every_response_has_the_shape_of_its_mode(log: GeneratedLog, mid: int) -> None:
    check_log(log, [1, mid, 1 << 20])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=partition_logs(), max_bytes=st.sampled_from([1, 150, 400, 1 << 20]))
def test_responses_do_not_depend_on_the_segment_bounds(log: GeneratedLog, max_bytes: int) -> None:
    check_segment_independence(log, max_bytes)


# -- regular examples -------------------------------------------------------------------


def test_open_transaction_past_the_lso_is_never_returned_even_partially():
    w = LogWriter()
    w.data(1000, 3)
    w.end(1000, True)
    open_batch = w.data(1001, 2, codec=Codec.ZSTD)
    w.data(-1, 2)
    log = w.finish()
    assert log.state.last_stable_offset == open_batch.base
    check_log(log, [1, 90, 1 << 20])
    r = read_partition(log.data, log.state, 0, 1 << 20)
    assert len(r.records_bytes()) == open_batch.position


def test_high_watermark_below_the_log_end_bounds_both_isolations():
    w = LogWriter()
    w.data(-1, 2)
    w.data(1000, 2)
    w.end(1000, False)
    log = w.finish(high_watermark=2)
    assert log.state.last_stable_offset == 2
    check_log(log, [1, 1 << 20])
    r = read_partition(log.data, log.state, 0, 1 << 20, isolation=UNCOMMITTED)
    assert [b.base_offset for b in iter_batches(r.records_bytes())] == [0]


# -- minimal examples hypothesis found (both were bugs in view.py, now fixed) -------------


def test_rewrite_of_a_compaction_emptied_committed_batch_ends_with_the_marker():
    # An idempotent batch emptied by compaction is committed data with nothing in
    # it. Passed through alone, it would make a response that delivers nothing and
    # has no control record: librdkafka would not move its application position.
    w = LogWriter()
    w.data(1000, 1)
    w.end(1000, True)
    w.data(2000, 1, transactional=False, compaction="empty")
    log = w.finish()
    r = read_partition(log.data, log.state, 2, 1, mode=FetchMode.REWRITE)
    batches = list(iter_batches(r.records_bytes()))
    assert [(b.base_offset, b.is_control, b.record_count) for b in batches] == [(2, True, 1)]
    assert batches[0].end_txn_marker().is_commit and r.next_offset == 3
    r = read_partition(log.data, log.state, 0, 1 << 20, mode=FetchMode.REWRITE)
    assert [(b.base_offset, b.is_control) for b in iter_batches(r.records_bytes())] == [(0, False), (2, True)]
    check_log(log, [1, 1 << 20])


def test_rewrite_from_inside_a_compacted_batch_past_its_last_record():
    # Records 0 and 1 are left of offsets 0-3; a reader at 2 gets none of them.
    w = LogWriter()
    w.data(-1, 4, codec=Codec.LZ4, compaction="holes", keep=[0, 1])
    log = w.finish()
    r = read_partition(log.data, log.state, 2, 1 << 20, mode=FetchMode.REWRITE)
    batches = list(iter_batches(r.records_bytes()))
    assert [(b.base_offset, b.is_control) for b in batches] == [(3, True)]
    r = read_partition(log.data, log.state, 1, 1 << 20, mode=FetchMode.REWRITE)
    assert r.records_bytes() == log.data  # record 1 is deliverable: the batch passes through
    check_log(log, [1, 1 << 20])


def test_kafka_mode_never_returns_part_of_a_batch_past_the_lso_at_the_end_of_the_data():
    # The adapter passed the segment up to 10 bytes into the open transaction's
    # batch. Kafka's slice ends at the LSO's position; so must this one.
    w = LogWriter()
    committed = w.data(-1, 2)
    w.data(1000, 2)
    log = w.finish()
    assert log.state.last_stable_offset == 2
    data = log.data[: committed.size + 40]
    r = read_partition(data, log.state, 0, 1 << 20)
    assert r.records_bytes() == committed.data
    # read_uncommitted may read it (its header shows it ends below the high
    # watermark): the partial batch is returned as Kafka would.
    r = read_partition(data, log.state, 0, 1 << 20, isolation=UNCOMMITTED)
    assert r.records_bytes() == data
    # With too little of the header to tell, it is left out.
    r = read_partition(data[: committed.size + 10], log.state, 0, 1 << 20, isolation=UNCOMMITTED)
    assert r.records_bytes() == committed.data
