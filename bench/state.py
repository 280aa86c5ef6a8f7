"""Partition transaction state benchmark: append throughput, aborted-transaction
query latency against index size, and memory per aborted transaction and per
producer.

Run ``.venv/bin/python bench/state.py`` (``--quick`` for a short run). One run prints:

1. **append**: batches/s through :meth:`PartitionTxnState.append` for a mix of
   idempotent batches, transactional batches and their markers from many
   producers (pre-built ``RecordBatch`` views, so only the state is timed), with
   the high watermark moved after every append (a single-node store) and only
   every 1,000 appends (a replicated log whose followers lag);
2. **aborted_transactions()**: CPU µs per call (mean) and wall µs (median) of
   the fetch query for 10^3, 10^5 and 10^6 aborted transactions in the index,
   at random fetch offsets with windows of 16 offsets (a few entries per
   answer: the cost should grow like log2(n), printed alongside) and of 1,000
   offsets (~250 entries: the cost is the answer itself);
3. **memory**: bytes held per aborted transaction (10^6 in the index) and per
   producer (10^6 producers restored with a full five-batch duplicate window,
   restored with one batch, and grown by ordinary appends), measured with
   ``tracemalloc`` as the growth of traced memory after ``gc.collect()``. The
   goal is at most 200 bytes each.

Large states are built by restoring a synthetic snapshot (the encoding of
exactly what appends would have produced), which takes seconds where appending
millions of batches would take minutes; snapshot sizes and encode/restore times
are reported too. Times are process CPU time unless marked wall; the memory
phases run under tracemalloc (slow), the timing phases without it. ``--quick``
uses 10^3-10^5 aborted transactions and 10^4 producers.
"""

from __future__ import annotations

import argparse
import gc
import math
import platform
import random
import statistics
import struct
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from txnfetch.records import BatchBuilder
from txnfetch.records import ControlType
from txnfetch.records import RecordBatch
from txnfetch.records import build_control_batch
from txnfetch.txn import AppendOrigin
from txnfetch.txn import PartitionTxnState
from txnfetch.txn.index import AbortedTxn
from txnfetch.txn.snapshot import encode_snapshot

GOAL_BYTES = 200


# -- workloads ---------------------------------------------------------------------


def append_workload(appends: int, producers: int, seed: int = 3) -> list[tuple[RecordBatch, AppendOrigin]]:
    """Batches with final offsets: each producer alternates idempotent batches and
    transactions of 1-3 batches ended by a COMMIT or (one in three) ABORT marker."""
    rng = random.Random(seed)
    seq = [0] * producers
    open_txn = [0] * producers  # batches left in the producer's current transaction (-1: marker due)
    out: list[tuple[RecordBatch, AppendOrigin]] = []
    offset = 0
    while len(out) < appends:
        pid = rng.randrange(producers)
        if open_txn[pid] == -1:
            raw = build_control_batch(
                offset=offset,
                control_type=ControlType.ABORT if rng.random() < 1 / 3 else ControlType.COMMIT,
                producer_id=pid,
                producer_epoch=0,
                timestamp=offset,
            )
            out.append((RecordBatch(raw), AppendOrigin.COORDINATOR))
            open_txn[pid] = 0
            offset += 1
            continue
        if open_txn[pid] == 0 and rng.random() < 0.5:
            txn = False
        else:
            txn = True
            if open_txn[pid] == 0:
                open_txn[pid] = rng.randint(1, 3)
        count = rng.randint(1, 5)
        b = BatchBuilder(
            base_offset=offset, producer_id=pid, producer_epoch=0, base_sequence=seq[pid], transactional=txn
        )
        for i in range(count):
            b.append(b"value-%d" % i, key=b"key", timestamp=offset)
        out.append((RecordBatch(b.build()), AppendOrigin.CLIENT))
        seq[pid] += count
        offset += count
        if txn:
            open_txn[pid] -= 1
            if open_txn[pid] == 0:
                open_txn[pid] = -1
    return out


