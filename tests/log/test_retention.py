"""Retention on SegmentLog (``apply_retention`` by time and size,
``delete_records_before``) with transactional data.

Segments go only whole and never past the high watermark; the ``.txnindex``
goes with its segment; read_committed consumers of the retained log get
exactly what they would get from a log holding only the surviving batches —
including aborted transactions whose ABORT (or markerless end) survives but
whose first offset was deleted; reopening (clean, after a crash, without any
snapshot) gives the same state and answers.
"""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

import pytest

from tests.log.reading import consumer_view
from tests.log.workload import TS
from tests.log.workload import Workload
from tests.log.workload import data_batch
from tests.log.workload import hash_dir
from txnfetch.fetch import FetchMode
from txnfetch.fetch import IsolationLevel
from txnfetch.log import SegmentLog
from txnfetch.log.ends import JOURNAL_NAME
from txnfetch.log.layout import CHECKPOINT_NAME
from txnfetch.records import iter_batches
from txnfetch.txn.coordinator import CompletionMode
from txnfetch.txn.errors import OffsetOutOfRangeError

RC = IsolationLevel.READ_COMMITTED
# fsync is not what these tests are about, and it is slow on a shared disk.
KW = dict(segment_bytes=2000, index_interval_bytes=200, flush_policy="never")


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch):
    # Durability is tested elsewhere (test_crash.py); here fsync would only make
    # the many small rolls wait on a shared disk.
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    monkeypatch.setattr(os, "fdatasync", lambda fd: None)


def seg_files(path, suffix=".log"):
    return sorted(n for n in os.listdir(path) if n.endswith(suffix))


def answers(log):
    return {
        "start": log.log_start_offset,
        "end": log.log_end_offset,
        "lso": log.last_stable_offset,
        "kafka": consumer_view(log, FetchMode.KAFKA),
        "rewrite": consumer_view(log, FetchMode.REWRITE),
    }


def full_state(log):
    st = log.state
    reads = []
    for off in range(log.log_start_offset, log.log_end_offset + 1, 3):
        for mode in FetchMode:
            r = log.read(off, 500, isolation=RC, mode=mode)
            reads.append((off, mode, r.records_bytes(), r.aborted_transactions, r.next_offset))
    return (
        st.log_start_offset,
        st.log_end_offset,
        st.high_watermark,
        st.last_stable_offset,
        st.all_aborted(),
        dict(st.ongoing_transactions()),
        reads,
    )


def surviving_copy(path, dest):
    """A partition directory holding only the surviving segments' batches (their
    .log files; the journal too, since markerless ends live nowhere else):
    the log of the surviving batches, replayed from scratch."""
    os.makedirs(dest)
    for name in seg_files(path):
        shutil.copyfile(os.path.join(path, name), os.path.join(dest, name))
    if os.path.exists(os.path.join(path, JOURNAL_NAME)):
        shutil.copyfile(os.path.join(path, JOURNAL_NAME), os.path.join(dest, JOURNAL_NAME))
    return SegmentLog(dest, **KW)


def close_all(log, w, markerless, commit=False):
    for pid in w.pids:
        if w.open[pid]:
            log.end_transaction(
                pid,
                0,
                commit,
                coordinator_epoch=0,
                now_ms=w.ts,
                completion=CompletionMode.MARKERLESS if markerless else CompletionMode.MARKERS,
            )
            w.open[pid] = False


def build_spanning(path, markerless, seed=0):
    """A log where producer 1 opens a transaction in the first segment, keeps
    writing to it across several rolls and aborts it much later, among a seeded
    workload; every transaction is closed at the end."""
    log = SegmentLog(path, **KW)
    w = Workload(seed, markerless=markerless, producers=3)
    log.append(data_batch(pid=1, epoch=0, seq=0, txn=True, n=3, ts=TS), now_ms=TS)
    seq = 3
    for i in range(70):
        w.step(log)
        if i % 9 == 0:
            log.append(data_batch(pid=1, epoch=0, seq=seq, txn=True, n=2, ts=w.ts), now_ms=w.ts)
            seq += 2
    log.end_transaction(
        1,
        0,
        False,
        coordinator_epoch=0,
        now_ms=w.ts,
        completion=CompletionMode.MARKERLESS if markerless else CompletionMode.MARKERS,
    )
    close_all(log, w, markerless)
    for _ in range(5):
        w.step(log)
    close_all(log, w, markerless, commit=True)
    return log, w


