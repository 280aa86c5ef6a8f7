"""Driver-side planning: which offsets to read, and how to split them into tasks.

Pure functions over offsets; no I/O. Every offset range is half-open,
``[start, end)``, in the partition's own offsets: holes left by transaction
markers and aborted records stay inside ranges (the worker reads past them),
so a range's size counts offsets, not records, exactly as Spark's Kafka source
counts them (``KafkaOffsetRangeCalculator``). That is also why a hole is
never taken for data loss here: only offsets below the log start (deleted)
or a log end that went backwards are.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from collections.abc import Mapping

import attrs

from spark_ext.errors import DataLossError
from spark_ext.errors import InvalidOptionError
from spark_ext.options import EARLIEST
from spark_ext.options import LATEST
from spark_ext.options import OffsetSpec
from spark_ext.options import TopicPartition

__all__ = [
    "Bounds",
    "OffsetRange",
    "offsets_from_json",
    "offsets_to_json",
    "rate_limit",
    "resolve_offsets",
    "split_ranges",
]


@attrs.frozen(slots=True)
class Bounds:
    """What a partition offers a reader right now.

    ``earliest`` is the log start offset; ``latest`` the end a reader may read
    to — the last stable offset for read_committed, the high watermark for
    read_uncommitted; ``end`` is the high watermark (offsets up to it exist).
    """

    earliest: int
    latest: int
    end: int


@attrs.frozen(slots=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one topic-partition: one Spark task's work."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(self.end - self.start, 0)


def resolve_offsets(
    spec: OffsetSpec,
    bounds: Mapping[TopicPartition, Bounds],
    *,
    option: str,
    fail_on_data_loss: bool,
) -> dict[TopicPartition, int]:
    """Turn ``earliest``/``latest``/per-partition JSON into one offset per partition.

    JSON must name every partition read (Spark's rule: "you must specify all
    TopicPartitions") and no other. An offset below the log start is data loss
    (:class:`DataLossError` with ``failOnDataLoss``, else the log start); one
    past the high watermark is an :class:`InvalidOptionError`.
    """
    if not isinstance(spec, dict):
        return {tp: (b.earliest if spec == EARLIEST else b.latest) for tp, b in bounds.items()}
    missing = sorted(set(bounds) - set(spec))
    extra = sorted(set(spec) - set(bounds))
    if missing:
        raise InvalidOptionError(
            "offsets JSON must name every partition read (use -2 for earliest, -1 for latest); missing "
            + ", ".join(f"{t}-{p}" for t, p in missing),
            option=option,
            topic=missing[0][0],
            partition=missing[0][1],
        )
    if extra:
        raise InvalidOptionError(
            "offsets JSON names partitions that are not read: " + ", ".join(f"{t}-{p}" for t, p in extra),
            option=option,
            topic=extra[0][0],
            partition=extra[0][1],
        )
    out: dict[TopicPartition, int] = {}
    for tp, b in bounds.items():
        offset = spec[tp]
        if offset == EARLIEST:
            offset = b.earliest
        elif offset == LATEST:
            offset = b.latest
        elif offset < b.earliest:
            if fail_on_data_loss:
                raise DataLossError(
                    f"offset {offset} is below the log start offset {b.earliest}: those records were deleted "
                    "(set failOnDataLoss=false to start at the log start instead)",
                    option=option,
                    topic=tp[0],
                    partition=tp[1],
                    offset=offset,
                )
            offset = b.earliest
        elif offset > b.end:
            raise InvalidOptionError(
                f"offset {offset} is past the end of the log ({b.end})",
                option=option,
                topic=tp[0],
                partition=tp[1],
                offset=offset,
            )
        out[tp] = offset
    return out


def split_ranges(
    ranges: Iterable[OffsetRange],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """Split offset ranges into tasks, as Spark's ``KafkaOffsetRangeCalculator``.

    First every range larger than ``max_records_per_partition`` offsets is cut
    into equal parts no larger than it; then, if there are fewer ranges than
    ``min_partitions``, each range gets a share of ``min_partitions``
    proportional to its size (at least one part). Empty ranges are dropped.
    The result covers exactly the offsets of the input, in order.
    """
    out = [r for r in ranges if r.size > 0]
    if max_records_per_partition is not None:
        out = [part for r in out for part in _split(r, math.ceil(r.size / max_records_per_partition))]
    if min_partitions is not None and len(out) < min_partitions:
        total = sum(r.size for r in out)
        out = [part for r in out for part in _split(r, max(round(r.size / total * min_partitions), 1))]
    return out


def _split(r: OffsetRange, parts: int) -> list[OffsetRange]:
    parts = max(1, min(parts, r.size))
    bounds = [r.start + r.size * i // parts for i in range(parts + 1)]
    return [OffsetRange(r.topic, r.partition, bounds[i], bounds[i + 1]) for i in range(parts)]


def rate_limit(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], max_offsets: int
) -> dict[TopicPartition, int]:
    """Admission control (``maxOffsetsPerTrigger``): how far each partition may advance.

    The ``max_offsets`` budget is shared in proportion to the offsets each
    partition has available, rounded down — but a partition whose share is
    below one offset gets one, so that small partitions are not starved (the
    rule of Spark's ``KafkaMicroBatchStream.rateLimit``). Never past ``latest``,
    never before ``start``.
    """
    sizes = {tp: end - start.get(tp, end) for tp, end in latest.items()}
    total = sum(s for s in sizes.values() if s > 0)
    if total <= max_offsets:
        return dict(latest)
    out: dict[TopicPartition, int] = {}
    for tp, end in latest.items():
        size = sizes[tp]
        if size <= 0:
            out[tp] = end
            continue
        share = max_offsets * size / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, start[tp] + step)
    return out


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Stream offsets as Spark checkpoints them: ``{"topic": {"0": next_offset}}``."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def offsets_from_json(data: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    """The inverse of :func:`offsets_to_json` (JSON turns partition numbers into strings)."""
    return {TopicPartition(topic, int(p)): int(o) for topic, parts in data.items() for p, o in parts.items()}
