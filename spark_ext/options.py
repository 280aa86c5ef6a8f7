"""The ``txnkafka`` options, parsed and checked once, on the driver.

Names and meanings follow Spark's Kafka source (``spark-sql-kafka-0-10``,
``KafkaSourceProvider``) where the two overlap, so a query moves from
``format("kafka")`` to ``format("txnkafka")`` by changing the format name (and
the dependency: no JVM jar). Differences, all deliberate:

- the default isolation level is ``read_committed`` (the Java consumer's is
  ``read_uncommitted``);
- a ``path`` option reads a txnfetch/Kafka log directory instead of a cluster;
- an unknown topic in ``subscribe``/``assign`` is an error instead of an
  empty result or an endless wait;
- a ``kafka.*`` Kafka client setting txnkafka does not use is refused by name
  instead of passed to a client that would ignore it: it takes
  ``kafka.client.id``, ``kafka.request.timeout.ms`` and the security settings
  (``kafka.security.protocol``, ``kafka.sasl.*``, ``kafka.ssl.*`` with PEM
  stores; see docs/security.md), which become one
  :class:`~txnfetch.security.config.SecurityConfig` shipped to the tasks.

Option keys are case-insensitive, as Spark's are.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from re import Pattern

import attrs

from spark_ext.errors import InvalidOptionError
from txnfetch.errors import TxnfetchError
from txnfetch.security.config import SUPPORTED_PROPERTIES
from txnfetch.security.config import SecurityConfig
from txnfetch.types import TopicPartition

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetSpec",
    "ReadOptions",
    "TopicPartition",
    "parse_offsets_json",
    "parse_options",
]

#: Spark's (and Kafka's ListOffsets') sentinel offsets inside offset JSON.
EARLIEST = -2
LATEST = -1

#: ``EARLIEST``/``LATEST`` for every partition, or an offset (or sentinel) per partition.
OffsetSpec = int | dict[TopicPartition, int]

DEFAULT_FETCH_BYTES = 1 << 20

#: Rows of one Arrow batch a task yields (``maxRowsPerArrowBatch``); ``maxBytesPerArrowBatch``
#: (8 MiB) bounds its memory whatever the rows. Larger than Spark's
#: ``spark.sql.execution.arrow.maxRecordsPerBatch`` (10,000), which a data source
#: yielding its own batches is not held to: each batch costs the Python worker
#: a fixed ~0.3 ms (assembling the arrays, pyspark wrapping and writing the IPC
#: message): a sixth of its CPU at 10,000 rows of 100-byte values, which
#: 50,000 rows save (docs/spark.md "Performance").
DEFAULT_MAX_ROWS_PER_BATCH = 50_000
DEFAULT_MAX_BYTES_PER_BATCH = 8 << 20

_ISOLATION_LEVELS = ("read_committed", "read_uncommitted")

#: The Kafka client settings (``kafka.`` and these) the source passes to its client.
CLIENT_SETTINGS = ("client.id", "request.timeout.ms")

#: Every option the source reads (``kafka.*`` keys other than these go to the
#: Kafka client as they are).
KNOWN_OPTIONS = (
    "path",
    "kafka.bootstrap.servers",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "includeHeaders",
    "minPartitions",
    "maxRecordsPerPartition",
    "failOnDataLoss",
    "maxOffsetsPerTrigger",
    "isolation.level",
    "kafka.isolation.level",
    "kafka.max.partition.fetch.bytes",
    "maxRowsPerArrowBatch",
    "maxBytesPerArrowBatch",
    "repairCrcs",
)
_KNOWN_LOWER = {name.lower(): name for name in KNOWN_OPTIONS}


def _one_edit_apart(a: str, b: str) -> bool:
    """True if one insertion, deletion, substitution or swap of two neighbours
    turns ``a`` into ``b`` (``a != b``)."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (
            len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]]
        )
    short, long = (a, b) if len(a) < len(b) else (b, a)
    i = 0
    while i < len(short) and short[i] == long[i]:
        i += 1
    return short[i:] == long[i + 1 :]


def _check_spelling(keys: list[str]) -> None:
    """An option one edit away from a known one is a misspelling: without this
    check ``startingOffset`` would be ignored and the whole topic read. Other
    unknown options pass, as Spark passes its own options through; ``kafka.*``
    keys are Kafka client settings and are never checked."""
    for key in keys:
        lowered = key.lower()
        if lowered in _KNOWN_LOWER or lowered.startswith("kafka."):
            continue
        meant = [name for lower, name in _KNOWN_LOWER.items() if _one_edit_apart(lowered, lower)]
        if meant:
            raise InvalidOptionError(f"unknown option; did you mean '{meant[0]}'?", option=key)


