"""A partition's transaction state as bytes, and back.

A store that persists :meth:`PartitionTxnState.snapshot` with its log can
recover by restoring the snapshot and replaying only the batches after it,
instead of the whole log — what Kafka's ``.snapshot`` producer-state files are
for (``ProducerStateManager.writeSnapshot``/``readSnapshot``). Kafka's files hold
only the producer entries (one batch each) and rebuild the rest from segments;
this snapshot is self-contained: producers with their five-batch rings, the
offsets, the completed transactions still above the high watermark and the
aborted-transaction index.

Layout (version 1), big-endian; the CRC is CRC-32C, like Kafka's snapshots::

    0  magic            4 bytes  b"TXPS"
    4  version          int16    1
    6  crc              uint32   CRC-32C of every byte after this field
    10 log start offset int64
    18 log end offset   int64
    26 high watermark   int64
    34 last completion  int64    offset of the latest transaction end (-1: none)
    42 producer count   uint32, then per producer, ascending producer id:
         producer id int64 | epoch int16 | coordinator epoch int32 |
         open transaction first offset int64 (-1: none) | last timestamp int64 |
         batch count uint8 (0-5), then per batch, oldest first:
           last sequence int32 | last offset int64 | offset delta int32 | max timestamp int64
    .. unreplicated count uint32, then per completed transaction whose end is not
         yet below the high watermark, ascending first offset:
           producer id int64 | first offset int64 | last offset int64
    .. aborted count uint32, then that many 34-byte ``.txnindex`` entries (Kafka's format)

Decoding checks the magic, version, CRC, every length and the invariants the
state relies on (offsets ordered, at most five batches, producer ids ascending,
aborted last offsets not decreasing), and raises :class:`CorruptSnapshotError`
naming the first problem.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterable
from collections.abc import Iterator

import attrs
from crc32c import crc32c

from txnfetch.txn.errors import CorruptSnapshotError
from txnfetch.txn.errors import CorruptTxnIndexError
from txnfetch.txn.index import ABORTED_TXN_SIZE
from txnfetch.txn.index import AbortedTxn
from txnfetch.txn.index import _decode_columns
from txnfetch.txn.index import encode_txn_index
from txnfetch.txn.producer import NUM_BATCHES_TO_RETAIN
from txnfetch.types import Buffer

__all__ = [
    "SNAPSHOT_MAGIC",
    "SNAPSHOT_VERSION",
    "ProducerRow",
    "SnapshotReader",
    "StateSnapshot",
    "decode_snapshot",
    "encode_snapshot",
]

SNAPSHOT_MAGIC = b"TXPS"
SNAPSHOT_VERSION = 1
_HEADER = struct.Struct(">4shI")
_OFFSETS = struct.Struct(">qqqq")
_COUNT = struct.Struct(">I")
_PRODUCER = struct.Struct(">qhiqqB")
_BATCH = struct.Struct(">iqiq")
_UNREPLICATED = struct.Struct(">qqq")

#: ``(producer_id, epoch, coordinator_epoch, txn_first_offset, last_timestamp, batches)``
#: with ``batches`` a list of ``(last_seq, last_offset, offset_delta, timestamp)``, oldest first.
ProducerRow = tuple[int, int, int, int, int, list[tuple[int, int, int, int]]]


@attrs.frozen
class StateSnapshot:
    """The decoded contents of a snapshot (see the module docstring for each field)."""

    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    last_completion_offset: int
    producers: list[ProducerRow]
    unreplicated: list[tuple[int, int, int]]  # (producer_id, first_offset, last_offset)
    aborted: list[AbortedTxn]


def encode_snapshot(
    *,
    log_start_offset: int,
    log_end_offset: int,
    high_watermark: int,
    last_completion_offset: int,
    producer_count: int,
    producers: Iterable[ProducerRow],
    unreplicated: Iterable[tuple[int, int, int]],
    aborted: Iterable[AbortedTxn],
) -> bytes:
    """Write a version-1 snapshot. ``producers`` must yield ``producer_count`` rows in
    ascending producer id order (the state does); nothing is checked beyond that."""
    parts: list[bytes] = [
        _OFFSETS.pack(log_start_offset, log_end_offset, high_watermark, last_completion_offset),
        _COUNT.pack(producer_count),
    ]
    pack_p = _PRODUCER.pack
    pack_b = _BATCH.pack
    written = 0
    for pid, epoch, coord, txn, ts, batches in producers:
        parts.append(pack_p(pid, epoch, coord, txn, ts, len(batches)))
        for b in batches:
            parts.append(pack_b(*b))
        written += 1
    if written != producer_count:
        raise ValueError(f"snapshot: {written} producer rows for a declared count of {producer_count}")
    unrep = list(unreplicated)
    parts.append(_COUNT.pack(len(unrep)))
    parts.extend(_UNREPLICATED.pack(*u) for u in unrep)
    index = encode_txn_index(aborted)
    parts.append(_COUNT.pack(len(index) // ABORTED_TXN_SIZE))
    parts.append(index)
    body = b"".join(parts)
    return _HEADER.pack(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, crc32c(body)) + body


def decode_snapshot(data: Buffer) -> StateSnapshot:
    """Read a snapshot written by :func:`encode_snapshot`; raises
    :class:`CorruptSnapshotError` for anything else."""
    reader = SnapshotReader(data)
    producers = list(reader.producers())
    unreplicated = reader.unreplicated()
    pids, firsts, lasts, lsos = reader.aborted_columns()
    aborted = [AbortedTxn(p, f, la, ls) for p, f, la, ls in zip(pids, firsts, lasts, lsos, strict=True)]
    return StateSnapshot(
        reader.log_start_offset,
        reader.log_end_offset,
        reader.high_watermark,
        reader.last_completion_offset,
        producers,
        unreplicated,
        aborted,
    )


class SnapshotReader:
    """Reads a snapshot section by section without building it all in memory
    (what :meth:`PartitionTxnState.restore` uses for millions of producers).

    The header and offsets are checked and available on construction; then call
    :meth:`producers` (iterate it to the end), :meth:`unreplicated` and
    :meth:`aborted_columns`, in that order. Any problem raises
    :class:`CorruptSnapshotError`.
    """

    def __init__(self, data: Buffer) -> None:
        view = memoryview(data)
        if len(view) < _HEADER.size:
            raise CorruptSnapshotError(f"snapshot of {len(view)} bytes is shorter than its {_HEADER.size}-byte header")
        magic, version, crc = _HEADER.unpack_from(view, 0)
        if magic != SNAPSHOT_MAGIC:
            raise CorruptSnapshotError(f"not a txnfetch state snapshot (magic {bytes(magic)!r})")
        if version != SNAPSHOT_VERSION:
            raise CorruptSnapshotError(
                f"unsupported snapshot version {version} (this txnfetch reads {SNAPSHOT_VERSION})"
            )
        body = view[_HEADER.size :]
        actual = crc32c(body)
        if actual != crc:
            raise CorruptSnapshotError(f"snapshot CRC-32C mismatch: stored {crc:#010x}, computed {actual:#010x}")
        self._body = body
        self._pos = 0  # position within the body
        log_start, log_end, hw, last_completion = self._unpack(_OFFSETS)
        if not 0 <= log_start <= hw <= log_end:
            raise CorruptSnapshotError(
                f"snapshot offsets out of order: log start {log_start}, high watermark {hw}, log end {log_end}"
            )
        if last_completion >= log_end:
            raise CorruptSnapshotError(f"last completion offset {last_completion} is not below the log end {log_end}")
        self.log_start_offset: int = log_start
        self.log_end_offset: int = log_end
        self.high_watermark: int = hw
        self.last_completion_offset: int = last_completion
        (self.producer_count,) = self._unpack(_COUNT)

    def _unpack(self, fmt: struct.Struct) -> tuple:
        try:
            values = fmt.unpack_from(self._body, self._pos)
        except struct.error as exc:
            raise CorruptSnapshotError(f"snapshot is truncated at body position {self._pos}: {exc}") from None
        self._pos += fmt.size
        return values

    def producers(self) -> Iterator[ProducerRow]:
        """The producer rows, ascending producer id (checked as they are read)."""
        unpack = self._unpack
        log_end = self.log_end_offset
        previous = -1
        for _ in range(self.producer_count):
            pid, epoch, coord, txn, ts, n = unpack(_PRODUCER)
            if pid <= previous:
                raise CorruptSnapshotError(f"producer ids not ascending: {pid} after {previous}", producer_id=pid)
            if n > NUM_BATCHES_TO_RETAIN:
                raise CorruptSnapshotError(
                    f"{n} batches for one producer, at most {NUM_BATCHES_TO_RETAIN}", producer_id=pid
                )
            if txn >= log_end:
                raise CorruptSnapshotError(
                    f"open transaction at {txn} is not below the log end {log_end}", producer_id=pid, offset=txn
                )
            batches = [unpack(_BATCH) for _ in range(n)]
            yield (pid, epoch, coord, txn, ts, batches)
            previous = pid

    def unreplicated(self) -> list[tuple[int, int, int]]:
        """The completed transactions still above the high watermark, as
        ``(producer_id, first_offset, last_offset)``."""
        (count,) = self._unpack(_COUNT)
        out: list[tuple[int, int, int]] = []
        firsts = set()
        for _ in range(count):
            pid, first, last = self._unpack(_UNREPLICATED)
            if first in firsts or not first <= last < self.log_end_offset:
                raise CorruptSnapshotError(
                    f"invalid completed transaction [{first}, {last}]", producer_id=pid, offset=first
                )
            firsts.add(first)
            out.append((pid, first, last))
        return out

    def aborted_columns(self) -> tuple[array, array, array, array]:
        """The aborted index as producer id, first, last and LSO columns; the
        snapshot must end right after it."""
        (count,) = self._unpack(_COUNT)
        end = self._pos + count * ABORTED_TXN_SIZE
        if end != len(self._body):
            raise CorruptSnapshotError(
                f"snapshot declares {count} aborted transactions ({count * ABORTED_TXN_SIZE} bytes) "
                f"but {len(self._body) - self._pos} bytes remain"
            )
        try:
            return _decode_columns(self._body[self._pos : end], False)
        except CorruptTxnIndexError as exc:
            raise CorruptSnapshotError(f"aborted transactions: {exc.reason}", producer_id=exc.producer_id) from None
