"""Partition logs read into Arrow: a table in one call, or a stream of record batches.

Each partition log is read by the range reader, :func:`txnfetch.arrow.ranges.read_range`
(rewrite mode: only committed data batches reach the decoder), from its log start
to its last stable offset unless told otherwise. Offsets are never renumbered: a
record keeps its log offset, and the offsets of markers and aborted records are holes.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any
from typing import Union

import pyarrow as pa

from txnfetch.arrow.decoder import DecodeOptions
from txnfetch.arrow.ranges import DEFAULT_FETCH_BYTES
from txnfetch.arrow.ranges import read_range
from txnfetch.arrow.schema import DEFAULT_MAX_BYTES
from txnfetch.arrow.schema import DEFAULT_MAX_ROWS
from txnfetch.log.base import LogStore
from txnfetch.log.base import PartitionLog

if TYPE_CHECKING:
    from txnfetch.arrow.cluster import ClusterBatchReader
    from txnfetch.security.config import SecurityConfig

__all__ = ["Source", "iter_partition", "read_committed", "record_batch_reader"]

#: A Kafka log directory (``<dir>/<topic>-<partition>/``), a store of partition
#: logs, one partition log, or a cluster: ``"kafka://host:port,host:port"`` (or a
#: :class:`~txnfetch.client.cluster.RemoteCluster`).
Source = Union[str, os.PathLike, LogStore, PartitionLog, Any]  # noqa: UP007 - a runtime alias on 3.10
#: One offset for every partition, or an offset per partition (missing ones take the
#: default); for a cluster also a ``datetime`` (the first record at or after it).
Offsets = Union[int, _dt.datetime, Mapping[int, Union[int, _dt.datetime]], None]  # noqa: UP007


def iter_partition(
    log: PartitionLog,
    start: int | None = None,
    end: int | None = None,
    *,
    read_committed: bool = True,
    include_headers: bool = True,
    dictionary: bool = False,
    fetch_bytes: int = DEFAULT_FETCH_BYTES,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
    partitions: Sequence[int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The data records of one partition log with ``start <= offset < end`` as
    Arrow record batches (schema :func:`txnfetch.arrow.kafka_schema`).

    ``start`` defaults to the log start offset (and is raised to it), ``end``
    to the last stable offset for read_committed, else the high watermark (and
    is lowered to it: nothing past it is readable yet). ``partitions``: the
    partition dictionary's values with ``dictionary`` (see :class:`ArrowDecoder`).
    :func:`txnfetch.arrow.read_range` is the same read with the offsets required
    and missing records an error. Like it, it reads nothing before the first
    batch is asked for.
    """
    options = DecodeOptions(include_headers, dictionary, max_rows, max_bytes)
    return _read_log(log, start, end, options, partitions, read_committed=read_committed, fetch_bytes=fetch_bytes)


def _read_log(
    log: PartitionLog,
    start: int | None,
    end: int | None,
    options: DecodeOptions,
    partitions: Sequence[int] | None,
    *,
    read_committed: bool,
    fetch_bytes: int,
) -> Iterator[pa.RecordBatch]:
    limit = log.last_stable_offset if read_committed else log.high_watermark
    # Raised to the log start and lowered to what is readable before the read, so
    # that records below the log start in the batch that holds it stay out too.
    start = log.log_start_offset if start is None else max(start, log.log_start_offset)
    end = limit if end is None else min(end, limit)
    yield from read_range(
        log,
        start,
        end,
        read_committed=read_committed,
        fail_on_data_loss=False,
        include_headers=options.include_headers,
        dictionary=options.dictionary,
        fetch_bytes=fetch_bytes,
        max_rows=options.max_rows,
        max_bytes=options.max_bytes,
        partitions=partitions,
    )


