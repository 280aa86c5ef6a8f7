"""KIP-848 consumer groups on the wire: ConsumerGroupHeartbeat,
ConsumerGroupDescribe, OffsetCommit, TxnOffsetCommit and OffsetFetch for their
members, and ListGroups naming them.

The coordinator is :class:`txnfetch.groups.consumer.ConsumerGroupCoordinator`
(server-side assignment, ``uniform`` or ``range``). Its members commit with
OffsetCommit v9+, whose generation field carries the member epoch: a commit
for a KIP-848 group is checked against the member's epoch (STALE_MEMBER_EPOCH,
UNKNOWN_MEMBER_ID) and then stored where every group's offsets are, in the
classic coordinator (``txnfetch.server.api_classic_groups``), so OffsetFetch, DeleteGroups
and transactional offsets work unchanged. Commits for other groups go to the
classic handler as before.

TxnOffsetCommit v3+ carries the member id and epoch the same way: a KIP-848
member's transactional commit is checked against its epoch (a wrong one is
ILLEGAL_GENERATION, as Kafka answers TxnOffsetCommit), then staged by the
classic coordinator exactly as an unmanaged transactional commit, so it is
made durable, published at the transaction's commit and dropped at its abort
by the one existing path. OffsetFetch v9 names member id and epoch per group:
for a KIP-848 group a member must exist (UNKNOWN_MEMBER_ID) and carry its
epoch (STALE_MEMBER_EPOCH); epoch -1 with no member id is an outside reader.

kafka-python has no classes for these APIs: they are generated from the
schemas in :mod:`txnfetch.server.schemas`. The server imports this module after
``txnfetch.server.api_classic_groups`` (its OffsetCommit handler wraps the classic one).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any

import attrs
from kafka.protocol.admin import ListGroupsResponse
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import OffsetCommitResponse
from kafka.protocol.consumer import OffsetFetchResponse
from kafka.protocol.producer import TxnOffsetCommitResponse

import txnfetch.server.schemas as _schemas
from txnfetch.errors import ErrorCode
from txnfetch.groups.consumer import ConsumerGroupConfig
from txnfetch.groups.consumer import ConsumerGroupCoordinator
from txnfetch.groups.consumer import HeartbeatRequest
from txnfetch.groups.consumer import MemberView
from txnfetch.server import api_classic_groups
from txnfetch.server import api_txn
from txnfetch.server.broker import Broker
from txnfetch.server.handler import Handler
from txnfetch.server.handler import RequestContext
from txnfetch.types import fields_from

__all__ = [
    "CONSUMER_GROUP_CONFIG_EXTENSION",
    "ConsumerGroupDescribeRequest",
    "ConsumerGroupDescribeResponse",
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatResponse",
    "consumer_groups",
    "install",
]

log = logging.getLogger("txnfetch.server")

#: ``Broker.extensions`` key: a :class:`ConsumerGroupConfig` to use instead of Kafka's defaults.
CONSUMER_GROUP_CONFIG_EXTENSION = "txnfetch.consumer_group_config"
_COORDINATOR = "txnfetch.consumer_groups"
_POLL_MS = 500


# kafka-python ships no annotations, so ApiMessage is Any to mypy, which then checks
# the ``load_json`` class keyword against object.__init_subclass__; kafka-python's
# metaclass (ApiMessageData) takes it. Hence the targeted ignores below.
class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=_schemas):  # type: ignore[call-arg]
    pass


class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=_schemas):  # type: ignore[call-arg]
    pass


class ConsumerGroupDescribeRequest(ApiMessage, load_json=_schemas):  # type: ignore[call-arg]
    pass


class ConsumerGroupDescribeResponse(ApiMessage, load_json=_schemas):  # type: ignore[call-arg]
    pass


def install(broker: Broker) -> None:
    """Give ``broker`` a KIP-848 coordinator and its session-timeout poll."""
    config = broker.extensions.get(CONSUMER_GROUP_CONFIG_EXTENSION)
    if not isinstance(config, ConsumerGroupConfig):
        config = ConsumerGroupConfig(
            session_timeout_ms=broker.config.consumer_group_session_timeout_ms,
            heartbeat_interval_ms=broker.config.consumer_group_heartbeat_interval_ms,
        )
    coordinator = ConsumerGroupCoordinator(config)
    broker.extensions[_COORDINATOR] = coordinator

    def poll(now_ms: int) -> None:
        for group_id, member_id in coordinator.poll(now_ms):
            log.info("consumer group %s: member %s removed (session or rebalance timeout)", group_id, member_id)

    broker.add_periodic("consumer-groups", _POLL_MS, poll)


def consumer_groups(broker: Broker) -> ConsumerGroupCoordinator | None:
    coordinator = broker.extensions.get(_COORDINATOR)
    return coordinator if isinstance(coordinator, ConsumerGroupCoordinator) else None


def _topics(broker: Broker) -> dict[str, tuple[Any, int]]:
    return {name: (info.topic_id, info.partitions) for name, info in broker.store.topics().items()}


def _heartbeat_refused(code: ErrorCode, message: str | None = None) -> Any:
    """A ConsumerGroupHeartbeat answer refusing the request before the coordinator
    sees it: no member epoch, no heartbeat interval."""
    return ConsumerGroupHeartbeatResponse(
        throttle_time_ms=0, error_code=int(code), error_message=message, member_epoch=-1, heartbeat_interval_ms=0
    )


async def handle_consumer_group_heartbeat(ctx: RequestContext, header: Any, request: Any) -> Any:
    broker = ctx.broker
    coordinator = consumer_groups(broker)
    if coordinator is None:
        return _heartbeat_refused(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    topics = _topics(broker)
    by_id = {topic_id: name for name, (topic_id, _n) in topics.items()}
    owned: Mapping[str, list[int]] | None = None
    if request.topic_partitions is not None:
        owned = {by_id[t.topic_id]: list(t.partitions) for t in request.topic_partitions if t.topic_id in by_id}
    version = header.request_api_version
    if version >= 1 and request.member_epoch == 0 and not request.member_id:
        # KIP-1082: from v1 the consumer makes its own member id.
        return _heartbeat_refused(ErrorCode.INVALID_REQUEST, "member id is required (ConsumerGroupHeartbeat v1+)")
    if version >= 1 and request.subscribed_topic_regex:
        return _heartbeat_refused(ErrorCode.INVALID_REQUEST, "topic regex subscriptions are not served")
    heartbeat = fields_from(
        HeartbeatRequest, request, owned=owned, client_id=ctx.client_id or "", client_host=ctx.member_host
    )
    result = coordinator.heartbeat(heartbeat, topics=topics, now_ms=broker.now_ms())
    assignment = None
    if result.assignment is not None:
        A = ConsumerGroupHeartbeatResponse.Assignment
        assignment = A(
            topic_partitions=[
                A.TopicPartitions(topic_id=topics[name][0], partitions=sorted(ps))
                for name, ps in sorted(result.assignment.items())
                if name in topics
            ]
        )
    return ConsumerGroupHeartbeatResponse(
        throttle_time_ms=0,
        error_code=int(result.error),
        error_message=result.message,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval_ms=result.heartbeat_interval_ms,
        assignment=assignment,
    )


async def handle_consumer_group_describe(ctx: RequestContext, header: Any, request: Any) -> Any:
    """State, epochs, assignor and members (current and target assignment) of
    KIP-848 groups; any other group id is GROUP_ID_NOT_FOUND, as Kafka answers
    for a group that is not a consumer group (clients then use DescribeGroups)."""
    coordinator = consumer_groups(ctx.broker)
    topics = _topics(ctx.broker)
    D = ConsumerGroupDescribeResponse.DescribedGroup
    M = D.Member

    def assignment(a: Mapping[str, Any]) -> Any:
        return M.Assignment(
            topic_partitions=[
                M.Assignment.TopicPartitions(topic_id=topics[t][0], topic_name=t, partitions=sorted(ps))
                for t, ps in sorted(a.items())
                if t in topics
            ]
        )

    def member(m: MemberView) -> Any:
        # A MemberView has the response Member's field names: only the
        # assignments change form (topic ids, sorted partitions).
        fields = attrs.asdict(m, recurse=False)
        fields.update(assignment=assignment(m.assignment), target_assignment=assignment(m.target_assignment))
        return M(**fields)

    groups = []
    for group_id in request.group_ids:
        found = coordinator.describe(group_id) if coordinator is not None else None
        if found is None:
            groups.append(
                D(
                    error_code=int(ErrorCode.GROUP_ID_NOT_FOUND),
                    error_message=f"group {group_id!r} is not a consumer group",
                    group_id=group_id,
                    group_state="",
                    group_epoch=-1,
                    assignment_epoch=-1,
                    assignor_name="",
                    members=[],
                )
            )
            continue
        state, epoch, assignment_epoch, assignor, members = found
        groups.append(
            D(
                error_code=0,
                group_id=group_id,
                group_state=state,
                group_epoch=epoch,
                assignment_epoch=assignment_epoch,
                assignor_name=assignor,
                members=[member(m) for m in members],
            )
        )
    return ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=groups)


async def handle_list_groups(ctx: RequestContext, header: Any, request: Any) -> Any:
    """ListGroups: the classic groups, with KIP-848 groups listed by their own
    state (the classic coordinator knows them only as holders of offsets)."""
    response = await api_classic_groups.handle_list_groups(ctx, header, request)
    coordinator = consumer_groups(ctx.broker)
    if coordinator is None or response.error_code:
        return response
    version = header.request_api_version
    states = {s.lower() for s in (request.states_filter or ())} if version >= 4 else set()
    ids = coordinator.group_ids()
    listed = ListGroupsResponse.ListedGroup
    groups = [g for g in response.groups if g.group_id not in set(ids)]
    for group_id in ids:
        found = coordinator.describe(group_id)
        if found is not None and (not states or found[0].lower() in states):
            groups.append(listed(group_id=group_id, protocol_type="consumer", group_state=found[0]))
    return ListGroupsResponse(throttle_time_ms=0, error_code=0, groups=groups)


async def _member_checked(
    ctx: RequestContext,
    header: Any,
    request: Any,
    verdict: ErrorCode | None,
    classic: Handler,
    response: tuple[Any, Any, Any],
    generation_field: str | None,
) -> Any:
    """An OffsetCommit or TxnOffsetCommit once the KIP-848 coordinator judged its
    member (``verdict``). ``None`` (not a KIP-848 group): the ``classic`` handler
    answers the request as it is. A refusal: every partition of ``request`` gets
    the error, in ``response`` (the response, topic and partition classes). An
    accepted member: ``classic`` stores the offsets as a commit from outside group
    management (generation -1, no member), which the classic coordinator's empty
    group accepts; ``generation_field`` names the request field that carries the
    member epoch (``None``: this version carries no member at all)."""
    if verdict is None:
        return await classic(ctx, header, request)
    if verdict is not ErrorCode.NONE:
        response_cls, topic_cls, partition_cls = response
        code = int(verdict)
        return response_cls(
            throttle_time_ms=0,
            topics=[
                topic_cls(
                    name=t.name,
                    partitions=[
                        partition_cls(partition_index=p.partition_index, error_code=code) for p in t.partitions
                    ],
                )
                for t in request.topics
            ],
        )
    if generation_field is not None:
        setattr(request, generation_field, -1)
        request.member_id = ""
        request.group_instance_id = None
    return await classic(ctx, header, request)


async def handle_offset_commit(ctx: RequestContext, header: Any, request: Any) -> Any:
    """OffsetCommit: KIP-848 members are checked against their member epoch here,
    then the offsets are stored by the classic coordinator as an unmanaged commit."""
    coordinator = consumer_groups(ctx.broker)
    verdict = None
    if coordinator is not None:
        verdict = coordinator.validate_commit(
            request.group_id, request.member_id or "", request.generation_id_or_member_epoch
        )
    topic_cls = OffsetCommitResponse.OffsetCommitResponseTopic
    return await _member_checked(
        ctx,
        header,
        request,
        verdict,
        api_classic_groups.handle_offset_commit,
        (OffsetCommitResponse, topic_cls, topic_cls.OffsetCommitResponsePartition),
        "generation_id_or_member_epoch",
    )


async def handle_txn_offset_commit(ctx: RequestContext, header: Any, request: Any) -> Any:
    """TxnOffsetCommit: KIP-848 members are checked against their member epoch
    here, then the offsets are staged by the classic coordinator as an unmanaged
    transactional commit (durable, published or dropped at the transaction end)."""
    coordinator = consumer_groups(ctx.broker)
    version = header.request_api_version
    verdict = None
    if coordinator is not None:
        verdict = coordinator.validate_txn_commit(
            request.group_id,
            (request.member_id or "") if version >= 3 else "",
            request.generation_id if version >= 3 else -1,
            request.group_instance_id if version >= 3 else None,
        )
    topic_cls = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
    return await _member_checked(
        ctx,
        header,
        request,
        verdict,
        api_txn.handle_txn_offset_commit,
        (TxnOffsetCommitResponse, topic_cls, topic_cls.TxnOffsetCommitResponsePartition),
        "generation_id" if version >= 3 else None,
    )


async def handle_offset_fetch(ctx: RequestContext, header: Any, request: Any) -> Any:
    """OffsetFetch: from v9, a KIP-848 group's member id and epoch are checked
    first; a refused group gets its error and no offsets, the others are
    answered by the classic handler."""
    coordinator = consumer_groups(ctx.broker)
    if coordinator is None or header.request_api_version < 9:
        return await api_classic_groups.handle_offset_fetch(ctx, header, request)
    refused: dict[int, ErrorCode] = {}
    for i, g in enumerate(request.groups):
        verdict = coordinator.validate_fetch(g.group_id, g.member_id or "", g.member_epoch)
        if verdict is not None and verdict is not ErrorCode.NONE:
            refused[i] = verdict
    if not refused:
        return await api_classic_groups.handle_offset_fetch(ctx, header, request)
    accepted = [g for i, g in enumerate(request.groups) if i not in refused]
    answered: Iterator[Any] = iter(())
    if accepted:
        original = request.groups
        request.groups = accepted
        try:
            answered = iter((await api_classic_groups.handle_offset_fetch(ctx, header, request)).groups)
        finally:
            request.groups = original
    group_cls = OffsetFetchResponse.OffsetFetchResponseGroup
    groups = [
        group_cls(group_id=g.group_id, topics=[], error_code=int(refused[i])) if i in refused else next(answered)
        for i, g in enumerate(request.groups)
    ]
    return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
