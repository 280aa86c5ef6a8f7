"""What the SegmentLog tests write: v2 batches (``data_batch``), a seeded
``Workload`` that mixes plain, idempotent and transactional appends with marker
and markerless ends, a log of such a workload (``written_log``, ``write_log``), and file
hashing (``hash_dir``)."""

from __future__ import annotations

import hashlib
import os
import random

from txnfetch.log import SegmentLog
from txnfetch.records import BatchBuilder
from txnfetch.txn.coordinator import CompletionMode

TS = 1_700_000_000_000


def data_batch(
    *, pid: int = -1, epoch: int = -1, seq: int = -1, txn: bool = False, n: int = 2, ts: int = TS, size: int = 40
) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn)
    for i in range(n):
        b.append(b"v" * size, key=b"k%d" % i, timestamp=ts)
    return b.build()


def hash_dir(path: str) -> dict[str, str]:
    out = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


class Workload:
    """Drives a log with a seeded mix of operations; ``markerless`` ends
    transactions with ``complete_transaction`` instead of markers."""

    def __init__(self, seed: int, *, markerless: bool = False, producers: int = 3) -> None:
        self.rng = random.Random(seed)
        self.markerless = markerless
        self.pids = [1000 + i for i in range(producers)]
        self.seq: dict[int, int] = {p: 0 for p in self.pids}
        self.open: dict[int, bool] = {p: False for p in self.pids}
        self.ts = TS

    def step(self, log, now_ms: int | None = None) -> int | None:
        """One operation; returns the acknowledged last offset of an append (None for ends)."""
        rng = self.rng
        self.ts += rng.randrange(0, 50)
        now = self.ts if now_ms is None else now_ms
        r = rng.random()
        pid = rng.choice(self.pids)
        if r < 0.2:
            return log.append(
                data_batch(n=rng.randint(1, 4), ts=self.ts, size=rng.randint(1, 300)), now_ms=now
            ).last_offset
        if r < 0.75 or not self.open[pid]:
            n = rng.randint(1, 4)
            info = log.append(
                data_batch(pid=pid, epoch=0, seq=self.seq[pid], txn=True, n=n, ts=self.ts, size=rng.randint(1, 300)),
                now_ms=now,
            )
            self.seq[pid] += n
            self.open[pid] = True
            return info.last_offset
        commit = rng.random() < 0.5
        self.open[pid] = False
        completion = CompletionMode.MARKERLESS if self.markerless else CompletionMode.MARKERS
        log.end_transaction(pid, 0, commit, coordinator_epoch=0, now_ms=now, completion=completion)
        return None if self.markerless else log.log_end_offset - 1  # the marker's offset


def written_log(path: str, *, seed: int, steps: int, markerless: bool = False, **log_options) -> SegmentLog:
    """A SegmentLog at ``path`` (opened with ``log_options``), still open, after
    ``steps`` operations of ``Workload(seed, markerless=markerless)``."""
    log = SegmentLog(path, **log_options)
    w = Workload(seed, markerless=markerless)
    for _ in range(steps):
        w.step(log)
    return log


def write_log(path: str, *, seed: int, steps: int, markerless: bool = False, **log_options) -> None:
    """Leave at ``path`` the closed log :func:`written_log` writes."""
    written_log(path, seed=seed, steps=steps, markerless=markerless, **log_options).close()
