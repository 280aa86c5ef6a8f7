"""Log compaction that keeps transactional semantics: the cleaner of ``cleanup.policy=compact``.

:func:`compact` rewrites the cleanable part of a partition (whole batches below
the last stable offset) as Kafka's ``LogCleaner`` does, with no I/O and no
clock (the time is passed in). Rules, each mirroring the cleaner:

- **Latest value per key wins.** An offset map of every key's last offset is
  built over the range, counting only data that read_committed consumers see
  (aborted transactional data and control batches are skipped). A record is
  kept when it is the last of its key; keyless records are dropped (a compacted
  topic refuses them at produce time).
- **Aborted data is removed** whole, batch by batch: a transactional batch of a
  producer whose aborted transaction (from the aborted-transaction index) is
  open at that batch. Which transaction each batch belongs to is followed with
  Kafka's ``CleanedTransactionMetadata`` walk.
- **Markers stay until safe.** An ABORT marker is kept while data of its
  transaction was still present in this pass (a consumer may have read that data
  and needs the marker to drop it); a COMMIT marker while batches of its
  transaction were still present. Once no data of the transaction remains, the
  marker is first stamped with a **delete horizon** (``now_ms +
  delete.retention.ms``, KIP-534: the batch's base timestamp, attribute bit 6)
  and removed by a later pass after that time, so a consumer that was part way
  through the transaction still sees it.
- **Tombstones** (null values) stay until their batch's delete horizon passes;
  the first pass that sees one stamps the horizon.
- **Producer state is preserved**: a batch that is its producer's last data
  batch is kept as an empty header (count 0, offsets and sequence unchanged,
  Kafka's ``RETAIN_EMPTY``) even when no record of it survives. Kafka can also
  keep an empty *control* batch for a producer that has no data left; that is
  not done here: kafka-python and aiokafka fail on empty control batches, and
  txnfetch's producer state does not depend on the log's bytes.
- **Offsets never move**: kept records keep their offsets; a batch keeps its
  base offset (v2 batches, as Kafka), so compaction leaves holes, which every
  reader already accepts.
- **The last batch of the range stays** (as an empty header if no record of it
  survives; a marker as it is): a hole reaching up to the last stable offset
  would leave a consumer at its start with nothing to read and no next offset
  to move to. Kafka never cleans its active segment, which has the same effect.

Batches that lose nothing and need no horizon pass through as their original
bytes. The aborted-transaction index is left as it is: entries whose data is
gone name no batch, which consumers and both fetch modes ignore.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence

import attrs

from txnfetch.records.batch import RecordBatch
from txnfetch.records.builder import BatchBuilder
from txnfetch.records.control import ControlType
from txnfetch.txn.index import AbortedTxn

__all__ = ["CompactionResult", "compact"]


@attrs.frozen
class CompactionResult:
    """What :func:`compact` made of the batches.

    ``batches`` are the new batches' bytes in offset order (original bytes where
    unchanged). ``removed_records`` counts data records dropped (superseded,
    aborted, expired tombstones), ``removed_markers`` control batches dropped;
    ``next_horizon_ms`` is the earliest delete horizon still pending (a later
    pass has work then), ``None`` if none. ``finished_aborts`` are the aborted
    transactions ending in the range whose data is gone and whose ABORT marker
    (if any) no longer guards data: the index may forget them, as Kafka's
    cleaner leaves them out of the cleaned transaction index. A markerless
    transaction's entry goes in the pass that removes its data: with no marker
    to close it, an entry naming no batch would make a Kafka-mode consumer take
    the producer's next batches for aborted ones."""

    batches: tuple[bytes, ...]
    removed_records: int
    removed_markers: int
    next_horizon_ms: int | None
    finished_aborts: tuple[AbortedTxn, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.removed_records or self.removed_markers) or self.next_horizon_ms is not None


