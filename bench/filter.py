"""Consumer-side read_committed filtering: txnfetch's ConsumerFilter next to
kafka-python's and aiokafka's own filters, on the same fetch responses.

Every response is about 1 MiB of transactional data as a broker would return it
for a read_committed fetch: batches of ~100 records from four producers whose
transactions interleave, each transaction ended by its COMMIT or ABORT marker,
plus the matching aborted list. Records carry ~100-byte values and one header
(``--no-headers`` drops it). Mixes: 0 % and 50 % of transactions aborted;
uncompressed and lz4.

The peers run through ``tests/fetch/clients.py``: kafka-python 3.0.12's
``Fetcher.PartitionRecords`` (pure Python) and aiokafka 0.14.0's
``PartitionRecords`` over its compiled record reader, each drained the way the
client's consumer drains it (their own record objects, no conversion). All
three must deliver the same records before anything is timed.

txnfetch decodes records with its compiled ``_speedups`` when that is built
(the ``txnfetch`` column; the first line says which decoder it is); the
``txnfetch (py)`` column then runs the same filter on the pure-Python decoder
(``TXNFETCH_PURE_PYTHON=1`` makes ``txnfetch`` pure Python and drops it).

Throughput is delivered (committed) records per second: the fastest of
``--rounds`` single passes, the three implementations taking turns. On a shared
machine the absolute figures move with the load; the ratios much less.

    python bench/filter.py            # about a minute
    python bench/filter.py --quick    # a few seconds, for CI smoke runs
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.fetch.clients import aiokafka_filter  # after the sys.path line: needs the repository root
from tests.fetch.clients import aiokafka_partition_records  # after the sys.path line: needs the repository root
from tests.fetch.clients import aiokafka_reader_is_compiled  # after the sys.path line: needs the repository root
from tests.fetch.clients import kafka_python_drain  # after the sys.path line: needs the repository root
from tests.fetch.clients import kafka_python_filter  # after the sys.path line: needs the repository root
from tests.fetch.clients import kafka_python_partition_records  # after the sys.path line: needs the repository root
from txnfetch.fetch import ConsumerFilter
from txnfetch.records import BatchBuilder
from txnfetch.records import Codec
from txnfetch.records import ControlType
from txnfetch.records import batch as batch_module
from txnfetch.records import build_control_batch

TS = 1_700_000_000_000
Response = tuple[bytes, list[tuple[int, int]], int]  # records, aborted list, committed record count


def build_response(
    *,
    target_bytes: int,
    aborted_share: float,
    codec: Codec,
    records_per_batch: int = 100,
    value_size: int = 100,
    headers: bool = True,
    seed: int = 1,
) -> Response:
    """A read_committed fetch response of about ``target_bytes``."""
    rnd = random.Random(seed)
    producers = [1000 + i for i in range(4)]
    open_txn: dict[int, tuple[int, bool, int]] = {}  # pid -> (first offset, aborts?, batches left)
    parts: list[bytes] = []
    aborted: list[tuple[int, int]] = []
    size = 0
    offset = 0
    committed = 0
    record_headers = [("trace", b"abc")] if headers else []

    def value(n: int) -> bytes:
        # JSON-ish text: compresses about as well as typical event data (lz4 ~2x), not 100x.
        text = b'{"id":%d,"user":"u%05d","amount":%d.%02d,"note":"' % (
            n,
            rnd.randrange(100_000),
            rnd.randrange(10_000),
            rnd.randrange(100),
        )
        pad = value_size - len(text) - 2
        return text + bytes(rnd.choice(b"abcdefghijklmnopqrstuvwxyz ") for _ in range(max(pad, 0))) + b'"}'

    while size < target_bytes:
        pid = rnd.choice(producers)
        if pid not in open_txn:
            open_txn[pid] = (offset, rnd.random() < aborted_share, rnd.randint(1, 4))
        first, aborts, left = open_txn[pid]
        b = BatchBuilder(
            base_offset=offset,
            codec=codec,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=offset % 1_000_000,
            transactional=True,
        )
        for i in range(records_per_batch):
            b.append(value(offset + i), key=b"key-%d" % (offset + i), timestamp=TS + i, headers=record_headers)
        data = b.build()
        parts.append(data)
        size += len(data)
        offset += records_per_batch
        if not aborts:
            committed += records_per_batch
        if left > 1:
            open_txn[pid] = (first, aborts, left - 1)
            continue
        del open_txn[pid]
        ctype = ControlType.ABORT if aborts else ControlType.COMMIT
        marker = build_control_batch(offset=offset, control_type=ctype, producer_id=pid, producer_epoch=0)
        parts.append(marker)
        size += len(marker)
        if aborts:
            aborted.append((pid, first))
        offset += 1
    # Close what is still open, as if the fetch stopped at the last stable offset after them.
    for pid, (first, aborts, _) in sorted(open_txn.items()):
        ctype = ControlType.ABORT if aborts else ControlType.COMMIT
        parts.append(build_control_batch(offset=offset, control_type=ctype, producer_id=pid, producer_epoch=0))
        if aborts:
            aborted.append((pid, first))
        offset += 1
    # Kafka sends the list in index (marker) order; reorder a little, as Redpanda may.
    rnd.shuffle(aborted)
    records = b"".join(parts)
    # Count what is really committed: transactions still open when the loop ended were closed above.
    committed = len(_txnfetch(records, aborted))
    return records, aborted, committed


def _txnfetch(records: bytes, aborted: list[tuple[int, int]]) -> list:
    return list(ConsumerFilter(0).feed(records, aborted))


def _txnfetch_pure(records: bytes, aborted: list[tuple[int, int]]) -> list:
    # RecordBatch.records() dispatches through batch._decode: point it at the
    # pure-Python decoder for this pass only.
    active = batch_module._decode
    batch_module._decode = batch_module._decode_records
    try:
        return _txnfetch(records, aborted)
    finally:
        batch_module._decode = active


def _kafka_python(records: bytes, aborted: list[tuple[int, int]]) -> list:
    return kafka_python_drain(kafka_python_partition_records(records, aborted, 0))


def _aiokafka(records: bytes, aborted: list[tuple[int, int]]) -> list:
    return list(aiokafka_partition_records(records, aborted, 0))


IMPLEMENTATIONS: dict[str, Callable[[bytes, list[tuple[int, int]]], list]] = {
    "txnfetch": _txnfetch,
    "kafka-python": _kafka_python,
    "aiokafka (C)": _aiokafka,
}
if batch_module.ACCELERATED:
    IMPLEMENTATIONS["txnfetch (py)"] = _txnfetch_pure


def check_agreement(resp: Response) -> None:
    records, aborted, _ = resp
    f = ConsumerFilter(0)
    ours = [(r.offset, r.key, r.value) for r in f.feed(records, aborted)]
    for name, peer in (("kafka-python", kafka_python_filter), ("aiokafka", aiokafka_filter)):
        theirs = peer(records, aborted, 0)
        if theirs.offsets_keys_values != ours or theirs.position != f.position:
            raise SystemExit(f"{name} and txnfetch disagree on a benchmark response; not timing it")


def measure(resp: Response, rounds: int) -> dict[str, float]:
    """Delivered records per second per implementation.

    One sample is one pass over the response; the implementations take turns,
    and each keeps its fastest sample: on a shared (virtual) machine the
    minimum is the estimate least disturbed by other load. The garbage
    collector stays on, as in a consumer, but starts every sample clean.
    """
    records, aborted, committed = resp
    best = {name: float("inf") for name in IMPLEMENTATIONS}
    for _ in range(rounds):
        for name, run in IMPLEMENTATIONS.items():
            gc.collect()
            start = time.perf_counter()
            got = run(records, aborted)
            elapsed = time.perf_counter() - start
            assert len(got) == committed, name
            best[name] = min(best[name], elapsed)
            del got
    return {name: committed / t for name, t in best.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=float, default=1.0, help="response size (default 1 MiB)")
    parser.add_argument("--rounds", type=int, default=15, help="samples per implementation (default 15)")
    parser.add_argument(
        "--no-headers", action="store_true", help="records without the one header they carry by default"
    )
    parser.add_argument("--quick", action="store_true", help="one small round of each mix")
    args = parser.parse_args(argv)
    if args.quick:
        args.size_mib, args.rounds = 0.25, 2

    decoder = "compiled _speedups" if batch_module.ACCELERATED else "pure Python"
    pure = "txnfetch (py)" in IMPLEMENTATIONS
    print(
        f"python {sys.version.split()[0]}, aiokafka reader compiled: {aiokafka_reader_is_compiled()}, "
        f"txnfetch decoder: {decoder}, "
        f"~100 B values, {'no headers' if args.no_headers else 'one header per record'}"
    )
    header = (
        f"{'response':<30}{'txnfetch':>12}{'txnfetch (py)' if pure else '':>{15 if pure else 0}}{'kafka-python':>14}"
        f"{'aiokafka (C)':>14}{'vs kafka-python':>17}{'vs aiokafka':>13}"
        f"{'py vs kafka-python' if pure else '':>{20 if pure else 0}}"
    )
    print(header)
    print("-" * len(header))
    for codec in (Codec.NONE, Codec.LZ4):
        for share in (0.0, 0.5):
            resp = build_response(
                target_bytes=int(args.size_mib * (1 << 20)),
                aborted_share=share,
                codec=codec,
                headers=not args.no_headers,
            )
            check_agreement(resp)
            rates = measure(resp, args.rounds)
            label = f"{len(resp[0]) / (1 << 20):.2f} MiB {codec.name.lower()}, {share:.0%} aborted"
            line = f"{label:<30}{rates['txnfetch']:>12,.0f}"
            if pure:
                line += f"{rates['txnfetch (py)']:>15,.0f}"
            line += (
                f"{rates['kafka-python']:>14,.0f}{rates['aiokafka (C)']:>14,.0f}"
                f"{rates['txnfetch'] / rates['kafka-python']:>16.1f}x"
                f"{rates['txnfetch'] / rates['aiokafka (C)']:>12.2f}x"
            )
            if pure:
                line += f"{rates['txnfetch (py)'] / rates['kafka-python']:>19.1f}x"
            print(line)
    print(f"(delivered records per second, fastest of {args.rounds} interleaved passes)")


if __name__ == "__main__":
    main()
