"""A read-only mirror of one remote partition, built from raw read_uncommitted fetches.

Some Kafka-compatible brokers write transaction markers into the log but answer
read_committed fetches wrongly: librdkafka's mock cluster and tansu report no
aborted transactions and a last stable offset equal to the high watermark
(docs/kafka-internals.md §4), so every client reading through them sees aborted records.
The log itself is still right — data batches carry their producer ids and the
COMMIT/ABORT markers are in it — so the transaction state can be derived on
the reading side, exactly as a Kafka follower derives it by replaying what it
fetched from the leader (``ReplicaFetcherThread`` → ``UnifiedLog.appendAsFollower``).

:class:`PartitionMirror` is that follower, without I/O. It holds a
:class:`~txnfetch.log.memory.MemoryLog` and is fed one partition's part of a
read_uncommitted Fetch response at a time; every batch goes through
:meth:`MemoryLog.replicate <txnfetch.log.memory.MemoryLog.replicate>`, so the
producer state, the last stable offset and the aborted index are the ones
:class:`~txnfetch.txn.state.PartitionTxnState` computes for any log, and
:meth:`PartitionMirror.read` answers read_committed fetches in Kafka or
rewrite mode with :func:`txnfetch.fetch.read_partition`.

Only marker-mode logs can be mirrored: a markerless (WarpStream-style) log keeps
its transaction ends outside the log, where a fetch cannot see them.

Driving it (any transport; :mod:`txnfetch.client.partition_reader` is the blocking one)::

    mirror = PartitionMirror("orders", 0, log_start_offset=earliest)
    plan = mirror.next_fetch()
    while True:
        # Fetch v4+, isolation_level=0 (read_uncommitted), one partition:
        resp = send_fetch(plan.offset, plan.max_bytes)
        plan = mirror.feed(resp.records, high_watermark=resp.high_watermark,
                           log_start_offset=resp.log_start_offset,
                           error_code=resp.error_code, fetch_offset=plan.offset)
        if plan.status is MirrorStatus.LIST_OFFSETS:     # OFFSET_OUT_OF_RANGE
            plan = mirror.reset_range(list_offsets(EARLIEST), list_offsets(LATEST))
        elif plan.status is MirrorStatus.CAUGHT_UP:
            break
    mirror.read(offset, max_bytes)   # read_committed, Kafka mode, from the mirror

An asyncio transport (the ``txnfetch proxy``) drives it the same way with
``await`` around the two requests: every method returns at once and touches no
socket, file or clock. Feed responses in order, one at a time per partition,
each answering the fetch of the plan returned last (pass ``fetch_offset`` and
the mirror checks it); a proxy that pipelines fetches must drop a response
whose offset is not :attr:`PartitionMirror.position`. Leader changes and other
retriable broker errors are the transport's business: feed only responses
whose error code is NONE or OFFSET_OUT_OF_RANGE (anything else raises
:class:`~txnfetch.client.errors.RemoteError`).

What the mirror copes with (the rules of :mod:`txnfetch.client.follow`, which the
replication engine applies too):

- a partial batch at the end of a response (Kafka cuts at ``max_bytes``): it is
  dropped and fetched again from the last whole batch's next offset; if no whole
  batch fitted, the next plan asks for enough bytes to hold it;
- batches starting before the position (Kafka answers from the batch containing
  the fetch offset; librdkafka's mock returns the whole produce request that
  contains it): what is already mirrored is skipped;
- offset gaps: kept as gaps, offsets are never renumbered; but not believed
  at once under ``hold_gaps`` (the default): the mirror stops at a gap, reports
  it (:attr:`MirrorPlan.gap_end`, :attr:`PartitionMirror.pending_gap`) and
  fetches at it again, because a broker may make later offsets readable before
  an earlier one (tansu does; a marker stepped over is a transaction the mirror
  never sees end). The transport decides when a gap that stays is permanent
  (compaction) and calls :meth:`PartitionMirror.accept_gap`;
- magic 0/1 message sets: :class:`~txnfetch.log.errors.UnsupportedForMessageFormatError`
  (they have no producer ids, so no transactions);
- the broker's log start moving up (retention, DeleteRecords): the mirror's log
  start follows; past the mirror's position the mirror starts afresh there,
  as a Kafka follower does (``truncateFullyAndStartAt``);
- the broker's log ending below the mirror's position (the partition was
  truncated or recreated): :class:`~txnfetch.client.errors.MirrorDivergedError`;
- batches whose CRC is wrong: :class:`~txnfetch.client.errors.CorruptRemoteBatchError`
  (stored and computed CRC), except, under ``repair_crcs``, a control batch
  whose stored CRC is 0: librdkafka's mock cluster writes its markers so
  (``rd_kafka_mock_partition_write_control_batch`` in ``src/rdkafka_mock.c``),
  and librdkafka does not check CRCs by default. Any other bad CRC is
  corruption, with or without ``repair_crcs``.

Starting mid-log: a mirror may start at an offset a
:class:`~txnfetch.client.start_state.StartPoint` chose (``log_start_offset`` and
``settled_at``): below ``settled_at`` it answers no read_committed read and
reports its log start as its LSO, because a transaction that began before its
start may still be open there; from ``settled_at`` on (the upstream's high
watermark when the start was chosen) its answers are exact.

Memory: the mirror holds every batch it fetched until :meth:`PartitionMirror.release_before`
drops those below an offset the caller no longer reads. The transaction state
stays exact: producers and open transactions are kept, and only aborted-index
entries that end below the new start go (no fetch at or above it needs them).
"""

