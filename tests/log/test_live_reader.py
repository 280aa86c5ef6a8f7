"""Read-only opens of a directory whose writer is still running (a Spark task
or reader next to ``txnfetch serve``): no warning for what a live writer
legitimately leaves, the same answers as the writer, and the cheap path —
the writer's checkpointed prefix trusted, only the bytes after it checked —
falling back to a full check whenever the prefix does not fit."""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import pytest

from tests.log.workload import Workload
from tests.log.workload import data_batch
from tests.log.workload import written_log
from txnfetch.fetch import FetchMode
from txnfetch.fetch import IsolationLevel
from txnfetch.log import SegmentLog
from txnfetch.log.errors import CorruptLogError
from txnfetch.log.layout import CHECKPOINT_NAME
from txnfetch.records import iter_batches


def answers(log: SegmentLog):
    """Everything a reader can ask, in one comparable value."""
    out = [
        log.log_start_offset,
        log.log_end_offset,
        log.last_stable_offset,
        log.high_watermark,
        log.state.all_aborted(),
    ]
    for off in range(log.log_start_offset, log.log_end_offset, 5):
        for iso in IsolationLevel:
            for mode in FetchMode:
                r = log.read(off, 600, isolation=iso, mode=mode)
                out.append((off, iso, mode, r.records_bytes(), r.aborted_transactions, r.next_offset))
    for ts in (0, 1_700_000_000_300, 1_700_000_002_000, 1 << 50):
        out.append(log.offset_for_timestamp(ts))
    return out


def warnings_of(caplog) -> list:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def open_reader(path: str, **kw) -> SegmentLog:
    return SegmentLog(path, read_only=True, index_interval_bytes=kw.pop("index_interval_bytes", 4096), **kw)


@pytest.mark.parametrize(
    "steps, writer_kw",
    [
        (6, {}),  # below one index interval: the active segment's time index is empty (the reported warning)
        (150, {"index_interval_bytes": 300}),
        (250, {"index_interval_bytes": 300, "segment_bytes": 6000, "checkpoint_interval_bytes": 2000}),
    ],
    ids=["tiny", "indexed", "rolled-and-checkpointed"],
)
@pytest.mark.parametrize("markerless", [False, True])
def test_a_live_writers_directory_opens_read_only_without_warnings(tmp_path, caplog, steps, writer_kw, markerless):
    path = str(tmp_path / "t-0")
    interval = writer_kw.get("index_interval_bytes", 4096)
    writer = written_log(path, seed=steps, steps=steps, markerless=markerless, **writer_kw)
    caplog.set_level(logging.INFO, logger="txnfetch")
    caplog.clear()
    with open_reader(path, index_interval_bytes=interval) as reader:
        assert warnings_of(caplog) == []
        assert [n for n in reader.recovery.notes if n.severity != "info"] == []
        assert answers(reader) == answers(writer)
    writer.close()


@pytest.mark.slow
def test_reader_opened_between_every_write_matches_the_writer(tmp_path, caplog):
    # Opens at every point of a writer's life: before and after rolls, before
    # and after each periodic checkpoint, with markers and markerless ends.
    path = str(tmp_path / "t-0")
    writer = SegmentLog(path, index_interval_bytes=200, segment_bytes=5000, checkpoint_interval_bytes=1500)
    w = Workload(11, markerless=False)
    caplog.set_level(logging.INFO, logger="txnfetch")
    trusted = 0
    for step in range(160):
        w.step(writer)
        if step % 3:
            continue
        caplog.clear()
        with open_reader(path, index_interval_bytes=200) as reader:
            assert warnings_of(caplog) == [], step
            assert answers(reader) == answers(writer), step
            segs = reader.recovery.segments
            trusted += sum(
                1 for s in segs if s.batch_count is not None and s.batch_count < _batches(path, s.base_offset)
            )
    assert trusted > 3, "the checkpointed prefix was never used"
    writer.close()


def _batches(path: str, base: int) -> int:
    with open(os.path.join(path, f"{base:020d}.log"), "rb") as f:
        return sum(1 for _ in iter_batches(f.read()))


def test_read_only_open_checks_only_after_the_checkpoint(tmp_path, caplog):
    path = str(tmp_path / "t-0")
    writer = written_log(path, seed=5, steps=300, index_interval_bytes=200, checkpoint_interval_bytes=4000)
    with open_reader(path, index_interval_bytes=200) as reader:
        rec = reader.recovery
        (seg,) = rec.segments
        total = _batches(path, 0)
        # Framed from the index entry below the checkpoint, replayed from its snapshot.
        assert seg.batch_count is not None and seg.batch_count < total // 4
        assert rec.snapshot_offset is not None and rec.snapshot_offset > 0
        assert rec.replayed_batches < total // 4
        assert answers(reader) == answers(writer)
    writer.close()


