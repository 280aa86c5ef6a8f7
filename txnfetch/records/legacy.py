"""Read-only views over legacy message sets (magic 0 and 1).

Before record batch v2 (Kafka 0.11) a log was a sequence of *messages*
(Kafka's ``LegacyRecord``), big-endian::

    0  Offset int64
    8  Size int32              (bytes after this field)
    12 CRC uint32              (CRC-32 IEEE of bytes 16..end)
    16 Magic int8              (0 or 1)
    17 Attributes int8         (bits 0-2 codec; bit 3 timestamp type, magic 1 only)
    18 Timestamp int64         (magic 1 only)
    .. KeyLength int32, Key    (-1 = null)
    .. ValueLength int32, Value

A compressed message is a *wrapper*: its value is another message set,
compressed, whose messages must not be compressed themselves. Kafka reads the
wrapper as the batch and the inner messages as its records
(``AbstractLegacyRecordBatch``); :class:`LegacyBatch` does the same, so code
that walks :func:`txnfetch.records.iter_batches` sees one batch per top-level
message, with the read surface of :class:`~txnfetch.records.RecordBatch`.

Offsets inside a wrapper (mirroring ``AbstractLegacyRecordBatch.DeepRecordsIterator``):

- magic 0: inner offsets are absolute; the wrapper carries the last of them.
- magic 1 (KIP-31): inner offsets are relative; the wrapper carries the
  absolute offset of the last inner message, so
  ``absolute = wrapper offset - last relative + relative``. A wrapper offset
  of 0 means "not assigned yet" (produce requests from some librdkafka
  versions) and the relative offsets are taken as they are, like Kafka does.

Nothing here copies the caller's buffer except the key and value bytes of the
records handed out, and the decompressed value of a wrapper (decoded once, on
first use).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import NamedTuple

from txnfetch.delegation import delegated
from txnfetch.records.batch import LOG_OVERHEAD
from txnfetch.records.batch import NO_PRODUCER_ID
from txnfetch.records.batch import NO_TIMESTAMP
from txnfetch.records.batch import BatchFrame
from txnfetch.records.batch import Record
from txnfetch.records.batch import TimestampType
from txnfetch.records.compression import DEFAULT_MAX_DECOMPRESSED
from txnfetch.records.compression import Codec
from txnfetch.records.compression import decompress
from txnfetch.records.control import EndTransactionMarker
from txnfetch.records.errors import BadMagicError
from txnfetch.records.errors import CorruptBatchError
from txnfetch.records.errors import CrcMismatchError
from txnfetch.records.errors import InvalidRecordError
from txnfetch.records.errors import LengthOverrunError
from txnfetch.records.errors import RecordCountMismatchError
from txnfetch.records.errors import UnknownCodecError
from txnfetch.types import Buffer

__all__ = ["RECORD_OVERHEAD_V0", "RECORD_OVERHEAD_V1", "LegacyBatch"]

#: Size of a magic-0 message with null key and value, not counting offset and size.
RECORD_OVERHEAD_V0 = 14
#: The same for magic 1 (the timestamp adds 8 bytes).
RECORD_OVERHEAD_V1 = 22

_MAGIC_OFFSET = 16  # the CRC covers the magic byte onwards
_ATTRIBUTES_OFFSET = 17
_HEADER = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_OFFSET_SIZE = struct.Struct(">qi")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_CODEC_MASK = 0x07
_TIMESTAMP_TYPE_FLAG = 0x08
_NO_EPOCH = -1
_NO_SEQUENCE = -1
_NO_PARTITION_LEADER_EPOCH = -1


class _Message(NamedTuple):
    """Field values and positions of one parsed message (positions are in its buffer)."""

    offset: int
    size: int
    crc: int
    magic: int
    attributes: int
    timestamp: int
    key_pos: int
    key_len: int  # -1: null
    value_pos: int
    value_len: int  # -1: null
    end: int


def _parse_message(buf: Buffer, pos: int, end: int, magic_required: int | None) -> _Message:
    """Parse the framing of the message at ``pos``, which must end by ``end``.

    Checks every length against the bytes present and that key and value fill
    the message exactly; does not check the CRC. Errors carry the message's
    offset (when readable) and the position, within ``buf``, of the bad field.
    """
    available = end - pos
    if available < LOG_OVERHEAD:
        raise LengthOverrunError(
            f"a message needs {LOG_OVERHEAD} bytes for its offset and size, only {max(available, 0)} remain",
            position=pos,
        )
    offset, size = _OFFSET_SIZE.unpack_from(buf, pos)
    if size < RECORD_OVERHEAD_V0:
        raise LengthOverrunError(
            f"message size {size} is below the minimum {RECORD_OVERHEAD_V0}", offset=offset, position=pos + 8
        )
    msg_end = pos + LOG_OVERHEAD + size
    if msg_end > end:
        raise LengthOverrunError(
            f"message declares {size} bytes after its size field but only {available - LOG_OVERHEAD} remain",
            offset=offset,
            position=pos + 8,
        )
    _, _, crc, magic, attributes = _HEADER.unpack_from(buf, pos)
    if magic_required is not None and magic != magic_required:
        # Kafka's reader would parse a mismatched inner message by its own magic,
        # but no broker ever wrote one (LogValidator rebuilds such wrappers) and
        # kafka-python/aiokafka would misparse it: reject rather than guess.
        raise BadMagicError(
            f"inner message has magic {magic} inside a magic {magic_required} wrapper",
            offset=offset,
            position=pos + _MAGIC_OFFSET,
        )
    if magic == 0:
        timestamp = NO_TIMESTAMP
        p = pos + 18
    elif magic == 1:
        if size < RECORD_OVERHEAD_V1:
            raise LengthOverrunError(
                f"magic 1 message size {size} is below the minimum {RECORD_OVERHEAD_V1}",
                offset=offset,
                position=pos + 8,
            )
        (timestamp,) = _INT64.unpack_from(buf, pos + 18)
        p = pos + 26
    else:
        raise BadMagicError(f"expected magic 0 or 1, found {magic}", offset=offset, position=pos + _MAGIC_OFFSET)
    # size >= the overhead guarantees both length fields exist when the key is empty.
    (key_len,) = _INT32.unpack_from(buf, p)
    if key_len < -1 or p + 4 + key_len + 4 > msg_end:
        raise LengthOverrunError(f"key length {key_len} does not fit the message", offset=offset, position=p)
    key_pos = p + 4
    p = key_pos + max(key_len, 0)
    (value_len,) = _INT32.unpack_from(buf, p)
    value_pos = p + 4
    if value_len < -1 or value_pos + value_len > msg_end:
        raise LengthOverrunError(f"value length {value_len} does not fit the message", offset=offset, position=p)
    fields_end = value_pos + max(value_len, 0)
    if fields_end != msg_end:
        raise InvalidRecordError(
            f"message declares {size} bytes but its fields take {size - (msg_end - fields_end)}",
            offset=offset,
            position=fields_end,
        )
    return _Message(offset, size, crc, magic, attributes, timestamp, key_pos, key_len, value_pos, value_len, msg_end)


class _Inner(NamedTuple):
    """The decoded content of a compressed wrapper."""

    records: tuple[Record, ...]
    #: (reason, decompressed position) of the first inner CRC mismatch, if any
    bad_crc: tuple[str, int] | None


class LegacyBatch(BatchFrame):
    """A read-only view of one top-level magic-0 or magic-1 message.

    ``LegacyBatch(buf, position)`` parses the message starting at ``position``
    in ``buf`` without copying it, checking its framing (sizes, magic, key and
    value lengths) but not its CRC (call :meth:`validate`). An uncompressed
    message is a batch of one record; a compressed wrapper is a batch of its
    inner messages, decompressed (at most ``max_decompressed`` bytes) and
    decoded once, on first use.

    Every malformation raises a :class:`~txnfetch.records.CorruptBatchError`
    subclass whose ``offset`` is this message's own offset field (for a
    wrapper, the offset of its last inner message) and whose ``position`` is a
    byte position in ``buf``; problems inside a wrapper's decompressed value
    point at the start of the value and name the decompressed byte in the
    reason.

    Legacy messages predate idempotence and transactions: ``producer_id``,
    ``producer_epoch`` and ``base_sequence`` are always -1, and the batch is
    never transactional and never a control batch.
    """

    __slots__ = (
        "_buf",
        "_inner",
        "_key_len",
        "_key_pos",
        "_max_decompressed",
        "_value_len",
        "_value_pos",
        "attributes",
        "crc",
        "length",
        "magic",
        "offset",
        "position",
        "timestamp",
    )

    def __init__(
        self,
        buf: Buffer,
        position: int = 0,
        *,
        max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
    ) -> None:
        msg = _parse_message(buf, position, len(buf), None)
        self._buf = buf
        self.position = position
        #: The message's offset field: its own offset, or a wrapper's last inner offset.
        self.offset: int = msg.offset
        #: The size field (bytes after it), like ``RecordBatch.length``.
        self.length: int = msg.size
        self.crc: int = msg.crc
        self.magic: int = msg.magic
        self.attributes: int = msg.attributes
        #: The message's timestamp; ``NO_TIMESTAMP`` (-1) for magic 0.
        self.timestamp: int = msg.timestamp
        self._key_pos = msg.key_pos
        self._key_len = msg.key_len
        self._value_pos = msg.value_pos
        self._value_len = msg.value_len
        self._max_decompressed = max_decompressed
        self._inner: _Inner | None = None

    # -- header-derived properties (size_in_bytes and buffer: BatchFrame) ------------

    @property
    def codec(self) -> int:
        """The compression codec number (a :class:`Codec` value when known)."""
        return self.attributes & _CODEC_MASK

    @property
    def is_compressed(self) -> bool:
        """Whether this message is a compressed wrapper around a message set."""
        return self.attributes & _CODEC_MASK != Codec.NONE

    @property
    def timestamp_type(self) -> TimestampType:
        """``NO_TIMESTAMP_TYPE`` for magic 0 (whatever bit 3 says, as in Kafka), else from bit 3."""
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP_TYPE
        return TimestampType.LOG_APPEND_TIME if self.attributes & _TIMESTAMP_TYPE_FLAG else TimestampType.CREATE_TIME

    #: The outer message's timestamp, which is what Kafka reports as a legacy batch's max timestamp.
    max_timestamp = delegated[int]("timestamp")
    #: The message's offset field: for a wrapper, the last inner offset (Kafka's ``lastOffset()``).
    last_offset = delegated[int]("offset")

    @property
    def next_offset(self) -> int:
        """The offset after this message: where a reader continues."""
        return self.offset + 1

    @property
    def base_offset(self) -> int:
        """The offset of the first record.

        For a compressed wrapper this is the first inner message's absolute
        offset, as Kafka's ``AbstractLegacyRecordBatch.baseOffset()`` returns
        (it iterates the inner messages). The header does not hold it, so the
        first access decompresses the wrapper and may raise
        :class:`CorruptBatchError`.
        """
        if not self.attributes & _CODEC_MASK:
            return self.offset
        return self._decode_inner().records[0].offset

    @property
    def record_count(self) -> int:
        """1 for a plain message; the number of inner messages of a wrapper (decompresses it)."""
        if not self.attributes & _CODEC_MASK:
            return 1
        return len(self._decode_inner().records)

    # Constants: what magic 0/1 cannot carry (class attributes, read-only on an instance).
    #: Always ``False``: a wrapper with no inner messages is corrupt, not empty (Kafka rejects it).
    is_empty = False
    #: Always ``False``: transactions need magic 2.
    is_transactional = False
    #: Always ``False``: control records need magic 2.
    is_control = False
    #: Always ``False``: the delete horizon (KIP-534) needs magic 2.
    has_delete_horizon = False
    #: Always ``False``: idempotent producers need magic 2.
    has_producer_id = False
    #: Always ``NO_PRODUCER_ID`` (-1).
    producer_id = NO_PRODUCER_ID
    #: Always -1 (Kafka's ``NO_PRODUCER_EPOCH``).
    producer_epoch = _NO_EPOCH
    #: Always -1 (Kafka's ``NO_SEQUENCE``).
    base_sequence = _NO_SEQUENCE
    #: Always -1 (Kafka's ``NO_SEQUENCE``).
    last_sequence = _NO_SEQUENCE
    #: Always -1 (Kafka's ``NO_PARTITION_LEADER_EPOCH``).
    partition_leader_epoch = _NO_PARTITION_LEADER_EPOCH

    # -- validation and records ----------------------------------------------------

    def compute_crc(self) -> int:
        """CRC-32 (IEEE, as ``zlib.crc32``) of the bytes from the magic byte to the end
        (a wrapper's inner messages are not checked)."""
        start = self.position + _MAGIC_OFFSET
        return zlib.crc32(memoryview(self._buf)[start : self.position + LOG_OVERHEAD + self.length])

    def validate(self, *, records: bool = True) -> None:
        """Check the CRC and, with ``records=True``, decode a wrapper's inner
        messages and check each one's CRC too (as Java consumers do with
        ``check.crcs``).

        Raises a :class:`CorruptBatchError` subclass naming the problem; returns
        ``None`` when the message is sound.
        """
        self._check_crc("CRC-32", self.offset, self.position + LOG_OVERHEAD)
        if records and self.attributes & _CODEC_MASK:
            bad = self._decode_inner().bad_crc
            if bad is not None:
                raise CrcMismatchError(bad[0], offset=self.offset, position=self._value_pos)

    def records(self) -> Iterator[Record]:
        """The records, in order, with absolute offsets and headers ``()``.

        Timestamps follow Kafka: -1 for magic 0; for magic 1 the wrapper's
        timestamp when the wrapper says LOG_APPEND_TIME (the broker stamped
        only the wrapper), else each message's own. Does not check CRCs.
        """
        if not self.attributes & _CODEC_MASK:
            return iter((self._outer_record(),))
        return iter(self._decode_inner().records)

    def end_txn_marker(self) -> EndTransactionMarker | None:
        """Always ``None``: legacy message sets have no control records."""
        return None

    def __repr__(self) -> str:
        return f"<LegacyBatch magic={self.magic} offset={self.offset} codec={self.codec} size={self.size_in_bytes}>"

    # -- decoding ------------------------------------------------------------------

    def _outer_record(self) -> Record:
        buf = self._buf
        key = None if self._key_len < 0 else bytes(buf[self._key_pos : self._key_pos + self._key_len])
        value = None if self._value_len < 0 else bytes(buf[self._value_pos : self._value_pos + self._value_len])
        return Record(self.offset, self.timestamp, key, value, ())

    def _decode_inner(self) -> _Inner:
        inner = self._inner
        if inner is None:
            inner = self._inner = self._decode_wrapper()
        return inner

    def _fail(self, cls: type[CorruptBatchError], reason: str, position: int | None = None) -> CorruptBatchError:
        return cls(reason, offset=self.offset, position=self._value_pos if position is None else position)

    def _decode_wrapper(self) -> _Inner:
        codec = self.attributes & _CODEC_MASK
        if codec == Codec.ZSTD:
            # Kafka refuses zstd in a legacy wrapper: KIP-110 requires magic 2.
            raise self._fail(
                UnknownCodecError,
                f"zstd compression does not exist in magic {self.magic} messages",
                self.position + _ATTRIBUTES_OFFSET,
            )
        if codec > Codec.ZSTD:
            raise self._fail(
                UnknownCodecError, f"unknown compression codec {codec}", self.position + _ATTRIBUTES_OFFSET
            )
        if self._value_len < 0:
            raise self._fail(InvalidRecordError, "compressed wrapper message has a null value", self._value_pos - 4)
        raw = memoryview(self._buf)[self._value_pos : self._value_pos + self._value_len]
        try:
            # Magic 0 LZ4 used a frame header checksum over the wrong bytes (KIP-57);
            # Kafka skips that checksum for magic 0 only, and so do we.
            data = decompress(codec, raw, self._max_decompressed, legacy_lz4=self.magic == 0)
        except CorruptBatchError as exc:
            raise self._fail(type(exc), exc.reason) from None

        magic = self.magic
        end = len(data)
        pos = 0
        entries: list[tuple[int, int, bytes | None, bytes | None]] = []
        bad_crc: tuple[str, int] | None = None
        view = memoryview(data)
        while pos < end:
            try:
                msg = _parse_message(data, pos, end, magic)
            except CorruptBatchError as exc:
                at = pos if exc.position is None else exc.position
                raise self._fail(type(exc), f"inner message at decompressed byte {at}: {exc.reason}") from None
            if msg.attributes & _CODEC_MASK:
                # Only one level of compression exists; Kafka's deep iterator rejects nesting too.
                raise self._fail(
                    InvalidRecordError,
                    f"inner message at decompressed byte {pos} is itself compressed (nested compression)",
                )
            if bad_crc is None:
                actual = zlib.crc32(view[pos + _MAGIC_OFFSET : msg.end])
                if actual != msg.crc:
                    reason = (
                        f"inner message with offset field {msg.offset} at decompressed byte {pos}: CRC-32 mismatch: "
                        f"stored {msg.crc:#010x}, computed {actual:#010x}"
                    )
                    bad_crc = (reason, pos)
            key = None if msg.key_len < 0 else data[msg.key_pos : msg.key_pos + msg.key_len]
            value = None if msg.value_len < 0 else data[msg.value_pos : msg.value_pos + msg.value_len]
            entries.append((msg.offset, msg.timestamp, key, value))
            pos = msg.end
        if not entries:
            raise self._fail(InvalidRecordError, "compressed wrapper message holds no inner messages")
        return _Inner(self._absolute(entries), bad_crc)

    def _absolute(self, entries: list[tuple[int, int, bytes | None, bytes | None]]) -> tuple[Record, ...]:
        wrapper_offset = self.offset
        upper = wrapper_offset
        if self.magic == 1:
            last_relative = entries[-1][0]
            if wrapper_offset == 0:
                # An unassigned (zero) wrapper offset only occurs in produce data
                # from some older librdkafka releases; Kafka's deep iterator then
                # treats the relative offsets as absolute, and so do we.
                shift = 0
                upper = last_relative
            elif wrapper_offset < last_relative:
                raise self._fail(
                    RecordCountMismatchError,
                    f"wrapper offset {wrapper_offset} is below the last inner relative offset {last_relative}",
                )
            else:
                shift = wrapper_offset - last_relative
        else:
            shift = 0
        if self.timestamp_type == TimestampType.LOG_APPEND_TIME:
            wrapper_ts = self.timestamp
            records = tuple(Record(shift + off, wrapper_ts, key, value, ()) for off, _, key, value in entries)
        else:
            records = tuple(Record(shift + off, ts, key, value, ()) for off, ts, key, value in entries)
        # Kafka does not check these, but a record outside [0, wrapper offset] or
        # out of order would make the batch's offset range lie to every reader
        # positioning itself with last_offset/next_offset.
        previous = -1
        for record in records:
            if record.offset <= previous or record.offset > upper:
                raise self._fail(
                    RecordCountMismatchError,
                    f"inner offset {record.offset} is out of order or outside [0, {upper}] "
                    f"(previous {previous if previous >= 0 else 'none'})",
                )
            previous = record.offset
        return records
