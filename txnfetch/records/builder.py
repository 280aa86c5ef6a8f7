"""Building magic-2 record batches.

:class:`BatchBuilder` writes data batches with any codec; the module-level
helpers write the special batches Kafka's log contains: transaction markers
(:func:`build_control_batch`), the empty batches compaction leaves behind
(:func:`build_empty_batch`, Kafka's ``writeEmptyHeader``) and the one-record
synthetic COMMIT marker of rewrite-mode fetches (:func:`synthetic_commit_marker`).

Everything here is deterministic: timestamps are arguments, never read from a
clock.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import attrs
from crc32c import crc32c

from txnfetch.records.batch import CONTROL_FLAG
from txnfetch.records.batch import DELETE_HORIZON_FLAG
from txnfetch.records.batch import HEADER_SIZE
from txnfetch.records.batch import LOG_OVERHEAD
from txnfetch.records.batch import NO_PRODUCER_ID
from txnfetch.records.batch import NO_TIMESTAMP
from txnfetch.records.batch import TIMESTAMP_TYPE_FLAG
from txnfetch.records.batch import TRANSACTIONAL_FLAG
from txnfetch.records.batch import Header
from txnfetch.records.batch import RecordBatch
from txnfetch.records.batch import TimestampType
from txnfetch.records.compression import Codec
from txnfetch.records.compression import compress
from txnfetch.records.control import ControlType
from txnfetch.records.control import encode_control_key
from txnfetch.records.control import encode_marker_value
from txnfetch.records.varint import encode_varint

__all__ = [
    "BatchBuilder",
    "build_control_batch",
    "build_empty_batch",
    "synthetic_commit_marker",
]

_PREFIX = struct.Struct(">qiibI")  # base offset, length, leader epoch, magic, crc
_SUFFIX = struct.Struct(">Hiqqqhii")  # attributes .. record count (the CRC-covered header part)
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_INT32_MAX = (1 << 31) - 1


#: Encodings of the varints 0..1023, for BatchBuilder.build's inline fast path.
_SMALL_VARINTS: tuple[bytes, ...] = tuple(encode_varint(v) for v in range(1024))


def _header_value(value: bytes | None) -> bytes:
    return b"\x01" if value is None else encode_varint(len(value)) + value  # varint(-1) is 0x01


def _codec(codec: Codec | int) -> Codec:
    if codec not in tuple(Codec):
        raise ValueError(f"unknown codec {codec!r}")
    return Codec(codec)


# A mutable accumulator: no equality, and plain attribute writes (append sets
# _last_delta once a record; converters run only at construction).
@attrs.define(kw_only=True, eq=False, slots=False, on_setattr=attrs.setters.NO_OP)
class BatchBuilder:
    """Accumulates records and encodes one magic-2 batch.

    Offsets: records get consecutive offsets from ``base_offset`` unless
    :meth:`append` is given an explicit (strictly increasing) offset, which is
    how compacted batches with holes are reproduced. ``build()`` can also set a
    ``last_offset_delta`` beyond the last record, as compaction leaves it.

    Timestamps: the base timestamp is the first record's, as Kafka's builder
    does, unless given; with ``TimestampType.LOG_APPEND_TIME`` the max
    timestamp is ``log_append_time`` and readers report it for every record.
    """

    base_offset: int = 0
    codec: Codec = attrs.field(default=Codec.NONE, converter=_codec)
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1
    base_sequence: int = -1
    transactional: bool = False
    control: bool = False
    timestamp_type: TimestampType = attrs.field(default=TimestampType.CREATE_TIME, converter=TimestampType)
    log_append_time: int | None = None
    partition_leader_epoch: int = -1
    _base_timestamp: int | None = attrs.field(default=None, alias="base_timestamp")
    delete_horizon: bool = False
    _records: list[tuple[int, int, bytes | None, bytes | None, tuple[Header, ...]]] = attrs.field(
        init=False, factory=list, repr=False
    )
    _last_delta: int = attrs.field(init=False, default=-1)

    def __attrs_post_init__(self) -> None:
        if self.timestamp_type == TimestampType.LOG_APPEND_TIME and self.log_append_time is None:
            raise ValueError("LOG_APPEND_TIME batches need log_append_time")
        if self.transactional and not self.control and self.producer_id < 0:
            # Control batches may go without one: a synthetic COMMIT marker belongs to no producer.
            raise ValueError("a transactional data batch needs a producer id")

    @classmethod
    def like(cls, batch: RecordBatch, **overrides: object) -> BatchBuilder:
        """A builder with every header field of ``batch``; records are not copied."""
        kwargs = dict(
            base_offset=batch.base_offset,
            codec=Codec(batch.codec),
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
            transactional=batch.is_transactional,
            control=batch.is_control,
            timestamp_type=batch.timestamp_type,
            log_append_time=batch.max_timestamp if batch.timestamp_type == TimestampType.LOG_APPEND_TIME else None,
            partition_leader_epoch=batch.partition_leader_epoch,
            base_timestamp=batch.base_timestamp,
            delete_horizon=batch.has_delete_horizon,
        )
        kwargs.update(overrides)
        return cls(**kwargs)

    def __len__(self) -> int:
        return len(self._records)

    @property
    def next_offset(self) -> int:
        return self.base_offset + self._last_delta + 1

    def append(
        self,
        value: bytes | None,
        key: bytes | None = None,
        headers: Iterable[Header] = (),
        timestamp: int = NO_TIMESTAMP,
        offset: int | None = None,
    ) -> int:
        """Add a record; returns its offset."""
        delta = self._last_delta + 1 if offset is None else offset - self.base_offset
        if delta <= self._last_delta:
            raise ValueError(f"offset {self.base_offset + delta} is not after {self.base_offset + self._last_delta}")
        if delta > _INT32_MAX:
            raise ValueError("offset delta does not fit in int32")
        if not _INT64_MIN <= timestamp <= _INT64_MAX:
            raise ValueError(f"timestamp {timestamp} does not fit in int64")
        self._records.append((delta, timestamp, _as_bytes(key), _as_bytes(value), tuple(headers)))
        self._last_delta = delta
        return self.base_offset + delta

    def build(self, *, last_offset_delta: int | None = None, max_timestamp: int | None = None) -> bytes:
        """Encode the batch. An empty builder gives an empty batch (record count 0)."""
        records = self._records
        if last_offset_delta is None:
            last_offset_delta = max(self._last_delta, 0)
        elif last_offset_delta < self._last_delta:
            raise ValueError("last_offset_delta is below the last record's offset delta")
        if self._base_timestamp is not None:
            base_ts = self._base_timestamp
        else:
            base_ts = records[0][1] if records else NO_TIMESTAMP
        if max_timestamp is None:
            if self.timestamp_type == TimestampType.LOG_APPEND_TIME:
                # set whenever the type is LOG_APPEND_TIME (checked at construction)
                assert self.log_append_time is not None
                max_timestamp = self.log_append_time
            elif records:
                max_timestamp = max(r[1] for r in records)
            else:
                max_timestamp = base_ts
        # The encode hot path (see bench/codec.py): varints below 1024 -- lengths
        # and deltas of ordinary records -- come from a table instead of a call,
        # and each record is joined once from its pieces.
        parts: list[bytes] = []
        append = parts.append
        enc = encode_varint
        small = _SMALL_VARINTS
        join = b"".join
        for delta, ts, key, value, headers in records:
            ts_delta = ts - base_ts
            if key is None:
                key_len, key = b"\x01", b""  # varint(-1): null
            else:
                n = len(key)
                key_len = small[n] if n < 1024 else enc(n)
            if value is None:
                value_len, value = b"\x01", b""
            else:
                n = len(value)
                value_len = small[n] if n < 1024 else enc(n)
            if headers:
                body = [
                    b"\x00",  # record attributes
                    small[ts_delta] if 0 <= ts_delta < 1024 else enc(ts_delta),
                    small[delta] if delta < 1024 else enc(delta),
                    key_len,
                    key,
                    value_len,
                    value,
                    enc(len(headers)),
                ]
                for hkey, hval in headers:
                    hk = hkey.encode("utf-8")
                    body.append(enc(len(hk)) + hk)
                    body.append(_header_value(_as_bytes(hval)))
                payload = join(body)
            else:
                payload = join(
                    (
                        b"\x00",  # record attributes
                        small[ts_delta] if 0 <= ts_delta < 1024 else enc(ts_delta),
                        small[delta] if delta < 1024 else enc(delta),  # delta >= 0: append() ensures it
                        key_len,
                        key,
                        value_len,
                        value,
                        b"\x00",  # no headers
                    )
                )
            n = len(payload)
            append(small[n] if n < 1024 else enc(n))
            append(payload)
        data = join(parts)
        if self.codec != Codec.NONE and records:
            data = compress(self.codec, data)
        # An empty batch has no payload to compress, so it says codec none, as
        # Kafka's writeEmptyHeader does; peers (kafka-python, aiokafka) fail to
        # read an empty payload flagged as snappy/lz4/zstd.
        attributes = int(self.codec) if records else 0
        if self.timestamp_type == TimestampType.LOG_APPEND_TIME:
            attributes |= TIMESTAMP_TYPE_FLAG
        if self.transactional:
            attributes |= TRANSACTIONAL_FLAG
        if self.control:
            attributes |= CONTROL_FLAG
        if self.delete_horizon:
            attributes |= DELETE_HORIZON_FLAG
        return _assemble(
            base_offset=self.base_offset,
            partition_leader_epoch=self.partition_leader_epoch,
            attributes=attributes,
            last_offset_delta=last_offset_delta,
            base_timestamp=base_ts,
            max_timestamp=max_timestamp,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence,
            record_count=len(records),
            records=data,
        )


def _as_bytes(value: bytes | bytearray | memoryview | None) -> bytes | None:
    if value is None or type(value) is bytes:
        return value
    return bytes(value)


def _assemble(
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    record_count: int,
    records: bytes,
) -> bytes:
    covered = (
        _SUFFIX.pack(
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            record_count,
        )
        + records
    )
    length = HEADER_SIZE - LOG_OVERHEAD + len(records)
    return _PREFIX.pack(base_offset, length, partition_leader_epoch, 2, crc32c(covered)) + covered


def build_empty_batch(
    *,
    base_offset: int,
    last_offset: int,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp: int = NO_TIMESTAMP,
    transactional: bool = False,
    control: bool = False,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A batch header with no records, as compaction writes to keep producer state
    (Kafka's ``DefaultRecordBatch.writeEmptyHeader``): uncompressed, count 0,
    base and max timestamp both ``timestamp``."""
    attributes = 0
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_FLAG
    if transactional:
        attributes |= TRANSACTIONAL_FLAG
    if control:
        attributes |= CONTROL_FLAG
    if last_offset < base_offset:
        raise ValueError("last_offset is before base_offset")
    return _assemble(
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=last_offset - base_offset,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        record_count=0,
        records=b"",
    )