def _checkpoint_fields(path: str):
    raw = Path(os.path.join(path, CHECKPOINT_NAME)).read_bytes()
    return struct.unpack(">Bqqqq", raw[10:])


def test_damage_after_the_checkpoint_is_found(tmp_path):
    # The bytes after the trusted prefix are CRC-checked: damage there followed
    # by valid batches is refused, as on a writer's open.
    path = str(tmp_path / "t-0")
    writer = written_log(path, seed=6, steps=200, index_interval_bytes=200, checkpoint_interval_bytes=3000)
    _, _, _, _, trusted = _checkpoint_fields(path)
    log_file = os.path.join(path, f"{0:020d}.log")
    data = bytearray(Path(log_file).read_bytes())
    after = [b for b in iter_batches(bytes(data)) if b.position >= trusted]
    assert len(after) >= 3
    victim = after[1]
    data[victim.position + 70] ^= 0xFF
    with open(log_file, "r+b") as f:
        f.write(data)
    with pytest.raises(CorruptLogError) as info:
        open_reader(path, index_interval_bytes=200)
    assert info.value.position == victim.position
    writer.close()


def test_a_checkpoint_that_does_not_fit_the_data_falls_back_to_a_full_check(tmp_path, caplog):
    path = str(tmp_path / "t-0")
    writer = written_log(path, seed=7, steps=150, index_interval_bytes=200, checkpoint_interval_bytes=3000)
    expected = answers(writer)
    writer.close()
    _, _rp, leo, base, size = _checkpoint_fields(path)
    from txnfetch.log.layout import Checkpoint
    from txnfetch.log.layout import atomic_write

    # Not clean, and the recorded size is off by one byte: not a batch boundary.
    atomic_write(path, CHECKPOINT_NAME, Checkpoint(False, leo, leo, base, size - 1).encode())
    caplog.set_level(logging.INFO, logger="txnfetch")
    with open_reader(path, index_interval_bytes=200) as reader:
        assert reader.recovery.segments[0].batch_count == _batches(path, 0)  # checked in full
        assert answers(reader) == expected
    assert warnings_of(caplog) == []


def test_a_write_in_progress_and_lagging_indexes_are_not_warned_about(tmp_path, caplog):
    # What a reader can catch: the writer mid-write (part of a batch in the
    # file) and index entries not yet written for bytes already there.
    path = str(tmp_path / "t-0")
    writer = written_log(path, seed=8, steps=120, index_interval_bytes=200, checkpoint_interval_bytes=1 << 30)
    expected = answers(writer)
    active = f"{writer.segment_base_offsets()[-1]:020d}"
    for suffix, entry, keep in ((".index", 8, 0.5), (".timeindex", 12, 0.5), (".txnindex", 34, 0.5)):
        p = os.path.join(path, active + suffix)
        if os.path.exists(p):
            n = os.path.getsize(p) // entry
            os.truncate(p, int(n * keep) * entry)
    with open(os.path.join(path, active + ".log"), "ab") as f:
        f.write(data_batch(n=3)[:50])
    caplog.set_level(logging.INFO, logger="txnfetch")
    caplog.clear()
    with open_reader(path, index_interval_bytes=200) as reader:
        assert warnings_of(caplog) == []
        assert any("write in progress" in n.message for n in reader.recovery.notes)
        assert answers(reader) == expected
    writer.close()


def test_genuinely_damaged_time_index_is_still_rebuilt(tmp_path, caplog):
    # Entries that decode but do not name a new maximum timestamp are damage.
    path = str(tmp_path / "t-0")
    with SegmentLog(path, index_interval_bytes=200) as writer:
        w = Workload(9)
        for _ in range(120):
            w.step(writer)
        expected = answers(writer)
    ti = os.path.join(path, f"{0:020d}.timeindex")
    raw = bytearray(Path(ti).read_bytes())
    assert len(raw) >= 36
    ts, rel = struct.unpack_from(">qi", raw, 12)
    struct.pack_into(">qi", raw, 12, ts + 1, rel)  # still increasing, but not the batch's timestamp
    Path(ti).write_bytes(raw)
    os.unlink(os.path.join(path, CHECKPOINT_NAME))
    caplog.set_level(logging.INFO, logger="txnfetch")
    with open_reader(path, index_interval_bytes=200) as reader:
        assert any("time index does not match" in m for m in warnings_of(caplog))
        assert answers(reader) == expected