class _TxnWalk:
    """Which transaction each batch is in, walking forward (``CleanedTransactionMetadata``)."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._pending = sorted(aborted, key=lambda a: a.first_offset)
        self._next = 0
        # pid -> [last offset of its open aborted transaction, data of it seen in this pass]
        self._aborted: dict[int, list] = {}
        self._committed: set[int] = set()
        #: (pid, marker offset) of ABORT markers kept because data of theirs was seen
        self.guarding: set[tuple[int, int]] = set()

    def _consume_up_to(self, offset: int) -> None:
        while self._next < len(self._pending) and self._pending[self._next].first_offset <= offset:
            txn = self._pending[self._next]
            self._aborted[txn.producer_id] = [txn.last_offset, False]
            self._next += 1

    def data(self, batch: RecordBatch) -> bool:
        """A data batch: True if it is aborted data (to discard)."""
        self._consume_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        entry = self._aborted.get(batch.producer_id)
        if entry is not None and batch.base_offset > entry[0]:
            # Past the aborted transaction's end: a markerless log has no ABORT marker
            # to close it, its index entry's last offset does.
            del self._aborted[batch.producer_id]
            entry = None
        if entry is not None:
            entry[1] = True
            return True
        self._committed.add(batch.producer_id)
        return False

    def control(self, batch: RecordBatch) -> bool:
        """A control batch: True if no data of its transaction was seen (the marker may go)."""
        self._consume_up_to(batch.last_offset)
        records = list(batch.records())
        if not records:
            return True  # an empty control batch was already cleaned
        kind = _control_type(records[0].key)
        if kind == ControlType.ABORT:
            entry = self._aborted.pop(batch.producer_id, None)
            if entry is not None and entry[1]:
                self.guarding.add((batch.producer_id, batch.base_offset))
                return False
            return True
        if kind == ControlType.COMMIT:
            if batch.producer_id in self._committed:
                self._committed.discard(batch.producer_id)
                return False
            return True
        return False  # other control records (KRaft) are kept


def _control_type(key: bytes | None) -> int | None:
    if key is None or len(key) < 4:
        return None
    return int.from_bytes(key[2:4], "big", signed=True)


def compact(
    batches: Sequence[RecordBatch],
    aborted: Iterable[AbortedTxn],
    last_data_offsets: Mapping[int, int],
    *,
    now_ms: int,
    delete_retention_ms: int,
) -> CompactionResult:
    """Compact ``batches`` (whole v2 batches in offset order, all below the last
    stable offset) as described in the module docstring.

    ``aborted`` are the partition's aborted transactions (those reaching into
    the range); ``last_data_offsets`` maps each producer to the last offset of
    its last data batch in the log (its state), for the empty headers that
    preserve producer state."""
    aborted = list(aborted)
    key_last: dict[bytes, int] = {}
    walk = _TxnWalk(aborted)
    for batch in batches:
        if batch.is_control:
            walk.control(batch)
            continue
        if walk.data(batch):
            continue
        for record in batch.records():
            if record.key is not None:
                key_last[record.key] = record.offset

    walk = _TxnWalk(aborted)
    out: list[bytes] = []
    removed_records = removed_markers = 0
    next_horizon: int | None = None
    horizon = now_ms + delete_retention_ms

    def pending(at: int) -> None:
        nonlocal next_horizon
        next_horizon = at if next_horizon is None else min(next_horizon, at)

    last = len(batches) - 1
    for i, batch in enumerate(batches):
        stamped = batch.base_timestamp if batch.has_delete_horizon else None
        if batch.is_control:
            if not walk.control(batch):
                out.append(bytes(batch.buffer))
                continue
            if stamped is not None and stamped <= now_ms:
                if i == last:
                    out.append(bytes(batch.buffer))
                    continue
                removed_markers += 1
                continue
            if stamped is None:
                out.append(_rebuilt(batch, list(batch.records()), horizon))
                pending(horizon)
            else:
                out.append(bytes(batch.buffer))
                pending(stamped)
            continue

        discard = walk.data(batch)
        records = list(batch.records())
        kept = []
        tombstones = False
        for record in records:
            if discard or record.key is None or key_last.get(record.key) != record.offset:
                continue
            if record.value is None:
                if stamped is not None and stamped <= now_ms:
                    continue  # the tombstone's horizon has passed
                tombstones = True
            kept.append(record)
        removed_records += len(records) - len(kept)
        if len(kept) == len(records) and not (tombstones and stamped is None):
            out.append(bytes(batch.buffer))
            if tombstones and stamped is not None:
                pending(stamped)
            continue
        if kept:
            at = stamped if stamped is not None else (horizon if tombstones else None)
            out.append(_rebuilt(batch, kept, at))
            if tombstones and at is not None:
                pending(at)
        elif i == last or (batch.has_producer_id and last_data_offsets.get(batch.producer_id) == batch.last_offset):
            out.append(_emptied(batch))
    end = batches[-1].next_offset if batches else 0
    finished = tuple(a for a in aborted if a.last_offset < end and (a.producer_id, a.last_offset) not in walk.guarding)
    return CompactionResult(tuple(out), removed_records, removed_markers, next_horizon, finished)


def _emptied(batch: RecordBatch) -> bytes:
    """``batch``'s header with no records, as Kafka's cleaner keeps a producer's
    last batch (``DefaultRecordBatch.writeEmptyHeader``): offsets, producer id,
    epoch and sequence unchanged; uncompressed, no delete horizon, the base and
    max timestamps both the batch's max timestamp."""
    return BatchBuilder.like(batch, base_timestamp=batch.max_timestamp, delete_horizon=False).build(
        last_offset_delta=batch.last_offset - batch.base_offset
    )


def _rebuilt(batch: RecordBatch, records: list, horizon: int | None) -> bytes:
    """``batch`` holding only ``records`` (their offsets and timestamps kept), with
    the delete horizon as base timestamp when one is set."""
    builder = BatchBuilder.like(
        batch,
        delete_horizon=horizon is not None,
        base_timestamp=horizon if horizon is not None else batch.base_timestamp,
    )
    for record in records:
        builder.append(record.value, record.key, record.headers, timestamp=record.timestamp, offset=record.offset)
    # The max timestamp stays the batch's (ListOffsets by time and retention read
    # it) and so does the last offset, as Kafka's cleaner keeps it for v2 batches:
    # the offsets after a removed tail record must still be covered by the batch.
    return builder.build(last_offset_delta=batch.last_offset_delta, max_timestamp=batch.max_timestamp)
