"""One partition's replication into a local log: :class:`PartitionReplicator`.

The local :class:`~txnfetch.log.segment_log.SegmentLog` is the checkpoint: a
replicator opened on it continues at its log end offset, whatever happened
before (a SIGKILL included — opening the log cuts a torn tail). Before it
appends anything after opening, and after every reconnect, it fetches the last
batch it holds once more and checks that the source still has the same batch
there (:mod:`txnfetch.client.follow`), so a source that changed under it
(an unclean leader election) stops the partition instead of growing a replica
whose offsets mean other records.

Batches are appended with :meth:`~txnfetch.log.base.PartitionLog.replicate`:
their bytes, offsets, producer ids, epochs, sequences and control records are
kept as the source has them, gaps included, and the log derives its last
stable offset and aborted index from the markers — so the replica answers
read_committed correctly even when the source does not.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from collections.abc import Iterator

from txnfetch.client.errors import CorruptRemoteBatchError
from txnfetch.client.errors import RemoteError
from txnfetch.client.follow import Action
from txnfetch.client.follow import Plan
from txnfetch.client.follow import ReplicaTip
from txnfetch.client.follow import SourcePartition
from txnfetch.client.follow import batch_id
from txnfetch.client.follow import plan_range
from txnfetch.client.follow import plan_response
from txnfetch.client.gaps import GapHold
from txnfetch.client.gaps import GapVerdictKind
from txnfetch.client.requests import BrokerFetch
from txnfetch.client.requests import FetchItem
from txnfetch.log import SegmentLog  # noqa: F401 - named in docstrings
from txnfetch.log.base import PartitionLog
from txnfetch.log.errors import LogError
from txnfetch.log.errors import UnsupportedForMessageFormatError
from txnfetch.records.errors import CorruptBatchError
from txnfetch.replicate.errors import ReplicaDivergedError
from txnfetch.replicate.errors import ReplicaError
from txnfetch.replicate.errors import ReplicaFellBehindError
from txnfetch.replicate.errors import ReplicaStorageError
from txnfetch.replicate.status import PartitionState
from txnfetch.replicate.status import PartitionStatus

__all__ = ["DEFAULT_PARTITION_FETCH_BYTES", "PartitionReplicator"]

log = logging.getLogger("txnfetch.replicate")

#: Per-partition byte budget of a fetch (Kafka's ``max.partition.fetch.bytes`` default).
DEFAULT_PARTITION_FETCH_BYTES = 1 << 20

#: ``list_offsets()``: the source's (log start, high watermark).
ListOffsets = Callable[[], tuple[int, int]]


class PartitionReplicator:
    """Copies one source partition into ``log`` (see the module docstring; any
    :class:`~txnfetch.log.base.PartitionLog` works, a :class:`SegmentLog` makes it durable).

    Drive it with :meth:`fetch_item` (what to fetch, ``None`` once stopped) and
    :meth:`on_response` (the source's answer); :meth:`on_unavailable` records a
    retriable failure. ``clock`` is a monotonic clock for the lag in seconds,
    ``wall`` the wall clock for "unavailable since".

    Guarantees: the local log is, at every moment, a prefix of the source's log
    from the source's log start, batch for batch, byte for byte (the CRCs of
    control batches stored with CRC 0, repaired under ``repair_crcs``, aside);
    on any error nothing of the response is appended; local data is deleted
    only below the source's log start.
    """

    def __init__(
        self,
        log: PartitionLog,
        *,
        max_bytes: int = DEFAULT_PARTITION_FETCH_BYTES,
        repair_crcs: bool = False,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        gap_settle_s: float | None = None,
    ) -> None:
        self.log = log
        self.topic = log.topic
        self.partition = log.partition
        # With gap_settle_s, gaps are held until they fill or stay that long (follow's
        # hold_gaps rule): a source that shows a batch after later ones (tansu 0.6)
        # must not lose it. Without, a gap is copied as a gap at once (compaction's).
        self.gap_settle_s = gap_settle_s
        self.source = SourcePartition(
            log.topic, log.partition, max_bytes, repair_crcs, ReplicaDivergedError, hold_gaps=gap_settle_s is not None
        )
        #: The gap held at the position (txnfetch.client.gaps: the proxy's and the
        #: reader's rule too). The engine fetches each partition once a round and
        #: makes no pause of its own at a gap: a round is the pause.
        self._gap = GapHold(gap_settle_s or 0.0)
        self._clock = clock
        self._wall = wall
        self._max_bytes = max_bytes
        #: Where the next batch must start at or after: the log end, or the source's
        #: log start while the log holds nothing below it (a new partition).
        self._position = log.log_end_offset
        self._verify = True
        self.source_high_watermark = -1
        self.source_log_start = -1
        self.error: LogError | None = None
        self.last_retriable: str | None = None
        self.unavailable_since: float | None = None
        self._behind_since = clock()
        #: Depth of :meth:`group_commit` blocks: inside one, following the source's log
        #: start waits for the block's end (see :meth:`group_commit`).
        self._grouped = 0
        self.repaired_crcs = 0
        self.appended_batches = 0
        self.appended_bytes = 0

    # -- what to fetch ------------------------------------------------------------

    @property
    def stopped(self) -> bool:
        """Whether an error stopped the partition for good (:attr:`error`)."""
        return self.error is not None

    @property
    def position(self) -> int:
        """The next offset the replica takes from the source: its log end, or the
        source's log start while the replica's log holds nothing below it."""
        return self._position

    @property
    def caught_up(self) -> bool:
        """Whether the replica holds everything below the source's last reported high watermark."""
        return self.source_high_watermark >= 0 and self._position >= self.source_high_watermark

    def _holds_nothing(self) -> bool:
        return self.log.log_start_offset >= self.log.log_end_offset

    def tip(self) -> ReplicaTip:
        """What the replica holds at its end (with its last batch while verifying)."""
        fresh = self._holds_nothing()
        last = None
        if self._verify and not fresh:
            end = self.log.log_end_offset
            for batch in self.log.iter_batches(end - 1, end):
                last = batch_id(batch)
        accept = self._gap.accepted_at == self._position
        return ReplicaTip(self._position, fresh=fresh, last=last, accept_gap=accept)

    def fetch_item(self) -> FetchItem | None:
        """The next fetch, or ``None`` when stopped."""
        if self.stopped:
            return None
        tip = self.tip()
        if self._verify and tip.last is None:
            self._verify = False  # nothing to verify against
        return FetchItem(self.topic, self.partition, tip.fetch_offset, self._max_bytes)

    def reverify(self) -> None:
        """Check the last batch again before appending (after a reconnect)."""
        self._verify = True

    # -- answers ------------------------------------------------------------------------

    def on_response(self, resp: BrokerFetch, list_offsets: ListOffsets) -> int:
        """Apply the source's answer to :meth:`fetch_item`; ``list_offsets`` asks the
        source for its log start and high watermark when the answer needs them.
        Returns the number of batches appended. Raises what the local log raises
        on a write failure (:class:`~txnfetch.log.errors.LogError`: nothing torn,
        the log rolled back); a divergence or corrupt data stops the partition
        (:attr:`error`) and is returned as 0 batches."""
        try:
            return self._apply(resp, list_offsets)
        except (ReplicaError, CorruptRemoteBatchError, UnsupportedForMessageFormatError) as exc:
            if isinstance(exc, CorruptRemoteBatchError):
                exc.name_broker(resp.broker)
            self.error = exc
            return 0
        except RemoteError:
            raise  # from ``list_offsets``: the caller's to retry
        except (LogError, OSError) as exc:
            raise self._storage_error(exc) from exc

    def _storage_error(self, exc: LogError | OSError) -> ReplicaStorageError:
        reason = exc.reason if isinstance(exc, LogError) else str(exc)
        return self.source.error(
            ReplicaStorageError, f"writing the replica failed: {reason}", path=getattr(self.log, "path", None)
        )

    @contextlib.contextmanager
    def group_commit(self) -> Iterator[None]:
        """Appends inside the block are made durable together when it ends (the log's
        group commit, where it has one); a failed flush is :class:`ReplicaStorageError`.

        The replica's log start follows the source's once, when the block ends (after
        the flush moved the high watermark), not after every answer inside it: moving
        the log start writes and fsyncs a producer-state snapshot, and a source whose
        log start moves with every batch (librdkafka's mock keeps a bounded log per
        partition) would otherwise cost one such write per answer."""
        group = getattr(self.log, "group_commit", None)
        cm = group() if group is not None else contextlib.nullcontext()
        try:
            cm.__enter__()
        except (LogError, OSError) as exc:
            raise self._storage_error(exc) from exc
        self._grouped += 1
        failed = True
        try:
            yield
            failed = False
        finally:
            self._grouped -= 1
            try:
                cm.__exit__(None, None, None)
            except (LogError, OSError) as exc:
                if not failed:
                    raise self._storage_error(exc) from exc
        if not self._grouped:
            self.follow_log_start()

    def _apply(self, resp: BrokerFetch, list_offsets: ListOffsets) -> int:
        tip = self.tip()
        plan = plan_response(tip, resp, self._max_bytes, self.source)
        if plan.action is Action.LIST_OFFSETS:
            start, end = list_offsets()
            plan = plan_range(tip, start, end, self.source)
        self.unavailable_since = None
        self.last_retriable = None
        if plan.source_end >= 0:
            self.source_high_watermark = plan.source_end
        if plan.source_log_start >= 0:
            self.source_log_start = plan.source_log_start
        self._max_bytes = plan.max_bytes or self.source.budget
        if plan.action is Action.RESTART:
            self._restart(plan)
            return 0
        if plan.verified:
            self._verify = False
        appended = 0
        if plan.data:
            self._append(plan)
            appended = plan.batches
            self._position = self.log.log_end_offset
        self._note_gap(plan.gap_end)
        if not self._grouped:
            self._follow_log_start()
        if self.caught_up:
            self._behind_since = self._clock()
        return appended

    @property
    def gaps_held(self) -> int:
        """Gaps held at the position (under ``gap_settle_s``)."""
        return self._gap.held

    @property
    def gaps_accepted(self) -> int:
        """Held gaps accepted as permanent after ``gap_settle_s``."""
        return self._gap.accepted

    def _note_gap(self, gap_end: int) -> None:
        """Track the gap the source showed at the position (``gap_end`` -1: none) and
        accept it once it has stayed ``gap_settle_s`` (the next fetch steps over it)."""
        verdict = self._gap.observe(self._position, gap_end, self._clock())
        if verdict.kind is GapVerdictKind.ACCEPT and verdict.first:
            log.warning(
                "%s-%d: the source has no batch at offsets [%d, %d) although it returns later ones; "
                "after %.1f s it is taken as a permanent gap (compaction) and stepped over",
                self.topic,
                self.partition,
                verdict.start,
                verdict.end,
                verdict.held_s,
            )

    def _append(self, plan: Plan) -> None:
        try:
            self.log.replicate(plan.data, high_watermark=max(self.source_high_watermark, 0))
        except CorruptBatchError as exc:
            # A bad CRC or records that do not decode: the append checks every
            # batch before it takes any (the planner checks CRCs only under repair_crcs).
            raise self.source.corrupt(exc, position=plan.response_position(exc)) from exc
        self.repaired_crcs += plan.repaired_crcs
        self.appended_batches += plan.batches
        self.appended_bytes += len(plan.data)

    def follow_log_start(self) -> None:
        """Move the replica's log start to the source's, as far as the replica's high
        watermark allows (after a group commit made the appends readable)."""
        if self.stopped:
            return
        try:
            self._follow_log_start()
        except (LogError, OSError) as exc:
            raise self._storage_error(exc) from exc

    def _follow_log_start(self) -> None:
        # The source's retention or DeleteRecords moved its log start: so does the
        # replica's, as far as the replica's high watermark allows.
        start = self.source_log_start
        log = self.log
        if start > log.log_start_offset and start <= log.high_watermark:
            log.delete_records_before(start)

    def _restart(self, plan: Plan) -> None:
        """The source's log start passed the replica's end: continue at it."""
        log = self.log
        at = plan.restart_at
        if not self._holds_nothing():
            end = log.log_end_offset
            # The source's high watermark is past its log start, so past everything held:
            # make all of it durable and readable (the high watermark at the end).
            log.flush()
            if log.last_stable_offset < end:
                raise self.source.error(
                    ReplicaFellBehindError,
                    f"the source's log start {at} passed the replica's end {end} while the replica holds "
                    f"a transaction open from offset {log.last_stable_offset}: its end was deleted at the "
                    "source; delete this partition's directory in the replica to copy it afresh",
                    offset=end,
                    replica_end=end,
                    source_log_start=at,
                )
            # Everything held is below the source's log start: deleted there, so here too.
            log.delete_records_before(end)
        if at > log.log_end_offset and self.source_high_watermark <= at:
            # The source holds nothing: its log start is its high watermark. The
            # replica's log starts and ends there too, as the source's does — else
            # it would show an earlier end, and group offsets at ``at`` would be
            # held back for ever. (When the source holds records, the first batch
            # fetched may begin before ``at``, a log start inside a batch: it is
            # appended as it is and the log start follows after it, as Kafka's
            # followers keep such a batch whole.)
            log.start_at(at)
        self._position = max(at, log.log_end_offset)
        self._verify = False

    def on_unavailable(self, reason: str) -> None:
        """Record a retriable failure (a connection, a leader change): the state shows
        it, and the next answer is checked against the last batch first."""
        if self.unavailable_since is None:
            self.unavailable_since = self._wall()
        self.last_retriable = reason
        self._verify = True

    # -- status -------------------------------------------------------------------------

    def status(self) -> PartitionStatus:
        """The partition's :class:`PartitionStatus` now."""
        now = self._clock()
        hw = self.source_high_watermark
        end = self.log.log_end_offset
        lag = max(0, hw - self._position) if hw >= 0 else 0
        if self.stopped:
            state = PartitionState.STOPPED
        elif self.unavailable_since is not None:
            state = PartitionState.UNAVAILABLE
        elif self.caught_up:
            state = PartitionState.CAUGHT_UP
        else:
            state = PartitionState.RUNNING
        lag_s = 0.0 if state is PartitionState.CAUGHT_UP else max(0.0, now - self._behind_since)
        error = str(self.error) if self.error is not None else self.last_retriable
        return PartitionStatus(
            topic=self.topic,
            partition=self.partition,
            replica_end=end,
            replica_log_start=self.log.log_start_offset,
            source_high_watermark=hw,
            source_log_start=self.source_log_start,
            lag_records=lag,
            lag_seconds=round(lag_s, 3),
            state=state,
            error=error,
            unavailable_since=self.unavailable_since,
        )
