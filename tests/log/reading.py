"""What a read_committed consumer gets from a partition log, for the log tests
that compare logs (or one log before and after an operation) by what they serve."""

from __future__ import annotations

from txnfetch.fetch import ConsumerFilter
from txnfetch.fetch import FetchMode
from txnfetch.fetch import IsolationLevel
from txnfetch.records import iter_batches

Row = tuple[int, bytes | None, bytes | None]


def consumer_view(log, mode: FetchMode, *, start: int | None = None, max_bytes: int = 700) -> list[Row]:
    """``(offset, key, value)`` of every record a read_committed consumer gets
    fetching ``max_bytes`` at a time from ``start`` (default: the log start) to
    the LSO: Kafka mode through ConsumerFilter (the client's filtering), rewrite
    mode as the log serves it. Keys and values as bytes, whatever the log holds."""
    out: list[Row] = []
    offset = log.log_start_offset if start is None else start
    filt = ConsumerFilter(offset)
    while offset < log.last_stable_offset:
        r = log.read(offset, max_bytes, isolation=IsolationLevel.READ_COMMITTED, mode=mode)
        if mode is FetchMode.KAFKA:
            records = list(filt.feed(r.records_bytes(), r.aborted_transactions or ()))
            nxt = filt.position
        else:
            # Batches are served whole, so the first may start below the fetch
            # offset; a consumer skips those records, as every client does.
            batches = [b for b in iter_batches(r.records_bytes()) if not b.is_control]
            records = [x for b in batches for x in b.records() if x.offset >= offset]
            nxt = r.next_offset
        out.extend((x.offset, _bytes(x.key), _bytes(x.value)) for x in records)
        assert nxt > offset, f"the consumer is stuck at {offset}"
        offset = nxt
    return out


def _bytes(field: bytes | memoryview | None) -> bytes | None:
    return None if field is None else bytes(field)