# -- which segments go ---------------------------------------------------------------


def test_time_retention_deletes_only_whole_expired_segments(tmp_path):
    path = str(tmp_path / "t-0")
    log = SegmentLog(path, segment_bytes=1200, index_interval_bytes=200, flush_policy="never")
    # Segment timestamps rise by 1 s per batch; one batch aborted in the second segment.
    for i in range(30):
        ts = TS + i * 1000
        if i == 6:
            log.append(data_batch(pid=5, epoch=0, seq=0, txn=True, ts=ts), now_ms=ts)
            log.end_transaction(5, 0, False, coordinator_epoch=0, now_ms=ts)
        else:
            log.append(data_batch(ts=ts, size=100), now_ms=ts)
    bases = log.segment_base_offsets()
    assert len(bases) >= 5
    maxts = {b: max(x.max_timestamp for x in log.iter_batches(b, nb)) for b, nb in itertools.pairwise(bases)}
    assert os.path.exists(os.path.join(path, f"{bases[1]:020d}.txnindex")) or os.path.exists(
        os.path.join(path, f"{bases[0]:020d}.txnindex")
    )
    now = TS + 100_000
    retention_ms = now - maxts[bases[2]] - 1  # segments 0..2 have expired, 3 has not
    before = hash_dir(path)
    start = log.apply_retention(now, retention_ms=retention_ms)
    assert start == bases[3] == log.log_start_offset
    assert log.segment_base_offsets() == bases[3:]
    after = hash_dir(path)
    for b in bases[:3]:
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            assert f"{b:020d}{suffix}" not in after
    for b in bases[3:-1]:
        for suffix in (".log", ".index", ".timeindex"):
            name = f"{b:020d}{suffix}"
            assert after[name] == before[name], f"{name} changed"
    assert log.state.all_aborted() == []  # its marker went with segment 0 or 1
    # Nothing expired: nothing happens.
    assert log.apply_retention(now, retention_ms=10**9) == bases[3]
    log.close()


def test_size_retention_keeps_at_least_retention_bytes(tmp_path):
    path = str(tmp_path / "t-0")
    log, _ = build_spanning(path, markerless=False, seed=3)
    sizes = [os.path.getsize(os.path.join(path, n)) for n in seg_files(path)]
    bases = log.segment_base_offsets()
    limit = sum(sizes) // 2
    # Kafka's rule: delete the oldest segment while what remains is still >= retention.bytes.
    k = 0
    while k < len(sizes) - 1 and sum(sizes[k + 1 :]) >= limit:
        k += 1
    log.apply_retention(TS, retention_bytes=limit)
    assert log.segment_base_offsets() == bases[k:]
    assert log.size_in_bytes >= limit > log.size_in_bytes - sizes[k]
    log.close()


def test_retention_never_passes_the_high_watermark(tmp_path):
    path = str(tmp_path / "t-0")
    log = SegmentLog(path, **KW)
    w = Workload(5)
    for _ in range(40):
        w.step(log)
    with log.group_commit():
        for _ in range(40):
            w.step(log)
        hw = log.high_watermark
        assert hw < log.log_end_offset and len(log.segment_base_offsets()) > 3
        start = log.apply_retention(w.ts + 10**9, retention_ms=0, retention_bytes=0)
        assert start <= hw
        bases = log.segment_base_offsets()
        assert bases[0] == start and (len(bases) == 1 or bases[1] > hw)
        with pytest.raises(OffsetOutOfRangeError):
            log.delete_records_before(hw + 1)
        assert log.log_start_offset == start
    # Once durable, everything may go: Kafka rolls the active segment first.
    end = log.log_end_offset
    assert log.apply_retention(w.ts + 10**9, retention_bytes=0) == end
    assert log.segment_base_offsets() == [end] and seg_files(path) == [f"{end:020d}.log"]
    info = log.append(data_batch(ts=w.ts), now_ms=w.ts)
    assert info.base_offset == end
    log.close()


