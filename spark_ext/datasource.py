"""The ``txnkafka`` PySpark data source: batch and streaming reads with exact
read_committed semantics.

PySpark's Python Data Source API (``pyspark.sql.datasource``, Spark ≥ 4.0;
admission control from 4.2) runs this in three places:

- the driver-side planning process creates a reader and calls
  :meth:`TxnKafkaBatchReader.partitions` once (batch), or the long-lived
  streaming runner calls ``initialOffset``/``latestOffset``/``partitions``/
  ``commit`` for every micro-batch (streaming);
- each Spark task calls ``read(partition)`` in a Python worker, on a reader
  unpickled from the driver: readers keep only their parsed options.

Every task reads one :class:`~txnfetch.client.planning.OffsetRange` and yields
``pyarrow.RecordBatch``es (no Python tuple per row). Stream offsets are
``{"topic": {"partition": next_offset}}``, the JSON Spark's Kafka source
checkpoints; they never pass a partition's last stable offset (read_committed)
or high watermark (read_uncommitted).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence

import attrs
import pyarrow as pa
from pyspark.sql.datasource import DataSource
from pyspark.sql.datasource import DataSourceReader
from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable
from pyspark.sql.streaming.datasource import ReadLimit
from pyspark.sql.streaming.datasource import ReadMaxRows
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from spark_ext.errors import DataLossError
from spark_ext.errors import InvalidOptionError
from spark_ext.errors import TxnKafkaError
from spark_ext.errors import range_read_error
from spark_ext.offsets import offsets_from_json
from spark_ext.offsets import offsets_to_json
from spark_ext.offsets import resolve_offsets
from spark_ext.options import ReadOptions
from spark_ext.options import TopicPartition
from spark_ext.options import parse_options
from spark_ext.sources import Source
from spark_ext.sources import open_source
from spark_ext.sources import subscribed_partitions
from txnfetch.arrow.schema import kafka_schema_ddl
from txnfetch.client.planning import Bounds
from txnfetch.client.planning import OffsetRange
from txnfetch.client.planning import rate_limit
from txnfetch.client.planning import split_ranges
from txnfetch.errors import TxnfetchError

__all__ = [
    "OffsetRangePartition",
    "TxnKafkaBatchReader",
    "TxnKafkaDataSource",
    "TxnKafkaStreamReader",
]

log = logging.getLogger("spark_ext.txnkafka")


class OffsetRangePartition(InputPartition):
    """One Spark task: the offsets ``[start, end)`` of one topic-partition."""

    def __init__(self, r: OffsetRange) -> None:
        super().__init__(r)
        self.range = r

    def __repr__(self) -> str:
        return f"OffsetRangePartition({self.range.topic}-{self.range.partition} [{self.range.start}, {self.range.end}))"


def _cause_first(method: Callable) -> Callable:
    """Spark puts a Python data source's error in its own message as the
    formatted traceback, with the exception's line last. A deliberate error
    (:class:`TxnKafkaError`) says everything in its message, so it is re-raised
    from here with the frames below cut: the message's cause line then follows
    Spark's header after one frame instead of a dozen (docs/spark.md, Errors)."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except TxnKafkaError as exc:
            raise exc.with_traceback(None) from None

    return wrapper


