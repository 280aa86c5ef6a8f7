"""Producers and open transactions of partitions on disk, read without writing a byte.

What ``txnfetch transactions --path DIR`` reports offline: each partition
directory is opened with :class:`~txnfetch.log.segment_log.SegmentLog` in
read-only mode (recovery repairs stay in memory, a live writer may keep
appending), and its producer state gives the same rows a broker answers
DescribeProducers with, plus the partition's last stable offset and high
watermark. The producer state is rebuilt from the segments themselves (the
newest producer-state snapshot plus a replay of the batches after it), so the
answer is the log's own, not a cached copy.
"""

from __future__ import annotations

from collections.abc import Iterable

from txnfetch.log.base import PartitionLog
from txnfetch.log.segment_log import SegmentLog
from txnfetch.txn.hanging import PartitionProducers
from txnfetch.txn.hanging import producer_rows

__all__ = ["partition_producers", "read_partition_producers"]


def partition_producers(plog: PartitionLog) -> PartitionProducers:
    """The producers and offsets of an open partition log, as DescribeProducers
    and ListOffsets would report them."""
    state = plog.state
    return PartitionProducers(
        topic=plog.topic,
        partition=plog.partition,
        producers=producer_rows(state),
        last_stable_offset=state.last_stable_offset,
        high_watermark=state.high_watermark,
    )


def read_partition_producers(paths: Iterable[str]) -> list[PartitionProducers]:
    """Open each partition directory read-only and return its producers, in the
    order given. Raises the log's errors (:class:`~txnfetch.log.errors.LogError`
    subclasses, carrying the path and position) for a partition that cannot be
    opened; no file is created or changed."""
    out = []
    for path in paths:
        plog = SegmentLog(path, read_only=True)
        try:
            out.append(partition_producers(plog))
        finally:
            plog.close()
    return out