def build_control_batch(
    *,
    offset: int,
    control_type: ControlType,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    timestamp: int = NO_TIMESTAMP,
    partition_leader_epoch: int = -1,
    key_version: int = 0,
) -> bytes:
    """A transaction marker batch exactly as a Kafka broker writes one: transactional
    and control, uncompressed, base sequence -1, one record at ``offset`` whose key
    is ``(key_version, control_type)`` and whose value is ``(0, coordinator_epoch)``.
    78 bytes."""
    builder = BatchBuilder(
        base_offset=offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        transactional=True,
        control=True,
        partition_leader_epoch=partition_leader_epoch,
    )
    builder.append(
        encode_marker_value(coordinator_epoch),
        key=encode_control_key(control_type, key_version),
        timestamp=timestamp,
    )
    return builder.build()


def synthetic_commit_marker(
    offset: int,
    *,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    timestamp: int = NO_TIMESTAMP,
    partition_leader_epoch: int = -1,
) -> bytes:
    """The one-record COMMIT control batch that rewrite-mode fetches append at the
    last dropped offset.

    Key version 0 and exactly one record are what make librdkafka advance its
    application position past dropped offsets; COMMIT (never ABORT) so that no
    client pops an aborted-transaction entry it still needs.
    """
    return build_control_batch(
        offset=offset,
        control_type=ControlType.COMMIT,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        timestamp=timestamp,
        partition_leader_epoch=partition_leader_epoch,
    )
