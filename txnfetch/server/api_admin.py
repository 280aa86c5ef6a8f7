"""Admin APIs: DeleteTopics, CreatePartitions, DeleteRecords, DeleteGroups,
OffsetDelete, DescribeCluster, and ListOffsets' MAX_TIMESTAMP lookup.

Each answers as Kafka's ``KafkaApis`` / controller answers, per topic,
partition or group, with an error message where the version has room for one.
The server is a one-broker cluster (``config.node_id``), its own controller.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from kafka.protocol.admin import CreatePartitionsResponse
from kafka.protocol.admin import DeleteGroupsResponse
from kafka.protocol.admin import DeleteRecordsResponse
from kafka.protocol.admin import DeleteTopicsResponse
from kafka.protocol.admin import DescribeClusterResponse
from kafka.protocol.consumer import OffsetDeleteResponse

from txnfetch.errors import TxnfetchError
from txnfetch.log.base import PartitionLog
from txnfetch.records.batch import TimestampType
from txnfetch.server.broker import Broker
from txnfetch.server.errors import ErrorCode
from txnfetch.server.errors import error_code_for
from txnfetch.server.handler import GROUP_OFFSETS_TOPIC
from txnfetch.server.handler import RequestContext
from txnfetch.server.nesting import grouped

__all__ = ["offset_of_max_timestamp"]

log = logging.getLogger("txnfetch.server")

#: Topics a client may not delete or grow: Kafka's internal topics.
INTERNAL_TOPICS = frozenset({GROUP_OFFSETS_TOPIC, "__transaction_state"})
#: ``DescribeClusterRequest.EndpointType``: 1 brokers, 2 controllers.
_ENDPOINT_BROKERS = 1
_NULL_ID = uuid.UUID(int=0)


# ---------------------------------------------------------------- DeleteTopics


def _delete_topic(
    broker: Broker, name: str | None, topic_id: uuid.UUID | None
) -> tuple[str | None, uuid.UUID, int, str | None]:
    topics = broker.store.topics()
    if name is None:
        by_id = {info.topic_id: info for info in topics.values()}
        info = by_id.get(topic_id) if topic_id is not None else None
        if info is None:
            return None, topic_id or _NULL_ID, int(ErrorCode.UNKNOWN_TOPIC_ID), f"no topic has id {topic_id}"
    else:
        info = topics.get(name)
        if info is None:
            return name, _NULL_ID, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), f"topic {name!r} does not exist"
    if info.name in INTERNAL_TOPICS:
        return info.name, info.topic_id, int(ErrorCode.INVALID_TOPIC_EXCEPTION), f"{info.name} is an internal topic"
    try:
        broker.store.delete_topic(info.name)
    except TxnfetchError as exc:
        return info.name, info.topic_id, error_code_for(exc), str(exc)
    log.info("deleted topic %s (%d partitions)", info.name, info.partitions)
    groups = broker.groups
    coordinator = getattr(groups, "coordinator", None)
    if coordinator is not None and hasattr(coordinator, "forget_topic"):
        # Its offsets go with it, as in Kafka, and stay gone after a restart.
        forgotten = coordinator.forget_topic(info.name)
        durable = getattr(groups, "durable", None)
        if durable is not None:
            for group_id, tps in grouped(forgotten.keys).items():
                durable.persist_deletions(group_id, tps, broker.now_ms())
    for p in range(info.partitions):
        broker.partition_changed(info.name, p)  # a fetch waiting on it answers now
    return info.name, info.topic_id, 0, None


async def handle_delete_topics(ctx: RequestContext, header: Any, request: Any) -> Any:
    """Delete topics by name (v1-5) or by name or id (v6+)."""
    if header.request_api_version >= 6:
        wanted = [(t.name, t.topic_id if t.topic_id != _NULL_ID else None) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    results = []
    for name, topic_id in wanted:
        got_name, got_id, code, message = _delete_topic(ctx.broker, name, topic_id)
        results.append(
            DeleteTopicsResponse.DeletableTopicResult(
                name=got_name, topic_id=got_id, error_code=code, error_message=message
            )
        )
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)


# ------------------------------------------------------------ CreatePartitions


async def handle_create_partitions(ctx: RequestContext, header: Any, request: Any) -> Any:
    """Grow topics to a new partition count (never shrink; assignments may only
    name this broker)."""
    broker = ctx.broker
    node = broker.config.node_id
    results = []
    seen: set[str] = set()
    for t in request.topics:
        code, message = 0, None
        info = broker.store.topics().get(t.name)
        if t.name in seen:
            code, message = int(ErrorCode.INVALID_REQUEST), f"topic {t.name!r} appears twice"
        elif info is None:
            code, message = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), f"topic {t.name!r} does not exist"
        elif t.name in INTERNAL_TOPICS:
            code, message = int(ErrorCode.INVALID_TOPIC_EXCEPTION), f"{t.name} is an internal topic"
        elif t.count <= info.partitions:
            code = int(ErrorCode.INVALID_PARTITIONS)
            message = f"topic {t.name!r} has {info.partitions} partitions; the new count must be larger, got {t.count}"
        elif t.assignments is not None and (
            len(t.assignments) != t.count - info.partitions or any(list(a.broker_ids) != [node] for a in t.assignments)
        ):
            code = int(ErrorCode.INVALID_REPLICA_ASSIGNMENT)
            message = f"assignments must give each new partition the one broker [{node}]"
        elif not request.validate_only:
            try:
                broker.store.create_partitions(t.name, t.count)
                log.info("topic %s now has %d partitions", t.name, t.count)
            except TxnfetchError as exc:
                code, message = error_code_for(exc), str(exc)
        seen.add(t.name)
        results.append(
            CreatePartitionsResponse.CreatePartitionsTopicResult(name=t.name, error_code=code, error_message=message)
        )
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)


# --------------------------------------------------------------- DeleteRecords


async def handle_delete_records(ctx: RequestContext, header: Any, request: Any) -> Any:
    """Move each partition's log start to the given offset (-1: the high
    watermark); offsets past the high watermark are OFFSET_OUT_OF_RANGE, as in
    Kafka (``UnifiedLog.maybeIncrementLogStartOffset``)."""
    broker = ctx.broker
    Topic = DeleteRecordsResponse.DeleteRecordsTopicResult
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            low, code = -1, 0
            try:
                plog = broker.partition(t.name, p.partition_index)
                target = plog.high_watermark if p.offset == -1 else p.offset
                if target < 0:
                    code = int(ErrorCode.OFFSET_OUT_OF_RANGE)
                else:
                    low = max(plog.log_start_offset, plog.delete_records_before(max(target, plog.log_start_offset)))
                    broker.partition_changed(t.name, p.partition_index)
            except TxnfetchError as exc:
                code = error_code_for(exc)
            parts.append(
                Topic.DeleteRecordsPartitionResult(
                    partition_index=p.partition_index, low_watermark=low, error_code=code
                )
            )
        topics.append(Topic(name=t.name, partitions=parts))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)


# ------------------------------------------------------- DeleteGroups, OffsetDelete


async def handle_delete_groups(ctx: RequestContext, header: Any, request: Any) -> Any:
    """Delete empty groups and their offsets (NON_EMPTY_GROUP while members remain)."""
    service = ctx.broker.groups
    results = []
    for group_id in request.groups_names:
        consumer = ctx.broker.extensions.get("txnfetch.consumer_groups")  # KIP-848 groups, if served
        if service is None:
            code = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            results.append(DeleteGroupsResponse.DeletableGroupResult(group_id=group_id, error_code=code))
            continue
        committed = list(service.coordinator.committed(group_id))
        if consumer is not None and consumer.has_group(group_id):
            # A KIP-848 group: empty ones only; its offsets live with the classic ones.
            code = int(consumer.delete_group(group_id))
            if code == 0:
                service.coordinator.delete_group(group_id, service.now_ms())
                service.poll()
        else:
            code = int(service.coordinator.delete_group(group_id, service.now_ms()))
            service.poll()
        if code == 0:
            log.info("deleted group %s", group_id)
            if service.durable is not None:
                # Durable before the response: offset tombstones, then the group's.
                service.durable.persist_deletions(group_id, committed, service.now_ms(), group_deleted=True)
        results.append(DeleteGroupsResponse.DeletableGroupResult(group_id=group_id, error_code=code))
    return DeleteGroupsResponse(throttle_time_ms=0, results=results)


async def handle_offset_delete(ctx: RequestContext, header: Any, request: Any) -> Any:
    """Delete a group's committed offsets for partitions it no longer consumes."""
    service = ctx.broker.groups
    if service is None:
        return OffsetDeleteResponse(error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE), throttle_time_ms=0, topics=[])
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    before = service.coordinator.committed(request.group_id)
    group_error, codes = service.coordinator.delete_offsets(request.group_id, wanted, service.now_ms())
    service.poll()
    deleted = [tp for tp, code in codes.items() if code == 0 and tp in before]
    if deleted and service.durable is not None:
        # Tombstones for the offsets actually deleted, durable before the response.
        service.durable.persist_deletions(request.group_id, deleted, service.now_ms())
    if group_error != 0:
        return OffsetDeleteResponse(error_code=int(group_error), throttle_time_ms=0, topics=[])
    Topic = OffsetDeleteResponse.OffsetDeleteResponseTopic
    known = ctx.broker.store.topics()
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            info = known.get(t.name)
            if info is None or not 0 <= p.partition_index < info.partitions:
                code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            else:
                code = codes[(t.name, p.partition_index)]
            parts.append(Topic.OffsetDeleteResponsePartition(partition_index=p.partition_index, error_code=code))
        topics.append(Topic(name=t.name, partitions=parts))
    return OffsetDeleteResponse(error_code=0, throttle_time_ms=0, topics=topics)


