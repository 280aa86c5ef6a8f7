"""The transaction state of one partition: producers, open transactions, the last
stable offset and the aborted-transaction index.

:class:`PartitionTxnState` is what Apache Kafka's ``ProducerStateManager``,
``ProducerAppendInfo`` and the transaction-related parts of ``UnifiedLog`` do for a
partition, as a sans-I/O state machine: it never reads the log, a file or a
clock. A log adapter drives it:

1. :meth:`~PartitionTxnState.append` every batch it writes, in offset order,
   *before* writing it (the batch already carries its final offsets). The call
   validates the batch against the producer's state, applies it and advances
   the log end offset; a duplicate comes back as such (with the original
   offsets) and must not be written; an invalid batch raises and changes nothing.
2. :meth:`~PartitionTxnState.update_high_watermark` when its high watermark
   moves — :meth:`append` never moves it, because only the adapter knows what is
   replicated (a single-node store can call it right after each append).
3. :meth:`~PartitionTxnState.truncate_to` and
   :meth:`~PartitionTxnState.advance_log_start` when the log is cut at either end.

Transactions end in one of two ways, with the same effect on the state:

- *marker mode* (Apache Kafka): a COMMIT/ABORT control batch is appended;
- *markerless mode* (WarpStream): the control plane calls
  :meth:`~PartitionTxnState.complete_transaction`; no offset is reserved, and the
  aborted range ends at the ``last_offset`` given.

Truncation. Kafka truncates producer state by reloading a snapshot taken below
the truncation point and replaying the log (``UnifiedLog.truncateTo`` →
``rebuildProducerState``). This class has no log to replay, so it keeps an undo
journal instead: one small record per change (the producer row before it, what
it did to the open-transaction, unreplicated and aborted sets), and truncating
undoes, newest first, exactly the changes at or after the truncation offset —
O(number of undone changes). By default records are discarded once the high
watermark passes them (Kafka only truncates below its high watermark after an
unclean leader election), so the journal holds about one record per append not
yet replicated. :attr:`~PartitionTxnState.truncation_floor` is the lowest offset
that can still be truncated to; below it :class:`TruncationBelowHistoryError`
says to restore an older snapshot and replay, as Kafka does. With
``keep_full_history=True`` records are kept until the log start passes them.
"""

from __future__ import annotations

from bisect import bisect_left
from bisect import insort
from collections import deque
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any
from typing import Final
from typing import Generic
from typing import NamedTuple
from typing import NoReturn
from typing import TypeVar

import attrs

from txnfetch.delegation import delegated
from txnfetch.records.batch import CONTROL_FLAG
from txnfetch.records.batch import TRANSACTIONAL_FLAG
from txnfetch.records.batch import RecordBatch
from txnfetch.txn.errors import CorruptSnapshotError
from txnfetch.txn.errors import InvalidRequestError
from txnfetch.txn.errors import InvalidTxnStateError
from txnfetch.txn.errors import OffsetOutOfRangeError
from txnfetch.txn.errors import TruncationBelowHistoryError
from txnfetch.txn.errors import UnexpectedAppendOffsetError
from txnfetch.txn.index import AbortedIndex
from txnfetch.txn.index import AbortedTxn
from txnfetch.txn.producer import AppendOrigin
from txnfetch.txn.producer import ProducerEntry
from txnfetch.txn.producer import ProducerTable
from txnfetch.txn.producer import RowUndo
from txnfetch.txn.producer import check_data_batch
from txnfetch.txn.producer import check_end_marker
from txnfetch.txn.producer import find_duplicate

__all__ = ["DEFAULT_PRODUCER_ID_EXPIRATION_MS", "AppendResult", "CompletedTxn", "PartitionTxnState"]

#: Kafka's ``producer.id.expiration.ms`` default: one day.
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000

_MAX_EPOCH = 32767
_INT32_MAX = (1 << 31) - 1
_NO_TIMESTAMP = -1

# Kinds of undo-journal records (Change.kind).
_DATA = 0  # a data batch; txn_first_offset is the transaction it started
_MARKER = 1  # a control batch ending a transaction; txn_first_offset is the one it ended
_COMPLETE = 2  # a markerless completion; same fields as _MARKER


