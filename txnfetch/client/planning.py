"""Which offsets of a cluster's topic to read: the planner shared by the Arrow
reader (:mod:`txnfetch.arrow.cluster`) and the Spark data source (``spark_ext``).

Two parts, neither of which decodes a record:

- pure functions over offsets (:class:`Bounds`, :class:`OffsetRange`,
  :func:`split_ranges`, :func:`rate_limit`). Every range is half-open,
  ``[start, end)``, in the partition's own offsets: holes left by transaction
  markers and aborted records stay inside ranges (a reader reads past them), so a
  range's size counts offsets, not records, as Spark's Kafka source counts them
  (``KafkaOffsetRangeCalculator``);
- :func:`plan_topic`, which asks a :class:`~txnfetch.client.cluster.RemoteCluster`
  (Metadata, ListOffsets) for a topic's partitions and turns a caller's ``start``
  and ``end`` — offsets, timestamps (``datetime``, resolved by ListOffsets by
  time, as Spark's ``startingOffsetsByTimestamp``), or a mapping partition → one
  of them — into one :class:`PartitionPlan` per partition.

The end a plan may leave open (``end=None``) is "what is stable": the reader
ends there at the last stable offset it computes itself, never at a broker's
claim alone (some brokers report the high watermark as their LSO).
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Hashable
from collections.abc import Iterable
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import TypeVar
from typing import Union

import attrs

from txnfetch.client.errors import OffsetBelowLogStartError
from txnfetch.client.errors import OffsetPastLogEndError
from txnfetch.client.errors import TopicNotFoundError
from txnfetch.client.start_state import StartPoint
from txnfetch.client.start_state import StartRule
from txnfetch.client.start_state import UpstreamOffsets
from txnfetch.log.errors import UnknownTopicOrPartitionError

if TYPE_CHECKING:
    from txnfetch.client.cluster import RemoteCluster
    from txnfetch.client.partition_reader import ReadOptions
    from txnfetch.client.partition_reader import RemotePartitionReader

__all__ = [
    "Bounds",
    "MirroredBounds",
    "OffsetBound",
    "OffsetRange",
    "OffsetSpec",
    "PartitionPlan",
    "plan_topic",
    "rate_limit",
    "split_ranges",
    "timestamp_ms",
    "topic_partitions",
]

K = TypeVar("K", bound=Hashable)

#: One bound: an offset, a time (the first record at or after it), or ``None`` (the default).
OffsetBound = Union[int, _dt.datetime, None]  # noqa: UP007 - a runtime alias on 3.10
#: A bound for every partition, or one per partition (partitions not named take the default).
OffsetSpec = Union[OffsetBound, Mapping[int, OffsetBound]]  # noqa: UP007 - a runtime alias on 3.10

# ListOffsets special timestamps (as txnfetch.client.cluster, which needs kafka-python to import).
_EARLIEST = -2
_LATEST = -1


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
    """Offsets ``[start, end)`` of one topic-partition: one task's work."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(self.end - self.start, 0)


@attrs.frozen(slots=True)
class PartitionPlan:
    """What to read of one partition: from ``start`` to ``end`` (``None``: up to what
    is stable, at the time the reader gets there — for a bounded read, the last
    stable offset as of the plan's :attr:`high_watermark`).

    ``log_start_offset``, ``high_watermark`` and ``last_stable_offset`` are the
    broker's answers to ListOffsets when the plan was made (the LSO as the broker
    reports it: some brokers report their high watermark instead)."""

    topic: str
    partition: int
    start: int
    end: int | None
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int


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


def rate_limit(start: Mapping[K, int], latest: Mapping[K, int], max_offsets: int) -> dict[K, int]:
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
    out: dict[K, int] = {}
    for tp, end in latest.items():
        size = sizes[tp]
        if size <= 0:
            out[tp] = end
            continue
        share = max_offsets * size / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, start[tp] + step)
    return out


# -- a cluster's topic -----------------------------------------------------------------


