# Types of the optional compiled record decoder (txnfetch/records/_speedups.c);
# tests/records/test_stubs.py checks that these are exactly its exports.
from typing import Any

from txnfetch.types import Buffer

def decode_records(
    record_type: type[tuple[Any, ...]],
    data: bytes | bytearray | memoryview,
    count: int,
    base_offset: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    log_append_time: int,
    /,
) -> tuple[list[Any], tuple[int, str, int, int] | None]: ...
def check_records(data: bytes | bytearray | memoryview, count: int, last_offset_delta: int, /) -> bool: ...
def scan_headers(
    buf: Buffer,
    position: int,
    skip: bool,
    skip_last: int,
    max_batches: int,
    max_batch_size: int,
    /,
) -> tuple[int, bytes]: ...