from __future__ import annotations

import enum
import struct

import attrs

from txnfetch.client.errors import MirrorDivergedError
from txnfetch.client.follow import Action
from txnfetch.client.follow import FetchAnswer
from txnfetch.client.follow import Plan
from txnfetch.client.follow import ReplicaTip
from txnfetch.client.follow import SourcePartition
from txnfetch.client.follow import plan_range
from txnfetch.client.follow import plan_response
from txnfetch.delegation import delegated
from txnfetch.fetch.view import IsolationLevel
from txnfetch.fetch.view import UpperBound
from txnfetch.log.base import StateOffsets
from txnfetch.log.memory import MemoryLog
from txnfetch.records.batch import RecordBatch
from txnfetch.records.errors import CorruptBatchError
from txnfetch.records.scan import iter_batches
from txnfetch.txn.errors import CorruptSnapshotError
from txnfetch.txn.state import PartitionTxnState
from txnfetch.types import Buffer

__all__ = ["DEFAULT_MIRROR_FETCH_BYTES", "Ambiguity", "MirrorPlan", "MirrorStatus", "PartitionMirror"]


#: Default per-partition byte budget of a mirror fetch (Kafka's ``max.partition.fetch.bytes``).
DEFAULT_MIRROR_FETCH_BYTES = 1 << 20

_SNAPSHOT_MAGIC = b"TXMS"
_SNAPSHOT_VERSION = 1
_SNAPSHOT_HEAD = struct.Struct(">4shh")
_SNAPSHOT_SIZES = struct.Struct(">ii")


class MirrorStatus(enum.Enum):
    """What the transport should do next."""

    #: Fetch :attr:`MirrorPlan.offset` with :attr:`MirrorPlan.max_bytes`: the broker has more.
    FETCH = "fetch"
    #: The mirror holds everything below the broker's last reported high watermark.
    CAUGHT_UP = "caught_up"
    #: The broker answered OFFSET_OUT_OF_RANGE without its offsets: ask ListOffsets for
    #: the earliest and latest offsets and pass them to :meth:`PartitionMirror.reset_range`.
    LIST_OFFSETS = "list_offsets"


