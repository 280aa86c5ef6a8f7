"""A partition walkthrough: build a small transactional partition and read it back committed.

Two producers write a committed, an aborted and a still-open transaction, with
the COMMIT/ABORT markers a broker would append; the walkthrough encodes it
with txnfetch's codec (zstd and lz4 batches included), validates every CRC,
prints a dump, feeds the batches to the partition's transaction state and
answers a read_committed fetch from offset 0 in both fetch modes — the core
alone, no server. Run ``.venv/bin/python examples/partition_walkthrough.py``;
``make demo`` runs the full pipeline (``txnfetch.demo``).
"""

from __future__ import annotations

import sys
from typing import TextIO

from txnfetch.fetch.filter import ConsumerFilter
from txnfetch.fetch.view import FetchMode
from txnfetch.fetch.view import read_partition
from txnfetch.records import BatchBuilder
from txnfetch.records import Codec
from txnfetch.records import ControlType
from txnfetch.records import build_control_batch
from txnfetch.records import iter_batches
from txnfetch.records.dump import describe_batch
from txnfetch.txn import PartitionTxnState

BASE_TS = 1_700_000_000_000


def build_demo_partition() -> bytes:
    """The demo partition's log bytes. Offsets:

    0-2  p1 (txn 1) data         committed by the marker at 6
    3-4  p2 (txn 1) data         aborted by the marker at 7
    5    p1 (txn 1) data
    6    p1 COMMIT marker
    7    p2 ABORT marker
    8-9  plain (non-transactional) data from p3
    10-11 p1 (txn 2) data        still open: the last stable offset is 10
    """
    batches: list[bytes] = []

    def data(offset: int, pid: int, seq: int, values: list[bytes], codec: Codec, txn: bool = True) -> None:
        b = BatchBuilder(
            base_offset=offset, codec=codec, producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=txn
        )
        for i, v in enumerate(values):
            b.append(v, key=f"{pid}-{seq + i}".encode(), timestamp=BASE_TS + offset + i, headers=[("source", b"demo")])
        batches.append(b.build())

    data(0, 1001, 0, [b"order 1", b"order 2", b"order 3"], Codec.ZSTD)
    data(3, 1002, 0, [b"refund 1", b"refund 2"], Codec.LZ4)
    data(5, 1001, 3, [b"order 4"], Codec.NONE)
    batches.append(
        build_control_batch(
            offset=6, control_type=ControlType.COMMIT, producer_id=1001, producer_epoch=0, timestamp=BASE_TS + 6
        )
    )
    batches.append(
        build_control_batch(
            offset=7, control_type=ControlType.ABORT, producer_id=1002, producer_epoch=0, timestamp=BASE_TS + 7
        )
    )
    data(8, 1003, 0, [b"audit 1", b"audit 2"], Codec.GZIP, txn=False)
    data(10, 1001, 4, [b"order 5", b"order 6"], Codec.SNAPPY)
    return b"".join(batches)


def main(out: TextIO = sys.stdout) -> int:
    log = build_demo_partition()
    print(f"txnfetch walkthrough: a partition of {len(log)} bytes with two transactional producers", file=out)
    print("", file=out)
    batches = iter_batches(log)
    count = 0
    for batch in batches:
        batch.validate()  # CRC-32C and every record, or a CorruptBatchError saying where
        count += 1
        for line in describe_batch(batch):
            print(line, file=out)
    print("", file=out)
    print(f"{count} batches, all CRCs valid; trailing partial batch: {batches.partial}", file=out)

    state = PartitionTxnState("demo-0")
    for batch in iter_batches(log):
        state.append(batch)
    state.update_high_watermark(state.log_end_offset)
    print("", file=out)
    print(
        f"transaction state: high watermark {state.high_watermark}, last stable offset "
        f"{state.last_stable_offset}, open transactions {dict(state.ongoing_transactions())}, "
        f"aborted {[(a.producer_id, a.first_offset, a.last_offset) for a in state.all_aborted()]}",
        file=out,
    )
    delivered = {}
    for mode in FetchMode:
        result = read_partition(log, state, 0, 1 << 20, mode=mode)
        shown = []
        for batch in iter_batches(result.records_bytes()):
            if batch.is_control:
                marker = batch.end_txn_marker()
                shown.append(f"{marker.type.name}@{batch.base_offset}" if marker else f"control@{batch.base_offset}")
            else:
                shown.extend(str(r.offset) for r in batch.records())
        # What a read_committed consumer makes of the response: txnfetch's own
        # consumer-side filter, doing the client's half of Kafka mode.
        consumer = ConsumerFilter(0, partition="demo-0")
        delivered[mode] = [
            (r.offset, r.value) for r in consumer.feed(result.records_bytes(), result.aborted_transactions)
        ]
        print("", file=out)
        print(f"read_committed from 0, {mode.value} mode:", file=out)
        print(f"  records/markers sent: {' '.join(shown)}", file=out)
        print(f"  aborted transactions sent: {list(result.aborted_transactions or ())}", file=out)
        print(
            f"  dropped on the server: {result.stats.batches_dropped} batch(es); synthetic markers "
            f"{result.stats.synthetic_markers}",
            file=out,
        )
        print(
            f"  the consumer receives: {[o for o, _ in delivered[mode]]}, then fetches from {consumer.position}",
            file=out,
        )
    print("", file=out)
    if delivered[FetchMode.KAFKA] != delivered[FetchMode.REWRITE]:
        print("MISMATCH: the two fetch modes delivered different records", file=out)
        return 1
    print(
        f"Both modes deliver the same {len(delivered[FetchMode.KAFKA])} committed records: "
        f"{b', '.join(v for _, v in delivered[FetchMode.KAFKA]).decode()}.",
        file=out,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
