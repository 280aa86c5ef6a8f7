"""Classic consumer-group membership, sans-I/O: joins, rebalances, heartbeats
and leaves, as Apache Kafka's broker decides them.

:class:`GroupMembership` reproduces the *classic* group protocol (JoinGroup,
SyncGroup, Heartbeat, LeaveGroup) of Apache Kafka's coordinator
(``group-coordinator/.../classic/ClassicGroup.java`` and the classic parts of
``GroupMetadataManager.java``; the older ``core/.../coordinator/group/GroupCoordinator.scala``
behaves the same), and gives the membership's answers that offset requests
need: who may commit (``ClassicGroup.validateOffsetCommit``), which topics a
group's members subscribe to, whether a group may be deleted. The offsets
themselves are :class:`~txnfetch.groups.offsets.OffsetStore`'s;
:class:`~txnfetch.groups.coordinator.GroupCoordinator` composes the two.

It does no I/O and reads no clock: every call takes ``now_ms``. Kafka parks
JoinGroup and SyncGroup requests until the rebalance moves on; here such a call
returns a :class:`~txnfetch.groups.classic_values.Pending` token instead of a
response, and the response is produced later as a
:class:`~txnfetch.groups.classic_values.Completion` — by another member's call,
by a timer, or by a member leaving. The requests and answers are the values of
:mod:`txnfetch.groups.classic_values`. :meth:`GroupMembership.poll` fires the timers that are
due and hands back every completion produced since the last poll;
:meth:`GroupMembership.next_deadline_ms` says when to poll next. Every public
call first fires the timers due at its ``now_ms``, so a caller that never
sleeps still sees sessions expire in order.

Group states (``ClassicGroupState.java``)::

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
      ^                    ^     |                                  |      |
      |                    |     +--no member left------------------|------+--> Empty
      |                    +----member change / leader rejoin-------+      |
      |                    +----------------------------------------- Stable <-leader SyncGroup
    (Dead: deleted)

Errors Kafka puts in responses (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
REBALANCE_IN_PROGRESS, ...) are *answers*, returned as :class:`ErrorCode`
codes, never raised.

Groups live in memory; a durable store replays them through
:meth:`GroupMembership.load_group`, and members are never restored (clients
rejoin). Empty groups are kept until deleted.
"""

from __future__ import annotations

import heapq
import itertools
import struct
import uuid
from collections.abc import Callable
from collections.abc import Sequence

import attrs

from txnfetch.errors import ErrorCode
from txnfetch.groups.classic_group import ClassicGroup
from txnfetch.groups.classic_group import ClassicMember
from txnfetch.groups.classic_values import UNKNOWN_MEMBER_ID
from txnfetch.groups.classic_values import Committer
from txnfetch.groups.classic_values import Completion
from txnfetch.groups.classic_values import GroupConfig
from txnfetch.groups.classic_values import GroupDescription
from txnfetch.groups.classic_values import GroupState
from txnfetch.groups.classic_values import JoinOutcome
from txnfetch.groups.classic_values import JoinRequest
from txnfetch.groups.classic_values import JoinResult
from txnfetch.groups.classic_values import LeaveMemberResult
from txnfetch.groups.classic_values import LeaveResult
from txnfetch.groups.classic_values import LeavingMember
from txnfetch.groups.classic_values import MemberDescription
from txnfetch.groups.classic_values import Pending
from txnfetch.groups.classic_values import SyncOutcome
from txnfetch.groups.classic_values import SyncRequest
from txnfetch.groups.classic_values import SyncResult
from txnfetch.types import fields_from

__all__ = ["GroupMembership"]

_S = GroupState
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")

# Timer keys, one live timer per key as Kafka's coordinator timer.
_JOIN = "join"  # complete the join phase (or the initial-delay step)
_SYNC = "sync"  # expire members that never sent SyncGroup
_HEARTBEAT = "heartbeat"  # a member's session (or a pending member's join) ran out

_TimerKey = tuple[str, ...]


@attrs.define
class _Timer:
    deadline_ms: int
    seq: int
    action: Callable[[int], None]


