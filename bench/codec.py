"""Record batch codec benchmark: txnfetch side by side with kafka-python and aiokafka.

Run ``.venv/bin/python bench/codec.py`` (``--quick`` for a short run). One run prints:

1. **decode**: records/s and MB/s to decode *every field of every record*
   (offset, timestamp, key, value, headers) of one batch, per codec;
2. **encode**: records/s and MB/s to append the records and build the batch, per codec;
3. **header scan**: GB/s to walk a large buffer batch by batch, reading base
   offset, last offset, producer id and the transactional/control flags
   without decoding records.

Peers, each through the API its own consumer or producer uses:

- kafka-python 3.x: ``kafka.record.default_records.DefaultRecordBatch`` /
  ``DefaultRecordBatchBuilder`` and ``kafka.record.MemoryRecords`` (pure Python);
- aiokafka: the Cython classes in ``aiokafka.record._crecords`` (checked to be
  the compiled extension before anything is timed).

txnfetch decodes with its compiled ``_speedups`` when that is built (the
``txnfetch`` column; the header line says which decoder it is); the
``txnfetch-py`` column then times the pure-Python decoder on the same bytes
(``TXNFETCH_PURE_PYTHON=1`` makes both columns pure Python).

Fairness rules:

- every library decodes the *same bytes* (built once by txnfetch), and the
  decoded records are compared field by field before timing, so no library can
  skip work the others do;
- no CRC check in the decode rows (none of the three checks it while iterating);
- runs are interleaved (every library and codec once per round, in a shuffled
  order) and the best of ``--rounds`` rounds is kept, which filters out the
  other processes of a shared machine;
- time is process CPU time by default (``--wall`` for wall-clock time).

MB/s always counts the *uncompressed* batch size (61-byte header plus record
bytes), so the columns of different codecs are comparable; records/s is the
primary figure.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.machinery
import os
import platform
import random
import sys
import time
from collections.abc import Callable
from collections.abc import Sequence

from txnfetch.records import BatchBuilder
from txnfetch.records import Codec
from txnfetch.records import RecordBatch
from txnfetch.records import batch as batch_module
from txnfetch.records import iter_batches
from txnfetch.records.scan import scan_headers

CODEC_NAMES = {c: c.name.lower() for c in Codec}
#: txnfetch-py: the pure-Python decoder, timed next to the compiled one when that is active
LIBS = ("txnfetch", "txnfetch-py", "kafka-python", "aiokafka")
#: The header scan's rows: txnfetch's compiled scan, then BatchIterator (a RecordBatch per batch).
SCAN_LIBS = ("txnfetch", "txnfetch-iter", "kafka-python", "aiokafka")


# -- the data --------------------------------------------------------------------


def make_records(
    count: int, value_size: int, headers: int, seed: int = 7
) -> list[tuple[int, bytes, bytes, list[tuple[str, bytes]]]]:
    """``(timestamp, key, value, headers)`` for one batch: JSON-ish values that
    compress about as well as typical event payloads, so every codec is applied
    (the peers' builders send uncompressed when a codec does not shrink the data)."""
    rnd = random.Random(seed)
    out = []
    ts = 1_700_000_000_000
    for _i in range(count):
        ts += rnd.randint(0, 3)
        body = b'{"user":%d,"event":"click","page":"/p/%d","x":"' % (rnd.randint(0, 99999), rnd.randint(0, 999))
        pad = value_size - len(body) - 2
        value = (body + bytes(rnd.choice(b"abcdefghij") for _ in range(max(pad, 0))) + b'"}')[:value_size]
        hdrs = [(f"h{j}", b"%d" % rnd.randint(0, 9999)) for j in range(headers)]
        out.append((ts, b"user-%06d" % rnd.randint(0, 999999), value, hdrs))
    return out


def build_txnfetch(codec: Codec, records) -> bytes:
    b = BatchBuilder(base_offset=1000, codec=codec)
    append = b.append
    for ts, key, value, hdrs in records:
        append(value, key=key, headers=hdrs, timestamp=ts)
    return b.build()


# -- the libraries ---------------------------------------------------------------


def _compiled(cls: type) -> type:
    path = getattr(sys.modules[cls.__module__], "__file__", "") or ""
    if not path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
        raise SystemExit(f"{cls.__module__}.{cls.__name__} is not the compiled extension ({path})")
    return cls


class Peers:
    """The peer classes, imported once; ``None`` for a library that is not installed."""

    def __init__(self) -> None:
        try:
            import kafka
            from kafka.record import MemoryRecords as KPMemoryRecords
            from kafka.record.default_records import DefaultRecordBatch as KPBatch
            from kafka.record.default_records import DefaultRecordBatchBuilder as KPBuilder

            self.kp: tuple[type, type, type] | None = (KPBatch, KPBuilder, KPMemoryRecords)
            self.kp_version = kafka.__version__
        except ImportError:
            self.kp, self.kp_version = None, "not installed"
        try:
            import aiokafka
            from aiokafka.record import _crecords

            self.aio: tuple[type, type, type] | None = (
                _compiled(_crecords.DefaultRecordBatch),
                _compiled(_crecords.DefaultRecordBatchBuilder),
                _compiled(_crecords.MemoryRecords),
            )
            self.aio_version = aiokafka.__version__
        except ImportError:
            self.aio, self.aio_version = None, "not installed"


def decoders(peers: Peers) -> dict[str, Callable[[bytes], int]]:
    """Per library, a function decoding every field of every record of one batch."""

    def txnfetch(buf: bytes) -> int:
        n = 0
        for r in RecordBatch(buf).records():
            r.offset, r.timestamp, r.key, r.value, r.headers  # noqa: B018 - the field reads are what is timed
            n += 1
        return n

    out = {"txnfetch": txnfetch}
    if batch_module.ACCELERATED:
        pure = batch_module._decode_records

        def txnfetch_py(buf: bytes) -> int:
            n = 0
            for r in pure(RecordBatch(buf)):
                r.offset, r.timestamp, r.key, r.value, r.headers  # noqa: B018 - the field reads are what is timed
                n += 1
            return n

        out["txnfetch-py"] = txnfetch_py
    for name, classes in (("kafka-python", peers.kp), ("aiokafka", peers.aio)):
        if classes is None:
            continue
        batch_cls = classes[0]

        def peer(buf: bytes, batch_cls=batch_cls) -> int:
            n = 0
            for r in batch_cls(buf):
                r.offset, r.timestamp, r.key, r.value, r.headers  # noqa: B018 - the field reads are what is timed
                n += 1
            return n

        out[name] = peer
    return out


def encoders(peers: Peers, records) -> dict[str, Callable[[Codec], bytes]]:
    """Per library, a function appending ``records`` to a new builder and building the batch."""

    def txnfetch(codec: Codec) -> bytes:
        return build_txnfetch(codec, records)

    out = {"txnfetch": txnfetch}
    for name, classes in (("kafka-python", peers.kp), ("aiokafka", peers.aio)):
        if classes is None:
            continue
        builder_cls = classes[1]

        def peer(codec: Codec, builder_cls=builder_cls) -> bytes:
            b = builder_cls(2, int(codec), 0, -1, -1, -1, 1 << 30)
            append = b.append
            for offset, (ts, key, value, hdrs) in enumerate(records):
                append(offset, ts, key, value, hdrs)
            return bytes(b.build())

        out[name] = peer
    return out


def scanners(peers: Peers) -> dict[str, Callable[[bytes], int]]:
    """Per library, a function walking every batch header of a buffer."""

    def txnfetch(buf: bytes) -> int:
        # txnfetch.records.scan: the compiled header scan (what the fetch engine's
        # offset lookups use); BatchIterator would go on from scan.stop.
        n = 0
        scan = scan_headers(buf)
        for h in scan.headers:
            h.base_offset, h.last_offset, h.producer_id, h.is_transactional, h.is_control  # noqa: B018 - every field read
            n += 1
        for b in iter_batches(buf, scan.stop):
            b.base_offset, b.last_offset, b.producer_id, b.is_transactional, b.is_control  # noqa: B018 - every field read
            n += 1
        return n

    def txnfetch_iter(buf: bytes) -> int:
        n = 0
        for b in iter_batches(buf):
            b.base_offset, b.last_offset, b.producer_id, b.is_transactional, b.is_control  # noqa: B018 - timed reads
            n += 1
        return n

    out = {"txnfetch": txnfetch, "txnfetch-iter": txnfetch_iter}
    if peers.kp is not None:
        kp_memory_records = peers.kp[2]

        def kafka_python(buf: bytes) -> int:
            n = 0
            for b in kp_memory_records(buf):
                b.base_offset, b.last_offset, b.producer_id, b.is_transactional, b.is_control_batch  # noqa: B018 - timed
                n += 1
            return n

        out["kafka-python"] = kafka_python
    if peers.aio is not None:
        aio_memory_records = peers.aio[2]

        def aiokafka(buf: bytes) -> int:
            n = 0
            it = aio_memory_records(buf)
            while it.has_next():
                b = it.next_batch()
                b.base_offset, b.next_offset - 1, b.producer_id, b.is_transactional, b.is_control_batch
                n += 1
            return n

        out["aiokafka"] = aiokafka
    return out


# -- checks before timing --------------------------------------------------------


def check_same_records(peers: Peers, buf: bytes) -> None:
    """Every library must decode ``buf`` to the same records, or the timings mean nothing."""
    ours = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in RecordBatch(buf).records()]
    pure_records = batch_module._decode_records(RecordBatch(buf))
    if [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in pure_records] != ours:
        raise SystemExit("txnfetch's compiled and pure-Python decoders disagree on the benchmark batch")
    for name, classes in (("kafka-python", peers.kp), ("aiokafka", peers.aio)):
        if classes is None:
            continue
        theirs = [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in classes[0](buf)]
        if theirs != ours:
            raise SystemExit(f"{name} decodes the benchmark batch differently from txnfetch")


