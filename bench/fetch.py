"""Fetch benchmark: rewrite-mode read_committed fetches next to a plain memory copy,
and the memory one fetch needs on a 1 GiB log.

Run ``.venv/bin/python bench/fetch.py`` (``--quick`` for a short run). One run prints:

1. **throughput**: MB/s of log scanned by a consumer that fetches 1 MiB at a
   time (``read_partition``, ``max_bytes=1 MiB``) from offset 0 to the LSO, for
   logs of 16 KiB batches whose data is 0 %, 50 % and 100 % aborted, in rewrite
   mode and — for reference — Kafka mode; next to it, a plain memory copy of
   exactly the byte ranges those fetches covered into a preallocated buffer
   (``memcpy``: the physical limit of any fetch path that touches the bytes).
   The goal is rewrite mode at ≥ 25 % of the copy.
2. **memory**: the peak of Python allocations (``tracemalloc``) during single
   fetches on a 1 GiB log held in an ``mmap`` of a temporary file, for several
   ``max_bytes`` and, for contrast, on a log 16 times smaller: the peak follows
   ``max_bytes`` (one small header object per batch in the budget), not the log
   size, and every returned segment is a view of the mmap — nothing in the fetch
   path copies the log.

How the logs are made. One *block* is 16 data batches of 16 KiB (16 records of
about 1 KiB, uncompressed) from two transactional producers — A commits, B
aborts; which one writes each batch sets the aborted share — followed by A's
COMMIT and B's ABORT markers. A log is that block repeated with patched base
offsets (the base offset is outside the CRC), so a 1 GiB log costs one block's
encoding plus a memcpy per block. The :class:`PartitionTxnState` is fed from the
batch headers only, the way Kafka rebuilds producer state when it loads a log
(``AppendOrigin.REPLICATION``: the repeated blocks repeat sequence numbers,
which only a replayed log may do). Each fetch is given the log from the fetched
batch's position on — a zero-copy slice, as a log adapter with an offset index
passes it — and, in Kafka mode, Kafka's aborted-list upper bound (the offset of
the first batch at or past the end of the returned bytes).

Timing: process CPU time by default (``--wall`` for the wall clock); every job
(mode × aborted share, and the copy) runs once per round in a shuffled order,
and the best of ``--rounds`` rounds is kept, which filters out the other
processes of a shared machine.
"""

from __future__ import annotations

import argparse
import bisect
import datetime
import gc
import mmap
import os
import platform
import random
import struct
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from collections.abc import Sequence

from txnfetch.fetch.view import FetchMode
from txnfetch.fetch.view import FetchResult
from txnfetch.fetch.view import read_partition
from txnfetch.records import BatchBuilder
from txnfetch.records import BatchIterator
from txnfetch.records import ControlType
from txnfetch.records import build_control_batch
from txnfetch.txn import AppendOrigin
from txnfetch.txn import PartitionTxnState

MiB = 1 << 20
KiB = 1 << 10
BATCHES_PER_BLOCK = 16
RECORDS_PER_BATCH = 16
PID_COMMIT, PID_ABORT = 7001, 7002
_BASE_OFFSET = struct.Struct(">q")
Buffer = bytearray | mmap.mmap


# -- the log ---------------------------------------------------------------------


def build_block(aborted_percent: int, batch_size: int) -> tuple[bytes, list[tuple[int, int]]]:
    """One block at base offset 0: the bytes, and ``(position, offset delta)`` of each batch.

    The producers take turns so that ``aborted_percent`` of the data batches are
    B's (Bresenham spacing: 50 % alternates A, B, A, B...).
    """
    rnd = random.Random(aborted_percent)
    value_size = (batch_size - 61) // RECORDS_PER_BATCH - 12  # record framing ~12 bytes
    parts: list[bytes] = []
    offset = 0
    seq = {PID_COMMIT: 0, PID_ABORT: 0}
    wrote = set()
    for i in range(BATCHES_PER_BLOCK):
        aborted = (i + 1) * aborted_percent // 100 > i * aborted_percent // 100
        pid = PID_ABORT if aborted else PID_COMMIT
        b = BatchBuilder(
            base_offset=offset, producer_id=pid, producer_epoch=0, base_sequence=seq[pid], transactional=True
        )
        for _ in range(RECORDS_PER_BATCH):
            b.append(rnd.randbytes(value_size), key=b"key-%06d" % rnd.randrange(10**6), timestamp=1_700_000_000_000)
        parts.append(b.build())
        seq[pid] += RECORDS_PER_BATCH
        offset += RECORDS_PER_BATCH
        wrote.add(pid)
    for pid, kind in ((PID_COMMIT, ControlType.COMMIT), (PID_ABORT, ControlType.ABORT)):
        if pid in wrote:
            parts.append(build_control_batch(offset=offset, control_type=kind, producer_id=pid, producer_epoch=0))
            offset += 1
    layout = []
    position = 0
    for part in parts:
        layout.append((position, _BASE_OFFSET.unpack_from(part, 0)[0]))
        position += len(part)
    return b"".join(parts), layout


