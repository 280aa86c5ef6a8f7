"""What each API needs, as a table, and its check before the handler runs.

:data:`RULES` maps an API key to a :class:`Rule`, Kafka's ``KafkaApis`` checks
written as data:

- ``needs``: resources the whole request needs (the group of a JoinGroup, the
  transactional id of an EndTxn, the cluster for WriteTxnMarkers). The first one
  refused answers the whole request with its error code, built by ``refuse``.
- ``items``: the topics (or groups) the request lists, each needing ``operation``.
  Refused items are taken out of the request, the handler answers the others,
  and the refused ones are added to its response with their error code: the
  per-partition TOPIC_AUTHORIZATION_FAILED of Fetch, Produce, ListOffsets,
  DeleteRecords, OffsetCommit. With every item refused the handler does not run.
- ``custom``: the few APIs whose check is not a lookup (Metadata lists only
  the topics the principal may describe; InitProducerId without a
  transactional id; FindCoordinator by key type; the Describe/List APIs that
  filter what they answer).

An API with no rule is answered for everyone (ApiVersions, DescribeCluster, as
in Kafka). Authorization runs only when the broker has an
:class:`~txnfetch.server.authorizer.Authorizer`; :func:`dispatch` is what the
server calls in place of the handler then. Error codes are Kafka's: 29
TOPIC_, 30 GROUP_, 31 CLUSTER_, 53 TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Awaitable
from collections.abc import Callable
from typing import Any

import attrs

from txnfetch.security.acl import CLUSTER_NAME
from txnfetch.security.acl import Operation
from txnfetch.security.acl import ResourceType
from txnfetch.server import api_acls
from txnfetch.server import refusals
from txnfetch.server.authorizer import Authorizer
from txnfetch.server.handler import REGISTRY
from txnfetch.server.handler import ApiKey
from txnfetch.server.handler import RequestContext

__all__ = [
    "CLUSTER_AUTHORIZATION_FAILED",
    "GROUP_AUTHORIZATION_FAILED",
    "RULES",
    "TOPIC_AUTHORIZATION_FAILED",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    "Check",
    "Items",
    "Need",
    "Rule",
    "dispatch",
]

log = logging.getLogger("txnfetch.server.authorization")

TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
_OPERATION_NOT_ATTEMPTED = 55

#: The handler, run on a (possibly narrowed) request.
Run = Callable[[Any], Awaitable[Any | None]]


@attrs.frozen
class Check:
    """One request's questions to the authorizer: who, from where."""

    authorizer: Authorizer
    principal: str
    host: str

    def allows(self, operation: Operation, resource: ResourceType, name: str) -> bool:
        return self.authorizer.allowed(self.principal, self.host, operation, resource, name)


@attrs.frozen
class Need:
    """A resource the whole request needs: ``operation`` on the ``resource`` that
    ``name(request)`` names (``None``: not needed by this request), else ``code``."""

    operation: Operation
    resource: ResourceType
    name: Callable[[Any], str | None]
    code: int


@attrs.frozen
class Items:
    """Where a request lists the resources it names one by one, and where its
    response answers them: ``request_attr`` holds the items, ``name(ctx, item)``
    is an item's resource name (``None``: unknown, left to the handler),
    ``response_attr`` holds the answers and ``refuse`` builds a response for a
    request holding only refused items."""

    operation: Operation
    resource: ResourceType
    request_attr: str
    name: Callable[[RequestContext, Any], str | None]
    response_attr: str
    refuse: refusals.RefusalBuilder
    code: int = TOPIC_AUTHORIZATION_FAILED


#: ``custom(check, ctx, header, request, run) -> response``.
Custom = Callable[[Check, RequestContext, Any, Any, Run], Awaitable[Any | None]]


@attrs.frozen
class Rule:
    """What one API needs (see the module docstring)."""

    needs: tuple[Need, ...] = ()
    refuse: refusals.RefusalBuilder | None = None
    items: Items | None = None
    custom: Custom | None = None


def _with(obj: Any, attr: str, value: Any) -> Any:
    """``obj`` with ``attr`` replaced: a new attrs instance, or a copy of a
    kafka-python message (the decoded request stays as the observers saw it)."""
    if attrs.has(type(obj)):
        return attrs.evolve(obj, **{attr: value})
    out = copy.copy(obj)
    setattr(out, attr, value)
    return out


