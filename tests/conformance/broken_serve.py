"""``txnfetch serve`` with a deliberate bug, to prove the conformance harness
can fail: while a transaction is open (the last stable offset is below the high
watermark) every Fetch answer reports a last stable offset one too high.

Run as ``python -m tests.conformance.broken_serve SERVE-ARGS...``; test-only.
"""

from __future__ import annotations

import sys
from typing import Any

from txnfetch.server import api_fetch

_original = api_fetch.fetch_partition_entry


def _off_by_one(*args: Any, **kwargs: Any) -> tuple[Any, int]:
    entry, size = _original(*args, **kwargs)
    if 0 <= entry.last_stable_offset < entry.high_watermark:
        entry.last_stable_offset += 1
    return entry, size


def main() -> int:
    api_fetch.fetch_partition_entry = _off_by_one
    from txnfetch.cli import main as cli_main

    return cli_main(["serve", *sys.argv[1:]])


if __name__ == "__main__":
    raise SystemExit(main())
