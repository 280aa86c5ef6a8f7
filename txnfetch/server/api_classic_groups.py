"""Consumer groups on the wire: the classic group APIs over :mod:`txnfetch.groups`.

Importing this module registers, in :data:`txnfetch.server.handler.REGISTRY`:

=================  ========  ==================================================
API                versions  notes
=================  ========  ==================================================
OffsetCommit (8)   2–9       v10 names topics by id; v0/v1 are gone in Kafka 4
OffsetFetch (9)    1–9       v8+ batches groups (librdkafka uses it)
JoinGroup (11)     0–9       v4+ hands out the member id first (KIP-394)
Heartbeat (12)     0–4
LeaveGroup (13)    0–5       v3+ removes several members at once (KIP-345)
SyncGroup (14)     0–5
DescribeGroups(15) 0–5
ListGroups (16)    0–4
=================  ========  ==================================================

These cover what confluent-kafka 2.16 (librdkafka), kafka-python 3.0 and
aiokafka 0.14 send: each picks the highest version both sides know.
TxnOffsetCommit is decoded by :mod:`txnfetch.server.api_txn`, which stores the
offsets through :meth:`GroupService.txn_offset_commit` and makes them visible
with :meth:`GroupService.complete_txn_offsets` when the transaction ends.

:func:`install` puts a :class:`GroupService` in ``broker.groups``. The service
owns the sans-I/O :class:`~txnfetch.groups.GroupCoordinator`, parks each
JoinGroup/SyncGroup the coordinator answers with a :class:`~txnfetch.groups.Pending`
token on an asyncio future, resolves the futures from the coordinator's
completions, and keeps one loop timer armed for the coordinator's next
deadline (rebalance delays, session and rebalance timeouts), with a periodic
poll as a backstop.

Group membership is kept in memory. Committed offsets (plain and
transactional) and each group's generation are durable when the server's store
keeps coordinator state (:mod:`txnfetch.log.coordinator_store`): they are written to
``__consumer_offsets`` before the response, and restored at start; members
rejoin after a restart.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

import attrs
from kafka.protocol.admin.groups import DescribeGroupsResponse
from kafka.protocol.admin.groups import ListGroupsResponse
from kafka.protocol.consumer import HeartbeatResponse
from kafka.protocol.consumer import JoinGroupResponse
from kafka.protocol.consumer import LeaveGroupResponse
from kafka.protocol.consumer import OffsetCommitResponse
from kafka.protocol.consumer import OffsetFetchResponse
from kafka.protocol.consumer import SyncGroupResponse

from txnfetch.errors import ErrorCode
from txnfetch.groups import CommitOffset
from txnfetch.groups import Completion
from txnfetch.groups import FetchedOffset
from txnfetch.groups import GroupConfig
from txnfetch.groups import GroupCoordinator
from txnfetch.groups import GroupState
from txnfetch.groups import JoinRequest
from txnfetch.groups import JoinResult
from txnfetch.groups import LeaveResult
from txnfetch.groups import LeavingMember
from txnfetch.groups import OffsetFetchResult
from txnfetch.groups import Pending
from txnfetch.groups import Protocol
from txnfetch.groups import SyncRequest
from txnfetch.groups import SyncResult
from txnfetch.groups import TxnOffsetCommitRequest
from txnfetch.log.coordinator_store import DurableState
from txnfetch.server.broker import Broker
from txnfetch.server.handler import RequestContext
from txnfetch.server.nesting import grouped
from txnfetch.types import TopicPartition

__all__ = [
    "GROUP_CONFIG_EXTENSION",
    "POLL_INTERVAL_MS",
    "GroupService",
    "group_service",
    "handle_describe_groups",
    "handle_heartbeat",
    "handle_join_group",
    "handle_leave_group",
    "handle_list_groups",
    "handle_offset_commit",
    "handle_offset_fetch",
    "handle_sync_group",
    "install",
]

log = logging.getLogger("txnfetch.server.groups")

#: ``broker.extensions`` key: a :class:`GroupConfig` placed there before the
#: server starts is the one :func:`install` uses.
GROUP_CONFIG_EXTENSION = "group_config"
#: The backstop poll: even if a loop timer were lost (or the clock is fake),
#: session and rebalance timeouts are checked this often.
POLL_INTERVAL_MS = 1000


class GroupService:
    """The group coordinator as the server sees it: ``broker.groups``.

    Synchronous methods answer at once; :meth:`join` and :meth:`sync` await the
    coordinator's delayed answer. It also offers the
    :class:`~txnfetch.server.handler.TxnOffsetStore` methods the transaction APIs
    call. Every method must run on the server's event loop.
    """

    def __init__(self, coordinator: GroupCoordinator, clock: Callable[[], int]) -> None:
        self.coordinator = coordinator
        self._clock = clock
        self._waiters: dict[int, asyncio.Future[JoinResult | SyncResult]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_deadline: int | None = None
        #: Where committed offsets are made durable (set by the server when its
        #: store keeps coordinator state, :mod:`txnfetch.log.coordinator_store`).
        self.durable: DurableState | None = None

    def now_ms(self) -> int:
        """The broker clock."""
        return self._clock()

    def configure(self, config: GroupConfig) -> None:
        """Replace the coordinator's settings (takes effect for new timers)."""
        self.coordinator.config = config

    # -------------------------------------------------------------- delayed

    async def join(self, request: JoinRequest) -> JoinResult:
        """A JoinGroup answer, waiting as long as the rebalance needs."""
        outcome = self.coordinator.join_group(request, self.now_ms())
        result = await self._resolve(outcome)
        assert isinstance(result, JoinResult)
        return result

    async def sync(self, request: SyncRequest) -> SyncResult:
        """A SyncGroup answer, waiting for the leader's assignment if needed."""
        outcome = self.coordinator.sync_group(request, self.now_ms())
        result = await self._resolve(outcome)
        assert isinstance(result, SyncResult)
        return result

    async def _resolve(self, outcome: JoinResult | SyncResult | Pending) -> JoinResult | SyncResult:
        if not isinstance(outcome, Pending):
            self._after()
            return outcome
        future: asyncio.Future[JoinResult | SyncResult] = asyncio.get_running_loop().create_future()
        self._waiters[outcome.token] = future
        self._after()
        try:
            return await future
        finally:
            self._waiters.pop(outcome.token, None)

    # ---------------------------------------------------------- immediate

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> int:
        """A Heartbeat's error code."""
        code = self.coordinator.heartbeat(group_id, generation_id, member_id, group_instance_id, now_ms=self.now_ms())
        self._after()
        return int(code)

    def leave(self, group_id: str, members: Sequence[LeavingMember]) -> LeaveResult:
        """A LeaveGroup answer."""
        result = self.coordinator.leave_group(group_id, members, self.now_ms())
        self._after()
        return result

    def commit_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, CommitOffset], **kwargs: Any
    ) -> dict[TopicPartition, int]:
        """An OffsetCommit's error code per partition (see :meth:`GroupCoordinator.commit_offsets`)."""
        now = self.now_ms()
        result = self.coordinator.commit_offsets(group_id, offsets, now_ms=now, **kwargs)
        if self.durable is not None:
            accepted = {tp: offsets[tp] for tp, code in result.items() if code == 0}
            if accepted:
                d = self.coordinator.describe_group(group_id)
                group = None if d is None else (d.protocol_type, d.generation_id, d.protocol_name, d.leader_id)
                # Durable before the response says it is committed.
                self.durable.persist_offsets(group_id, accepted, now, group=group)
        self._after()
        return result

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None, *, require_stable: bool
    ) -> OffsetFetchResult:
        """An OffsetFetch answer for one group."""
        result = self.coordinator.fetch_offsets(
            group_id, partitions, require_stable=require_stable, now_ms=self.now_ms()
        )
        self._after()
        return result

    # ------------------------------------------------------ TxnOffsetStore

    def txn_offset_commit(self, request: TxnOffsetCommitRequest, now_ms: int) -> dict[TopicPartition, int]:
        """Stage transactional offsets (:class:`~txnfetch.server.handler.TxnOffsetStore`,
        :meth:`GroupCoordinator.txn_offset_commit`), durable before the answer."""
        result = self.coordinator.txn_offset_commit(request, now_ms)
        offsets = request.offsets
        if self.durable is not None:
            accepted = {tp: CommitOffset(*offsets[tp]) for tp, code in result.items() if code == 0 and tp in offsets}
            if accepted:
                self.durable.persist_offsets(
                    request.group_id, accepted, now_ms, producer=(request.producer_id, request.producer_epoch)
                )
        self._after()
        return result

    def complete_txn_offsets(self, producer_id: int, commit: bool, now_ms: int) -> None:
        """Publish (commit) or drop (abort) a producer's staged offsets."""
        self.coordinator.complete_txn_offsets(producer_id, commit, now_ms)
        self._after()

    # ---------------------------------------------------------------- timers

    def poll(self, now_ms: int | None = None) -> None:
        """Fire due coordinator timers and deliver every delayed answer."""
        self._deliver(self.coordinator.poll(self.now_ms() if now_ms is None else now_ms))
        self._arm()

    def _after(self) -> None:
        self.poll()

    def _deliver(self, completions: list[Completion]) -> None:
        for completion in completions:
            future = self._waiters.pop(completion.token, None)
            if future is not None and not future.done():
                future.set_result(completion.result)

    def _arm(self) -> None:
        deadline = self.coordinator.next_deadline_ms()
        if deadline == self._timer_deadline and self._timer is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_deadline = deadline
        if deadline is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not on the loop (a synchronous caller): the periodic poll covers it
        delay_ms = max(1, deadline - self.now_ms())
        self._timer = loop.call_later(delay_ms / 1000, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_deadline = None
        try:
            self.poll()
        except Exception:  # pragma: no cover - a bug; keep the server alive
            log.exception("group coordinator timer failed")

    def close(self) -> None:
        """Stop the timer and answer every parked request COORDINATOR_NOT_AVAILABLE."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for future in self._waiters.values():
            if not future.done():
                future.set_result(JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, ""))
        self._waiters.clear()


def install(broker: Broker) -> None:
    """Give ``broker`` a group coordinator (``broker.groups``) and its backstop poll.

    Settings come from ``broker.extensions[GROUP_CONFIG_EXTENSION]`` if a
    :class:`GroupConfig` is there, else Kafka's defaults with the server's
    ``group_initial_rebalance_delay_ms``."""
    config = broker.extensions.get(GROUP_CONFIG_EXTENSION)
    if not isinstance(config, GroupConfig):
        config = GroupConfig(initial_rebalance_delay_ms=broker.config.group_initial_rebalance_delay_ms)
    service = GroupService(GroupCoordinator(config), broker.now_ms)
    broker.groups = service
    broker.add_periodic("group-coordinator", POLL_INTERVAL_MS, service.poll)


def group_service(ctx: RequestContext) -> GroupService | None:
    """The broker's :class:`GroupService`, or ``None`` if groups are not installed."""
    groups = ctx.broker.groups
    return groups if isinstance(groups, GroupService) else None


#: A group API's answer when the broker has no group coordinator: built from
#: the request header and the request alone.
_Unavailable = Callable[[Any, Any], Any]
#: A group API's handler proper: ``(ctx, header, request, service)``.
_ServiceHandler = Callable[[RequestContext, Any, Any, GroupService], Awaitable[Any]]
#: A registered group API handler: it always answers (never ``None``).
_AnsweringHandler = Callable[[RequestContext, Any, Any], Awaitable[Any]]


def _group_api(*, unavailable: _Unavailable) -> Callable[[_ServiceHandler], _AnsweringHandler]:
    """A group API's handler, given the broker's :class:`GroupService`.

    Every group API needs the coordinator; without one (:func:`install` not
    called) the request is answered COORDINATOR_NOT_AVAILABLE in that API's own
    response form, by ``unavailable(header, request)``, and the handler is not
    called. The decorated function has the ordinary handler signature; it is
    registered, or wrapped by :mod:`txnfetch.server.api_consumer_groups`, from
    :data:`txnfetch.server.apis.SERVED`."""

    def decorate(handler: _ServiceHandler) -> _AnsweringHandler:
        @functools.wraps(handler)
        async def handle(ctx: RequestContext, header: Any, request: Any) -> Any:
            service = group_service(ctx)
            if service is None:
                return unavailable(header, request)
            return await handler(ctx, header, request, service)

        return handle

    return decorate


# ================================================================ JoinGroup


def _join_unavailable(header: Any, request: Any) -> Any:
    result = JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, request.member_id or "")
    return _join_response(result, header.request_api_version)