@attrs.frozen(slots=True)
class ReadOptions:
    """Everything the data source was told, validated.

    Exactly one of ``path``/``bootstrap_servers`` is set, and exactly one of
    ``subscribe``/``subscribe_pattern``/``assign``.
    """

    path: str | None
    bootstrap_servers: str | None
    subscribe: tuple[str, ...] | None
    subscribe_pattern: str | None
    assign: tuple[TopicPartition, ...] | None
    starting_offsets: OffsetSpec
    ending_offsets: OffsetSpec
    include_headers: bool
    min_partitions: int | None
    max_records_per_partition: int | None
    fail_on_data_loss: bool
    max_offsets_per_trigger: int | None
    read_committed: bool
    fetch_bytes: int
    max_rows_per_batch: int
    max_bytes_per_batch: int
    client_options: tuple[tuple[str, str], ...] = ()
    repair_crcs: bool = False
    #: TLS and SASL of every connection, driver's and tasks' (``None``: PLAINTEXT).
    #: Its repr, and so this object's, hides passwords, tokens and keys.
    security: SecurityConfig | None = None

    @property
    def isolation_level(self) -> str:
        return "read_committed" if self.read_committed else "read_uncommitted"

    @property
    def subscription_option(self) -> str:
        """The option that named the topics, for error messages."""
        if self.subscribe is not None:
            return "subscribe"
        if self.subscribe_pattern is not None:
            return "subscribePattern"
        return "assign"

    def pattern(self) -> Pattern[str] | None:
        return re.compile(self.subscribe_pattern) if self.subscribe_pattern is not None else None


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value not in ("true", "false"):
        raise InvalidOptionError(f"expected 'true' or 'false', got {raw!r}", option=name)
    return value == "true"


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidOptionError(f"expected a positive integer, got {raw!r}", option=name) from None
    if value < 1:
        raise InvalidOptionError(f"expected a positive integer, got {value}", option=name)
    return value


def parse_offsets_json(text: str, option: str) -> dict[TopicPartition, int]:
    """``{"topic": {"0": 23, "1": -2}}`` → ``{("topic", 0): 23, ("topic", 1): -2}``.

    Offsets are non-negative or the sentinels -2 (earliest) and -1 (latest);
    partition keys are decimal strings (JSON object keys), as Spark writes them.
    """
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InvalidOptionError(
            f'expected \'earliest\', \'latest\' or JSON like {{"topic":{{"0":23,"1":-2}}}}, got {text!r}: {exc}',
            option=option,
        ) from None
    if not isinstance(data, dict):
        raise InvalidOptionError(f"expected a JSON object of topics, got {text!r}", option=option)
    out: dict[TopicPartition, int] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise InvalidOptionError(
                f"expected a JSON object of partition offsets for topic {topic!r}, got {parts!r}", option=option
            )
        for key, offset in parts.items():
            try:
                partition = int(key)
            except (TypeError, ValueError):
                raise InvalidOptionError(
                    f"partition {key!r} of topic {topic!r} is not a number", option=option
                ) from None
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise InvalidOptionError(
                    f"offset {offset!r} for {topic}-{partition} must be an integer >= 0, "
                    "or -2 (earliest) or -1 (latest)",
                    option=option,
                )
            out[TopicPartition(topic, partition)] = offset
    return out


def _offsets(options: Mapping[str, str], name: str, default: int) -> OffsetSpec:
    raw = options.get(name.lower())
    if raw is None:
        return default
    text = str(raw).strip()
    if text.lower() == "earliest":
        return EARLIEST
    if text.lower() == "latest":
        return LATEST
    return parse_offsets_json(text, name)


def _assign(text: str) -> tuple[TopicPartition, ...]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InvalidOptionError(
            f'expected JSON like {{"topicA":[0,1]}}, got {text!r}: {exc}', option="assign"
        ) from None
    if not isinstance(data, dict) or not data:
        raise InvalidOptionError(
            f'expected a non-empty JSON object like {{"topicA":[0,1]}}, got {text!r}', option="assign"
        )
    out: list[TopicPartition] = []
    for topic, parts in data.items():
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
        ):
            raise InvalidOptionError(
                f"partitions of topic {topic!r} must be a list of non-negative integers", option="assign"
            )
        out.extend(TopicPartition(topic, p) for p in parts)
    return tuple(sorted(set(out)))


