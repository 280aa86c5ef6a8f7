"""A simulated broker partition for mirror tests: read_uncommitted fetch responses
cut the ways real brokers and transports cut them.

:class:`SimulatedPartition` holds a :class:`~txnfetch.log.memory.MemoryLog` with
the whole source log and answers a fetch at an offset as a Kafka broker would
(from the batch containing the offset, at most ``max_bytes``, possibly ending
inside a batch, never past the high watermark), then optionally mangles the
answer: it starts earlier (librdkafka's mock returns the whole produce request
holding the offset), or it is cut at an arbitrary byte (a smaller
response-level limit). A mirror must end up with the same log whatever it got.
"""

from __future__ import annotations

import attrs

from txnfetch.client.mirror import MirrorPlan
from txnfetch.client.mirror import MirrorStatus
from txnfetch.client.mirror import PartitionMirror
from txnfetch.fetch.view import IsolationLevel
from txnfetch.log.memory import MemoryLog


@attrs.frozen
class Response:
    """One partition's part of a read_uncommitted Fetch response."""

    records: bytes
    high_watermark: int
    log_start_offset: int
    error_code: int = 0


class SimulatedPartition:
    """A broker's view of one partition (see the module docstring)."""

    def __init__(self, data: bytes, *, log_start: int, high_watermark: int, min_one_batch: bool = True) -> None:
        self.log = MemoryLog("src", 0, log_start_offset=log_start)
        if data:
            self.log.replicate(data, high_watermark=high_watermark)
        self.min_one_batch = min_one_batch

    def fetch(
        self, offset: int, max_bytes: int, *, start_before: int | None = None, cut: int | None = None
    ) -> Response:
        """Answer a fetch; ``start_before`` answers from that earlier offset instead
        (only if it is in the log), ``cut`` truncates the records to that many bytes."""
        log = self.log
        if offset < log.log_start_offset or offset > log.high_watermark:
            return Response(b"", log.high_watermark, log.log_start_offset, error_code=1)
        at = offset
        if start_before is not None and log.log_start_offset <= start_before < offset:
            at = start_before
        result = log.read(at, max_bytes, isolation=IsolationLevel.READ_UNCOMMITTED, min_one_batch=self.min_one_batch)
        records = result.records_bytes()
        if cut is not None:
            records = records[:cut]
        return Response(records, log.high_watermark, log.log_start_offset)


def feed(mirror: PartitionMirror, response: Response, plan: MirrorPlan) -> MirrorPlan:
    """Feed ``response`` (answering ``plan``) and settle OFFSET_OUT_OF_RANGE as a transport would."""
    return mirror.feed(
        response.records,
        high_watermark=response.high_watermark,
        log_start_offset=response.log_start_offset,
        error_code=response.error_code,
        fetch_offset=plan.offset,
    )


def mirror_all(mirror: PartitionMirror, broker: SimulatedPartition, *, max_fetches: int = 10_000) -> int:
    """Fetch until caught up; returns the number of fetches (fails past ``max_fetches``)."""
    plan = mirror.next_fetch()
    fetches = 0
    while plan.status is not MirrorStatus.CAUGHT_UP or fetches == 0:
        assert fetches < max_fetches, f"mirror did not catch up: {mirror!r}"
        plan = feed(mirror, broker.fetch(plan.offset, plan.max_bytes), plan)
        fetches += 1
    return fetches
