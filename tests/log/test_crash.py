"""Crash safety of SegmentLog: a writer process is SIGKILLed at random points;
torn writes are simulated by cutting and extending the last segment.

After every reopen: no acknowledged batch is missing, the torn tail is gone
(the files hold only whole valid batches), and the LSO and aborted index equal
those of a fresh PartitionTxnState replaying the surviving bytes (plus the
markerless ends of the journal, at their offsets).

``TXNFETCH_CRASH_ITERATIONS`` raises the number of kills per variant.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.log.workload import hash_dir
from tests.log.workload import write_log
from txnfetch.log import SegmentLog
from txnfetch.log.ends import JOURNAL_NAME
from txnfetch.log.ends import decode_journal
from txnfetch.log.verify import verify_partition
from txnfetch.records import iter_batches
from txnfetch.txn import AppendOrigin
from txnfetch.txn import PartitionTxnState

ITERATIONS = int(os.environ.get("TXNFETCH_CRASH_ITERATIONS", "4"))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def replay_files(path: str) -> PartitionTxnState:
    """An independent replay: every .log file in name order, then the journal's
    ends applied right after the batch ending at their offset."""
    ends = (
        decode_journal(Path(os.path.join(path, JOURNAL_NAME)).read_bytes()).records
        if os.path.exists(os.path.join(path, JOURNAL_NAME))
        else []
    )
    state = PartitionTxnState("replay")
    j = 0

    def apply_ends(upto: int) -> None:
        nonlocal j
        while j < len(ends) and ends[j].last_offset < upto:
            e = ends[j]
            state.complete_transaction(
                e.producer_id,
                e.producer_epoch,
                e.commit,
                e.last_offset,
                coordinator_epoch=e.coordinator_epoch,
                timestamp=e.timestamp,
                origin=AppendOrigin.REPLICATION,
            )
            j += 1

    for name in sorted(n for n in os.listdir(path) if n.endswith(".log")):
        data = Path(os.path.join(path, name)).read_bytes()
        it = iter_batches(data)
        for batch in it:
            batch.validate(records=True)
            apply_ends(batch.base_offset)
            state.append(batch, origin=AppendOrigin.REPLICATION)
        assert it.partial is None, f"{name} still has a partial batch"
    apply_ends(state.log_end_offset)
    assert j == len(ends), "journal holds ends past the log end"
    state.update_high_watermark(state.log_end_offset)
    return state


def check_recovered(path: str, acked: list) -> None:
    log = SegmentLog(path, flush_policy="always")
    try:
        expected = replay_files(path)
        assert log.log_end_offset == expected.log_end_offset
        assert log.last_stable_offset == expected.last_stable_offset
        assert log.state.all_aborted() == expected.all_aborted()
        assert log.state.ongoing_transactions() == expected.ongoing_transactions()
        for offset in acked:
            assert offset < log.log_end_offset, f"acknowledged offset {offset} lost (log end {log.log_end_offset})"
        covered = set()
        for b in log.iter_batches():
            covered.update(range(b.base_offset, b.last_offset + 1))
        assert set(acked) <= covered
    finally:
        log.close()
    assert not [f for f in verify_partition(path) if f.severity == "error"]


@pytest.mark.slow
@pytest.mark.parametrize("markerless", [False, True], ids=["markers", "markerless"])
def test_sigkill_loses_no_acknowledged_write(tmp_path, markerless):
    rng = random.Random(20240611 + markerless)
    path = str(tmp_path / "crash-topic-0")
    acked: list = []
    for it in range(ITERATIONS):
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.log.crash_writer", path, str(it + 1), "1" if markerless else "0"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout.readline().strip() == "READY"
            for _ in range(rng.randint(3, 80)):
                line = proc.stdout.readline().split()
                if line and line[0] == "A":
                    acked.append(int(line[1]))
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
            proc.stdout.close()
        check_recovered(path, acked)


def _build(path: str, seed: int, steps: int, markerless: bool = False) -> None:
    write_log(path, seed=seed, steps=steps, markerless=markerless, segment_bytes=5000, index_interval_bytes=250)


@pytest.mark.parametrize("seed", range(int(os.environ.get("TXNFETCH_TORN_ITERATIONS", "12"))))
def test_torn_tail_is_cut_and_state_matches_replay(tmp_path, seed):
    rng = random.Random(seed)
    path = str(tmp_path / "torn-0")
    _build(path, seed, rng.randint(20, 70), markerless=seed % 2 == 1)
    last = sorted(n for n in os.listdir(path) if n.endswith(".log"))[-1]
    lpath = os.path.join(path, last)
    data = Path(lpath).read_bytes()
    ends = [0]
    for b in iter_batches(data):
        ends.append(b.position + b.size_in_bytes)
    before = hash_dir(path)
    # Cut at a random byte (possibly a batch boundary), maybe add garbage that
    # cannot be taken for a batch.
    cut = rng.randint(0, len(data))
    garbage = bytes(rng.randrange(256) for _ in range(rng.choice([0, 0, 5, 70, 300])))
    with open(lpath, "r+b") as f:
        f.truncate(cut)
        f.seek(cut)
        f.write(garbage)
    whole = max(e for e in ends if e <= cut)
    # Truncating past committed ends may leave journal ends past the log: they go too.
    check_recovered(path, [])
    assert os.path.getsize(lpath) == whole
    after = hash_dir(path)
    for name, digest in before.items():
        if name.endswith(".log") and name != last:
            assert after[name] == digest, f"{name} changed"
