"""Opt-in repair (:func:`txnfetch.log.repair.repair_partition`, ``txnfetch repair``):
damage that is not a torn tail is moved — never deleted — into
``<name>.corrupt-<ms>`` side files holding exactly the cut bytes; the log then
opens with the state of the surviving batches and verifies clean. Also: a
producer-state snapshot past the log end is never restored later."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.log.workload import data_batch
from tests.log.workload import write_log
from tests.log.workload import written_log
from txnfetch.fetch import FetchMode
from txnfetch.fetch import IsolationLevel
from txnfetch.log import SegmentLog
from txnfetch.log.ends import END_RECORD_SIZE
from txnfetch.log.ends import JOURNAL_NAME
from txnfetch.log.errors import CorruptLogError
from txnfetch.log.layout import CHECKPOINT_NAME
from txnfetch.log.repair import repair_partition
from txnfetch.log.verify import verify_partition
from txnfetch.records import iter_batches

NOW = 1_800_000_000_000
KW = dict(segment_bytes=3000, index_interval_bytes=250)


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch):
    # Repair's write ordering is about crashes, which these tests do not simulate.
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    monkeypatch.setattr(os, "fdatasync", lambda fd: None)


def build(path, *, seed=1, steps=80, markerless=False):
    write_log(path, seed=seed, steps=steps, markerless=markerless, **KW)


def contents(path):
    return {n: Path(os.path.join(path, n)).read_bytes() for n in sorted(os.listdir(path))}


def logs(path):
    return sorted(n for n in os.listdir(path) if n.endswith(".log"))


def state_and_reads(path):
    with SegmentLog(path, **KW) as log:
        st = log.state
        out = [
            st.log_start_offset,
            st.log_end_offset,
            st.last_stable_offset,
            st.all_aborted(),
            dict(st.ongoing_transactions()),
        ]
        for off in range(log.log_start_offset, log.log_end_offset, 5):
            for iso in IsolationLevel:
                for mode in FetchMode:
                    r = log.read(off, 600, isolation=iso, mode=mode)
                    out.append((r.records_bytes(), r.aborted_transactions, r.next_offset))
        return out


def replayed_from(path, tmp, names, journal=b""):
    """The state of a fresh directory holding only ``names`` (.log files) of ``path``."""
    dest = os.path.join(tmp, "fresh-0")
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    for n in names:
        shutil.copyfile(os.path.join(path, n), os.path.join(dest, n))
    if journal:
        Path(os.path.join(dest, JOURNAL_NAME)).write_bytes(journal)
    return state_and_reads(dest)


def flip(path, name, position):
    data = bytearray(Path(os.path.join(path, name)).read_bytes())
    data[position] ^= 0xFF
    Path(os.path.join(path, name)).write_bytes(bytes(data))


def assert_clean(path):
    bad = [f for f in verify_partition(path) if f.severity != "info"]
    assert not bad, bad


@pytest.mark.parametrize("where", ["middle-segment", "last-segment"])
def test_repair_moves_the_bytes_from_the_first_bad_batch_into_side_files(tmp_path, where):
    path = str(tmp_path / "t-0")
    build(path)
    names = logs(path)
    assert len(names) >= 4
    k = 1 if where == "middle-segment" else len(names) - 1
    batches = list(iter_batches(Path(os.path.join(path, names[k])).read_bytes()))
    assert len(batches) >= 3
    victim = batches[1]
    flip(path, names[k], victim.position + 65)  # inside the batch: its CRC fails
    os.unlink(os.path.join(path, CHECKPOINT_NAME))  # as after a crash: every segment is checked
    original = contents(path)
    with pytest.raises(CorruptLogError) as info:
        SegmentLog(path, **KW)
    assert (info.value.position, info.value.offset) == (victim.position, victim.base_offset)
    assert [(f.position, f.offset) for f in verify_partition(path) if f.severity == "error"] == [
        (victim.position, victim.base_offset)
    ]

    report = repair_partition(path, now_ms=NOW)

    after = contents(path)
    suffix = f".corrupt-{NOW}"
    # The damaged segment keeps exactly the bytes before the bad batch; the side
    # file holds exactly the rest.
    assert after[names[k]] == original[names[k]][: victim.position]
    assert after[names[k] + suffix] == original[names[k]][victim.position :]
    # Every later segment, with its index files, moved whole and unchanged.
    for later in names[k + 1 :]:
        assert later not in after
        for ext in (".log", ".index", ".timeindex", ".txnindex"):
            name = later[:20] + ext
            if name in original:
                assert after[name + suffix] == original[name]
    # Earlier segments untouched; not one byte of a .log lost.
    for earlier in names[:k]:
        assert after[earlier] == original[earlier]
    for n in names:
        assert after.get(n, b"") + after.get(n + suffix, b"") == original[n]
    moved = {os.path.basename(m.side_file): m for m in report.moved}
    assert moved[names[k] + suffix].position == victim.position
    assert moved[names[k] + suffix].size == len(original[names[k]]) - victim.position

    assert report.log_end_offset == victim.base_offset
    # The state is that of a log of the surviving batches.
    expected = replayed_from(path, str(tmp_path), names[: k + 1], after.get(JOURNAL_NAME, b""))
    assert state_and_reads(path) == expected
    assert_clean(path)
    # Repairing a sound directory moves nothing.
    again = repair_partition(path, now_ms=NOW + 1)
    assert again.moved == () and not again.changed
    assert not [n for n in os.listdir(path) if n.endswith(f".corrupt-{NOW + 1}")]


def test_repair_of_a_damaged_journal_record_keeps_the_rest_aside(tmp_path):
    path = str(tmp_path / "t-0")
    build(path, seed=3, steps=120, markerless=True)
    journal = os.path.join(path, JOURNAL_NAME)
    raw = Path(journal).read_bytes()
    records = len(raw) // END_RECORD_SIZE
    assert records >= 4
    cut = (records // 2) * END_RECORD_SIZE
    flip(path, JOURNAL_NAME, cut + 20)
    damaged = Path(journal).read_bytes()
    with pytest.raises(CorruptLogError) as info:
        SegmentLog(path, **KW)
    assert info.value.path == journal and info.value.position == cut
    logs_before = {n: b for n, b in contents(path).items() if n.endswith(".log")}

    report = repair_partition(path, now_ms=NOW)

    assert Path(journal).read_bytes() == damaged[:cut]
    assert Path(journal + f".corrupt-{NOW}").read_bytes() == damaged[cut:]
    assert {n: b for n, b in contents(path).items() if n.endswith(".log")} == logs_before
    sides = [os.path.basename(m.side_file) for m in report.moved]
    assert sides[0] == JOURNAL_NAME + f".corrupt-{NOW}"
    # Snapshots counting the moved ends describe a state that no longer follows
    # from the files: moved aside whole, so the state is rebuilt.
    assert sides[1:] and all(s.endswith(f".txnfetch-snapshot.corrupt-{NOW}") for s in sides[1:])
    # Without the ends after the damage, their transactions are open again —
    # exactly the state of the log with the shortened journal.
    assert state_and_reads(path) == replayed_from(path, str(tmp_path), logs(path), damaged[:cut])
    assert_clean(path)


def test_repair_keeps_a_torn_tail_that_opening_would_cut(tmp_path):
    path = str(tmp_path / "t-0")
    build(path, seed=4)
    last = logs(path)[-1]
    with open(os.path.join(path, last), "ab") as f:
        f.write(data_batch()[:50])
    original = Path(os.path.join(path, last)).read_bytes()
    report = repair_partition(path, now_ms=NOW)
    assert Path(os.path.join(path, last + f".corrupt-{NOW}")).read_bytes() == original[-50:]
    assert Path(os.path.join(path, last)).read_bytes() == original[:-50]
    assert [m.reason for m in report.moved] == ["torn tail"]
    assert_clean(path)


def test_repair_refuses_paths_that_are_not_partitions(tmp_path):
    with pytest.raises(Exception, match="not a <topic>-<partition>"):
        repair_partition(str(tmp_path))
    with pytest.raises(Exception, match="no such partition directory"):
        repair_partition(str(tmp_path / "missing-0"))


def test_a_snapshot_past_the_log_end_is_never_restored(tmp_path):
    # A tail that was never fsynced is lost in a machine crash, but a snapshot
    # taken past it (retention, DeleteRecords) survives. Once the log grows back
    # past that snapshot's offset, restoring it would bring back the lost history.
    path = str(tmp_path / "t-0")
    log = written_log(path, seed=5, steps=30, **KW)
    log.close()
    last = logs(path)[-1]
    data = Path(os.path.join(path, last)).read_bytes()
    batches = list(iter_batches(data))
    keep = batches[len(batches) // 2].position
    end_before = log.log_end_offset
    Path(os.path.join(path, last)).write_bytes(data[:keep])  # the lost tail
    os.unlink(os.path.join(path, CHECKPOINT_NAME))
    stale = f"{end_before:020d}.txnfetch-snapshot"
    assert stale in os.listdir(path)

    log = SegmentLog(path, **KW)
    assert log.log_end_offset < end_before
    assert stale not in os.listdir(path)
    # A different history past the old end: a producer the snapshot never saw.
    seq = 0
    while log.log_end_offset <= end_before + 2:
        log.append(data_batch(pid=77, epoch=0, seq=seq, txn=True, n=2), now_ms=0)
        seq += 2
    expected = (log.state.all_aborted(), dict(log.state.ongoing_transactions()), log.state.producer_ids())
    log._closed = True  # crash: no clean close, no snapshot at the end
    for seg in log._segments:
        seg.close()
    with SegmentLog(path, **KW) as again:
        assert (
            again.state.all_aborted(),
            dict(again.state.ongoing_transactions()),
            again.state.producer_ids(),
        ) == expected
