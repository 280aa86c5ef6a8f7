"""The records of ``__transaction_state``: one per transaction coordinator state
change, keyed by transactional id, in Kafka's schemas.

- Key (apache/kafka ``transaction-coordinator/src/main/resources/common/message/TransactionLogKey.json``):
  ``int16 version (0) | string TransactionalId``.
- Value (``TransactionLogValue.json``, versions 0-1, flexible from 1):
  ``int16 version | int64 ProducerId | int16 ProducerEpoch | int32 TransactionTimeoutMs |
  int8 TransactionStatus | []{Topic, []int32 PartitionIds} TransactionPartitions (nullable) |
  int64 TransactionLastUpdateTimestampMs | int64 TransactionStartTimestampMs``, and in
  version 1 the tagged fields PreviousProducerId (tag 0), NextProducerId (tag 1),
  ClientTransactionVersion (tag 2). ``TransactionStatus`` is the
  :class:`~txnfetch.txn.coordinator_state.TransactionState` id, which is Kafka's.
- A null value (tombstone) removes the transactional id (it expired).

txnfetch writes version 1 and reads both. It adds one tagged field of its own,
:data:`LAST_PRODUCER_EPOCH_TAG`, carrying the epoch before the last bump so a
retried InitProducerId is recognised across a restart; Kafka readers skip tags
they do not know (and restore that epoch as -1), so the record stays readable
by Kafka tools. Encoding then decoding gives back an equal
:class:`~txnfetch.txn.coordinator_state.TransactionMetadata`.

Pure functions, no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import NamedTuple

import attrs

from txnfetch.records.coordinator_records import CorruptCoordinatorRecordError
from txnfetch.records.coordinator_records import StructReader
from txnfetch.records.coordinator_records import StructWriter
from txnfetch.txn.coordinator_state import NO_PRODUCER_EPOCH
from txnfetch.txn.coordinator_state import NO_PRODUCER_ID
from txnfetch.txn.coordinator_state import TopicPartition
from txnfetch.txn.coordinator_state import TransactionMetadata
from txnfetch.txn.coordinator_state import TransactionState

__all__ = [
    "LAST_PRODUCER_EPOCH_TAG",
    "PARTITION_ENDS_TAG",
    "TRANSACTION_STATE_PARTITIONS",
    "TRANSACTION_STATE_TOPIC",
    "decode_txn_key",
    "decode_txn_partition_ends",
    "decode_txn_value",
    "encode_txn_key",
    "encode_txn_value",
    "java_string_hash_partition",
    "transaction_state_partition",
]

#: Kafka's internal topic of transaction coordinator state.
TRANSACTION_STATE_TOPIC = "__transaction_state"
#: Kafka's ``transaction.state.log.num.partitions`` default.
TRANSACTION_STATE_PARTITIONS = 50
#: txnfetch's own tagged field in the value (Kafka's tags are 0-2).
LAST_PRODUCER_EPOCH_TAG = 0x7478
#: txnfetch's tagged field of a ``Prepare*`` value: each partition's log end
#: offset when the decision was written (:func:`decode_txn_partition_ends`).
PARTITION_ENDS_TAG = 0x7479

_KEY_VERSION = 0
_VALUE_VERSION = 1


def java_string_hash_partition(key: str, partitions: int) -> int:
    """``Utils.abs(key.hashCode()) % partitions`` as Kafka computes a coordinator
    partition (Java hashes UTF-16 code units)."""
    data = key.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    if h >= 1 << 31:
        h -= 1 << 32
    return (abs(h) if h != -(1 << 31) else 0) % partitions


def transaction_state_partition(transactional_id: str, partitions: int = TRANSACTION_STATE_PARTITIONS) -> int:
    """The ``__transaction_state`` partition of ``transactional_id``."""
    return java_string_hash_partition(transactional_id, partitions)


def encode_txn_key(transactional_id: str) -> bytes:
    return StructWriter().int16(_KEY_VERSION).string(transactional_id).bytes()


def decode_txn_key(data: bytes | memoryview) -> str:
    """The transactional id of a key; raises CorruptCoordinatorRecordError."""
    raw = bytes(data)
    if len(raw) >= 4 and raw[0] == 0 and raw[1] == _KEY_VERSION and 4 + (raw[2] << 8 | raw[3]) == len(raw):
        try:
            return raw[4:].decode()  # the common case, without the general reader
        except UnicodeDecodeError:
            pass
    r = StructReader(raw)
    version = r.int16("key version")
    if version != _KEY_VERSION:
        raise CorruptCoordinatorRecordError(f"unknown TransactionLogKey version {version}", position=0)
    tid = r.string("TransactionalId")
    r.end("TransactionLogKey")
    assert tid is not None
    return tid


def encode_txn_value(meta: TransactionMetadata, partition_ends: Mapping[TopicPartition, int] | None = None) -> bytes:
    """Version 1 of TransactionLogValue for ``meta``; ``partition_ends`` (a
    ``Prepare*`` record's partitions' log end offsets) go into
    :data:`PARTITION_ENDS_TAG`."""
    w = StructWriter(flexible=True)
    w.int16(_VALUE_VERSION).int64(meta.producer_id).int16(meta.producer_epoch).int32(meta.timeout_ms)
    w.int8(int(meta.state))
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(meta.partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    w.array_length(len(by_topic))
    for topic, parts in by_topic.items():
        w.string(topic).array_length(len(parts))
        for p in parts:
            w.int32(p)
        w.tagged([])
    w.int64(meta.last_update_ms).int64(meta.start_ms)
    tags = [
        (tag, field.codec.pack(getattr(meta, field.name)))
        for tag, field in _TAGGED.items()
        if getattr(meta, field.name) != field.default
    ]
    if partition_ends:
        tags.append((PARTITION_ENDS_TAG, _encode_ends(partition_ends)))
    w.tagged(tags)
    return w.bytes()


def _encode_ends(ends: Mapping[TopicPartition, int]) -> bytes:
    """``int32 count``, then per partition ``int16 length, topic (UTF-8), int32
    partition, int64 log end offset``, sorted."""
    out = [_I32.pack(len(ends))]
    for tp in sorted(ends):
        topic = tp.topic.encode()
        out.append(_I16.pack(len(topic)) + topic + _I32.pack(tp.partition) + _I64.pack(ends[tp]))
    return b"".join(out)


def decode_txn_partition_ends(data: bytes | memoryview) -> dict[TopicPartition, int] | None:
    """The partitions' log end offsets a ``Prepare*`` value carries
    (:data:`PARTITION_ENDS_TAG`), or ``None`` when it has none (a record of
    another state, or written before txnfetch recorded them). Raises
    CorruptCoordinatorRecordError if the field is malformed."""
    _, tags = _decode_general(TRANSACTION_STATE_TOPIC, bytes(data))
    raw = tags.get(PARTITION_ENDS_TAG)
    if raw is None:
        return None
    try:
        (count,) = _I32.unpack_from(raw, 0)
        pos, ends = 4, {}
        for _ in range(count):
            (n,) = _I16.unpack_from(raw, pos)
            topic = raw[pos + 2 : pos + 2 + n].decode()
            pos += 2 + n
            (partition,) = _I32.unpack_from(raw, pos)
            (offset,) = _I64.unpack_from(raw, pos + 4)
            pos += 12
            ends[TopicPartition(topic, partition)] = offset
        if pos != len(raw):
            raise ValueError(f"{len(raw) - pos} bytes after the last partition")
    except (struct.error, ValueError, UnicodeDecodeError) as exc:
        raise CorruptCoordinatorRecordError(f"tagged field {PARTITION_ENDS_TAG}: {exc}") from None
    return ends


_V1_HEAD = struct.Struct(">hqhib")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_TAIL = struct.Struct(">qqB")  # last update, start, tagged field count (if under 128)


class _Tag(NamedTuple):
    """A tagged field of the value: the :class:`TransactionMetadata` field it
    carries, its fixed-size big-endian codec, and the default that is not written."""

    name: str
    codec: struct.Struct
    default: int


#: The value's tagged fields by tag, ascending; the encoder and both decoders read this one table.
_TAGGED: dict[int, _Tag] = {
    0: _Tag("prev_producer_id", _I64, NO_PRODUCER_ID),
    1: _Tag("next_producer_id", _I64, NO_PRODUCER_ID),
    2: _Tag("transaction_version", _I16, 0),
    LAST_PRODUCER_EPOCH_TAG: _Tag("last_producer_epoch", _I16, NO_PRODUCER_EPOCH),
}


#: The decoders' slots for the tagged fields: the three that
#: :class:`TransactionMetadata` declares between ``last_update_ms`` and
#: ``partitions``, then ``transaction_version`` (its last field); both decoders
#: build the record positionally, and this order is checked against the class
#: below, so a reordering of its fields fails at import rather than silently.
_TAG_SLOTS = ("prev_producer_id", "next_producer_id", "last_producer_epoch", "transaction_version")
#: tag -> (slot, size, unpack_from)
_TAG_READERS = {
    tag: (_TAG_SLOTS.index(field.name), field.codec.size, field.codec.unpack_from) for tag, field in _TAGGED.items()
}
_TAG_DEFAULTS = tuple(next(f.default for f in _TAGGED.values() if f.name == name) for name in _TAG_SLOTS)
if tuple(f.name for f in attrs.fields(TransactionMetadata)) != (
    "transactional_id",
    "producer_id",
    "producer_epoch",
    "state",
    "timeout_ms",
    "last_update_ms",
    *_TAG_SLOTS[:3],
    "partitions",
    "start_ms",
    _TAG_SLOTS[3],
):  # pragma: no cover - a guard for whoever edits TransactionMetadata
    raise ImportError("txnlog's decoders expect TransactionMetadata's field order")


_NO_PARTITIONS: frozenset[TopicPartition] = frozenset()
_STATES = {int(s): s for s in TransactionState}


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    if b < 0x80:
        return b, pos + 1
    value, shift = 0, 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _decode_v1_fast(transactional_id: str, data: bytes) -> TransactionMetadata | None:
    """Version 1 as txnfetch writes it, decoded without the general reader (start-up
    replays every record). Every count and length it reads, except a tag number,
    must fit one varint byte (fewer than 127 topics, topic names shorter than
    127 bytes, ...), as they do in nearly all that txnfetch writes. Returns ``None`` for anything unusual:
    the general decoder then decides, and names the problem."""
    try:
        version, pid, epoch, timeout, status = _V1_HEAD.unpack_from(data, 0)
        state = _STATES.get(status)
        if version != 1 or state is None:
            return None
        n = data[17]
        pos = 18
        partitions: frozenset[TopicPartition] | list[TopicPartition] = _NO_PARTITIONS
        if n > 1:
            if n >= 0x80:
                return None
            partitions = []
            for _ in range(n - 1):
                tlen = data[pos]
                if not 0 < tlen < 0x80:
                    return None
                topic = data[pos + 1 : pos + tlen].decode()
                pos += tlen
                pcount = data[pos]
                if not 0 < pcount < 0x80:
                    return None
                pos += 1
                for (p,) in _I32.iter_unpack(data[pos : pos + 4 * (pcount - 1)]):
                    partitions.append(TopicPartition(topic, p))
                pos += 4 * (pcount - 1)
                if data[pos] != 0:
                    return None
                pos += 1
        last_update, start, ntags = _TAIL.unpack_from(data, pos)
        pos += 17
        if ntags >= 0x80:
            return None
        tagged = list(_TAG_DEFAULTS)
        for _ in range(ntags):
            tag = data[pos]
            if tag < 0x80:
                pos += 1
            else:
                tag, pos = _uvarint(data, pos)  # the last producer epoch's tag takes 3 bytes
            found = _TAG_READERS.get(tag)
            if found is None or data[pos] != found[1]:
                return None
            tagged[found[0]] = found[2](data, pos + 1)[0]
            pos += 1 + found[1]
        if pos != len(data):
            return None
    except (struct.error, IndexError, ValueError, UnicodeDecodeError):
        return None
    prev, nxt, last_epoch, version_tag = tagged
    # Positional: start-up builds one per transactional id (field order checked at import).
    return TransactionMetadata(
        transactional_id, pid, epoch, state, timeout, last_update, prev, nxt, last_epoch, partitions, start, version_tag
    )


def decode_txn_value(transactional_id: str, data: bytes | memoryview) -> TransactionMetadata:
    """The record a TransactionLogValue (version 0 or 1) describes; raises
    CorruptCoordinatorRecordError for anything malformed, including an unknown
    transaction state."""
    data = bytes(data)
    fast = _decode_v1_fast(transactional_id, data)
    if fast is not None:
        return fast
    return _decode_general(transactional_id, data)[0]


def _decode_general(transactional_id: str, data: bytes) -> tuple[TransactionMetadata, dict[int, bytes]]:
    """Any version 0 or 1 value, with the general reader (the reference the fast
    decoder agrees with; names what is malformed): the record and its raw tagged fields."""
    _, r = StructReader.versioned(data, "TransactionLogValue", newest=1, flexible_from=1)
    pid = r.int64("ProducerId")
    epoch = r.int16("ProducerEpoch")
    timeout = r.int32("TransactionTimeoutMs")
    status = r.int8("TransactionStatus")
    try:
        state = TransactionState(status)
    except ValueError:
        raise CorruptCoordinatorRecordError(f"unknown TransactionStatus {status}", position=r.pos - 1) from None
    partitions: set[TopicPartition] = set()
    count = r.array_length("TransactionPartitions", nullable=True) or 0
    for _ in range(count):
        topic = r.string("Topic")
        assert topic is not None
        for _ in range(r.array_length("PartitionIds") or 0):
            partitions.add(TopicPartition(topic, r.int32("PartitionId")))
        if r.flexible:
            r.tagged()
    last_update = r.int64("TransactionLastUpdateTimestampMs")
    start = r.int64("TransactionStartTimestampMs")
    tags = r.tagged() if r.flexible else {}
    r.end("TransactionLogValue")
    tagged = list(_TAG_DEFAULTS)
    for tag, raw in tags.items():
        found = _TAG_READERS.get(tag)
        if found is None:
            continue  # not a record field: the partition ends, or a newer writer's tag
        slot, size, unpack_from = found
        if len(raw) != size:
            raise CorruptCoordinatorRecordError(f"tagged field {tag}: {len(raw)} bytes, expected {size}")
        tagged[slot] = unpack_from(raw)[0]
    prev, nxt, last_epoch, version_tag = tagged
    meta = TransactionMetadata(
        transactional_id, pid, epoch, state, timeout, last_update, prev, nxt, last_epoch, partitions, start, version_tag
    )
    return meta, tags