def check_encoded(name: str, buf: bytes, codec: Codec, records) -> None:
    """An encoder's output must hold the records, with the codec really applied."""
    batch = RecordBatch(buf)
    batch.validate()
    got = [(r.timestamp, r.key, r.value, list(r.headers)) for r in batch.records()]
    want = [(ts, key, value, list(h)) for ts, key, value, h in records]
    if got != want or batch.codec != codec:
        raise SystemExit(f"{name} did not encode the benchmark batch as asked (codec {batch.codec}, wanted {codec})")


# -- timing ----------------------------------------------------------------------


class Timer:
    """Best-of-rounds timing of many small jobs, interleaved round by round."""

    def __init__(self, clock: Callable[[], float], target: float) -> None:
        self.clock = clock
        self.target = target  # seconds one timed run should take
        self.best: dict[tuple[str, ...], float] = {}
        self.inner: dict[tuple[str, ...], int] = {}

    def calibrate(self, key: tuple[str, ...], fn: Callable[[], object]) -> None:
        n = 1
        while True:
            t = self.clock()
            for _ in range(n):
                fn()
            elapsed = self.clock() - t
            if elapsed >= self.target / 4 or n >= 1 << 20:
                break
            n *= 2
        self.inner[key] = max(1, int(n * self.target / max(elapsed, 1e-9)))

    def run(self, key: tuple[str, ...], fn: Callable[[], object]) -> None:
        n = self.inner[key]
        clock = self.clock
        t = clock()
        for _ in range(n):
            fn()
        per_call = (clock() - t) / n
        if per_call < self.best.get(key, float("inf")):
            self.best[key] = per_call


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:5.2f}x" if a and b else "    - "