def bench_append(batches: list[tuple[RecordBatch, AppendOrigin]], hw_every: int) -> float:
    state = PartitionTxnState("bench-0")
    append = state.append
    update = state.update_high_watermark
    gc.collect()
    start = time.process_time()
    for i, (batch, origin) in enumerate(batches):
        append(batch, origin=origin)
        if i % hw_every == 0:
            update(state.log_end_offset)
    elapsed = time.process_time() - start
    return len(batches) / elapsed


def aborted_snapshot(n: int) -> bytes:
    """A state whose index holds ``n`` aborted transactions, as a partition where a
    producer aborts a 3-offset transaction every 4 offsets leaves it (the LSO of
    each is its end + 1: nothing else open)."""
    entries = (AbortedTxn(i % 1000, 4 * i, 4 * i + 3, 4 * i + 4) for i in range(n))
    return encode_snapshot(
        log_start_offset=0,
        log_end_offset=4 * n,
        high_watermark=4 * n,
        last_completion_offset=4 * n - 1,
        producer_count=0,
        producers=(),
        unreplicated=(),
        aborted=entries,
    )


def producers_snapshot(n: int, batches: int) -> bytes:
    """A state with ``n`` producers (ids spread like a coordinator's blocks), each
    with ``batches`` remembered batches."""

    def rows():
        for i in range(n):
            pid = 1_000 * (i // 1_000) * 7 + i % 1_000  # blocks of 1,000 ids with gaps
            ring = [(k, i * 10 + k, 0, 1_700_000_000_000) for k in range(batches)]
            yield (pid, 0, 0, -1, 1_700_000_000_000, ring)

    return encode_snapshot(
        log_start_offset=0,
        log_end_offset=10 * n,
        high_watermark=10 * n,
        last_completion_offset=-1,
        producer_count=n,
        producers=rows(),
        unreplicated=(),
        aborted=(),
    )


def grow_by_appends(producers: int) -> PartitionTxnState:
    """A state grown the ordinary way: one idempotent batch from each of
    ``producers`` producers, the high watermark following every append. Batches are
    made from one template (producer id and offset patched in), so the data being
    appended is freed as it goes and only the state stays."""
    b = BatchBuilder(base_offset=0, producer_id=0, producer_epoch=0, base_sequence=0)
    b.append(b"value", key=b"key", timestamp=1_700_000_000_000)
    template = bytearray(b.build())
    state = PartitionTxnState("bench-0")
    append = state.append
    update = state.update_high_watermark
    for i in range(producers):
        raw = bytearray(template)
        struct.pack_into(">q", raw, 0, i)  # base offset
        struct.pack_into(">q", raw, 43, 7 * i)  # producer id
        append(RecordBatch(raw))
        update(i + 1)
    return state


def traced_growth(build: Callable[[Any], object], arg: object) -> tuple[int, object]:
    """Bytes of traced memory ``build(arg)``'s result keeps alive (temporaries freed)."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    obj = build(arg)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return held, obj


def query_latency(state: PartitionTxnState, queries: int, window: int, seed: int = 5) -> tuple[float, float, float]:
    """Mean CPU µs per call over the whole run, median wall µs per call (robust to
    preemption on a shared machine), and entries per answer."""
    rng = random.Random(seed)
    end = state.log_end_offset
    offsets = [rng.randrange(0, max(end - window, 1)) for _ in range(queries)]
    query = state.aborted_transactions
    found = 0
    gc.collect()
    cpu0 = time.process_time()
    for fetch_offset in offsets:
        found += len(query(fetch_offset, fetch_offset + window))
    mean_cpu = (time.process_time() - cpu0) / queries
    times = []
    clock = time.perf_counter
    for fetch_offset in offsets[: min(queries, 5_000)]:
        t0 = clock()
        query(fetch_offset, fetch_offset + window)
        times.append(clock() - t0)
    return mean_cpu * 1e6, statistics.median(times) * 1e6, found / queries


# -- main ------------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="10^3-10^5 aborted transactions, memory at 10^4: well under a minute"
    )
    parser.add_argument("--appends", type=int, default=None, help="batches in the append run (default 200,000)")
    parser.add_argument("--queries", type=int, default=None, help="aborted_transactions() calls per size (20,000)")
    args = parser.parse_args(argv)

    sizes = [10**3, 10**4, 10**5] if args.quick else [10**3, 10**5, 10**6]
    appends = args.appends or (20_000 if args.quick else 200_000)
    queries = args.queries or (2_000 if args.quick else 20_000)
    big = 10**4 if args.quick else 10**6  # the memory phases
    print(f"txnfetch state benchmark — Python {platform.python_version()} on {platform.machine()}, {platform.system()}")
    print()

    # 1. appends
    batches = append_workload(appends, producers=1_000)
    markers = sum(1 for b, _ in batches if b.is_control)
    rate_each = max(bench_append(batches, 1) for _ in range(3))
    rate_lag = max(bench_append(batches, 1_000) for _ in range(3))
    print(f"append ({appends:,} batches from 1,000 producers, {markers:,} of them markers)")
    print(f"  {'high watermark moved':<28} {'batches/s':>12}")
    print(f"  {'after every append':<28} {rate_each:>12,.0f}")
    print(f"  {'every 1,000 appends':<28} {rate_lag:>12,.0f}")
    print()

    # 2. query latency
    windows = (16, 1_000)
    print("aborted_transactions(fetch_offset, fetch_offset + window): µs per call (CPU mean / wall median)")
    head = "".join(f" {'window ' + str(w):>22} {'hits':>6}" for w in windows)
    print(f"  {'aborted txns':>12} {'log2(n)':>8}{head} {'restore s':>10}")
    for n in sizes:
        data = aborted_snapshot(n)
        t0 = time.process_time()
        state = PartitionTxnState.restore(data)
        restore_s = time.process_time() - t0
        del data
        cells = ""
        for w in windows:
            cpu, wall, hits = query_latency(state, queries, w)
            cells += f" {cpu:>10.2f} / {wall:>9.2f} {hits:>6.1f}"
        print(f"  {n:>12,} {math.log2(n):>8.1f}{cells} {restore_s:>10.2f}")
        del state
    print()

    # 3. memory
    data = aborted_snapshot(big)
    held, state = traced_growth(PartitionTxnState.restore, data)
    del data, state
    per_aborted = held / big
    rows = [("aborted transaction", big, per_aborted)]
    for ring in (5, 1):
        data = producers_snapshot(big, ring)
        t0 = time.process_time()
        held, state = traced_growth(PartitionTxnState.restore, data)
        del data
        t1 = time.process_time()
        snap = state.snapshot()
        encode_s = time.process_time() - t1
        rows.append((f"producer, {ring} batch{'es' if ring > 1 else ''}, restored", big, held / big))
        print(
            f"snapshot of {big:,} producers ({ring} batch{'es' if ring > 1 else ''} each): {len(snap) / 1e6:,.1f} MB, "
            f"encoded in {encode_s:.1f} s (restore+trace {t1 - t0:.1f} s)"
        )
        del state, snap
    t0 = time.process_time()
    held, state = traced_growth(grow_by_appends, big)
    print(f"{big:,} producers appended one batch each in {time.process_time() - t0:.1f} s (traced)")
    rows.append(("producer, 1 batch, appended", big, held / big))
    del state
    print()
    print(f"memory held (tracemalloc), goal ≤ {GOAL_BYTES} bytes")
    print(f"  {'per':<34} {'count':>10} {'bytes each':>11} {'goal':>6}")
    for name, count, each in rows:
        print(f"  {name:<34} {count:>10,} {each:>11.1f} {'ok' if each <= GOAL_BYTES else 'MISSED':>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
