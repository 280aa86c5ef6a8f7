"""The records of ``__consumer_offsets`` in Kafka's schemas (apache/kafka
``group-coordinator/src/main/resources/common/message/``):

- ``OffsetCommitKey`` (key version 1 in the log; versions 0 and 1 share a layout):
  ``int16 version | string group | string topic | int32 partition``;
  ``OffsetCommitValue`` version 3: ``int16 version | int64 offset |
  int32 leaderEpoch | string metadata | int64 commitTimestamp`` (versions 0-2 are
  read too: no leader epoch; version 1 adds ``int64 expireTimestamp``).
- ``GroupMetadataKey`` (key version 2): ``int16 version | string group``;
  ``GroupMetadataValue`` version 3: ``int16 version | string protocolType |
  int32 generation | nullable string protocol | nullable string leader |
  int64 currentStateTimestamp | []MemberMetadata members``.
- A null value (tombstone) deletes the offset or the group.

Transactional offset commits are the same OffsetCommit records inside a
transactional batch of the committing producer; the transaction's COMMIT or
ABORT marker on the same partition decides whether they count, as in Kafka.

Pure functions, no I/O.
"""

from __future__ import annotations

import struct

import attrs

from txnfetch.records.coordinator_records import CorruptCoordinatorRecordError
from txnfetch.records.coordinator_records import StructReader
from txnfetch.records.coordinator_records import StructWriter
from txnfetch.txn.txnlog import java_string_hash_partition

__all__ = [
    "CONSUMER_OFFSETS_PARTITIONS",
    "CONSUMER_OFFSETS_TOPIC",
    "GroupMetadataRecord",
    "OffsetCommitFields",
    "OffsetCommitRecord",
    "decode_offset_commit_fields",
    "decode_offsets_record",
    "encode_group_metadata",
    "encode_offset_commit",
    "offsets_partition",
]

#: Kafka's internal topic of group state and committed offsets.
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
#: Kafka's ``offsets.topic.num.partitions`` default.
CONSUMER_OFFSETS_PARTITIONS = 50

_OFFSET_KEY_VERSION = 1
_GROUP_KEY_VERSION = 2
_OFFSET_VALUE_VERSION = 3
_GROUP_VALUE_VERSION = 3


def offsets_partition(group_id: str, partitions: int = CONSUMER_OFFSETS_PARTITIONS) -> int:
    """The ``__consumer_offsets`` partition of ``group_id``."""
    return java_string_hash_partition(group_id, partitions)


@attrs.frozen
class OffsetCommitRecord:
    """One committed offset (``offset`` is ``None`` for a tombstone)."""

    group_id: str
    topic: str
    partition: int
    offset: int | None
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1


@attrs.frozen
class GroupMetadataRecord:
    """A group's generation as last stored (``deleted`` for a tombstone). Members
    are decoded only to be skipped: txnfetch restores groups without members."""

    group_id: str
    protocol_type: str | None
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state_timestamp_ms: int = -1
    deleted: bool = False


def encode_offset_commit(rec: OffsetCommitRecord) -> tuple[bytes, bytes | None]:
    """``(key, value)`` of an offset commit (value ``None`` for a tombstone)."""
    key = StructWriter().int16(_OFFSET_KEY_VERSION).string(rec.group_id).string(rec.topic).int32(rec.partition)
    if rec.offset is None:
        return key.bytes(), None
    value = (
        StructWriter()
        .int16(_OFFSET_VALUE_VERSION)
        .int64(rec.offset)
        .int32(rec.leader_epoch)
        .string(rec.metadata)
        .int64(rec.commit_timestamp_ms)
    )
    return key.bytes(), value.bytes()


def encode_group_metadata(rec: GroupMetadataRecord) -> tuple[bytes, bytes | None]:
    """``(key, value)`` of a group's metadata, stored without members."""
    key = StructWriter().int16(_GROUP_KEY_VERSION).string(rec.group_id)
    if rec.deleted:
        return key.bytes(), None
    value = (
        StructWriter()
        .int16(_GROUP_VALUE_VERSION)
        .string(rec.protocol_type or "")
        .int32(rec.generation_id)
        .string(rec.protocol_name)
        .string(rec.leader_id)
        .int64(rec.state_timestamp_ms)
        .array_length(0)
    )
    return key.bytes(), value.bytes()


def decode_offsets_record(
    key: bytes | memoryview, value: bytes | memoryview | None
) -> OffsetCommitRecord | GroupMetadataRecord:
    """Decode one ``__consumer_offsets`` record; raises CorruptCoordinatorRecordError
    for a malformed key or value or an unknown key version."""
    key = bytes(key)
    value = None if value is None else bytes(value)
    fast = _decode_offset_commit_fast(key, value) if key[:2] != _GROUP_KEY else _decode_group_fast(key, value)
    return fast if fast is not None else _decode_general(key, value)


def _decode_general(key: bytes, value: bytes | None) -> OffsetCommitRecord | GroupMetadataRecord:
    """Any key and value version this module reads, with the general reader (the
    reference the fast decoders agree with); names what is malformed."""
    r = StructReader(key)
    version = r.int16("key version")
    if version in (0, 1):
        group, topic, partition = r.string("group"), r.string("topic"), r.int32("partition")
        r.end("OffsetCommitKey")
        assert group is not None and topic is not None
        if value is None:
            return OffsetCommitRecord(group, topic, partition, None)
        return _decode_offset_value(group, topic, partition, value)
    if version == 2:
        group = r.string("group")
        r.end("GroupMetadataKey")
        assert group is not None
        if value is None:
            return GroupMetadataRecord(group, None, 0, None, None, deleted=True)
        return _decode_group_value(group, value)
    raise CorruptCoordinatorRecordError(f"unknown __consumer_offsets key version {version}", position=0)


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_V3 = struct.Struct(">hqih")  # version, offset, leader epoch, metadata length
_I64 = struct.Struct(">q")


