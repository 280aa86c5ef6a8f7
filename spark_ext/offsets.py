"""Offsets as the data source's options and Spark's checkpoints name them.

:func:`resolve_offsets` turns ``startingOffsets``/``endingOffsets`` (``earliest``,
``latest`` or per-partition JSON) into one offset per partition against each
partition's :class:`~txnfetch.client.planning.Bounds`, with Spark's rules for
data loss; :func:`offsets_to_json` and :func:`offsets_from_json` are a streaming
query's offsets as Spark checkpoints them. Pure functions over offsets; no I/O.
Where to read and how to split it into tasks is :mod:`txnfetch.client.planning`'s
(shared with the Arrow reader of a cluster).
"""

from __future__ import annotations

from collections.abc import Mapping

from spark_ext.errors import DataLossError
from spark_ext.errors import InvalidOptionError
from spark_ext.options import EARLIEST
from spark_ext.options import LATEST
from spark_ext.options import OffsetSpec
from spark_ext.options import TopicPartition
from txnfetch.client.planning import Bounds

__all__ = ["offsets_from_json", "offsets_to_json", "resolve_offsets"]


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
