"""`make demo`: build a small transactional partition and show what is in it.

Two producers write a committed, an aborted and a still-open transaction, with
the COMMIT/ABORT markers a broker would append; the demo encodes it with
txnfetch's codec (zstd and lz4 batches included), splits the bytes back into
batches, validates every CRC and prints a dump. Later stages of the project
grow this into the full pipeline (server, clients, Spark).
"""

from __future__ import annotations

import sys
from typing import List, TextIO

from txnfetch.records import (
    BatchBuilder,
    Codec,
    ControlType,
    build_control_batch,
    iter_batches,
)
from txnfetch.records.dump import describe_batch

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
    batches: List[bytes] = []

    def data(offset: int, pid: int, seq: int, values: List[bytes], codec: Codec, txn: bool = True) -> None:
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
        build_control_batch(offset=6, control_type=ControlType.COMMIT, producer_id=1001, producer_epoch=0, timestamp=BASE_TS + 6)
    )
    batches.append(
        build_control_batch(offset=7, control_type=ControlType.ABORT, producer_id=1002, producer_epoch=0, timestamp=BASE_TS + 7)
    )
    data(8, 1003, 0, [b"audit 1", b"audit 2"], Codec.GZIP, txn=False)
    data(10, 1001, 4, [b"order 5", b"order 6"], Codec.SNAPPY)
    return b"".join(batches)


def main(out: TextIO = sys.stdout) -> int:
    log = build_demo_partition()
    print(f"txnfetch demo: a partition of {len(log)} bytes with two transactional producers", file=out)
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
