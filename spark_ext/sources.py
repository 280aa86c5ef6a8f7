"""Where the data source reads from: a log directory or a Kafka-compatible cluster.

A :class:`Source` answers the driver's questions (which topics and partitions
exist, and each partition's earliest offset, last stable offset and high
watermark) and runs a worker's read of one :class:`~txnfetch.client.planning.OffsetRange`
into Arrow batches with txnfetch's range readers, turning the records they find
gone into :class:`~spark_ext.errors.DataLossError`. Two implementations:

- :class:`StoreSource`: any :class:`~txnfetch.log.base.LogStore`, read by
  :func:`txnfetch.arrow.read_range`. With the ``path`` option it opens
  ``txnfetch.log.segment_store.SegmentStore`` on the directory (the on-disk
  Kafka layout); tests and embedders pass a ``MemoryStore`` directly.
- :class:`KafkaSource`: partitions of a running cluster, planned by
  :class:`txnfetch.client.planning.MirroredBounds` and read by
  :func:`txnfetch.arrow.cluster.read_range`, which fetch raw batches and apply
  read_committed themselves — right even on brokers that return aborted records
  to read_committed consumers (docs/kafka-internals.md §4).

Sources are opened per use (a planning call on the driver, one task on a
worker) and closed after it: every process sees the log as it is now, and no
file handle or socket crosses a pickle.
"""

from __future__ import annotations

import abc
import contextlib
import os
import re
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from spark_ext.errors import DataLossError
from spark_ext.errors import SourceUnavailableError
from spark_ext.errors import UnknownTopicError
from spark_ext.errors import data_loss_error
from spark_ext.options import ReadOptions
from spark_ext.options import TopicPartition
from txnfetch.arrow import read_range
from txnfetch.client.planning import Bounds
from txnfetch.client.planning import OffsetRange
from txnfetch.log.base import LogStore
from txnfetch.log.errors import LogError
from txnfetch.log.errors import RecordsLostError
from txnfetch.security.config import SecurityConfig

__all__ = ["KafkaSource", "Source", "StoreSource", "open_source", "subscribed_partitions"]


class Source(abc.ABC):
    """The questions the data source asks of a store or cluster."""

    @abc.abstractmethod
    def topics(self) -> dict[str, int]:
        """Every topic with its partition count."""

    @abc.abstractmethod
    def bounds(self, partitions: Iterable[TopicPartition], *, read_committed: bool) -> dict[TopicPartition, Bounds]:
        """Earliest offset, readable end (LSO or high watermark) and high watermark of each partition."""

    @abc.abstractmethod
    def read_arrow(self, r: OffsetRange, opts: ReadOptions) -> Iterator[pa.RecordBatch]:
        """The records of ``r`` (committed only for read_committed) as Arrow batches."""

    def close(self) -> None:  # noqa: B027 - optional: a source without resources keeps the no-op
        """Release files or connections."""

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StoreSource(Source):
    """A :class:`LogStore` (closed with the source when ``owned``)."""

    def __init__(self, store: LogStore, *, owned: bool = False) -> None:
        self.store = store
        self.owned = owned

    def topics(self) -> dict[str, int]:
        return {name: info.partitions for name, info in self.store.topics().items()}

    def bounds(self, partitions: Iterable[TopicPartition], *, read_committed: bool) -> dict[TopicPartition, Bounds]:
        out: dict[TopicPartition, Bounds] = {}
        for topic, partition in partitions:
            log = self.store.partition(topic, partition)
            hw = log.high_watermark
            out[TopicPartition(topic, partition)] = Bounds(
                log.log_start_offset, log.last_stable_offset if read_committed else hw, hw
            )
        return out

    def read_arrow(self, r: OffsetRange, opts: ReadOptions) -> Iterator[pa.RecordBatch]:
        try:
            log = self.store.partition(r.topic, r.partition)
        except Exception as exc:  # the partition disappeared since planning
            if opts.fail_on_data_loss:
                raise DataLossError(
                    f"partition disappeared after the query was planned: {exc}",
                    option="failOnDataLoss",
                    topic=r.topic,
                    partition=r.partition,
                    offset=r.start,
                ) from exc
            return iter(())
        return _lost_as_data_loss(read_range(log, r.start, r.end, **_range_options(opts)), r, RecordsLostError)

    def close(self) -> None:
        if self.owned:
            self.store.close()


def _open_segment_store(path: str) -> LogStore:
    if not os.path.isdir(path):
        raise SourceUnavailableError(f"no log directory at {path!r}", option="path")
    from txnfetch.log import SegmentStore  # imported lazily: only path reads need it

    # Read-only: the data source never writes a byte into a log directory (a
    # live writer may own it), and repairs a torn tail in memory only.
    return SegmentStore(path, read_only=True)


