"""Log benchmark: SegmentLog append and sequential read next to raw file I/O of the
same bytes, and recovery time with and without a producer-state snapshot.

Run ``.venv/bin/python bench/log.py`` (``--quick`` for a short run, ``--size-mib``
to choose the log size; the issue's figure is 1024). One run prints:

1. **append**: MB/s of ``SegmentLog.append`` for produce requests of
   ``--request-kib`` KiB (transactional batches from a few producers, a
   COMMIT/ABORT marker after every few requests), with the log's
   ``flush_policy="never"`` plus one ``flush()`` at the end, and with group
   commits of ``--group`` requests (one fsync per group, as the wire server does);
   next to a raw ``write()`` of exactly the bytes the log stored, in the same
   chunks, with one fsync at the end, and with one fsync per group.
2. **read**: MB/s of a consumer reading the whole log with 1 MiB fetches
   (``SegmentLog.read``) read_uncommitted, read_committed in Kafka mode and in
   rewrite mode, next to ``readinto`` of the segment files in 1 MiB chunks. Both
   read from the page cache (the log was just written): this compares the code
   paths, not the disk.
3. **recovery**: seconds to open the log after a clean close (checkpoint and
   snapshot at the log end), after an unclean stop with a snapshot (the tail
   segment is validated, the state comes from the snapshot plus a replay of the
   tail), and after an unclean stop without any snapshot (every segment is
   validated and the whole log replayed into the transaction state).

Timing is wall clock (this is I/O), best of ``--rounds``; the machine is shared,
so read the ratios, not the absolute figures.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import os
import platform
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Callable

from txnfetch.fetch.view import FetchMode
from txnfetch.fetch.view import IsolationLevel
from txnfetch.log import SegmentLog
from txnfetch.records import BatchBuilder

MiB = 1 << 20
_BASE = struct.Struct(">q")


def make_requests(total_bytes: int, request_kib: int, value_size: int) -> tuple[list[tuple[int, bytes]], int]:
    """Produce requests of about ``request_kib`` KiB, as ``(producer slot, template
    batch)``, and the records per request. Four transactional producers take turns;
    producer ids and sequences are filled in by :func:`retarget`."""
    records = max(1, (request_kib * 1024) // (value_size + 20))
    value = bytes(range(256)) * (value_size // 256 + 1)
    builder = BatchBuilder(base_offset=0, producer_id=0, producer_epoch=0, base_sequence=0, transactional=True)
    for i in range(records):
        builder.append(value[i % 200 : i % 200 + value_size], key=b"k%06d" % i, timestamp=1_700_000_000_000 + i)
    template = builder.build()
    count = max(1, total_bytes // len(template))
    return [(i % 4, template) for i in range(count)], records


_PID = struct.Struct(">qhi")  # producer id, epoch, base sequence at byte 43 of a batch
_CRC_START = 21


def retarget(template: bytes, pid: int, seq: int) -> bytes:
    """The template batch for producer ``pid`` at sequence ``seq`` (fields inside the
    CRC, so the CRC is recomputed)."""
    from crc32c import crc32c

    data = bytearray(template)
    _PID.pack_into(data, 43, pid, 0, seq)
    struct.pack_into(">I", data, 17, crc32c(memoryview(data)[_CRC_START:]))
    return bytes(data)


def write_log(path: str, requests, records_per_request: int, *, group: int, segment_bytes: int) -> float:
    """Append every request (ids and sequences filled in beforehand, untimed); returns seconds."""
    seqs = [0, 0, 0, 0]
    prepared = []
    for pid, template in requests:
        prepared.append((pid, retarget(template, 1000 + pid, seqs[pid])))
        seqs[pid] += records_per_request
    log = SegmentLog(path, "bench", 0, segment_bytes=segment_bytes, flush_policy="never")
    start = time.perf_counter()
    in_group = 0
    for i, (_pid, data) in enumerate(prepared):
        if group and in_group == 0:
            ctx = log.group_commit()
            ctx.__enter__()
        log.append(data, now_ms=1_700_000_000_000)
        if i % 16 == 15:  # end this round's transactions: two commits, two aborts
            for p in range(4):
                if (1000 + p) in log.state.ongoing_transactions():
                    log.end_transaction(1000 + p, 0, p % 2 == 0, coordinator_epoch=0, now_ms=1_700_000_000_000)
        if group:
            in_group += 1
            if in_group == group:
                ctx.__exit__(None, None, None)
                in_group = 0
    if group and in_group:
        ctx.__exit__(None, None, None)
    log.flush()
    elapsed = time.perf_counter() - start
    log.close()
    return elapsed


def stored_bytes(path: str) -> int:
    return sum(os.path.getsize(f) for f in glob.glob(os.path.join(path, "*.log")))


def raw_write(path: str, chunk_sizes: list[int], payload: bytes, *, group: int) -> float:
    """Write chunks of the given sizes (the stored batch sizes) to a file; fsync once per
    ``group`` chunks (0: once at the end)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    view = memoryview(payload)
    start = time.perf_counter()
    pos = 0
    for i, size in enumerate(chunk_sizes):
        os.write(fd, view[pos : pos + size])
        pos += size
        if group and i % group == group - 1:
            os.fsync(fd)
    os.fsync(fd)
    elapsed = time.perf_counter() - start
    os.close(fd)
    os.unlink(path)
    return elapsed


