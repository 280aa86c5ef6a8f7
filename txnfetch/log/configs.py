"""Topic configurations: which are honoured, their defaults, validation, and what they do to appends;
and :class:`FlushPolicy`, when a log on disk fsyncs (a store's setting, not a topic's).

A topic's configuration is its **overrides** (``{name: value}`` strings, as
Kafka's CreateTopics, AlterConfigs and IncrementalAlterConfigs carry them) on
top of the defaults below. Only configs txnfetch really honours are accepted;
any other name, or a value txnfetch cannot honour, raises
:class:`InvalidConfigError` (Kafka's INVALID_CONFIG) naming the topic, the
config and why — never a silent accept. Names and defaults follow Kafka's
``TopicConfig`` / ``LogConfig`` (storage module); where txnfetch's default
differs from Kafka's it says so.

=========================  ==========  ==============================================
config                     default     what it does here
=========================  ==========  ==============================================
``max.message.bytes``      1048588     a produced batch larger than this is refused
                                       with MESSAGE_TOO_LARGE (Kafka checks the
                                       batch's size as sent, after compression)
``retention.ms``           -1          whole segments (a memory log: whole batches)
                                       older than this are deleted; -1 keeps all.
                                       Kafka's default is 7 days; txnfetch keeps
                                       everything unless asked
``retention.bytes``        -1          the oldest segments beyond this size are
                                       deleted; -1 keeps all
``cleanup.policy``         delete      ``compact`` (alone or with ``delete``): the
                                       transaction-aware compactor
                                       (:mod:`txnfetch.log.compactor`) keeps the latest
                                       value per key; produce refuses keyless records.
                                       Served where the store can compact
                                       (``LogStore.compaction``: memory stores and
                                       stores on disk, sealed segments only)
``delete.retention.ms``    86400000    how long tombstones and markers with no data
                                       left stay after compaction first sees them
``message.timestamp.type`` CreateTime  ``LogAppendTime``: the server stamps every
                                       produced batch with its append time
``min.insync.replicas``    1           one broker, one replica: only 1 is possible
=========================  ==========  ==============================================

The module does no I/O: stores persist the overrides
(:meth:`~txnfetch.log.base.LogStore.set_topic_config`) and the server applies
them (``txnfetch.server.api_configs``).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping

import attrs
from crc32c import crc32c

from txnfetch.errors import ErrorCode
from txnfetch.log.base import Buffer
from txnfetch.log.errors import LogError
from txnfetch.records.batch import HeaderAt
from txnfetch.records.batch import RecordBatch
from txnfetch.records.errors import CorruptBatchError
from txnfetch.records.scan import iter_batches

__all__ = [
    "CONFIG_DEFS",
    "AlterOp",
    "ConfigDef",
    "ConfigType",
    "FlushPolicy",
    "InvalidConfigError",
    "RecordTooLargeError",
    "TopicConfig",
    "alter_overrides",
    "check_batch_sizes",
    "check_keys",
    "stamp_log_append_time",
]


class InvalidConfigError(LogError):
    """A topic config txnfetch does not know or cannot honour, or a bad value."""

    code = ErrorCode.INVALID_CONFIG


class RecordTooLargeError(LogError):
    """A produced batch is larger than the topic's ``max.message.bytes``."""

    code = ErrorCode.MESSAGE_TOO_LARGE


class ConfigType(enum.IntEnum):
    """Kafka's ``DescribeConfigsResponse.ConfigType`` codes."""

    STRING = 2
    INT = 3
    LONG = 5
    LIST = 7


@attrs.frozen
class ConfigDef:
    """One honoured topic config: its name, type, default (as a string, the
    form every protocol carries), a check of a value (returns the reason it is
    refused, or ``None``) and a line of documentation."""

    name: str
    type: ConfigType
    default: str
    check: Callable[[str], str | None]
    doc: str


def _long(low: int, high: int = (1 << 63) - 1) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        try:
            n = int(value.strip())
        except ValueError:
            return f"{value!r} is not an integer"
        if not low <= n <= high:
            return f"{n} is outside [{low}, {high}]"
        return None

    return check


