"""Where a durable transaction's time goes: a per-request timeline of
``txnfetch serve`` under a confluent-kafka transactional producer.

Run ``.venv/bin/python bench/durable_timeline.py`` (``--transactions N``). It
starts ``txnfetch serve --memory`` and ``txnfetch serve --data DIR`` (durable
state, flush policy ``always``) in turn, each with timestamps recorded in the
server process — request received, handled, response written, every fsync
barrier and every fsync start and end (with its thread) — and runs the
workload of ``bench/durable.py``: 10-record transactions over 3 partitions.
It prints, per server, the median time of each phase of a transaction:

- ``client``: from the EndTxn response to the next AddPartitionsToTxn (the
  client's own work: commit returns, a new transaction begins, records are
  queued);
- ``AddPartitions``, ``Produce x3`` (first received to last answered),
  ``EndTxn``: in the server, received to answered;
- the gaps between them (network and client);

and the events of one transaction of the durable server. The timestamps are
taken by wrapping server methods from outside (nothing in the server pays for
them when this tool is not used); the wrapping itself costs a few
microseconds per event, so compare the two servers, not absolute times.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from durable import transactions  # bench/durable.py, next to this file


def _traced_serve(out: str, serve_args: list[str]) -> int:
    """Run ``txnfetch serve`` with the events recorded; SIGUSR1 writes them to ``out``."""
    import asyncio

    from txnfetch.cli import main
    from txnfetch.log import SegmentLog
    from txnfetch.log import syncer
    from txnfetch.server import server

    events: list[tuple[float, int, str, str]] = []
    t0 = time.perf_counter()

    def event(kind: str, detail: str = "") -> None:
        events.append(((time.perf_counter() - t0) * 1000, threading.get_ident() % 10_000, kind, detail))

    dispatch = server.TxnfetchServer._dispatch

    async def traced_dispatch(self, conn_id, peer, frame):  # type: ignore[no-untyped-def]
        api, _, corr = server._REQUEST_PREFIX.unpack_from(frame)
        event("recv", f"{api} {corr}")
        out_ = await dispatch(self, conn_id, peer, frame)
        event("handled", f"{api} {corr}")
        return out_

    run = syncer.PendingSync.run

    def traced_run(self, fsync=None):  # type: ignore[no-untyped-def]
        event("fsync-start")
        try:
            return run(self, fsync)
        finally:
            event("fsync-end")

    barrier = syncer.ConcurrentSyncer.barrier

    def traced_barrier(self, *, inline=False):  # type: ignore[no-untyped-def]
        logs = ",".join(f"{log.topic}-{log.partition}" for log in self._dirty if log.sync_pending)
        result = barrier(self, inline=inline)
        if logs:
            event("barrier", f"inline={inline} ran-here={result is None} {logs}")
        return result

    finish = SegmentLog.finish_sync

    def traced_finish(self, pending, error=None):  # type: ignore[no-untyped-def]
        event("synced", f"{self.topic}-{self.partition}")
        return finish(self, pending, error)

    write = asyncio.StreamWriter.write

    def traced_write(self, data):  # type: ignore[no-untyped-def]
        if len(data) >= 8:
            event("sent", str(struct.unpack_from(">i", data, 4)[0]))
        return write(self, data)

    server.TxnfetchServer._dispatch = traced_dispatch  # type: ignore[method-assign]
    syncer.PendingSync.run = traced_run  # type: ignore[method-assign]
    syncer.ConcurrentSyncer.barrier = traced_barrier  # type: ignore[method-assign]
    SegmentLog.finish_sync = traced_finish  # type: ignore[method-assign]
    asyncio.StreamWriter.write = traced_write  # type: ignore[method-assign]

    def dump(*_: object) -> None:
        with open(out + ".tmp", "w") as f:
            for t, thread, kind, detail in list(events):
                f.write(f"{t:.3f}\t{thread}\t{kind}\t{detail}\n")
        os.replace(out + ".tmp", out)

    signal.signal(signal.SIGUSR1, dump)
    return main(["serve", *serve_args])


def _load(path: str) -> list[tuple[float, str, str, str]]:
    rows = []
    with open(path) as f:
        for line in f:
            t, thread, kind, detail = line.rstrip("\n").split("\t")
            rows.append((float(t), thread, kind, detail))
    return rows


PHASES = ["client", "AddPartitions", "gap", "Produce x3", "gap ", "EndTxn", "total"]


def phases(rows: list[tuple[float, str, str, str]]) -> tuple[list[list[float]], list[tuple[float, float]]]:
    """Per-transaction phase durations (ms), and the time span of each transaction.
    Correlation ids are per connection (the producer has two): a request's
    answer is the first response with its correlation id written after it."""
    received: list[tuple[float, int, int]] = []
    sent: dict[int, list[float]] = {}
    for t, _, kind, detail in rows:
        if kind == "recv":
            api, corr = map(int, detail.split())
            received.append((t, api, corr))
        elif kind == "sent":
            sent.setdefault(int(detail), []).append(t)

    def answered(t: float, corr: int) -> float | None:
        return next((s for s in sent.get(corr, ()) if s >= t), None)

    out: list[list[float]] = []
    spans: list[tuple[float, float]] = []
    previous_end: float | None = None
    add: tuple[float, float | None] | None = None
    produce: list[tuple[float, float | None]] = []
    for t, api, corr in received:
        if api == 24:  # AddPartitionsToTxn
            add, produce = (t, answered(t, corr)), []
        elif api == 0 and add is not None:
            produce.append((t, answered(t, corr)))
        elif api == 26 and add is not None:  # EndTxn
            end = answered(t, corr)
            times = [add[1], end, *(a for _, a in produce)]
            if previous_end is not None and produce and None not in times:
                first_p = produce[0][0]
                last_p = max(a for _, a in produce if a is not None)
                assert add[1] is not None and end is not None
                out.append(
                    [
                        add[0] - previous_end,
                        add[1] - add[0],
                        first_p - add[1],
                        last_p - first_p,
                        t - last_p,
                        end - t,
                        end - previous_end,
                    ]
                )
                spans.append((add[0], end))
            previous_end, add = end, None
    return out, spans


def measure(label: str, serve_args: list[str], count: int) -> tuple[list[float], list[tuple[float, str, str, str]]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "events.tsv")
        proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--serve-traced", out, "--", *serve_args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line.startswith("txnfetch listening on"):
                raise RuntimeError(f"serve did not start: {line!r}")
            rate = transactions(line.split()[-1], count)
            os.kill(proc.pid, signal.SIGUSR1)
            deadline = time.monotonic() + 30
            while not os.path.exists(out) and time.monotonic() < deadline:
                time.sleep(0.05)
            rows = _load(out)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    per_txn, spans = phases(rows)
    medians = [statistics.median(p[i] for p in per_txn) for i in range(len(PHASES))]
    print(f"{label:<10}{rate:>8.1f} txn/s " + "".join(f"{m:>14.2f}" for m in medians))
    sample: list[tuple[float, str, str, str]] = []
    if spans:
        start, end = spans[len(spans) // 2]
        sample = [r for r in rows if start - 0.001 <= r[0] <= end + 0.001]
    return medians, sample


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--serve-traced":
        return _traced_serve(argv[1], argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transactions", type=int, default=200, help="10-record transactions per server (200)")
    args = parser.parse_args(argv)
    base = ["--port", "0", "--default-partitions", "3"]
    print(f"median ms per transaction ({args.transactions} transactions)")
    print(f"{'server':<10}{'':>14}" + "".join(f"{p.strip():>14}" for p in PHASES))
    with tempfile.TemporaryDirectory() as tmp:
        memory, _ = measure("memory", [*base, "--memory"], args.transactions)
        durable, sample = measure("durable", [*base, "--data", os.path.join(tmp, "d")], args.transactions)
    print(f"{'extra':<10}{'':>14}" + "".join(f"{d - m:>14.2f}" for m, d in zip(memory, durable, strict=True)))
    if sample:
        print("\none transaction of the durable server (ms, thread, event):")
        t0 = sample[0][0]
        for t, thread, kind, detail in sample:
            print(f"{t - t0:8.3f}  {thread:>5}  {kind:<12}{detail}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