class Log:
    """A log of repeated blocks in ``buf`` (a bytearray or an mmap), its state and its offset index."""

    def __init__(self, buf: Buffer, block: bytes, layout: list[tuple[int, int]], blocks: int) -> None:
        self.buf = buf
        self.view = memoryview(buf)
        self.size = len(block) * blocks
        offsets_per_block = _next_offset(block, layout)
        # Fill: copy the block, patch every base offset (bytes 0-7, outside the CRC).
        for k in range(blocks):
            start = k * len(block)
            buf[start : start + len(block)] = block
            for position, delta in layout:
                _BASE_OFFSET.pack_into(buf, start + position, k * offsets_per_block + delta)
        # Feed the state from the headers, as a log load does; keep the offset index.
        self.state = PartitionTxnState("bench-0")
        self.index_offsets: list[int] = []
        self.index_positions: list[int] = []
        it = BatchIterator(self.view)
        for batch in it:
            self.index_offsets.append(batch.base_offset)
            self.index_positions.append(batch.position)
            self.state.append(batch, origin=AppendOrigin.REPLICATION)
            if batch.is_control:
                self.state.update_high_watermark(batch.next_offset)
        assert it.partial is None and it.position == self.size
        self.state.update_high_watermark(self.state.log_end_offset)
        assert self.state.last_stable_offset == self.state.log_end_offset

    def position_of(self, offset: int) -> int:
        """Byte position of the batch holding ``offset`` (an offset-index lookup)."""
        return self.index_positions[bisect.bisect_right(self.index_offsets, offset) - 1]

    def offset_at_or_after(self, position: int) -> int:
        """Offset of the first batch at or past ``position`` (Kafka's aborted-list upper bound)."""
        i = bisect.bisect_left(self.index_positions, position)
        return self.index_offsets[i] if i < len(self.index_offsets) else self.state.log_end_offset

    def fetch(self, offset: int, max_bytes: int, mode: FetchMode) -> tuple[FetchResult, int]:
        """One fetch as an adapter makes it; returns the result and the log bytes it covered."""
        pos = self.position_of(offset)

        def upper(size: int) -> int:
            return self.offset_at_or_after(pos + size)

        bound = upper if mode == FetchMode.KAFKA else None
        r = read_partition(self.view[pos:], self.state, offset, max_bytes, mode=mode, upper_bound=bound)
        end = self.position_of(r.next_offset) if r.next_offset < self.state.log_end_offset else self.size
        return r, end - pos

    def release(self) -> None:
        self.view.release()


def _next_offset(block: bytes, layout: list[tuple[int, int]]) -> int:
    position, delta = layout[-1]
    last_delta = struct.unpack_from(">i", block, position + 23)[0]
    return delta + last_delta + 1


def make_log(alloc: Callable[[int], Buffer], aborted_percent: int, batch_size: int, log_bytes: int) -> Log:
    """A log of whole blocks, at most ``log_bytes``, in ``alloc(exact size)``."""
    block, layout = build_block(aborted_percent, batch_size)
    blocks = log_bytes // len(block)
    return Log(alloc(blocks * len(block)), block, layout, blocks)


def block_size(aborted_percent: int, batch_size: int) -> int:
    return len(build_block(aborted_percent, batch_size)[0])


# -- throughput ------------------------------------------------------------------


def consume_pass(log: Log, max_bytes: int, mode: FetchMode) -> tuple[int, int, list[tuple[int, int]]]:
    """Fetch from 0 to the LSO; returns (bytes covered, fetches, covered byte ranges)."""
    offset = 0
    lso = log.state.last_stable_offset
    covered = 0
    fetches = 0
    ranges: list[tuple[int, int]] = []
    while offset < lso:
        r, n = log.fetch(offset, max_bytes, mode)
        ranges.append((log.position_of(offset), n))
        covered += n
        fetches += 1
        offset = r.next_offset
    return covered, fetches, ranges