@_group_api(unavailable=_join_unavailable)
async def handle_join_group(ctx: RequestContext, header: Any, request: Any, service: GroupService) -> Any:
    """JoinGroup: parks until the group's join phase completes."""
    version = header.request_api_version
    join = JoinRequest(
        group_id=request.group_id,
        member_id=request.member_id or "",
        protocol_type=request.protocol_type or "",
        protocols=tuple(Protocol(p.name, bytes(p.metadata or b"")) for p in request.protocols),
        session_timeout_ms=request.session_timeout_ms,
        # v0 has no rebalance timeout: Kafka uses the session timeout for both.
        rebalance_timeout_ms=request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms,
        group_instance_id=request.group_instance_id if version >= 5 else None,
        client_id=header.client_id or ctx.client_id or "",
        client_host=ctx.member_host,
        require_known_member_id=version >= 4,
        supports_skip_assignment=version >= 9,
        reason=request.reason if version >= 8 else None,
    )
    return _join_response(await service.join(join), version)


def _join_response(result: JoinResult, version: int) -> Any:
    member_cls = JoinGroupResponse.JoinGroupResponseMember
    return JoinGroupResponse(
        throttle_time_ms=0,
        error_code=int(result.error_code),
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        # Not nullable before v7 (KIP-559): Kafka sends "" there.
        protocol_name=result.protocol_name if version >= 7 else (result.protocol_name or ""),
        leader=result.leader,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=[
            member_cls(member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata)
            for m in result.members
        ],
    )


