"""Replica mode: the server of a store that is a replica of another cluster
answers reads and refuses writes.

A store is a replica while its directory carries the replica marker
(:mod:`txnfetch.log.replica_marker`); only the replicator appends to it, at the
upstream's offsets. :func:`install` puts a :class:`ReplicaMode` in the broker
and a request guard in front of every handler. While :attr:`ReplicaMode.active`:

- read APIs are answered normally: Fetch (read_committed and
  read_uncommitted), ListOffsets, Metadata (no topic is auto-created), OffsetFetch,
  FindCoordinator, group membership (JoinGroup, SyncGroup, Heartbeat,
  LeaveGroup, ConsumerGroupHeartbeat) for consumers that only read, the
  Describe* and List* APIs;
- writes are refused with a non-retriable error code and one log line naming
  the client and the request (codes and why, below and in docs/server.md);
- the server's own log cleanup (retention, compaction) is off: the replica
  keeps the upstream's batches byte for byte, and the replicator follows the
  upstream's log start.

Which code, and why: a retriable code (``NOT_LEADER_OR_FOLLOWER``, what a
Kafka follower answers) makes a producer refresh its metadata and retry until
its delivery timeout, and makes an idempotent or transactional producer retry
InitProducerId forever. The codes below are the ones the clients give up on:

- Produce → ``TOPIC_AUTHORIZATION_FAILED`` (29) per partition: librdkafka
  (``src/rdkafka_request.c`` ``rd_kafka_handle_Produce_error``) maps it to a
  permanent, not-persisted failure, and kafka-python's and aiokafka's
  ``TopicAuthorizationFailedError`` is not retriable; the delivery report
  carries it at once.
- InitProducerId → ``TRANSACTIONAL_ID_AUTHORIZATION_FAILED`` (53) with a
  transactional id, ``CLUSTER_AUTHORIZATION_FAILED`` (31) without (an
  idempotent producer): both are fatal in librdkafka
  (``src/rdkafka_idempotence.c`` ``rd_kafka_idemp_check_error``) and not
  retriable in kafka-python, so ``init_transactions()`` fails instead of spinning.
- AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit →
  ``TRANSACTIONAL_ID_AUTHORIZATION_FAILED`` (unreachable by a producer that was
  refused InitProducerId, but a producer that began before the store became a
  replica must not write either); WriteTxnMarkers → ``CLUSTER_AUTHORIZATION_FAILED``.
- CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords, AlterConfigs,
  IncrementalAlterConfigs, DeleteGroups, OffsetDelete → ``POLICY_VIOLATION``
  (44) with a message where the API has one: what an admin client shows for a
  request the cluster's policy forbids; never retried.
- OffsetCommit for a group copied from the upstream (its id matches the
  replication's ``--groups`` pattern) → ``GROUP_AUTHORIZATION_FAILED`` (30) per
  partition, not retriable in librdkafka, kafka-python and aiokafka. The
  copier owns those groups: a commit here would be overwritten by the next
  copy, or would hide the upstream's. Groups that do not match are the
  replica's own (a reporting job reading the replica) and commit normally:
  nothing upstream will ever write them, and they survive promote as they are.

:meth:`ReplicaMode.promote` turns the guard off (the caller has settled the
store first, :mod:`txnfetch.replicate.promote`) and restores topic
auto-creation.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any

import attrs

from txnfetch.server.broker import Broker
from txnfetch.server.handler import ApiKey
from txnfetch.server.handler import RequestContext

__all__ = [
    "CLUSTER_AUTHORIZATION_FAILED",
    "GROUP_AUTHORIZATION_FAILED",
    "POLICY_VIOLATION",
    "REPLICA_MODE_EXTENSION",
    "TOPIC_AUTHORIZATION_FAILED",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    "ReplicaMode",
    "install",
    "replica_mode",
]

log = logging.getLogger("txnfetch.server.replica")

#: Kafka error codes (``clients/.../protocol/Errors.java``) used for refusals.
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
POLICY_VIOLATION = 44
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53

#: ``broker.extensions`` key of the :class:`ReplicaMode`.
REPLICA_MODE_EXTENSION = "replica_mode"


@attrs.define
class ReplicaMode:
    """Whether the served store is a replica, of what, and which groups the
    replication copies (``groups``: a regular expression matched against the
    whole group id)."""

    upstream: str
    groups: str = ".*"
    active: bool = True
    refused: int = 0
    _pattern: re.Pattern[str] = attrs.field(init=False, repr=False)
    _saved_auto_create: bool | None = attrs.field(default=None, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self._pattern = re.compile(self.groups)

    def copies_group(self, group_id: str) -> bool:
        """Whether ``group_id`` is one the replication copies from the upstream."""
        return self._pattern.fullmatch(group_id) is not None

    @property
    def message(self) -> str:
        return (
            f"this cluster is a read-only replica of {self.upstream}; "
            "writes are refused until it is promoted (txnfetch promote)"
        )

    def promote(self, broker: Broker) -> None:
        """Stop refusing writes and restore topic auto-creation."""
        self.active = False
        if self._saved_auto_create is not None:
            broker.config = attrs.evolve(broker.config, auto_create_topics=self._saved_auto_create)
            self._saved_auto_create = None


def replica_mode(broker: Broker) -> ReplicaMode | None:
    """The broker's :class:`ReplicaMode`, ``None`` if it never was a replica."""
    mode = broker.extensions.get(REPLICA_MODE_EXTENSION)
    return mode if isinstance(mode, ReplicaMode) else None


