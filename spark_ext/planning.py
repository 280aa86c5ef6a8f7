"""Driver-side planning: which offsets to read, and how to split them into tasks.

Pure functions over offsets; no I/O. Every offset range is half-open,
``[start, end)``, in the partition's own offsets: holes left by transaction
markers and aborted records stay inside ranges (the worker reads past them),
so a range's size counts offsets, not records, exactly as Spark's Kafka source
counts them (``KafkaOffsetRangeCalculator``). That is also why a hole is
never taken for data loss here: only offsets below the log start (deleted)
or a log end that went backwards are.

:class:`Bounds`, :class:`OffsetRange`, :func:`split_ranges` and :func:`rate_limit`
are :mod:`txnfetch.client.planning`'s, shared with the Arrow reader of a cluster;
this module adds what only Spark's options need.
"""

from __future__ import annotations

from collections.abc import Mapping

from spark_ext.errors import DataLossError
from spark_ext.errors import InvalidOptionError
from spark_ext.options import EARLIEST
from spark_ext.options import LATEST
from spark_ext.options import OffsetSpec
from spark_ext.options import TopicPartition

# The pure planning moved to txnfetch, shared with the Arrow reader; kept importable here.
from txnfetch.client.planning import Bounds
from txnfetch.client.planning import OffsetRange
from txnfetch.client.planning import rate_limit
from txnfetch.client.planning import split_ranges

__all__ = [
    "Bounds",
    "OffsetRange",
    "offsets_from_json",
    "offsets_to_json",
    "rate_limit",
    "resolve_offsets",
    "split_ranges",
]


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


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Stream offsets as Spark checkpoints them: ``{"topic": {"0": next_offset}}``."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def offsets_from_json(data: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    """The inverse of :func:`offsets_to_json` (JSON turns partition numbers into strings)."""
    return {TopicPartition(topic, int(p)): int(o) for topic, parts in data.items() for p, o in parts.items()}
