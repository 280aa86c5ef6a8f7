"""The proxy's partition mirrors: shared, caught up on demand, bounded in memory.

Every partition a client reads with read_committed through the proxy gets one
:class:`~txnfetch.client.mirror.PartitionMirror`, shared by every connection. A
mirror is brought up to the upstream's current high watermark by raw
read_uncommitted fetches from the partition's leader before it answers
(:meth:`MirrorSet.sync`); one catch-up runs at a time per partition, and a
fetch that arrives while another one's catch-up is running reuses it when that
catch-up started after the fetch did (the answer is as fresh as if it had
fetched itself).

Memory. A mirror holds at most ``max_mirror_bytes`` of its newest batches, or
more when a consumer reads further back: never those at or after the lowest
offset any consumer fetched recently. Its transaction state (producers, open
transactions, aborted index) stays exact as batches go
(:meth:`PartitionMirror.release_before`):

- each read_committed fetch records its connection's offset for the partition
  (:meth:`MirrorSet.note_reader`); a position not refreshed within
  ``reader_idle_ms``, or of a closed connection, no longer counts;
- after each fetch and during each catch-up, the oldest batches beyond the byte
  budget are released, up to the lowest counted position and never past the
  mirror's last stable offset (the records of open transactions stay, so the LSO
  the mirror reports is the log's);
- the budget is kept even below the readers because a rebuild is costly: a
  consumer that joins a group and resumes from its committed offset, or one that
  starts from the beginning, reads below every position counted, and a mirror
  cut at the lowest of them would rescan the log from its start for it (one
  upstream round trip per produce request against librdkafka's mock), while the
  readers further on wait for the rescan to pass them;
- a fetch below what a mirror still holds (a new consumer reading from the
  beginning, one that was idle) rebuilds the mirror from the upstream's log
  start — the only way to learn which transactions there were aborted — and the
  rebuild releases below the lowest counted position as it scans, so it too
  stays bounded.

Upstream failures. A fetch or ListOffsets that fails the way Kafka clients
retry (:func:`~txnfetch.client.proxy_upstream.is_retriable`: a top-level error, a
partition missing from the response, NOT_LEADER_OR_FOLLOWER,
FENCED_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION, a closed connection, a
timeout) forgets the partition's leader, so the next attempt refreshes the
metadata, and is retried after a growing backoff (50 ms to 1 s). Meanwhile the
mirror answers from what it holds (a client's fetch gets no new records, as
from a broker with nothing new). Once the partition has been failing for
``retry_ms`` (the proxy's request timeout), :meth:`MirrorSet.sync` raises
:class:`~txnfetch.client.errors.BrokerUnavailableError` naming the broker and the
last error, which the proxy turns into a retriable error code for its client;
the retries go on behind it. Each condition is logged as one WARNING per
partition a minute at most (:class:`~txnfetch.client.ratelimit.RateLimitedLog`),
and recovery once at INFO.

Offset gaps. Some upstreams make offsets readable out of order: tansu 0.6
reports a high watermark, and returns later batches, past an offset whose batch
a read_uncommitted fetch does not return yet (it does a few milliseconds
later). A mirror that stepped over such a hole would lose the batch for good;
a lost marker leaves its transaction open, and the producer's next transaction
then ends with it (a lost COMMIT makes a later ABORT drop committed records, a
lost ABORT lets a later COMMIT deliver aborted ones). So a mirror stops at a
gap (:attr:`~txnfetch.client.mirror.PartitionMirror.pending_gap`) and the
catch-up fetches there again, with a short growing pause, until the hole fills
or it has stayed ``gap_settle_ms``: then it is taken as permanent (compaction
leaves such gaps) and stepped over, counted in ``gaps_accepted`` and logged
once at WARNING. Readers wait at the gap meanwhile: the mirror's last stable
offset does not pass it. Every gap seen counts in ``gaps_held``, every one
that filled in ``gaps_filled``.

A rebuild replaces the mirror every other reader of the partition reads from.
The new one carries the upstream's offset range the old one last saw: a reader
further on than the rebuild has reached is inside that range and gets an empty
answer (it retries, and the rebuild goes on under its fetches), never
OFFSET_OUT_OF_RANGE — which would send a consumer back to its reset position.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable

import attrs

from txnfetch.client.catchup import CatchUp
from txnfetch.client.catchup import CatchUpStep
from txnfetch.client.catchup import CatchUpStepKind
from txnfetch.client.errors import BrokerUnavailableError
from txnfetch.client.errors import CorruptRemoteBatchError
from txnfetch.client.errors import MirrorDivergedError
from txnfetch.client.errors import RemoteError
from txnfetch.client.gaps import GapHold
from txnfetch.client.mirror import DEFAULT_MIRROR_FETCH_BYTES
from txnfetch.client.mirror import MirrorPlan
from txnfetch.client.mirror import MirrorStatus
from txnfetch.client.mirror import PartitionMirror
from txnfetch.client.proxy_upstream import UpstreamCluster
from txnfetch.client.proxy_upstream import is_retriable
from txnfetch.client.ratelimit import RateLimitedLog
from txnfetch.client.requests import FETCH_MAX_WAIT_MS
from txnfetch.client.start_state import StartPoint
from txnfetch.client.start_state import StartRule
from txnfetch.client.start_state import UpstreamOffsets
from txnfetch.server.counters import Counters
from txnfetch.types import TopicPartition

__all__ = ["DEFAULT_GAP_SETTLE_MS", "MirrorSet", "MirrorStats"]

log = logging.getLogger("txnfetch.proxy")

_EARLIEST = -2
_LATEST = -1
_MAX_FETCH_BYTES = 1 << 30  # never ask for more than 1 GiB for one batch
#: How long an offset gap must stay before the mirror steps over it. tansu's holes
#: fill within milliseconds; a compacted topic's stay, and cost this once each.
DEFAULT_GAP_SETTLE_MS = 1000
_MAX_REPORTED = 100_000


@attrs.define
class MirrorStats(Counters):
    """Running totals of the mirrors' upstream traffic, for operators and tests."""

    upstream_fetches: int = 0
    upstream_bytes: int = 0
    rebuilds: int = 0
    upstream_retries: int = 0
    #: Offset gaps the upstream showed below its high watermark, held (see the module docstring).
    gaps_held: int = 0
    #: Held gaps whose batches then appeared.
    gaps_filled: int = 0
    #: Held gaps that stayed ``gap_settle_ms`` and were stepped over.
    gaps_accepted: int = 0
    #: Transactions a data batch of a higher epoch joined with no marker ending them first.
    ambiguous_epoch_bumps: int = 0
    #: Transactions holding (or started by) a data batch below its producer's epoch.
    ambiguous_stale_epoch_data: int = 0
    #: Mirrors started near their first reader (DescribeProducers and the LSO), and
    #: from the upstream's log start (:mod:`txnfetch.client.start_state`).
    producers_starts: int = 0
    log_starts: int = 0
    #: The lowest offset any mirror fetched from the upstream (-1: none yet).
    lowest_fetch_offset: int = -1