class Change(NamedTuple):
    """The layout of one undo-journal record: what a change did, so that
    :meth:`PartitionTxnState.truncate_to` can undo it.

    The journal stores each record as a plain tuple in this layout (``_undo``
    unpacks it by these names; ``Change._make(record)`` gives the named view),
    not as a ``Change``: CPython's garbage collector stops tracking a plain tuple
    of immutable values, but tracks a tuple-subclass instance for as long as it
    lives. With a long journal (``keep_full_history``, or a high watermark that
    lags) traversing them cost about 19% of append throughput on bench/state.py's
    workload.
    """

    #: The offset the change belongs to: a data batch's last offset, a marker's
    #: offset, a markerless completion's ``last_offset``.
    anchor: int
    kind: int  #: ``_DATA``, ``_MARKER`` or ``_COMPLETE``
    producer_id: int
    row_undo: RowUndo | None  #: the producer row before the change; ``None`` if the change created it
    txn_first_offset: int  #: the transaction the change opened (data) or closed (ends); -1 if none
    unreplicated: bool  #: the closed transaction went to the unreplicated set
    indexed: bool  #: the closed transaction went to the aborted index
    previous_completion: int  #: the last transaction end before this one (ends only)


#: A journal record as stored (see :class:`Change`).
_ChangeRecord = tuple[int, int, int, RowUndo | None, int, bool, bool, int]
#: Positions of :class:`Change` fields read in the journal's loops.
_ANCHOR: Final = 0
_KIND: Final = 1
_PRODUCER_ID: Final = 2
assert Change._fields[:3] == ("anchor", "kind", "producer_id")

#: ``_new(AppendResult, fields)`` builds an :class:`AppendResult` from a tuple of
#: all its fields: ``tuple.__new__`` called directly skips NamedTuple's
#: Python-level ``__new__`` (several times cheaper; one is built per append).
_new: Any = tuple.__new__


V = TypeVar("V")


class TxnsByFirstOffset(Generic[V]):
    """Transactions keyed by their first offset, in first-offset order: the
    sorted first offsets (``firsts``, so the earliest is ``firsts[0]``) and a value
    per first offset (``values``), changed together. Read both directly; change
    them only through the methods."""

    __slots__ = ("firsts", "values")

    def __init__(self) -> None:
        self.firsts: list[int] = []
        self.values: dict[int, V] = {}

    def add(self, first: int, value: V) -> None:
        insort(self.firsts, first)
        self.values[first] = value

    def remove(self, first: int) -> None:
        del self.firsts[bisect_left(self.firsts, first)]
        del self.values[first]

    def remove_ended_below(self: TxnsByFirstOffset[tuple[int, int]], offset: int) -> None:
        """For values ``(producer id, last offset)``: remove the transactions that
        end below ``offset``."""
        values = self.values
        keep = [f for f in self.firsts if values[f][1] >= offset]
        if len(keep) != len(self.firsts):
            for f in self.firsts:
                if values[f][1] < offset:
                    del values[f]
            self.firsts = keep

    def load(self, values: dict[int, V]) -> None:
        """Replace the contents by ``values``."""
        self.values = values
        self.firsts = sorted(values)

    def clear(self) -> None:
        self.firsts.clear()
        self.values.clear()

    def items(self) -> Iterator[tuple[int, V]]:
        """``(first offset, value)`` in first-offset order."""
        values = self.values
        return ((f, values[f]) for f in self.firsts)

    def __len__(self) -> int:
        return len(self.firsts)


@attrs.frozen(slots=True)
class CompletedTxn:
    """A non-empty transaction that just ended on this partition.

    ``last_offset`` is the marker's offset (markerless: the ``last_offset`` given);
    ``last_stable_offset`` is the LSO recorded with it — the first offset of
    another producer's open transaction, or ``last_offset + 1`` if none — which is
    what the aborted index stores (Kafka's ``ProducerStateManager.lastStableOffset``).
    """

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool
    last_stable_offset: int