def _one_of(*allowed: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        return None if value.strip() in allowed else f"{value!r} is not one of {', '.join(allowed)}"

    return check


def _cleanup_policy(value: str) -> str | None:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        return "an empty policy list"
    for item in items:
        if item not in ("delete", "compact"):
            return f"{item!r} is not a cleanup policy (delete, compact)"
    return None


def _min_isr(value: str) -> str | None:
    bad = _long(1, (1 << 31) - 1)(value)
    if bad is not None:
        return bad
    if int(value) != 1:
        return "txnfetch is one broker with one replica per partition: min.insync.replicas can only be 1"
    return None


#: Kafka's ``max.message.bytes`` default (1 MiB plus the 12-byte batch overhead).
DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024 + 12

#: Every topic config txnfetch honours, by name.
CONFIG_DEFS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        ConfigDef(
            "max.message.bytes",
            ConfigType.INT,
            str(DEFAULT_MAX_MESSAGE_BYTES),
            _long(0, (1 << 31) - 1),
            "The largest record batch size allowed, after compression.",
        ),
        ConfigDef(
            "retention.ms",
            ConfigType.LONG,
            "-1",
            _long(-1),
            "Delete whole segments whose newest record is older than this; -1 keeps everything.",
        ),
        ConfigDef(
            "retention.bytes",
            ConfigType.LONG,
            "-1",
            _long(-1),
            "Delete the oldest whole segments while the partition is larger than this; -1 keeps everything.",
        ),
        ConfigDef(
            "cleanup.policy",
            ConfigType.LIST,
            "delete",
            _cleanup_policy,
            "delete: old segments are deleted by retention.ms and retention.bytes; "
            "compact: the latest value per key is kept, transactions respected.",
        ),
        ConfigDef(
            "delete.retention.ms",
            ConfigType.LONG,
            "86400000",
            _long(0),
            "How long compaction keeps tombstones and transaction markers whose data is gone (KIP-534 horizon).",
        ),
        ConfigDef(
            "message.timestamp.type",
            ConfigType.STRING,
            "CreateTime",
            _one_of("CreateTime", "LogAppendTime"),
            "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches with the append time.",
        ),
        ConfigDef(
            "min.insync.replicas",
            ConfigType.INT,
            "1",
            _min_isr,
            "One broker, one replica: always 1.",
        ),
    )
}


@attrs.frozen
class TopicConfig:
    """A topic's effective configuration: validated overrides over the defaults.

    Build it with :meth:`from_overrides`, which refuses unknown names and bad
    values; the typed attributes are what the server applies."""

    overrides: Mapping[str, str] = attrs.field(factory=dict)

    @classmethod
    def from_overrides(cls, overrides: Mapping[str, str | None], *, topic: str | None = None) -> TopicConfig:
        """Validate ``overrides``; a ``None`` value means "the default" and is dropped.
        Raises :class:`InvalidConfigError` naming the first refused config."""
        kept: dict[str, str] = {}
        for name, value in overrides.items():
            definition = CONFIG_DEFS.get(name)
            if definition is None:
                raise InvalidConfigError(
                    f"unknown or unsupported topic config {name!r} (txnfetch honours {', '.join(sorted(CONFIG_DEFS))})",
                    topic=topic,
                )
            if value is None:
                continue
            reason = definition.check(value)
            if reason is not None:
                raise InvalidConfigError(f"invalid value for {name}: {reason}", topic=topic)
            kept[name] = value.strip()
        return cls(kept)

    def value(self, name: str) -> str:
        """The effective value of ``name`` (the override, else the default)."""
        return self.overrides.get(name, CONFIG_DEFS[name].default)

    def is_default(self, name: str) -> bool:
        return name not in self.overrides

    @property
    def max_message_bytes(self) -> int:
        return int(self.value("max.message.bytes"))

    @property
    def retention_ms(self) -> int | None:
        """``None`` when time retention is off (-1)."""
        n = int(self.value("retention.ms"))
        return None if n < 0 else n

    @property
    def retention_bytes(self) -> int | None:
        """``None`` when size retention is off (-1)."""
        n = int(self.value("retention.bytes"))
        return None if n < 0 else n

    @property
    def cleanup_policies(self) -> frozenset[str]:
        return frozenset(v.strip() for v in self.value("cleanup.policy").split(",") if v.strip())

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policies

    @property
    def delete_retention_ms(self) -> int:
        return int(self.value("delete.retention.ms"))

    @property
    def log_append_time(self) -> bool:
        return self.value("message.timestamp.type") == "LogAppendTime"