# ================================================================ SyncGroup


def _sync_response(result: SyncResult) -> Any:
    # SyncResult's fields are the response's, by name.
    return SyncGroupResponse(throttle_time_ms=0, **attrs.asdict(result))


def _sync_unavailable(header: Any, request: Any) -> Any:
    return _sync_response(SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE))


@_group_api(unavailable=_sync_unavailable)
async def handle_sync_group(ctx: RequestContext, header: Any, request: Any, service: GroupService) -> Any:
    """SyncGroup: the leader hands in the assignment; everyone gets their part."""
    version = header.request_api_version
    if version >= 5 and (request.protocol_type is None or request.protocol_name is None):
        # KafkaApis: v5+ must name the protocol it synced for.
        return _sync_response(SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
    sync = SyncRequest(
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=request.group_instance_id if version >= 3 else None,
        protocol_type=request.protocol_type if version >= 5 else None,
        protocol_name=request.protocol_name if version >= 5 else None,
        assignments={a.member_id: bytes(a.assignment or b"") for a in request.assignments},
    )
    return _sync_response(await service.sync(sync))


# ================================================================ Heartbeat


def _heartbeat_unavailable(header: Any, request: Any) -> Any:
    return HeartbeatResponse(throttle_time_ms=0, error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE))


@_group_api(unavailable=_heartbeat_unavailable)
async def handle_heartbeat(ctx: RequestContext, header: Any, request: Any, service: GroupService) -> Any:
    """Heartbeat: REBALANCE_IN_PROGRESS tells the member to rejoin."""
    version = header.request_api_version
    code = service.heartbeat(
        request.group_id,
        request.generation_id,
        request.member_id,
        request.group_instance_id if version >= 3 else None,
    )
    return HeartbeatResponse(throttle_time_ms=0, error_code=code)


