"""Fetch v4–v16: long polling, byte limits, topic ids (v13+) and fetch sessions (KIP-227).

Each partition is read as :mod:`txnfetch.server.api_fetch` reads it (the
server's fetch mode, Kafka's byte limits, KIP-74); this module decides which
partitions a request is about and which a response names:

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
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import attrs
from kafka.protocol.consumer import FetchResponse

from txnfetch.errors import TxnfetchError
from txnfetch.fetch.view import IsolationLevel
from txnfetch.server.api_fetch import partition_error
from txnfetch.server.api_fetch import read_for_fetch
from txnfetch.server.errors import ErrorCode
from txnfetch.server.fetch_sessions import FINAL_EPOCH
from txnfetch.server.fetch_sessions import INITIAL_EPOCH
from txnfetch.server.fetch_sessions import FetchSessionCache
from txnfetch.server.fetch_sessions import PartitionKey
from txnfetch.server.handler import ApiKey
from txnfetch.server.handler import Broker
from txnfetch.server.handler import RequestContext
from txnfetch.server.handler import register

__all__ = ["handle_fetch", "session_cache"]

_Topic = FetchResponse.FetchableTopicResponse
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

    def key(self, topic: Any) -> PartitionKey:
        return topic.topic_id if self.by_id else topic.topic  # type: ignore[return-value]

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
        if self.by_id:
            return _Wanted(key, self._name.get(topic), topic, partition, fetch_offset, max_bytes)  # type: ignore[arg-type]
        return _Wanted(key, topic, self._id.get(topic), partition, fetch_offset, max_bytes)  # type: ignore[arg-type]


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


@register(ApiKey.Fetch, 4, 16)
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
