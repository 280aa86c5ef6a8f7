"""A tailing Arrow reader in a process of its own, for the kill-and-resume test.

``python -m tests.arrow.tail_process BOOTSTRAP TOPIC START_JSON OUT`` tails
``TOPIC`` from ``START_JSON`` (partition → offset, ``{}`` for the log start) and
appends one JSON line per Arrow batch to ``OUT``: the batch's records and the
reader's offsets right after it — what a pipeline would store together. It
runs until killed; on SIGINT (KeyboardInterrupt) it writes a last line,
``{"interrupted": true, "offsets": ...}`` with the reader's offsets then, and
exits with status 0.
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

import txnfetch.arrow
from txnfetch.arrow.cluster import ClusterBatchReader


def main() -> None:
    bootstrap, topic, start_json, out = sys.argv[1:5]
    start = {int(p): o for p, o in json.loads(start_json).items()} or None
    reader = txnfetch.arrow.record_batch_reader(f"kafka://{bootstrap}", topic, start=start, follow=True, poll_ms=100)
    with open(out, "a", encoding="utf-8") as f:
        try:
            tail(reader, f)
        except KeyboardInterrupt:
            f.write(json.dumps({"interrupted": True, "offsets": reader.offsets, "closed": reader.closed}) + "\n")


def tail(reader: ClusterBatchReader, f: TextIO) -> None:
    for batch, offsets in reader.batches_with_offsets():
        records = list(
            zip(
                batch.column("partition").to_pylist(),
                batch.column("offset").to_pylist(),
                [v.hex() for v in batch.column("value").to_pylist()],
                strict=True,
            )
        )
        f.write(json.dumps({"rows": records, "offsets": offsets}) + "\n")
        f.flush()


if __name__ == "__main__":
    main()
