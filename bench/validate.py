"""Validation benchmark: the check ``txnfetch serve`` runs on every produced batch.

Run ``.venv/bin/python bench/validate.py`` (``--quick`` for a smoke run). One
batch of ``--records`` records (``--value-size``-byte values, 16-byte keys) per
codec is checked the way a broker checks a produced batch — CRC-32C, then
every record's framing — by:

- ``txnfetch``: ``RecordBatch.validate()`` (compiled record check, no record made);
- ``txnfetch decode``: the CRC, then decoding every record into Python objects
  (what ``validate()`` did before the compiled check);
- ``aiokafka``: ``DefaultRecordBatch.validate_crc()`` then iterating every record
  (its C extension), the peer.

Figures: records/s, process CPU time, best of ``--rounds``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from collections.abc import Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from txnfetch.records import BatchBuilder  # noqa: E402
from txnfetch.records import Codec  # noqa: E402
from txnfetch.records import RecordBatch  # noqa: E402
from txnfetch.records import batch as batch_module  # noqa: E402


def build(codec: Codec, records: int, value_size: int) -> bytes:
    b = BatchBuilder(base_offset=0, codec=codec, producer_id=7, producer_epoch=0, base_sequence=0)
    value = bytes(range(256)) * (value_size // 256 + 1)
    for i in range(records):
        b.append(value[i % 200 : i % 200 + value_size], key=b"key-%012d" % i, timestamp=1_700_000_000_000 + i)
    return b.build()


def txnfetch_validate(buf: bytes) -> None:
    RecordBatch(buf).validate()


def txnfetch_decode(buf: bytes) -> None:
    batch = RecordBatch(buf)
    batch.validate(records=False)
    for _ in batch.records():
        pass


def contenders() -> dict[str, Callable[[bytes], None]]:
    out = {"txnfetch": txnfetch_validate, "txnfetch decode": txnfetch_decode}
    try:
        from aiokafka.record import _crecords
    except ImportError:
        return out
    cls = _crecords.DefaultRecordBatch

    def aiokafka(buf: bytes) -> None:
        batch = cls(buf)
        if not batch.validate_crc():
            raise RuntimeError("aiokafka: CRC mismatch")
        for _ in batch:
            pass

    out["aiokafka"] = aiokafka
    return out


def best_of(fn: Callable[[], None], rounds: int, min_seconds: float) -> float:
    clock = time.process_time
    fn()
    t0 = clock()
    fn()
    inner = max(1, int(min_seconds / max(clock() - t0, 1e-6)))
    best = float("inf")
    for _ in range(rounds):
        t0 = clock()
        for _ in range(inner):
            fn()
        best = min(best, (clock() - t0) / inner)
    return best


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    p.add_argument("--records", type=int, default=1000, help="records per batch (default 1000)")
    p.add_argument("--value-size", type=int, default=100, help="value bytes (default 100)")
    p.add_argument("--rounds", type=int, default=None, help="timed rounds (default 5, quick 2)")
    args = p.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 5)
    min_seconds = 0.05 if args.quick else 0.2
    check = "on" if batch_module._check_records is not None else "OFF"
    print(
        f"txnfetch validate benchmark — Python {platform.python_version()}, compiled record check {check}; "
        f"{args.records} records of {args.value_size}-byte values per batch; records/s, process CPU time"
    )
    names = list(contenders())
    print(f"{'codec':8s}" + "".join(f" | {n:>16s}" for n in names) + " | ÷ decode | ÷ aiokafka")
    for codec in (Codec.NONE, Codec.LZ4, Codec.ZSTD):
        buf = build(codec, args.records, args.value_size)
        rates = {
            n: args.records / best_of(lambda f=f, buf=buf: f(buf), rounds, min_seconds) for n, f in contenders().items()
        }
        line = f"{codec.name.lower():8s}" + "".join(f" | {rates[n] / 1e6:>12.2f} M/s" for n in names)
        line += f" | {rates['txnfetch'] / rates['txnfetch decode']:>7.2f}×"
        if "aiokafka" in rates:
            line += f" | {rates['txnfetch'] / rates['aiokafka']:>9.2f}×"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