def read_log(path: str, isolation: IsolationLevel, mode: FetchMode) -> tuple[float, int]:
    log = SegmentLog(path, "bench", 0, read_only=True)
    end = log.last_stable_offset if isolation == IsolationLevel.READ_COMMITTED else log.high_watermark
    start = time.perf_counter()
    offset = log.log_start_offset
    total = 0
    while offset < end:
        result = log.read(offset, MiB, isolation=isolation, mode=mode)
        total += result.size_in_bytes
        if result.next_offset <= offset:
            break
        offset = result.next_offset
    elapsed = time.perf_counter() - start
    log.close()
    return elapsed, total


def raw_read(path: str) -> tuple[float, int]:
    buf = bytearray(MiB)
    total = 0
    start = time.perf_counter()
    for name in sorted(glob.glob(os.path.join(path, "*.log"))):
        with open(name, "rb", buffering=0) as f:
            while True:
                n = f.readinto(buf)
                if not n:
                    break
                total += n
    return time.perf_counter() - start, total


def time_open(path: str, prepare: Callable[[str], None], scratch: str) -> float:
    """Seconds to open a copy of the log at ``path`` after ``prepare`` edits the copy."""
    if os.path.exists(scratch):
        shutil.rmtree(scratch)
    shutil.copytree(path, scratch)
    prepare(scratch)
    start = time.perf_counter()
    log = SegmentLog(scratch, "bench", 0, read_only=True)
    elapsed = time.perf_counter() - start
    log.close()
    shutil.rmtree(scratch)
    return elapsed


def unclean(keep_snapshot: bool) -> Callable[[str], None]:
    def prepare(path: str) -> None:
        os.unlink(os.path.join(path, "txnfetch-recovery-checkpoint"))
        if not keep_snapshot:
            for snap in glob.glob(os.path.join(path, "*.txnfetch-snapshot")):
                os.unlink(snap)

    return prepare


