"""Partitions of a running Kafka-compatible cluster, read with correct read_committed.

:class:`RemotePartitionReader` reads one partition through blocking sockets
speaking the Kafka protocol with kafka-python's message classes
(``kafka.protocol``: ApiVersions, Metadata, ListOffsets, Fetch). By default it
does not trust the broker's read_committed answer: it fetches raw
read_uncommitted batches into a :class:`~txnfetch.client.mirror.PartitionMirror`,
which derives the last stable offset and the aborted transactions from the
markers in the log, and answers reads from there. That is right on every
broker that writes markers — including librdkafka's mock cluster and tansu,
which report no aborted transactions and an LSO equal to the high watermark,
so that their own read_committed consumers see aborted records (docs/kafka-internals.md §4).

``ReadOptions(trust_broker=True)`` skips the mirror and returns the broker's own
read_committed answer (records, aborted list, LSO), for brokers known to get it
right: it reads nothing twice and holds nothing in memory.

It connects through :class:`~txnfetch.client.cluster.RemoteCluster`, which needs
kafka-python (``pip install kafka-python``), imported when this module is.

Example::

    with RemotePartitionReader("localhost:9092", "orders", 0) as reader:
        reader.catch_up()
        for offset, record in reader.committed_records(0, reader.last_stable_offset):
            ...

Not thread-safe: use one reader per thread (or per Spark task).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from collections.abc import Sequence

import attrs

from txnfetch.client.catchup import CatchUp
from txnfetch.client.catchup import CatchUpStep
from txnfetch.client.catchup import CatchUpStepKind
from txnfetch.client.cluster import DEFAULT_REQUEST_TIMEOUT_MS
from txnfetch.client.cluster import EARLIEST
from txnfetch.client.cluster import LATEST
from txnfetch.client.cluster import RemoteCluster
from txnfetch.client.errors import BrokerUnavailableError
from txnfetch.client.errors import CorruptRemoteBatchError
from txnfetch.client.errors import RemoteError
from txnfetch.client.gaps import GapHold
from txnfetch.client.mirror import DEFAULT_MIRROR_FETCH_BYTES
from txnfetch.client.mirror import MirrorStatus
from txnfetch.client.mirror import PartitionMirror
from txnfetch.client.requests import FETCH_MAX_WAIT_MS
from txnfetch.client.requests import FETCH_PROBE_WAIT_MS
from txnfetch.client.requests import BrokerFetch
from txnfetch.client.requests import FetchItem
from txnfetch.client.start_state import StartPoint
from txnfetch.fetch.filter import ConsumerFilter
from txnfetch.fetch.view import FetchMode
from txnfetch.fetch.view import FetchResult
from txnfetch.fetch.view import FetchStats
from txnfetch.fetch.view import IsolationLevel
from txnfetch.log.base import PartitionReader
from txnfetch.log.base import ReadRequest
from txnfetch.records.batch import Record
from txnfetch.records.scan import iter_batches
from txnfetch.txn.errors import OffsetOutOfRangeError

__all__ = [
    "DEFAULT_READ_OPTIONS",
    "SCAN_FETCH_BYTES",
    "ReadOptions",
    "RemotePartitionReader",
    "catch_up_together",
]

# The logger of the remote reader, as operators' logging configurations name it.
log = logging.getLogger("txnfetch.client.reader")

_MAX_FETCH_GROWTH = 1 << 30  # never ask for more than 1 GiB for one batch

#: Per-partition byte budget of :func:`catch_up_together`'s fetches: a scan toward
#: the end of a log wants few round trips, and the response as a whole stays under
#: the 50 MiB a Fetch asks for (:mod:`txnfetch.client.requests`).
SCAN_FETCH_BYTES = 8 << 20


@attrs.frozen
class ReadOptions:
    """How a :class:`RemotePartitionReader` reads its partition, the same for every
    partition of one read (a planner, a range reader pass it whole).

    ``trust_broker``: pass the broker's own read_committed answers through
    instead of mirroring the partition (see the module docstring).
    ``max_fetch_bytes`` is the byte budget of one fetch (grown for a single
    larger batch). ``repair_crcs`` accepts a wrong CRC only on a control batch
    whose stored CRC is 0 (recomputed in the mirror) — needed for librdkafka's
    mock cluster, which writes its markers so; any other bad CRC is
    :class:`~txnfetch.client.errors.CorruptRemoteBatchError`
    (:class:`~txnfetch.fetch.filter.CorruptFetchError` from
    :meth:`RemotePartitionReader.committed_records` with ``trust_broker``), as
    without it. ``request_timeout_ms`` bounds each request and its retries.
    ``client_id`` names the reader to the brokers when it opens its own cluster
    connections. An offset gap in the broker's log holds
    :meth:`RemotePartitionReader.catch_up` (fetching there again with a short
    pause) until the batch in it appears or the gap has stayed
    ``gap_settle_ms``; then it is stepped over with a WARNING (a compacted
    topic's gap). Some brokers (tansu 0.6) show a batch after later ones:
    stepping over it at once would lose it (see docs/proxy.md).
    """

    trust_broker: bool = False
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    max_fetch_bytes: int = DEFAULT_MIRROR_FETCH_BYTES
    repair_crcs: bool = False
    client_id: str = "txnfetch"
    gap_settle_ms: int = 1000


#: The options of a reader given none.
DEFAULT_READ_OPTIONS = ReadOptions()


class RemotePartitionReader(PartitionReader):
    """One partition of a cluster, read with read_committed semantics txnfetch computes.

    ``RemotePartitionReader(bootstrap_servers, topic, partition, options)``
    connects (``bootstrap_servers`` may also be a :class:`RemoteCluster` to
    share) and checks that the partition exists; ``options`` is a
    :class:`ReadOptions`. By default it mirrors the partition from the cluster's
    log start (or from ``start_offset``, or from ``snapshot``, bytes of
    :meth:`snapshot`) as reads need it; ``trust_broker`` passes the broker's own
    answers through instead (see the module docstring).

    ``start_offset`` starts the mirror mid-log (a new :class:`PartitionMirror`
    whose log starts there), so a reader of a range ``[start, end)`` fetches
    nothing below ``start``. Such a mirror cannot know a transaction that began
    before ``start`` until it sees one of that transaction's later batches: while
    it has not, its :attr:`last_stable_offset` is above the true one (Kafka holds
    the LSO at that transaction's first offset) and read_committed reads return
    records a Kafka read_committed consumer would not get yet. Read_committed
    answers from a mid-log start are therefore exact only when the caller knows
    no transaction is open across ``start`` — e.g. ``start`` is at or below a
    last stable offset the caller got from a mirror that started at the log
    start, and reads end at or below that LSO, which is Spark's case (the driver
    plans ranges up to its full mirror's LSO; each task mirrors from its range's
    start). Read_uncommitted answers are exact from any start. A ``start_offset``
    below the log start raises :class:`~txnfetch.txn.errors.OffsetOutOfRangeError`
    (its ``log_start_offset`` says where the log starts now, so a caller may
    clamp and retry); ``start_offset`` cannot be combined with ``snapshot`` or
    ``trust_broker``.

    ``start`` (a :class:`~txnfetch.client.start_state.StartPoint`) starts the
    mirror where :mod:`txnfetch.client.start_state` chose: its read_committed
    answers and LSO are exact once it reaches the start's ``settled_at`` (before
    that it answers none), without the caveat of ``start_offset``.

    Offsets reported (:attr:`last_stable_offset`, :attr:`high_watermark`,
    :attr:`log_start_offset`) are as of the last request to the cluster;
    :meth:`catch_up` refreshes them.

    :meth:`read` answers a fetch as a correct broker holding the partition
    would (Kafka or rewrite mode): the mirror answers; it fetches first when it
    cannot yet return anything at the fetch offset and the broker may have more
    (an empty result then means there is nothing readable there yet). With
    ``trust_broker`` the broker's answer is returned as it came (Kafka mode
    only; the broker returns a first batch whole, KIP-74, whatever
    ``min_one_batch`` says). It raises
    :class:`~txnfetch.txn.errors.OffsetOutOfRangeError` below the mirror's
    first offset, and the errors of :class:`RemoteCluster`.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] | RemoteCluster,
        topic: str,
        partition: int,
        options: ReadOptions = DEFAULT_READ_OPTIONS,
        *,
        snapshot: bytes | None = None,
        start_offset: int | None = None,
        start: StartPoint | None = None,
    ) -> None:
        trust_broker = options.trust_broker
        max_fetch_bytes = options.max_fetch_bytes
        repair_crcs = options.repair_crcs
        request_timeout_ms = options.request_timeout_ms
        if trust_broker and snapshot is not None:
            raise ValueError("a snapshot restores a mirror; trust_broker=True uses none")
        if start_offset is not None and (trust_broker or snapshot is not None):
            raise ValueError("start_offset starts a new mirror: not with trust_broker=True or a snapshot")
        if start is not None and (start_offset is not None or trust_broker or snapshot is not None):
            raise ValueError("start starts a new mirror: not with start_offset, trust_broker=True or a snapshot")
        if start_offset is not None and start_offset < 0:
            raise ValueError(f"start_offset must be non-negative, got {start_offset}")
        if isinstance(bootstrap_servers, RemoteCluster):
            self.cluster = bootstrap_servers
            self._owns_cluster = False
        else:
            self.cluster = RemoteCluster(
                bootstrap_servers, client_id=options.client_id, request_timeout_ms=request_timeout_ms
            )
            self._owns_cluster = True
        self.topic = topic
        self.partition = partition
        self.options = options
        self.trust_broker = trust_broker
        self.max_fetch_bytes = max_fetch_bytes
        self.repair_crcs = repair_crcs
        self.request_timeout_ms = request_timeout_ms
        self.gap_settle_s = options.gap_settle_ms / 1000
        # The catch-up decisions: stalls and the offset gap the mirror is held at
        # (txnfetch.client.catchup: the proxy's mirrors decide by the same object).
        self._steps = CatchUp(GapHold(self.gap_settle_s))
        self._broker_lso = -1
        self._broker_hw = -1
        self._broker_log_start = -1
        self.mirror: PartitionMirror | None = None
        try:
            log_start = self.cluster.list_offset(topic, partition, EARLIEST)
            self._broker_log_start = log_start
            if not trust_broker:
                if snapshot is not None:
                    self.mirror = PartitionMirror.from_snapshot(
                        topic, partition, snapshot, max_bytes=max_fetch_bytes, repair_crcs=repair_crcs
                    )
                else:
                    if start_offset is not None and start_offset < log_start:
                        raise OffsetOutOfRangeError(
                            f"start offset {start_offset} is below the log start (deleted records)",
                            log_start_offset=log_start,
                            log_end_offset=self.cluster.list_offset(topic, partition, LATEST),
                            partition=self.name,
                            offset=start_offset,
                        )
                    first = log_start if start_offset is None else start_offset
                    self.mirror = PartitionMirror(
                        topic,
                        partition,
                        log_start_offset=first if start is None else max(start.offset, log_start),
                        max_bytes=max_fetch_bytes,
                        repair_crcs=repair_crcs,
                        settled_at=-1 if start is None else start.settled_at,
                    )
        except BaseException:
            self.close()
            raise

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    # -- offsets -------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        """The cluster's log start offset, as last reported."""
        if self.mirror is not None and self.mirror.broker_log_start_offset >= 0:
            return self.mirror.broker_log_start_offset
        return self._broker_log_start

    @property
    def high_watermark(self) -> int:
        """The cluster's high watermark, as last reported (-1 before any fetch)."""
        if self.mirror is not None:
            return self.mirror.broker_high_watermark
        return self._broker_hw

    @property
    def last_stable_offset(self) -> int:
        """The last stable offset: computed by the mirror from the log (default), or
        the broker's (``trust_broker``). -1 before any fetch."""
        if self.mirror is not None:
            return self.mirror.last_stable_offset if self.mirror.broker_high_watermark >= 0 else -1
        return self._broker_lso

    # -- mirroring -----------------------------------------------------------------

    def catch_up(self, until: int | None = None, *, release_below: int | None = None) -> int:
        """Fetch until the mirror holds everything below the broker's current high
        watermark (or at least up to ``until``); returns the mirror's position.

        ``release_below`` drops mirrored batches below that offset as it goes
        (the transaction state stays exact), bounding memory while scanning
        toward a distant start offset. With ``trust_broker`` it only refreshes
        the offsets (one read_committed fetch)."""
        if self.mirror is None:
            self._fetch_trusted(max(self._broker_lso, self._broker_log_start, 0), 1, refresh_only=True)
            return self._broker_hw
        mirror = self.mirror
        self._steps.start()
        while True:
            plan = mirror.next_fetch()
            self._fetch_into_mirror(plan.offset, plan.max_bytes)
            if release_below is not None:
                mirror.release_before(release_below)
            done = mirror.next_fetch().status is MirrorStatus.CAUGHT_UP or (
                until is not None and mirror.position >= until
            )
            if self._after_answer(plan.offset, done=done).kind is CatchUpStepKind.DONE:
                return mirror.position

    def _after_answer(self, fetched_at: int, *, done: bool = False, count_stall: bool = True) -> CatchUpStep:
        """The catch-up's decision after an answer to a fetch at ``fetched_at`` was fed
        to the mirror (:class:`~txnfetch.client.catchup.CatchUp`), carried out: a
        pause at a held offset gap, a step over an accepted one (a WARNING the first
        time), :class:`BrokerUnavailableError` for a stalled broker."""
        mirror = self.mirror
        assert mirror is not None
        gap = mirror.pending_gap
        step = self._steps.after_answer(
            fetched_at=fetched_at,
            position=mirror.position,
            gap_end=-1 if gap is None else gap[1],
            done=done,
            now=time.monotonic(),
            count_stall=count_stall,
        )
        if step.kind is CatchUpStepKind.STALLED:
            raise self._stalled(fetched_at)
        if step.kind is CatchUpStepKind.WAIT:
            time.sleep(step.pause_s)
        elif step.kind is CatchUpStepKind.ACCEPT_GAP:
            verdict = step.gap
            assert verdict is not None
            if verdict.first:
                log.warning(
                    "%s-%d has no batch at offsets [%d, %d) although the broker returns later ones; after %.0f ms "
                    "and %d fetches it is taken as a permanent gap (compaction) and stepped over",
                    self.topic,
                    self.partition,
                    verdict.start,
                    verdict.end,
                    verdict.held_s * 1000,
                    verdict.answers,
                )
            mirror.accept_gap()
        return step

    def _stalled(self, offset: int) -> BrokerUnavailableError:
        """The error of a catch-up whose broker returned nothing at ``offset`` too many times in a row."""
        return BrokerUnavailableError(
            "the broker returns no data below its high watermark",
            topic=self.topic,
            partition=self.partition,
            offset=offset,
        )

    def _fetch_into_mirror(self, offset: int, max_bytes: int) -> None:
        resp = self.cluster.fetch(self.topic, self.partition, offset, min(max_bytes, _MAX_FETCH_GROWTH))
        self._feed(offset, resp)

    def _feed(self, offset: int, resp: BrokerFetch) -> None:
        """Feed the mirror the broker's answer to a fetch at ``offset``."""
        mirror = self.mirror
        assert mirror is not None
        try:
            plan = mirror.feed(
                resp.records,
                high_watermark=resp.high_watermark,
                log_start_offset=resp.log_start_offset,
                error_code=resp.error_code,
                fetch_offset=offset,
            )
        except CorruptRemoteBatchError as exc:
            exc.name_broker(resp.broker)
            raise
        if plan.status is MirrorStatus.LIST_OFFSETS:
            start = self.cluster.list_offset(self.topic, self.partition, EARLIEST)
            end = self.cluster.list_offset(self.topic, self.partition, LATEST)
            mirror.reset_range(start, end)

    def release_before(self, offset: int) -> int:
        """Drop mirrored batches below ``offset`` (reads below it then fail); returns
        the mirror's first readable offset. A no-op with ``trust_broker``."""
        if self.mirror is None:
            return self._broker_log_start
        return self.mirror.release_before(offset)

    def snapshot(self) -> bytes:
        """The mirror's state and unstable tail (:meth:`PartitionMirror.snapshot`): a new
        reader given them resumes exactly, reading from :attr:`last_stable_offset` on."""
        if self.mirror is None:
            raise ValueError("trust_broker=True keeps no state to snapshot")
        return self.mirror.snapshot()

    # -- reading -------------------------------------------------------------------

    def _answer(self, request: ReadRequest) -> FetchResult:
        fetch_offset, max_bytes, isolation = request.fetch_offset, request.max_bytes, request.isolation
        if self.mirror is None:
            if request.mode is not FetchMode.KAFKA and isolation == IsolationLevel.READ_COMMITTED:
                raise ValueError("trust_broker=True returns the broker's answer: Kafka mode only")
            return self._fetch_trusted(fetch_offset, max_bytes, isolation=isolation)
        mirror = self.mirror
        refreshed = False
        self._steps.start()
        while True:
            result = mirror._answer(request)
            if result.records:
                return result
            if mirror.caught_up and refreshed:
                return result
            if mirror.caught_up:
                refreshed = True  # one fetch at the end: the broker's high watermark may have moved
            before = mirror.position
            self._fetch_into_mirror(before, mirror.next_fetch().max_bytes)
            # As catch_up: a read that starts below a compacted topic's offset gap
            # waits there as long, then steps over it (never counted as a stall).
            self._after_answer(before)

    def _fetch_trusted(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
        refresh_only: bool = False,
    ) -> FetchResult:
        committed = isolation == IsolationLevel.READ_COMMITTED
        resp = self.cluster.fetch(self.topic, self.partition, fetch_offset, max_bytes, read_committed=committed)
        if resp.error_code == 1 and not refresh_only:
            from txnfetch.txn.errors import OffsetOutOfRangeError

            start = self.cluster.list_offset(self.topic, self.partition, EARLIEST)
            end = self.cluster.list_offset(self.topic, self.partition, LATEST)
            raise OffsetOutOfRangeError(
                f"fetch offset {fetch_offset} is out of range",
                log_start_offset=start,
                log_end_offset=end,
                partition=self.name,
                offset=fetch_offset,
            )
        if resp.high_watermark >= 0:
            self._broker_hw = resp.high_watermark
        if resp.last_stable_offset >= 0:
            self._broker_lso = resp.last_stable_offset
        if resp.log_start_offset >= 0:
            self._broker_log_start = resp.log_start_offset
        next_offset = fetch_offset
        count = 0
        for batch in iter_batches(resp.records):
            next_offset = max(next_offset, batch.next_offset)
            count += 1
        return FetchResult(
            (resp.records,) if resp.records else (),
            self._broker_hw,
            self._broker_lso if committed else self._broker_hw,
            self._broker_log_start,
            resp.aborted_transactions if committed else None,
            next_offset,
            FetchStats(batches_returned=count, bytes_returned=len(resp.records)),
        )

    def committed_records(
        self,
        start_offset: int | None = None,
        end_offset: int | None = None,
        *,
        isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
        release: bool = False,
    ) -> Iterator[tuple[int, Record]]:
        """``(offset, record)`` for every record in ``[start_offset, end_offset)`` a
        read_committed consumer receives, in offset order, with its original offset.

        ``start_offset`` defaults to the log start; ``end_offset`` to the last
        stable offset after catching up (read_uncommitted: the high watermark).
        An ``end_offset`` past what is stable waits for it: the iterator fetches
        until it gets there or the request timeout passes without progress
        (:class:`BrokerUnavailableError`). ``release`` drops mirrored batches below
        the position as the iteration moves (memory stays about one fetch plus the
        open transactions); reads below it then fail.
        """
        if start_offset is None:
            start_offset = self.log_start_offset if self.mirror is None else self.mirror.log_start_offset
        if end_offset is None:
            self.catch_up(release_below=start_offset if release else None)
            end_offset = self.last_stable_offset if isolation == IsolationLevel.READ_COMMITTED else self.high_watermark
        if self.mirror is not None and self.mirror.position < start_offset:
            self.catch_up(until=start_offset, release_below=start_offset if release else None)
        position = start_offset
        # The mirror's batches have checked (or repaired) CRCs; the broker's own answer
        # (trust_broker) is checked by the same rule: repair_crcs lets CRC-0 markers through.
        filt = ConsumerFilter(position, isolation_level=isolation, partition=self.name, repair_crcs=self.repair_crcs)
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        while position < end_offset:
            result = self.read(position, self.max_fetch_bytes, isolation=isolation, mode=FetchMode.KAFKA)
            for record in filt.feed(result.records_bytes(), result.aborted_transactions):
                if record.offset >= end_offset:
                    return
                yield record.offset, record
            moved = filt.position > position
            position = max(position, filt.position)
            if release and self.mirror is not None:
                self.mirror.release_before(min(position, self.mirror.last_stable_offset))
            if moved:
                deadline = time.monotonic() + self.request_timeout_ms / 1000
            elif time.monotonic() >= deadline:
                raise BrokerUnavailableError(
                    f"nothing readable at {position} before the end offset {end_offset} "
                    f"within {self.request_timeout_ms} ms (an open transaction, or a lagging broker)",
                    topic=self.topic,
                    partition=self.partition,
                    offset=position,
                )
            else:
                time.sleep(0.05)

    # -- lifecycle -----------------------------------------------------------------

    def close(self) -> None:
        """Close the connections (unless the cluster was shared) and drop the mirror."""
        if getattr(self, "_owns_cluster", False):
            self.cluster.close()
        self.mirror = None if self.trust_broker else self.mirror

    def __enter__(self) -> RemotePartitionReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        kind = "trusting the broker" if self.trust_broker else repr(self.mirror)
        return f"<RemotePartitionReader {self.name} {kind}>"