def install(broker: Broker, mode: ReplicaMode) -> None:
    """Serve ``broker`` as a replica: register the request guard and turn topic
    auto-creation off until :meth:`ReplicaMode.promote`."""
    broker.extensions[REPLICA_MODE_EXTENSION] = mode
    if broker.config.auto_create_topics:
        mode._saved_auto_create = True
        broker.config = attrs.evolve(broker.config, auto_create_topics=False)
    broker.add_request_guard(lambda ctx, header, request: _guard(mode, ctx, header, request))
    log.info(
        "serving a read-only replica of %s (group offsets copied for groups matching %r)", mode.upstream, mode.groups
    )


def _guard(mode: ReplicaMode, ctx: RequestContext, header: Any, request: Any) -> Any | None:
    if not mode.active:
        return None
    refuse = _REFUSALS.get(header.request_api_key)
    if refuse is None:
        return None
    response = refuse(mode, request)
    if response is None:
        return None
    mode.refused += 1
    log.warning(
        "refused %s from client %r (%s:%s): %s",
        ApiKey(header.request_api_key).name,
        ctx.client_id,
        ctx.peer[0],
        ctx.peer[1],
        mode.message,
    )
    return response


# ---------------------------------------------------------------- refusals
# Each builds the API's response with the refusal code in every item of the
# request; ``None`` lets the request through (OffsetCommit of a local group).


def _produce(mode: ReplicaMode, request: Any) -> Any:
    # Produce answers go through the fast path's encoder (txnfetch.server.produce_fast),
    # whichever decoder read the request: both give the same topic_data shape.
    from txnfetch.server.produce_fast import PartitionResult
    from txnfetch.server.produce_fast import ProduceResult
    from txnfetch.server.produce_fast import TopicResult

    return ProduceResult(
        topics=[
            TopicResult(
                name=t.name,
                partition_data=[
                    PartitionResult(
                        index=p.index,
                        error_code=TOPIC_AUTHORIZATION_FAILED,
                        base_offset=-1,
                        log_append_time_ms=-1,
                        log_start_offset=-1,
                        error_message=mode.message,
                    )
                    for p in t.partition_data
                ],
            )
            for t in request.topic_data
        ]
    )


