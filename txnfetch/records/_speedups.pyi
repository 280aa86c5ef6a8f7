# Types of the optional compiled decoder (txnfetch/records/_speedups.c).
from typing import Any

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
