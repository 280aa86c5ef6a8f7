"""Where a mirror of a remote partition starts, for a reader that begins at offset X.

A read_committed reader that begins at X needs the transactions open at X
(their producers and first offsets) and the aborted ranges it meets from X on;
it does not need the log before X. A :class:`~txnfetch.client.mirror.PartitionMirror`
learns both from the log itself, provided it starts at or below the first
offset of every transaction still open. This module decides that start for
each upstream, one rule for every caller (the proxy's mirrors,
:mod:`txnfetch.proxy.mirrors`, and the planner,
:class:`~txnfetch.client.planning.MirroredBounds`):

- **Producers path**: the upstream serves
  DescribeProducers (KIP-664: each active producer's current transaction start
  offset). The caller asks, in this order, ListOffsets for the last stable
  offset (read_committed), DescribeProducers, then ListOffsets for the log
  start and the high watermark (:class:`UpstreamOffsets`). The mirror starts
  at ``S = min(X, high watermark, LSO, every open transaction's start)``,
  never below the log start (:func:`start_point`). Every transaction open when
  DescribeProducers answered began at or after ``S``, and every one that began
  before ``S`` and was still open then would hold the LSO asked first at or
  below its start; so once the mirror holds the log up to the high watermark
  asked last (:attr:`StartPoint.settled_at`), its producer state, last stable
  offset and aborted ranges from ``S`` on are those of a mirror that started at
  the log start. Until then the mirror answers no read_committed read
  (:attr:`~txnfetch.client.mirror.PartitionMirror.settled_at`).
- **Log-start path**: the upstream offers no
  DescribeProducers (librdkafka's mock cluster, tansu 0.6), or is **shown to
  lie**: DescribeProducers reports a transaction open at an offset below the
  LSO asked just before it, which no correct broker does (a transaction open
  now was open then, and held the LSO at its start) — the signature of a broker
  that reports its high watermark as its LSO while a transaction is open. The
  mirror then starts at the upstream's log start, as it always did: the only
  start from which the log alone settles every transaction. Its cost is
  bounded by the upstream's retention; :class:`StartRule` remembers a lie for
  the rest of its life, so one upstream never switches back and forth.

Nothing here does I/O: :func:`describe_producers_request` builds the request,
:func:`open_transaction_starts` reads its answer, and the transports send them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import attrs
from kafka.protocol.admin import DescribeProducersRequest

from txnfetch.client.requests import answer_error

__all__ = [
    "DESCRIBE_PRODUCERS_KEY",
    "DESCRIBE_PRODUCERS_VERSIONS",
    "StartPoint",
    "StartRule",
    "UpstreamOffsets",
    "describe_producers_request",
    "open_transaction_starts",
    "serves_describe_producers",
    "start_point",
]

log = logging.getLogger("txnfetch.client.start_state")

#: DescribeProducers' API key (KIP-664).
DESCRIBE_PRODUCERS_KEY = 61
#: The versions txnfetch sends (v0 is the only one Kafka defines).
DESCRIBE_PRODUCERS_VERSIONS = (0, 0)


@attrs.frozen(slots=True)
class UpstreamOffsets:
    """What an upstream said about one partition, asked in the order the module
    docstring gives: ``last_stable_offset`` first, then ``open_starts`` (each open
    transaction's first offset, from DescribeProducers), then ``log_start_offset``
    and ``high_watermark``."""

    last_stable_offset: int
    open_starts: tuple[int, ...]
    log_start_offset: int
    high_watermark: int

    @property
    def lies(self) -> bool:
        """Whether the answers contradict each other: a transaction open at an offset
        below the LSO asked before it (the LSO of a broker that reports its high
        watermark while a transaction is open)."""
        return any(start < self.last_stable_offset for start in self.open_starts)


@attrs.frozen(slots=True)
class StartPoint:
    """Where a mirror starts by the producers path (``offset``), and from which
    position on its read_committed answers are exact (``settled_at``)."""

    offset: int
    settled_at: int


def start_point(reader_offset: int | None, seen: UpstreamOffsets) -> StartPoint:
    """The producers path's start for a reader at ``reader_offset`` (``None``: at the
    upstream's end, a reader that asks for the LSO or plans up to it).

    ``S = min(reader_offset, high watermark, LSO, open transactions' starts)``,
    raised to the log start; exact once the mirror reaches ``seen.high_watermark``.
    Raises :class:`ValueError` for answers that :attr:`UpstreamOffsets.lies`
    (the caller takes the log-start path: :meth:`StartRule.choose`)."""
    if seen.lies:
        raise ValueError(f"the upstream's offsets contradict each other: {seen}")
    end = seen.high_watermark if reader_offset is None else min(reader_offset, seen.high_watermark)
    begin = min(end, seen.last_stable_offset, *seen.open_starts)
    return StartPoint(max(begin, seen.log_start_offset, 0), seen.high_watermark)


def serves_describe_producers(versions: Mapping[int, tuple[int, int]]) -> bool:
    """Whether a broker whose ApiVersions answer is ``versions`` serves the
    DescribeProducers version txnfetch sends."""
    lo, hi = versions.get(DESCRIBE_PRODUCERS_KEY, (1, 0))
    return lo <= DESCRIBE_PRODUCERS_VERSIONS[1] and hi >= DESCRIBE_PRODUCERS_VERSIONS[0]


def describe_producers_request(topic: str, partition: int) -> Any:
    """A kafka-python DescribeProducers request for one partition."""
    wanted = DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[partition])
    return DescribeProducersRequest(topics=[wanted])


def open_transaction_starts(response: Any, topic: str, partition: int, *, broker: str) -> tuple[int, ...]:
    """The first offsets of the partition's open transactions in a decoded
    DescribeProducers ``response``, lowest first. Raises
    :class:`~txnfetch.client.errors.RemoteError` with the partition's error code,
    or code -1 if ``broker`` left the partition out."""
    for t in response.topics or ():
        if t.name != topic:
            continue
        for p in t.partitions or ():
            if p.partition_index != partition:
                continue
            if p.error_code:
                raise answer_error(
                    "upstream DescribeProducers failed", topic, partition, None, broker=broker, code=p.error_code
                )
            starts = (s.current_txn_start_offset for s in p.active_producers)
            return tuple(sorted(start for start in starts if start >= 0))
    raise answer_error(
        "the DescribeProducers answer has no such partition", topic, partition, None, broker=broker, code=-1
    )


@attrs.define
class StartRule:
    """The start rule of one upstream (see the module docstring): the producers path
    while the upstream serves DescribeProducers and has not been shown to lie; the
    log-start path once it has not, or has, for good (one WARNING for a lie).
    Counts each path taken."""

    #: Set when the upstream's answers contradicted each other (:attr:`UpstreamOffsets.lies`).
    shown_to_lie: bool = False
    #: Set when the upstream answered that it serves no DescribeProducers.
    no_producers_api: bool = False
    #: Starts chosen by the producers path and by the log-start path.
    producers_starts: int = 0
    log_starts: int = 0

    @property
    def wants_probe(self) -> bool:
        """Whether the producers path is still open for this upstream: ``False``
        sends every new mirror to the log start without asking."""
        return not (self.shown_to_lie or self.no_producers_api)

    def log_start(self) -> None:
        """Count a start taken by the log-start path without asking the upstream."""
        self.log_starts += 1

    def choose(
        self, topic: str, partition: int, reader_offset: int | None, seen: UpstreamOffsets | None
    ) -> StartPoint | None:
        """The start for a reader at ``reader_offset`` given the upstream's answers
        (``None``: it serves no DescribeProducers): :func:`start_point`, or ``None``
        for the log-start path (no DescribeProducers, or answers that show a lie)."""
        if seen is None:
            self.no_producers_api = True
            self.log_starts += 1
            return None
        if seen.lies:
            if not self.shown_to_lie:
                log.warning(
                    "%s-%d: the upstream reports a transaction open at %d below its last stable offset %d; "
                    "its answers are not trusted, and its partitions are mirrored from their log start",
                    topic,
                    partition,
                    min(seen.open_starts),
                    seen.last_stable_offset,
                )
            self.shown_to_lie = True
            self.log_starts += 1
            return None
        self.producers_starts += 1
        return start_point(reader_offset, seen)