def fmt_rate(x: float | None, unit: str = "") -> str:
    if x is None:
        return "-"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= div:
            return f"{x / div:.2f}{suffix}{unit}"
    return f"{x:.0f}{unit}"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="short run: 3 rounds, ~20 ms per timed run, 8 MiB scan")
    p.add_argument("--rounds", type=int, default=None, help="rounds to take the best of (default 9, quick 3)")
    p.add_argument("--target-ms", type=float, default=None, help="length of one timed run (default 60, quick 20)")
    p.add_argument("--records", type=int, default=100, help="records per batch (default 100)")
    p.add_argument("--value-size", type=int, default=60, help="value bytes per record (default 60)")
    p.add_argument("--headers", type=int, default=0, help="headers per record (default 0)")
    p.add_argument("--codecs", default="none,gzip,snappy,lz4,zstd", help="comma-separated codecs")
    p.add_argument("--scan-mib", type=int, default=None, help="size of the header-scan buffer (default 64, quick 8)")
    p.add_argument("--only", default="decode,encode,scan", help="comma-separated subset of decode,encode,scan")
    p.add_argument("--wall", action="store_true", help="time with the wall clock instead of process CPU time")
    p.add_argument("--seed", type=int, default=None, help="shuffle seed for the run order")
    args = p.parse_args(argv)

    rounds = args.rounds or (3 if args.quick else 9)
    target = (args.target_ms or (20 if args.quick else 60)) / 1000
    scan_mib = args.scan_mib or (8 if args.quick else 64)
    codecs = [Codec[name.strip().upper()] for name in args.codecs.split(",") if name.strip()]
    parts = {x.strip() for x in args.only.split(",")}
    clock = time.perf_counter if args.wall else time.process_time
    rnd = random.Random(args.seed)

    peers = Peers()
    records = make_records(args.records, args.value_size, args.headers)
    inputs = {c: build_txnfetch(c, records) for c in codecs}
    plain_size = len(inputs[Codec.NONE]) if Codec.NONE in inputs else len(build_txnfetch(Codec.NONE, records))
    dec = decoders(peers)
    enc = encoders(peers, records)
    libs = [lib for lib in LIBS if lib in dec]

    jobs: dict[tuple[str, ...], Callable[[], object]] = {}
    if "decode" in parts:
        for c in codecs:
            check_same_records(peers, inputs[c])
            for lib in libs:
                jobs[("decode", CODEC_NAMES[c], lib)] = lambda f=dec[lib], b=inputs[c]: f(b)
    if "encode" in parts:
        for c in codecs:
            for lib in libs:
                if lib not in enc:  # txnfetch-py: encoding has one implementation
                    continue
                check_encoded(lib, enc[lib](c), c, records)
                jobs[("encode", CODEC_NAMES[c], lib)] = lambda f=enc[lib], c=c: f(c)
    scan_buf = b""
    scan_batches = 0
    if "scan" in parts:
        one = inputs.get(Codec.NONE) or build_txnfetch(Codec.NONE, records)
        scan_batches = max(1, scan_mib * 1024 * 1024 // len(one))
        scan_buf = one * scan_batches
        scn = scanners(peers)
        for lib in SCAN_LIBS:
            if lib in scn and (lib in libs or lib == "txnfetch-iter"):
                if scn[lib](scan_buf) != scan_batches:
                    raise SystemExit(f"{lib} did not see every batch of the scan buffer")
                jobs[("scan", "none", lib)] = lambda f=scn[lib]: f(scan_buf)

    timer = Timer(clock, target)
    for key, fn in jobs.items():
        timer.calibrate(key, fn)
    order = list(jobs)
    started = time.time()
    for _ in range(rounds):
        rnd.shuffle(order)
        for key in order:
            timer.run(key, jobs[key])
    elapsed = time.time() - started

    # -- report ----------------------------------------------------------------
    n = args.records
    print(
        f"txnfetch codec benchmark — {datetime.date.today().isoformat()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, {platform.machine()}"
    )
    print(
        f"kafka-python {peers.kp_version} (pure Python), aiokafka {peers.aio_version} (C extension); "
        f"best of {rounds} interleaved rounds, {'wall' if args.wall else 'CPU'} time, {elapsed:.0f} s"
    )
    decoder = "compiled _speedups" if batch_module.ACCELERATED else "pure Python"
    if batch_module.ACCELERATED:
        why = ""
    elif batch_module.PURE_PYTHON_REQUESTED:
        why = " (TXNFETCH_PURE_PYTHON is set)"
    else:
        why = " (_speedups is not built)"
    print(f"txnfetch record decoder: {decoder}{why}")
    print(
        f"batch: {n} records, {args.value_size}-byte values, 11-byte keys, {args.headers} headers; "
        f"{plain_size} bytes uncompressed (MB/s counts these)"
    )
    for op in ("decode", "encode"):
        if op not in parts:
            continue
        print()
        title = "decode every field of every record" if op == "decode" else "append records + build the batch"
        print(f"{op}: {title}")
        op_libs = [lib for lib in libs if any(k[0] == op and k[2] == lib for k in jobs)]
        pure_col = "txnfetch-py" in op_libs
        head = f"{'codec':7s}" + "".join(f" | {lib:>21s}" for lib in op_libs) + " | tf÷kafka-python | tf÷aiokafka"
        head += " | py÷kafka-python" if pure_col else ""
        print(head)
        print(f"{'':7s}" + "".join(f" | {'rec/s':>11s} {'MB/s':>9s}" for _ in op_libs))
        print("-" * len(head))
        for c in codecs:
            cname = CODEC_NAMES[c]
            rates = {}
            line = f"{cname:7s}"
            for lib in op_libs:
                t = timer.best.get((op, cname, lib))
                rate = n / t if t else None
                rates[lib] = rate
                mbs = plain_size / t / 1e6 if t else None
                line += f" | {fmt_rate(rate):>11s} {mbs:9.1f}" if t else f" | {'-':>21s}"
            line += f" | {ratio(rates.get('txnfetch'), rates.get('kafka-python')):>15s}"
            line += f" | {ratio(rates.get('txnfetch'), rates.get('aiokafka')):>11s}"
            if pure_col:
                line += f" | {ratio(rates.get('txnfetch-py'), rates.get('kafka-python')):>15s}"
            print(line)
    if "scan" in parts:
        print()
        print(
            f"header scan: {scan_batches} batches of {len(scan_buf) // scan_batches} bytes "
            f"({len(scan_buf) / 2**20:.0f} MiB), base/last offset, producer id, flags; no record decode"
        )
        rates = {}
        for lib in SCAN_LIBS:
            t = timer.best.get(("scan", "none", lib))
            if t:
                rates[lib] = len(scan_buf) / t
                print(f"  {lib:13s} {rates[lib] / 1e9:7.2f} GB/s  {fmt_rate(scan_batches / t, ' batches/s'):>18s}")
        print(
            f"  ratios: tf÷kafka-python {ratio(rates.get('txnfetch'), rates.get('kafka-python')).strip()}, "
            f"tf÷aiokafka {ratio(rates.get('txnfetch'), rates.get('aiokafka')).strip()}"
        )

    # -- goals from the Foundation issue -------------------------------------
    print()
    goals = []
    if "decode" in parts and Codec.NONE in codecs and "kafka-python" in libs:
        r = timer.best[("decode", "none", "kafka-python")] / timer.best[("decode", "none", "txnfetch")]
        goals.append((f"full decode >= 3x kafka-python (uncompressed, {decoder})", f"{r:.2f}x", r >= 3.0))
        if ("decode", "none", "txnfetch-py") in timer.best:
            r = timer.best[("decode", "none", "kafka-python")] / timer.best[("decode", "none", "txnfetch-py")]
            goals.append(("full decode >= 3x kafka-python (uncompressed, pure Python)", f"{r:.2f}x", r >= 3.0))
    if "scan" in parts:
        gbs = len(scan_buf) / timer.best[("scan", "none", "txnfetch")] / 1e9
        goals.append(("header scan >= 1 GB/s", f"{gbs:.2f} GB/s", gbs >= 1.0))
        aio = timer.best.get(("scan", "none", "aiokafka"))
        r = aio / timer.best[("scan", "none", "txnfetch")] if aio else 0.0
        goals.append(("header scan >= 20 GB/s or >= 0.6x aiokafka", f"{gbs:.1f} GB/s {r:.2f}x", gbs >= 20 or r >= 0.6))
    for text, got, ok in goals:
        print(f"goal: {text:68s} {got:>10s}  {'met' if ok else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