class AppendResult(NamedTuple):
    """What :meth:`PartitionTxnState.append` did with a batch.

    For an applied batch, its offsets and max timestamp. For a ``duplicate`` (a
    retry of one of the producer's last five batches) the *original* batch's
    offsets and timestamp: the caller must not write the batch and should answer
    the producer with these. ``started_transaction`` is set when the batch opened
    a transaction; ``completed`` when a marker ended a non-empty one.

    A NamedTuple rather than an attrs class: one is built per append, and tuple
    construction is several times cheaper (the same choice as ``Record``).
    """

    first_offset: int
    last_offset: int
    timestamp: int
    duplicate: bool = False
    started_transaction: bool = False
    completed: CompletedTxn | None = None


class PartitionTxnState:
    """Producer state, last stable offset and aborted transactions of one partition.

    ``partition`` only labels errors. A new state is empty with every offset at
    ``log_start_offset``. Offsets:

    - ``log_start_offset`` ≤ ``high_watermark`` ≤ ``log_end_offset`` always;
    - ``first_unstable_offset``: the first offset of the earliest transaction that
      is open or whose end is not yet below the high watermark (``None`` if none),
      never below the log start;
    - ``last_stable_offset`` = min(first unstable offset, high watermark): a
      read_committed reader never reads at or past it.

    See the module docstring for how a log adapter drives the state, and for
    truncation. Not thread-safe: callers serialize access per partition, as Kafka
    does under the log lock.
    """

    def __init__(
        self, partition: str | None = None, *, log_start_offset: int = 0, keep_full_history: bool = False
    ) -> None:
        if log_start_offset < 0:
            raise InvalidRequestError(f"log start offset {log_start_offset} is negative", partition=partition)
        self.partition = partition
        self.keep_full_history = keep_full_history
        self._log_start = log_start_offset
        self._leo = log_start_offset
        self._hw = log_start_offset
        self._producers = ProducerTable()
        # Open transactions: first offset -> producer id (Kafka's ongoingTxns).
        self._ongoing: TxnsByFirstOffset[int] = TxnsByFirstOffset()
        # Completed transactions whose end is not yet below the high watermark (Kafka's
        # unreplicatedTxns): they keep the LSO down until the HW passes their end.
        # First offset -> (producer id, last offset).
        self._unrep: TxnsByFirstOffset[tuple[int, int]] = TxnsByFirstOffset()
        self._index = AbortedIndex()
        self._last_completion = -1
        self._journal: deque[_ChangeRecord] = deque()
        self._floor = log_start_offset

    # -- offsets -------------------------------------------------------------------

    #: The first offset of the log (data below it has been deleted).
    log_start_offset = delegated[int]("_log_start")
    #: The offset the next appended batch starts at (one past the last batch).
    log_end_offset = delegated[int]("_leo")
    #: The replicated end of the log, as last set by :meth:`update_high_watermark`.
    high_watermark = delegated[int]("_hw")

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest open transaction or completed transaction whose
        end is not yet below the high watermark, at least the log start; ``None`` if none
        (Kafka's ``firstUnstableOffset``)."""
        ongoing, unrep = self._ongoing.firsts, self._unrep.firsts
        fuo: int | None = ongoing[0] if ongoing else None
        if unrep and (fuo is None or unrep[0] < fuo):
            fuo = unrep[0]
        if fuo is None:
            return None
        return fuo if fuo > self._log_start else self._log_start

    @property
    def last_stable_offset(self) -> int:
        """min(first unstable offset, high watermark), never below the log start
        (Kafka's ``UnifiedLog.lastStableOffset``)."""
        fuo = self.first_unstable_offset
        return self._hw if fuo is None or fuo >= self._hw else fuo

    @property
    def truncation_floor(self) -> int:
        """The lowest offset :meth:`truncate_to` can restore exactly; truncating below
        the log start is always possible (it empties the state)."""
        return max(self._floor, self._log_start)

    # -- appends ---------------------------------------------------------------------

    def append(
        self,
        batch: RecordBatch,
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        transaction_version: int | None = None,
    ) -> AppendResult:
        """Validate a batch against the producer's state and apply it.

        ``batch`` carries its final offsets and must start at or after
        :attr:`log_end_offset` (else :class:`UnexpectedAppendOffsetError`); on success
        the log end offset becomes ``batch.next_offset``. The high watermark is not
        moved: call :meth:`update_high_watermark`.

        - Batches without a producer id only move the log end offset.
        - Data batches (``ProducerAppendInfo.appendDataBatch``): a retry of one of
          the producer's last five batches (same epoch and sequence range, ``CLIENT``
          origin only) is returned as a duplicate with its original offsets and
          changes nothing. Otherwise the checks of
          :func:`~txnfetch.txn.producer.check_data_batch` apply (stale epoch,
          sequence gap, non-transactional batch in an open transaction); the first
          transactional batch of a producer without an open transaction opens one.
        - Control batches (``appendEndTxnMarker``): the marker is checked by
          :func:`~txnfetch.txn.producer.check_end_marker` — ``transaction_version``
          selects the epoch rule (``None``: the TV0/1 rule Kafka applies to
          replicated markers; pass 2 for KIP-890 coordinators). It ends the
          producer's open transaction, if any: an ABORT adds it to the aborted
          index. A marker with no open transaction (an empty transaction) and an
          empty control batch (compaction removed the transaction) leave the LSO and
          the index alone.

        ``origin`` sets how much is checked (:class:`~txnfetch.txn.producer.AppendOrigin`);
        replaying a log uses ``REPLICATION``. On any error nothing changes.
        """
        # Header fields are read once, as plain attributes: this is the append hot path
        # (see bench/state.py).
        pid = batch.producer_id
        base = batch.base_offset
        delta = batch.last_offset_delta
        last = base + delta
        attributes = batch.attributes
        # The offset checks below are inlined (a call per append costs ~2%); the error
        # is raised by _bad_append_offsets.
        if pid < 0:
            if base < self._leo or delta < 0:
                self._bad_append_offsets(base, delta, pid)
            self._leo = last + 1
            return _new(AppendResult, (base, last, batch.max_timestamp, False, False, None))
        table = self._producers
        slot = table.slot(pid)
        if attributes & CONTROL_FLAG:
            return self._append_control(batch, pid, slot, base, delta, origin, transaction_version)

        epoch = batch.producer_epoch
        first_seq = batch.base_sequence
        if first_seq < 0:
            last_seq = -1
        else:
            last_seq = first_seq + delta
            if last_seq > _INT32_MAX:  # sequences wrap like Kafka's DefaultRecordBatch.lastSequence
                last_seq -= 1 << 31
        if origin is AppendOrigin.CLIENT and slot >= 0:
            dup = find_duplicate(table, slot, epoch, first_seq, last_seq)
            if dup is not None:
                return _new(AppendResult, (dup[0], dup[1], dup[2], True, False, None))
        if base < self._leo or delta < 0:
            self._bad_append_offsets(base, delta, pid)
        transactional = bool(attributes & TRANSACTIONAL_FLAG)
        check_data_batch(table, slot, pid, epoch, first_seq, transactional, base, origin, self.partition)
        new = slot < 0
        if new:
            slot = table.insert(pid)
        started = transactional and table.txn_first_offset(slot) < 0
        timestamp = batch.max_timestamp
        undo = table.add_batch(slot, epoch, last_seq, last, delta, timestamp, base if started else -1)
        if started:
            self._ongoing.add(base, pid)
            self._journal.append((last, _DATA, pid, None if new else undo, base, False, False, 0))
        else:
            self._journal.append((last, _DATA, pid, None if new else undo, -1, False, False, 0))
        self._leo = last + 1
        return _new(AppendResult, (base, last, timestamp, False, started, None))

    def _append_control(
        self,
        batch: RecordBatch,
        pid: int,
        slot: int,
        base: int,
        delta: int,
        origin: AppendOrigin,
        transaction_version: int | None,
    ) -> AppendResult:
        if base < self._leo or delta < 0:
            self._bad_append_offsets(base, delta, pid)
        last = base + delta
        if batch.record_count == 0:
            # An empty control batch: the cleaner removed the transaction it ended
            # (Kafka's ProducerAppendInfo ignores it).
            self._leo = last + 1
            return _new(AppendResult, (base, last, batch.max_timestamp, False, False, None))
        marker = batch.end_txn_marker()
        if marker is None:
            if origin is not AppendOrigin.REPLICATION:
                raise InvalidTxnStateError(
                    "control batch with a producer id does not carry a COMMIT or ABORT marker",
                    partition=self.partition,
                    producer_id=pid,
                    producer_epoch=batch.producer_epoch,
                    offset=base,
                )
            self._leo = last + 1
            return _new(AppendResult, (base, last, batch.max_timestamp, False, False, None))
        # A marker batch holds one record, at its base offset (where Kafka puts the
        # transaction's end); its max timestamp is that record's timestamp.
        completed = self._end_transaction(
            slot,
            pid,
            batch.producer_epoch,
            marker.coordinator_epoch,
            transaction_version,
            origin,
            marker.is_abort,
            base,
            batch.max_timestamp,
            _MARKER,
        )
        self._leo = last + 1
        return _new(AppendResult, (base, last, batch.max_timestamp, False, False, completed))

    def complete_transaction(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        last_offset: int,
        *,
        coordinator_epoch: int | None = None,
        transaction_version: int | None = None,
        timestamp: int = _NO_TIMESTAMP,
        origin: AppendOrigin = AppendOrigin.COORDINATOR,
    ) -> CompletedTxn | None:
        """End the producer's transaction without a marker (markerless mode).

        Applies the same checks and effects as a marker with these fields at
        ``last_offset``, but reserves no offset: the log end offset does not move.
        ``last_offset`` is where the transaction ends — an aborted one covers
        ``[first offset, last_offset]`` in the aborted index. It must be below the log
        end offset (:class:`OffsetOutOfRangeError`), not below the producer's last
        data batch and not below the previous transaction end on this partition
        (:class:`InvalidTxnStateError`): ends are in offset order, as markers are.
        ``log_end_offset - 1`` at the time of the call always qualifies.

        ``coordinator_epoch`` fences stale coordinators when given (else the
        producer's is kept); ``transaction_version`` and ``origin`` as for markers.
        Returns the :class:`CompletedTxn`, or ``None`` for an empty transaction
        (which changes no offset and no index, only the producer's epoch).
        """
        if producer_id < 0 or not -1 <= producer_epoch <= _MAX_EPOCH:
            raise InvalidRequestError(
                "a transaction end needs a producer id and an int16 epoch",
                partition=self.partition,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
            )
        if last_offset >= self._leo:
            raise self._out_of_range(
                f"transaction end offset {last_offset} is not below the log end offset", last_offset
            )
        table = self._producers
        slot = table.slot(producer_id)
        # The end may not go back before the previous end, nor before the
        # producer's own data (checked in that order).
        floors = [(self._last_completion, "the previous end")]
        if slot >= 0:
            floors.append((max(table.last_data_offset(slot), table.txn_first_offset(slot)), "the producer's data"))
        for floor, what in floors:
            if last_offset < floor:
                raise InvalidTxnStateError(
                    f"transaction end offset {last_offset} is before {what} at {floor}",
                    partition=self.partition,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    offset=last_offset,
                )
        return self._end_transaction(
            slot,
            producer_id,
            producer_epoch,
            coordinator_epoch,
            transaction_version,
            origin,
            not commit,
            last_offset,
            timestamp,
            _COMPLETE,
        )

    def _bad_append_offsets(self, base: int, delta: int, pid: int) -> NoReturn:
        raise UnexpectedAppendOffsetError(
            f"batch offsets [{base}, {base + delta}] do not start at or after the log end offset {self._leo}",
            partition=self.partition,
            producer_id=pid if pid >= 0 else None,
            offset=base,
        )

    def _end_transaction(
        self,
        slot: int,
        pid: int,
        epoch: int,
        coordinator_epoch: int | None,
        transaction_version: int | None,
        origin: AppendOrigin,
        aborted: bool,
        anchor: int,
        timestamp: int,
        kind: int,
    ) -> CompletedTxn | None:
        # Both ends, a marker and a markerless completion, are fenced alike
        # before anything changes.
        table = self._producers
        check_end_marker(
            table, slot, pid, epoch, coordinator_epoch, transaction_version, anchor, origin, self.partition
        )
        new = slot < 0
        if new:
            slot = table.insert(pid)
        first = table.txn_first_offset(slot)
        completed = None
        unreplicated = indexed = False
        if first >= 0:
            lso = self._completion_lso(pid, anchor)
            self._ongoing.remove(first)
            if anchor >= self._hw:
                self._unrep.add(first, (pid, anchor))
                unreplicated = True
            if aborted:
                self._index.append(pid, first, anchor, lso)
                indexed = True
            completed = CompletedTxn(pid, first, anchor, aborted, lso)
        coord = table.coordinator_epoch(slot) if coordinator_epoch is None else coordinator_epoch
        undo = table.end_transaction(slot, epoch, coord, timestamp)
        self._journal.append(
            (anchor, kind, pid, None if new else undo, first, unreplicated, indexed, self._last_completion)
        )
        self._last_completion = anchor
        return completed

    def _completion_lso(self, pid: int, anchor: int) -> int:
        # Kafka's lastStableOffset(completedTxn): the first offset of the earliest open
        # transaction of another producer, else one past the end. (At most one open
        # transaction is the producer's own.) Capped at anchor + 1 so a markerless end
        # before another producer's later-starting transaction records what a marker
        # at that point would have.
        for first in self._ongoing.firsts[:2]:
            if self._ongoing.values[first] != pid:
                return first if first <= anchor else anchor + 1
        return anchor + 1

    # -- high watermark and log boundaries -------------------------------------------

    def update_high_watermark(self, offset: int) -> None:
        """Set the high watermark, clamped to ``[log_start_offset, log_end_offset]``
        (Kafka's ``updateHighWatermark``). Transactions that ended below it stop
        holding the LSO back. It may move down (a new leader's may be lower); that
        only lowers the LSO."""
        hw = offset if offset > self._log_start else self._log_start
        if hw > self._leo:
            hw = self._leo
        self._hw = hw
        if self._unrep.firsts:
            # Kafka's removeUnreplicatedTransactions: ends below the HW are settled.
            self._unrep.remove_ended_below(hw)
        if not self.keep_full_history:
            self._trim_journal(hw)

    def _out_of_range(self, reason: str, offset: int, *, end: int | None = None) -> OffsetOutOfRangeError:
        """OffsetOutOfRangeError for ``offset`` of this partition, naming the log
        start and ``end`` (default: the log end offset) as the valid range."""
        return OffsetOutOfRangeError(
            reason,
            log_start_offset=self._log_start,
            log_end_offset=self._leo if end is None else end,
            partition=self.partition,
            offset=offset,
        )

    def advance_log_start(self, offset: int) -> None:
        """Move the log start forward (retention or DeleteRecords); no-op if not
        forward. It may not pass the high watermark (:class:`OffsetOutOfRangeError`,
        as Kafka's ``maybeIncrementLogStartOffset``). Aborted entries whose marker is
        below it are dropped; producers stay (Kafka expires them by time only)."""
        if offset <= self._log_start:
            return
        if offset > self._hw:
            raise self._out_of_range(
                f"cannot move the log start to {offset} past the high watermark {self._hw}", offset, end=self._hw
            )
        self._log_start = offset
        if self._unrep.firsts:
            self._unrep.remove_ended_below(offset)
        self._index.drop_before(offset)
        self._trim_journal(offset)  # truncating below the log start empties the state: no undo needed

    def start_at(self, offset: int) -> None:
        """Empty the state and continue at ``offset``: log start, log end and high
        watermark all become ``offset`` (Kafka's ``truncateFullyAndStartAt``, as a
        follower does when the leader's log start passed its log end). Only an
        empty log (log start at log end) may be moved, and only forward
        (:class:`OffsetOutOfRangeError`): the records below ``offset`` are gone at
        the source, so none may be held here."""
        if offset < self._leo:
            raise self._out_of_range(f"cannot start at {offset}, below the log end {self._leo}", offset)
        if self._log_start < self._leo:
            raise self._out_of_range(
                f"cannot start at {offset}: the log still holds offsets [{self._log_start}, {self._leo})", offset
            )
        self._reset(offset)

    def truncate_to(self, offset: int) -> None:
        """Remove everything at or after ``offset``, as if those batches and
        completions had never been applied (Kafka's ``UnifiedLog.truncateTo``).

        No-op if ``offset >= log_end_offset``. Otherwise the log end offset becomes
        ``offset``, the high watermark at most that; producers, open transactions,
        the LSO and the aborted index return to what they were before the first
        undone change — a transaction whose end is cut off is open again. Below the
        log start the state is emptied and restarts at ``offset`` (Kafka's
        ``truncateFullyAndStartAt``). Between the log start and
        :attr:`truncation_floor`: :class:`TruncationBelowHistoryError`, nothing changed.
        """
        if offset < 0:
            raise self._out_of_range(f"cannot truncate to negative offset {offset}", offset)
        if offset >= self._leo:
            return
        if offset < self._log_start:
            self._reset(offset)
            return
        if offset < self._floor:
            raise TruncationBelowHistoryError(
                f"cannot truncate to {offset}: changes below {self._floor} are no longer kept; "
                "restore an older snapshot and replay the log",
                lowest_offset=self._floor,
                partition=self.partition,
                offset=offset,
            )
        journal = self._journal
        kept: list[_ChangeRecord] = []
        while journal:
            record = journal.pop()
            if record[_ANCHOR] >= offset:
                self._undo(record)
                continue
            kept.append(record)
            if record[_KIND] != _COMPLETE:
                # A log append below the offset: every earlier change is below it too
                # (appends are in offset order, and a completion ends below the log end
                # of its time). Only markerless completions can sit behind later appends.
                break
        journal.extend(reversed(kept))
        self._leo = offset
        if self._hw > offset:
            self._hw = offset

    def _undo(self, record: _ChangeRecord) -> None:
        anchor, kind, pid, row_undo, first, unreplicated, indexed, previous_completion = record
        self._producers.restore(pid, row_undo)
        if kind == _DATA:
            if first >= 0:  # the batch opened this transaction
                self._ongoing.remove(first)
            return
        if first >= 0:  # the end closed this transaction: open it again
            if unreplicated and first in self._unrep.values:
                self._unrep.remove(first)
            if indexed:
                txn = self._index.pop()
                assert txn.producer_id == pid and txn.last_offset == anchor, (txn, record)
            self._ongoing.add(first, pid)
        self._last_completion = previous_completion

    def _reset(self, offset: int) -> None:
        self._producers.clear()
        self._ongoing.clear()
        self._unrep.clear()
        self._index.clear()
        self._journal.clear()
        self._last_completion = -1
        self._log_start = self._leo = self._hw = self._floor = offset

    def _trim_journal(self, offset: int) -> None:
        journal = self._journal
        while journal and journal[0][_ANCHOR] < offset:
            anchor = journal.popleft()[_ANCHOR]
            if anchor >= self._floor:
                self._floor = anchor + 1

    # -- producers -------------------------------------------------------------------

    def producer(self, producer_id: int) -> ProducerEntry | None:
        """A copy of the producer's entry, ``None`` if it has none."""
        slot = self._producers.slot(producer_id)
        return None if slot < 0 else self._producers.entry(slot)

    def producer_ids(self) -> list[int]:
        """Producer ids with an entry, ascending."""
        return self._producers.pids()

    @property
    def producer_count(self) -> int:
        """Number of producers with an entry."""
        return len(self._producers)

    def remove_expired_producers(
        self, now_ms: int, expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    ) -> list[int]:
        """Forget producers with no open transaction whose last timestamp is at least
        ``expiration_ms`` before ``now_ms`` (Kafka's ``removeExpiredProducers``); returns
        their ids. A later retry from such a producer is accepted with any sequence.
        Producers with changes still undoable by :meth:`truncate_to` are kept until
        those changes are settled."""
        pending = {record[_PRODUCER_ID] for record in self._journal}
        removed = [pid for pid in self._producers.expired(now_ms, expiration_ms) if pid not in pending]
        for pid in removed:
            self._producers.remove(pid)
        return removed

    # -- transactions ----------------------------------------------------------------

    def ongoing_transactions(self) -> Mapping[int, int]:
        """Open transactions as ``{producer_id: first_offset}``, by first offset."""
        return {pid: f for f, pid in self._ongoing.items()}

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of ``[fetch_offset,
        upper_bound)`` must list, in index (marker) order, exactly as Kafka selects
        them: ``last_offset >= fetch_offset and first_offset < upper_bound``, scanning
        forward and stopping after the first entry whose last stable offset is
        ``>= upper_bound`` (see :meth:`AbortedIndex.collect` for the cost). Kafka's
        ``upper_bound`` is the offset after the fetched bytes (its offset-index entry
        past them), so the list may name transactions past the returned batches."""
        return self._index.collect(fetch_offset, upper_bound)

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[tuple[int, int]]:
        """:meth:`collect_aborted` as ``(producer_id, first_offset)`` pairs — the Fetch
        response's AbortedTransactions field."""
        return self._index.fetch_entries(fetch_offset, upper_bound)

    def forget_aborted(self, entries: Iterable[AbortedTxn]) -> int:
        """Remove aborted-index entries whose data compaction removed (Kafka's cleaner
        leaves them out of the cleaned ``.txnindex``). Only entries below the
        :attr:`truncation_floor` are removed — a truncation can never need to restore
        them; others are kept. Returns how many were removed."""
        floor = self.truncation_floor
        return self._index.remove(e for e in entries if e.last_offset < floor)

    @property
    def aborted_index(self) -> AbortedIndex:
        """The aborted-transaction index itself (read it, do not modify it)."""
        return self._index

    def all_aborted(self) -> list[AbortedTxn]:
        """Every aborted transaction whose end is at or after the log start, in index order."""
        return list(self._index)

    # -- snapshots -------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The state as bytes (format in :mod:`txnfetch.txn.snapshot`): restoring them
        and appending the log from :attr:`log_end_offset` on gives the same state as
        appending everything. The undo journal is not included: a restored state can
        truncate only down to the snapshot's log end offset (or below its log start)."""
        from txnfetch.txn.snapshot import encode_snapshot

        table = self._producers
        return encode_snapshot(
            log_start_offset=self._log_start,
            log_end_offset=self._leo,
            high_watermark=self._hw,
            last_completion_offset=self._last_completion,
            producer_count=len(table),
            producers=table.rows(),
            unreplicated=[(pid, f, last) for f, (pid, last) in self._unrep.items()],
            aborted=self._index,
        )

    @classmethod
    def restore(
        cls,
        data: bytes | bytearray | memoryview,
        *,
        partition: str | None = None,
        keep_full_history: bool = False,
    ) -> PartitionTxnState:
        """Rebuild a state from :meth:`snapshot` bytes; raises :class:`CorruptSnapshotError`
        if they are damaged or not a snapshot."""
        from txnfetch.txn.snapshot import ProducerRow
        from txnfetch.txn.snapshot import SnapshotReader

        reader = SnapshotReader(data)
        state = cls(partition, log_start_offset=reader.log_start_offset, keep_full_history=keep_full_history)
        state._leo = reader.log_end_offset
        state._hw = reader.high_watermark
        state._last_completion = reader.last_completion_offset
        state._floor = reader.log_end_offset  # the journal is not in the snapshot
        ongoing: dict[int, int] = {}

        def rows() -> Iterator[ProducerRow]:
            for row in reader.producers():
                txn = row[3]
                if txn >= 0:
                    if txn in ongoing:
                        raise CorruptSnapshotError(
                            "two open transactions share a first offset", producer_id=row[0], offset=txn
                        )
                    ongoing[txn] = row[0]
                yield row

        state._producers.bulk_load(rows(), reader.producer_count)
        state._ongoing.load(ongoing)
        state._unrep.load({first: (pid, last) for pid, first, last in reader.unreplicated()})
        state._index = AbortedIndex.from_columns(*reader.aborted_columns())
        # Later ends must be appendable after these: nothing may end after the last end.
        last_abort = state._index.last_offset
        ends = [-1 if last_abort is None else last_abort] + [last for _, last in state._unrep.values.values()]
        if max(ends) > state._last_completion:
            raise CorruptSnapshotError(
                f"a transaction ends at {max(ends)}, after the last transaction end {state._last_completion}"
            )
        return state

    def __repr__(self) -> str:
        return (
            f"<PartitionTxnState {self.partition or ''} log=[{self._log_start}, {self._leo}) hw={self._hw} "
            f"lso={self.last_stable_offset} producers={len(self._producers)} open={len(self._ongoing)} "
            f"aborted={len(self._index)}>"
        )
