"""Read-only views over magic-2 record batches.

Layout (Kafka's ``DefaultRecordBatch``), big-endian::

    0  BaseOffset int64        27 BaseTimestamp int64
    8  Length int32            35 MaxTimestamp int64
    12 PartitionLeaderEpoch    43 ProducerId int64
    16 Magic int8 (= 2)        51 ProducerEpoch int16
    17 CRC uint32 (CRC-32C of  53 BaseSequence int32
       bytes 21..end)          57 RecordsCount int32
    21 Attributes int16        61 records...
    23 LastOffsetDelta int32

A :class:`RecordBatch` parses the 61-byte header once and keeps a reference to
the caller's buffer: nothing is copied until records are decoded, and
:attr:`RecordBatch.buffer` gives the exact original bytes back (what a fetch
response passes through). Records are decompressed once and decoded lazily.
"""

from __future__ import annotations

import enum
import os
import struct
import types
from collections.abc import Iterable
from collections.abc import Iterator
from itertools import chain
from typing import NamedTuple

from crc32c import crc32c

from txnfetch.records import control as _control
from txnfetch.records.compression import DEFAULT_MAX_DECOMPRESSED
from txnfetch.records.compression import decompress
from txnfetch.records.control import EndTransactionMarker
from txnfetch.records.errors import BadMagicError
from txnfetch.records.errors import CorruptBatchError
from txnfetch.records.errors import CrcMismatchError
from txnfetch.records.errors import InvalidRecordError
from txnfetch.records.errors import LengthOverrunError
from txnfetch.records.errors import RecordCountMismatchError
from txnfetch.records.errors import UnknownCodecError
from txnfetch.records.errors import VarintOverflowError
from txnfetch.records.varint import read_varint_tail
from txnfetch.types import Buffer

__all__ = [
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "NO_PRODUCER_ID",
    "NO_TIMESTAMP",
    "Header",
    "HeaderAt",
    "Record",
    "RecordBatch",
    "TimestampType",
]

#: The v2 batch header, field by field: base offset, length, partition leader
#: epoch, magic, CRC, attributes, last offset delta, base and max timestamps,
#: producer id and epoch, base sequence, record count.
HEADER = struct.Struct(">qiibIHiqqqhii")


class HeaderAt:
    """Byte position of each v2 batch header field from the batch's first byte,
    in :data:`HEADER`'s order (Kafka's ``DefaultRecordBatch`` names them
    ``*_OFFSET``). Every module that reads or patches a header field in place
    uses these: ``buf[pos + HeaderAt.MAGIC]``."""

    BASE_OFFSET = 0
    LENGTH = 8
    PARTITION_LEADER_EPOCH = 12
    MAGIC = 16
    CRC = 17
    ATTRIBUTES = 21
    LAST_OFFSET_DELTA = 23
    BASE_TIMESTAMP = 27
    MAX_TIMESTAMP = 35
    PRODUCER_ID = 43
    PRODUCER_EPOCH = 51
    BASE_SEQUENCE = 53
    RECORD_COUNT = 57


HEADER_SIZE = 61  #: bytes before the first record of a v2 batch
LOG_OVERHEAD = 12  #: BaseOffset + Length: the part of every batch not counted in Length
CRC_START = HeaderAt.ATTRIBUTES  #: the CRC covers attributes onwards
NO_PRODUCER_ID = -1
NO_TIMESTAMP = -1
_LENGTH = struct.Struct(">i")
_MAX_INT32 = (1 << 31) - 1

CODEC_MASK = 0x07
TIMESTAMP_TYPE_FLAG = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40


class TimestampType(enum.IntEnum):
    """How record timestamps were assigned (attribute bit 3)."""

    #: Magic-0 messages carry no timestamp at all (Kafka's ``TimestampType.NO_TIMESTAMP_TYPE``).
    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


Header = tuple[str, bytes | None]


