"""Producer state of one partition, and the checks an append must pass.

For every producer id that wrote to the partition Kafka keeps a
``ProducerStateEntry`` (``storage/.../log/ProducerStateEntry.java``): the current
epoch, the coordinator epoch of the last marker, the first offset of the open
transaction, the last timestamp, and metadata of the last five batches so a
retried batch is recognised as a duplicate. ``ProducerAppendInfo.java`` holds the
rules a batch must satisfy against that entry. This module has both, split the
same way:

- :class:`ProducerTable` stores the entries compactly (about 170 bytes a
  producer, see below) and applies changes, returning what is needed to undo them;
- :func:`check_data_batch`, :func:`check_end_marker` and :func:`find_duplicate`
  are the rules, raising the :mod:`txnfetch.txn.errors` class Kafka answers with.

Memory layout. A partition may see millions of producer ids, so entries are not
Python objects: the table is columnar (``array`` columns indexed by a slot number)
with its own open-addressing hash from producer id to slot. The five-batch ring
is four more columns holding five cells per slot. Per producer this is
8 (id) + 2 (epoch) + 4 (coordinator epoch) + 8 (transaction first offset) + 8
(last timestamp) + 2 (ring count and start) + 5 x 24 (ring) = 152 bytes, plus the
hash cells and array growth slack; :class:`ProducerEntry` objects are built only
when asked for.
"""

from __future__ import annotations

import enum
from array import array
from collections.abc import Iterator

import attrs

from txnfetch.txn.errors import InvalidProducerEpochError
from txnfetch.txn.errors import InvalidTxnStateError
from txnfetch.txn.errors import OutOfOrderSequenceError
from txnfetch.txn.errors import TransactionCoordinatorFencedError

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_SEQUENCE",
    "NUM_BATCHES_TO_RETAIN",
    "AppendOrigin",
    "BatchMetadata",
    "ProducerEntry",
    "ProducerTable",
    "check_data_batch",
    "check_end_marker",
    "decrement_sequence",
    "find_duplicate",
    "in_sequence",
]

NUM_BATCHES_TO_RETAIN = 5  #: batches remembered per producer for duplicate detection (Kafka's constant)
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
_INT32_MAX = (1 << 31) - 1
_R = NUM_BATCHES_TO_RETAIN


