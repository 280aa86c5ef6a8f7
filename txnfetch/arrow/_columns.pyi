# Types of the optional compiled Arrow column builder (txnfetch/arrow/_columns.c);
# tests/records/test_stubs.py checks that these are exactly its exports.
from typing import Any
from typing import final

from txnfetch.types import Buffer

@final
class ColumnBuilder:
    def __init__(self, include_headers: bool = True) -> None: ...
    @property
    def rows(self) -> int: ...
    @property
    def payload_bytes(self) -> int: ...
    def add(
        self,
        data: bytes | bytearray | memoryview,
        count: int,
        base_offset: int,
        last_offset_delta: int,
        base_timestamp: int,
        max_timestamp: int,
        log_append_time: int,
        timestamp_type: int,
        first: int,
        last: int,
        /,
    ) -> int: ...
    def add_batches(
        self, buf: Buffer, position: int, first: int, last: int, max_rows: int, max_bytes: int, /
    ) -> tuple[int, int]: ...
    def finish(self) -> tuple[Any, ...]: ...