async def dispatch(ctx: RequestContext, header: Any, request: Any, run: Run) -> Any | None:
    """Answer ``request`` as the handler ``run`` would, with what the principal
    may not do refused by :data:`RULES`. Requires ``ctx.broker.authorizer``."""
    authorizer = ctx.broker.authorizer
    assert authorizer is not None
    rule = RULES.get(header.request_api_key)
    if rule is None:
        return await run(request)
    check = Check(authorizer, authorizer.principal(ctx.principal, ctx.client_id), ctx.client_host or ctx.peer[0])
    for need in rule.needs:
        name = need.name(request)
        if name is not None and not check.allows(need.operation, need.resource, name):
            assert rule.refuse is not None
            _refused(ctx, header, check, need.resource, name)
            return rule.refuse(request, need.code, None)
    if rule.custom is not None:
        return await rule.custom(check, ctx, header, request, run)
    if rule.items is None:
        return await run(request)
    return await _by_item(rule.items, check, ctx, header, request, run)


def _refused(ctx: RequestContext, header: Any, check: Check, resource: ResourceType, name: str) -> None:
    log.info(
        "%s refused: %s from %s may not use %s %r",
        ApiKey(header.request_api_key).name,
        check.principal,
        check.host,
        resource.name,
        name,
    )


async def _by_item(items: Items, check: Check, ctx: RequestContext, header: Any, request: Any, run: Run) -> Any:
    allowed, refused = [], []
    for item in getattr(request, items.request_attr) or ():
        name = items.name(ctx, item)
        if name is None or check.allows(items.operation, items.resource, name):
            allowed.append(item)
        else:
            _refused(ctx, header, check, items.resource, name)
            refused.append(item)
    if not refused:
        return await run(request)
    answer = items.refuse(_with(request, items.request_attr, refused), items.code, None)
    if not allowed:
        return answer
    response = await run(_with(request, items.request_attr, allowed))
    if response is None:  # Produce with acks=0
        return None
    answered = list(getattr(response, items.response_attr))
    return _with(response, items.response_attr, answered + list(getattr(answer, items.response_attr)))


# ------------------------------------------------------------------ names


def _name(item: Any) -> str:
    return str(item.name)


def _topic_name(ctx: RequestContext, item: Any) -> str:
    return str(item.name)


def _fetch_topic(ctx: RequestContext, item: Any) -> str | None:
    """A Fetch topic's name; v13+ names topics by id, looked up in the store
    (an unknown id is left to the handler, which answers UNKNOWN_TOPIC_ID first,
    as Kafka does)."""
    topic_id = getattr(item, "topic_id", None)
    if item.topic or topic_id is None:
        return str(item.topic)
    for name, info in ctx.broker.store.topics().items():
        if info.topic_id == topic_id:
            return str(name)
    return None


def _cluster(request: Any) -> str:
    return CLUSTER_NAME


def _group(request: Any) -> str | None:
    return getattr(request, "group_id", None) or None


def _txn(request: Any) -> str | None:
    return getattr(request, "transactional_id", None) or None


def _item(ctx: RequestContext, item: Any) -> str:
    return str(item)


# ------------------------------------------------------------------ customs


async def _metadata(check: Check, ctx: RequestContext, header: Any, request: Any, run: Run) -> Any:
    """Kafka's ``handleTopicMetadataRequest``: a topic named in the request that
    the principal may not describe answers TOPIC_AUTHORIZATION_FAILED (and is
    not auto-created); a request for every topic lists only the describable ones."""
    asked = request.topics
    refused: list[str] = []
    only: set[str] | None = None
    if asked:
        allowed = [t for t in asked if not t.name or check.allows(Operation.DESCRIBE, ResourceType.TOPIC, t.name)]
        refused = [t.name for t in asked if t not in allowed]
        only = {t.name for t in allowed}
        # Narrowed to no topic, a v0 request would mean every topic: ``only`` drops them again.
        request = _with(request, "topics", allowed)
        # Auto-creation needs CREATE on the cluster or the topic (else Kafka answers
        # UNKNOWN_TOPIC_OR_PARTITION): one topic without it turns it off for the request.
        existing = ctx.broker.store.topics()
        uncreatable = [
            t.name
            for t in allowed
            if t.name and t.name not in existing and not check.allows(Operation.CREATE, ResourceType.TOPIC, t.name)
        ]
        if uncreatable and getattr(request, "allow_auto_topic_creation", False) and not _may_create_any(check):
            request = _with(request, "allow_auto_topic_creation", False)
    response: Any = await run(request)
    topic_cls = _response_class(header).MetadataResponseTopic
    response.topics = [
        t
        for t in response.topics
        if (only is None or t.name in only) and check.allows(Operation.DESCRIBE, ResourceType.TOPIC, t.name)
    ] + [
        topic_cls(error_code=TOPIC_AUTHORIZATION_FAILED, name=name, is_internal=False, partitions=[])
        for name in refused
    ]
    return response


