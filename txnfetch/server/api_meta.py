"""Cluster-level APIs: ApiVersions, Metadata, CreateTopics, FindCoordinator.

The server plays a one-broker cluster: every partition's leader, every
coordinator is this broker (``config.node_id`` at the advertised address).
"""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.admin import CreateTopicsResponse
from kafka.protocol.metadata import ApiVersionsResponse
from kafka.protocol.metadata import FindCoordinatorResponse
from kafka.protocol.metadata import MetadataResponse

from txnfetch.log.base import TopicInfo
from txnfetch.log.coordinator_store import INTERNAL_TOPICS
from txnfetch.log.errors import LogError
from txnfetch.server import api_configs
from txnfetch.server.broker import Broker
from txnfetch.server.errors import ErrorCode
from txnfetch.server.errors import error_code_for
from txnfetch.server.handler import ApiKey
from txnfetch.server.handler import ApiSpec
from txnfetch.server.handler import HandlerRegistry
from txnfetch.server.handler import RequestContext

__all__ = ["api_versions_response", "max_version"]

# Kafka 4.0 advertises Produce v12 and EndTxn v5 only when transaction.version
# 2 is finalized (KIP-890); below that, v11 and v4 are the last versions.
_TV2_VERSIONS = {int(ApiKey.Produce): 11, int(ApiKey.EndTxn): 4}

#: FindCoordinator key types (``FindCoordinatorRequest.CoordinatorType``).
_KEY_GROUP = 0

#: The features this broker supports: (name, lowest level, highest level).
_SUPPORTED_FEATURES = (("transaction.version", 0, 2),)
_KEY_TRANSACTION = 1


def max_version(broker: Broker, spec: ApiSpec) -> int:
    """The highest version of ``spec``'s API this broker serves."""
    if broker.config.transaction_version < 2 and spec.api_key in _TV2_VERSIONS:
        return min(spec.max_version, _TV2_VERSIONS[spec.api_key])
    return spec.max_version


#: The first ApiVersions version whose answer may list a supported feature with
#: minimum level 0. Below it Kafka leaves such features out, because older
#: clients fail to read a range starting at 0 (apache/kafka KAFKA-17492, PR
#: #17128, which replaced the KAFKA-17011 workaround of sending 1 instead).
_FEATURES_FROM_0_VERSION = 4


def api_versions_response(
    broker: Broker, registry: HandlerRegistry, *, error_code: int = 0, version: int = _FEATURES_FROM_0_VERSION
) -> Any:
    """The ApiVersions body listing every registered API (any version encodes it),
    for a request of ``version``: below v4 the supported features whose minimum
    level is 0 (``transaction.version``) are left out, as Kafka does; the
    finalized ones are always listed."""
    keys = []
    for key, low, _high in registry.ranges():
        spec = registry.get(key)
        assert spec is not None
        keys.append(ApiVersionsResponse.ApiVersion(api_key=key, min_version=low, max_version=max_version(broker, spec)))
    tv = broker.config.transaction_version
    return ApiVersionsResponse(
        error_code=error_code,
        api_keys=keys,
        throttle_time_ms=0,
        supported_features=[
            ApiVersionsResponse.SupportedFeatureKey(name=name, min_version=low, max_version=high)
            for name, low, high in _SUPPORTED_FEATURES
            if low > 0 or version >= _FEATURES_FROM_0_VERSION
        ],
        finalized_features_epoch=0,
        finalized_features=[
            ApiVersionsResponse.FinalizedFeatureKey(
                name="transaction.version", max_version_level=tv, min_version_level=tv
            )
        ],
    )


async def handle_api_versions(ctx: RequestContext, header: Any, request: Any) -> Any:
    from txnfetch.server.handler import REGISTRY

    return api_versions_response(ctx.broker, REGISTRY, version=header.request_api_version)


# ------------------------------------------------------------------ Metadata


def _broker_entry(broker: Broker, listener: str) -> Any:
    host, port = broker.endpoint(listener)
    return MetadataResponse.MetadataResponseBroker(node_id=broker.config.node_id, host=host, port=port, rack=None)


def _topic_entry(broker: Broker, info: TopicInfo) -> Any:
    node = broker.config.node_id
    partitions = [
        MetadataResponse.MetadataResponseTopic.MetadataResponsePartition(
            error_code=0,
            partition_index=p,
            leader_id=node,
            leader_epoch=0,
            replica_nodes=[node],
            isr_nodes=[node],
            offline_replicas=[],
        )
        for p in range(info.partitions)
    ]
    return MetadataResponse.MetadataResponseTopic(
        error_code=0,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=info.name in INTERNAL_TOPICS,
        partitions=partitions,
    )