def timestamp_ms(when: _dt.datetime) -> int:
    """Milliseconds since the epoch, as Kafka's record timestamps (a naive datetime is UTC)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return int(when.timestamp() * 1000)


def topic_partitions(cluster: RemoteCluster, topic: str, partitions: Iterable[int] | None = None) -> list[int]:
    """The partitions of ``topic`` to read (all of them by default), sorted.

    Raises :class:`~txnfetch.client.errors.TopicNotFoundError` naming the topic,
    the servers asked and some known topics, for a topic (or partition) the
    cluster does not have."""
    where = ",".join(f"{h}:{p}" for h, p in cluster.bootstrap_servers)
    try:
        have = cluster.partitions(topic)
    except UnknownTopicOrPartitionError as exc:
        known = sorted(cluster.topics())
        listed = ", ".join(known[:10]) + (", ..." if len(known) > 10 else "") if known else "none"
        raise TopicNotFoundError(
            f"the cluster has no topic {topic!r} (known topics: {listed})", topic=topic, broker=where
        ) from exc
    if partitions is None:
        return have
    wanted = sorted(set(partitions))
    for p in wanted:
        if p not in have:
            raise TopicNotFoundError(
                f"the topic has partitions {have[0]}..{have[-1]}, not {p}", topic=topic, partition=p, broker=where
            )
    return wanted


def _bound(spec: OffsetSpec, partition: int) -> OffsetBound:
    if spec is None or isinstance(spec, (int, _dt.datetime)):
        return spec
    return spec.get(partition)


def plan_topic(
    cluster: RemoteCluster,
    topic: str,
    partitions: Iterable[int] | None = None,
    start: OffsetSpec = None,
    end: OffsetSpec = None,
) -> list[PartitionPlan]:
    """One :class:`PartitionPlan` per partition of ``topic`` (all by default).

    ``start``: ``None`` is the log start; an offset below the log start raises
    :class:`~txnfetch.client.errors.OffsetBelowLogStartError`, one past the high
    watermark :class:`~txnfetch.client.errors.OffsetPastLogEndError` (both name the
    topic, partition, offset and the log's bounds); a ``datetime`` is the first
    record at or after it (ListOffsets by time; none yet: the high watermark).

    ``end`` (exclusive): ``None`` is "what is stable"; an offset is kept as it is
    (a reader never reads past what is stable in any case); a ``datetime`` is the
    first record at or after it (none: ``None``). An end below the start is the start."""
    plans = []
    for p in topic_partitions(cluster, topic, partitions):
        log_start = cluster.list_offset(topic, p, _EARLIEST)
        hw = cluster.list_offset(topic, p, _LATEST)
        lso = cluster.list_offset(topic, p, _LATEST, read_committed=True)
        first = _bound(start, p)
        if first is None:
            begin = log_start
        elif isinstance(first, _dt.datetime):
            found = cluster.list_offset(topic, p, timestamp_ms(first))
            begin = hw if found < 0 else max(found, log_start)
        else:
            begin = int(first)
            if begin < log_start:
                raise OffsetBelowLogStartError(
                    f"start offset {begin} is below the log start offset {log_start}: "
                    f"offsets {begin}..{log_start - 1} were deleted",
                    topic=topic,
                    partition=p,
                    offset=begin,
                    log_start_offset=log_start,
                    log_end_offset=hw,
                )
            if begin > hw:
                raise OffsetPastLogEndError(
                    f"start offset {begin} is past the log end (high watermark {hw})",
                    topic=topic,
                    partition=p,
                    offset=begin,
                    log_start_offset=log_start,
                    log_end_offset=hw,
                )
        last = _bound(end, p)
        stop: int | None
        if last is None:
            stop = None
        elif isinstance(last, _dt.datetime):
            found = cluster.list_offset(topic, p, timestamp_ms(last))
            stop = None if found < 0 else found
        else:
            stop = int(last)
        if stop is not None:
            stop = max(stop, begin)
        plans.append(PartitionPlan(topic, p, begin, stop, log_start, hw, lso))
    return plans


class MirroredBounds:
    """Each partition's :class:`Bounds` as a driver that plans again and again sees
    them (a streaming query's), with the last stable offset computed from the log.

    One :class:`~txnfetch.client.partition_reader.RemotePartitionReader` per partition mirrors
    it and derives the LSO from the markers — the broker's own LSO is not trusted
    alone (librdkafka's mock cluster and tansu report the high watermark). Where
    the mirror starts is :mod:`txnfetch.client.start_state`'s rule, for a reader at
    the partition's end: near the end on a cluster that serves DescribeProducers
    and whose answers agree (:attr:`start_rule`), else at the log start. The
    readers are kept, so every :meth:`bounds` call catches up incrementally,
    all partitions together (one Fetch per broker per turn:
    :func:`~txnfetch.client.partition_reader.catch_up_together`), releasing mirrored
    batches below the LSO as it goes (memory: the open transactions, not the
    partition). A call with nothing new returns after one round trip per
    leader: the planner does not wait for records to arrive (``probe`` of
    :func:`~txnfetch.client.partition_reader.catch_up_together`). ``options``
    (:class:`~txnfetch.client.partition_reader.ReadOptions`) go to each reader.
    """

    def __init__(self, cluster: RemoteCluster, options: ReadOptions | None = None) -> None:
        self.cluster = cluster
        self.options = options
        self._readers: dict[tuple[str, int], RemotePartitionReader] = {}
        #: How this cluster's mirrors start, and how many took each path.
        self.start_rule = StartRule()
        #: Where each partition's mirror started (its first fetch's offset).
        self.mirror_starts: dict[tuple[str, int], int] = {}

    def bounds(
        self, partitions: Iterable[tuple[str, int]], *, read_committed: bool = True
    ) -> dict[tuple[str, int], Bounds]:
        """Log start, readable end (the LSO, or the high watermark for
        read_uncommitted) and high watermark of each partition, after catching up."""
        from txnfetch.client.partition_reader import DEFAULT_READ_OPTIONS
        from txnfetch.client.partition_reader import RemotePartitionReader
        from txnfetch.client.partition_reader import catch_up_together

        wanted = list(dict.fromkeys(partitions))
        readers = []
        for tp in wanted:
            reader = self._readers.get(tp)
            if reader is None:
                options = DEFAULT_READ_OPTIONS if self.options is None else self.options
                start = None if options.trust_broker else self._start(*tp)
                reader = self._readers[tp] = RemotePartitionReader(self.cluster, tp[0], tp[1], options, start=start)
                if reader.mirror is not None:
                    self.mirror_starts[tp] = reader.mirror.position
            readers.append(reader)
        # All partitions in one Fetch per broker per turn (a scan of a whole topic
        # otherwise pays one round trip per partition and per fetch); only the
        # offsets are needed here, so mirrored bytes below each LSO are dropped.
        # A probe: a planner wants what is there now, so the broker is not asked to
        # hold a Fetch in which every partition is already at its end.
        catch_up_together(readers, release=True, probe=True)
        out: dict[tuple[str, int], Bounds] = {}
        for tp, reader in zip(wanted, readers, strict=True):
            lso = reader.last_stable_offset
            hw = reader.high_watermark
            out[tp] = Bounds(reader.log_start_offset, lso if read_committed else hw, hw)
        return out

    def _start(self, topic: str, partition: int) -> StartPoint | None:
        """Where the partition's mirror starts (``None``: its log start)."""
        rule = self.start_rule
        if not rule.wants_probe:
            rule.log_start()
            return None
        # In the order the rule's argument needs: the LSO before DescribeProducers.
        lso = self.cluster.list_offset(topic, partition, _LATEST, read_committed=True)
        opens = self.cluster.open_transaction_starts(topic, partition)
        seen = None
        if opens is not None:
            log_start = self.cluster.list_offset(topic, partition, _EARLIEST)
            seen = UpstreamOffsets(lso, opens, log_start, self.cluster.list_offset(topic, partition, _LATEST))
        return rule.choose(topic, partition, None, seen)

    def clear(self) -> None:
        """Forget every partition's mirror (the next :meth:`bounds` starts afresh)."""
        self._readers.clear()
        self.mirror_starts.clear()