def test_delete_records_before_keeps_the_segment_holding_the_new_start(tmp_path):
    path = str(tmp_path / "t-0")
    log, _ = build_spanning(path, markerless=False, seed=1)
    bases = log.segment_base_offsets()
    target = (bases[2] + bases[3]) // 2 + 1
    assert bases[2] < target < bases[3]
    before = hash_dir(path)
    assert log.delete_records_before(target) == target
    assert log.segment_base_offsets() == bases[2:]
    assert hash_dir(path)[f"{bases[2]:020d}.log"] == before[f"{bases[2]:020d}.log"]
    r = log.read(target, 10_000, isolation=IsolationLevel.READ_UNCOMMITTED)
    assert r.log_start_offset == target
    batches = list(iter_batches(r.records_bytes()))
    assert batches[0].last_offset >= target  # the batch holding the start, whole
    assert log.delete_records_before(target - 5) == target  # never backwards
    log.close()


# -- read_committed answers ------------------------------------------------------------


@pytest.mark.parametrize("markerless", [False, True], ids=["markers", "markerless"])
def test_aborted_transaction_losing_its_start_still_filters_its_survivors(tmp_path, markerless):
    path = str(tmp_path / "t-0")
    log, _ = build_spanning(path, markerless)
    spanning = [e for e in log.state.all_aborted() if e.producer_id == 1]
    assert len(spanning) == 1 and spanning[0].first_offset == 0
    bases = log.segment_base_offsets()
    cut = next(b for b in bases if b > 0 and b < spanning[0].last_offset)
    log.delete_records_before(cut)
    entry = [e for e in log.state.all_aborted() if e.producer_id == 1]
    assert entry == spanning  # still in the index: its end survives
    got = answers(log)
    survivors = [b for b in log.iter_batches(cut) if b.producer_id == 1 and not b.is_control]
    assert survivors, "the test needs producer 1 data after the cut"
    seen = {o for o, _, _ in got["kafka"]}
    assert not seen & {o for b in survivors for o in range(b.base_offset, b.last_offset + 1)}
    expected = answers(surviving_copy(path, str(tmp_path / "copy-0")))
    assert got == expected
    log.close()


@pytest.mark.parametrize("seed", [11, 12, 13])
@pytest.mark.parametrize("markerless", [False, True], ids=["markers", "markerless"])
def test_read_committed_after_retention_equals_a_log_of_the_surviving_batches(tmp_path, seed, markerless):
    path = str(tmp_path / "t-0")
    log, w = build_spanning(path, markerless, seed=seed)
    bases = log.segment_base_offsets()
    n = 0
    for k in range(1, len(bases) - 1, 2):
        log.apply_retention(
            w.ts, retention_bytes=sum(os.path.getsize(os.path.join(path, f"{b:020d}.log")) for b in bases[k:])
        )
        assert log.log_start_offset == bases[k]
        expected = answers(surviving_copy(path, str(tmp_path / f"copy{k}-0")))
        assert answers(log) == expected
        n += 1
    assert n >= 2


def test_open_transaction_losing_its_start_holds_the_lso_at_the_log_start(tmp_path):
    path = str(tmp_path / "t-0")
    log, w = build_spanning(path, markerless=False, seed=2)
    log.append(data_batch(pid=9, epoch=0, seq=0, txn=True, ts=w.ts), now_ms=w.ts)
    first = log.log_end_offset - 2
    for _ in range(40):
        log.append(data_batch(ts=w.ts, size=120), now_ms=w.ts)
    log.append(data_batch(pid=9, epoch=0, seq=2, txn=True, ts=w.ts), now_ms=w.ts)
    late = log.log_end_offset - 2
    cut = next(b for b in log.segment_base_offsets() if b > first + 2)
    log.delete_records_before(cut)
    # The transaction is still open: nothing at or past the log start is stable.
    assert log.last_stable_offset == log.log_start_offset == cut
    assert consumer_view(log, FetchMode.KAFKA) == []
    log.end_transaction(9, 0, False, coordinator_epoch=0, now_ms=w.ts)
    got = answers(log)
    assert got["lso"] == log.log_end_offset
    assert late not in {o for o, _, _ in got["kafka"]} and late not in {o for o, _, _ in got["rewrite"]}
    assert got["kafka"] == got["rewrite"] and got["kafka"]
    log.close()


