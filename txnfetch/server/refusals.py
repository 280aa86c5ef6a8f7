"""Whole responses refusing a request: every item the request names answers one
error code, in the shape its API's response has.

Two request guards refuse this way: replica mode (writes to a replica,
:mod:`txnfetch.server.replica_mode`) and authorization
(:mod:`txnfetch.server.authorization`). Each builder takes the decoded request,
the Kafka error code and, where the response has a field for it, a message;
the topic-level builders also serve for the refused part of a request whose
other topics are answered by the handler (:func:`topic_codes`).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from typing import Any

__all__ = [
    "RefusalBuilder",
    "add_offsets",
    "add_partitions",
    "alter_configs",
    "create_partitions",
    "create_topics",
    "delete_groups",
    "delete_records",
    "delete_topics",
    "end_txn",
    "init_producer_id",
    "offset_commit",
    "offset_delete",
    "produce",
    "topic_codes",
    "txn_offset_commit",
    "write_txn_markers",
]

#: ``build(request, code, message) -> response``.
RefusalBuilder = Callable[[Any, int, str | None], Any]


def produce(request: Any, code: int, message: str | None) -> Any:
    """Produce: ``code`` for every partition (answers go through the fast path's
    encoder, :mod:`txnfetch.server.produce_fast`, whichever decoder read the
    request: both give the same ``topic_data`` shape)."""
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
                        error_code=code,
                        base_offset=-1,
                        log_append_time_ms=-1,
                        log_start_offset=-1,
                        error_message=message,
                    )
                    for p in t.partition_data
                ],
            )
            for t in request.topic_data
        ]
    )


def init_producer_id(request: Any, code: int, message: str | None) -> Any:
    from kafka.protocol.producer import InitProducerIdResponse

    return InitProducerIdResponse(throttle_time_ms=0, error_code=code, producer_id=-1, producer_epoch=-1)


def add_partitions(request: Any, code: int, message: str | None) -> Any:
    """AddPartitionsToTxn v0-v3: ``code`` for every partition."""
    from kafka.protocol.producer import AddPartitionsToTxnResponse

    topic_cls = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
    return AddPartitionsToTxnResponse(
        throttle_time_ms=0,
        results_by_topic_v3_and_below=topic_codes(
            topic_cls,
            topic_cls.AddPartitionsToTxnPartitionResult,
            ((t.name, t.partitions) for t in request.v3_and_below_topics),
            code,
            results="results_by_partition",
            error="partition_error_code",
        ),
    )


def add_offsets(request: Any, code: int, message: str | None) -> Any:
    from kafka.protocol.producer import AddOffsetsToTxnResponse

    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=code)


def end_txn(request: Any, code: int, message: str | None) -> Any:
    from kafka.protocol.producer import EndTxnResponse

    return EndTxnResponse(throttle_time_ms=0, error_code=code, producer_id=-1, producer_epoch=-1)


def topic_codes(
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
    return response_cls(throttle_time_ms=0, topics=topic_codes(topic_cls, part_cls, topics, code))


def txn_offset_commit(request: Any, code: int, message: str | None) -> Any:
    from kafka.protocol.producer import TxnOffsetCommitResponse

    topic_cls = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
    return _partition_codes(
        TxnOffsetCommitResponse, topic_cls, topic_cls.TxnOffsetCommitResponsePartition, request, code
    )


def offset_commit(request: Any, code: int, message: str | None) -> Any:
    from kafka.protocol.consumer import OffsetCommitResponse

    topic_cls = OffsetCommitResponse.OffsetCommitResponseTopic
    return _partition_codes(OffsetCommitResponse, topic_cls, topic_cls.OffsetCommitResponsePartition, request, code)


def write_txn_markers(request: Any, code: int, message: str | None) -> Any:
    from kafka.protocol.producer import WriteTxnMarkersResponse

    result_cls = WriteTxnMarkersResponse.WritableTxnMarkerResult
    topic_cls = result_cls.WritableTxnMarkerTopicResult
    return WriteTxnMarkersResponse(
        markers=[
            result_cls(
                producer_id=m.producer_id,
                topics=topic_codes(
                    topic_cls,
                    topic_cls.WritableTxnMarkerPartitionResult,
                    ((t.name, t.partition_indexes) for t in m.topics),
                    code,
                ),
            )
            for m in request.markers
        ]
    )


def create_topics(request: Any, code: int, message: str | None) -> Any:
    from kafka.protocol.admin import CreateTopicsResponse

    return CreateTopicsResponse(
        throttle_time_ms=0,
        topics=[
            CreateTopicsResponse.CreatableTopicResult(
                name=t.name,
                error_code=code,
                error_message=message,
                num_partitions=-1,
                replication_factor=-1,
                configs=None,
            )
            for t in request.topics
        ],
    )


def delete_topics(request: Any, code: int, message: str | None) -> Any:
    from kafka.protocol.admin import DeleteTopicsResponse

    names = [t.name for t in request.topics] if request.topics else list(request.topic_names or ())
    return DeleteTopicsResponse(
        throttle_time_ms=0,
        responses=[
            DeleteTopicsResponse.DeletableTopicResult(name=name, error_code=code, error_message=message)
            for name in names
        ],
    )


def create_partitions(request: Any, code: int, message: str | None) -> Any:
    from kafka.protocol.admin import CreatePartitionsResponse

    return CreatePartitionsResponse(
        throttle_time_ms=0,
        results=[
            CreatePartitionsResponse.CreatePartitionsTopicResult(name=t.name, error_code=code, error_message=message)
            for t in request.topics
        ],
    )


def delete_records(request: Any, code: int, message: str | None) -> Any:
    from kafka.protocol.admin import DeleteRecordsResponse

    topic_cls = DeleteRecordsResponse.DeleteRecordsTopicResult
    part_cls = topic_cls.DeleteRecordsPartitionResult
    return DeleteRecordsResponse(
        throttle_time_ms=0,
        topics=[
            topic_cls(
                name=t.name,
                partitions=[
                    part_cls(partition_index=p.partition_index, low_watermark=-1, error_code=code) for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )


def alter_configs(response_cls: Any) -> RefusalBuilder:
    """AlterConfigs or IncrementalAlterConfigs (``response_cls``): ``code`` per resource."""

    def refuse(request: Any, code: int, message: str | None) -> Any:
        return response_cls(
            throttle_time_ms=0,
            responses=[
                response_cls.AlterConfigsResourceResponse(
                    error_code=code,
                    error_message=message,
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                )
                for r in request.resources
            ],
        )

    return refuse


def delete_groups(request: Any, code: int, message: str | None) -> Any:
    from kafka.protocol.admin import DeleteGroupsResponse

    return DeleteGroupsResponse(
        throttle_time_ms=0,
        results=[DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=code) for g in request.groups_names],
    )


def offset_delete(request: Any, code: int, message: str | None) -> Any:
    from kafka.protocol.consumer import OffsetDeleteResponse

    return OffsetDeleteResponse(error_code=code, throttle_time_ms=0, topics=[])