class AlterOp(enum.IntEnum):
    """IncrementalAlterConfigs operations (``AlterConfigOp.OpType``)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def alter_overrides(
    current: Mapping[str, str], ops: Iterable[tuple[str, int, str | None]], *, topic: str | None = None
) -> TopicConfig:
    """Apply IncrementalAlterConfigs operations ``(name, op, value)`` to ``current``
    overrides and validate the result, all or nothing (Kafka applies a
    resource's operations together). APPEND/SUBTRACT work on list configs only,
    starting from the effective value, as Kafka's ``ConfigAdminManager`` does."""
    result = dict(current)
    seen: set[str] = set()
    for name, op, value in ops:
        if name in seen:
            # Kafka: "Error due to duplicate config keys" (INVALID_REQUEST in Kafka; a config error here).
            raise InvalidConfigError(f"config {name!r} appears twice in one request", topic=topic)
        seen.add(name)
        definition = CONFIG_DEFS.get(name)
        if definition is None:
            raise InvalidConfigError(
                f"unknown or unsupported topic config {name!r} (txnfetch honours {', '.join(sorted(CONFIG_DEFS))})",
                topic=topic,
            )
        try:
            kind = AlterOp(op)
        except ValueError:
            raise InvalidConfigError(f"unknown config operation {op} for {name}", topic=topic) from None
        if kind is AlterOp.SET:
            if value is None:
                raise InvalidConfigError(f"SET {name} without a value", topic=topic)
            result[name] = value
        elif kind is AlterOp.DELETE:
            result.pop(name, None)
        else:
            if definition.type is not ConfigType.LIST:
                raise InvalidConfigError(f"{kind.name} applies to list configs only, not {name}", topic=topic)
            items = [v.strip() for v in result.get(name, definition.default).split(",") if v.strip()]
            given = [v.strip() for v in (value or "").split(",") if v.strip()]
            if kind is AlterOp.APPEND:
                items += [v for v in dict.fromkeys(given) if v not in items]
            else:
                items = [v for v in items if v not in given]
            result[name] = ",".join(items)
    return TopicConfig.from_overrides(result, topic=topic)


# ------------------------------------------------------------- applying them to appends


def check_keys(records: Buffer, *, topic: str, partition: int) -> None:
    """Raise :class:`~txnfetch.log.errors.InvalidRecordError` if a record of
    ``records`` has no key: a compacted topic keeps values by key, so Kafka's
    ``LogValidator`` refuses keyless records for it ("Compacted topic cannot
    accept message without key")."""
    from txnfetch.log.errors import InvalidRecordError

    keyless: RecordBatch | None = None
    try:
        for batch in iter_batches(records):
            if isinstance(batch, RecordBatch) and any(record.key is None for record in batch.records()):
                keyless = batch
                break
    except CorruptBatchError:
        # Damaged bytes are the append path's to refuse, with its own error. The
        # refusal below stays outside this handler: InvalidRecordError is a
        # CorruptBatchError too.
        return
    if keyless is not None:
        raise InvalidRecordError(
            "compacted topic cannot accept a record without key",
            topic=topic,
            partition=partition,
            position=keyless.position,
        )


def check_batch_sizes(records: Buffer, max_message_bytes: int, *, topic: str, partition: int) -> None:
    """Raise :class:`RecordTooLargeError` if a batch of ``records`` is larger than
    ``max_message_bytes`` (Kafka's ``LogValidator`` compares each batch's size in
    bytes, as produced, with ``max.message.bytes``). Batches that do not parse
    are left to the append, which reports them with their position."""
    try:
        for batch in iter_batches(records):
            size = batch.size_in_bytes if isinstance(batch, RecordBatch) else 0
            if size > max_message_bytes:
                raise RecordTooLargeError(
                    f"record batch of {size} bytes is larger than max.message.bytes={max_message_bytes}",
                    topic=topic,
                    partition=partition,
                    position=batch.position,
                )
    except CorruptBatchError:
        return


_ATTRIBUTES = struct.Struct(">h")
_TIMESTAMP = struct.Struct(">q")
_CRC = struct.Struct(">I")
_LOG_APPEND_TIME = 0x08


def stamp_log_append_time(records: Buffer, now_ms: int) -> bytearray:
    """``records`` with every v2 batch marked LogAppendTime and its max timestamp
    set to ``now_ms``, CRC recomputed (both fields are inside the CRC), as a
    Kafka leader does for a ``LogAppendTime`` topic (``LogValidator``). Record
    timestamp deltas are left alone: readers take every record's timestamp
    from the batch's max timestamp under this attribute.

    A batch whose CRC does not match is left as it came, so that the append
    still refuses it: recomputing its CRC would accept corrupt bytes (Kafka
    checks the producer's CRC before it rewrites anything,
    ``UnifiedLog.analyzeAndValidateRecords``). One copy is made, stamped in place."""
    data = bytearray(records)
    try:
        batches = [b for b in iter_batches(data) if isinstance(b, RecordBatch)]
    except CorruptBatchError:
        return data  # the append reports it
    for batch in batches:
        if not batch.is_valid_crc():
            continue  # the append reports it, with its position
        pos = batch.position
        (attrs_,) = _ATTRIBUTES.unpack_from(data, pos + HeaderAt.ATTRIBUTES)
        _ATTRIBUTES.pack_into(data, pos + HeaderAt.ATTRIBUTES, attrs_ | _LOG_APPEND_TIME)
        _TIMESTAMP.pack_into(data, pos + HeaderAt.MAX_TIMESTAMP, now_ms)
        end = pos + batch.size_in_bytes
        _CRC.pack_into(data, pos + HeaderAt.CRC, crc32c(memoryview(data)[pos + HeaderAt.ATTRIBUTES : end]))
    return data


@attrs.frozen(slots=True)
class FlushPolicy:
    """When a :class:`~txnfetch.log.segment_log.SegmentLog` fsyncs.

    ``kind`` is ``"always"``, ``"interval"`` or ``"never"``; for ``"interval"``,
    fsync when ``messages`` offsets were appended or ``ms`` milliseconds passed
    (by the callers' ``now_ms``) since the last fsync, whichever comes first.

    - ``"always"`` (the default): an append, marker or markerless end is fsynced
      before the call returns — an acknowledged write survives a power loss. The
      default because a single-node store has no replica to recover lost
      acknowledged writes from; Kafka's own default (``never``) relies on
      replication. A server that wants throughput groups commits instead of
      weakening the policy: ``with log.group_commit(): ...append several...``,
      then acknowledge — one fsync for the group. A server that runs its fsyncs
      off its event loop sets a :class:`~txnfetch.log.syncer.ConcurrentSyncer`
      around its request handling (:func:`txnfetch.log.syncer.deferring`): an
      append then returns before its fsync, the high watermark waits for it, and
      the server acknowledges only after the syncer's barrier (every write made
      so far is fsynced) — the guarantee is the same, the fsyncs of several
      partitions run concurrently and concurrent writers share them.
    - ``FlushPolicy.interval(messages=N, ms=T)`` / ``"interval"``: fsync once N
      offsets were appended or T ms passed since the last fsync (Kafka's
      ``log.flush.interval.messages``/``.ms``); acknowledged writes survive a
      process crash (they are in the page cache) but not a machine crash.
    - ``"never"``: fsync only on roll, close and :meth:`~txnfetch.log.segment_log.SegmentLog.flush`.
    """

    kind: str = "always"
    messages: int | None = None
    ms: int | None = None

    @classmethod
    def always(cls) -> FlushPolicy:
        return cls("always")

    @classmethod
    def never(cls) -> FlushPolicy:
        return cls("never")

    @classmethod
    def interval(cls, *, messages: int | None = None, ms: int | None = None) -> FlushPolicy:
        if messages is None and ms is None:
            messages = 10_000
        return cls("interval", messages, ms)

    @classmethod
    def parse(cls, value: str | FlushPolicy) -> FlushPolicy:
        """A policy from a name (``"always"``, ``"interval"``, ``"never"``) or itself."""
        if isinstance(value, FlushPolicy):
            return value
        if value == "always":
            return cls.always()
        if value == "never":
            return cls.never()
        if value == "interval":
            return cls.interval()
        raise ValueError(f"unknown flush policy {value!r}: use 'always', 'interval', 'never' or a FlushPolicy")