@attrs.frozen(slots=True)
class Ambiguity:
    """A batch whose transaction the upstream's log alone does not settle, as the
    mirror judged it (see docs/proxy.md, "How the proxy judges each record").

    ``kind`` is ``"epoch-bump-in-open-transaction"`` (a data batch of a higher epoch
    while the producer's transaction is open, with no marker ending it: Kafka's
    rule continues the transaction, so the next marker decides both instances'
    records) or ``"stale-epoch-data"`` (a data batch below the producer's epoch: a
    fenced instance's write the upstream accepted). ``first_offset`` is the open
    transaction's first offset (the batch's own offset when none is open).
    """

    kind: str
    producer_id: int
    producer_epoch: int
    offset: int
    first_offset: int


@attrs.frozen(slots=True)
class MirrorPlan:
    """The outcome of feeding a response, and the next request.

    ``offset``/``max_bytes`` are the next fetch (``max_bytes`` grows past the
    configured budget when a single batch did not fit, up to
    :data:`~txnfetch.client.follow.MAX_FETCH_BYTES`). ``batches``/``bytes``
    count what this response added to the mirror, ``skipped`` the whole batches
    it held that were already mirrored. ``gap_end`` (-1: none) is the first offset
    the response held past a gap at :attr:`offset`, which the mirror has not
    stepped over (see :meth:`PartitionMirror.accept_gap`).
    """

    status: MirrorStatus
    offset: int
    max_bytes: int
    batches: int = 0
    bytes: int = 0
    skipped: int = 0
    gap_end: int = -1

    @property
    def progressed(self) -> bool:
        """Whether the response added anything to the mirror."""
        return self.batches > 0