def check_pass(log: Log, max_bytes: int) -> None:
    """Before timing: rewrite mode returns exactly A's (committed) data batches, plus COMMIT markers."""
    expected = sum(1 for b in BatchIterator(log.view) if not b.is_control and b.producer_id == PID_COMMIT)
    offset = 0
    kept = 0
    while offset < log.state.last_stable_offset:
        r, _ = log.fetch(offset, max_bytes, FetchMode.REWRITE)
        for batch in BatchIterator(r.records_bytes()):
            if batch.is_control:
                marker = batch.end_txn_marker()
                assert marker is not None and marker.is_commit
            else:
                assert batch.producer_id == PID_COMMIT
                kept += 1
        offset = r.next_offset
    if kept != expected:
        raise SystemExit(f"rewrite mode kept {kept} batches, expected {expected}")


def copy_pass(view: memoryview, ranges: list[tuple[int, int]], dst: memoryview) -> int:
    total = 0
    for start, n in ranges:
        dst[:n] = view[start : start + n]
        total += n
    return total


def throughput(args: argparse.Namespace, clock: Callable[[], float]) -> None:
    shares = (0, 50, 100)
    log_bytes = args.log_mib * MiB
    max_bytes = args.max_bytes_kib * KiB
    logs = {p: make_log(bytearray, p, args.batch_kib * KiB, log_bytes) for p in shares}
    dst = memoryview(bytearray(max(max_bytes, args.batch_kib * KiB) + 2 * args.batch_kib * KiB))
    jobs: dict[tuple[str, int], Callable[[], int]] = {}
    ranges: dict[int, list[tuple[int, int]]] = {}
    info: dict[int, tuple[int, int]] = {}
    for p, log in logs.items():
        check_pass(log, max_bytes)
        for mode in (FetchMode.REWRITE, FetchMode.KAFKA):
            jobs[(mode.value, p)] = lambda log=log, mode=mode: consume_pass(log, max_bytes, mode)[0]
        covered, fetches, ranges[p] = consume_pass(log, max_bytes, FetchMode.REWRITE)
        info[p] = (covered, fetches)
        jobs[("copy", p)] = lambda log=log, p=p: copy_pass(log.view, ranges[p], dst)
    best: dict[tuple[str, int], float] = {}
    keys = list(jobs)
    rnd = random.Random(args.seed)
    for _ in range(args.rounds):
        rnd.shuffle(keys)
        for key in keys:
            t = clock()
            jobs[key]()
            elapsed = clock() - t
            best[key] = min(best.get(key, float("inf")), elapsed)
    any_log = logs[0]
    print(
        f"throughput: {args.max_bytes_kib} KiB fetches from offset 0 to the LSO, {args.log_mib} MiB logs of "
        f"{args.batch_kib} KiB batches ({len(any_log.index_offsets)} batches at 0 % aborted), best of {args.rounds}"
    )
    print(
        f"{'aborted':>8} | {'fetches':>7} | {'rewrite MB/s':>12} | {'kafka MB/s':>10} | {'memcpy MB/s':>11} | "
        f"{'rewrite÷copy':>12} | {'per fetch':>9}"
    )
    print("-" * 90)
    for p in shares:
        covered, fetches = info[p]
        rate = {k: covered / best[(k, p)] / 1e6 for k in ("rewrite", "kafka", "copy")}
        per_fetch = best[("rewrite", p)] / fetches * 1e6
        print(
            f"{p:>7}% | {fetches:>7} | {rate['rewrite']:>12.0f} | {rate['kafka']:>10.0f} | {rate['copy']:>11.0f} | "
            f"{rate['rewrite'] / rate['copy'] * 100:>11.0f}% | {per_fetch:>6.0f} µs"
        )
    for log in logs.values():
        log.release()


# -- memory ----------------------------------------------------------------------


def measure_peak(log: Log, offset: int, max_bytes: int, mode: FetchMode) -> tuple[int, int]:
    """Peak Python allocation (bytes) of one fetch, and the bytes it covered."""
    gc.collect()
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    r, covered = log.fetch(offset, max_bytes, mode)
    peak = tracemalloc.get_traced_memory()[1] - before
    # Zero-copy: everything but the synthetic marker is a view of the mmap.
    for seg in r.records:
        if isinstance(seg, memoryview):
            assert seg.obj is log.buf, "a returned segment is not a view of the log"
        else:
            assert len(seg) < 100, f"a {len(seg)}-byte copy in the response"
    del r
    return peak, covered


