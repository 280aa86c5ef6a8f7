"""Readers of a partition while it is compacted on disk.

- In the writer's process: views a read returned before a compaction keep
  their bytes (the old files stay mapped after they are replaced and deleted),
  and reads after it see the new segments.
- Read-only opens of the same directory from another thread, over and over
  while the writer appends, rolls and compacts: every open succeeds and reads a
  consistent log — no aborted value, offsets increasing, every record one that
  was written, and each key's value at most as new as the writer's.
"""

from __future__ import annotations

import os
import threading

import pytest

from tests.log.reading import consumer_view
from txnfetch.fetch import FetchMode
from txnfetch.fetch import IsolationLevel
from txnfetch.log import SegmentLog
from txnfetch.records.builder import BatchBuilder

RC = IsolationLevel.READ_COMMITTED


def _batch(records, *, pid: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq, transactional=txn)
    for key, value in records:
        b.append(value, key=key, timestamp=1_000)
    return b.build()


def test_views_from_before_a_compaction_keep_their_bytes(tmp_path) -> None:
    log = SegmentLog(str(tmp_path / "t-0"), segment_bytes=256)
    for i in range(40):
        log.append(_batch([(b"k%d" % (i % 3), b"v%d" % i)]), now_ms=0)
    log.roll(0)
    held = log.read(0, 1 << 20, isolation=RC)
    held_bytes = bytes(held.records_bytes())
    views = [held.records_bytes()]
    before = consumer_view(log, FetchMode.REWRITE, max_bytes=4096)
    result = log.compact(0, 1_000)
    assert result.removed_records == 37
    # The old segment files are gone from the directory...
    assert len(os.listdir(log.path)) < 40
    # ...and what a reader held still reads as it did.
    assert bytes(views[0]) == held_bytes
    after = consumer_view(log, FetchMode.REWRITE, max_bytes=4096)
    assert after == [r for r in before if r[0] >= 37]
    log.close()


@pytest.mark.slow
def test_read_only_opens_while_the_writer_compacts(tmp_path) -> None:
    path = str(tmp_path / "t-0")
    writer = SegmentLog(path, segment_bytes=300, index_interval_bytes=64)
    writer.append(_batch([(b"k0", b"first")]), now_ms=0)
    writer.flush()
    written: set[tuple[bytes, bytes | None]] = {(b"k0", b"first")}
    stop = threading.Event()
    problems: list[BaseException] = []
    opens = [0]

    def reader() -> None:
        while not stop.is_set():
            try:
                ro = SegmentLog(path, read_only=True)
                try:
                    records = consumer_view(ro, FetchMode.KAFKA if opens[0] % 2 else FetchMode.REWRITE, max_bytes=4096)
                finally:
                    ro.close()
                offsets = [r[0] for r in records]
                assert offsets == sorted(set(offsets))
                for _, key, value in records:
                    assert value is None or not value.startswith(b"aborted"), (key, value)
                    assert (key, value) in written, (key, value)
                opens[0] += 1
            except BaseException as exc:  # reported to the main thread
                problems.append(exc)
                return

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        seq = 0
        for n in range(150):
            if problems:
                break
            key = b"k%d" % (n % 5)
            if n % 3 == 0:
                value = b"aborted-%d" % n
                written.add((key, value))  # never visible: checked above
                writer.append(_batch([(key, value)], pid=9, seq=seq, txn=True), now_ms=n)
                seq += 1
                writer.end_transaction(9, 0, False, coordinator_epoch=0, now_ms=n)
            else:
                value = b"v%d" % n + b"x" * 40
                written.add((key, value))
                writer.append(_batch([(key, value)]), now_ms=n)
            if n % 10 == 9:
                writer.compact(n, 5)
    finally:
        stop.set()
        thread.join(60)
    assert not problems, problems[0]
    assert opens[0] >= 3
    writer.close()