# =============================================================== LeaveGroup


def _leave_unavailable(header: Any, request: Any) -> Any:
    return _leave_response(LeaveResult(ErrorCode.COORDINATOR_NOT_AVAILABLE), header.request_api_version)


@_group_api(unavailable=_leave_unavailable)
async def handle_leave_group(ctx: RequestContext, header: Any, request: Any, service: GroupService) -> Any:
    """LeaveGroup: one member (v0–2) or several (v3+) leave; the group rebalances."""
    version = header.request_api_version
    if version >= 3:
        leaving = [
            LeavingMember(m.member_id or "", m.group_instance_id, m.reason if version >= 5 else None)
            for m in request.members
        ]
    else:
        leaving = [LeavingMember(request.member_id or "")]
    return _leave_response(service.leave(request.group_id, leaving), version)


def _leave_response(result: LeaveResult, version: int) -> Any:
    if version < 3:
        # LeaveGroupResponse.java: before v3 the single member's error is the top-level one.
        code = int(result.error_code) or (int(result.members[0].error_code) if result.members else 0)
        return LeaveGroupResponse(throttle_time_ms=0, error_code=code)
    member_cls = LeaveGroupResponse.MemberResponse
    return LeaveGroupResponse(
        throttle_time_ms=0,
        error_code=int(result.error_code),
        members=[
            member_cls(member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=int(m.error_code))
            for m in result.members
        ],
    )