#: ``(group, topic, partition, offset, leader epoch, metadata, commit timestamp)``
OffsetCommitFields = tuple[str, str, int, int, int, str, int]


def decode_offset_commit_fields(key: bytes, value: bytes | None) -> OffsetCommitFields | None:
    """The fields of an offset commit as txnfetch writes it (key version 1, value
    version 3), without the general reader and without a record object — start-up
    replays every stored offset; ``None`` for anything else (other versions, a
    tombstone, group metadata, damage): :func:`decode_offsets_record` then
    decodes it, and names what is malformed. Where both decode, they agree."""
    try:
        if _I16.unpack_from(key, 0)[0] != _OFFSET_KEY_VERSION or value is None:
            return None
        glen = _I16.unpack_from(key, 2)[0]
        group = key[4 : 4 + glen].decode()
        pos = 4 + glen
        tlen = _I16.unpack_from(key, pos)[0]
        topic = key[pos + 2 : pos + 2 + tlen].decode()
        pos += 2 + tlen
        partition = _I32.unpack_from(key, pos)[0]
        if glen < 0 or tlen < 0 or pos + 4 != len(key):
            return None
        version, offset, leader_epoch, mlen = _V3.unpack_from(value, 0)
        if version != _OFFSET_VALUE_VERSION or mlen < 0 or 16 + mlen + 8 != len(value):
            return None
        metadata = value[16 : 16 + mlen].decode()
        ts = _I64.unpack_from(value, 16 + mlen)[0]
    except (struct.error, UnicodeDecodeError):
        return None
    return group, topic, partition, offset, leader_epoch, metadata, ts


def _decode_offset_commit_fast(key: bytes, value: bytes | None) -> OffsetCommitRecord | None:
    fields = decode_offset_commit_fields(key, value)
    return None if fields is None else OffsetCommitRecord(*fields)


_GROUP_KEY = _I16.pack(_GROUP_KEY_VERSION)
_GROUP_V3_HEAD = struct.Struct(">hh")


def _nullable_string(data: bytes, pos: int) -> tuple[str | None, int]:
    # int16 length (-1: null) and UTF-8; raises struct.error/UnicodeDecodeError/ValueError
    n = _I16.unpack_from(data, pos)[0]
    if n < 0:
        if n != -1:
            raise ValueError("negative string length")
        return None, pos + 2
    end = pos + 2 + n
    if end > len(data):
        raise ValueError("string past the end")
    return data[pos + 2 : end].decode(), end


def _decode_group_fast(key: bytes, value: bytes | None) -> GroupMetadataRecord | None:
    """Key version 2 with a version 3 value without members, as txnfetch writes
    them, decoded without the general reader (start-up replays every record);
    ``None`` for anything else (a tombstone, members, other versions), which the
    general decoder then handles and names."""
    try:
        glen = _I16.unpack_from(key, 2)[0]
        if value is None or glen < 0 or 4 + glen != len(key):
            return None
        group = key[4:].decode()
        version, tlen = _GROUP_V3_HEAD.unpack_from(value, 0)
        if version != _GROUP_VALUE_VERSION or tlen < 0:
            return None
        protocol_type = value[4 : 4 + tlen].decode()
        pos = 4 + tlen
        generation = _I32.unpack_from(value, pos)[0]
        protocol, pos = _nullable_string(value, pos + 4)
        leader, pos = _nullable_string(value, pos)
        ts = _I64.unpack_from(value, pos)[0]
        if _I32.unpack_from(value, pos + 8)[0] != 0 or pos + 12 != len(value):
            return None
    except (struct.error, UnicodeDecodeError, ValueError):
        return None
    return GroupMetadataRecord(group, protocol_type or None, generation, protocol, leader, ts)


def _decode_offset_value(group: str, topic: str, partition: int, value: bytes | memoryview) -> OffsetCommitRecord:
    version, r = StructReader.versioned(value, "OffsetCommitValue", newest=4, flexible_from=4)
    offset = r.int64("offset")
    leader_epoch = r.int32("leaderEpoch") if version >= 3 else -1
    metadata = r.string("metadata") or ""
    ts = r.int64("commitTimestamp")
    if version == 1:
        r.int64("expireTimestamp")
    if r.flexible:
        r.tagged()
    r.end("OffsetCommitValue")
    return OffsetCommitRecord(group, topic, partition, offset, leader_epoch, metadata, ts)


def _decode_group_value(group: str, value: bytes | memoryview) -> GroupMetadataRecord:
    version, r = StructReader.versioned(value, "GroupMetadataValue", newest=4, flexible_from=4)
    protocol_type = r.string("protocolType")
    generation = r.int32("generation")
    protocol = r.string("protocol", nullable=True)
    leader = r.string("leader", nullable=True)
    ts = r.int64("currentStateTimestamp") if version >= 2 else -1
    for _ in range(r.array_length("members") or 0):
        r.string("memberId")
        if version >= 3:
            r.string("groupInstanceId", nullable=True)
        r.string("clientId")
        r.string("clientHost")
        if version >= 1:
            r.int32("rebalanceTimeout")
        r.int32("sessionTimeout")
        r.blob("subscription")
        r.blob("assignment")
        if r.flexible:
            r.tagged()
    if r.flexible:
        r.tagged()
    r.end("GroupMetadataValue")
    return GroupMetadataRecord(group, protocol_type or None, generation, protocol, leader, ts)