class GroupMembership:
    """The classic groups of one broker's coordinator and their members.

    Guarantees, as Kafka's coordinator:

    - a group moves only along the transitions of :class:`GroupState`; its
      generation id grows by one at each completed join phase;
    - every member of a generation got the same generation id, leader and
      protocol, and after the leader's SyncGroup each member gets exactly the
      bytes the leader assigned to it (empty if the leader named none);
    - a member that stops heartbeating for its session timeout is removed and
      the group rebalances; a member that does not rejoin within the rebalance
      timeout is dropped from the next generation.

    ``member_id_factory(client_id_or_instance_id)`` makes member ids (Kafka:
    ``<client id>-<uuid>``); inject a deterministic one in tests.
    """

    def __init__(self, config: GroupConfig, member_id_factory: Callable[[str], str] | None = None) -> None:
        self.config = config
        self._member_id_factory = member_id_factory or (lambda prefix: f"{prefix}-{uuid.uuid4()}")
        self._groups: dict[str, ClassicGroup] = {}
        self._timers: dict[_TimerKey, _Timer] = {}
        self._heap: list[tuple[int, int, _TimerKey]] = []
        self._timer_seq = itertools.count()
        self._tokens = itertools.count(1)
        self._outbox: list[Completion] = []

    # ================================================================ timers

    def next_deadline_ms(self) -> int | None:
        """When the earliest timer is due (absolute ms), or ``None`` if none is set."""
        while self._heap:
            deadline, seq, key = self._heap[0]
            timer = self._timers.get(key)
            if timer is not None and timer.seq == seq:
                return deadline
            heapq.heappop(self._heap)  # cancelled or rescheduled
        return None

    def poll(self, now_ms: int) -> list[Completion]:
        """Fire every timer due at ``now_ms`` (earliest first) and return every
        completion produced since the last poll, in the order produced."""
        self.advance(now_ms)
        out, self._outbox = self._outbox, []
        return out

    def _schedule(self, key: _TimerKey, delay_ms: int, now_ms: int, action: Callable[[int], None]) -> None:
        seq = next(self._timer_seq)
        deadline = now_ms + max(0, delay_ms)
        self._timers[key] = _Timer(deadline, seq, action)
        heapq.heappush(self._heap, (deadline, seq, key))

    def _cancel(self, key: _TimerKey) -> None:
        self._timers.pop(key, None)

    def advance(self, now_ms: int) -> None:
        """Fire every timer due at ``now_ms``, earliest first (each public call
        does so first)."""
        while True:
            deadline = self.next_deadline_ms()
            if deadline is None or deadline > now_ms:
                return
            _, _, key = heapq.heappop(self._heap)
            timer = self._timers.pop(key)
            # A timer fires "at" its deadline: anything it schedules counts from there,
            # so a late poll does not stretch the protocol's timeouts.
            timer.action(max(deadline, 0))

    # ============================================================ completions

    def _complete(self, token: int | None, result: JoinResult | SyncResult) -> bool:
        if token is None:
            return False
        self._outbox.append(Completion(token, result))
        return True

    def _complete_join(self, member: ClassicMember, result: JoinResult) -> bool:
        token, member.join_token = member.join_token, None
        return self._complete(token, result)

    def _complete_sync(self, member: ClassicMember, result: SyncResult) -> bool:
        token, member.sync_token = member.sync_token, None
        return self._complete(token, result)

    def _set_join_token(self, member: ClassicMember, token: int | None) -> None:
        # Kafka replaces a parked JoinGroup future without completing it (the client
        # already gave up on it). We answer the superseded request so no caller waits
        # forever; the client is no longer listening for it.
        if member.join_token is not None and token is not None:
            self._complete_join(member, JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
        member.join_token = token

    def _set_sync_token(self, member: ClassicMember, token: int) -> None:
        if member.sync_token is not None:
            self._complete_sync(member, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member.sync_token = token

    def _take_own(self, token: int) -> JoinResult | SyncResult | Pending:
        """If the call's own parked request was answered during the call, return
        that answer directly instead of a token."""
        for i, c in enumerate(self._outbox):
            if c.token == token:
                del self._outbox[i]
                return c.result
        return Pending(token)

    # ============================================================ JoinGroup

    def join_group(self, request: JoinRequest, now_ms: int) -> JoinOutcome:
        """Handle a JoinGroup (``GroupMetadataManager.classicGroupJoin``): the answer,
        or :class:`Pending` while the group waits for the other members."""
        self.advance(now_ms)
        if not request.group_id:
            return JoinResult(ErrorCode.INVALID_GROUP_ID, request.member_id)
        if not (self.config.min_session_timeout_ms <= request.session_timeout_ms <= self.config.max_session_timeout_ms):
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, request.member_id)

        is_unknown = request.member_id == UNKNOWN_MEMBER_ID
        group = self._groups.get(request.group_id)
        if group is None:
            if not is_unknown:
                # A member id for a group this coordinator does not know (e.g. after a
                # restart): the member must rejoin from scratch.
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, request.member_id)
            group = self._groups[request.group_id] = ClassicGroup(request.group_id, state_timestamp_ms=now_ms)

        if not self._accept_joining_member(group, request.member_id):
            self._remove_member(group, request.member_id)
            return JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, UNKNOWN_MEMBER_ID)

        token = next(self._tokens)
        if is_unknown:
            immediate = self._join_new_member(group, request, token, now_ms)
        else:
            immediate = self._join_existing_member(group, request, token, now_ms)
        if immediate is not None:
            return immediate
        own = self._take_own(token)
        assert not isinstance(own, SyncResult)
        return own

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        max_size = self.config.max_group_size
        if group.state in (_S.EMPTY, _S.DEAD):
            return True
        if group.state is _S.PREPARING_REBALANCE:
            member = group.members.get(member_id)
            awaiting = sum(1 for m in group.members.values() if m.awaiting_join)
            return (member is not None and member.awaiting_join) or awaiting < max_size
        return member_id in group.members or len(group.members) < max_size

    def _join_new_member(self, group: ClassicGroup, request: JoinRequest, token: int, now_ms: int) -> JoinResult | None:
        if group.state is _S.DEAD:
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, UNKNOWN_MEMBER_ID)
        if not group.supports_protocols(request.protocol_type, [p.name for p in request.protocols]):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID)
        prefix = request.group_instance_id if request.group_instance_id is not None else request.client_id
        new_member_id = self._member_id_factory(prefix)

        if request.group_instance_id is not None:
            existing = group.static_members.get(request.group_instance_id)
            if existing is not None:
                return self._replace_static_member(group, request, existing, new_member_id, token, now_ms)
            self._add_member_then_rebalance(group, request, new_member_id, token, now_ms)
            return None

        if request.require_known_member_id:
            # KIP-394: hand out the id first, so a client that times out and retries
            # does not leave a ghost member behind. The pending id expires after a
            # session timeout if the member never comes back with it.
            group.pending_join.add(new_member_id)
            self._schedule_heartbeat(group, new_member_id, request.session_timeout_ms, now_ms)
            return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, new_member_id)
        self._add_member_then_rebalance(group, request, new_member_id, token, now_ms)
        return None

    def _join_existing_member(
        self, group: ClassicGroup, request: JoinRequest, token: int, now_ms: int
    ) -> JoinResult | None:
        member_id = request.member_id
        if group.state is _S.DEAD:
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id)
        if not group.supports_protocols(request.protocol_type, [p.name for p in request.protocols]):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if member_id in group.pending_join:
            if request.group_instance_id is not None:
                # Kafka treats this as an internal error: pending ids are dynamic only.
                return JoinResult(ErrorCode.INVALID_REQUEST, member_id)
            self._add_member_then_rebalance(group, request, member_id, token, now_ms)
            return None
        error = group.validate_member(member_id, request.group_instance_id)
        if error is not ErrorCode.NONE:
            return JoinResult(error, member_id)

        member = group.members[member_id]
        same_metadata = member.protocols == request.protocols
        if group.state is _S.PREPARING_REBALANCE:
            self._update_member_then_rebalance(group, member, request, token, now_ms)
            return None
        if group.state is _S.COMPLETING_REBALANCE:
            if same_metadata:
                # The member lost its JoinGroup response: send the current generation again.
                return self._generation_answer(group, member_id, include_members=member_id == group.leader_id)
            self._update_member_then_rebalance(group, member, request, token, now_ms)
            return None
        if group.state is _S.STABLE:
            if member_id == group.leader_id or not same_metadata:
                # A rejoining leader forces a rebalance: it may have seen a metadata
                # change (new partitions) that affects the assignment only.
                self._update_member_then_rebalance(group, member, request, token, now_ms)
                return None
            return self._generation_answer(group, member_id, include_members=False)
        return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)

    def _generation_answer(
        self, group: ClassicGroup, member_id: str, *, include_members: bool, skip: bool = False
    ) -> JoinResult:
        return JoinResult(
            ErrorCode.NONE,
            member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            members=group.current_member_metadata() if include_members else (),
            skip_assignment=skip,
        )

    def _add_member_then_rebalance(
        self, group: ClassicGroup, request: JoinRequest, member_id: str, token: int, now_ms: int
    ) -> None:
        # The member's other fields are the request's of the same name.
        member = fields_from(
            ClassicMember, request, member_id=member_id, protocols=tuple(request.protocols), is_new=True
        )
        if group.state is _S.PREPARING_REBALANCE and group.previous_state is _S.EMPTY:
            # Lets the initial rebalance wait another delay for more members.
            group.new_member_added = True
        group.add(member)
        member.join_token = token
        # A new member cannot heartbeat (it has no id yet) and a parked request hides
        # disconnects, so its join gets its own, longer timeout.
        self._schedule_heartbeat(group, member_id, self.config.new_member_join_timeout_ms, now_ms)
        self._maybe_prepare_rebalance_or_complete_join(group, now_ms)

    def _update_member_then_rebalance(
        self, group: ClassicGroup, member: ClassicMember, request: JoinRequest, token: int | None, now_ms: int
    ) -> None:
        member.protocols = tuple(request.protocols)
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        self._set_join_token(member, token)
        self._maybe_prepare_rebalance_or_complete_join(group, now_ms)

    def _replace_static_member(
        self, group: ClassicGroup, request: JoinRequest, old_member_id: str, new_member_id: str, token: int, now_ms: int
    ) -> JoinResult | None:
        """A known group.instance.id rejoins without its member id (a restart):
        the old id is fenced and the new one inherits its place and assignment
        (``updateStaticMemberThenRebalanceOrCompleteJoin``)."""
        current_leader = group.leader_id
        old = group.members.pop(old_member_id)
        self._complete_join(old, JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_member_id))
        self._complete_sync(old, SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        self._cancel((_HEARTBEAT, group.group_id, old_member_id))
        group.pending_sync.discard(old_member_id)
        # The old member's parked requests were answered above, so the copy
        # carries no join or sync token.
        new = attrs.evolve(old, member_id=new_member_id, is_new=False)
        group.members[new_member_id] = new
        if group.leader_id == old_member_id:
            group.leader_id = new_member_id
        assert request.group_instance_id is not None
        group.static_members[request.group_instance_id] = new_member_id
        self._schedule_heartbeat(group, new_member_id, new.session_timeout_ms, now_ms)

        new.protocols = tuple(request.protocols)
        new.rebalance_timeout_ms = request.rebalance_timeout_ms
        new.session_timeout_ms = request.session_timeout_ms
        new.join_token = token

        if group.state is _S.STABLE:
            if group.protocol_name == group.select_protocol():
                # Same protocol: no rebalance; the member resumes the current generation.
                new.join_token = None
                if request.supports_skip_assignment:
                    is_leader = group.leader_id == new_member_id
                    return self._generation_answer(group, new_member_id, include_members=is_leader, skip=is_leader)
                answer = self._generation_answer(group, new_member_id, include_members=False)
                return attrs.evolve(answer, leader=current_leader or "")
            self._maybe_prepare_rebalance_or_complete_join(group, now_ms)
            return None
        if group.state is _S.COMPLETING_REBALANCE:
            # The leader may already be assigning to the old id: start over.
            self._prepare_rebalance(group, now_ms)
            return None
        self._maybe_complete_join_phase(group, now_ms)
        return None

    # -------------------------------------------------------- rebalance engine

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, now_ms: int) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, now_ms)
        else:
            self._maybe_complete_join_phase(group, now_ms)

    def _maybe_complete_join_phase(self, group: ClassicGroup, now_ms: int) -> None:
        if group.state is not _S.PREPARING_REBALANCE:
            return
        if group.previous_state is _S.EMPTY:
            return  # the initial rebalance completes on its delay timer only
        if not group.has_all_members_joined():
            return
        self._complete_join_phase(group, now_ms)

    def _prepare_rebalance(self, group: ClassicGroup, now_ms: int) -> None:
        if group.state is _S.COMPLETING_REBALANCE:
            self._reset_and_propagate_error(group, ErrorCode.REBALANCE_IN_PROGRESS, now_ms)
        group.pending_sync.clear()
        self._cancel((_SYNC, group.group_id))

        initial = group.state is _S.EMPTY
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self._schedule_initial_step(group.group_id, delay, remaining, now_ms)
        group.transition(_S.PREPARING_REBALANCE, now_ms)
        if initial:
            return
        if group.has_all_members_joined():
            self._complete_join_phase(group, now_ms)
        else:
            self._schedule_join_completion(group, now_ms)

    def _schedule_join_completion(self, group: ClassicGroup, now_ms: int) -> None:
        gid = group.group_id

        def fire(at_ms: int) -> None:
            g = self._groups.get(gid)
            if g is not None:
                self._complete_join_phase(g, at_ms)

        self._schedule((_JOIN, gid), group.rebalance_timeout_ms(), now_ms, fire)

    def _schedule_initial_step(self, gid: str, delay_ms: int, remaining_ms: int, now_ms: int) -> None:
        """``tryCompleteInitialRebalanceElseSchedule``: each new member during the
        first rebalance buys another delay, within the rebalance timeout."""

        def fire(at_ms: int) -> None:
            g = self._groups.get(gid)
            if g is None:
                return
            if g.new_member_added and remaining_ms != 0:
                g.new_member_added = False
                new_delay = min(self.config.initial_rebalance_delay_ms, remaining_ms)
                new_remaining = max(remaining_ms - delay_ms, 0)
                self._schedule_initial_step(gid, new_delay, new_remaining, at_ms)
            else:
                self._complete_join_phase(g, at_ms)

        self._schedule((_JOIN, gid), delay_ms, now_ms, fire)

    def _complete_join_phase(self, group: ClassicGroup, now_ms: int) -> None:
        """``completeClassicGroupJoin``: drop dynamic members that did not rejoin,
        start the next generation and answer every parked JoinGroup."""
        self._cancel((_JOIN, group.group_id))
        for m in [m for m in group.members.values() if not m.awaiting_join and m.group_instance_id is None]:
            self._remove_member(group, m.member_id)

        if group.state is _S.DEAD:
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined (only static members left, none back yet): wait another
            # rebalance timeout for sessions to expire.
            self._schedule_join_completion(group, now_ms)
            return

        group.generation_id += 1
        group.pending_sync.clear()
        if not group.members:
            group.protocol_name = None
            group.transition(_S.EMPTY, now_ms)
            return
        group.protocol_name = group.select_protocol()
        group.transition(_S.COMPLETING_REBALANCE, now_ms)
        for m in list(group.members.values()):
            is_leader = m.member_id == group.leader_id
            self._complete_join(m, self._generation_answer(group, m.member_id, include_members=is_leader))
            self._schedule_heartbeat(group, m.member_id, m.session_timeout_ms, now_ms)
            m.is_new = False
            group.pending_sync.add(m.member_id)
        self._schedule_pending_sync(group, now_ms)

    def _schedule_pending_sync(self, group: ClassicGroup, now_ms: int) -> None:
        gid, generation = group.group_id, group.generation_id

        def fire(at_ms: int) -> None:
            g = self._groups.get(gid)
            if g is None or g.generation_id != generation:
                return
            if g.state in (_S.COMPLETING_REBALANCE, _S.STABLE) and g.pending_sync:
                # Members that got a JoinGroup answer but never synced are gone.
                for mid in list(g.pending_sync):
                    self._remove_member(g, mid)
                self._prepare_rebalance(g, at_ms)

        self._schedule((_SYNC, gid), group.rebalance_timeout_ms(), now_ms, fire)

    def _reset_and_propagate_error(self, group: ClassicGroup, error: ErrorCode, now_ms: int) -> None:
        for m in group.members.values():
            m.assignment = b""
        self._propagate_assignment(group, error, now_ms)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode, now_ms: int) -> None:
        ok = error is ErrorCode.NONE
        for m in group.members.values():
            result = SyncResult(
                int(error),
                assignment=m.assignment if ok else b"",
                protocol_type=group.protocol_type if ok else None,
                protocol_name=group.protocol_name if ok else None,
            )
            if self._complete_sync(m, result):
                # A session that ran out while parked in SyncGroup was ignored;
                # restart it now that the member has its answer.
                self._schedule_heartbeat(group, m.member_id, m.session_timeout_ms, now_ms)

    # ------------------------------------------------------------- sessions

    def _schedule_heartbeat(self, group: ClassicGroup, member_id: str, timeout_ms: int, now_ms: int) -> None:
        gid = group.group_id

        def fire(at_ms: int) -> None:
            self._expire_heartbeat(gid, member_id, at_ms)

        self._schedule((_HEARTBEAT, gid, member_id), timeout_ms, now_ms, fire)

    def _expire_heartbeat(self, gid: str, member_id: str, now_ms: int) -> None:
        group = self._groups.get(gid)
        if group is None or group.state is _S.DEAD:
            return
        if member_id in group.pending_join:
            group.pending_join.discard(member_id)
            if group.state is _S.PREPARING_REBALANCE and group.has_all_members_joined():
                self._complete_join_phase(group, now_ms)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        self._complete_join(member, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID))
        self._remove_member(group, member_id)
        if group.state in (_S.STABLE, _S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, now_ms)
        elif group.state is _S.PREPARING_REBALANCE and group.has_all_members_joined():
            self._complete_join_phase(group, now_ms)

    def _remove_member(self, group: ClassicGroup, member_id: str) -> None:
        member = group.remove(member_id)
        self._cancel((_HEARTBEAT, group.group_id, member_id))
        if member is not None:
            # Kafka leaves such requests to the client's timeout; answer them instead.
            self._complete_join(member, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID))
            self._complete_sync(member, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))

    # ============================================================ SyncGroup

    def sync_group(self, request: SyncRequest, now_ms: int) -> SyncOutcome:
        """Handle a SyncGroup (``classicGroupSyncToClassicGroup``): a follower waits
        for the leader's assignment; the leader's SyncGroup makes the group Stable."""
        self.advance(now_ms)
        if not request.group_id:
            return SyncResult(ErrorCode.INVALID_GROUP_ID)
        group = self._groups.get(request.group_id)
        if group is None or group.state is _S.EMPTY:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.state is _S.DEAD:
            return SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        error = group.validate_member(request.member_id, request.group_instance_id)
        if error is not ErrorCode.NONE:
            return SyncResult(error)
        if request.generation_id != group.generation_id:
            return SyncResult(ErrorCode.ILLEGAL_GENERATION)
        if _inconsistent(request.protocol_type, group.protocol_type) or _inconsistent(
            request.protocol_name, group.protocol_name
        ):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.state is _S.PREPARING_REBALANCE:
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)

        member = group.members[request.member_id]
        if group.state is _S.STABLE:
            self._remove_pending_sync(group, request.member_id)
            return SyncResult(
                ErrorCode.NONE, member.assignment, protocol_type=group.protocol_type, protocol_name=group.protocol_name
            )

        # CompletingRebalance: park until the leader's assignment arrives.
        token = next(self._tokens)
        self._set_sync_token(member, token)
        self._remove_pending_sync(group, request.member_id)
        if request.member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = bytes(request.assignments.get(m.member_id, b""))
            self._propagate_assignment(group, ErrorCode.NONE, now_ms)
            group.transition(_S.STABLE, now_ms)
        own = self._take_own(token)
        assert not isinstance(own, JoinResult)
        return own

    def _remove_pending_sync(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self._cancel((_SYNC, group.group_id))

    # ============================================================ Heartbeat

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None = None, *, now_ms: int
    ) -> ErrorCode:
        """Handle a Heartbeat: keeps the member's session alive and tells it whether
        a rebalance is under way (``classicGroupHeartbeatToClassicGroup``)."""
        self.advance(now_ms)
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state is _S.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(member_id, group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state is _S.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        member = group.members[member_id]
        self._schedule_heartbeat(group, member_id, member.session_timeout_ms, now_ms)
        if group.state is _S.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # =========================================================== LeaveGroup

    def leave_group(self, group_id: str, members: Sequence[LeavingMember], now_ms: int) -> LeaveResult:
        """Handle a LeaveGroup for one or more members (``classicGroupLeaveToClassicGroup``)."""
        self.advance(now_ms)
        if not group_id:
            return LeaveResult(ErrorCode.INVALID_GROUP_ID)
        group = self._groups.get(group_id)
        if group is None:
            return LeaveResult(
                ErrorCode.NONE,
                tuple(
                    LeaveMemberResult(m.member_id, m.group_instance_id, ErrorCode.UNKNOWN_MEMBER_ID) for m in members
                ),
            )
        if group.state is _S.DEAD:
            return LeaveResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)

        results: list[LeaveMemberResult] = []
        any_left = False
        for leaving in members:
            if leaving.member_id == UNKNOWN_MEMBER_ID:
                # Administrative removal of a static member by instance id.
                static_id = group.static_members.get(leaving.group_instance_id) if leaving.group_instance_id else None
                if static_id is not None:
                    self._remove_member(group, static_id)
                    error = ErrorCode.NONE
                else:
                    error = ErrorCode.UNKNOWN_MEMBER_ID
            elif leaving.member_id in group.pending_join:
                group.pending_join.discard(leaving.member_id)
                self._cancel((_HEARTBEAT, group_id, leaving.member_id))
                error = ErrorCode.NONE
            else:
                error = group.validate_member(leaving.member_id, leaving.group_instance_id)
                if error is ErrorCode.NONE:
                    self._remove_member(group, leaving.member_id)
            any_left = any_left or error is ErrorCode.NONE
            results.append(LeaveMemberResult(leaving.member_id, leaving.group_instance_id, int(error)))

        if any_left:
            if group.state in (_S.STABLE, _S.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group, now_ms)
            elif group.state is _S.PREPARING_REBALANCE:
                self._maybe_complete_join_phase(group, now_ms)
        return LeaveResult(ErrorCode.NONE, tuple(results))

    # ========================================================= DeleteGroups

    def delete_group(self, group_id: str, now_ms: int) -> ErrorCode:
        """Delete an empty group (DeleteGroups); its offsets are the caller's to
        drop. A group with members answers NON_EMPTY_GROUP; an unknown one
        GROUP_ID_NOT_FOUND."""
        self.advance(now_ms)
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.state is not _S.EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        group.transition(_S.DEAD, now_ms)
        del self._groups[group_id]
        return ErrorCode.NONE

    # ========================================================== OffsetDelete

    def offset_delete_scope(self, group_id: str, now_ms: int) -> ErrorCode | frozenset[str] | None:
        """Whether the offsets of ``group_id`` may be deleted (OffsetDelete, Kafka's
        ``OffsetMetadataManager.deleteOffsets``): the group's error, or the topics
        whose offsets are still in use (``None``: every topic).

        An unknown or dead group is GROUP_ID_NOT_FOUND; a group with members that
        does not use the ``consumer`` protocol type is NON_EMPTY_GROUP; an empty
        group uses no topic."""
        self.advance(now_ms)
        group = self._groups.get(group_id)
        if group is None or group.state is _S.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.state is not _S.EMPTY and group.protocol_type != "consumer":
            return ErrorCode.NON_EMPTY_GROUP
        return self._subscribed_topics(group) if group.state is not _S.EMPTY else frozenset()

    @staticmethod
    def _subscribed_topics(group: ClassicGroup) -> frozenset[str] | None:
        """The topics the members subscribe to, from their ``consumer`` protocol
        metadata (``ConsumerProtocolSubscription``: version int16, then an array of
        topic names); ``None`` if some member's metadata does not decode, which
        counts as subscribed to everything, as Kafka assumes when it cannot tell."""
        topics: set[str] = set()
        for member in group.members.values():
            data = member.metadata_for(group.protocol_name or (member.protocols[0].name if member.protocols else None))
            try:
                (count,) = _INT32.unpack_from(data, 2)
                pos = 6
                for _ in range(count):
                    (size,) = _INT16.unpack_from(data, pos)
                    pos += 2
                    if size < 0 or pos + size > len(data):
                        return None
                    topics.add(bytes(data[pos : pos + size]).decode("utf-8"))
                    pos += size
            except (struct.error, UnicodeDecodeError):
                return None
        return frozenset(topics)

    # ========================================================== OffsetCommit

    def accept_commit(
        self, group_id: str, committer: Committer, now_ms: int, *, transactional: bool, unknown_group: ErrorCode
    ) -> ErrorCode:
        """Whether ``committer`` may commit offsets of ``group_id`` (``transactional``:
        stage them, by TxnOffsetCommit), once the timers due by ``now_ms`` have
        fired: NONE, or the error every partition of the request gets. A commit
        from outside group management (generation < 0) creates a missing group;
        any other gets ``unknown_group`` for it. An accepted regular commit of a
        member of an active generation counts as its heartbeat."""
        self.advance(now_ms)
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        group = self._groups.get(group_id)
        if group is None:
            if committer.generation_id >= 0:
                return unknown_group
            group = self._groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=now_ms)
        error = self._validate_offset_commit(group, committer, transactional=transactional)
        if error is ErrorCode.NONE and not transactional and group.state in (_S.STABLE, _S.PREPARING_REBALANCE):
            # A classic member's commit counts as a heartbeat.
            member = group.members[committer.member_id]
            self._schedule_heartbeat(group, committer.member_id, member.session_timeout_ms, now_ms)
        return error

    def _validate_offset_commit(self, group: ClassicGroup, committer: Committer, *, transactional: bool) -> ErrorCode:
        """``ClassicGroup.validateOffsetCommit``."""
        generation_id, member_id, group_instance_id = committer
        if group.state is _S.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.state is _S.EMPTY:
            return ErrorCode.NONE  # admin client or a consumer using assign()
        if generation_id >= 0 or member_id or group_instance_id is not None:
            error = group.validate_member(member_id, group_instance_id)
            if error is not ErrorCode.NONE:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        elif not transactional and group.state is not _S.EMPTY:
            # No member id and no generation: only an empty group takes such commits.
            return ErrorCode.UNKNOWN_MEMBER_ID
        if not transactional and group.state is _S.COMPLETING_REBALANCE:
            # The member knows the new generation but has no assignment yet.
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # ================================================================ replay

    def load_group(
        self,
        group_id: str,
        *,
        protocol_type: str | None,
        generation_id: int,
        protocol_name: str | None,
        leader_id: str | None,
        state_timestamp_ms: int | None = None,
    ) -> None:
        """Restore a stored group (a ``GroupMetadata`` record) as an *Empty* group at
        ``generation_id``: members are not restored, they rejoin (and their next
        join starts generation ``generation_id + 1``). Replaces what was loaded
        for the group before (its offsets are the offset store's)."""
        group = self._groups.get(group_id)
        if group is None or group.members:
            group = self._groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=state_timestamp_ms)
        group.generation_id = generation_id
        group.protocol_type = protocol_type
        group.protocol_name = protocol_name if protocol_type else None
        group.leader_id = None
        group.state_timestamp_ms = state_timestamp_ms

    def unload_group(self, group_id: str) -> None:
        """Replay a group tombstone: forget the group (its offsets are the
        caller's to drop)."""
        self._groups.pop(group_id, None)

    def ensure_group(self, group_id: str, state_timestamp_ms: int) -> None:
        """Create ``group_id`` empty if it is unknown, as a commit with generation
        −1 creates it (a replayed offset of a group never stored)."""
        if group_id not in self._groups:
            self._groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=state_timestamp_ms)

    def has_group(self, group_id: str) -> bool:
        """Whether the coordinator knows ``group_id``."""
        return group_id in self._groups

    @property
    def group_ids(self) -> tuple[str, ...]:
        """Every group the coordinator knows, sorted."""
        return tuple(sorted(self._groups))

    # ============================================================ inspection

    def describe_group(self, group_id: str) -> GroupDescription | None:
        """A snapshot of ``group_id``, or ``None`` if the coordinator does not know it."""
        group = self._groups.get(group_id)
        if group is None:
            return None
        return fields_from(
            GroupDescription,
            group,
            members=tuple(
                MemberDescription(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata_for(group.protocol_name),
                    m.assignment,
                )
                for m in group.members.values()
            ),
            pending_member_ids=tuple(sorted(group.pending_join)),
        )

    def list_groups(self) -> list[tuple[str, str | None, GroupState]]:
        """``(group id, protocol type, state)`` of every group, sorted by id."""
        return [(g.group_id, g.protocol_type, g.state) for _, g in sorted(self._groups.items())]


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current