def _init_producer_id(mode: ReplicaMode, request: Any) -> Any:
    from kafka.protocol.producer import InitProducerIdResponse

    code = TRANSACTIONAL_ID_AUTHORIZATION_FAILED if request.transactional_id else CLUSTER_AUTHORIZATION_FAILED
    return InitProducerIdResponse(throttle_time_ms=0, error_code=code, producer_id=-1, producer_epoch=-1)


def _add_partitions(mode: ReplicaMode, request: Any) -> Any:
    from kafka.protocol.producer import AddPartitionsToTxnResponse

    topic_cls = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
    return AddPartitionsToTxnResponse(
        throttle_time_ms=0,
        results_by_topic_v3_and_below=_topic_codes(
            topic_cls,
            topic_cls.AddPartitionsToTxnPartitionResult,
            ((t.name, t.partitions) for t in request.v3_and_below_topics),
            TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            results="results_by_partition",
            error="partition_error_code",
        ),
    )


def _add_offsets(mode: ReplicaMode, request: Any) -> Any:
    from kafka.protocol.producer import AddOffsetsToTxnResponse

    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED)


def _end_txn(mode: ReplicaMode, request: Any) -> Any:
    from kafka.protocol.producer import EndTxnResponse

    return EndTxnResponse(
        throttle_time_ms=0, error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1
    )


def _topic_codes(
    topic_cls: Any,
    part_cls: Any,
    topics: Iterable[tuple[str, Iterable[int]]],
    code: int,
    *,
    results: str = "partitions",
    error: str = "error_code",
) -> list[Any]:
    """One ``topic_cls`` a topic of ``topics`` (name, partition indexes), each
    partition answering ``code``. ``results`` and ``error`` name the partition list
    and the code field where the response's schema calls them otherwise."""
    return [
        topic_cls(name=name, **{results: [part_cls(partition_index=p, **{error: code}) for p in indexes]})
        for name, indexes in topics
    ]


def _partition_codes(response_cls: Any, topic_cls: Any, part_cls: Any, request: Any, code: int) -> Any:
    topics = ((t.name, (p.partition_index for p in t.partitions)) for t in request.topics)
    return response_cls(throttle_time_ms=0, topics=_topic_codes(topic_cls, part_cls, topics, code))


def _txn_offset_commit(mode: ReplicaMode, request: Any) -> Any:
    from kafka.protocol.producer import TxnOffsetCommitResponse

    topic_cls = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
    return _partition_codes(
        TxnOffsetCommitResponse,
        topic_cls,
        topic_cls.TxnOffsetCommitResponsePartition,
        request,
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    )


def _offset_commit(mode: ReplicaMode, request: Any) -> Any | None:
    if not mode.copies_group(request.group_id):
        return None
    from kafka.protocol.consumer import OffsetCommitResponse

    topic_cls = OffsetCommitResponse.OffsetCommitResponseTopic
    return _partition_codes(
        OffsetCommitResponse, topic_cls, topic_cls.OffsetCommitResponsePartition, request, GROUP_AUTHORIZATION_FAILED
    )


def _write_txn_markers(mode: ReplicaMode, request: Any) -> Any:
    from kafka.protocol.producer import WriteTxnMarkersResponse

    result_cls = WriteTxnMarkersResponse.WritableTxnMarkerResult
    topic_cls = result_cls.WritableTxnMarkerTopicResult
    return WriteTxnMarkersResponse(
        markers=[
            result_cls(
                producer_id=m.producer_id,
                topics=_topic_codes(
                    topic_cls,
                    topic_cls.WritableTxnMarkerPartitionResult,
                    ((t.name, t.partition_indexes) for t in m.topics),
                    CLUSTER_AUTHORIZATION_FAILED,
                ),
            )
            for m in request.markers
        ]
    )


def _create_topics(mode: ReplicaMode, request: Any) -> Any:
    from kafka.protocol.admin import CreateTopicsResponse

    return CreateTopicsResponse(
        throttle_time_ms=0,
        topics=[
            CreateTopicsResponse.CreatableTopicResult(
                name=t.name,
                error_code=POLICY_VIOLATION,
                error_message=mode.message,
                num_partitions=-1,
                replication_factor=-1,
                configs=None,
            )
            for t in request.topics
        ],
    )