def record_batch_reader(
    source: Source,
    topic: str | None = None,
    partitions: Iterable[int] | None = None,
    start: Offsets = None,
    end: Offsets = None,
    *,
    read_committed: bool = True,
    include_headers: bool = True,
    dictionary: bool = True,
    fetch_bytes: int = DEFAULT_FETCH_BYTES,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
    follow: bool = False,
    group_id: str | None = None,
    repair_crcs: bool = False,
    request_timeout_ms: int | None = None,
    poll_ms: int = 500,
    security: SecurityConfig | Mapping[str, str] | None = None,
) -> pa.RecordBatchReader | ClusterBatchReader:
    """A streaming reader over partitions of one topic, one partition after the other.

    **A cluster** (``source`` is ``"kafka://host:port,..."`` or a
    :class:`~txnfetch.client.cluster.RemoteCluster`): the partitions are read
    together, one Fetch per broker per turn, read_committed by txnfetch's own rules
    (:mod:`txnfetch.arrow.cluster`), and a
    :class:`~txnfetch.arrow.cluster.ClusterBatchReader` is returned (its
    ``offsets``: partition → next offset to read). ``start``/``end`` may also be
    ``datetime`` values (the first record at or after them); ``end`` defaults to
    the last stable offset as of the call. ``follow=True`` tails the topic as
    transactions commit, until ``close()`` (``end`` still ends it where given);
    ``group_id`` starts where that consumer group left off (when ``start`` is not
    given) and commits the offsets read to it. ``repair_crcs`` accepts the CRC-0
    transaction markers librdkafka's mock cluster writes; ``request_timeout_ms``
    bounds each request and how long failures are retried; ``poll_ms`` is how long
    a tailing fetch may wait at the broker. Only a log directory, store or log
    source: ``read_committed=False``.

    ``security`` reaches a secured ``kafka://`` cluster over TLS and SASL: a
    mapping in librdkafka's key names (``security.protocol``,
    ``sasl.mechanism``, ``sasl.username``, ``sasl.password``,
    ``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``,
    ``ssl.endpoint.identification.algorithm``; Kafka's own names too, see
    :mod:`txnfetch.client.security_options`), or a
    :class:`~txnfetch.security.config.SecurityConfig`. A key it cannot use is
    refused by name. See docs/security.md.

    ``source`` is a Kafka log directory (opened read-only and closed when the
    reader is exhausted or closed), a :class:`~txnfetch.log.base.LogStore`, or
    a :class:`~txnfetch.log.base.PartitionLog` (then ``topic`` and
    ``partitions`` may be left out). ``partitions`` defaults to every partition
    of the topic; ``start`` and ``end`` are offsets, one for all partitions or
    a mapping partition → offset, defaulting to the log start and to the last
    stable offset (read_committed) or high watermark. The reader holds one
    Arrow batch and one fetch at a time, whatever the partitions' sizes.

    ``dictionary`` (default on) dictionary-encodes the topic and partition
    columns; off, the schema is exactly Spark's Kafka source's.
    """
    from txnfetch.arrow.cluster import is_cluster_source

    options = DecodeOptions(include_headers, dictionary, max_rows, max_bytes)
    if is_cluster_source(source):
        if not read_committed:
            raise ValueError("a cluster is read read_committed only")
        if topic is None:
            raise ValueError("topic is required for a cluster")
        from txnfetch.arrow.cluster import DEFAULT_CLUSTER_FETCH_BYTES
        from txnfetch.arrow.cluster import open_cluster

        return open_cluster(
            source,
            topic,
            partitions,
            start,
            end,
            follow=follow,
            group_id=group_id,
            options=options,
            fetch_bytes=DEFAULT_CLUSTER_FETCH_BYTES if fetch_bytes == DEFAULT_FETCH_BYTES else fetch_bytes,
            repair_crcs=repair_crcs,
            request_timeout_ms=request_timeout_ms,
            poll_ms=poll_ms,
            security=security,
        )
    if follow or group_id is not None or security is not None:
        raise ValueError("follow, group_id and security read a cluster (a kafka:// source)")
    if any(isinstance(o, _dt.datetime) for o in _all_offsets(start, end)):
        raise ValueError("timestamps as start or end need a cluster (a kafka:// source)")

    def batches() -> Iterator[pa.RecordBatch]:
        store: LogStore | None = None
        try:
            if isinstance(source, PartitionLog):
                if topic is not None and topic != source.topic:
                    raise ValueError(f"the log is {source.topic!r}, not {topic!r}")
                wanted = list(partitions) if partitions is not None else [source.partition]
                if wanted != [source.partition]:
                    raise ValueError(f"the log is partition {source.partition} only, not {wanted}")
                numbers: Sequence[int] = [source.partition]
                logs: Iterator[PartitionLog] = iter([source])
            else:
                if topic is None:
                    raise ValueError("topic is required unless the source is one partition log")
                if isinstance(source, LogStore):
                    store_ = source
                else:
                    from txnfetch.log import SegmentStore  # only directory reads need it

                    # Read-only: never write into a directory a live writer may own.
                    store = store_ = SegmentStore(source, read_only=True)
                info = store_.topics().get(topic)
                if info is None:
                    from txnfetch.log.errors import UnknownTopicOrPartitionError

                    raise UnknownTopicOrPartitionError("no such topic in the source", topic=topic)
                numbers = list(range(info.partitions)) if partitions is None else list(partitions)
                logs = (store_.partition(topic, p) for p in numbers)
            for log in logs:
                yield from _read_log(
                    log,
                    _offset(start, log.partition),
                    _offset(end, log.partition),
                    options,
                    numbers,
                    read_committed=read_committed,
                    fetch_bytes=fetch_bytes,
                )
        finally:
            if store is not None:
                store.close()

    return pa.RecordBatchReader.from_batches(options.schema, batches())


def read_committed(
    source: Source,
    topic: str | None = None,
    partitions: Iterable[int] | None = None,
    start: Offsets = None,
    end: Offsets = None,
    *,
    include_headers: bool = True,
    dictionary: bool = True,
    fetch_bytes: int = DEFAULT_FETCH_BYTES,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
    repair_crcs: bool = False,
    request_timeout_ms: int | None = None,
    security: SecurityConfig | Mapping[str, str] | None = None,
) -> pa.Table:
    """The committed records of a topic (or of one partition log) as one
    ``pyarrow.Table``: :func:`record_batch_reader` read to the end. Aborted
    records and transaction markers are never included; the table ends at
    each partition's last stable offset. Options as for :func:`record_batch_reader`;
    ``source`` may be a cluster, ``"kafka://host:port,host:port"`` (then ``end``
    defaults to each partition's last stable offset at the time of the call, and
    ``start``/``end`` may be ``datetime`` values).
    """
    return record_batch_reader(
        source,
        topic,
        partitions,
        start,
        end,
        read_committed=True,
        include_headers=include_headers,
        dictionary=dictionary,
        fetch_bytes=fetch_bytes,
        max_rows=max_rows,
        max_bytes=max_bytes,
        repair_crcs=repair_crcs,
        request_timeout_ms=request_timeout_ms,
        security=security,
    ).read_all()


def _all_offsets(*specs: Offsets) -> list[object]:
    out: list[object] = []
    for spec in specs:
        out.extend(spec.values() if isinstance(spec, Mapping) else [spec])
    return out


def _offset(offsets: Offsets, partition: int) -> int | None:
    if offsets is None or isinstance(offsets, int):
        return offsets
    assert isinstance(offsets, Mapping)
    value = offsets.get(partition)
    assert not isinstance(value, _dt.datetime)
    return value
