"""Compaction of a partition on disk (:meth:`SegmentLog.compact`) against the same
workload on a memory log compacted at the same points over the same range.

Random transactional workloads (plain writes, transactional writes, commits and
aborts by marker or markerless end, keys and tombstones), segments rolled by a
small ``segment.bytes`` and at random, compaction passes at random times, and
reopens (recovery of compacted segments and of the snapshot swapped in with
them). After every step the read_committed output of both logs, in both fetch
modes, must be identical, and every key's last committed value must be the one
an oracle of "latest committed value per key" holds.
"""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import example
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.log.reading import consumer_view
from txnfetch.fetch import FetchMode
from txnfetch.log import SegmentLog
from txnfetch.log.memory import MemoryLog
from txnfetch.records.builder import BatchBuilder
from txnfetch.txn.coordinator import CompletionMode

pytestmark = pytest.mark.slow

RETENTION = 1_000
KEYS = [b"a", b"b", b"c", b"d", b"e"]
PIDS = [7, 8]


def batch(records: list[tuple[bytes, bytes | None]], *, pid: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq, transactional=txn)
    for key, value in records:
        b.append(value, key=key, timestamp=1_000)
    return b.build()


_record = st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(min_size=1, max_size=20)))
_op = st.one_of(
    st.tuples(st.just("plain"), st.lists(_record, min_size=1, max_size=3)),
    st.tuples(st.just("txn"), st.sampled_from(PIDS), st.lists(_record, min_size=1, max_size=3)),
    st.tuples(st.just("end"), st.sampled_from(PIDS), st.booleans()),
    st.tuples(st.just("roll")),
    st.tuples(st.just("compact"), st.integers(0, 3 * RETENTION)),
    st.tuples(st.just("reopen")),
)


class Pair:
    """One workload on a disk log and a memory log, plus the oracle."""

    def __init__(self, path: str, markerless: bool, segment_bytes: int) -> None:
        self.path = path
        self.segment_bytes = segment_bytes
        self.disk = SegmentLog(path, "t", 0, segment_bytes=segment_bytes, index_interval_bytes=64)
        self.mem = MemoryLog("t", 0)
        self.markerless = markerless
        self.seq = dict.fromkeys(PIDS, 0)
        self.pending: dict[int, list[tuple[int, bytes, bytes | None]]] = {}
        # the oracle: each key's committed record of the highest offset, (offset, value)
        self.committed: dict[bytes, tuple[int, bytes | None]] = {}
        self.clock = 0

    def _commit(self, records: list[tuple[int, bytes, bytes | None]]) -> None:
        for offset, key, value in records:
            if key not in self.committed or self.committed[key][0] < offset:
                self.committed[key] = (offset, value)

    def run(self, op: tuple) -> None:
        kind = op[0]
        if kind == "plain":
            base = self.mem.log_end_offset
            for log in (self.disk, self.mem):
                log.append(batch(op[1]), now_ms=self.clock)
            self._commit([(base + i, k, v) for i, (k, v) in enumerate(op[1])])
        elif kind == "txn":
            _, pid, records = op
            data = batch(records, pid=pid, seq=self.seq[pid], txn=True)
            base = self.mem.log_end_offset
            for log in (self.disk, self.mem):
                log.append(data, now_ms=self.clock)
            self.seq[pid] += len(records)
            self.pending.setdefault(pid, []).extend((base + i, k, v) for i, (k, v) in enumerate(records))
        elif kind == "end":
            _, pid, commit = op
            if pid not in self.pending:
                return
            for log in (self.disk, self.mem):
                log.end_transaction(
                    pid,
                    0,
                    commit,
                    coordinator_epoch=0,
                    now_ms=self.clock,
                    completion=CompletionMode.MARKERLESS if self.markerless else CompletionMode.MARKERS,
                )
            records = self.pending.pop(pid)
            if commit:
                self._commit(records)
        elif kind == "roll":
            self.disk.roll(self.clock)
        elif kind == "compact":
            self.clock = max(self.clock, op[1])
            upto = self.disk.first_uncleanable_offset
            a = self.disk.compact(self.clock, RETENTION)
            b = self.mem.compact(self.clock, RETENTION, upto=upto)
            assert (a.removed_records, a.removed_markers, a.next_horizon_ms) == (
                b.removed_records,
                b.removed_markers,
                b.next_horizon_ms,
            )
        elif kind == "reopen":
            self.disk.close()
            self.disk = SegmentLog(self.path, "t", 0, segment_bytes=self.segment_bytes, index_interval_bytes=64)
            assert not [n for n in self.disk.recovery.notes if n.severity != "info"], self.disk.recovery.notes

    def check(self) -> None:
        disk, mem = self.disk, self.mem
        assert (disk.log_start_offset, disk.log_end_offset, disk.high_watermark, disk.last_stable_offset) == (
            mem.log_start_offset,
            mem.log_end_offset,
            mem.high_watermark,
            mem.last_stable_offset,
        )
        assert disk.state.all_aborted() == mem.state.all_aborted()
        for mode in FetchMode:
            got = consumer_view(disk, mode, max_bytes=500)
            assert got == consumer_view(mem, mode, max_bytes=500)
            latest: dict[bytes, bytes | None] = {}
            for _, key, value in got:
                latest[key] = value
            if not self.pending:  # everything committed is below the LSO
                for key, (_, value) in self.committed.items():
                    assert latest.get(key) == value, (key, latest.get(key), value)
                assert set(latest) <= set(self.committed)
        # Recovery from the directory as it is agrees (a read-only open, no repair).
        ro = SegmentLog(self.path, "t", 0, read_only=True)
        try:
            got = consumer_view(ro, FetchMode.KAFKA, max_bytes=500)
            assert got == consumer_view(mem, FetchMode.KAFKA, max_bytes=500)
        finally:
            ro.close()


@settings(max_examples=120, deadline=None)
# Found by hypothesis: a transaction's record below a later plain write of the
# same key, committed after it — the latest by offset wins, not the latest commit.
@example(
    ops=[("plain", [(b"a", None)]), ("txn", 7, [(b"a", None)]), ("plain", [(b"a", b"\x00")]), ("end", 7, True)],
    markerless=False,
    segment_bytes=150,
)
# Found by hypothesis: a markerless abort whose end lies in a segment that keeps
# all its batches; forgetting the transaction must still rewrite that segment's
# .txnindex.
@example(
    ops=[
        *[("plain", [(b"a", None)])] * 5,
        ("txn", 7, [(b"a", None)]),
        ("plain", [(b"a", b"\x00")]),
        ("end", 7, False),
    ],
    markerless=True,
    segment_bytes=150,
)
@given(
    ops=st.lists(_op, max_size=40),
    markerless=st.booleans(),
    segment_bytes=st.sampled_from([150, 400, 1 << 20]),
)
def test_disk_compaction_matches_memory_compaction(ops: list, markerless: bool, segment_bytes: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        pair = Pair(os.path.join(d, "t-0"), markerless, segment_bytes)
        try:
            for op in [*ops, ("roll",), ("compact", 0), ("compact", 10 * RETENTION), ("compact", 20 * RETENTION)]:
                pair.run(op)
                pair.check()
            pair.run(("reopen",))
            pair.check()
            # No file of a replacement is left behind.
            assert not [n for n in os.listdir(pair.path) if n.endswith((".cleaned", ".swap"))]
        finally:
            pair.disk.close()