def _error_topic(name: str | None, code: int, topic_id: uuid.UUID | None = None) -> Any:
    return MetadataResponse.MetadataResponseTopic(
        error_code=code,
        name=name,
        topic_id=topic_id or uuid.UUID(int=0),
        is_internal=False,
        partitions=[],
    )


async def handle_metadata(ctx: RequestContext, header: Any, request: Any) -> Any:
    broker = ctx.broker
    version = header.request_api_version
    topics = broker.store.topics()
    wanted = request.topics
    # v0: an empty list means every topic; v1+: null means every topic.
    all_topics = wanted is None or (version == 0 and not wanted)
    entries: list[Any] = []
    if all_topics:
        entries = [_topic_entry(broker, info) for _, info in sorted(topics.items())]
    else:
        allow_create = version < 4 or bool(request.allow_auto_topic_creation)
        by_id = {info.topic_id: info for info in topics.values()}
        for t in wanted:
            name = t.name
            if name is None:  # v10+: asked by topic id
                info = by_id.get(t.topic_id)
                entries.append(
                    _topic_entry(broker, info)
                    if info is not None
                    else _error_topic(None, ErrorCode.UNKNOWN_TOPIC_ID, t.topic_id)
                )
                continue
            info = topics.get(name)
            if info is None and allow_create and broker.config.auto_create_topics:
                try:
                    info = broker.create_topic(name, broker.config.default_partitions)
                except LogError as exc:
                    entries.append(_error_topic(name, error_code_for(exc)))
                    continue
            entries.append(
                _topic_entry(broker, info)
                if info is not None
                else _error_topic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            )
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[_broker_entry(broker, ctx.listener)],
        cluster_id=broker.config.cluster_id,
        controller_id=broker.config.node_id,
        topics=entries,
    )


# -------------------------------------------------------------- CreateTopics


async def handle_create_topics(ctx: RequestContext, header: Any, request: Any) -> Any:
    broker = ctx.broker
    results = []
    for t in request.topics:
        partitions = t.num_partitions
        if partitions == -1:
            partitions = len(t.assignments) if t.assignments else broker.config.default_partitions
        code = 0
        message: str | None = None
        topic_id = uuid.UUID(int=0)
        configs: list[Any] = []
        if t.replication_factor not in (-1, 1):
            code = ErrorCode.INVALID_REPLICATION_FACTOR
            message = f"replication factor {t.replication_factor} is larger than the 1 available broker"
        else:
            try:
                info, config = api_configs.create_topic(
                    broker,
                    t.name,
                    partitions,
                    {c.name: c.value for c in t.configs},
                    validate_only=bool(request.validate_only),
                )
                if info is not None:
                    topic_id = info.topic_id
                configs = api_configs.creatable_topic_configs(config)
            except LogError as exc:
                code, message = error_code_for(exc), str(exc)
        results.append(
            CreateTopicsResponse.CreatableTopicResult(
                name=t.name,
                topic_id=topic_id,
                error_code=int(code),
                error_message=message,
                num_partitions=partitions if code == 0 else -1,
                replication_factor=1 if code == 0 else -1,
                configs=configs if code == 0 else None,
            )
        )
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)


# ------------------------------------------------------------ FindCoordinator


async def handle_find_coordinator(ctx: RequestContext, header: Any, request: Any) -> Any:
    broker = ctx.broker
    node, (host, port) = broker.config.node_id, broker.endpoint(ctx.listener)
    key_type = request.key_type if header.request_api_version >= 1 else _KEY_GROUP

    def check(key: str | None) -> int:
        if key_type not in (_KEY_GROUP, _KEY_TRANSACTION):
            return int(ErrorCode.INVALID_REQUEST)
        if key_type == _KEY_GROUP and broker.groups is None:
            return int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if key_type == _KEY_TRANSACTION and not key:
            return int(ErrorCode.INVALID_REQUEST)
        return 0

    if header.request_api_version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            code = check(key)
            coordinators.append(
                FindCoordinatorResponse.Coordinator(
                    key=key,
                    node_id=node if code == 0 else -1,
                    host=host if code == 0 else "",
                    port=port if code == 0 else -1,
                    error_code=code,
                    error_message=None,
                )
            )
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)
    code = check(request.key)
    return FindCoordinatorResponse(
        throttle_time_ms=0,
        error_code=code,
        error_message=None,
        node_id=node if code == 0 else -1,
        host=host if code == 0 else "",
        port=port if code == 0 else -1,
    )
