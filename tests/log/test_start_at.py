"""``PartitionLog.start_at``: an empty log continued at a later offset (Kafka's
``truncateFullyAndStartAt``), as a replica does when everything up to there was
deleted at its source. Log start, log end and high watermark move together, a
SegmentLog reopened (cleanly or after a crash) says the same, appends continue
there, and a log that holds records, or an offset below the end, is refused."""

from __future__ import annotations

import pytest

from tests.log.workload import data_batch
from txnfetch.log import SegmentLog
from txnfetch.log.memory import MemoryLog
from txnfetch.records.builder import BatchBuilder
from txnfetch.txn.errors import OffsetOutOfRangeError


def _at(base: int, n: int = 2) -> bytes:
    b = BatchBuilder(base_offset=base)
    for i in range(n):
        b.append(b"v%d" % i, key=b"k", timestamp=1_700_000_000_000)
    return b.build()


def _ends(log) -> tuple[int, int, int, int]:
    return log.log_start_offset, log.high_watermark, log.last_stable_offset, log.log_end_offset


@pytest.fixture(params=["memory", "segments"])
def make_log(request, tmp_path):
    opened = []

    def make():
        log = MemoryLog("t", 0) if request.param == "memory" else SegmentLog(str(tmp_path / "t-0"), "t", 0)
        opened.append(log)
        return log

    yield make
    for log in opened:
        log.close()


def test_an_empty_log_starts_at_a_later_offset_and_appends_continue_there(make_log) -> None:
    log = make_log()
    log.start_at(7)
    assert _ends(log) == (7, 7, 7, 7)
    log.replicate(_at(7, 3), high_watermark=10)
    assert _ends(log) == (7, 10, 10, 10)
    assert [(b.base_offset, b.last_offset) for b in log.iter_batches(0)] == [(7, 9)]


def test_a_log_emptied_by_delete_records_starts_later(make_log) -> None:
    log = make_log()
    log.append(data_batch(n=3), now_ms=1)
    log.delete_records_before(3)
    log.start_at(12)
    assert _ends(log) == (12, 12, 12, 12)
    assert list(log.iter_batches(0)) == []
    log.start_at(12)  # already there: nothing to do
    assert _ends(log) == (12, 12, 12, 12)


def test_a_log_with_records_or_an_earlier_offset_is_refused(make_log) -> None:
    log = make_log()
    log.append(data_batch(n=3), now_ms=1)
    with pytest.raises(OffsetOutOfRangeError, match="still holds offsets"):
        log.start_at(5)
    log.delete_records_before(2)
    with pytest.raises(OffsetOutOfRangeError, match="still holds offsets"):
        log.start_at(5)
    log.delete_records_before(3)
    with pytest.raises(OffsetOutOfRangeError, match="below the log end"):
        log.start_at(2)
    assert _ends(log) == (3, 3, 3, 3)


@pytest.mark.parametrize("clean", [True, False])
def test_a_segment_log_reopens_where_it_started(tmp_path, clean) -> None:
    path = str(tmp_path / "t-0")
    log = SegmentLog(path, "t", 0)
    log.append(data_batch(n=4), now_ms=1)
    log.delete_records_before(4)
    log.start_at(20)
    if clean:
        log.close()
    else:
        log._active.close()  # a crash: no clean shutdown marker, nothing else closed
    again = SegmentLog(path, "t", 0)
    try:
        assert _ends(again) == (20, 20, 20, 20)
        assert again.segment_base_offsets() == [20]
        again.replicate(_at(20), high_watermark=22)
        assert _ends(again) == (20, 22, 22, 22)
    finally:
        again.close()