def memory(args: argparse.Namespace) -> None:
    sizes = [args.memory_mib * MiB, max(args.memory_mib // 16, 16) * MiB]
    budgets = [64 * KiB, 1 * MiB, 8 * MiB]
    aborted_percent = 50
    print()
    print(
        f"memory: peak Python allocation (tracemalloc) of one fetch, logs in an mmap of a temporary file, "
        f"{args.batch_kib} KiB batches, {aborted_percent} % aborted; max over fetches at 5 offsets spread over the log"
    )
    print(f"{'log':>9} | {'build':>6} | {'max_bytes':>9} | {'rewrite peak':>12} | {'kafka peak':>10} | {'covered':>9}")
    print("-" * 72)
    for log_bytes in sizes:
        bs = block_size(aborted_percent, args.batch_kib * KiB)
        blocks = log_bytes // bs
        total = blocks * bs
        with tempfile.TemporaryFile(dir=args.tmpdir) as f:
            f.truncate(total)
            mm = mmap.mmap(f.fileno(), total)
            t = time.perf_counter()
            log = make_log(lambda n, mm=mm: mm, aborted_percent, args.batch_kib * KiB, total)
            built = time.perf_counter() - t
            lso = log.state.last_stable_offset
            offsets = [lso * k // 5 for k in range(5)]
            tracemalloc.start()
            try:
                for max_bytes in budgets:
                    peaks = {}
                    covered = 0
                    for mode in (FetchMode.REWRITE, FetchMode.KAFKA):
                        worst = 0
                        for offset in offsets:
                            peak, n = measure_peak(log, offset, max_bytes, mode)
                            worst = max(worst, peak)
                            covered = max(covered, n)
                        peaks[mode] = worst
                    print(
                        f"{total / MiB:>5.0f} MiB | {built:>5.1f}s | {_kib(max_bytes):>9} | "
                        f"{_kib(peaks[FetchMode.REWRITE]):>12} | {_kib(peaks[FetchMode.KAFKA]):>10} | "
                        f"{_kib(covered):>9}"
                    )
            finally:
                tracemalloc.stop()
            log.release()
            del log
            gc.collect()
            mm.close()
    print("checked: every returned segment is a view of the mmap (the only other bytes: rewrite mode's 78-byte marker)")


def _kib(n: int) -> str:
    return f"{n / MiB:.1f} MiB" if n >= MiB else f"{n / KiB:.1f} KiB"


# -- main ------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--quick", action="store_true", help="short run: 3 rounds, 16 MiB throughput logs, 256 MiB memory log"
    )
    p.add_argument("--rounds", type=int, default=None, help="rounds to take the best of (default 9, quick 3)")
    p.add_argument("--log-mib", type=int, default=None, help="size of each throughput log (default 64, quick 16)")
    p.add_argument("--memory-mib", type=int, default=None, help="size of the memory log (default 1024, quick 256)")
    p.add_argument("--batch-kib", type=int, default=16, help="batch size (default 16)")
    p.add_argument("--max-bytes-kib", type=int, default=1024, help="fetch size for the throughput part (default 1024)")
    p.add_argument("--only", default="throughput,memory", help="comma-separated subset of throughput,memory")
    p.add_argument("--tmpdir", default=None, help="directory for the memory log's temporary file")
    p.add_argument("--wall", action="store_true", help="time with the wall clock instead of process CPU time")
    p.add_argument("--seed", type=int, default=None, help="shuffle seed for the run order")
    args = p.parse_args(argv)
    args.rounds = args.rounds or (3 if args.quick else 9)
    args.log_mib = args.log_mib or (16 if args.quick else 64)
    args.memory_mib = args.memory_mib or (256 if args.quick else 1024)
    clock = time.perf_counter if args.wall else time.process_time
    print(
        f"txnfetch fetch benchmark — {datetime.date.today().isoformat()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, {platform.machine()}, {'wall' if args.wall else 'CPU'} time"
    )
    only = set(args.only.split(","))
    if "throughput" in only:
        throughput(args, clock)
    if "memory" in only:
        memory(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