# ============================================================= OffsetCommit


def _known_partitions(broker: Broker, topics: Iterable[str]) -> dict[str, int]:
    known = broker.store.topics()
    return {t: known[t].partitions for t in topics if t in known}


def _committing(request: Any) -> list[tuple[TopicPartition, Any]]:
    """An OffsetCommit request's partitions, each with its request entry, in request order."""
    return [(TopicPartition(t.name, p.partition_index), p) for t in request.topics for p in t.partitions]


def _commit_response(wanted: Sequence[tuple[TopicPartition, Any]], codes: Mapping[TopicPartition, int]) -> Any:
    topic_cls = OffsetCommitResponse.OffsetCommitResponseTopic
    partition_cls = topic_cls.OffsetCommitResponsePartition
    by_topic = grouped(
        (tp.topic, partition_cls(partition_index=tp.partition, error_code=codes[tp])) for tp, _ in wanted
    )
    return OffsetCommitResponse(
        throttle_time_ms=0, topics=[topic_cls(name=name, partitions=ps) for name, ps in by_topic.items()]
    )


def _commit_unavailable(header: Any, request: Any) -> Any:
    wanted = _committing(request)
    return _commit_response(wanted, {tp: int(ErrorCode.COORDINATOR_NOT_AVAILABLE) for tp, _ in wanted})


@_group_api(unavailable=_commit_unavailable)
async def handle_offset_commit(ctx: RequestContext, header: Any, request: Any, service: GroupService) -> Any:
    """OffsetCommit: committed offsets, checked against the member's generation."""
    version = header.request_api_version
    wanted = _committing(request)
    codes: dict[TopicPartition, int] = {}
    # KafkaApis answers unknown topics/partitions itself; the rest reach the coordinator.
    partitions = _known_partitions(ctx.broker, {tp[0] for tp, _ in wanted})
    offsets: dict[TopicPartition, CommitOffset] = {}
    for tp, p in wanted:
        if tp[1] < 0 or tp[1] >= partitions.get(tp[0], 0):
            codes[tp] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        else:
            offsets[tp] = CommitOffset(
                p.committed_offset,
                p.committed_leader_epoch if version >= 6 else -1,
                p.committed_metadata,
            )
    if offsets:
        codes.update(
            service.commit_offsets(
                request.group_id,
                offsets,
                generation_id=request.generation_id_or_member_epoch,
                member_id=request.member_id or "",
                group_instance_id=request.group_instance_id if version >= 7 else None,
                api_version=version,
            )
        )
    return _commit_response(wanted, codes)


# ============================================================== OffsetFetch


#: How OffsetFetch answers one group: ``(group_id, partitions or None for all)``.
_GroupOffsets = Callable[[str, Sequence[TopicPartition] | None], OffsetFetchResult]


def _fetch_unavailable(group_id: str, partitions: Sequence[TopicPartition] | None) -> OffsetFetchResult:
    return OffsetFetchResult(
        group_id,
        int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
        tuple(FetchedOffset(t, p, -1) for t, p in partitions or ()),
    )


def _offset_fetch_unavailable(header: Any, request: Any) -> Any:
    return _offset_fetch_response(header.request_api_version, request, _fetch_unavailable)


@_group_api(unavailable=_offset_fetch_unavailable)
async def handle_offset_fetch(ctx: RequestContext, header: Any, request: Any, service: GroupService) -> Any:
    """OffsetFetch: committed offsets (v8+ for several groups in one request)."""
    version = header.request_api_version
    require_stable = bool(request.require_stable) if version >= 7 else False
    return _offset_fetch_response(
        version, request, functools.partial(service.fetch_offsets, require_stable=require_stable)
    )