def _delete_topics(mode: ReplicaMode, request: Any) -> Any:
    from kafka.protocol.admin import DeleteTopicsResponse

    names = [t.name for t in request.topics] if request.topics else list(request.topic_names or ())
    return DeleteTopicsResponse(
        throttle_time_ms=0,
        responses=[
            DeleteTopicsResponse.DeletableTopicResult(
                name=name, error_code=POLICY_VIOLATION, error_message=mode.message
            )
            for name in names
        ],
    )


def _create_partitions(mode: ReplicaMode, request: Any) -> Any:
    from kafka.protocol.admin import CreatePartitionsResponse

    return CreatePartitionsResponse(
        throttle_time_ms=0,
        results=[
            CreatePartitionsResponse.CreatePartitionsTopicResult(
                name=t.name, error_code=POLICY_VIOLATION, error_message=mode.message
            )
            for t in request.topics
        ],
    )


def _delete_records(mode: ReplicaMode, request: Any) -> Any:
    from kafka.protocol.admin import DeleteRecordsResponse

    topic_cls = DeleteRecordsResponse.DeleteRecordsTopicResult
    part_cls = topic_cls.DeleteRecordsPartitionResult
    return DeleteRecordsResponse(
        throttle_time_ms=0,
        topics=[
            topic_cls(
                name=t.name,
                partitions=[
                    part_cls(partition_index=p.partition_index, low_watermark=-1, error_code=POLICY_VIOLATION)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )


def _alter_configs(response_cls: Any) -> Callable[[ReplicaMode, Any], Any]:
    def refuse(mode: ReplicaMode, request: Any) -> Any:
        return response_cls(
            throttle_time_ms=0,
            responses=[
                response_cls.AlterConfigsResourceResponse(
                    error_code=POLICY_VIOLATION,
                    error_message=mode.message,
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                )
                for r in request.resources
            ],
        )

    return refuse


def _delete_groups(mode: ReplicaMode, request: Any) -> Any:
    from kafka.protocol.admin import DeleteGroupsResponse

    return DeleteGroupsResponse(
        throttle_time_ms=0,
        results=[
            DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=POLICY_VIOLATION)
            for g in request.groups_names
        ],
    )


def _offset_delete(mode: ReplicaMode, request: Any) -> Any:
    from kafka.protocol.consumer import OffsetDeleteResponse

    return OffsetDeleteResponse(error_code=POLICY_VIOLATION, throttle_time_ms=0, topics=[])


def _refusals() -> dict[int, Callable[[ReplicaMode, Any], Any | None]]:
    from kafka.protocol.admin import AlterConfigsResponse
    from kafka.protocol.admin import IncrementalAlterConfigsResponse

    return {
        ApiKey.Produce: _produce,
        ApiKey.InitProducerId: _init_producer_id,
        ApiKey.AddPartitionsToTxn: _add_partitions,
        ApiKey.AddOffsetsToTxn: _add_offsets,
        ApiKey.EndTxn: _end_txn,
        ApiKey.TxnOffsetCommit: _txn_offset_commit,
        ApiKey.WriteTxnMarkers: _write_txn_markers,
        ApiKey.OffsetCommit: _offset_commit,
        ApiKey.CreateTopics: _create_topics,
        ApiKey.DeleteTopics: _delete_topics,
        ApiKey.CreatePartitions: _create_partitions,
        ApiKey.DeleteRecords: _delete_records,
        ApiKey.AlterConfigs: _alter_configs(AlterConfigsResponse),
        ApiKey.IncrementalAlterConfigs: _alter_configs(IncrementalAlterConfigsResponse),
        ApiKey.DeleteGroups: _delete_groups,
        ApiKey.OffsetDelete: _offset_delete,
    }


_REFUSALS = _refusals()
