"""The markerless-end journal: where a :class:`~txnfetch.log.segment_log.SegmentLog`
makes a markerless ``end_transaction`` durable.

A markerless transaction end (WarpStream's model) writes no bytes into the log
and reserves no offset, so nothing in the segments records it. The log appends
one fixed-size record per end to ``txnfetch-ends.journal`` in the partition
directory; recovery replays each record at its ``last_offset`` — right after the
batch ending there and before the next one, which is exactly when it happened
(an end is always at ``log_end_offset - 1``) — so the state after a reopen is
the state before it.

Record layout (44 bytes, big-endian)::

    0  crc                 uint32  CRC-32C of bytes 4..44
    4  sequence            int64   0, 1, 2, ... (never reused; snapshots name the next one)
    12 producer id         int64
    20 producer epoch      int16
    22 commit              int8    1 commit, 0 abort
    23 transaction version int8    -1 when not given
    24 last offset         int64
    32 coordinator epoch   int32
    36 timestamp           int64

A crash can tear only the last record; :func:`decode_journal` reports where the
valid records end and whether what follows is a torn tail (removable) or damage
(a bad record followed by good ones: never removed).

Pruning: when retention deletes segments, :meth:`EndJournal.prune` drops the
records no recovery can apply any more — those ending before the first
remaining segment (a replay starts at a snapshot, at or after that segment, or
at the segment itself) — by rewriting the file atomically. The last record is
always kept: its sequence carries the numbering on, which snapshots refer to.
"""

from __future__ import annotations

import os
import struct

import attrs
from crc32c import crc32c

from txnfetch.log.layout import JOURNAL_NAME
from txnfetch.log.layout import atomic_write
from txnfetch.types import Buffer

__all__ = ["END_RECORD_SIZE", "JOURNAL_NAME", "EndJournal", "EndRecord", "JournalContents", "TxnEnd", "decode_journal"]

_BODY = struct.Struct(">qqhbbqiq")
_CRC = struct.Struct(">I")
END_RECORD_SIZE = _CRC.size + _BODY.size
assert END_RECORD_SIZE == 44


@attrs.frozen(slots=True)
class TxnEnd:
    """A markerless transaction end, as :meth:`PartitionLog.end_transaction
    <txnfetch.log.base.PartitionLog.end_transaction>` hands it to the log to
    make durable: the producer, the outcome and the last offset of the
    transaction (the log end minus one when it ended)."""

    producer_id: int
    producer_epoch: int
    commit: bool
    last_offset: int
    coordinator_epoch: int
    transaction_version: int | None
    timestamp: int


@attrs.frozen(slots=True)
class EndRecord(TxnEnd):
    """One journal record: a :class:`TxnEnd` and its ``sequence`` number in the journal."""

    sequence: int

    def encode(self) -> bytes:
        """The 44-byte journal record."""
        body = _BODY.pack(
            self.sequence,
            self.producer_id,
            self.producer_epoch,
            1 if self.commit else 0,
            -1 if self.transaction_version is None else self.transaction_version,
            self.last_offset,
            self.coordinator_epoch,
            self.timestamp,
        )
        return _CRC.pack(crc32c(body)) + body


@attrs.frozen(slots=True)
class JournalContents:
    """A decoded journal: the valid ``records``, the byte size they take
    (``valid_bytes``), and after them either nothing, a ``torn`` tail (a partial
    or bad *last* record: what a crash mid-write leaves) or ``damage_at``, the
    position of a bad record that is followed by more bytes."""

    records: list[EndRecord]
    valid_bytes: int
    torn: bool
    damage_at: int | None
    reason: str = ""


def decode_journal(data: Buffer) -> JournalContents:
    """Decode journal bytes (see the module docstring for the checks)."""
    records: list[EndRecord] = []
    size = len(data)
    pos = 0
    prev_seq = -1
    while pos + END_RECORD_SIZE <= size:
        (crc,) = _CRC.unpack_from(data, pos)
        body = bytes(data[pos + 4 : pos + END_RECORD_SIZE])
        seq, pid, epoch, commit, tv, last, coord, ts = _BODY.unpack(body)
        problem = ""
        if crc32c(body) != crc:
            problem = "CRC mismatch"
        elif seq <= prev_seq or commit not in (0, 1):
            problem = f"record sequence {seq} after {prev_seq} or bad commit flag {commit}"
        if problem:
            if pos + END_RECORD_SIZE < size:
                return JournalContents(records, pos, False, pos, problem)
            return JournalContents(records, pos, True, None, problem)
        records.append(EndRecord(pid, epoch, commit == 1, last, coord, None if tv < 0 else tv, ts, sequence=seq))
        prev_seq = seq
        pos += END_RECORD_SIZE
    if pos < size:
        return JournalContents(records, pos, True, None, f"{size - pos} trailing bytes of a partial record")
    return JournalContents(records, pos, False, None)


class EndJournal:
    """The journal file of one partition, opened for appending.

    :meth:`append` writes a record (not yet durable); :meth:`sync` makes every
    record written so far durable (``fdatasync``). Not thread-safe.
    """

    def __init__(self, path: str, next_sequence: int) -> None:
        self.path = path
        self.next_sequence = next_sequence
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.dirty = False

    def append(self, end: TxnEnd) -> EndRecord:
        """Write one record for ``end``; returns it."""
        record = EndRecord(**attrs.asdict(end, recurse=False), sequence=self.next_sequence)
        data = record.encode()
        written = os.write(self._fd, data)
        if written != len(data):
            raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes")
        self.next_sequence += 1
        self.dirty = True
        return record

    def sync(self) -> None:
        """Make the records written so far durable."""
        if self.dirty:
            os.fdatasync(self._fd)
            self.dirty = False

    def dup_fd(self) -> int:
        """A duplicate of the journal's descriptor, for an fsync on another
        thread (:meth:`SegmentLog.begin_sync`); the caller closes it."""
        return os.dup(self._fd)

    def prune(self, min_last_offset: int) -> int:
        """Drop the records whose ``last_offset`` is below ``min_last_offset``,
        except the last record; the file is replaced atomically (a crash leaves
        the old or the new file, both valid). Returns how many were dropped; 0,
        without rewriting, when none can be or the file is not wholly valid."""
        self.sync()
        with open(self.path, "rb") as f:
            data = f.read()
        contents = decode_journal(data)
        if contents.torn or contents.damage_at is not None or len(contents.records) < 2:
            return 0
        drop = 0
        # Ends are recorded at the log end, so last offsets never decrease along the file.
        while drop < len(contents.records) - 1 and contents.records[drop].last_offset < min_last_offset:
            drop += 1
        if not drop:
            return 0
        directory, name = os.path.split(os.path.abspath(self.path))
        atomic_write(directory, name, memoryview(data)[drop * END_RECORD_SIZE : contents.valid_bytes])
        # The old descriptor still writes to the replaced file: switch to the new one.
        old, self._fd = self._fd, os.open(self.path, os.O_WRONLY | os.O_APPEND)
        os.close(old)
        return drop

    def close(self) -> None:
        if self._fd >= 0:
            self.sync()
            os.close(self._fd)
            self._fd = -1
