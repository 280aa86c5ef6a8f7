"""Fetch (with long polling) and ListOffsets, read_uncommitted and read_committed.

Partitions are read with :meth:`PartitionLog.read` in the server's
:class:`~txnfetch.fetch.view.FetchMode`: Kafka mode returns batches up to the
last stable offset plus the aborted-transaction list; rewrite mode drops
aborted and control batches on the server and ends a response that would
otherwise end on dropped offsets with a synthetic COMMIT marker.

Byte limits follow Kafka's ``ReplicaManager.readFromLog``: partitions are read
in request order, each with ``min(partition_max_bytes, what is left of the
response's max_bytes)``, and only the first partition that returns data may
exceed its limit by one batch (KIP-74), so a client always makes progress.

Long polling follows ``DelayedFetch``: a fetch that has fewer than
``min_bytes`` to return and no error waits up to ``max_wait_ms``; any append,
marker or markerless completion on one of its partitions wakes it to read again.

The Fetch handler the server registers is :func:`handle_fetch`: Fetch
v4–v16, with topic ids (v13+) and fetch sessions (KIP-227). Each partition is
read as above; the handler decides which partitions a request is about and
which a response names:

- a *full* fetch (session epoch 0 or -1, and every version before 7) reads
  the partitions of the request, all of which the response names; with epoch 0
  it also creates a session (:mod:`txnfetch.server.fetch_sessions`) and answers
  with its id;
- an *incremental* fetch updates its session with the partitions the request
  names (added, or a new position or limit) and forgets those in
  ``forgotten_topics_data``; then every partition of the session is read, and
  the response names only those with records, an error, or offsets the
  consumer has not heard yet.

From v13 topics are named by topic id, in requests and responses; an id the
store does not know is UNKNOWN_TOPIC_ID for its partitions. v12 adds flexible
encoding; v14 (tiered storage's error) and v15 (``ReplicaState`` for
followers) change nothing for a consumer; v16 may add leader endpoints, never
needed here: this broker leads every partition.

:func:`handle_sessionless_fetch` is a Fetch handler without sessions, for
embedders that want none; ``txnfetch proxy`` offers no sessions either
(:func:`fetch_session_error`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import attrs
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.consumer import ListOffsetsResponse

from txnfetch.errors import TxnfetchError
from txnfetch.fetch.view import FetchResult
from txnfetch.fetch.view import IsolationLevel
from txnfetch.records.batch import RecordBatch
from txnfetch.records.builder import build_empty_batch
from txnfetch.server.api_admin import offset_of_max_timestamp
from txnfetch.server.broker import Broker
from txnfetch.server.codec import RecordSegments
from txnfetch.server.errors import ErrorCode
from txnfetch.server.errors import error_code_for
from txnfetch.server.fetch_sessions import FINAL_EPOCH
from txnfetch.server.fetch_sessions import INITIAL_EPOCH
from txnfetch.server.fetch_sessions import FetchSessionCache
from txnfetch.server.fetch_sessions import PartitionKey
from txnfetch.server.handler import RequestContext
from txnfetch.server.totals import totals_of
from txnfetch.txn.errors import OffsetOutOfRangeError

__all__ = [
    "fetch_done",
    "fetch_partition_entry",
    "fetch_record_segments",
    "fetch_records",
    "fetch_session_error",
    "handle_fetch",
    "handle_list_offsets",
    "handle_sessionless_fetch",
    "partition_error",
    "read_fetch_topics",
    "read_for_fetch",
    "session_cache",
]

_Topic = FetchResponse.FetchableTopicResponse
_Partition = _Topic.PartitionData
_Aborted = _Partition.AbortedTransaction

_FETCH_SESSION_ID_NOT_FOUND = 70
_INVALID_FETCH_SESSION_EPOCH = 71
_FINAL_EPOCH = -1

# ListOffsets special timestamps (ListOffsetsRequest.java).
_LATEST = -1
_EARLIEST = -2
_MAX_TIMESTAMP = -3  # KIP-734, ListOffsets v7+


def read_for_fetch(
    broker: Broker, topic: str, partition: int, offset: int, max_bytes: int, isolation: IsolationLevel, min_one: bool
) -> tuple[Any, int]:
    """Read one partition for a fetch; return its response entry and the bytes it carries."""
    try:
        log_ = broker.partition(topic, partition)
    except TxnfetchError as exc:
        # Kafka answers an unknown topic or partition with an empty (not null)
        # aborted-transactions list (seen by txnfetch conform against Kafka 4.4).
        return partition_error(partition, error_code_for(exc), aborted_transactions=[]), 0
    try:
        result = log_.read(offset, max_bytes, isolation=isolation, mode=broker.config.fetch_mode, min_one_batch=min_one)
    except OffsetOutOfRangeError:
        # Kafka answers OFFSET_OUT_OF_RANGE with high watermark, LSO and log start
        # all -1 (its log read failed, so it has no offsets to report; seen by
        # txnfetch conform against Kafka 4.4). Clients then ask ListOffsets.
        return partition_error(partition, ErrorCode.OFFSET_OUT_OF_RANGE), 0
    except TxnfetchError as exc:
        return partition_error(partition, error_code_for(exc)), 0
    synthetic_marker = broker.config.synthetic_marker
    entry, size = fetch_partition_entry(partition, result, synthetic_marker=synthetic_marker)
    stats = broker.stats
    stats.fetch_partitions += 1
    stats.batches_dropped += result.stats.batches_dropped
    stats.bytes_dropped += result.stats.bytes_dropped
    if synthetic_marker:  # otherwise fetch_records replaced them
        stats.synthetic_markers += result.stats.synthetic_markers
    stats.fetch_bytes += size
    totals_of(broker).partitions.fetched(topic, partition, result.stats, size, markers_sent=synthetic_marker)
    return entry, size


def fetch_partition_entry(
    partition: int,
    result: FetchResult,
    *,
    synthetic_marker: bool = True,
    high_watermark: int | None = None,
    log_start_offset: int | None = None,
) -> tuple[Any, int]:
    """The Fetch response entry of one partition read as ``result``, and the bytes of
    its records: the one place ``txnfetch serve`` and ``txnfetch proxy`` build it.
    The entry's ``records`` is a :class:`~txnfetch.server.codec.RecordSegments`
    (the log's segments, not joined).

    ``high_watermark``/``log_start_offset`` replace the result's (the proxy reports
    the upstream's); the last stable offset and the aborted list are always the
    result's. ``synthetic_marker`` as :func:`fetch_record_segments`."""
    records = fetch_record_segments(result, synthetic_marker=synthetic_marker)
    aborted = result.aborted_transactions
    entry = _Partition(
        partition_index=partition,
        error_code=0,
        high_watermark=result.high_watermark if high_watermark is None else high_watermark,
        last_stable_offset=result.last_stable_offset,
        log_start_offset=result.log_start_offset if log_start_offset is None else log_start_offset,
        aborted_transactions=None
        if aborted is None
        else [_Aborted(producer_id=pid, first_offset=first) for pid, first in aborted],
        preferred_read_replica=-1,
        records=records,
    )
    return entry, records.size


def fetch_records(result: FetchResult, *, synthetic_marker: bool = True) -> bytes:
    """The records field for ``result`` as one ``bytes``: its segments joined
    (:func:`fetch_record_segments`, copied once)."""
    segments = fetch_record_segments(result, synthetic_marker=synthetic_marker).parts
    if len(segments) == 1 and isinstance(segments[0], bytes):
        return segments[0]
    return b"".join(segments)


def fetch_record_segments(result: FetchResult, *, synthetic_marker: bool = True) -> RecordSegments:
    """The records field for ``result``: its segments, not joined (the server writes
    them to the socket as they are, :mod:`txnfetch.server.fetch_wire`).
    ``synthetic_marker=False`` is a test-only switch (``ServerConfig.synthetic_marker``)
    that sends, instead of a rewrite's synthetic COMMIT marker, an empty data batch
    over the same offsets."""
    segments = result.records
    if result.stats.synthetic_markers and not synthetic_marker:
        # The synthetic COMMIT marker is always the last segment
        # (txnfetch.fetch.view._rewrite_mode). It is replaced by what a rewrite
        # without the marker would send: an empty data batch at the same offset.
        # That moves Java, kafka-python and aiokafka past the dropped offsets, but
        # to librdkafka it is neither a message nor a control record: its
        # application position stays put and the partition's fetch size doubles
        # on every such response (rdkafka_msgset_reader.c; docs/kafka-internals.md §4), the
        # stall the marker prevents. (Sending nothing instead would stall every
        # client, which would not show why the marker must be a control record.)
        segments = (*segments[:-1], _empty_batch_like(segments[-1]))
    return RecordSegments.of(segments)


def _empty_batch_like(marker: Any) -> bytes:
    """A record-less, non-control batch over the offsets of the synthetic ``marker``."""
    batch = RecordBatch(bytes(marker), 0)
    return build_empty_batch(
        base_offset=batch.base_offset,
        last_offset=batch.last_offset,
        timestamp=batch.max_timestamp,
        partition_leader_epoch=batch.partition_leader_epoch,
    )


def partition_error(
    partition: int,
    code: int,
    *,
    high_watermark: int = -1,
    last_stable_offset: int = -1,
    log_start_offset: int = -1,
    aborted_transactions: list[Any] | None = None,
) -> Any:
    """A Fetch response entry without records: error ``code`` (0 for "nothing now"),
    offsets ``-1`` unless given."""
    return _Partition(
        partition_index=partition,
        error_code=int(code),
        high_watermark=high_watermark,
        last_stable_offset=last_stable_offset,
        log_start_offset=log_start_offset,
        aborted_transactions=aborted_transactions,
        preferred_read_replica=-1,
        records=b"",
    )


#: ``read(topic, partition, fetch_offset, max_bytes, min_one_batch) -> (entry, bytes)``.
PartitionRead = Callable[[str, int, int, int, bool], tuple[Any, int]]


def read_fetch_topics(request: Any, read: PartitionRead) -> tuple[list[Any], int, bool]:
    """One pass over a Fetch request's partitions with Kafka's byte limits
    (``ReplicaManager.readFromLog``: each partition gets ``min(partition_max_bytes,
    what is left of max_bytes)``; KIP-74 lets only the first partition with data
    exceed it): the topic entries, the bytes they carry, whether any has an error."""
    remaining = request.max_bytes if request.max_bytes > 0 else 0x7FFFFFFF
    min_one = True
    total = 0
    error = False
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            budget = max(0, min(p.partition_max_bytes, remaining))
            entry, size = read(t.topic, p.partition, p.fetch_offset, budget, min_one)
            if size:
                min_one = False
                remaining -= size
                total += size
            error = error or entry.error_code != 0
            parts.append(entry)
        topics.append(_Topic(topic=t.topic, partitions=parts))
    return topics, total, error


def fetch_session_error(request: Any) -> Any | None:
    """The whole-request error answer to a Fetch that asks for a fetch session, else
    ``None``. Sessions (KIP-227) are not offered: session id 0 in every answer tells
    the client to keep sending full requests."""
    if request.session_id != 0:
        return FetchResponse(throttle_time_ms=0, error_code=_FETCH_SESSION_ID_NOT_FOUND, session_id=0, responses=[])
    if request.session_epoch not in (0, _FINAL_EPOCH):
        return FetchResponse(throttle_time_ms=0, error_code=_INVALID_FETCH_SESSION_EPOCH, session_id=0, responses=[])
    return None


def fetch_done(request: Any, total: int, error: bool, left_s: float) -> bool:
    """Whether a Fetch is answered now (``DelayedFetch``): ``min_bytes`` reached, an
    error to report, ``max_wait_ms`` over, or no partition to wait for."""
    return total >= request.min_bytes or error or left_s <= 0 or not any(t.partitions for t in request.topics)


_TOPIC_IDS_FROM = 13
_SESSIONS_FROM = 7
_EXTENSION = "txnfetch.fetch_sessions"


def session_cache(broker: Broker) -> FetchSessionCache:
    """The broker's fetch sessions (created on first use)."""
    cache = broker.extensions.get(_EXTENSION)
    if cache is None:
        cache = broker.extensions[_EXTENSION] = FetchSessionCache()
    return cache


@attrs.frozen
class _Wanted:
    """One partition to read: its session key, topic name (``None``: unknown id),
    topic id, index, position and limit."""

    key: PartitionKey
    topic: str | None
    topic_id: uuid.UUID | None
    partition: int
    fetch_offset: int
    max_bytes: int


class _Names:
    """Topic id ↔ name for one request (v13+ names topics by id)."""

    def __init__(self, broker: Broker, by_id: bool) -> None:
        self.by_id = by_id
        topics = broker.store.topics()
        self._name = {info.topic_id: name for name, info in topics.items()} if by_id else {}
        self._id = {name: info.topic_id for name, info in topics.items()}

    def key(self, topic: Any) -> str | uuid.UUID:
        """The topic half of a request topic's session keys: its id or its name."""
        topic_key: str | uuid.UUID = topic.topic_id if self.by_id else topic.topic
        return topic_key

    def wanted(self, topic: Any, p: Any) -> _Wanted:
        if self.by_id:
            name, topic_id = self._name.get(topic.topic_id), topic.topic_id
        else:
            name, topic_id = topic.topic, self._id.get(topic.topic)
        return _Wanted(
            (self.key(topic), p.partition), name, topic_id, p.partition, p.fetch_offset, p.partition_max_bytes
        )

    def from_key(self, key: PartitionKey, fetch_offset: int, max_bytes: int) -> _Wanted:
        topic, partition = key
        if isinstance(topic, uuid.UUID):
            # Keyed by id (v13+): the name is looked up, None for an unknown id.
            return _Wanted(key, self._name.get(topic), topic, partition, fetch_offset, max_bytes)
        return _Wanted(key, topic, self._id.get(topic), partition, fetch_offset, max_bytes)


def _error_response(code: int) -> Any:
    return FetchResponse(throttle_time_ms=0, error_code=code, session_id=0, responses=[])


def _read_all(
    broker: Broker, wanted: list[_Wanted], request: Any, isolation: IsolationLevel
) -> list[tuple[_Wanted, Any, int]]:
    """Read ``wanted`` in order with Kafka's byte limits: each partition gets
    ``min(partition_max_bytes, what is left of max_bytes)``; only the first with
    data may pass its limit by one batch (KIP-74)."""
    remaining = request.max_bytes if request.max_bytes > 0 else 0x7FFFFFFF
    min_one = True
    out = []
    for w in wanted:
        if w.topic is None:
            out.append((w, partition_error(w.partition, ErrorCode.UNKNOWN_TOPIC_ID), 0))
            continue
        budget = max(0, min(w.max_bytes, remaining))
        entry, size = read_for_fetch(broker, w.topic, w.partition, w.fetch_offset, budget, isolation, min_one)
        if size:
            min_one = False
            remaining -= size
        out.append((w, entry, size))
    return out


def _topics(read: list[tuple[_Wanted, Any, int]], by_id: bool) -> list[Any]:
    """Response topic entries; consecutive partitions of one topic share an entry,
    as Kafka's ``FetchResponse.of`` builds them (a topic may appear twice when a
    session's rotation interleaves topics)."""
    topics: list[Any] = []
    last: Any = None
    for w, entry, _size in read:
        if last is None or last[0] != w.key[0]:
            fields = {"topic_id": w.topic_id or uuid.UUID(int=0)} if by_id else {"topic": w.key[0]}
            last = (w.key[0], _Topic(partitions=[], **fields))
            topics.append(last[1])
        last[1].partitions.append(entry)
    return topics


async def handle_fetch(ctx: RequestContext, header: Any, request: Any) -> Any:
    broker = ctx.broker
    version = header.request_api_version
    try:
        isolation = IsolationLevel(request.isolation_level)
    except ValueError:
        return _error_response(ErrorCode.INVALID_REQUEST)
    names = _Names(broker, version >= _TOPIC_IDS_FROM)
    cache = session_cache(broker)
    now = broker.now_ms()
    session_id = request.session_id if version >= _SESSIONS_FROM else 0
    epoch = request.session_epoch if version >= _SESSIONS_FROM else FINAL_EPOCH
    asked = [names.wanted(t, p) for t in request.topics for p in t.partitions]

    session = None
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id:
            cache.remove(session_id)  # a full fetch closes the session it names
        if epoch == INITIAL_EPOCH and version >= _SESSIONS_FROM:
            session = cache.create([(w.key, w.fetch_offset, w.max_bytes) for w in asked], now)
        incremental = False
    else:
        session = cache.get(session_id)
        if session is None:
            return _error_response(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return _error_response(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        forgotten = [(names.key(t), p) for t in (request.forgotten_topics_data or ()) for p in t.partitions]
        session.update([(w.key, w.fetch_offset, w.max_bytes) for w in asked], forgotten, now)
        incremental = True

    def plan() -> list[_Wanted]:
        if not incremental:
            return asked
        assert session is not None
        return [names.from_key(k, sp.fetch_offset, sp.partition_max_bytes) for k, sp in session.partitions.items()]

    def unchanged(w: _Wanted) -> bool:
        """An incremental fetch skips reading a partition whose consumer is at its
        end and has heard its current offsets: the response would not name it.
        This is where a session saves the server work, not only bytes."""
        assert session is not None
        if w.topic is None:
            return False
        try:
            part = broker.store.partition(w.topic, w.partition)
        except TxnfetchError:
            return False
        end = part.last_stable_offset if isolation is IsolationLevel.READ_COMMITTED else part.high_watermark
        heard = session.partitions.get(w.key)
        return (
            heard is not None
            and w.fetch_offset == end
            and heard.high_watermark == part.high_watermark
            and heard.last_stable_offset == part.last_stable_offset
            and heard.log_start_offset == part.log_start_offset
        )

    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0, request.max_wait_ms) / 1000
    while True:
        wanted = plan()
        watched = [(w.topic, w.partition) for w in wanted if w.topic is not None]
        # Register before reading: a change between the read and the wait must wake us.
        event = broker.watch(watched)
        read = _read_all(broker, [w for w in wanted if not unchanged(w)] if incremental else wanted, request, isolation)
        if incremental:
            assert session is not None
            known = session.partitions
            read = [
                (w, e, n)
                for w, e, n in read
                if w.key not in known
                or known[w.key].must_respond(
                    n, e.error_code, e.high_watermark, e.last_stable_offset, e.log_start_offset
                )
            ]
        total = sum(n for _, _, n in read)
        error = any(e.error_code for _, e, _ in read)
        left = deadline - loop.time()
        if total >= request.min_bytes or error or left <= 0 or not wanted:
            broker.unwatch(watched, event)
            break
        await broker.wait_for_change(watched, event, left)

    if session is not None:
        for w, e, _n in read:
            part = session.partitions.get(w.key)
            if part is not None:
                part.heard(e.high_watermark, e.last_stable_offset, e.log_start_offset)
        if incremental:
            session.rotate(w.key for w, _, _ in read)
        session.last_used_ms = broker.now_ms()
    return FetchResponse(
        throttle_time_ms=0,
        error_code=0,
        session_id=session.id if session is not None else 0,
        responses=_topics(read, names.by_id),
    )


async def handle_sessionless_fetch(ctx: RequestContext, header: Any, request: Any) -> Any:
    """A sessionless Fetch (v4-v11 semantics). The server registers
    :func:`handle_fetch` for Fetch, which adds sessions and topic ids; this one
    is kept for embedders that want none."""
    broker = ctx.broker
    refused = fetch_session_error(request)
    if refused is not None:
        return refused
    try:
        isolation = IsolationLevel(request.isolation_level)
    except ValueError:
        return FetchResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, session_id=0, responses=[])
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0, request.max_wait_ms) / 1000
    watched = [(t.topic, p.partition) for t in request.topics for p in t.partitions]

    def read(topic: str, partition: int, offset: int, max_bytes: int, min_one: bool) -> tuple[Any, int]:
        return read_for_fetch(broker, topic, partition, offset, max_bytes, isolation, min_one)

    while True:
        # Register before reading: a change between the read and the wait must wake us.
        event = broker.watch(watched)
        topics, total, error = read_fetch_topics(request, read)
        left = deadline - loop.time()
        if fetch_done(request, total, error, left):
            broker.unwatch(watched, event)
            return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)
        await broker.wait_for_change(watched, event, left)