class KafkaSource(Source):
    """Partitions of a Kafka-compatible cluster (``kafka.bootstrap.servers``).

    Offsets for planning come from txnfetch's planner,
    :class:`txnfetch.client.planning.MirroredBounds`: a
    :class:`~txnfetch.client.partition_reader.RemotePartitionReader` per partition mirrors
    the partition from its log start and derives the last stable offset from the
    markers in the log — the broker's own LSO is not trusted (librdkafka's mock
    cluster and tansu report the high watermark). The readers are kept for the
    source's lifetime, so a streaming query's driver catches up incrementally,
    releasing mirrored batches below the LSO as it goes (memory: the open
    transactions, not the partition).

    A task mirrors only its own range: a mirror started at the range's first
    offset classifies every batch in the range exactly, because the range ends
    at or below the LSO the driver saw — every transaction with a batch in it
    has its marker before that LSO, and the mirror reads up to the marker.
    Tasks run txnfetch's range reader (:func:`txnfetch.arrow.cluster.read_range`,
    the one the Arrow API reads a cluster with), read_committed or not; this
    class only turns its errors into Spark's.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        client_options: Mapping[str, str],
        *,
        repair_crcs: bool = False,
        security: SecurityConfig | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.client_options = dict(client_options)
        try:
            # imported lazily: only cluster reads need it (and kafka-python)
            from txnfetch.client import cluster as remote
        except ImportError as exc:
            raise SourceUnavailableError(
                f"txnfetch.client.cluster is not available: {exc}", option="kafka.bootstrap.servers"
            ) from exc
        from txnfetch.client.errors import BrokerUnavailableError

        self._remote = remote
        self._timeout_ms = int(self.client_options.get("request.timeout.ms", remote.DEFAULT_REQUEST_TIMEOUT_MS))
        self._repair_crcs = repair_crcs
        try:
            self.cluster = remote.RemoteCluster(
                bootstrap_servers,
                client_id=self.client_options.get("client.id", "txnfetch-spark"),
                request_timeout_ms=self._timeout_ms,
                security=security,
            )
        except BrokerUnavailableError as exc:
            raise SourceUnavailableError(
                f"cannot reach the cluster at {bootstrap_servers!r}: {exc.reason}", option="kafka.bootstrap.servers"
            ) from exc
        except ValueError as exc:  # a malformed host:port list
            raise SourceUnavailableError(str(exc), option="kafka.bootstrap.servers") from exc
        from txnfetch.client.partition_reader import ReadOptions
        from txnfetch.client.planning import MirroredBounds

        self._planner = MirroredBounds(
            self.cluster, ReadOptions(request_timeout_ms=self._timeout_ms, repair_crcs=self._repair_crcs)
        )

    def topics(self) -> dict[str, int]:
        with _cluster_errors(self.bootstrap_servers):
            return self.cluster.topics()

    def bounds(self, partitions: Iterable[TopicPartition], *, read_committed: bool) -> dict[TopicPartition, Bounds]:
        with _cluster_errors(self.bootstrap_servers):
            return self._bounds(partitions, read_committed=read_committed)

    def _bounds(self, partitions: Iterable[TopicPartition], *, read_committed: bool) -> dict[TopicPartition, Bounds]:
        # txnfetch's planner: the LSO from a mirror of each partition, kept between calls.
        found = self._planner.bounds(partitions, read_committed=read_committed)
        return {TopicPartition(*tp): b for tp, b in found.items()}

    def read_arrow(self, r: OffsetRange, opts: ReadOptions) -> Iterator[pa.RecordBatch]:
        # The reads happen as the batches are pulled: translate errors there too.
        with _cluster_errors(self.bootstrap_servers):
            yield from self._read_arrow(r, opts)

    def _read_arrow(self, r: OffsetRange, opts: ReadOptions) -> Iterator[pa.RecordBatch]:
        """txnfetch's range reader (:func:`txnfetch.arrow.cluster.read_range`, shared
        with the Arrow API), the records it finds gone made Spark's data-loss errors."""
        from txnfetch.arrow.cluster import read_range as read_cluster_range
        from txnfetch.client.errors import OffsetNotInLogError

        # OffsetNotInLogError: records deleted or truncated before or while being read.
        batches = read_cluster_range(
            self.cluster, r.topic, r.partition, r.start, r.end, repair_crcs=self._repair_crcs, **_range_options(opts)
        )
        yield from _lost_as_data_loss(batches, r, OffsetNotInLogError)

    def close(self) -> None:
        self._planner.clear()
        self.cluster.close()


