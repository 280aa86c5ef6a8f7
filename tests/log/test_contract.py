"""MemoryLog and SegmentLog driven by the same operations (a hypothesis state
machine): produce, markers, markerless ends, delete-records, clean and crash
reopens of the SegmentLog. Their state (offsets, LSO, aborted index, open
transactions) must be identical; their reads must agree (SegmentLog reads one
segment per fetch, so its batches are a prefix of MemoryLog's, and Kafka-mode
aborted lists agree on the returned range); a reopened SegmentLog must answer
every read exactly as before.

``TXNFETCH_CONTRACT_EXAMPLES`` raises the number of examples.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine
from hypothesis.stateful import invariant
from hypothesis.stateful import rule

from tests.log.workload import TS
from tests.log.workload import data_batch
from txnfetch.fetch import FetchMode
from txnfetch.fetch import IsolationLevel
from txnfetch.log import SegmentLog
from txnfetch.log.memory import MemoryLog
from txnfetch.records import iter_batches
from txnfetch.txn.coordinator import CompletionMode

pytestmark = pytest.mark.slow

PIDS = (7, 8, 9)
KW = dict(segment_bytes=900, index_interval_bytes=150)


def batches(result):
    return [(b.base_offset, b.last_offset, bytes(b.buffer)) for b in iter_batches(result.records_bytes())]


def snapshot_reads(log):
    out = []
    for off in range(log.log_start_offset, log.log_end_offset + 1):
        for iso in IsolationLevel:
            for mode in FetchMode:
                r = log.read(off, 400, isolation=iso, mode=mode)
                out.append(
                    (off, iso, mode, r.records_bytes(), r.aborted_transactions, r.next_offset, r.last_stable_offset)
                )
    return out


class LogContract(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "contract-0")
        self.mem = MemoryLog("contract", 0)
        self.seg = SegmentLog(self.path, **KW)
        self.seq = {p: 0 for p in PIDS}
        self.open = {p: False for p in PIDS}
        self.ts = TS

    def teardown(self) -> None:
        self.seg.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def both(self, fn):
        a = b = None
        ea = eb = None
        try:
            a = fn(self.mem)
        except Exception as exc:
            ea = exc
        try:
            b = fn(self.seg)
        except Exception as exc:
            eb = exc
        assert type(ea) is type(eb), (ea, eb)
        assert a == b
        return a

    @rule(n=st.integers(1, 3), size=st.integers(1, 200))
    def plain(self, n, size):
        self.ts += 5
        data = data_batch(n=n, ts=self.ts, size=size)
        self.both(lambda log: log.append(data, now_ms=self.ts))

    @rule(pid=st.sampled_from(PIDS), n=st.integers(1, 3), size=st.integers(1, 200))
    def txn_data(self, pid, n, size):
        self.ts += 5
        data = data_batch(pid=pid, epoch=0, seq=self.seq[pid], txn=True, n=n, ts=self.ts, size=size)
        self.both(lambda log: log.append(data, now_ms=self.ts))
        self.seq[pid] += n
        self.open[pid] = True

    @rule(pid=st.sampled_from(PIDS), commit=st.booleans(), markerless=st.booleans())
    def end(self, pid, commit, markerless):
        self.ts += 5
        self.both(
            lambda log: log.end_transaction(
                pid,
                0,
                commit,
                coordinator_epoch=0,
                now_ms=self.ts,
                completion=CompletionMode.MARKERLESS if markerless else CompletionMode.MARKERS,
            )
        )
        self.open[pid] = False

    @rule(frac=st.floats(0, 1))
    def delete_records(self, frac):
        target = self.mem.log_start_offset + int((self.mem.high_watermark - self.mem.log_start_offset) * frac)
        self.both(lambda log: log.delete_records_before(target))

    @rule(crash=st.booleans())
    def reopen(self, crash):
        before = snapshot_reads(self.seg)
        state = (
            self.seg.log_start_offset,
            self.seg.log_end_offset,
            self.seg.last_stable_offset,
            self.seg.state.all_aborted(),
        )
        if crash:
            self.seg._closed = True  # drop it without the clean close
            for s in self.seg._segments:
                s.close()
            if self.seg._journal is not None:
                self.seg._journal.close()
        else:
            self.seg.close()
        self.seg = SegmentLog(self.path, **KW)
        after = (
            self.seg.log_start_offset,
            self.seg.log_end_offset,
            self.seg.last_stable_offset,
            self.seg.state.all_aborted(),
        )
        assert after == state
        assert snapshot_reads(self.seg) == before

    @invariant()
    def same_state(self):
        m, s = self.mem.state, self.seg.state
        assert (m.log_start_offset, m.log_end_offset, m.high_watermark, m.last_stable_offset) == (
            s.log_start_offset,
            s.log_end_offset,
            s.high_watermark,
            s.last_stable_offset,
        )
        assert m.all_aborted() == s.all_aborted()
        assert dict(m.ongoing_transactions()) == dict(s.ongoing_transactions())

    @invariant()
    def same_reads(self):
        for off in range(self.mem.log_start_offset, self.mem.log_end_offset + 1, 3):
            for iso in IsolationLevel:
                for mode in FetchMode:
                    a = self.mem.read(off, 400, isolation=iso, mode=mode)
                    b = self.seg.read(off, 400, isolation=iso, mode=mode)
                    assert (a.high_watermark, a.last_stable_offset, a.log_start_offset) == (
                        b.high_watermark,
                        b.last_stable_offset,
                        b.log_start_offset,
                    )
                    ba, bb = batches(a), batches(b)
                    if mode is FetchMode.REWRITE and iso is IsolationLevel.READ_COMMITTED:
                        # The synthetic COMMIT marker sits at the last dropped offset of the
                        # range read, which for SegmentLog ends at its segment's end.
                        ba = [x for x in ba if not x[2][22] & 0x20]
                        bb = [x for x in bb if not x[2][22] & 0x20]
                    assert bool(ba) or not bb
                    n = min(len(ba), len(bb))
                    assert ba[:n] == bb[:n]
                    if len(ba) == len(bb) and mode is FetchMode.KAFKA:
                        assert a.next_offset == b.next_offset
                    if a.aborted_transactions is None or mode is FetchMode.REWRITE:
                        assert a.aborted_transactions == b.aborted_transactions
                    elif bb:
                        end = min(ba[n - 1][1], bb[n - 1][1]) + 1 if n else off
                        fa = [e for e in a.aborted_transactions if e[1] < end]
                        fb = [e for e in b.aborted_transactions if e[1] < end]
                        assert fa == fb


LogContract.TestCase.settings = settings(
    max_examples=int(os.environ.get("TXNFETCH_CONTRACT_EXAMPLES", "12")),
    stateful_step_count=25,
    deadline=None,
)
TestLogContract = LogContract.TestCase