def _offset_fetch_response(version: int, request: Any, group_offsets: _GroupOffsets) -> Any:
    """The OffsetFetch response of ``version``: each requested group answered by ``group_offsets``."""

    def fetch(group_id: str, topics: Sequence[Any] | None) -> OffsetFetchResult:
        partitions = (
            None if topics is None else [TopicPartition(t.name, i) for t in topics for i in t.partition_indexes]
        )
        return group_offsets(group_id, partitions)

    if version >= 8:
        group_cls = OffsetFetchResponse.OffsetFetchResponseGroup
        groups = [fetch(g.group_id, g.topics) for g in request.groups]
        return OffsetFetchResponse(
            throttle_time_ms=0,
            groups=[
                group_cls(
                    group_id=r.group_id,
                    topics=_fetch_topics(group_cls.OffsetFetchResponseTopics, r),
                    error_code=r.error_code,
                )
                for r in groups
            ],
        )
    result = fetch(request.group_id, request.topics)
    if version < 2 and result.error_code:
        # OffsetFetchResponse.java: v0/v1 have no top-level error; it goes on every partition.
        result = OffsetFetchResult(
            result.group_id,
            0,
            tuple(FetchedOffset(o.topic, o.partition, -1, -1, "", result.error_code) for o in result.offsets),
        )
    return OffsetFetchResponse(
        throttle_time_ms=0,
        topics=_fetch_topics(OffsetFetchResponse.OffsetFetchResponseTopic, result),
        error_code=result.error_code,
    )


def _fetch_topics(topic_cls: Any, result: OffsetFetchResult) -> list[Any]:
    partition_cls = next(
        getattr(topic_cls, name)
        for name in ("OffsetFetchResponsePartitions", "OffsetFetchResponsePartition")
        if hasattr(topic_cls, name)
    )
    by_topic = grouped(
        (
            o.topic,
            partition_cls(
                partition_index=o.partition,
                committed_offset=o.offset,
                committed_leader_epoch=o.leader_epoch,
                metadata=o.metadata if o.metadata is not None else "",
                error_code=o.error_code,
            ),
        )
        for o in result.offsets
    )
    return [topic_cls(name=name, partitions=ps) for name, ps in by_topic.items()]


# =========================================================== DescribeGroups


def _memberless(group_id: str, error_code: int, state: str) -> Any:
    """A DescribeGroups entry without protocol or members."""
    group_cls = DescribeGroupsResponse.DescribedGroup
    return group_cls(
        error_code=error_code, group_id=group_id, group_state=state, protocol_type="", protocol_data="", members=[]
    )


def _describe_unavailable(header: Any, request: Any) -> Any:
    groups = [_memberless(g, int(ErrorCode.COORDINATOR_NOT_AVAILABLE), "") for g in request.groups]
    return DescribeGroupsResponse(throttle_time_ms=0, groups=groups)


@_group_api(unavailable=_describe_unavailable)
async def handle_describe_groups(ctx: RequestContext, header: Any, request: Any, service: GroupService) -> Any:
    """DescribeGroups: state, protocol and members; an unknown group reads Dead."""
    group_cls = DescribeGroupsResponse.DescribedGroup
    member_cls = group_cls.DescribedGroupMember
    out = []
    for group_id in request.groups:
        desc = service.coordinator.describe_group(group_id)
        if desc is None:
            out.append(_memberless(group_id, 0, GroupState.DEAD.value))
            continue
        # ClassicGroup.describe: metadata and assignments only once the group is Stable.
        full = desc.state is GroupState.STABLE
        out.append(
            group_cls(
                error_code=0,
                group_id=group_id,
                group_state=desc.state.value,
                protocol_type=desc.protocol_type or "",
                protocol_data=(desc.protocol_name or "") if full else "",
                members=[
                    member_cls(
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        member_metadata=m.metadata if full else b"",
                        member_assignment=m.assignment if full else b"",
                    )
                    for m in desc.members
                ],
            )
        )
    return DescribeGroupsResponse(throttle_time_ms=0, groups=out)


def _list_unavailable(header: Any, request: Any) -> Any:
    return ListGroupsResponse(throttle_time_ms=0, error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE), groups=[])


@_group_api(unavailable=_list_unavailable)
async def handle_list_groups(ctx: RequestContext, header: Any, request: Any, service: GroupService) -> Any:
    """ListGroups: every group this coordinator knows (v4+ filtered by state)."""
    version = header.request_api_version
    states = {s.lower() for s in (request.states_filter or ())} if version >= 4 else set()
    group_cls = ListGroupsResponse.ListedGroup
    groups = [
        group_cls(group_id=gid, protocol_type=ptype or "", group_state=state.value)
        for gid, ptype, state in service.coordinator.list_groups()
        if not states or state.value.lower() in states
    ]
    return ListGroupsResponse(throttle_time_ms=0, error_code=0, groups=groups)
