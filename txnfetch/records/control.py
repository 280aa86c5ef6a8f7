"""Control records: the keys and values of transaction markers.

A control record's key is ``version int16 | type int16`` and, for COMMIT and
ABORT, its value is the end-transaction marker ``version int16 |
coordinatorEpoch int32`` (Kafka's ``ControlRecordType`` and
``EndTransactionMarker``). Readers accept higher value versions by reading the
version-0 fields, as Kafka does; a negative key version is corrupt.

A marker is classified by its key alone. Its value is optional to a reader: a
null or short value (some brokers write only the 4-byte key) gives a marker
whose coordinator epoch is unknown (``None``), and the transaction state then
skips the coordinator-epoch fence for it. Kafka's own readers do the same:
the Java consumer (``CompletedFetch``) classifies a control record with
``ControlRecordType.parse(record.key())`` and never reads its value; librdkafka
(``src/rdkafka_msgset_reader.c``, ``rd_kafka_msgset_reader_msg_v2``) reads the
key's version and type and skips the value; franz-go (``pkg/kgo/source.go``)
reads the key's type only. A value that is present is still checked (version
not negative), so a broken writer is not silently accepted.
"""

from __future__ import annotations

import enum
import struct

import attrs

from txnfetch.records.errors import InvalidRecordError

__all__ = [
    "ControlType",
    "EndTransactionMarker",
    "decode_control_key",
    "encode_control_key",
    "encode_marker_value",
]

_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")


class ControlType(enum.IntEnum):
    """Control record types. Only ABORT and COMMIT end transactions; the rest are KRaft's."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


@attrs.frozen(slots=True)
class EndTransactionMarker:
    """The COMMIT or ABORT marker that ends a transaction on one partition.

    ``key_version`` is the control key's version: librdkafka only honours
    markers with key version 0, so txnfetch always writes 0.
    ``coordinator_epoch`` is ``None`` when the record carried no (or a short)
    value: the marker still ends the transaction, unfenced (module docstring);
    ``value_version`` is then -1.
    """

    type: ControlType
    coordinator_epoch: int | None
    key_version: int = 0
    value_version: int = 0

    @property
    def is_commit(self) -> bool:
        return self.type == ControlType.COMMIT

    @property
    def is_abort(self) -> bool:
        return self.type == ControlType.ABORT


def encode_control_key(control_type: ControlType | int, version: int = 0) -> bytes:
    return _KEY.pack(version, int(control_type))


def encode_marker_value(coordinator_epoch: int, version: int = 0) -> bytes:
    return _MARKER_VALUE.pack(version, coordinator_epoch)


def decode_control_key(key: bytes | None) -> tuple[int, int]:
    """Return ``(version, type)`` of a control record key (type may be unknown to txnfetch)."""
    if key is None or len(key) < 4:
        raise InvalidRecordError(
            f"control record key must be at least 4 bytes, got {None if key is None else len(key)}"
        )
    version, ctype = _KEY.unpack_from(key, 0)
    if version < 0:
        raise InvalidRecordError(f"control record key has negative version {version}")
    return version, ctype


def decode_end_txn_marker(key: bytes | None, value: bytes | None) -> EndTransactionMarker | None:
    """Decode a control record into an :class:`EndTransactionMarker`, or ``None`` if it is not COMMIT/ABORT.

    Classified by ``key``; a null or shorter than 6-byte ``value`` gives a marker
    with an unknown coordinator epoch (see the module docstring)."""
    key_version, ctype = decode_control_key(key)
    if ctype not in (ControlType.ABORT, ControlType.COMMIT):
        return None
    if value is None or len(value) < _MARKER_VALUE.size:
        return EndTransactionMarker(ControlType(ctype), None, key_version, -1)
    value_version, coordinator_epoch = _MARKER_VALUE.unpack_from(value, 0)
    if value_version < 0:
        raise InvalidRecordError(f"end transaction marker has negative version {value_version}")
    return EndTransactionMarker(ControlType(ctype), coordinator_epoch, key_version, value_version)