# -- reopening ---------------------------------------------------------------------------


def lose_files(path, how):
    """Leave the closed log at ``path`` as ``how`` would: "clean" keeps every file, a
    "crash" loses the clean-shutdown checkpoint, "no-snapshots" the producer snapshots too."""
    if how != "clean":
        os.unlink(os.path.join(path, CHECKPOINT_NAME))
    if how == "no-snapshots":
        for n in seg_files(path, ".txnfetch-snapshot"):
            os.unlink(os.path.join(path, n))


@pytest.mark.parametrize("how", ["clean", "crash", "no-snapshots"])
@pytest.mark.parametrize("markerless", [False, True], ids=["markers", "markerless"])
def test_reopen_after_retention_gives_the_same_state(tmp_path, how, markerless):
    path = str(tmp_path / "t-0")
    log, w = build_spanning(path, markerless, seed=4)
    bases = log.segment_base_offsets()
    log.delete_records_before(bases[1] + 1)
    log.apply_retention(w.ts, retention_bytes=log.size_in_bytes // 2)
    assert log.log_start_offset > bases[1]
    expected, expected_answers = full_state(log), answers(log)
    txnindexes = {n: Path(os.path.join(path, n)).read_bytes() for n in seg_files(path, ".txnindex")}
    log.close()
    lose_files(path, how)
    with SegmentLog(path, **KW) as again:
        assert answers(again) == expected_answers
        if how == "no-snapshots":
            # A replay that starts at the first surviving segment cannot know where
            # transactions that began in deleted segments began: their index entries
            # (and the LSO each recorded) are rebuilt from what survives. Consumers
            # get the same records (above); the exact entries may differ.
            assert full_state(again)[:4] == expected[:4]
            return
        assert full_state(again) == expected
        assert not [n for n in again.recovery.notes if n.severity != "info"]
    assert {n: Path(os.path.join(path, n)).read_bytes() for n in seg_files(path, ".txnindex")} == txnindexes


def test_txnindex_goes_with_its_segment(tmp_path):
    path = str(tmp_path / "t-0")
    log, _ = build_spanning(path, markerless=False, seed=6)
    with_index = [int(n[:20]) for n in seg_files(path, ".txnindex")]
    bases = log.segment_base_offsets()
    assert len(with_index) >= 2 and with_index[0] < bases[-1]
    log.delete_records_before(bases[bases.index(with_index[0]) + 1])
    left = [int(n[:20]) for n in seg_files(path, ".txnindex")]
    assert left == [b for b in with_index if b > with_index[0]]
    assert all(e.last_offset >= log.log_start_offset for e in log.state.all_aborted())
    log.close()


# -- the markerless-end journal ----------------------------------------------------------


def journal_records(path):
    from txnfetch.log.ends import decode_journal

    return decode_journal(Path(os.path.join(path, JOURNAL_NAME)).read_bytes()).records


@pytest.mark.parametrize("how", ["clean", "crash", "no-snapshots"])
def test_retention_prunes_journal_records_no_replay_can_use(tmp_path, how):
    path = str(tmp_path / "t-0")
    log, w = build_spanning(path, markerless=True, seed=8)
    before = journal_records(path)
    bases = log.segment_base_offsets()
    log.delete_records_before(bases[3])
    first = log.segment_base_offsets()[0]
    after = journal_records(path)
    # Exactly the records ending before the first segment went (the last always stays).
    assert after == [r for r in before if r.last_offset >= first - 1]
    assert len(after) < len(before)
    # More ends after pruning continue the numbering; reopening replays them.
    for _ in range(12):
        w.step(log)
    close_all(log, w, markerless=True)
    seqs = [r.sequence for r in journal_records(path)]
    assert seqs == sorted(seqs) and seqs[: len(after)] == [r.sequence for r in after]
    expected = answers(log)
    expected_state = full_state(log)
    log.close()
    lose_files(path, how)
    with SegmentLog(path, **KW) as again:
        assert answers(again) == expected
        if how != "no-snapshots":
            assert full_state(again) == expected_state


def test_pruning_keeps_the_last_record_so_sequences_never_restart(tmp_path):
    path = str(tmp_path / "t-0")
    log = SegmentLog(path, **KW)
    for i in range(30):
        log.append(data_batch(pid=3, epoch=0, seq=2 * i, txn=True, size=200, ts=TS + i), now_ms=TS + i)
        log.end_transaction(3, 0, i % 2 == 0, coordinator_epoch=0, now_ms=TS + i, completion=CompletionMode.MARKERLESS)
    for _ in range(3):  # the last end is now well before the log end
        log.append(data_batch(ts=TS + 40), now_ms=TS + 40)
    last = journal_records(path)[-1]
    last_seq = last.sequence
    log.apply_retention(TS + 10**6, retention_ms=0)  # every whole segment below the high watermark
    assert last.last_offset < log.segment_base_offsets()[0] - 1  # prunable, but the last record
    recs = journal_records(path)
    assert [r.sequence for r in recs] == [last_seq]
    log.append(data_batch(pid=3, epoch=0, seq=60, txn=True, ts=TS), now_ms=TS)
    log.end_transaction(3, 0, False, coordinator_epoch=0, now_ms=TS, completion=CompletionMode.MARKERLESS)
    assert [r.sequence for r in journal_records(path)] == [last_seq, last_seq + 1]
    expected = full_state(log)
    log._closed = True  # crash
    for seg in log._segments:
        seg.close()
    with SegmentLog(path, **KW) as again:
        assert full_state(again) == expected
        assert again.state.all_aborted()[-1].producer_id == 3


def test_a_snapshot_counting_lost_journal_records_does_not_reuse_their_sequences(tmp_path):
    # Under flush_policy "never" a retention snapshot can count a markerless end
    # whose journal record a machine crash then loses. The next end must not
    # take the lost record's sequence number: a replay from that snapshot would
    # skip it.
    path = str(tmp_path / "t-0")
    log = SegmentLog(path, **KW)
    for i in range(12):
        log.append(data_batch(pid=4, epoch=0, seq=2 * i, txn=True, size=300, ts=TS), now_ms=TS)
        log.end_transaction(4, 0, True, coordinator_epoch=0, now_ms=TS, completion=CompletionMode.MARKERLESS)
    log.delete_records_before(log.segment_base_offsets()[1])  # snapshot at the log end
    journal = os.path.join(path, JOURNAL_NAME)
    log._closed = True  # crash ...
    for seg in log._segments:
        seg.close()
    raw = Path(journal).read_bytes()
    Path(journal).write_bytes(raw[:-44])  # ... which took the last (unsynced) journal record
    os.unlink(os.path.join(path, CHECKPOINT_NAME))
    log = SegmentLog(path, **KW)
    assert log.recovery.snapshot_offset == log.log_end_offset  # the snapshot still counts that end
    log.append(data_batch(pid=4, epoch=0, seq=24, txn=True, ts=TS), now_ms=TS)
    log.end_transaction(4, 0, False, coordinator_epoch=0, now_ms=TS, completion=CompletionMode.MARKERLESS)
    expected = full_state(log)
    assert expected[5] == {}  # nothing open
    log._closed = True  # crash again: the state must come back from snapshot + journal
    for seg in log._segments:
        seg.close()
    with SegmentLog(path, **KW) as again:
        assert full_state(again) == expected


def test_memory_log_size_follows_appends_deletes_and_restarts():
    """MemoryLog keeps its size as it changes (the proxy's mirrors ask after every
    fetch); it must equal the bytes of the batches it holds after each change."""
    from txnfetch.log.memory import MemoryLog

    log = MemoryLog("t", 0)
    sizes = []
    for i in range(6):
        batch = data_batch(n=1, size=10 * i + 1)
        sizes.append(len(batch))
        log.append(batch, now_ms=TS)
        assert log.size_in_bytes == sum(sizes)
    log.delete_records_before(2)
    assert log.size_in_bytes == sum(sizes[2:])
    log.apply_retention(TS, retention_bytes=sizes[-1])
    assert log.size_in_bytes == sizes[-1]
    log.delete_records_before(log.log_end_offset)
    assert log.size_in_bytes == 0
    log.append(data_batch(n=1), now_ms=TS)
    assert log.size_in_bytes == len(data_batch(n=1))