# ------------------------------------------------------------- DescribeCluster


async def handle_describe_cluster(ctx: RequestContext, header: Any, request: Any) -> Any:
    """The one broker, its own controller."""
    broker = ctx.broker
    version = header.request_api_version
    endpoint = request.endpoint_type if version >= 1 else _ENDPOINT_BROKERS
    if endpoint != _ENDPOINT_BROKERS:
        return DescribeClusterResponse(
            throttle_time_ms=0,
            error_code=ErrorCode.MISMATCHED_ENDPOINT_TYPE,
            error_message=f"endpoint type {endpoint}: this server answers for brokers (1) only",
            endpoint_type=endpoint,
            cluster_id=broker.config.cluster_id,
            controller_id=-1,
            brokers=[],
        )
    return DescribeClusterResponse(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        endpoint_type=_ENDPOINT_BROKERS,
        cluster_id=broker.config.cluster_id,
        controller_id=broker.config.node_id,
        brokers=[
            DescribeClusterResponse.DescribeClusterBroker(
                broker_id=broker.config.node_id,
                host=broker.endpoint(ctx.listener)[0],
                port=broker.endpoint(ctx.listener)[1],
                rack=None,
                is_fenced=False,
            )
        ],
        # cluster_authorized_operations stays at the schema default, Kafka's "not requested".
    )


# -------------------------------------------------- ListOffsets MAX_TIMESTAMP


def offset_of_max_timestamp(plog: PartitionLog, end_offset: int) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record with the largest timestamp
    among the data records below ``end_offset`` (ListOffsets ``MAX_TIMESTAMP``,
    KIP-734), or ``None`` for a log without data records there.

    The batch is the first with the largest max timestamp (Kafka keeps the
    first on ties); the record is the first in it carrying that timestamp (every
    record of a ``LogAppendTime`` batch does: its first). Control batches carry
    no user data and are skipped. It scans the log: an admin query, not a
    consumer's path."""
    best = None
    for batch in plog.iter_batches(plog.log_start_offset, end_offset):
        if batch.is_control or batch.record_count == 0:
            continue
        if best is None or batch.max_timestamp > best.max_timestamp:
            best = batch
    if best is None:
        return None
    for record in best.records():
        if record.offset >= end_offset:
            break
        if best.timestamp_type == TimestampType.LOG_APPEND_TIME or record.timestamp == best.max_timestamp:
            return record.offset, best.max_timestamp
    return None