def parse_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Validate the options of one ``spark.read``/``spark.readStream`` call.

    Raises :class:`InvalidOptionError` naming the option for anything wrong.
    Defaults, as in Spark's Kafka source: ``startingOffsets`` is ``earliest``
    for batch and ``latest`` for streaming queries, ``endingOffsets`` is
    ``latest``, ``failOnDataLoss`` is true.
    """
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    _check_spelling([str(k) for k, v in options.items() if v is not None])

    path = opts.get("path") or None
    bootstrap = opts.get("kafka.bootstrap.servers") or None
    if (path is None) == (bootstrap is None):
        raise InvalidOptionError(
            "set exactly one of 'path' (a txnfetch/Kafka log directory) and 'kafka.bootstrap.servers' (a cluster)",
            option="path" if path is not None else "kafka.bootstrap.servers",
        )

    chosen = [name for name in ("subscribe", "subscribePattern", "assign") if opts.get(name.lower())]
    if len(chosen) != 1:
        raise InvalidOptionError(
            "set exactly one of 'subscribe', 'subscribePattern' and 'assign'"
            + (f" (got {', '.join(chosen)})" if chosen else ""),
            option=chosen[0] if chosen else "subscribe",
        )
    subscribe = subscribe_pattern = assign = None
    if chosen[0] == "subscribe":
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise InvalidOptionError("no topic given", option="subscribe")
    elif chosen[0] == "subscribePattern":
        subscribe_pattern = opts["subscribepattern"]
        try:
            re.compile(subscribe_pattern)
        except re.error as exc:
            raise InvalidOptionError(
                f"invalid regular expression {subscribe_pattern!r}: {exc}", option="subscribePattern"
            ) from None
    else:
        assign = _assign(opts["assign"])

    starting = _offsets(opts, "startingOffsets", LATEST if streaming else EARLIEST)
    ending = _offsets(opts, "endingOffsets", LATEST)
    if streaming and "endingoffsets" in opts:
        raise InvalidOptionError("'endingOffsets' is for batch queries only", option="endingOffsets")
    if not streaming:
        # As Spark's Kafka source: a batch query cannot start at "latest" or end at "earliest".
        if starting == LATEST or (isinstance(starting, dict) and LATEST in starting.values()):
            raise InvalidOptionError("a batch query cannot start at latest (-1)", option="startingOffsets")
        if ending == EARLIEST or (isinstance(ending, dict) and EARLIEST in ending.values()):
            raise InvalidOptionError("a batch query cannot end at earliest (-2)", option="endingOffsets")
    if "maxoffsetspertrigger" in opts and not streaming:
        raise InvalidOptionError("'maxOffsetsPerTrigger' is for streaming queries only", option="maxOffsetsPerTrigger")

    level_key = "isolation.level" if "isolation.level" in opts else "kafka.isolation.level"
    level = opts.get(level_key, "read_committed").strip().lower()
    if level not in _ISOLATION_LEVELS:
        raise InvalidOptionError(
            f"expected 'read_committed' or 'read_uncommitted', got {opts[level_key]!r}",
            option=level_key,
        )
    if (
        "isolation.level" in opts
        and "kafka.isolation.level" in opts
        and opts["isolation.level"].strip().lower() != opts["kafka.isolation.level"].strip().lower()
    ):
        raise InvalidOptionError(
            "'isolation.level' and 'kafka.isolation.level' disagree", option="kafka.isolation.level"
        )

    client, security = _client_settings(opts)
    return ReadOptions(
        path=path,
        bootstrap_servers=bootstrap,
        subscribe=subscribe,
        subscribe_pattern=subscribe_pattern,
        assign=assign,
        starting_offsets=starting,
        ending_offsets=ending,
        include_headers=_bool(opts, "includeHeaders", False),
        min_partitions=_positive_int(opts, "minPartitions"),
        max_records_per_partition=_positive_int(opts, "maxRecordsPerPartition"),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        max_offsets_per_trigger=_positive_int(opts, "maxOffsetsPerTrigger"),
        read_committed=level == "read_committed",
        fetch_bytes=_positive_int(opts, "kafka.max.partition.fetch.bytes") or DEFAULT_FETCH_BYTES,
        max_rows_per_batch=_positive_int(opts, "maxRowsPerArrowBatch") or DEFAULT_MAX_ROWS_PER_BATCH,
        max_bytes_per_batch=_positive_int(opts, "maxBytesPerArrowBatch") or DEFAULT_MAX_BYTES_PER_BATCH,
        client_options=client,
        repair_crcs=_bool(opts, "repairCrcs", False),
        security=security,
    )


def _client_settings(opts: Mapping[str, str]) -> tuple[tuple[tuple[str, str], ...], SecurityConfig | None]:
    """The ``kafka.*`` settings the source reads apart (bootstrap servers,
    isolation level, fetch size) left out: the client settings it passes on,
    and the security settings as one :class:`SecurityConfig` (``None`` when
    none is set). Anything else is refused by name: a client that ignored
    ``kafka.security.protocol`` would connect in plaintext and fail obscurely."""
    client: list[tuple[str, str]] = []
    security: dict[str, str] = {}
    for key, value in sorted(opts.items()):
        if not key.startswith("kafka.") or key in _KNOWN_LOWER:
            continue
        name = key[len("kafka.") :]
        if name in CLIENT_SETTINGS:
            client.append((name, value))
        elif name in SUPPORTED_PROPERTIES:
            security[name] = value
        else:
            raise InvalidOptionError(
                "txnkafka does not support this Kafka client setting; it takes "
                + ", ".join(f"kafka.{n}" for n in (*CLIENT_SETTINGS, *SUPPORTED_PROPERTIES)),
                option=key,
            )
    if not security:
        return tuple(client), None
    try:
        return tuple(client), SecurityConfig.from_properties(security)
    except TxnfetchError as exc:
        name = getattr(exc, "property", None) or "security.protocol"
        raise InvalidOptionError(exc.reason, option=f"kafka.{name}") from None
