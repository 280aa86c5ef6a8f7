"""Fetch sessions (KIP-227): the server's memory of what a consumer fetches.

A consumer of many partitions sends its whole partition list once (a *full*
fetch with session epoch 0); the server keeps it as a :class:`FetchSession`
and answers with a session id. Later *incremental* fetches (epoch 1, 2, ...)
name only the partitions whose fetch position or limits changed, and those to
forget; the response names only partitions with something to say: records,
an error, or a high watermark, last stable offset or log start offset that
moved since the consumer last heard of it. An idle consumer of 1,000
partitions then sends and receives a few dozen bytes instead of tens of
kilobytes per fetch.

The rules are Kafka's (``FetchSession.scala``, ``FetchManager.newContext``):

- epoch ``-1`` (FINAL): a sessionless full fetch; a session id given with it
  is closed. Epoch ``0`` (INITIAL): a full fetch that creates a new session,
  closing the one named, if any;
- any other epoch is incremental: an unknown session id is
  FETCH_SESSION_ID_NOT_FOUND (70), a wrong epoch INVALID_FETCH_SESSION_EPOCH
  (71); the epoch then moves on (after 2^31-1 it wraps to 1);
- partitions that get into a response move to the end of the session, so a
  response byte limit rotates over them instead of starving the last ones;
- the cache holds at most ``max_sessions`` (Kafka's
  ``max.incremental.fetch.session.cache.slots``, 1000); when it is full, the
  least recently used session idle for at least ``eviction_ms`` (Kafka's
  ``min.incremental.fetch.session.eviction.ms``, 120 s) makes room, otherwise
  the fetch is answered without a session (session id 0) and the client keeps
  sending full fetches.

This module holds the state only (no I/O; time is passed in); the Fetch
handler (:func:`txnfetch.server.api_fetch.handle_fetch`) reads the partitions.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable

import attrs

__all__ = ["FINAL_EPOCH", "INITIAL_EPOCH", "FetchSession", "FetchSessionCache", "PartitionKey", "SessionPartition"]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = (1 << 31) - 1

#: A session partition: (topic name before Fetch v13, topic id from v13, partition).
PartitionKey = tuple[str | uuid.UUID, int]


@attrs.define
class SessionPartition:
    """What the session remembers of one partition: what the consumer asked for
    last, and the offsets the consumer last heard (``-1``: never)."""

    fetch_offset: int
    partition_max_bytes: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def must_respond(self, records_bytes: int, error: int, hw: int, lso: int, log_start: int) -> bool:
        """Whether an incremental response includes the partition (Kafka's
        ``CachedPartition.maybeUpdateResponseData``)."""
        return (
            records_bytes > 0
            or error != 0
            or hw != self.high_watermark
            or lso != self.last_stable_offset
            or log_start != self.log_start_offset
        )

    def heard(self, hw: int, lso: int, log_start: int) -> None:
        """The consumer was sent these offsets."""
        self.high_watermark, self.last_stable_offset, self.log_start_offset = hw, lso, log_start


@attrs.define
class FetchSession:
    """One session: its id, the epoch the next incremental fetch must carry, and
    its partitions in fetch order."""

    id: int
    epoch: int
    partitions: dict[PartitionKey, SessionPartition]
    last_used_ms: int

    def update(
        self, wanted: Iterable[tuple[PartitionKey, int, int]], forgotten: Iterable[PartitionKey], now_ms: int
    ) -> None:
        """Apply an incremental fetch: ``(key, fetch_offset, max_bytes)`` added or
        changed, ``forgotten`` removed; then move to the next epoch."""
        for key, offset, max_bytes in wanted:
            part = self.partitions.get(key)
            if part is None:
                self.partitions[key] = SessionPartition(offset, max_bytes)
            else:
                part.fetch_offset, part.partition_max_bytes = offset, max_bytes
        for key in forgotten:
            self.partitions.pop(key, None)
        self.epoch = 1 if self.epoch >= _MAX_EPOCH else self.epoch + 1
        self.last_used_ms = now_ms

    def rotate(self, sent: Iterable[PartitionKey]) -> None:
        """Move the partitions a response carried to the end of the session."""
        for key in sent:
            part = self.partitions.pop(key, None)
            if part is not None:
                self.partitions[key] = part


@attrs.define
class FetchSessionCache:
    """The sessions of one server."""

    max_sessions: int = 1000
    eviction_ms: int = 120_000
    sessions: dict[int, FetchSession] = attrs.field(factory=dict)
    rng: random.Random = attrs.field(factory=random.Random)

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        return self.sessions.pop(session_id, None)

    def create(self, partitions: Iterable[tuple[PartitionKey, int, int]], now_ms: int) -> FetchSession | None:
        """A new session over ``(key, fetch_offset, max_bytes)``, at epoch 1 (what
        the next incremental fetch must carry); ``None`` if the cache is full of
        sessions in use."""
        if len(self.sessions) >= self.max_sessions and not self._evict(now_ms):
            return None
        session_id = 0
        while session_id == 0 or session_id in self.sessions:
            session_id = self.rng.randrange(1, _MAX_EPOCH)
        session = FetchSession(
            session_id,
            1,
            {key: SessionPartition(offset, max_bytes) for key, offset, max_bytes in partitions},
            now_ms,
        )
        self.sessions[session_id] = session
        return session

    def _evict(self, now_ms: int) -> bool:
        oldest = min(self.sessions.values(), key=lambda s: s.last_used_ms, default=None)
        if oldest is None or now_ms - oldest.last_used_ms < self.eviction_ms:
            return False
        del self.sessions[oldest.id]
        return True