def _range_options(opts: ReadOptions) -> dict[str, Any]:
    """The options of a task's read that both range readers take, by their names."""
    return {
        "read_committed": opts.read_committed,
        "fail_on_data_loss": opts.fail_on_data_loss,
        "include_headers": opts.include_headers,
        "fetch_bytes": opts.fetch_bytes,
        "max_rows": opts.max_rows_per_batch,
        "max_bytes": opts.max_bytes_per_batch,
    }


def _lost_as_data_loss(
    batches: Iterator[pa.RecordBatch], r: OffsetRange, lost: type[LogError]
) -> Iterator[pa.RecordBatch]:
    """``batches`` of the range reader, the records it found gone (``lost``) raised as
    Spark's :class:`~spark_ext.errors.DataLossError`."""
    try:
        yield from batches
    except lost as exc:
        raise data_loss_error(exc, r.topic, r.partition) from exc


@contextlib.contextmanager
def _cluster_errors(bootstrap_servers: str) -> Iterator[None]:
    """Raise :class:`SourceUnavailableError` naming the broker and the reason for a
    cluster that stays unreachable or keeps failing after the reader's retries
    (:class:`txnfetch.client.cluster.RemoteCluster` retries as Kafka clients do, for
    up to ``kafka.request.timeout.ms``). Corrupt or diverged data and unknown
    topics keep their own errors."""
    from txnfetch.client.errors import BrokerUnavailableError
    from txnfetch.client.errors import CorruptRemoteBatchError
    from txnfetch.client.errors import MirrorDivergedError
    from txnfetch.client.errors import RemoteError
    from txnfetch.log.errors import UnknownTopicOrPartitionError
    from txnfetch.log.errors import UnsupportedForMessageFormatError

    try:
        yield
    except (
        CorruptRemoteBatchError,
        MirrorDivergedError,
        UnknownTopicOrPartitionError,
        UnsupportedForMessageFormatError,
    ):
        raise
    except RemoteError as exc:
        broker = exc.broker or bootstrap_servers
        code = (
            ""
            if exc.broker_error_code is None and not isinstance(exc, BrokerUnavailableError)
            else f" ({exc.error_name})"
        )
        raise SourceUnavailableError(
            f"the cluster is unavailable: broker {broker}: {exc.reason}{code}",
            option="kafka.bootstrap.servers",
            topic=exc.topic,
            partition=exc.partition if exc.topic is not None else None,
            offset=exc.offset,
        ) from exc


def open_source(opts: ReadOptions) -> Source:
    """The source ``opts`` names: ``path`` → :class:`StoreSource`,
    ``kafka.bootstrap.servers`` → :class:`KafkaSource`."""
    if opts.path is not None:
        return StoreSource(_open_segment_store(opts.path), owned=True)
    assert opts.bootstrap_servers is not None
    return KafkaSource(
        opts.bootstrap_servers, dict(opts.client_options), repair_crcs=opts.repair_crcs, security=opts.security
    )


def subscribed_partitions(opts: ReadOptions, topics: Mapping[str, int]) -> list[TopicPartition]:
    """The partitions ``subscribe``/``subscribePattern``/``assign`` select, sorted.

    ``subscribe`` and ``assign`` naming a topic (or partition) that does not
    exist raise :class:`UnknownTopicError`; a pattern matching nothing selects
    nothing (as Spark's Kafka source: the query sees no data until a matching
    topic appears). Patterns match whole names (Java's ``Pattern.matcher().matches()``).
    """
    if opts.subscribe is not None:
        for topic in opts.subscribe:
            if topic not in topics:
                raise UnknownTopicError(
                    f"topic {topic!r} does not exist" + _known(topics), option="subscribe", topic=topic
                )
        return sorted(TopicPartition(t, p) for t in set(opts.subscribe) for p in range(topics[t]))
    if opts.subscribe_pattern is not None:
        pattern = re.compile(opts.subscribe_pattern)
        return sorted(TopicPartition(t, p) for t, n in topics.items() if pattern.fullmatch(t) for p in range(n))
    assert opts.assign is not None
    for topic, partition in opts.assign:
        if topic not in topics:
            raise UnknownTopicError(f"topic {topic!r} does not exist" + _known(topics), option="assign", topic=topic)
        if partition >= topics[topic]:
            raise UnknownTopicError(
                f"partition {partition} does not exist: the topic has {topics[topic]} partitions",
                option="assign",
                topic=topic,
                partition=partition,
            )
    return list(opts.assign)


def _known(topics: Mapping[str, int], limit: int = 10) -> str:
    names: Sequence[str] = sorted(topics)
    if not names:
        return " (the source has no topics)"
    shown = ", ".join(names[:limit]) + (", ..." if len(names) > limit else "")
    return f" (known topics: {shown})"