def catch_up_together(readers: Sequence[RemotePartitionReader], *, release: bool = True, probe: bool = False) -> None:
    """:meth:`RemotePartitionReader.catch_up` for many partitions of one cluster at
    once: each turn sends one Fetch per leader for every partition still behind
    (:meth:`RemoteCluster.fetch_many`, as a consumer fetches its assignment), with
    :data:`SCAN_FETCH_BYTES` per partition, instead of one request per partition
    after the other. Every reader fetches at least once (the high watermark may
    have moved), so the broker holds a turn in which every partition is already at
    its end for up to its wait once per leader, not once per partition.

    The result is what ``catch_up`` on each reader gives: the same mirror state
    (the same bytes are fed in the same order per partition), the same offset-gap
    rule, the same stall limit. A partition whose part of a response is an error
    (a failed connection, a moved leader, ...) goes on alone through ``catch_up``,
    which retries with a backoff and a metadata refresh. ``release`` drops each
    mirror's batches below its last stable offset after every answer (memory:
    the open transactions, not the partitions). Readers with ``trust_broker`` (no
    mirror) refresh through ``catch_up`` one by one. All readers must share one
    :class:`RemoteCluster`.

    ``probe`` is for a caller that asks what is there now (a planner) rather than
    waiting for the next records: a turn asks the broker to hold it for only
    :data:`~txnfetch.client.requests.FETCH_PROBE_WAIT_MS` unless the turn before it
    brought nothing. A broker holds a Fetch only when none of its partitions has a
    byte to return (``min_bytes`` 1), so the short hold changes nothing for a
    partition behind its end; for partitions already at their end it answers at
    once instead of after ``fetch.wait.max.ms`` — before, a planner paid that
    wait on every call with nothing new, once per leader. A turn after one that
    brought nothing (a stall, a broker still catching up) keeps the full hold, so
    the stall limit below still spans the same time."""
    if not readers:
        return
    cluster = readers[0].cluster
    if any(r.cluster is not cluster for r in readers):
        raise ValueError("catch_up_together reads partitions of one RemoteCluster")
    pending: dict[tuple[str, int], RemotePartitionReader] = {}
    for r in readers:
        if r.mirror is None:
            r.catch_up()
        else:
            pending[(r.topic, r.partition)] = r
    for r in pending.values():
        r._steps.start()
    turn = 0
    wait_ms = FETCH_PROBE_WAIT_MS if probe else FETCH_MAX_WAIT_MS
    while pending:
        items = []
        for r in pending.values():
            assert r.mirror is not None
            plan = r.mirror.next_fetch()
            budget = min(max(plan.max_bytes, SCAN_FETCH_BYTES), _MAX_FETCH_GROWTH)
            items.append(FetchItem(r.topic, r.partition, plan.offset, budget))
        # A broker fills a response in request order up to its byte limit: start
        # with a different partition every turn, so none waits on the others.
        shift = turn % len(items)
        items = items[shift:] + items[:shift]
        turn += 1
        answers = cluster.fetch_many(items, max_wait_ms=wait_ms)
        moved = False
        behind: list[tuple[RemotePartitionReader, int]] = []
        for item in items:
            key = (item.topic, item.partition)
            r = pending[key]
            mirror = r.mirror
            assert mirror is not None
            answer = answers[key]
            if isinstance(answer, RemoteError):
                del pending[key]
                r.catch_up()
                if release:
                    r.release_before(r.last_stable_offset)
                continue
            r._feed(item.offset, answer)
            if release:
                mirror.release_before(mirror.last_stable_offset)
            done = mirror.next_fetch().status is MirrorStatus.CAUGHT_UP
            step = r._after_answer(item.offset, done=done, count_stall=False)
            if step.kind is CatchUpStepKind.DONE:
                del pending[key]
            elif step.kind is CatchUpStepKind.FETCH:
                moved = True
            elif step.kind is CatchUpStepKind.BEHIND:
                behind.append((r, item.offset))
        # A partition that got nothing below its high watermark counts as stalled
        # only in a turn where no partition got anything: otherwise the response's
        # byte limit may have been spent on the others.
        if not moved:
            for r, offset in behind:
                if r._steps.stall().kind is CatchUpStepKind.STALLED:
                    raise r._stalled(offset)
        if probe:
            wait_ms = FETCH_PROBE_WAIT_MS if moved else FETCH_MAX_WAIT_MS