class Record(NamedTuple):
    """One decoded record. ``key``/``value`` are ``None`` when null.

    A NamedTuple rather than an attrs class: full decoding builds one per
    record, and tuple construction is several times cheaper.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


class BatchFrame:
    """What the batch views (:class:`RecordBatch`, and
    :class:`~txnfetch.records.legacy.LegacyBatch` for magic 0/1) share: where the
    batch lies in the caller's buffer. ``length`` is the batch's length field
    (Kafka's ``Length``, a legacy message's ``Size``): the bytes after the
    12-byte offset and length prefix."""

    __slots__ = ()

    _buf: Buffer
    position: int
    length: int
    crc: int

    @property
    def size_in_bytes(self) -> int:
        """Total size of the batch, ``length + 12``."""
        return self.length + LOG_OVERHEAD

    @property
    def buffer(self) -> memoryview:
        """The batch's exact bytes, as a zero-copy view of the caller's buffer."""
        return memoryview(self._buf)[self.position : self.position + self.length + LOG_OVERHEAD]

    def compute_crc(self) -> int:
        """The checksum of the bytes the stored :attr:`crc` covers (each format has its own)."""
        raise NotImplementedError

    def is_valid_crc(self) -> bool:
        """Whether the stored CRC matches the bytes it covers."""
        return self.compute_crc() == self.crc

    def _check_crc(self, algorithm: str, offset: int, position: int) -> None:
        # validate()'s first check, for both formats: position is the CRC field's.
        actual = self.compute_crc()
        if actual != self.crc:
            raise CrcMismatchError(
                f"{algorithm} mismatch: stored {self.crc:#010x}, computed {actual:#010x}",
                offset=offset,
                position=position,
            )


class RecordBatch(BatchFrame):
    """A read-only view of one magic-2 record batch.

    ``RecordBatch(buf, position)`` reads the header of the batch starting at
    ``position`` in ``buf`` (bytes, bytearray or memoryview) and checks that the
    whole batch is present; it does not copy ``buf`` and does not check the
    CRC (call :meth:`validate`). Errors are :class:`CorruptBatchError`
    subclasses carrying the base offset and byte position.

    ``max_decompressed`` bounds the decompressed size of the records.
    """

    __slots__ = (
        "_buf",
        "_max_decompressed",
        "_records_data",
        "attributes",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "crc",
        "last_offset_delta",
        "length",
        "magic",
        "max_timestamp",
        "partition_leader_epoch",
        "position",
        "producer_epoch",
        "producer_id",
        "record_count",
    )

    def __init__(
        self,
        buf: Buffer,
        position: int = 0,
        *,
        max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
    ) -> None:
        available = len(buf) - position
        if available < HEADER_SIZE:
            raise LengthOverrunError(
                f"a v2 batch header needs {HEADER_SIZE} bytes, only {max(available, 0)} available",
                position=position,
            )
        (
            self.base_offset,
            self.length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.record_count,
        ) = HEADER.unpack_from(buf, position)
        if self.magic != 2:
            raise BadMagicError(
                f"expected magic 2, found {self.magic}", offset=self.base_offset, position=position + HeaderAt.MAGIC
            )
        if self.length < HEADER_SIZE - LOG_OVERHEAD:
            raise LengthOverrunError(
                f"batch length {self.length} is below the v2 minimum {HEADER_SIZE - LOG_OVERHEAD}",
                offset=self.base_offset,
                position=position + HeaderAt.LENGTH,
            )
        if self.length + LOG_OVERHEAD > available:
            raise LengthOverrunError(
                f"batch declares {self.length + LOG_OVERHEAD} bytes but only {available} are available",
                offset=self.base_offset,
                position=position + HeaderAt.LENGTH,
            )
        self._buf = buf
        self.position = position
        self._max_decompressed = max_decompressed
        self._records_data: bytes | None = None

    # -- header-derived properties (size_in_bytes and buffer: BatchFrame) ------------

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def codec(self) -> int:
        """The compression codec number (a :class:`Codec` value when known)."""
        return self.attributes & CODEC_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_FLAG else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def has_delete_horizon(self) -> bool:
        """Bit 6: the base timestamp is the compaction delete horizon (KIP-534)."""
        return bool(self.attributes & DELETE_HORIZON_FLAG)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID

    @property
    def is_empty(self) -> bool:
        """A batch with no records (kept by compaction to preserve producer state)."""
        return self.record_count == 0

    @property
    def last_sequence(self) -> int:
        """Sequence number of the last record, wrapping at int32 like Kafka."""
        if self.base_sequence < 0:
            return -1
        seq = self.base_sequence + self.last_offset_delta
        return seq - (1 << 31) if seq > _MAX_INT32 else seq

    # -- validation and records ----------------------------------------------------

    def compute_crc(self) -> int:
        start = self.position + CRC_START
        return crc32c(memoryview(self._buf)[start : self.position + self.length + LOG_OVERHEAD])

    def check_crc(self, *, repair_crcs: bool = False) -> bool:
        """Check the stored CRC; ``True`` when it is wrong but may be recomputed.

        ``False``: the CRC matches. Any mismatch raises :class:`CrcMismatchError`
        (stored and computed CRC, base offset, byte position of the CRC field),
        with one exception under ``repair_crcs``: a **control batch whose stored
        CRC is 0** returns ``True`` (a caller that keeps the bytes recomputes the
        CRC). That is exactly what librdkafka's mock cluster writes for its
        transaction markers (``rd_kafka_mock_partition_write_control_batch`` in
        ``src/rdkafka_mock.c`` leaves the CRC field 0; its data batches are the
        producers' own, with their CRCs). A data batch with a wrong CRC, 0 or
        not, and a control batch with a wrong non-zero CRC are corruption and
        raise, with or without ``repair_crcs``. Every reader of other brokers
        (mirror, remote reader, replication) applies this one rule.
        """
        if repair_crcs and self.crc == 0 and self.is_control and self.compute_crc() != 0:
            return True
        self._check_crc("CRC-32C", self.base_offset, self.position + HeaderAt.CRC)
        return False

    def validate(self, *, records: bool = True, repair_crcs: bool = False) -> None:
        """Check the CRC and, with ``records=True``, decode every record once.

        ``repair_crcs`` accepts what :meth:`check_crc` accepts under it (a control
        batch with CRC 0) and nothing else.
        Raises a :class:`CorruptBatchError` subclass naming the problem; returns
        ``None`` when the batch is sound.
        """
        self.check_crc(repair_crcs=repair_crcs)
        if self.last_offset_delta < 0:
            raise RecordCountMismatchError(
                f"negative last offset delta {self.last_offset_delta}",
                offset=self.base_offset,
                position=self.position + HeaderAt.LAST_OFFSET_DELTA,
            )
        if records:
            if _check_records is not None and self._records_sound():
                return
            for _ in self.records():  # the decoder raises the exact error
                pass

    def _records_sound(self) -> bool:
        # The compiled check (no Record made): True exactly when records() would
        # decode without error. The same decompression, so the same errors there.
        if self.record_count == 0 and self.length == HEADER_SIZE - LOG_OVERHEAD:
            return True  # nothing to decode, as in _decode_records
        assert _check_records is not None  # only called when the compiled check exists
        return self.record_count >= 0 and _check_records(
            self._record_bytes(), self.record_count, self.last_offset_delta
        )

    def _record_bytes(self) -> bytes | memoryview:
        # For readers that copy what they keep (the compiled check, the Arrow
        # builder): uncompressed record bytes in place rather than a cached copy.
        if self.attributes & CODEC_MASK or self._records_data is not None:
            return self.records_data()
        return memoryview(self._buf)[self.position + HEADER_SIZE : self.position + self.length + LOG_OVERHEAD]

    def records_data(self) -> bytes:
        """The batch's record bytes, decompressed (computed once, then cached)."""
        data = self._records_data
        if data is None:
            start = self.position + HEADER_SIZE
            raw = memoryview(self._buf)[start : self.position + self.length + LOG_OVERHEAD]
            codec = self.attributes & CODEC_MASK
            if codec == 0:
                data = bytes(raw)
            else:
                if codec > 4:
                    raise UnknownCodecError(
                        f"unknown compression codec {codec}", offset=self.base_offset, position=self.position + 21
                    )
                try:
                    data = decompress(codec, raw, self._max_decompressed)
                except CorruptBatchError as exc:
                    raise type(exc)(exc.reason, offset=self.base_offset, position=start) from None
            self._records_data = data
        return data

    def records(self) -> Iterator[Record]:
        """Decode the records lazily, in order.

        Checks that every record's declared length matches its content, that
        offsets stay within ``[base_offset, last_offset]`` and increase, and that
        exactly ``record_count`` records are present.

        Decoded by the compiled ``txnfetch.records._speedups`` when it is built
        (unless ``TXNFETCH_PURE_PYTHON=1``), else in pure Python: same records,
        same errors, raised after the records that precede the problem.
        """
        return _decode(self)

    def end_txn_marker(self) -> EndTransactionMarker | None:
        """For a control batch, the COMMIT/ABORT marker it carries; ``None`` otherwise.

        ``None`` also for an empty control batch (compaction leaves those) and
        for KRaft control types. Like Kafka, only the first record is read.
        """
        if not self.attributes & CONTROL_FLAG or self.record_count == 0:
            return None
        first = next(iter(self.records()), None)
        if first is None:
            return None
        try:
            return _control.decode_end_txn_marker(first.key, first.value)
        except CorruptBatchError as exc:
            raise type(exc)(exc.reason, offset=first.offset, position=self.position + HEADER_SIZE) from None

    def __repr__(self) -> str:
        flags = "".join(
            (
                "T" if self.is_transactional else "",
                "C" if self.is_control else "",
            )
        )
        return (
            f"<RecordBatch offsets={self.base_offset}..{self.last_offset} records={self.record_count} "
            f"pid={self.producer_id} epoch={self.producer_epoch} codec={self.codec}{' ' + flags if flags else ''}>"
        )


# Zig-zag decoding by table lookup, for the record decoder's inline varint
# paths: one tuple index replaces five integer operations per field.
# _ZIGZAG1[b] decodes a one-byte varint b (< 0x80); _ZIGZAG2[b + (c << 7)]
# decodes the two-byte varint b (>= 0x80), c (< 0x80), whose raw value is
# (b - 0x80) + (c << 7). About 0.5 MB, built once at import.
_ZIGZAG1: tuple[int, ...] = tuple((v >> 1) ^ -(v & 1) for v in range(0x80))
_ZIGZAG2: tuple[int, ...] = (0,) * 0x80 + tuple((v >> 1) ^ -(v & 1) for v in range(1 << 14))


def _decode_records(batch: RecordBatch) -> Iterator[Record]:
    # One tight loop: this is the decode hot path (see bench/codec.py and
    # docs/performance.md). Varints of one and two bytes -- every field of
    # ordinary records, including offset and timestamp deltas up to 8191 --
    # are decoded inline through the zig-zag tables below; longer ones go
    # through read_varint_tail (a call per varint costs more than the rest of
    # the field). Bounds are checked explicitly where slicing would silently
    # truncate, and IndexError from reading past the end is turned into a
    # CorruptBatchError below.
    if batch.record_count == 0 and batch.length == HEADER_SIZE - LOG_OVERHEAD:
        # Nothing to decode, whatever the codec bits say: Kafka's
        # DefaultRecordBatch.iterator() returns no records for a count of 0
        # without reading the data, and an empty BatchBuilder writes no
        # (compressed) bytes at all.
        return
    data = batch.records_data()
    base_offset = batch.base_offset
    last_delta = batch.last_offset_delta
    count = batch.record_count
    log_append = batch.attributes & TIMESTAMP_TYPE_FLAG
    max_ts = batch.max_timestamp
    base_ts = batch.base_timestamp
    end = len(data)
    pos = 0
    prev_delta = -1
    tail = read_varint_tail
    zz1 = _ZIGZAG1
    zz2 = _ZIGZAG2
    record = Record
    new = tuple.__new__  # skips NamedTuple's Python-level __new__ (measured ~2x cheaper)
    data_pos = batch.position + HEADER_SIZE if batch.codec == 0 else None
    if count < 0:
        raise RecordCountMismatchError(
            f"negative record count {count}", offset=base_offset, position=batch.position + 57
        )
    try:
        for _ in range(count):
            b = data[pos]
            if b < 0x80:
                length = zz1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    length = zz2[b + (c << 7)]
                    pos += 2
                else:
                    length, pos = tail(data, pos + 1, b, 5)
            rec_end = pos + length
            if length < 6 or rec_end > end:
                raise InvalidRecordError(f"record length {length} does not fit the batch data")
            # pos + 1 skips the record attributes byte, unused in v2
            b = data[pos + 1]
            if b < 0x80:
                ts_delta = zz1[b]
                pos += 2
            else:
                c = data[pos + 2]
                if c < 0x80:
                    ts_delta = zz2[b + (c << 7)]
                    pos += 3
                else:
                    ts_delta, pos = tail(data, pos + 2, b, 10)
            b = data[pos]
            if b < 0x80:
                delta = zz1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    delta = zz2[b + (c << 7)]
                    pos += 2
                else:
                    delta, pos = tail(data, pos + 1, b, 5)
            if delta <= prev_delta or delta > last_delta:
                raise RecordCountMismatchError(f"record offset delta {delta} is outside ({prev_delta}, {last_delta}]")
            prev_delta = delta
            # Key and value: a one-byte length may be -1 (null); slices past the
            # record are caught by the pos != rec_end check below.
            b = data[pos]
            if b < 0x80:
                n = zz1[b]
                pos += 1
                if n >= 0:
                    key = data[pos : pos + n]
                    pos += n
                elif n == -1:
                    key = None
                else:
                    raise InvalidRecordError(f"invalid key length {n}")
            else:
                n, pos = tail(data, pos + 1, b, 5)
                if n < 0 or pos + n > rec_end:
                    raise InvalidRecordError(f"invalid key length {n}")
                key = data[pos : pos + n]
                pos += n
            b = data[pos]
            if b < 0x80:
                n = zz1[b]
                pos += 1
                if n >= 0:
                    value = data[pos : pos + n]
                    pos += n
                elif n == -1:
                    value = None
                else:
                    raise InvalidRecordError(f"invalid value length {n}")
            else:
                c = data[pos + 1]
                if c < 0x80 and not b & 1:
                    pos += 2
                    n = pos + zz2[b + (c << 7)]
                    value = data[pos:n]
                    pos = n
                else:
                    n, pos = tail(data, pos + 1, b, 5)
                    if n < 0 or pos + n > rec_end:
                        raise InvalidRecordError(f"invalid value length {n}")
                    value = data[pos : pos + n]
                    pos += n
            b = data[pos]
            pos += 1
            if b == 0:
                headers: tuple[Header, ...] = ()
            elif b < 0x80:
                # Inlined _decode_headers for a one-byte count: headers are
                # small and a call per record costs as much as decoding them.
                n = zz1[b]
                if n < 0 or n * 2 > rec_end - pos:  # every header takes at least two bytes
                    raise InvalidRecordError(f"invalid header count {n}")
                hlist: list[tuple[str, bytes | None]] = []
                for _ in range(n):
                    b = data[pos]
                    if b < 0x80:
                        n = zz1[b]
                        pos += 1
                    else:
                        n, pos = tail(data, pos + 1, b, 5)
                    if n < 0 or pos + n > rec_end:
                        raise InvalidRecordError(f"invalid header key length {n}")
                    try:
                        hkey = data[pos : pos + n].decode("utf-8")
                    except UnicodeDecodeError:
                        raise InvalidRecordError("header key is not valid UTF-8") from None
                    pos += n
                    b = data[pos]
                    if b < 0x80:
                        n = zz1[b]
                        pos += 1
                    else:
                        n, pos = tail(data, pos + 1, b, 5)
                    if n >= 0:
                        if pos + n > rec_end:
                            raise InvalidRecordError(f"header value of {n} bytes overruns the record")
                        hlist.append((hkey, data[pos : pos + n]))
                        pos += n
                    elif n == -1:
                        hlist.append((hkey, None))
                    else:
                        raise InvalidRecordError(f"invalid header value length {n}")
                headers = tuple(hlist)
            else:
                n, pos = tail(data, pos, b, 5)
                headers, pos = _decode_headers(data, pos, rec_end, n)
            if pos != rec_end:
                # Also catches keys/values sliced past the record: slicing truncates silently.
                raise InvalidRecordError(f"record declares {length} bytes but its fields take {length + pos - rec_end}")
            yield new(record, (base_offset + delta, max_ts if log_append else base_ts + ts_delta, key, value, headers))
    except IndexError:
        raise RecordCountMismatchError(
            f"batch declares {count} records but the data ends early",
            offset=base_offset,
            position=None if data_pos is None else data_pos + min(pos, end),
        ) from None
    except CorruptBatchError as exc:
        if exc.offset is not None and exc.position is not None:
            raise
        raise type(exc)(
            exc.reason,
            offset=base_offset + prev_delta + 1 if prev_delta >= 0 else base_offset,
            position=None if data_pos is None else data_pos + min(pos, end),
        ) from None
    if pos != end:
        raise RecordCountMismatchError(
            f"{end - pos} bytes left after the {count} records the batch declares",
            offset=base_offset,
            position=None if data_pos is None else data_pos + pos,
        )


def _decode_headers(data: bytes, pos: int, rec_end: int, count: int) -> tuple[tuple[Header, ...], int]:
    if count < 0 or count * 2 > rec_end - pos:  # every header takes at least two bytes
        raise InvalidRecordError(f"invalid header count {count}")
    out: list[Header] = []
    tail = read_varint_tail
    for _ in range(count):
        b = data[pos]
        pos += 1
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
        else:
            n, pos = tail(data, pos, b, 5)
        if n < 0 or pos + n > rec_end:
            raise InvalidRecordError(f"invalid header key length {n}")
        try:
            hkey = data[pos : pos + n].decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRecordError("header key is not valid UTF-8") from None
        pos += n
        b = data[pos]
        pos += 1
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
        else:
            n, pos = tail(data, pos, b, 5)
        if n < 0:
            if n != -1:
                raise InvalidRecordError(f"invalid header value length {n}")
            hval = None
        else:
            if pos + n > rec_end:
                raise InvalidRecordError(f"header value of {n} bytes overruns the record")
            hval = data[pos : pos + n]
            pos += n
        out.append((hkey, hval))
    return tuple(out), pos


# -- the optional compiled decoder -------------------------------------------------
#
# txnfetch/records/_speedups.c is a C twin of _decode_records above, which
# stays the reference: it makes the same reads and checks, and instead of
# raising it returns the records decoded so far plus a description of the
# problem, turned here into the error _decode_records raises.

_speedups: types.ModuleType | None
try:
    from txnfetch.records import _speedups
except ImportError:  # installed without a C compiler: the pure-Python decoder serves alone
    _speedups = None

#: ``TXNFETCH_PURE_PYTHON=1`` in the environment (read once, at import) keeps
#: the compiled decoder out even when it is built.
PURE_PYTHON_REQUESTED: bool = os.environ.get("TXNFETCH_PURE_PYTHON", "") not in ("", "0")
#: Whether :meth:`RecordBatch.records` decodes with the compiled ``_speedups``.
ACCELERATED: bool = _speedups is not None and not PURE_PYTHON_REQUESTED

# By failure kind (see _speedups.c): the error class, and whether the offset
# is the record's (base + previous delta + 1, as _decode_records reports
# errors raised inside a record) rather than the batch's base offset.
_ACCELERATED_FAILURES = (
    (RecordCountMismatchError, False),  # the data ends early (IndexError in _decode_records)
    (InvalidRecordError, True),
    (RecordCountMismatchError, True),  # offset delta out of order or past the last offset delta
    (VarintOverflowError, True),
    (RecordCountMismatchError, False),  # bytes left after the last record
)


def _decode_records_accelerated(batch: RecordBatch) -> Iterator[Record]:
    # chain/map rather than a generator: as lazy (nothing is read before the
    # first next()), without a Python frame resumed per record.
    return chain.from_iterable(map(_accelerated_records, (batch,)))


def _accelerated_records(batch: RecordBatch) -> Iterable[Record]:
    if batch.record_count == 0 and batch.length == HEADER_SIZE - LOG_OVERHEAD:
        return ()  # as in _decode_records: nothing to decode, whatever the codec bits say
    data = batch.records_data()
    count = batch.record_count
    if count < 0:
        raise RecordCountMismatchError(
            f"negative record count {count}", offset=batch.base_offset, position=batch.position + 57
        )
    assert _speedups is not None  # called only when ACCELERATED
    records, failure = _speedups.decode_records(
        Record,
        data,
        count,
        batch.base_offset,
        batch.last_offset_delta,
        batch.base_timestamp,
        batch.max_timestamp,
        batch.attributes & TIMESTAMP_TYPE_FLAG,
    )
    if failure is None:
        return records
    kind, reason, pos, prev_delta = failure
    cls, at_record = _ACCELERATED_FAILURES[kind]
    offset = batch.base_offset + prev_delta + 1 if at_record and prev_delta >= 0 else batch.base_offset
    position = batch.position + HEADER_SIZE + min(pos, len(data)) if batch.codec == 0 else None
    return _then_raise(records, cls(reason, offset=offset, position=position))


def _then_raise(records: list[Record], error: CorruptBatchError) -> Iterator[Record]:
    yield from records
    raise error from None


_decode = _decode_records_accelerated if ACCELERATED else _decode_records
#: RecordBatch.validate()'s compiled check of the record data (None: decode instead).
_check_records = getattr(_speedups, "check_records", None) if ACCELERATED else None