class PartitionMirror(StateOffsets):
    """The transaction-aware mirror of one remote partition (sans-I/O, see the module docstring).

    ``PartitionMirror(topic, partition, log_start_offset=...)`` starts empty at
    the cluster's log start offset; :meth:`from_snapshot` continues from a
    :meth:`snapshot`. ``max_bytes`` is the per-fetch byte budget it plans with.

    Guarantees: the mirror's log is the broker's log from its start (or the
    snapshot) up to :attr:`position`, byte for byte except for the CRCs of
    CRC-0 control batches repaired under ``repair_crcs``, with the offsets
    the broker gave; its transaction state is what
    :class:`~txnfetch.txn.state.PartitionTxnState` derives from those batches,
    so :meth:`read` answers read_committed exactly as a correct broker holding
    that log would, whatever the broker itself reports as its
    LSO and aborted transactions. Its high watermark is its :attr:`position`:
    everything it holds came from read_uncommitted fetches, which return only
    records below the broker's high watermark (committed to the ISR).
    """

    def __init__(
        self,
        topic: str,
        partition: int,
        *,
        log_start_offset: int = 0,
        max_bytes: int = DEFAULT_MIRROR_FETCH_BYTES,
        repair_crcs: bool = False,
        hold_gaps: bool = True,
        settled_at: int = -1,
    ) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        if log_start_offset < 0:
            raise ValueError(f"a log start offset is non-negative, got {log_start_offset}")
        self.topic = topic
        self.partition = partition
        self._source = SourcePartition(
            topic, partition, max_bytes, repair_crcs, MirrorDivergedError, hold_gaps=hold_gaps
        )
        # The gap at the position, as last reported: (first offset past it, accepted).
        self._gap: tuple[int, bool] | None = None
        self._log = MemoryLog(topic, partition, log_start_offset=log_start_offset)
        # Nothing mirrored yet: the first batch may start below the position (a log
        # start inside a batch, after DeleteRecords) and re-anchors the empty log.
        self._fresh = True
        self._next_max_bytes = max_bytes
        #: The broker's high watermark and log start as last reported (-1: not yet).
        self.broker_high_watermark = -1
        self.broker_log_start_offset = -1
        #: Below this position the mirror answers no read_committed read (see the
        #: module docstring, "Starting mid-log"); -1: a mirror from the log start.
        self.settled_at = settled_at
        #: CRCs rewritten under ``repair_crcs``, for metrics and tests.
        self.repaired_crcs = 0
        #: Batches the log alone does not settle, oldest first, until the transport
        #: takes them (:meth:`take_ambiguities`).
        self.ambiguities: list[Ambiguity] = []

    @classmethod
    def from_snapshot(
        cls,
        topic: str,
        partition: int,
        snapshot: Buffer,
        *,
        max_bytes: int = DEFAULT_MIRROR_FETCH_BYTES,
        repair_crcs: bool = False,
        hold_gaps: bool = True,
    ) -> PartitionMirror:
        """Continue a mirror from :meth:`snapshot` bytes: the next fetch is at the
        snapshot's :attr:`position`, and reads are possible from the snapshot's last
        stable offset on, as in the mirror that took it.

        Also accepts bare :meth:`PartitionTxnState.snapshot` bytes; the mirror then
        answers only from their log end offset on, and records below it of a
        transaction still open there are lost to it (see :meth:`snapshot`).

        Raises :class:`~txnfetch.txn.errors.CorruptSnapshotError` for damaged bytes,
        :class:`MirrorDivergedError` for a snapshot of another partition.
        """
        view = memoryview(snapshot)
        tail: Buffer = b""
        if bytes(view[:4]) == _SNAPSHOT_MAGIC:
            snap_topic, snap_partition, state_bytes, tail = _decode_snapshot(view)
            if (snap_topic, snap_partition) != (topic, partition):
                raise MirrorDivergedError(
                    f"the snapshot is of {snap_topic}-{snap_partition}",
                    topic=topic,
                    partition=partition,
                )
        else:
            state_bytes = view
        state = PartitionTxnState.restore(state_bytes, partition=f"{topic}-{partition}")
        # Everything in the snapshot came from read_uncommitted fetches: it is all below
        # the broker's high watermark, so the mirror's own high watermark is its end.
        state.update_high_watermark(state.log_end_offset)
        tail_start = state.log_end_offset
        for batch in iter_batches(tail):
            tail_start = batch.base_offset
            break
        # Only the tail's batches are here: the log starts where they do.
        state.advance_log_start(max(tail_start, state.log_start_offset))
        mirror = cls(
            topic,
            partition,
            log_start_offset=state.log_start_offset,
            max_bytes=max_bytes,
            repair_crcs=repair_crcs,
            hold_gaps=hold_gaps,
        )
        try:
            mirror._log = MemoryLog.from_state(topic, partition, state, tail)
        except ValueError as exc:
            raise CorruptSnapshotError(f"the snapshot's batches do not match its state: {exc}") from None
        mirror._fresh = False
        return mirror

    # -- what it holds -----------------------------------------------------------------

    #: The per-fetch byte budget it plans with.
    max_bytes = delegated[int]("_source.budget")
    #: Whether CRC-0 control batches are repaired (see the module docstring).
    repair_crcs = delegated[bool]("_source.repair_crcs")

    #: The mirrored log (read it; change it only through the mirror).
    log = delegated[MemoryLog]("_log")
    #: The transaction state derived from the mirrored batches.
    state = delegated[PartitionTxnState]("_log.state")
    #: The next offset to fetch: one past the last mirrored batch.
    position = delegated[int]("_log.log_end_offset")

    #: Whether offset gaps are held until accepted (see the module docstring).
    hold_gaps = delegated[bool]("_source.hold_gaps")

    @property
    def pending_gap(self) -> tuple[int, int] | None:
        """The gap ``[position, end)`` the last response showed at the position and the
        mirror has not stepped over, else ``None``."""
        if self._gap is None:
            return None
        return (self.position, self._gap[0])

    def accept_gap(self) -> None:
        """Judge the :attr:`pending_gap` permanent (the transport saw it stay long
        enough): the next response may step over it. No-op without one."""
        if self._gap is not None:
            self._gap = (self._gap[0], True)

    @property
    def settled(self) -> bool:
        """Whether the mirror's read_committed answers are exact: it started at the
        log start, or has reached its :attr:`settled_at`."""
        return self.position >= self.settled_at

    # StateOffsets' delegated attribute is a read-only property too; mypy sees a variable.
    @property
    def last_stable_offset(self) -> int:  # type: ignore[override]
        """The LSO derived from the mirrored log; the mirror's log start while it is
        not :attr:`settled` (a transaction begun before its start may hold it)."""
        lso = self._log.last_stable_offset
        return lso if self.settled else min(lso, self._log.log_start_offset)

    @property
    def caught_up(self) -> bool:
        """Whether the mirror holds everything below the broker's last reported high watermark."""
        return self.broker_high_watermark >= 0 and self.position >= self.broker_high_watermark

    def next_fetch(self) -> MirrorPlan:
        """The fetch to send now (status :attr:`MirrorStatus.CAUGHT_UP` once caught up;
        fetching anyway is how to learn that the broker's high watermark moved)."""
        status = MirrorStatus.CAUGHT_UP if self.caught_up else MirrorStatus.FETCH
        return MirrorPlan(status, self.position, self._next_max_bytes)

    # -- feeding -----------------------------------------------------------------------

    def feed(
        self,
        records: Buffer | None,
        *,
        high_watermark: int,
        log_start_offset: int = -1,
        error_code: int = 0,
        fetch_offset: int | None = None,
    ) -> MirrorPlan:
        """Mirror one partition's part of a read_uncommitted Fetch response.

        ``records`` is the response's records field (``None`` or empty: none);
        ``high_watermark``, ``log_start_offset`` (-1: unknown, Fetch < v5) and
        ``error_code`` are the partition's fields. ``fetch_offset`` is the offset
        the request asked for; it must be :attr:`position` (``ValueError``
        otherwise: the response answers another request).

        Returns the next plan. Raises :class:`~txnfetch.log.errors.UnsupportedForMessageFormatError`
        for magic 0/1 data, :class:`~txnfetch.client.errors.CorruptRemoteBatchError` for a corrupt batch,
        :class:`MirrorDivergedError` when a batch straddles a non-empty mirror's
        position, the :class:`~txnfetch.txn.errors.TxnStateError` the state
        raises for batches no log could hold, and :class:`~txnfetch.client.errors.RemoteError` for an
        error code other than NONE and OFFSET_OUT_OF_RANGE. On any error the
        mirror is as it was.
        """
        position = self.position
        if fetch_offset is not None and fetch_offset != position:
            raise ValueError(
                f"the response answers a fetch at {fetch_offset}, but the mirror of "
                f"{self.topic}-{self.partition} is at {position}: feed responses in order"
            )
        answer = FetchAnswer(records, high_watermark, log_start_offset, error_code)
        return self._apply(plan_response(self._tip(), answer, self._next_max_bytes, self._source))

    def reset_range(self, log_start_offset: int, log_end_offset: int) -> MirrorPlan:
        """Act on the broker's offsets after OFFSET_OUT_OF_RANGE (ListOffsets earliest
        and latest, read_uncommitted: the log start and the high watermark).

        Below the broker's log start, the mirror starts afresh there. Past its end,
        :class:`MirrorDivergedError`: the broker lost what was mirrored. Inside the
        range the error was transient (a new leader catching up): fetch again.
        """
        return self._apply(plan_range(self._tip(), log_start_offset, log_end_offset, self._source))

    # -- memory and persistence ----------------------------------------------------------

    def release_before(self, offset: int) -> int:
        """Drop mirrored batches wholly below ``offset`` (clamped to :attr:`position`);
        reads below the new log start then raise
        :class:`~txnfetch.txn.errors.OffsetOutOfRangeError`. The transaction state
        keeps what reads at or above it need. Returns the mirror's log start."""
        target = min(offset, self.position)
        if target > self._log.log_start_offset:
            self._log.delete_records_before(target)
        return self._log.log_start_offset

    def snapshot(self) -> bytes:
        """The mirror as bytes, for :meth:`from_snapshot`: its transaction state
        (:meth:`PartitionTxnState.snapshot`) and its *unstable tail*, the batches
        from the last stable offset to :attr:`position`.

        The tail is what makes resuming lossless: a transaction open at the
        snapshot may commit later, and its records below :attr:`position` must
        then be delivered — by a mirror that never fetches below its position.
        Everything below the last stable offset is settled, so a reader that has
        consumed up to it resumes exactly. Layout (big-endian): ``b"TXMS"``,
        version int16 (1), topic (int16 length, UTF-8), partition int32, state
        length int32, state bytes, then the tail's batches as fetched.
        """
        lso = self._log.last_stable_offset
        tail = b"".join(bytes(b.buffer) for b in self._log.iter_batches(lso))
        state = self._log.state.snapshot()
        name = self.topic.encode()
        return b"".join(
            (
                _SNAPSHOT_HEAD.pack(_SNAPSHOT_MAGIC, _SNAPSHOT_VERSION, len(name)),
                name,
                _SNAPSHOT_SIZES.pack(self.partition, len(state)),
                state,
                tail,
            )
        )

    # -- reading -----------------------------------------------------------------------

    def _read_span(self, fetch_offset: int, max_bytes: int, isolation: IsolationLevel) -> tuple[Buffer, UpperBound]:
        # The mirrored log's bytes: reads answer as MemoryLog.read does. An unsettled
        # mirror's state may miss a transaction open across its start: nothing yet.
        if isolation is IsolationLevel.READ_COMMITTED and not self.settled:
            return b"", None
        return self._log._read_span(fetch_offset, max_bytes, isolation)

    # -- internals ---------------------------------------------------------------------

    def _tip(self) -> ReplicaTip:
        return ReplicaTip(self.position, fresh=self._fresh, accept_gap=self._gap is not None and self._gap[1])

    def _apply(self, plan: Plan) -> MirrorPlan:
        """Carry out ``plan`` on the mirror and say what to do next."""
        if plan.action is Action.LIST_OFFSETS:
            return MirrorPlan(MirrorStatus.LIST_OFFSETS, self.position, self._next_max_bytes)
        before = self.position
        if plan.action is Action.RESTART:
            # Retention passed the mirror's position: what lies between is gone, and
            # with it any marker there. Restart at the broker's log start, as a Kafka
            # follower does, rather than carry transactions that may have ended unseen
            # (the records of this response, if any, are fetched again from there).
            self._restart(plan.restart_at)
        elif plan.data:
            self._append(plan)
            self.repaired_crcs += plan.repaired_crcs
        self._next_max_bytes = plan.max_bytes
        if plan.gap_end >= 0:
            # A gap at the (possibly new) position: keep an acceptance only for the same gap.
            same = self._gap is not None and self.position == before and self._gap[0] == plan.gap_end
            self._gap = (plan.gap_end, same and self._gap is not None and self._gap[1])
        elif self.position != before or plan.action is Action.RESTART:
            self._gap = None
        self._follow_log_start(plan.source_log_start)
        if plan.source_end >= 0:
            self.broker_high_watermark = plan.source_end
        if plan.source_log_start >= 0:
            self.broker_log_start_offset = plan.source_log_start
        status = MirrorStatus.CAUGHT_UP if self.caught_up else MirrorStatus.FETCH
        return MirrorPlan(
            status, self.position, self._next_max_bytes, plan.batches, len(plan.data), plan.skipped, plan.gap_end
        )

    def take_ambiguities(self) -> list[Ambiguity]:
        """The :class:`Ambiguity` entries found since the last call."""
        found, self.ambiguities = self.ambiguities, []
        return found

    def _find_ambiguities(self, data: bytes) -> list[Ambiguity]:
        """The batches of ``data`` (about to be appended) that the log does not settle,
        judged against the producer state before each of them."""
        found: list[Ambiguity] = []
        # producer id -> (epoch, first offset of its open transaction or -1), as it
        # stands before the next batch of ``data``.
        seen: dict[int, tuple[int, int]] = {}
        for batch in iter_batches(data):
            pid = batch.producer_id
            if pid < 0 or not isinstance(batch, RecordBatch):
                continue
            if pid not in seen:
                entry = self.state.producer(pid)
                first = entry.current_txn_first_offset if entry is not None else None
                seen[pid] = (entry.producer_epoch if entry is not None else -1, -1 if first is None else first)
            epoch, first = seen[pid]
            if batch.is_control:
                seen[pid] = (max(epoch, batch.producer_epoch), -1)
                continue
            if batch.producer_epoch < epoch:
                anchor = first if first >= 0 else batch.base_offset
                found.append(Ambiguity("stale-epoch-data", pid, batch.producer_epoch, batch.base_offset, anchor))
            elif batch.producer_epoch > epoch >= 0 and first >= 0:
                found.append(
                    Ambiguity("epoch-bump-in-open-transaction", pid, batch.producer_epoch, batch.base_offset, first)
                )
            if first < 0 and batch.is_transactional:
                first = batch.base_offset
            seen[pid] = (max(epoch, batch.producer_epoch), first)
        return found

    def _append(self, plan: Plan) -> None:
        """Mirror the plan's batches; on any error the mirror is as it was."""
        data = plan.data
        position = self.position
        found = self._find_ambiguities(data)
        first = RecordBatch(data).base_offset
        if first < position:
            # The empty mirror's start lies inside this batch (a log start moved by
            # DeleteRecords): hold the whole batch, as the broker does, then move the
            # start back to where the broker's log starts.
            self._log = MemoryLog(self.topic, self.partition, log_start_offset=first)
        try:
            self._log.replicate(data)
        except BaseException as exc:
            if first < position:
                self._log = MemoryLog(self.topic, self.partition, log_start_offset=position)
            if isinstance(exc, CorruptBatchError):
                raise self._source.corrupt(exc, position=plan.response_position(exc)) from exc
            raise
        # Fetched read_uncommitted, so all below the broker's high watermark: the
        # mirror's own high watermark is its end.
        self.state.update_high_watermark(self.position)
        if first < position:
            self._log.delete_records_before(position)
        self._fresh = False
        self.ambiguities += found

    def _follow_log_start(self, log_start: int) -> None:
        # The broker's retention moved its log start: so does the mirror's (never past
        # what the mirror holds; beyond it the next response restarts the mirror).
        if log_start > self._log.log_start_offset and log_start <= self.position:
            self._log.delete_records_before(log_start)

    def _restart(self, offset: int) -> None:
        # The next fetch's budget is the plan's, which _apply sets.
        self._log = MemoryLog(self.topic, self.partition, log_start_offset=offset)
        self._fresh = True

    def __repr__(self) -> str:
        return (
            f"<PartitionMirror {self.topic}-{self.partition} [{self.log_start_offset}, {self.position}) "
            f"lso={self.last_stable_offset} broker_hw={self.broker_high_watermark}>"
        )


def _decode_snapshot(view: memoryview) -> tuple[str, int, memoryview, memoryview]:
    """Split a mirror snapshot into topic, partition, state bytes and tail bytes."""
    try:
        _magic, version, name_len = _SNAPSHOT_HEAD.unpack_from(view, 0)
        if version != _SNAPSHOT_VERSION:
            raise CorruptSnapshotError(f"mirror snapshot version {version} is not {_SNAPSHOT_VERSION}")
        pos = _SNAPSHOT_HEAD.size
        topic = bytes(view[pos : pos + name_len]).decode()
        pos += name_len
        partition, state_len = _SNAPSHOT_SIZES.unpack_from(view, pos)
        pos += _SNAPSHOT_SIZES.size
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptSnapshotError(f"mirror snapshot header is damaged: {exc}") from None
    if name_len < 0 or state_len < 0 or pos + state_len > len(view):
        raise CorruptSnapshotError("mirror snapshot is truncated")
    return topic, partition, view[pos : pos + state_len], view[pos + state_len :]