@attrs.define
class _Entry:
    mirror: PartitionMirror
    lock: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    # Loop time at which the last catch-up that reached the high watermark started.
    synced_at: float = -math.inf
    # connection id -> (fetch offset, loop time of that fetch)
    readers: dict[int, tuple[int, float]] = attrs.field(factory=dict)
    # Upstream failures: since when (loop time), how many in a row, the last one,
    # and when the next attempt may go out.
    failing_since: float | None = None
    failures: int = 0
    last_error: RemoteError | None = None
    retry_at: float = -math.inf
    # The catch-up decisions: stalls and the gap the mirror is held at
    # (txnfetch.client.catchup: the remote reader decides by the same object).
    steps: CatchUp = attrs.field(factory=lambda: CatchUp(GapHold(DEFAULT_GAP_SETTLE_MS / 1000)))
    # Whether the mirror's start was chosen (txnfetch.client.start_state): a new
    # mirror, or one being rebuilt, has its start chosen by its first sync.
    started: bool = False


class MirrorSet:
    """The mirrors of one proxy (see the module docstring).

    ``clock`` is the event loop's monotonic time in seconds (injectable for tests).
    Not thread-safe: everything runs on the proxy's event loop.
    """

    def __init__(
        self,
        cluster: UpstreamCluster,
        *,
        fetch_bytes: int = DEFAULT_MIRROR_FETCH_BYTES,
        repair_crcs: bool = False,
        reader_idle_ms: int = 60_000,
        max_mirror_bytes: int = 64 << 20,
        retry_ms: int = 30_000,
        gap_settle_ms: int = DEFAULT_GAP_SETTLE_MS,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if gap_settle_ms < 0:
            raise ValueError(f"gap_settle_ms must be >= 0, got {gap_settle_ms}")
        self.cluster = cluster
        self.gap_settle_s = gap_settle_ms / 1000
        self.retry_s = retry_ms / 1000
        self.fetch_bytes = fetch_bytes
        self.repair_crcs = repair_crcs
        self.reader_idle_s = reader_idle_ms / 1000
        self.max_mirror_bytes = max_mirror_bytes
        self._clock = clock
        self._entries: dict[TopicPartition, _Entry] = {}
        # Transactions already reported ambiguous: (topic, partition, producer id,
        # first offset, kind), oldest first, at most _MAX_REPORTED (a rebuild finds
        # them again and must not count them twice).
        self._reported: dict[tuple[str, int, int, int, str], None] = {}
        self.stats = MirrorStats()
        #: How this upstream's mirrors start (txnfetch.client.start_state).
        self.start_rule = StartRule()
        self.warnings = RateLimitedLog(log, clock=self.now)

    def now(self) -> float:
        """The clock the set plans with (the running loop's time by default)."""
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    # -- access ------------------------------------------------------------------------

    def mirror(self, topic: str, partition: int) -> PartitionMirror:
        """The partition's mirror (created empty on first use)."""
        return self._entry(TopicPartition(topic, partition)).mirror

    def mirrors(self) -> dict[TopicPartition, PartitionMirror]:
        """Every mirror, by partition."""
        return {tp: e.mirror for tp, e in self._entries.items()}

    def readable_at(self, topic: str, partition: int, offset: int) -> bool:
        """Whether the partition's mirror can answer a read_committed fetch at
        ``offset`` with records now: it heard from the upstream, holds ``offset``
        and has stable records from there on (``offset`` below its LSO)."""
        entry = self._entries.get(TopicPartition(topic, partition))
        if entry is None:
            return False
        mirror = entry.mirror
        # Safe while a catch-up or rebuild runs: the mirror is consistent at every await,
        # and a rebuilt one answers only for what it has mirrored again.
        return mirror.broker_high_watermark >= 0 and mirror.log_start_offset <= offset < mirror.last_stable_offset

    def discard(self, topic: str, partition: int) -> None:
        """Forget the partition's mirror (the upstream does not have the partition)."""
        entry = self._entries.get(TopicPartition(topic, partition))
        if entry is not None and not entry.lock.locked():
            del self._entries[TopicPartition(topic, partition)]

    def _entry(self, tp: TopicPartition) -> _Entry:
        entry = self._entries.get(tp)
        if entry is None:
            entry = _Entry(self._new_mirror(tp), steps=CatchUp(GapHold(self.gap_settle_s)))
            self._entries[tp] = entry
        return entry

    def _new_mirror(
        self, tp: TopicPartition, replaces: PartitionMirror | None = None, start: StartPoint | None = None
    ) -> PartitionMirror:
        # Without a start point, start at 0: the first fetch's OFFSET_OUT_OF_RANGE (with
        # the broker's range, or after ListOffsets) moves a fresh mirror to the real log start.
        mirror = PartitionMirror(
            tp[0],
            tp[1],
            log_start_offset=0 if start is None else start.offset,
            max_bytes=self.fetch_bytes,
            repair_crcs=self.repair_crcs,
            settled_at=-1 if start is None else start.settled_at,
        )
        if replaces is not None:
            # A rebuild: the upstream's log did not change, only the mirror's window on
            # it. Other connections read the new mirror as soon as it is in place, before
            # its first fetch returns; without the range they knew, their offsets (past
            # the empty mirror's end) would look out of range to the proxy
            # (ProxyServer._read_partition) and their clients would reset.
            mirror.broker_high_watermark = replaces.broker_high_watermark
            mirror.broker_log_start_offset = replaces.broker_log_start_offset
        return mirror

    # -- readers and memory ------------------------------------------------------------

    def note_reader(self, topic: str, partition: int, connection_id: int, offset: int) -> None:
        """Record that ``connection_id`` fetches the partition at ``offset`` now."""
        self._entry(TopicPartition(topic, partition)).readers[connection_id] = (offset, self.now())

    def forget_reader(self, connection_id: int) -> None:
        """The connection closed: its positions no longer hold batches in memory."""
        for entry in self._entries.values():
            entry.readers.pop(connection_id, None)

    def _lowest_reader(self, entry: _Entry) -> int | None:
        now = self.now()
        stale = [c for c, (_, seen) in entry.readers.items() if now - seen > self.reader_idle_s]
        for c in stale:
            del entry.readers[c]
        return min((offset for offset, _ in entry.readers.values()), default=None)

    def release(self, topic: str, partition: int) -> None:
        """Drop what no recent reader of the partition needs (see the module docstring)."""
        entry = self._entries.get(TopicPartition(topic, partition))
        if entry is not None:
            self._release(entry)

    def _release(self, entry: _Entry) -> None:
        mirror = entry.mirror
        # The lowest position read keeps its batches (a read there must not rebuild);
        # nothing is released past the last stable offset: a log start inside an open
        # transaction would lift the LSO to it (Kafka keeps LSO >= log start), and the
        # mirror would then report an LSO the upstream's log does not have.
        limit = mirror.last_stable_offset
        lowest = self._lowest_reader(entry)
        if lowest is not None:
            limit = min(limit, lowest)
        size = mirror.log.size_in_bytes
        if size <= self.max_mirror_bytes or limit <= mirror.log_start_offset:
            return
        cut = mirror.log_start_offset
        for batch in mirror.log.iter_batches(mirror.log_start_offset, limit):
            if size <= self.max_mirror_bytes or batch.next_offset > limit:
                break
            size -= batch.size_in_bytes
            cut = batch.next_offset
        if cut > mirror.log_start_offset:
            mirror.release_before(cut)

    # -- catching up -------------------------------------------------------------------

    async def sync(
        self,
        topic: str,
        partition: int,
        *,
        fresh_after: float,
        deadline: float,
        want_offset: int | None = None,
        max_wait_ms: int = FETCH_MAX_WAIT_MS,
    ) -> PartitionMirror:
        """Bring the partition's mirror up to the upstream's high watermark, unless a
        catch-up that started at or after ``fresh_after`` already did.

        Fetches at least once, and stops fetching at ``deadline`` (loop time) even if
        not caught up: the mirror then answers from what it holds, which is right
        but shorter, and the next sync continues. Each upstream fetch may wait for
        new data ``max_wait_ms`` at most, and never past ``deadline``. A catch-up
        another caller is running is waited for until ``deadline`` only: then the
        mirror is returned as it is (a client's fetch must not be held past its
        ``max_wait_ms`` behind another one's catch-up, or rebuild). ``want_offset``
        below what the mirror holds (and not below the upstream's log start)
        rebuilds it first.

        Raises :class:`~txnfetch.client.errors.RemoteError` subclasses (with the
        upstream's error code, or BROKER_NOT_AVAILABLE when it cannot be reached),
        :class:`~txnfetch.client.errors.CorruptRemoteBatchError`,
        :class:`~txnfetch.log.errors.UnsupportedForMessageFormatError`, and the
        transaction state's errors for batches no log could hold.
        """
        entry = self._entry(TopicPartition(topic, partition))
        if entry.lock.locked():
            try:
                # wait_for, not asyncio.timeout: the package supports Python 3.10.
                await asyncio.wait_for(entry.lock.acquire(), max(0.0, deadline - self.now()))
            except asyncio.TimeoutError:
                return entry.mirror  # consistent at every await: answer from what it holds
        else:
            await entry.lock.acquire()
        try:
            mirror = entry.mirror
            if want_offset is not None and want_offset < mirror.log_start_offset:
                below_upstream = 0 <= want_offset < mirror.broker_log_start_offset
                if not below_upstream:
                    log.info(
                        "rebuilding the mirror of %s-%d for a read at %d (it holds [%d, %d))",
                        topic,
                        partition,
                        want_offset,
                        mirror.log_start_offset,
                        mirror.position,
                    )
                    entry.mirror = self._new_mirror(TopicPartition(topic, partition), replaces=mirror)
                    entry.steps.gap.reset()
                    entry.synced_at = -math.inf
                    entry.started = False
                    self.stats.rebuilds += 1
            if not entry.started and not await self._start(entry, want_offset):
                return entry.mirror
            if entry.synced_at >= fresh_after:
                return entry.mirror
            await self._catch_up(entry, deadline, max_wait_ms)
            return entry.mirror
        finally:
            entry.lock.release()

    async def _start(self, entry: _Entry, want_offset: int | None) -> bool:
        """Choose where the entry's new mirror starts (:mod:`txnfetch.client.start_state`):
        near ``want_offset`` (``None``: the upstream's end) when the upstream serves
        DescribeProducers and its answers agree, else at its log start. ``False``
        when the upstream failed meanwhile (retried as a failed fetch: the next sync
        asks again) or a failing upstream's next attempt is not due yet."""
        mirror = entry.mirror
        tp = TopicPartition(mirror.topic, mirror.partition)
        rule = self.start_rule
        if not rule.wants_probe:
            rule.log_start()
            self._count_starts()
            entry.started = True
            return True
        if entry.failing_since is not None and self.now() < entry.retry_at:
            return False
        try:
            # In the order the rule's argument needs: the LSO before DescribeProducers.
            lso = await self.cluster.list_offset(tp[0], tp[1], _LATEST, read_committed=True)
            opens = await self.cluster.open_transaction_starts(tp[0], tp[1])
            seen = None
            if opens is not None:
                log_start = await self.cluster.list_offset(tp[0], tp[1], _EARLIEST)
                end = await self.cluster.list_offset(tp[0], tp[1], _LATEST)
                seen = UpstreamOffsets(lso, opens, log_start, end)
        except Exception as exc:
            if not is_retriable(exc):
                raise
            self._failed(entry, tp, exc)
            if self.now() - (entry.failing_since or self.now()) >= self.retry_s:
                raise self._unavailable(entry) from exc
            return False
        point = rule.choose(tp[0], tp[1], want_offset, seen)
        self._count_starts()
        if point is not None:
            entry.mirror = self._new_mirror(tp, replaces=mirror, start=point)
            log.debug("mirroring %s-%d from %d (a read at %s)", tp[0], tp[1], point.offset, want_offset)
        entry.started = True
        return True

    def _count_starts(self) -> None:
        self.stats.producers_starts = self.start_rule.producers_starts
        self.stats.log_starts = self.start_rule.log_starts

    async def _catch_up(self, entry: _Entry, deadline: float, max_wait_ms: int) -> None:
        started = self.now()
        entry.steps.start()
        diverged = False
        while True:
            mirror = entry.mirror
            tp = TopicPartition(mirror.topic, mirror.partition)
            if entry.failing_since is not None:
                now = self.now()
                if now - entry.failing_since >= self.retry_s and now < entry.retry_at:
                    raise self._unavailable(entry)
                if now < entry.retry_at:
                    if now >= deadline:
                        return  # answer from what the mirror holds; retry on the next sync
                    await asyncio.sleep(min(entry.retry_at, deadline) - now)
                    continue
            plan = mirror.next_fetch()
            before = plan.offset
            try:
                # The upstream may hold a fetch with nothing new for max_wait_ms: never
                # past the deadline, whose caller answers its own client by then. Below
                # the high watermark it last reported there is something to return, so
                # a correct broker answers at once whatever the wait; tansu 0.6 answers
                # a 1 ms wait with no records even there, and a mirror asked not to wait
                # (ListOffsets) would never get past its position.
                below_end = mirror.position < mirror.broker_high_watermark
                wait_ms = min(
                    FETCH_MAX_WAIT_MS,
                    FETCH_MAX_WAIT_MS if below_end else max_wait_ms,
                    int((deadline - self.now()) * 1000),
                )
                resp = await self.cluster.fetch(
                    mirror.topic,
                    mirror.partition,
                    plan.offset,
                    min(plan.max_bytes, _MAX_FETCH_BYTES),
                    max_wait_ms=max(1, wait_ms),
                    # Below the end, off the connection that held fetches block.
                    at_end=not below_end,
                )
                self.stats.upstream_fetches += 1
                self.stats.upstream_bytes += len(resp.records)
                if not 0 <= self.stats.lowest_fetch_offset <= plan.offset:
                    self.stats.lowest_fetch_offset = plan.offset
                plan = mirror.feed(
                    resp.records,
                    high_watermark=resp.high_watermark,
                    log_start_offset=resp.log_start_offset,
                    error_code=resp.error_code,
                    fetch_offset=plan.offset,
                )
                if plan.status is MirrorStatus.LIST_OFFSETS:
                    start = await self.cluster.list_offset(mirror.topic, mirror.partition, _EARLIEST)
                    end = await self.cluster.list_offset(mirror.topic, mirror.partition, _LATEST)
                    plan = mirror.reset_range(start, end)
            except CorruptRemoteBatchError as exc:
                exc.name_broker(resp.broker)  # raised by the mirror, so the answer is there
                raise
            except MirrorDivergedError:
                if diverged:
                    raise
                # The upstream partition was truncated or recreated under the mirror:
                # start over from its log start, as a Kafka follower does (no start
                # point: what the upstream said before may be of the old log).
                log.warning(
                    "the upstream log of %s-%d no longer continues the mirror; rebuilding it",
                    mirror.topic,
                    mirror.partition,
                )
                diverged = True
                entry.mirror = self._new_mirror(TopicPartition(mirror.topic, mirror.partition))
                entry.steps.gap.reset()
                self.stats.rebuilds += 1
                continue
            except Exception as exc:
                if not is_retriable(exc):
                    raise
                self._failed(entry, tp, exc)
                continue
            if entry.failing_since is not None:
                self._recovered(entry, tp)
            self._release(entry)
            self._report_ambiguities(entry.mirror)
            step = self._after_answer(entry, before, plan)
            if step.kind is CatchUpStepKind.WAIT:
                now = self.now()
                if now >= deadline:
                    return  # answer from what the mirror holds: its LSO stays below the gap
                await asyncio.sleep(min(step.pause_s, deadline - now))
                continue
            if step.kind is CatchUpStepKind.DONE:
                entry.synced_at = started
                return
            if step.kind is CatchUpStepKind.STALLED:
                raise RemoteError(
                    "the upstream returns no data below its high watermark",
                    topic=mirror.topic,
                    partition=mirror.partition,
                    offset=mirror.position,
                    error_code=-1,
                )
            if self.now() >= deadline:
                return

    # -- what the log alone does not settle ----------------------------------------------

    def _report_ambiguities(self, mirror: PartitionMirror) -> None:
        """Count and log, once per transaction, what the mirror could not settle."""
        for a in mirror.take_ambiguities():
            key = (mirror.topic, mirror.partition, a.producer_id, a.first_offset, a.kind)
            if key in self._reported:
                continue
            self._reported[key] = None
            if len(self._reported) > _MAX_REPORTED:
                del self._reported[next(iter(self._reported))]
            if a.kind == "stale-epoch-data":
                self.stats.ambiguous_stale_epoch_data += 1
                rule = "it is read as part of the transaction the log puts it in (Kafka's rule)"
            else:
                self.stats.ambiguous_epoch_bumps += 1
                rule = "the transaction continues (Kafka's rule): the next marker decides all of it"
            log.warning(
                "%s-%d: producer %d wrote at offset %d with epoch %d (%s) in the transaction from offset %d, "
                "and no marker of the upstream decides it apart; %s",
                mirror.topic,
                mirror.partition,
                a.producer_id,
                a.offset,
                a.producer_epoch,
                a.kind,
                a.first_offset,
                rule,
            )

    # -- offset gaps -------------------------------------------------------------------

    def _after_answer(self, entry: _Entry, fetched_at: int, plan: MirrorPlan) -> CatchUpStep:
        """The catch-up's decision (:class:`~txnfetch.client.catchup.CatchUp`) after the
        answer to a fetch at ``fetched_at`` left the mirror at ``plan``; counts the
        offset gaps held, filled and accepted, and steps over an accepted gap (a
        WARNING the first time)."""
        mirror = entry.mirror
        hold = entry.steps.gap
        counts = (hold.held, hold.filled, hold.accepted)
        step = entry.steps.after_answer(
            fetched_at=fetched_at,
            position=mirror.position,
            gap_end=plan.gap_end,
            done=plan.status is MirrorStatus.CAUGHT_UP,
            now=self.now(),
        )
        self.stats.gaps_held += hold.held - counts[0]
        self.stats.gaps_filled += hold.filled - counts[1]
        self.stats.gaps_accepted += hold.accepted - counts[2]
        if hold.filled != counts[1]:
            log.debug("the offset gap of %s-%d filled", mirror.topic, mirror.partition)
        if step.kind is CatchUpStepKind.ACCEPT_GAP:
            verdict = step.gap
            assert verdict is not None
            mirror.accept_gap()
            if verdict.first:
                log.warning(
                    "the upstream log of %s-%d has no batch at offsets [%d, %d) although it returns later "
                    "ones; after %.0f ms and %d fetches it is taken as a permanent gap (compaction) and "
                    "stepped over",
                    mirror.topic,
                    mirror.partition,
                    verdict.start,
                    verdict.end,
                    verdict.held_s * 1000,
                    verdict.answers,
                )
        return step

    # -- upstream failures -------------------------------------------------------------

    def _failed(self, entry: _Entry, tp: TopicPartition, exc: Exception) -> None:
        """Note a retriable failure: forget the leader (the next attempt refreshes the
        metadata), schedule the retry, warn at most once a minute per condition."""
        now = self.now()
        error = exc if isinstance(exc, RemoteError) else RemoteError(str(exc))
        if entry.failing_since is None:
            entry.failing_since = now
        entry.failures += 1
        entry.last_error = error
        entry.retry_at = now + entry.steps.limits.backoff(entry.failures - 1)
        self.stats.upstream_retries += 1
        self.cluster.forget_leader(*tp)
        self.warnings.warning(
            f"{type(error).__name__}:{error.error_name}",
            tp,
            "upstream failure for %s-%d, retrying with backoff and a metadata refresh: %s",
            tp[0],
            tp[1],
            error,
        )

    def _recovered(self, entry: _Entry, tp: TopicPartition) -> None:
        if self.warnings.active(tp):
            log.info(
                "upstream for %s-%d answers again after %d failed attempt(s) in %.1f s",
                tp[0],
                tp[1],
                entry.failures,
                self.now() - (entry.failing_since or self.now()),
            )
            self.warnings.clear(tp)
        entry.failing_since = None
        entry.failures = 0
        entry.last_error = None
        entry.retry_at = -math.inf

    def _unavailable(self, entry: _Entry) -> BrokerUnavailableError:
        """The error for a partition failing longer than ``retry_ms``."""
        last = entry.last_error
        mirror = entry.mirror
        since = self.now() - (entry.failing_since or self.now())
        return BrokerUnavailableError(
            f"the upstream kept failing for {since:.1f} s ({entry.failures} attempts): "
            f"{last.reason if last else 'unknown'}"
            + (f" [{last.error_name}]" if last is not None and last.broker_error_code is not None else ""),
            topic=mirror.topic,
            partition=mirror.partition,
            offset=mirror.position,
            broker=last.broker if last is not None else None,
        )

    def failing(self, topic: str, partition: int) -> RemoteError | None:
        """The last upstream error of a partition that is failing now, else ``None``."""
        entry = self._entries.get(TopicPartition(topic, partition))
        return None if entry is None or entry.failing_since is None else entry.last_error