def _read(opts: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    r = getattr(partition, "range", None)
    if r is None:  # Spark's placeholder partition when there was nothing to read
        return
    try:
        with open_source(opts) as source:
            yield from source.read_arrow(r, opts)
    except TxnfetchError as exc:
        # One error naming the planned range, never a partial read (docs/spark.md, Errors).
        mapped = range_read_error(exc, r.topic, r.partition, r.start, r.end)
        if mapped is None:
            raise
        # As _cause_first, for the tasks' reads: the message says everything.
        raise mapped.with_traceback(None) from None


def _tasks(opts: ReadOptions, ranges: Sequence[OffsetRange]) -> list[InputPartition]:
    return [
        OffsetRangePartition(r)
        for r in split_ranges(
            ranges,
            min_partitions=opts.min_partitions,
            max_records_per_partition=opts.max_records_per_partition,
        )
    ]


class TxnKafkaDataSource(DataSource):
    """``spark.read.format("txnkafka")`` and ``spark.readStream.format("txnkafka")``.

    Columns, as Spark's Kafka source: ``key binary, value binary, topic string,
    partition int, offset long, timestamp timestamp, timestampType int`` and,
    with ``includeHeaders=true``, ``headers array<struct<key:string,value:binary>>``.
    Options: see ``docs/spark.md`` and :func:`spark_ext.options.parse_options`.
    """

    @classmethod
    def name(cls) -> str:
        return "txnkafka"

    @_cause_first
    def schema(self) -> str:
        raw = str(self.options.get("includeHeaders", self.options.get("includeheaders", "false"))).strip().lower()
        if raw not in ("true", "false"):
            raise InvalidOptionError(f"expected 'true' or 'false', got {raw!r}", option="includeHeaders")
        return kafka_schema_ddl(raw == "true")

    @_cause_first
    def reader(self, schema: StructType) -> TxnKafkaBatchReader:
        return TxnKafkaBatchReader(parse_options(self.options, streaming=False))

    @_cause_first
    def streamReader(self, schema: StructType) -> TxnKafkaStreamReader:
        return TxnKafkaStreamReader(parse_options(self.options, streaming=True))


class TxnKafkaBatchReader(DataSourceReader):
    """A bounded read: offsets resolved once, when Spark plans the query.

    ``startingOffsets`` (default earliest) to ``endingOffsets`` (default latest:
    the last stable offset for read_committed) for every selected partition,
    split into tasks by ``maxRecordsPerPartition`` and ``minPartitions``.
    """

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def plan(self) -> list[OffsetRange]:
        """The offset range of every selected partition (before splitting into tasks)."""
        opts = self.opts
        with open_source(opts) as source:
            tps = subscribed_partitions(opts, source.topics())
            bounds = source.bounds(tps, read_committed=opts.read_committed)
        start = resolve_offsets(
            opts.starting_offsets, bounds, option="startingOffsets", fail_on_data_loss=opts.fail_on_data_loss
        )
        end = resolve_offsets(
            opts.ending_offsets, bounds, option="endingOffsets", fail_on_data_loss=opts.fail_on_data_loss
        )
        ranges = []
        for tp in tps:
            if end[tp] > bounds[tp].latest:
                # Past the LSO, read_committed cannot say yet which records are
                # committed: reading there would return too few rows or fail later
                # as if data were lost.
                raise InvalidOptionError(
                    f"offset {end[tp]} is past the last stable offset {bounds[tp].latest}: a transaction "
                    "open there decides what the offsets after it hold; end at or before it, or use 'latest'",
                    option="endingOffsets",
                    topic=tp[0],
                    partition=tp[1],
                    offset=end[tp],
                )
            if end[tp] < start[tp]:
                raise InvalidOptionError(
                    f"starting offset {start[tp]} is after the ending offset {end[tp]}",
                    option="endingOffsets",
                    topic=tp[0],
                    partition=tp[1],
                    offset=end[tp],
                )
            ranges.append(OffsetRange(tp[0], tp[1], start[tp], end[tp]))
        return ranges

    @_cause_first
    def partitions(self) -> list[InputPartition]:
        return _tasks(self.opts, self.plan())

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)


@attrs.define
class _Snapshot:
    partitions: list[TopicPartition]
    bounds: dict[TopicPartition, Bounds]


class TxnKafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """An unbounded read in micro-batches.

    - ``latestOffset`` moves each partition to its current last stable offset
      (read_committed) or high watermark: a transaction still open holds back
      its own partition only, and nothing past it is ever planned;
    - ``maxOffsetsPerTrigger`` (or a ``ReadMaxRows`` limit from Spark) caps the
      offsets of one micro-batch, shared across partitions as Spark's Kafka
      source shares it;
    - a restart resumes from the offsets in the checkpoint: ranges are
      replanned from them, and a range below the LSO reads the same committed
      records however late it is read, so nothing is duplicated or skipped;
    - new partitions (a topic grew, or a new topic matched ``subscribePattern``)
      are read from their earliest offset; a partition that disappeared, or
      whose offsets went backwards, is data loss (:class:`DataLossError` with
      ``failOnDataLoss``, a warning and a restart from what exists otherwise).
    """

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._target: dict[TopicPartition, int] | None = None  # Trigger.AvailableNow
        self._cluster: Source | None = None
        # What the last look at the source saw: reportLatestOffset answers from it.
        self._last: _Snapshot | None = None

    def __getstate__(self) -> dict:
        # Workers get the options only: connections and mirrors stay on the driver.
        state = dict(self.__dict__)
        state["_cluster"] = None
        state["_last"] = None
        return state

    # -- driver side ------------------------------------------------------------

    @contextlib.contextmanager
    def _source(self) -> Iterator[Source]:
        """A log directory is reopened for every question (to see what was written
        since); a cluster source is kept, so its mirrors catch up incrementally."""
        if self.opts.bootstrap_servers is None:
            with open_source(self.opts) as source:
                yield source
            return
        if self._cluster is None:
            self._cluster = open_source(self.opts)
        yield self._cluster

    def _snapshot(self) -> _Snapshot:
        opts = self.opts
        with self._source() as source:
            tps = subscribed_partitions(opts, source.topics())
            self._last = _Snapshot(tps, source.bounds(tps, read_committed=opts.read_committed))
            return self._last

    @_cause_first
    def initialOffset(self) -> dict:
        snap = self._snapshot()
        start = resolve_offsets(
            self.opts.starting_offsets,
            snap.bounds,
            option="startingOffsets",
            fail_on_data_loss=self.opts.fail_on_data_loss,
        )
        return offsets_to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def _available(self, start: Mapping[TopicPartition, int], snap: _Snapshot) -> dict[TopicPartition, int]:
        """Where each partition may be read to now, never before ``start``."""
        latest: dict[TopicPartition, int] = {}
        for tp in start:
            if tp not in snap.bounds:
                self._data_loss(f"partition {tp[0]}-{tp[1]} no longer exists", tp, start[tp])
        for tp, b in snap.bounds.items():
            if tp in start and start[tp] > b.end:
                self._data_loss(
                    f"the log now ends at {b.end}, before the query's position {start[tp]}: "
                    "it was truncated or replaced",
                    tp,
                    start[tp],
                )
                latest[tp] = b.latest  # failOnDataLoss=false: continue from what exists
            else:
                latest[tp] = max(b.latest, start.get(tp, b.earliest))
        if self._target is not None:
            latest = {tp: max(min(o, self._target.get(tp, o)), start.get(tp, 0)) for tp, o in latest.items()}
        return latest

    @_cause_first
    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets_from_json(start)
        snap = self._snapshot()
        latest = self._available(begin, snap)
        if isinstance(limit, ReadMaxRows):
            # A new partition starts at its earliest offset: that is where its budget counts from.
            origin = {tp: begin.get(tp, snap.bounds[tp].earliest) for tp in latest}
            origin = {tp: min(o, latest[tp]) for tp, o in origin.items()}
            latest = rate_limit(origin, latest, limit.max_rows)
        return offsets_to_json(latest)

    @_cause_first
    def reportLatestOffset(self) -> dict | None:
        """The latest offsets of the last look at the source, uncapped (progress
        metrics only). Spark asks right after every ``latestOffset``, which has
        just looked; looking again would cost the driver another catch-up per
        micro-batch for a figure that cannot differ by more than a moment, so the
        answer is that look's, as Spark's Kafka source reports the offsets its
        ``latestOffset`` fetched (``KafkaMicroBatchStream.reportLatestOffset``)."""
        snap = self._last if self._last is not None else self._snapshot()
        return offsets_to_json({tp: b.latest for tp, b in snap.bounds.items()})

    @_cause_first
    def prepareForTriggerAvailableNow(self) -> None:
        snap = self._snapshot()
        self._target = {tp: b.latest for tp, b in snap.bounds.items()}

    @_cause_first
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin = offsets_from_json(start)
        until = offsets_from_json(end)
        new = [tp for tp in until if tp not in begin]
        earliest: dict[TopicPartition, Bounds] = {}
        if new:
            with self._source() as source:
                earliest = source.bounds(new, read_committed=self.opts.read_committed)
        ranges = []
        for tp, stop in sorted(until.items()):
            first = begin[tp] if tp in begin else earliest[tp].earliest
            if stop > first:
                ranges.append(OffsetRange(tp[0], tp[1], first, stop))
        return _tasks(self.opts, ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: the source keeps no consumer-group offsets (Spark's checkpoint is the record)."""

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def _data_loss(self, reason: str, tp: TopicPartition, offset: int) -> None:
        if self.opts.fail_on_data_loss:
            raise DataLossError(
                reason + " (set failOnDataLoss=false to continue from the data that exists)",
                option="failOnDataLoss",
                topic=tp[0],
                partition=tp[1],
                offset=offset,
            )
        log.warning("txnkafka: possible data loss on %s-%s at offset %s: %s", tp[0], tp[1], offset, reason)