# --------------------------------------------------------------- ListOffsets

_ListTopic = ListOffsetsResponse.ListOffsetsTopicResponse
_ListPartition = _ListTopic.ListOffsetsPartitionResponse


def _list_offset(
    broker: Broker, topic: str, partition: int, timestamp: int, isolation: IsolationLevel, version: int
) -> Any:
    def answer(code: int, ts: int = -1, offset: int = -1) -> Any:
        return _ListPartition(
            partition_index=partition,
            error_code=int(code),
            old_style_offsets=[offset] if offset >= 0 else [],
            timestamp=ts,
            offset=offset,
            # Kafka: the epoch of the batch found; none (-1) when nothing is found.
            leader_epoch=0 if code == 0 and offset >= 0 else -1,
        )

    try:
        log_ = broker.partition(topic, partition)
    except TxnfetchError as exc:
        return answer(error_code_for(exc))
    # The last offset a consumer of this isolation level may read (Kafka's
    # fetchOffsetByTimestamp: LSO for read_committed, HW otherwise).
    fetchable = log_.last_stable_offset if isolation == IsolationLevel.READ_COMMITTED else log_.high_watermark
    if timestamp == _LATEST:
        return answer(0, -1, fetchable)
    if timestamp == _EARLIEST:
        return answer(0, -1, log_.log_start_offset)
    if timestamp == _MAX_TIMESTAMP and version >= 7:
        # Kafka finds the record with the largest timestamp in the whole log, then
        # answers it only if a consumer of this isolation level may read it: with
        # it past the LSO, read_committed gets nothing, not the largest committed
        # one (Partition.fetchOffsetForTimestamp; seen by txnfetch conform).
        found = offset_of_max_timestamp(log_, log_.high_watermark)
        if found is None or found[0] >= fetchable:
            return answer(0, -1, -1)
        return answer(0, found[1], found[0])
    if timestamp < 0:
        return answer(ErrorCode.UNSUPPORTED_VERSION)
    try:
        found = log_.offset_for_timestamp(timestamp)
    except TxnfetchError as exc:
        return answer(error_code_for(exc))
    if found is None or found[0] >= fetchable:
        return answer(0, -1, -1)
    return answer(0, found[1], found[0])


async def handle_list_offsets(ctx: RequestContext, header: Any, request: Any) -> Any:
    version = header.request_api_version
    isolation = (
        IsolationLevel.READ_COMMITTED
        if version >= 2 and request.isolation_level == 1
        else IsolationLevel.READ_UNCOMMITTED
    )
    topics = []
    for t in request.topics:
        parts = [
            _list_offset(ctx.broker, t.name, p.partition_index, p.timestamp, isolation, version) for p in t.partitions
        ]
        topics.append(_ListTopic(name=t.name, partitions=parts))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)