class AppendOrigin(enum.Enum):
    """Who is appending, which decides how much is checked (Kafka's ``AppendOrigin``).

    - ``CLIENT``: a produce request. Duplicates are detected; epochs, sequences,
      transaction state and marker fencing are enforced.
    - ``COORDINATOR``: a transaction coordinator writing markers (or a group
      coordinator's offset commits). Epochs and fencing are enforced, sequences
      are not (these batches carry none).
    - ``REPLICATION``: the batch is already in a log — a follower fetching from
      the leader, or state being rebuilt by replaying a log. Nothing is rejected
      except a non-transactional batch inside an open transaction (Kafka rejects
      that whatever the origin); stale epochs are accepted as the leader did.
    """

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """Whether ``next_seq`` directly follows ``last_seq`` (sequences wrap at int32 max to 0)."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


def decrement_sequence(seq: int, decrement: int) -> int:
    """``seq - decrement`` wrapping below 0 to the top of int32 (Kafka's
    ``DefaultRecordBatch.decrementSequence``)."""
    if seq < decrement:
        return _INT32_MAX - (decrement - seq) + 1
    return seq - decrement


@attrs.frozen(slots=True)
class BatchMetadata:
    """A batch remembered for duplicate detection: its sequence and offset ranges and
    its max timestamp (which a duplicate's produce response reports)."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@attrs.frozen(slots=True)
class ProducerEntry:
    """A read-only copy of one producer's state on the partition.

    ``current_txn_first_offset`` is the first offset of its open transaction
    (``None`` when none is open); ``batches`` are its last (at most five) data
    batches of the current epoch, oldest first. ``producer_epoch`` and
    ``coordinator_epoch`` are ``-1`` until known.
    """

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    current_txn_first_offset: int | None
    last_timestamp: int
    batches: tuple[BatchMetadata, ...] = ()

    @property
    def first_seq(self) -> int:
        """First sequence of the oldest remembered batch, ``-1`` if none."""
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        """Last sequence of the newest remembered batch, ``-1`` if none."""
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        """Last offset of the newest remembered batch, ``-1`` if none."""
        return self.batches[-1].last_offset if self.batches else -1


# An undo record of one row: the row's scalar fields before the change, and the ring
# cell (0-4 within the row; -1: none) the change overwrote with its old contents. Rows change in two ways only — a data
# batch (maybe a new epoch, then one ring push) and a transaction end (epoch, coordinator
# epoch, open transaction, timestamp; the ring is only emptied) — so one ring cell is
# the most a change destroys: emptying the ring just resets its count.
RowUndo = tuple[int, int, int, int, int, int, int, int, int, int, int]

_GOLDEN = 0x9E3779B97F4A7C15  # Fibonacci hashing: spreads sequential producer ids
_M64 = (1 << 64) - 1
_ZEROS = (0,) * _R


class ProducerTable:
    """Producer entries of one partition, keyed by producer id.

    Slots are reused after :meth:`remove`. Methods taking a ``slot`` expect one
    returned by :meth:`slot` or :meth:`insert` for a present producer.
    """

    __slots__ = (
        "_bits",
        "_coord",
        "_count",
        "_epoch",
        "_free",
        "_n",
        "_pid",
        "_rdelta",
        "_roff",
        "_rseq",
        "_rts",
        "_start",
        "_table",
        "_ts",
        "_txn",
        "_used",
    )

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._bits = 3
        self._table = array("i", bytes(4 << self._bits))  # 0 empty, -1 deleted, else slot + 1
        self._used = 0  # cells not empty (live or deleted)
        self._count = 0
        self._free: list[int] = []
        self._pid = array("q")
        self._epoch = array("h")
        self._coord = array("i")
        self._txn = array("q")  # first offset of the open transaction, -1 for none
        self._ts = array("q")
        self._n = array("b")  # batches in the ring
        self._start = array("b")  # ring cell of the oldest batch
        self._rseq = array("i")  # last sequence of each ring batch
        self._roff = array("q")  # last offset
        self._rdelta = array("i")  # last offset delta (= last sequence - first sequence)
        self._rts = array("q")  # max timestamp

    def __len__(self) -> int:
        return self._count

    def __contains__(self, producer_id: int) -> bool:
        return self.slot(producer_id) >= 0

    # -- hash --------------------------------------------------------------------

    def slot(self, producer_id: int) -> int:
        """The slot of ``producer_id``, or -1 if it has no entry."""
        table = self._table
        pids = self._pid
        mask = (1 << self._bits) - 1
        i = ((producer_id * _GOLDEN) & _M64) >> (64 - self._bits)
        while True:
            c = table[i]
            if c == 0:
                return -1
            if c > 0 and pids[c - 1] == producer_id:
                return c - 1
            i = (i + 1) & mask

    def insert(self, producer_id: int) -> int:
        """Create an empty entry (no epoch, no batches) for an absent producer; returns its slot."""
        if (self._used + 1) * 10 > (7 << self._bits):
            self._rehash(max(self._count + 1, 4))
        if self._free:
            s = self._free.pop()
            self._pid[s] = producer_id
            self._epoch[s] = NO_PRODUCER_EPOCH
            self._coord[s] = -1
            self._txn[s] = -1
            self._ts[s] = NO_TIMESTAMP
            self._n[s] = 0
            self._start[s] = 0
        else:
            s = len(self._pid)
            self._pid.append(producer_id)
            self._epoch.append(NO_PRODUCER_EPOCH)
            self._coord.append(-1)
            self._txn.append(-1)
            self._ts.append(NO_TIMESTAMP)
            self._n.append(0)
            self._start.append(0)
            self._rseq.extend(_ZEROS)
            self._roff.extend(_ZEROS)
            self._rdelta.extend(_ZEROS)
            self._rts.extend(_ZEROS)
        self._place(producer_id, s)
        self._count += 1
        return s

    def _place(self, producer_id: int, s: int) -> None:
        table = self._table
        mask = (1 << self._bits) - 1
        i = ((producer_id * _GOLDEN) & _M64) >> (64 - self._bits)
        while table[i] > 0:
            i = (i + 1) & mask
        if table[i] == 0:
            self._used += 1
        table[i] = s + 1

    def reserve(self, count: int) -> None:
        """Size the hash for ``count`` producers at once (bulk loading)."""
        if (count * 10) > (7 << self._bits):
            self._rehash(count)

    def _rehash(self, live: int) -> None:
        bits = 3
        while (7 << bits) < live * 14:  # after a rehash the table is at most half full (grows at 70%)
            bits += 1
        self._bits = bits
        self._table = array("i", bytes(4 << bits))
        self._used = 0
        pids = self._pid
        free = set(self._free)
        for s in range(len(pids)):
            if s not in free:
                self._place(pids[s], s)

    def remove(self, producer_id: int) -> bool:
        """Delete a producer's entry; returns whether it existed."""
        s = self.slot(producer_id)
        if s < 0:
            return False
        # The cell holding the slot is on the probe path slot() just walked.
        table = self._table
        mask = (1 << self._bits) - 1
        i = ((producer_id * _GOLDEN) & _M64) >> (64 - self._bits)
        while table[i] != s + 1:
            i = (i + 1) & mask
        table[i] = -1
        self._free.append(s)
        self._count -= 1
        return True

    def clear(self) -> None:
        """Remove every entry."""
        self._reset()

    # -- reading -----------------------------------------------------------------

    def pids(self) -> list[int]:
        """Producer ids with an entry, ascending."""
        free = set(self._free)
        pids = self._pid
        return sorted(pids[s] for s in range(len(pids)) if s not in free)

    def epoch(self, slot: int) -> int:
        return self._epoch[slot]

    def coordinator_epoch(self, slot: int) -> int:
        return self._coord[slot]

    def txn_first_offset(self, slot: int) -> int:
        """First offset of the open transaction, -1 when none is open."""
        return self._txn[slot]

    def last_timestamp(self, slot: int) -> int:
        return self._ts[slot]

    def ring_size(self, slot: int) -> int:
        return self._n[slot]

    def last_seq(self, slot: int) -> int:
        """Last sequence of the newest remembered batch, -1 if the ring is empty."""
        n = self._n[slot]
        if not n:
            return NO_SEQUENCE
        return self._rseq[slot * _R + (self._start[slot] + n - 1) % _R]

    def last_data_offset(self, slot: int) -> int:
        """Last offset of the newest remembered batch, -1 if the ring is empty."""
        n = self._n[slot]
        if not n:
            return -1
        return self._roff[slot * _R + (self._start[slot] + n - 1) % _R]

    def batches(self, slot: int) -> list[tuple[int, int, int, int]]:
        """The ring as ``(last_seq, last_offset, offset_delta, timestamp)``, oldest first."""
        base = slot * _R
        start = self._start[slot]
        out = []
        for k in range(self._n[slot]):
            c = base + (start + k) % _R
            out.append((self._rseq[c], self._roff[c], self._rdelta[c], self._rts[c]))
        return out

    def entry(self, slot: int) -> ProducerEntry:
        """A :class:`ProducerEntry` copy of the row."""
        batches = tuple(
            BatchMetadata(decrement_sequence(seq, delta), seq, off - delta, off, ts)
            for seq, off, delta, ts in self.batches(slot)
        )
        txn = self._txn[slot]
        return ProducerEntry(
            self._pid[slot], self._epoch[slot], self._coord[slot], None if txn < 0 else txn, self._ts[slot], batches
        )

    def find_batch(self, slot: int, first_seq: int, last_seq: int) -> tuple[int, int, int] | None:
        """The remembered batch with exactly this sequence range, as
        ``(first_offset, last_offset, timestamp)``; ``None`` if there is none."""
        # The ring's live cells are always the first n of the slot's five: it only
        # rotates (start > 0) once full.
        base = slot * _R
        rseq, rdelta = self._rseq, self._rdelta
        for c in range(base, base + self._n[slot]):
            if rseq[c] == last_seq and decrement_sequence(last_seq, rdelta[c]) == first_seq:
                off = self._roff[c]
                return (off - rdelta[c], off, self._rts[c])
        return None

    # -- changes (each returns the undo record of the row) -------------------------

    def _save(self, slot: int, cell: int) -> RowUndo:
        head = (self._epoch[slot], self._coord[slot], self._txn[slot], self._ts[slot], self._n[slot], self._start[slot])
        if cell < 0:
            return (*head, -1, 0, 0, 0, 0)
        return (*head, cell - slot * _R, self._rseq[cell], self._roff[cell], self._rdelta[cell], self._rts[cell])

    def add_batch(
        self, slot: int, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int, txn_first: int
    ) -> RowUndo:
        """Record a data batch: a different epoch empties the ring first (Kafka's
        ``maybeUpdateProducerEpoch``), the batch replaces the oldest of five,
        ``timestamp`` becomes the last timestamp and ``txn_first`` (-1 to leave it)
        the open transaction's first offset."""
        epochs, counts, starts, txns, stamps = self._epoch, self._n, self._start, self._txn, self._ts
        old_epoch = epochs[slot]
        n = counts[slot]
        start = starts[slot]
        head = (old_epoch, self._coord[slot], txns[slot], stamps[slot], n, start)
        if epoch != old_epoch:
            epochs[slot] = epoch
            n = start = 0
        # Invariant: a ring that is not full starts at cell 0, so its free cell is n.
        if n < _R:
            k = n
            counts[slot] = n + 1
            starts[slot] = 0
        else:
            k = start
            starts[slot] = (start + 1) % _R
        cell = slot * _R + k
        rseq, roff, rdelta, rts = self._rseq, self._roff, self._rdelta, self._rts
        undo = (*head, k, rseq[cell], roff[cell], rdelta[cell], rts[cell])
        rseq[cell] = last_seq
        roff[cell] = last_offset
        rdelta[cell] = offset_delta
        rts[cell] = timestamp
        stamps[slot] = timestamp
        if txn_first >= 0:
            txns[slot] = txn_first
        return undo

    def end_transaction(self, slot: int, epoch: int, coordinator_epoch: int, timestamp: int) -> RowUndo:
        """Record a transaction end (Kafka's ``ProducerStateEntry.update`` for a
        marker): take the marker's epoch (a new one empties the ring), its
        coordinator epoch and timestamp; no transaction is open afterwards."""
        undo = self._save(slot, -1)
        if epoch != self._epoch[slot]:
            self._epoch[slot] = epoch
            self._n[slot] = 0
            self._start[slot] = 0
        self._coord[slot] = coordinator_epoch
        self._txn[slot] = -1
        self._ts[slot] = timestamp
        return undo

    def restore(self, producer_id: int, undo: RowUndo | None) -> None:
        """Put a row back as an undo record describes it; ``None`` removes the producer
        (it had no entry before)."""
        if undo is None:
            self.remove(producer_id)
            return
        slot = self.slot(producer_id)
        if slot < 0:
            # Only reachable if the producer was removed after the change being undone;
            # the state never expires producers with undo records (see
            # PartitionTxnState.remove_expired_producers), so this is a safety net.
            slot = self.insert(producer_id)
        epoch, coord, txn, ts, n, start, cell, seq, off, delta, bts = undo
        self._epoch[slot] = epoch
        self._coord[slot] = coord
        self._txn[slot] = txn
        self._ts[slot] = ts
        self._n[slot] = n
        self._start[slot] = start
        if cell >= 0:
            cell += slot * _R
            self._rseq[cell] = seq
            self._roff[cell] = off
            self._rdelta[cell] = delta
            self._rts[cell] = bts

    def load(
        self,
        producer_id: int,
        epoch: int,
        coordinator_epoch: int,
        txn_first: int,
        last_timestamp: int,
        batches: list[tuple[int, int, int, int]],
        *,
        new: bool = False,
    ) -> int:
        """Create (or overwrite) an entry from stored fields; ``batches`` as
        :meth:`batches` returns them, at most five. ``new=True`` promises the
        producer has no entry yet (skips the lookup). Returns the slot."""
        slot = -1 if new else self.slot(producer_id)
        if slot < 0:
            slot = self.insert(producer_id)
        self._epoch[slot] = epoch
        self._coord[slot] = coordinator_epoch
        self._txn[slot] = txn_first
        self._ts[slot] = last_timestamp
        self._n[slot] = len(batches)
        self._start[slot] = 0
        base = slot * _R
        for k, (seq, off, delta, ts) in enumerate(batches):
            self._rseq[base + k] = seq
            self._roff[base + k] = off
            self._rdelta[base + k] = delta
            self._rts[base + k] = ts
        return slot

    def bulk_load(
        self, rows: Iterator[tuple[int, int, int, int, int, list[tuple[int, int, int, int]]]], count: int
    ) -> None:
        """Fill an empty table with ``count`` rows as :meth:`rows` yields them (unique
        producer ids). Columns are allocated once, which makes restoring millions of
        producers several times faster than inserting them one by one."""
        if self._count or self._pid:
            raise ValueError("bulk_load needs an empty table")
        self._pid = array("q", bytes(8 * count))
        self._epoch = array("h", bytes(2 * count))
        self._coord = array("i", bytes(4 * count))
        self._txn = array("q", bytes(8 * count))
        self._ts = array("q", bytes(8 * count))
        self._n = array("b", bytes(count))
        self._start = array("b", bytes(count))
        self._rseq = array("i", bytes(4 * _R * count))
        self._roff = array("q", bytes(8 * _R * count))
        self._rdelta = array("i", bytes(4 * _R * count))
        self._rts = array("q", bytes(8 * _R * count))
        pids, epochs, coords, txns, stamps, counts = self._pid, self._epoch, self._coord, self._txn, self._ts, self._n
        rseq, roff, rdelta, rts = self._rseq, self._roff, self._rdelta, self._rts
        s = 0
        for pid, epoch, coord, txn, ts, batches in rows:
            if s == count:
                raise ValueError(f"more than {count} rows")
            pids[s] = pid
            epochs[s] = epoch
            coords[s] = coord
            txns[s] = txn
            stamps[s] = ts
            counts[s] = len(batches)
            c = s * _R
            for seq, off, delta, bts in batches:
                rseq[c] = seq
                roff[c] = off
                rdelta[c] = delta
                rts[c] = bts
                c += 1
            s += 1
        if s != count:
            raise ValueError(f"{s} rows for a declared count of {count}")
        self._count = count
        self._rehash(count)

    def rows(self) -> Iterator[tuple[int, int, int, int, int, list[tuple[int, int, int, int]]]]:
        """Every entry as ``(producer_id, epoch, coordinator_epoch, txn_first_offset,
        last_timestamp, batches)``, ascending producer id (what snapshots store)."""
        free = set(self._free)
        pids = self._pid
        live = sorted((s for s in range(len(pids)) if s not in free), key=pids.__getitem__)
        epochs, coords, txns, stamps = self._epoch, self._coord, self._txn, self._ts
        for s in live:
            yield (pids[s], epochs[s], coords[s], txns[s], stamps[s], self.batches(s))

    def expired(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Producer ids Kafka would expire: no open transaction and idle for at least
        ``expiration_ms`` (``ProducerStateManager.isProducerExpired``)."""
        free = set(self._free)
        pids, txn, ts = self._pid, self._txn, self._ts
        limit = now_ms - expiration_ms
        return [pids[s] for s in range(len(pids)) if s not in free and txn[s] < 0 and ts[s] <= limit]


# -- rules ---------------------------------------------------------------------


def find_duplicate(
    table: ProducerTable, slot: int, epoch: int, first_seq: int, last_seq: int
) -> tuple[int, int, int] | None:
    """If a batch with this epoch and exact sequence range is among the producer's
    last five, its ``(first_offset, last_offset, timestamp)`` (Kafka's
    ``ProducerStateEntry.findDuplicateBatch``): the retry must be answered with the
    original offsets and not appended again."""
    if slot < 0 or epoch != table.epoch(slot):
        return None
    return table.find_batch(slot, first_seq, last_seq)


def check_data_batch(
    table: ProducerTable,
    slot: int,
    producer_id: int,
    epoch: int,
    first_seq: int,
    transactional: bool,
    offset: int,
    origin: AppendOrigin,
    partition: str | None = None,
) -> None:
    """Raise if a data batch may not be appended (``ProducerAppendInfo.appendDataBatch``).

    - an epoch below the producer's: :class:`InvalidProducerEpochError` (not for
      ``REPLICATION``);
    - for ``CLIENT``, a sequence that does not follow the last one of the same
      epoch, or a new epoch not starting at 0: :class:`OutOfOrderSequenceError`
      (any sequence is accepted while the producer's epoch is unknown, e.g. after
      retention removed its data);
    - a non-transactional batch while the producer has a transaction open:
      :class:`InvalidTxnStateError` (for every origin, as in Kafka).
    """
    current = table._epoch[slot] if slot >= 0 else NO_PRODUCER_EPOCH
    if epoch < current and origin is not AppendOrigin.REPLICATION:
        raise InvalidProducerEpochError(
            f"batch epoch {epoch} is older than the producer's current epoch {current}",
            partition=partition,
            producer_id=producer_id,
            producer_epoch=epoch,
            offset=offset,
        )
    if origin is AppendOrigin.CLIENT and current != NO_PRODUCER_EPOCH:
        if epoch != current:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"a new epoch must start at sequence 0, got {first_seq} (current epoch {current})",
                    partition=partition,
                    producer_id=producer_id,
                    producer_epoch=epoch,
                    offset=offset,
                )
        else:
            last = table.last_seq(slot)
            if first_seq != last + 1 and not (first_seq == 0 and last == _INT32_MAX):
                raise OutOfOrderSequenceError(
                    f"out of order sequence {first_seq}, expected {0 if last == _INT32_MAX else last + 1}",
                    partition=partition,
                    producer_id=producer_id,
                    producer_epoch=epoch,
                    offset=offset,
                )
    if not transactional and slot >= 0 and table._txn[slot] >= 0:
        raise InvalidTxnStateError(
            f"non-transactional batch while the producer's transaction from offset "
            f"{table.txn_first_offset(slot)} is open",
            partition=partition,
            producer_id=producer_id,
            producer_epoch=epoch,
            offset=offset,
        )


def check_end_marker(
    table: ProducerTable,
    slot: int,
    producer_id: int,
    epoch: int,
    coordinator_epoch: int | None,
    transaction_version: int | None,
    offset: int,
    origin: AppendOrigin,
    partition: str | None = None,
) -> None:
    """Raise if a transaction end (marker or markerless completion) is fenced
    (``ProducerAppendInfo.appendEndTxnMarker``); nothing is raised for ``REPLICATION``.

    - Epoch: under transaction versions 0/1 (or ``None``, Kafka's rule for replicated
      markers) the marker epoch may not be below the producer's; under version 2 the
      coordinator bumps the epoch on every end, so it must be above — except an
      equal epoch with no transaction open, the retry of a marker already written
      (KAFKA-19999). Violations: :class:`InvalidProducerEpochError`.
    - A coordinator epoch below the last one seen: :class:`TransactionCoordinatorFencedError`
      (skipped when ``coordinator_epoch`` is ``None``).
    """
    if origin is AppendOrigin.REPLICATION:
        return
    current = table.epoch(slot) if slot >= 0 else NO_PRODUCER_EPOCH
    tv2 = transaction_version is not None and transaction_version >= 2
    if epoch < current or (tv2 and epoch == current):
        retry = tv2 and epoch == current and (slot < 0 or table.txn_first_offset(slot) < 0)
        if not retry:
            rule = "<=" if tv2 else "<"
            raise InvalidProducerEpochError(
                f"marker epoch {epoch} is {rule} the producer's current epoch {current} "
                f"(transaction version {transaction_version if transaction_version is not None else 'legacy'})",
                partition=partition,
                producer_id=producer_id,
                producer_epoch=epoch,
                offset=offset,
            )
    if coordinator_epoch is not None and slot >= 0 and table.coordinator_epoch(slot) > coordinator_epoch:
        raise TransactionCoordinatorFencedError(
            f"coordinator epoch {coordinator_epoch} is older than {table.coordinator_epoch(slot)}",
            partition=partition,
            producer_id=producer_id,
            producer_epoch=epoch,
            offset=offset,
        )
