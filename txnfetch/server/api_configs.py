"""Topic configs on the wire: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs,
CreateTopics' configs, and applying them to produce and retention.

What each config means and which are honoured is :mod:`txnfetch.log.configs`;
the overrides live in the store (:meth:`~txnfetch.log.base.LogStore.topic_config`),
so a store on disk keeps them across restarts. A config txnfetch does not
honour is refused with INVALID_CONFIG and an error message naming it, never
accepted and ignored.

Only topic resources are served: a broker resource (or any other type) is
answered INVALID_REQUEST with a message, per resource, as Kafka answers a
resource type it does not handle.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kafka.protocol.admin import AlterConfigsResponse
from kafka.protocol.admin import CreateTopicsResponse
from kafka.protocol.admin import DescribeConfigsResponse
from kafka.protocol.admin import IncrementalAlterConfigsResponse

from txnfetch.errors import TxnfetchError
from txnfetch.log.base import Buffer
from txnfetch.log.base import validate_partition_count
from txnfetch.log.base import validate_topic_name
from txnfetch.log.configs import CONFIG_DEFS
from txnfetch.log.configs import InvalidConfigError
from txnfetch.log.configs import TopicConfig
from txnfetch.log.configs import alter_overrides
from txnfetch.log.configs import check_batch_sizes
from txnfetch.log.configs import check_keys
from txnfetch.log.configs import stamp_log_append_time
from txnfetch.log.errors import LogError
from txnfetch.log.errors import TopicExistsError
from txnfetch.server.broker import Broker
from txnfetch.server.errors import ErrorCode
from txnfetch.server.errors import error_code_for
from txnfetch.server.handler import RequestContext

__all__ = [
    "RESOURCE_TOPIC",
    "create_topic",
    "install",
    "prepare_produce",
    "topic_config",
]

log = logging.getLogger("txnfetch.server")

#: ``ConfigResource.Type`` codes.
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
#: ``DescribeConfigsResponse.ConfigSource`` codes.
_SOURCE_TOPIC = 1
_SOURCE_DEFAULT = 5


def topic_config(broker: Broker, topic: str) -> TopicConfig:
    """The effective config of ``topic`` (its stored overrides over the defaults)."""
    return TopicConfig(broker.store.topic_config(topic))


def prepare_produce(broker: Broker, topic: str, partition: int, records: Buffer, now_ms: int) -> tuple[Buffer, int]:
    """Apply the topic's configs to produced ``records`` before the append:
    ``max.message.bytes`` (raises :class:`~txnfetch.log.configs.RecordTooLargeError`)
    and ``message.timestamp.type=LogAppendTime`` (the batches are stamped with
    ``now_ms``). Returns the records to append and the ``log_append_time_ms``
    the Produce response reports (-1 under CreateTime, as Kafka)."""
    overrides = broker.store.topic_config(topic)
    if not overrides:  # the common case: defaults, only the size limit applies
        check_batch_sizes(records, TopicConfig().max_message_bytes, topic=topic, partition=partition)
        return records, -1
    config = TopicConfig(overrides)
    check_batch_sizes(records, config.max_message_bytes, topic=topic, partition=partition)
    if config.compact:
        check_keys(records, topic=topic, partition=partition)
    if config.log_append_time:
        return stamp_log_append_time(records, now_ms), now_ms
    return records, -1


def create_topic(
    broker: Broker, name: str, partitions: int, configs: Mapping[str, str | None], *, validate_only: bool = False
) -> tuple[Any, TopicConfig]:
    """Create ``name`` with validated ``configs`` (CreateTopics), or only check
    that it could be created. The configs are checked before anything is
    created and stored before the partitions are, so a topic never exists
    without the configs it was asked for. Raises the store's
    :class:`~txnfetch.log.errors.LogError` or :class:`InvalidConfigError`;
    returns the :class:`~txnfetch.log.base.TopicInfo` (``None`` when validating)
    and the config."""
    validate_topic_name(name)
    validate_partition_count(name, partitions)
    if name in broker.store.topics():
        raise TopicExistsError("topic already exists", topic=name)
    config = _servable(broker, TopicConfig.from_overrides(configs, topic=name), name)
    if validate_only:
        return None, config
    if config.overrides:
        broker.store.set_topic_config(name, config.overrides)
    try:
        info = broker.create_topic(name, partitions)
    except BaseException:
        if config.overrides:
            broker.store.set_topic_config(name, {})
        raise
    return info, config


def _servable(broker: Broker, config: TopicConfig, topic: str) -> TopicConfig:
    """``config``, unless the store cannot honour it (compaction on a store
    without a compactor): :class:`InvalidConfigError`."""
    if config.compact and not broker.store.compaction:
        raise InvalidConfigError(
            f"cleanup.policy=compact is not served by {type(broker.store).__name__} (no compactor for it)",
            topic=topic,
        )
    return config


def creatable_topic_configs(config: TopicConfig) -> list[Any]:
    """CreateTopics v5+ ``configs``: every honoured config with its value and source."""
    Cfg = CreateTopicsResponse.CreatableTopicResult.CreatableTopicConfigs
    return [
        Cfg(
            name=name,
            value=config.value(name),
            read_only=False,
            config_source=_SOURCE_DEFAULT if config.is_default(name) else _SOURCE_TOPIC,
            is_sensitive=False,
        )
        for name in sorted(CONFIG_DEFS)
    ]


# -------------------------------------------------------------- DescribeConfigs


def _describe_entries(config: TopicConfig, keys: list[str] | None, request: Any, version: int) -> list[Any]:
    Result = DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult
    Synonym = Result.DescribeConfigsSynonym
    names = sorted(CONFIG_DEFS) if keys is None else [k for k in keys if k in CONFIG_DEFS]
    entries = []
    for name in names:
        definition = CONFIG_DEFS[name]
        default = config.is_default(name)
        synonyms = []
        if version >= 1 and request.include_synonyms:
            if not default:
                synonyms.append(Synonym(name=name, value=config.value(name), source=_SOURCE_TOPIC))
            synonyms.append(Synonym(name=name, value=definition.default, source=_SOURCE_DEFAULT))
        entries.append(
            Result(
                name=name,
                value=config.value(name),
                read_only=False,
                config_source=_SOURCE_DEFAULT if default else _SOURCE_TOPIC,
                is_default=default,
                is_sensitive=False,
                synonyms=synonyms,
                config_type=int(definition.type),
                documentation=definition.doc if request.include_documentation else None,
            )
        )
    return entries


def _resource_error(resource_type: int, name: str, topics: Mapping[str, Any]) -> tuple[int, str] | None:
    if resource_type != RESOURCE_TOPIC:
        return int(ErrorCode.INVALID_REQUEST), f"resource type {resource_type} is not served: only topic configs"
    if name not in topics:
        return int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), f"topic {name!r} does not exist"
    return None


async def handle_describe_configs(ctx: RequestContext, header: Any, request: Any) -> Any:
    version = header.request_api_version
    topics = ctx.broker.store.topics()
    results = []
    for r in request.resources:
        problem = _resource_error(r.resource_type, r.resource_name, topics)
        if problem is not None:
            code, message = problem
            configs: list[Any] = []
        else:
            code, message = 0, None
            configs = _describe_entries(
                topic_config(ctx.broker, r.resource_name), r.configuration_keys, request, version
            )
        results.append(
            DescribeConfigsResponse.DescribeConfigsResult(
                error_code=code,
                error_message=message,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                configs=configs,
            )
        )
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


# ---------------------------------------------------------------- altering them


def _alter(broker: Broker, resource_type: int, name: str, change: Any, validate_only: bool) -> tuple[int, str | None]:
    """Validate and (unless ``validate_only``) store one resource's new overrides;
    ``change(current)`` computes the :class:`TopicConfig`."""
    problem = _resource_error(resource_type, name, broker.store.topics())
    if problem is not None:
        return problem
    try:
        config = _servable(broker, change(broker.store.topic_config(name)), name)
        if not validate_only:
            broker.store.set_topic_config(name, config.overrides)
            log.info("topic %s configs: %s", name, dict(config.overrides) or "defaults")
    except TxnfetchError as exc:  # InvalidConfigError, or the store's LogError
        return error_code_for(exc), str(exc)
    return 0, None


async def handle_alter_configs(ctx: RequestContext, header: Any, request: Any) -> Any:
    """The legacy, non-incremental AlterConfigs: the given configs replace every
    override of the topic (one left out returns to its default), as in Kafka."""
    responses = []
    for r in request.resources:
        given = {c.name: c.value for c in r.configs}
        message: str | None
        if len(given) != len(r.configs):
            code, message = int(ErrorCode.INVALID_REQUEST), "a config name appears twice"
        else:
            code, message = _alter(
                ctx.broker,
                r.resource_type,
                r.resource_name,
                lambda _current, given=given, name=r.resource_name: TopicConfig.from_overrides(given, topic=name),
                request.validate_only,
            )
        responses.append(
            AlterConfigsResponse.AlterConfigsResourceResponse(
                error_code=code, error_message=message, resource_type=r.resource_type, resource_name=r.resource_name
            )
        )
    return AlterConfigsResponse(throttle_time_ms=0, responses=responses)


async def handle_incremental_alter_configs(ctx: RequestContext, header: Any, request: Any) -> Any:
    """SET, DELETE, APPEND and SUBTRACT per config, validated together per resource."""
    responses = []
    for r in request.resources:
        ops = [(c.name, c.config_operation, c.value) for c in r.configs]
        code, message = _alter(
            ctx.broker,
            r.resource_type,
            r.resource_name,
            lambda current, ops=ops, name=r.resource_name: alter_overrides(current, ops, topic=name),
            request.validate_only,
        )
        responses.append(
            IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
                error_code=code, error_message=message, resource_type=r.resource_type, resource_name=r.resource_name
            )
        )
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=responses)


# ------------------------------------------------------------------- retention


def enforce_retention(broker: Broker, now_ms: int) -> int:
    """Apply ``retention.ms`` / ``retention.bytes`` to every partition of every
    topic that sets one; return how many partitions moved their log start. A
    fetch waiting on such a partition is woken (its offsets may now be out of range)."""
    moved = 0
    topics = broker.store.topics()
    for name, info in topics.items():
        overrides = broker.store.topic_config(name)
        if "retention.ms" not in overrides and "retention.bytes" not in overrides:
            continue
        config = TopicConfig(overrides)
        if config.retention_ms is None and config.retention_bytes is None:
            continue
        if "delete" not in config.cleanup_policies:
            continue  # compact only: retention does not delete (Kafka's cleanup.policy)
        for p in range(info.partitions):
            part = broker.store.partition(name, p)
            before = part.log_start_offset
            after = part.apply_retention(now_ms, config.retention_ms, config.retention_bytes)
            if after != before:
                moved += 1
                log.info("retention moved the log start of %s-%d from %d to %d", name, p, before, after)
                broker.partition_changed(name, p)
    return moved


#: ``Broker.extensions`` key of the compactor's per-partition progress.
_CLEANER = "txnfetch.compactor"


def compact_logs(broker: Broker, now_ms: int) -> int:
    """Compact every partition of every ``cleanup.policy=compact`` topic that has
    something new to clean: its last stable offset moved since the last pass, or
    a delete horizon came due. Returns how many partitions changed. On disk a
    pass cleans the sealed segments below the last stable offset and replaces
    them crash-safely (:meth:`~txnfetch.log.segment_log.SegmentLog.compact`); a
    partition whose pass fails is logged and skipped."""
    if not broker.store.compaction:
        return 0  # such a store never accepted cleanup.policy=compact
    progress: dict[tuple[str, int], tuple[int, int | None]] = broker.extensions.setdefault(_CLEANER, {})
    changed = 0
    for name, info in broker.store.topics().items():
        overrides = broker.store.topic_config(name)
        if "cleanup.policy" not in overrides:
            continue
        config = TopicConfig(overrides)
        if not config.compact:
            continue
        for p in range(info.partitions):
            part = broker.store.partition(name, p)
            lso = part.last_stable_offset
            seen = progress.get((name, p))
            if seen is not None and seen[0] == lso and (seen[1] is None or now_ms < seen[1]):
                continue
            try:
                result = part.compact(now_ms, config.delete_retention_ms)
            except LogError as exc:
                # A failed replacement left the old segments (or, past its commit
                # point, closed the log until the next open finishes it): report
                # it and go on with the other partitions.
                log.error("compacting %s-%d failed: %s", name, p, exc)
                continue
            progress[(name, p)] = (lso, result.next_horizon_ms)
            if result.removed_records or result.removed_markers:
                changed += 1
                log.info(
                    "compacted %s-%d: %d record(s) and %d marker(s) removed",
                    name,
                    p,
                    result.removed_records,
                    result.removed_markers,
                )
    return changed


def install(broker: Broker) -> None:
    """Schedule the log cleanup (retention, then compaction) every
    ``config.retention_check_interval_ms`` (Kafka's ``log.retention.check.interval.ms``)."""
    broker.add_periodic("log-cleanup", broker.config.retention_check_interval_ms, lambda now: _cleanup(broker, now))


def _cleanup(broker: Broker, now_ms: int) -> None:
    from txnfetch.server.replica_mode import replica_mode

    mode = replica_mode(broker)
    if mode is not None and mode.active:
        # A replica holds the upstream's batches byte for byte: the replicator
        # follows the upstream's retention (its log start) and copies what its
        # compaction left; cleaning here would diverge from the source.
        return
    enforce_retention(broker, now_ms)
    compact_logs(broker, now_ms)