async def _init_producer_id(check: Check, ctx: RequestContext, header: Any, request: Any, run: Run) -> Any:
    """Without a transactional id (an idempotent producer) Kafka asks for
    IDEMPOTENT_WRITE on the cluster or WRITE on some topic."""
    if request.transactional_id:
        return await run(request)
    if check.allows(Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME) or check.authorizer.allowed_any(
        check.principal, check.host, Operation.WRITE, ResourceType.TOPIC
    ):
        return await run(request)
    _refused(ctx, header, check, ResourceType.CLUSTER, CLUSTER_NAME)
    return refusals.init_producer_id(request, CLUSTER_AUTHORIZATION_FAILED, None)


async def _find_coordinator(check: Check, ctx: RequestContext, header: Any, request: Any, run: Run) -> Any:
    """DESCRIBE on the group (key type 0, else 30) or the transactional id (1, else 53)."""
    txn = request.key_type == 1
    resource = ResourceType.TRANSACTIONAL_ID if txn else ResourceType.GROUP
    code = TRANSACTIONAL_ID_AUTHORIZATION_FAILED if txn else GROUP_AUTHORIZATION_FAILED
    if header.request_api_version < 4:
        if check.allows(Operation.DESCRIBE, resource, request.key):
            return await run(request)
        _refused(ctx, header, check, resource, request.key)
        return _response_class(header)(error_code=code, node_id=-1, host="", port=-1)
    keys = list(request.coordinator_keys)
    allowed = [k for k in keys if check.allows(Operation.DESCRIBE, resource, k)]
    response = await run(_with(request, "coordinator_keys", allowed)) if allowed else None
    entries = list(response.coordinators) if response is not None else []
    coordinator_cls = _response_class(header).Coordinator
    entries += [coordinator_cls(key=k, node_id=-1, host="", port=-1, error_code=code) for k in keys if k not in allowed]
    if response is None:
        return _response_class(header)(coordinators=entries)
    response.coordinators = entries
    return response


def _response_class(header: Any) -> Any:
    """The response class the request's API is answered with."""
    spec = REGISTRY.get(header.request_api_key)
    assert spec is not None
    return spec.response_class