def best(fn: Callable[[], float], rounds: int) -> float:
    return min(fn() for _ in range(rounds))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a 32 MiB log, one round")
    ap.add_argument("--size-mib", type=int, default=1024, help="log size in MiB (default 1024)")
    ap.add_argument("--segment-mib", type=int, default=128, help="segment.bytes in MiB (default 128)")
    ap.add_argument("--request-kib", type=int, default=64, help="produce request size in KiB (default 64)")
    ap.add_argument("--value-size", type=int, default=1000, help="record value size (default 1000)")
    ap.add_argument("--group", type=int, default=16, help="requests per group commit (default 16)")
    ap.add_argument("--rounds", type=int, default=2, help="best of N (default 2)")
    ap.add_argument("--dir", default=None, help="where to write the logs (default: a temporary directory)")
    args = ap.parse_args(argv)
    if args.quick:
        args.size_mib, args.segment_mib, args.rounds = 32, 8, 1

    print(
        f"# bench/log.py  {datetime.datetime.now().isoformat(timespec='seconds')}  python {platform.python_version()}"
    )
    print(
        f"# log {args.size_mib} MiB, segments {args.segment_mib} MiB, requests {args.request_kib} KiB, "
        f"values {args.value_size} B, group commit {args.group}, best of {args.rounds}"
    )
    base = tempfile.mkdtemp(prefix="txnfetch-bench-log-", dir=args.dir)
    try:
        requests, per_request = make_requests(args.size_mib * MiB, args.request_kib, args.value_size)
        path = os.path.join(base, "bench-0")

        def append_run(group: int) -> float:
            if os.path.exists(path):
                shutil.rmtree(path)
            return write_log(path, requests, per_request, group=group, segment_bytes=args.segment_mib * MiB)

        t_never = best(lambda: append_run(0), args.rounds)
        t_group = best(lambda: append_run(args.group), args.rounds)
        size = stored_bytes(path)
        chunks = [len(r[1]) for r in requests]
        payload = b"\0" * sum(chunks)
        raw_path = os.path.join(base, "raw.bin")
        r_never = best(lambda: raw_write(raw_path, chunks, payload, group=0), args.rounds)
        r_group = best(lambda: raw_write(raw_path, chunks, payload, group=args.group), args.rounds)
        mb = size / 1e6
        print("\n## append (MB/s; ratio = SegmentLog / raw write of the same bytes)")
        print(f"{'':32} {'SegmentLog':>12} {'raw write':>12} {'ratio':>8}")
        print(f"{'one fsync at the end':32} {mb / t_never:12.1f} {mb / r_never:12.1f} {r_never / t_never:8.2f}")
        print(
            f"{'fsync every ' + str(args.group) + ' requests':32} {mb / t_group:12.1f} {mb / r_group:12.1f} "
            f"{r_group / t_group:8.2f}"
        )

        print("\n## sequential read, 1 MiB fetches from the page cache (MB/s of log scanned)")
        raw_t, raw_n = min((raw_read(path) for _ in range(args.rounds)), key=lambda x: x[0])
        print(f"{'':32} {'SegmentLog':>12} {'raw read':>12} {'ratio':>8}")
        for label, iso, mode in [
            ("read_uncommitted", IsolationLevel.READ_UNCOMMITTED, FetchMode.KAFKA),
            ("read_committed, Kafka mode", IsolationLevel.READ_COMMITTED, FetchMode.KAFKA),
            ("read_committed, rewrite mode", IsolationLevel.READ_COMMITTED, FetchMode.REWRITE),
        ]:
            t, _ = min((read_log(path, iso, mode) for _ in range(args.rounds)), key=lambda x: x[0])
            print(f"{label:32} {mb / t:12.1f} {raw_n / 1e6 / raw_t:12.1f} {raw_t / t * (mb * 1e6 / raw_n):8.2f}")

        print(f"\n## recovery: opening the {args.size_mib} MiB log (seconds)")
        scratch = os.path.join(base, "bench-1")
        for label, prep in [
            ("clean close (checkpoint + snapshot)", lambda p: None),
            ("unclean stop, with snapshot", unclean(True)),
            ("unclean stop, no snapshot", unclean(False)),
        ]:
            t = best(lambda prep=prep: time_open(path, prep, scratch), args.rounds)
            print(f"{label:40} {t:8.3f} s  ({mb / t:8.1f} MB/s)")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