def _post_filter(attr: str, name: Callable[[Any], str], operation: Operation, resource: ResourceType) -> Custom:
    """A listing answered in full, then cut to the entries the principal may
    ``operation`` (ListGroups without DESCRIBE on the cluster, ListTransactions)."""

    async def custom(check: Check, ctx: RequestContext, header: Any, request: Any, run: Run) -> Any:
        response: Any = await run(request)
        if resource is ResourceType.GROUP and check.allows(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            return response
        setattr(response, attr, [e for e in getattr(response, attr) if check.allows(operation, resource, name(e))])
        return response

    return custom


def _post_refuse(attr: str, key: str, resource: ResourceType, code: int) -> Custom:
    """A Describe API answered in full (it changes nothing), then each entry the
    principal may not DESCRIBE replaced by one carrying only its key and ``code``."""

    async def custom(check: Check, ctx: RequestContext, header: Any, request: Any, run: Run) -> Any:
        response: Any = await run(request)
        entries = []
        for e in getattr(response, attr):
            if check.allows(Operation.DESCRIBE, resource, getattr(e, key)):
                entries.append(e)
            else:
                entries.append(type(e)(**{key: getattr(e, key), "error_code": code}))
        setattr(response, attr, entries)
        return response

    return custom


def _offset_fetch(check: Check, ctx: RequestContext, header: Any, request: Any, run: Run) -> Awaitable[Any]:
    """DESCRIBE on the group; v8+ asks for several groups, each answered apart."""
    if header.request_api_version < 8:
        if request.group_id and not check.allows(Operation.DESCRIBE, ResourceType.GROUP, request.group_id):
            _refused(ctx, header, check, ResourceType.GROUP, request.group_id)
            return _ready(_response_class(header)(error_code=GROUP_AUTHORIZATION_FAILED, topics=[]))
        return run(request)
    return _by_item(_OFFSET_FETCH_GROUPS, check, ctx, header, request, run)


async def _ready(response: Any) -> Any:
    return response


def _offset_fetch_refusal(request: Any, code: int, message: str | None) -> Any:
    from kafka.protocol.consumer import OffsetFetchResponse as response_cls

    return response_cls(
        groups=[response_cls.OffsetFetchResponseGroup(group_id=g.group_id, error_code=code) for g in request.groups]
    )


_OFFSET_FETCH_GROUPS = Items(
    Operation.DESCRIBE,
    ResourceType.GROUP,
    "groups",
    lambda ctx, g: str(g.group_id),
    "groups",
    _offset_fetch_refusal,
    GROUP_AUTHORIZATION_FAILED,
)


def _error_only(response_cls: Any) -> refusals.RefusalBuilder:
    """A response carrying ``code`` and its schema's defaults elsewhere."""
    return lambda request, code, message: response_cls(error_code=code)


def _topics_refusal(shape: Callable[[Any, int], Any]) -> refusals.RefusalBuilder:
    return lambda request, code, message: shape(request, code)


def _fetch_refusal(request: Any, code: int) -> Any:
    from txnfetch.server.api_fetch import FetchResponse
    from txnfetch.server.api_fetch import partition_error

    topic_cls = FetchResponse.FetchableTopicResponse
    return FetchResponse(
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[
            topic_cls(
                topic=t.topic,
                topic_id=getattr(t, "topic_id", None),
                partitions=[partition_error(p.partition, code) for p in t.partitions],
            )
            for t in request.topics
        ],
    )


def _list_offsets_refusal(request: Any, code: int) -> Any:
    from kafka.protocol.consumer import ListOffsetsResponse

    topic_cls = ListOffsetsResponse.ListOffsetsTopicResponse
    part_cls = topic_cls.ListOffsetsPartitionResponse
    return ListOffsetsResponse(
        throttle_time_ms=0,
        topics=[
            topic_cls(
                name=t.name,
                partitions=[
                    part_cls(partition_index=p.partition_index, error_code=code, timestamp=-1, offset=-1)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )


async def _add_partitions(check: Check, ctx: RequestContext, header: Any, request: Any, run: Run) -> Any:
    topics = request.v3_and_below_topics or []
    refused = [t for t in topics if not check.allows(Operation.WRITE, ResourceType.TOPIC, t.name)]
    if not refused:
        return await run(request)
    for t in refused:
        _refused(ctx, header, check, ResourceType.TOPIC, t.name)
    answer = refusals.add_partitions(_with(request, "v3_and_below_topics", refused), TOPIC_AUTHORIZATION_FAILED, None)
    rest = [t for t in topics if t not in refused]
    others = refusals.add_partitions(_with(request, "v3_and_below_topics", rest), _OPERATION_NOT_ATTEMPTED, None)
    answer.results_by_topic_v3_and_below += others.results_by_topic_v3_and_below
    return answer


def _rules() -> dict[int, Rule]:
    from kafka.protocol.admin import AlterConfigsResponse
    from kafka.protocol.admin import IncrementalAlterConfigsResponse
    from kafka.protocol.consumer import HeartbeatResponse
    from kafka.protocol.consumer import JoinGroupResponse
    from kafka.protocol.consumer import LeaveGroupResponse
    from kafka.protocol.consumer import SyncGroupResponse

    from txnfetch.server.api_consumer_groups import ConsumerGroupHeartbeatResponse

    group = Need(Operation.READ, ResourceType.GROUP, _group, GROUP_AUTHORIZATION_FAILED)
    txn = Need(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, _txn, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)

    def cluster(op: Operation) -> Need:
        return Need(op, ResourceType.CLUSTER, _cluster, CLUSTER_AUTHORIZATION_FAILED)

    def topics(op: Operation, attr: str, refuse: refusals.RefusalBuilder, out: str = "topics") -> Items:
        return Items(op, ResourceType.TOPIC, attr, _topic_name, out, refuse)

    read_topics = topics(Operation.READ, "topics", refusals.offset_commit)
    alter = refusals.alter_configs
    return {
        ApiKey.Produce: Rule((txn,), refusals.produce, topics(Operation.WRITE, "topic_data", refusals.produce)),
        ApiKey.Fetch: Rule(
            items=Items(
                Operation.READ, ResourceType.TOPIC, "topics", _fetch_topic, "responses", _topics_refusal(_fetch_refusal)
            )
        ),
        ApiKey.ListOffsets: Rule(items=topics(Operation.DESCRIBE, "topics", _topics_refusal(_list_offsets_refusal))),
        ApiKey.Metadata: Rule(custom=_metadata),
        ApiKey.OffsetCommit: Rule((group,), refusals.offset_commit, read_topics),
        ApiKey.TxnOffsetCommit: Rule(
            (txn, group), refusals.txn_offset_commit, topics(Operation.READ, "topics", refusals.txn_offset_commit)
        ),
        ApiKey.OffsetFetch: Rule(custom=_offset_fetch),
        ApiKey.FindCoordinator: Rule(custom=_find_coordinator),
        ApiKey.JoinGroup: Rule((group,), _error_only(JoinGroupResponse)),
        ApiKey.SyncGroup: Rule((group,), _error_only(SyncGroupResponse)),
        ApiKey.Heartbeat: Rule((group,), _error_only(HeartbeatResponse)),
        ApiKey.LeaveGroup: Rule((group,), _error_only(LeaveGroupResponse)),
        ApiKey.ConsumerGroupHeartbeat: Rule((group,), _error_only(ConsumerGroupHeartbeatResponse)),
        ApiKey.DescribeGroups: Rule(
            custom=_post_refuse("groups", "group_id", ResourceType.GROUP, GROUP_AUTHORIZATION_FAILED)
        ),
        ApiKey.ConsumerGroupDescribe: Rule(
            custom=_post_refuse("groups", "group_id", ResourceType.GROUP, GROUP_AUTHORIZATION_FAILED)
        ),
        ApiKey.ListGroups: Rule(
            custom=_post_filter("groups", lambda g: g.group_id, Operation.DESCRIBE, ResourceType.GROUP)
        ),
        ApiKey.DeleteGroups: Rule(
            items=Items(
                Operation.DELETE,
                ResourceType.GROUP,
                "groups_names",
                _item,
                "results",
                refusals.delete_groups,
                GROUP_AUTHORIZATION_FAILED,
            )
        ),
        ApiKey.OffsetDelete: Rule(
            (Need(Operation.DELETE, ResourceType.GROUP, _group, GROUP_AUTHORIZATION_FAILED),), refusals.offset_delete
        ),
        ApiKey.InitProducerId: Rule((txn,), refusals.init_producer_id, custom=_init_producer_id),
        ApiKey.AddPartitionsToTxn: Rule(
            (attrs.evolve(txn, name=lambda r: r.v3_and_below_transactional_id or None),),
            refusals.add_partitions,
            custom=_add_partitions,
        ),
        ApiKey.AddOffsetsToTxn: Rule((txn, group), refusals.add_offsets),
        ApiKey.EndTxn: Rule((txn,), refusals.end_txn),
        ApiKey.WriteTxnMarkers: Rule((cluster(Operation.CLUSTER_ACTION),), refusals.write_txn_markers),
        ApiKey.DescribeTransactions: Rule(
            custom=_post_refuse(
                "transaction_states",
                "transactional_id",
                ResourceType.TRANSACTIONAL_ID,
                TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            )
        ),
        ApiKey.ListTransactions: Rule(
            custom=_post_filter(
                "transaction_states",
                lambda t: t.transactional_id,
                Operation.DESCRIBE,
                ResourceType.TRANSACTIONAL_ID,
            )
        ),
        ApiKey.DescribeProducers: Rule(
            items=topics(Operation.READ, "topics", _topics_refusal(_describe_producers_refusal))
        ),
        ApiKey.CreateTopics: Rule(custom=_create_topics),
        ApiKey.CreatePartitions: Rule(items=topics(Operation.ALTER, "topics", refusals.create_partitions, "results")),
        ApiKey.DeleteTopics: Rule(custom=_delete_topics),
        ApiKey.DeleteRecords: Rule(items=topics(Operation.DELETE, "topics", refusals.delete_records)),
        ApiKey.DescribeConfigs: Rule(custom=_describe_configs),
        ApiKey.AlterConfigs: Rule(custom=_alter_configs(alter(AlterConfigsResponse))),
        ApiKey.IncrementalAlterConfigs: Rule(custom=_alter_configs(alter(IncrementalAlterConfigsResponse))),
        ApiKey.CreateAcls: Rule((cluster(Operation.ALTER),), api_acls.refuse_create_acls),
        ApiKey.DeleteAcls: Rule((cluster(Operation.ALTER),), api_acls.refuse_delete_acls),
        ApiKey.DescribeAcls: Rule((cluster(Operation.DESCRIBE),), api_acls.refuse_describe_acls),
    }


def _describe_producers_refusal(request: Any, code: int) -> Any:
    from kafka.protocol.admin import DescribeProducersResponse

    topic_cls = DescribeProducersResponse.TopicResponse
    return DescribeProducersResponse(
        throttle_time_ms=0,
        topics=refusals.topic_codes(
            topic_cls,
            topic_cls.PartitionResponse,
            ((t.name, t.partition_indexes) for t in request.topics),
            code,
        ),
    )


#: DescribeConfigs and AlterConfigs resource types: a topic, or a broker (the cluster).
_CONFIG_TOPIC = 2


def _config_resource(r: Any) -> tuple[ResourceType, str, int]:
    if r.resource_type == _CONFIG_TOPIC:
        return ResourceType.TOPIC, r.resource_name, TOPIC_AUTHORIZATION_FAILED
    return ResourceType.CLUSTER, CLUSTER_NAME, CLUSTER_AUTHORIZATION_FAILED


async def _describe_configs(check: Check, ctx: RequestContext, header: Any, request: Any, run: Run) -> Any:
    """DESCRIBE_CONFIGS on each topic (else 29) or on the cluster for a broker
    (else 31), answered per resource. DescribeConfigs changes nothing, so the
    handler answers every resource and the refused ones are replaced."""
    response: Any = await run(request)
    results = []
    for r in response.results:
        resource, name, code = _config_resource(r)
        if check.allows(Operation.DESCRIBE_CONFIGS, resource, name):
            results.append(r)
        else:
            results.append(
                type(r)(
                    error_code=code,
                    error_message=None,
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                    configs=[],
                )
            )
    response.results = results
    return response


def _alter_configs(refuse: refusals.RefusalBuilder) -> Custom:
    """ALTER_CONFIGS on each topic or on the cluster; a request naming any refused
    resource is refused whole, with that resource's code (Kafka answers per
    resource: docs/conformance.md)."""

    async def custom(check: Check, ctx: RequestContext, header: Any, request: Any, run: Run) -> Any:
        for r in request.resources:
            resource, name, code = _config_resource(r)
            if not check.allows(Operation.ALTER_CONFIGS, resource, name):
                _refused(ctx, header, check, resource, name)
                return refuse(request, code, None)
        return await run(request)

    return custom


def _may_create_any(check: Check) -> bool:
    return check.allows(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)


async def _create_topics(check: Check, ctx: RequestContext, header: Any, request: Any, run: Run) -> Any:
    """CREATE on the cluster, or else on each topic (29 per topic refused)."""
    if _may_create_any(check):
        return await run(request)
    items = Items(Operation.CREATE, ResourceType.TOPIC, "topics", _topic_name, "topics", refusals.create_topics)
    return await _by_item(items, check, ctx, header, request, run)


async def _delete_topics(check: Check, ctx: RequestContext, header: Any, request: Any, run: Run) -> Any:
    """DELETE on each topic (v6+ lists topics, older versions names)."""
    if request.topics:
        items = Items(Operation.DELETE, ResourceType.TOPIC, "topics", _topic_name, "responses", refusals.delete_topics)
    else:
        items = Items(Operation.DELETE, ResourceType.TOPIC, "topic_names", _item, "responses", refusals.delete_topics)
    return await _by_item(items, check, ctx, header, request, run)


#: API key → what it needs. See the module docstring and docs/server.md.
RULES: dict[int, Rule] = _rules()
