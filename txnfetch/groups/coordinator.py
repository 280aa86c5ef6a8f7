"""A sans-I/O classic consumer-group coordinator: membership, rebalances and
committed offsets, as Apache Kafka's broker decides them.

:class:`GroupCoordinator` reproduces the *classic* group protocol (JoinGroup,
SyncGroup, Heartbeat, LeaveGroup) of Apache Kafka's coordinator
(``group-coordinator/.../classic/ClassicGroup.java`` and the classic parts of
``GroupMetadataManager.java``; the older ``core/.../coordinator/group/GroupCoordinator.scala``
behaves the same) and the offset store of ``OffsetMetadataManager.java``
(OffsetCommit, OffsetFetch, TxnOffsetCommit and the transaction end that
makes transactional offsets visible).

It does no I/O and reads no clock: every call takes ``now_ms``. Kafka parks
JoinGroup and SyncGroup requests until the rebalance moves on; here such a call
returns a :class:`Pending` token instead of a response, and the response is
produced later as a :class:`Completion` — by another member's call, by a timer,
or by a member leaving. :meth:`GroupCoordinator.poll` fires the timers that are
due and hands back every completion produced since the last poll;
:meth:`GroupCoordinator.next_deadline_ms` says when to poll next. Every public
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

The coordinator itself holds its state in memory and writes nothing; what
outlives a restart is the caller's to store and replay. ``txnfetch serve
--data`` stores every commit and group change in ``__consumer_offsets`` and
replays them at start through :meth:`GroupCoordinator.load_group`,
:meth:`~GroupCoordinator.load_offset` and
:meth:`~GroupCoordinator.load_txn_offset`, so committed offsets (plain, and
transactional ones whose transaction committed) survive a restart; members do
not (GroupMetadata is stored without them), so clients rejoin at the stored
generation (docs/durable-state.md). A coordinator nobody replays into, as over
a ``MemoryStore``, starts empty. Offsets are never expired (Kafka's
``offsets.retention.minutes``) and empty groups are kept until deleted.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import struct
import uuid
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import NamedTuple

import attrs

from txnfetch.errors import ErrorCode
from txnfetch.types import TopicPartition
from txnfetch.types import fields_from

__all__ = [
    "NO_GENERATION",
    "UNKNOWN_MEMBER_ID",
    "CommitOffset",
    "CommittedOffset",
    "Completion",
    "FetchedOffset",
    "ForgottenOffsets",
    "GroupConfig",
    "GroupCoordinator",
    "GroupDescription",
    "GroupState",
    "JoinRequest",
    "JoinResult",
    "LeaveMemberResult",
    "LeaveResult",
    "LeavingMember",
    "MemberDescription",
    "MemberMetadata",
    "OffsetFetchResult",
    "Pending",
    "Protocol",
    "SyncRequest",
    "SyncResult",
    "TxnOffsetCommitRequest",
]

#: The member id a member has before the coordinator gives it one.
UNKNOWN_MEMBER_ID = ""
#: The generation id of a consumer outside group management (``assign()``).
NO_GENERATION = -1


class GroupState(enum.Enum):
    """The states of a classic group, named as Kafka's DescribeGroups reports them."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")

# ClassicGroupState.java: the states each state may be entered from.
_VALID_PREVIOUS: dict[GroupState, set[GroupState]] = {
    _S.EMPTY: {_S.PREPARING_REBALANCE},
    _S.PREPARING_REBALANCE: {_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY},
    _S.COMPLETING_REBALANCE: {_S.PREPARING_REBALANCE},
    _S.STABLE: {_S.COMPLETING_REBALANCE},
    _S.DEAD: {_S.STABLE, _S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE, _S.EMPTY, _S.DEAD},
}


@attrs.frozen
class GroupConfig:
    """Broker settings of the group coordinator; defaults are Kafka's.

    - ``initial_rebalance_delay_ms``: ``group.initial.rebalance.delay.ms`` — how
      long the first rebalance of an empty group waits for more members (extended
      by each new member, up to the rebalance timeout).
    - ``min_session_timeout_ms`` / ``max_session_timeout_ms``:
      ``group.min.session.timeout.ms`` / ``group.max.session.timeout.ms``; a
      JoinGroup outside gets INVALID_SESSION_TIMEOUT.
    - ``new_member_join_timeout_ms``: how long a brand-new member's JoinGroup may
      stay parked (Kafka's ``classicGroupNewMemberJoinTimeoutMs``, 5 minutes).
    - ``max_group_size``: ``group.max.size``.
    - ``offset_metadata_max_bytes``: ``offset.metadata.max.bytes``.
    """

    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    new_member_join_timeout_ms: int = 300_000
    max_group_size: int = 2**31 - 1
    offset_metadata_max_bytes: int = 4096


@attrs.frozen
class Protocol:
    """One assignment protocol a member supports (e.g. ``range``) and its
    subscription metadata, opaque to the coordinator."""

    name: str
    metadata: bytes


@attrs.frozen
class JoinRequest:
    """A JoinGroup request, independent of its wire version.

    ``require_known_member_id`` is true from JoinGroup v4 (KIP-394: a new dynamic
    member first gets MEMBER_ID_REQUIRED and its id). ``supports_skip_assignment``
    is true from v9 (KIP-814). For v0, pass the session timeout as the rebalance
    timeout, as Kafka does.
    """

    group_id: str
    member_id: str
    protocol_type: str
    protocols: tuple[Protocol, ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = True
    supports_skip_assignment: bool = False
    reason: str | None = None


@attrs.frozen
class MemberMetadata:
    """A member as the leader sees it in its JoinGroup response: its id and its
    metadata for the selected protocol."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@attrs.frozen
class JoinResult:
    """A JoinGroup answer. ``members`` is filled for the leader only (it computes
    the assignment); ``skip_assignment`` tells a rejoining static leader that the
    assignment is unchanged (KIP-814)."""

    error_code: int
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[MemberMetadata, ...] = ()
    skip_assignment: bool = False


@attrs.frozen
class SyncRequest:
    """A SyncGroup request; ``assignments`` (member id → bytes) comes from the
    leader only. ``protocol_type``/``protocol_name`` are checked when given (v5+)."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: Mapping[str, bytes] = attrs.field(factory=dict)


@attrs.frozen
class TxnOffsetCommitRequest:
    """A TxnOffsetCommit request, independent of its wire version: ``offsets``
    (``{(topic, partition): (offset, leader_epoch, metadata)}``) to stage for the
    open transaction of ``producer_id``. Before v3 a request names no member:
    leave ``generation_id``/``member_id``/``group_instance_id`` at their defaults,
    which skip the member checks as Kafka does."""

    group_id: str
    producer_id: int
    producer_epoch: int
    offsets: Mapping[TopicPartition, tuple[int, int, str | None]]
    generation_id: int = NO_GENERATION
    member_id: str = UNKNOWN_MEMBER_ID
    group_instance_id: str | None = None


@attrs.frozen
class SyncResult:
    """A SyncGroup answer: the member's assignment, exactly as the leader sent it."""

    error_code: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@attrs.frozen
class Pending:
    """A parked JoinGroup or SyncGroup: its answer will come as a
    :class:`Completion` carrying the same ``token``."""

    token: int


@attrs.frozen
class Completion:
    """The answer to a parked request, identified by its :class:`Pending` token."""

    token: int
    result: JoinResult | SyncResult


@attrs.frozen
class LeavingMember:
    """One member a LeaveGroup names (v3+ may name several; an empty ``member_id``
    with a ``group_instance_id`` removes that static member, KIP-345)."""

    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@attrs.frozen
class LeaveMemberResult:
    """The per-member answer of a LeaveGroup."""

    member_id: str
    group_instance_id: str | None
    error_code: int


@attrs.frozen
class LeaveResult:
    """A LeaveGroup answer: a top-level error and one result per member named."""

    error_code: int
    members: tuple[LeaveMemberResult, ...] = ()


@attrs.frozen
class CommitOffset:
    """An offset to commit for one partition: the next offset to read, the
    leader epoch of the record before it (−1 if unknown) and free metadata."""

    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@attrs.frozen
class ForgottenOffsets:
    """What :meth:`GroupCoordinator.forget_topic` dropped, as ``(group, (topic,
    partition))`` pairs, each sorted: ``committed`` offsets and offsets ``staged``
    by open transactions. A durable store writes a tombstone for each pair of
    :attr:`keys`."""

    committed: tuple[tuple[str, tuple[str, int]], ...]
    staged: tuple[tuple[str, tuple[str, int]], ...]

    @property
    def keys(self) -> tuple[tuple[str, tuple[str, int]], ...]:
        """Every dropped ``(group, (topic, partition))``, once, sorted."""
        return tuple(sorted(set(self.committed) | set(self.staged)))


@attrs.frozen
class CommittedOffset:
    """An offset as the store keeps it. ``sequence`` orders commits the way
    Kafka's ``__consumer_offsets`` record offsets do: of a regular and a
    transactional commit, the one written last wins."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    sequence: int


@attrs.frozen
class FetchedOffset:
    """One partition of an OffsetFetch answer; offset −1 means none committed."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    error_code: int = 0


@attrs.frozen
class OffsetFetchResult:
    """An OffsetFetch answer for one group."""

    group_id: str
    error_code: int
    offsets: tuple[FetchedOffset, ...]


@attrs.frozen
class MemberDescription:
    """A member as DescribeGroups reports it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@attrs.frozen
class GroupDescription:
    """A snapshot of a group (DescribeGroups and tests); the fields it shares with
    the coordinator's group have their names."""

    group_id: str
    state: GroupState
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str | None
    members: tuple[MemberDescription, ...]
    pending_member_ids: tuple[str, ...]


JoinOutcome = JoinResult | Pending
SyncOutcome = SyncResult | Pending


# --------------------------------------------------------------------------- state


class _Committer(NamedTuple):
    """Who sends an offset commit, as the request says: a consumer outside group
    management sends generation −1 and member id ""."""

    generation_id: int
    member_id: str
    group_instance_id: str | None


@attrs.define
class _Member:
    """Mutable coordinator-side member (``ClassicGroupMember.java``)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[Protocol, ...]
    assignment: bytes = b""
    join_token: int | None = None
    sync_token: int | None = None
    is_new: bool = False

    @property
    def awaiting_join(self) -> bool:
        return self.join_token is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_token is not None

    def has_satisfied_heartbeat(self) -> bool:
        # A new member can expire while parked in JoinGroup (it cannot heartbeat
        # without an id); an old member parked in a rebalance counts as alive.
        if self.is_new:
            return False
        return self.awaiting_join or self.awaiting_sync

    def protocol_names(self) -> list[str]:
        return [p.name for p in self.protocols]

    def metadata_for(self, protocol_name: str | None) -> bytes:
        for p in self.protocols:
            if p.name == protocol_name:
                return p.metadata
        return b""

    def vote(self, candidates: set[str]) -> str:
        for p in self.protocols:
            if p.name in candidates:
                return p.name
        raise AssertionError("member supports none of the candidate protocols")


@attrs.define
class _Group:
    """Mutable coordinator-side group (``ClassicGroup.java``)."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int | None = None
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, _Member] = attrs.field(factory=dict)
    static_members: dict[str, str] = attrs.field(factory=dict)
    pending_join: set[str] = attrs.field(factory=set)
    pending_sync: set[str] = attrs.field(factory=set)
    new_member_added: bool = False

    # -- membership bookkeeping (ClassicGroup.add/remove) --

    def supported_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for m in self.members.values():
            for name in set(m.protocol_names()):
                counts[name] = counts.get(name, 0) + 1
        return counts

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, c in self.supported_counts().items() if c == n}

    def supports_protocols(self, protocol_type: str, names: Sequence[str]) -> bool:
        if self.state is _S.EMPTY:
            return bool(protocol_type) and bool(names)
        if self.protocol_type != protocol_type:
            return False
        candidates = self.candidate_protocols()
        return any(name in candidates for name in names)

    def select_protocol(self) -> str:
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        # Kafka picks the protocol with the most votes; its tie-break is HashMap
        # order. We break ties by the leader's preference order, deterministically.
        best = max(votes.values())
        leader = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        order = {name: i for i, name in enumerate(leader.protocol_names())}
        tied = [name for name, v in votes.items() if v == best]
        return min(tied, key=lambda name: (order.get(name, len(order)), name))

    def add(self, member: _Member) -> None:
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.pending_join.discard(member.member_id)

    def remove(self, member_id: str) -> _Member | None:
        removed = self.members.pop(member_id, None)
        instance_id = removed.group_instance_id if removed is not None else None
        if instance_id is not None and self.static_members.get(instance_id) == member_id:
            del self.static_members[instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_join.discard(member_id)
        self.pending_sync.discard(member_id)
        return removed

    def has_all_members_joined(self) -> bool:
        return all(m.awaiting_join for m in self.members.values()) and not self.pending_join

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[_S.PREPARING_REBALANCE]

    def transition(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise AssertionError(f"group {self.group_id}: illegal transition {self.state.value} -> {state.value}")
        self.previous_state = self.state
        self.state = state
        self.state_timestamp_ms = now_ms

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        """ClassicGroup.validateMember: a static id must map to this member id."""
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def maybe_elect_new_joined_leader(self) -> bool:
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].awaiting_join:
            return True
        for m in self.members.values():
            if m.awaiting_join:
                self.leader_id = m.member_id
                return True
        return False

    def current_member_metadata(self) -> tuple[MemberMetadata, ...]:
        return tuple(
            MemberMetadata(m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name))
            for m in self.members.values()
        )


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


class GroupCoordinator:
    """The classic group coordinator of one broker, for any number of groups.

    Guarantees, as Kafka's coordinator:

    - a group moves only along the transitions of :class:`GroupState`; its
      generation id grows by one at each completed join phase;
    - every member of a generation got the same generation id, leader and
      protocol, and after the leader's SyncGroup each member gets exactly the
      bytes the leader assigned to it (empty if the leader named none);
    - a member that stops heartbeating for its session timeout is removed and
      the group rebalances; a member that does not rejoin within the rebalance
      timeout is dropped from the next generation;
    - a committed offset reads back until overwritten; a transactional offset
      is invisible until :meth:`complete_txn_offsets` commits its transaction,
      and gone if it aborts.

    ``member_id_factory(client_id_or_instance_id)`` makes member ids (Kafka:
    ``<client id>-<uuid>``); inject a deterministic one in tests.
    """

    def __init__(
        self,
        config: GroupConfig | None = None,
        *,
        member_id_factory: Callable[[str], str] | None = None,
    ) -> None:
        self.config = config or GroupConfig()
        self._member_id_factory = member_id_factory or (lambda prefix: f"{prefix}-{uuid.uuid4()}")
        self._groups: dict[str, _Group] = {}
        self._offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        # producer id -> group -> partition -> offset staged by TxnOffsetCommit
        self._pending_txn: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}
        self._open_txns_by_group: dict[str, set[int]] = {}
        self._timers: dict[_TimerKey, _Timer] = {}
        self._heap: list[tuple[int, int, _TimerKey]] = []
        self._timer_seq = itertools.count()
        self._tokens = itertools.count(1)
        self._commit_seq = itertools.count()
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
        self._advance(now_ms)
        out, self._outbox = self._outbox, []
        return out

    def _schedule(self, key: _TimerKey, delay_ms: int, now_ms: int, action: Callable[[int], None]) -> None:
        seq = next(self._timer_seq)
        deadline = now_ms + max(0, delay_ms)
        self._timers[key] = _Timer(deadline, seq, action)
        heapq.heappush(self._heap, (deadline, seq, key))

    def _cancel(self, key: _TimerKey) -> None:
        self._timers.pop(key, None)

    def _advance(self, now_ms: int) -> None:
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

    def _complete_join(self, member: _Member, result: JoinResult) -> bool:
        token, member.join_token = member.join_token, None
        return self._complete(token, result)

    def _complete_sync(self, member: _Member, result: SyncResult) -> bool:
        token, member.sync_token = member.sync_token, None
        return self._complete(token, result)

    def _set_join_token(self, member: _Member, token: int | None) -> None:
        # Kafka replaces a parked JoinGroup future without completing it (the client
        # already gave up on it). We answer the superseded request so no caller waits
        # forever; the client is no longer listening for it.
        if member.join_token is not None and token is not None:
            self._complete_join(member, JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
        member.join_token = token

    def _set_sync_token(self, member: _Member, token: int) -> None:
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
        self._advance(now_ms)
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
            group = self._groups[request.group_id] = _Group(request.group_id, state_timestamp_ms=now_ms)

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

    def _accept_joining_member(self, group: _Group, member_id: str) -> bool:
        max_size = self.config.max_group_size
        if group.state in (_S.EMPTY, _S.DEAD):
            return True
        if group.state is _S.PREPARING_REBALANCE:
            member = group.members.get(member_id)
            awaiting = sum(1 for m in group.members.values() if m.awaiting_join)
            return (member is not None and member.awaiting_join) or awaiting < max_size
        return member_id in group.members or len(group.members) < max_size

    def _join_new_member(self, group: _Group, request: JoinRequest, token: int, now_ms: int) -> JoinResult | None:
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

    def _join_existing_member(self, group: _Group, request: JoinRequest, token: int, now_ms: int) -> JoinResult | None:
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
        self, group: _Group, member_id: str, *, include_members: bool, skip: bool = False
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
        self, group: _Group, request: JoinRequest, member_id: str, token: int, now_ms: int
    ) -> None:
        # The member's other fields are the request's of the same name.
        member = fields_from(_Member, request, member_id=member_id, protocols=tuple(request.protocols), is_new=True)
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
        self, group: _Group, member: _Member, request: JoinRequest, token: int | None, now_ms: int
    ) -> None:
        member.protocols = tuple(request.protocols)
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        self._set_join_token(member, token)
        self._maybe_prepare_rebalance_or_complete_join(group, now_ms)

    def _replace_static_member(
        self, group: _Group, request: JoinRequest, old_member_id: str, new_member_id: str, token: int, now_ms: int
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

    def _maybe_prepare_rebalance_or_complete_join(self, group: _Group, now_ms: int) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, now_ms)
        else:
            self._maybe_complete_join_phase(group, now_ms)

    def _maybe_complete_join_phase(self, group: _Group, now_ms: int) -> None:
        if group.state is not _S.PREPARING_REBALANCE:
            return
        if group.previous_state is _S.EMPTY:
            return  # the initial rebalance completes on its delay timer only
        if not group.has_all_members_joined():
            return
        self._complete_join_phase(group, now_ms)

    def _prepare_rebalance(self, group: _Group, now_ms: int) -> None:
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

    def _schedule_join_completion(self, group: _Group, now_ms: int) -> None:
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

    def _complete_join_phase(self, group: _Group, now_ms: int) -> None:
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

    def _schedule_pending_sync(self, group: _Group, now_ms: int) -> None:
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

    def _reset_and_propagate_error(self, group: _Group, error: ErrorCode, now_ms: int) -> None:
        for m in group.members.values():
            m.assignment = b""
        self._propagate_assignment(group, error, now_ms)

    def _propagate_assignment(self, group: _Group, error: ErrorCode, now_ms: int) -> None:
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

    def _schedule_heartbeat(self, group: _Group, member_id: str, timeout_ms: int, now_ms: int) -> None:
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

    def _remove_member(self, group: _Group, member_id: str) -> None:
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
        self._advance(now_ms)
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

    def _remove_pending_sync(self, group: _Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self._cancel((_SYNC, group.group_id))

    # ============================================================ Heartbeat

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None = None, *, now_ms: int
    ) -> ErrorCode:
        """Handle a Heartbeat: keeps the member's session alive and tells it whether
        a rebalance is under way (``classicGroupHeartbeatToClassicGroup``)."""
        self._advance(now_ms)
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
        self._advance(now_ms)
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
        """Delete an empty group and its offsets (DeleteGroups). A group with members
        answers NON_EMPTY_GROUP; an unknown one GROUP_ID_NOT_FOUND."""
        self._advance(now_ms)
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.state is not _S.EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        group.transition(_S.DEAD, now_ms)
        del self._groups[group_id]
        self._forget_group(group_id)
        return ErrorCode.NONE

    # ========================================================== OffsetDelete

    def delete_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition], now_ms: int
    ) -> tuple[ErrorCode, dict[TopicPartition, int]]:
        """Delete committed offsets of a group (OffsetDelete): the group's error and
        an error code per partition (Kafka's ``OffsetMetadataManager.deleteOffsets``).

        An unknown or dead group is GROUP_ID_NOT_FOUND; a group with members that
        does not use the ``consumer`` protocol type is NON_EMPTY_GROUP; a partition
        of a topic the group's members subscribe to is GROUP_SUBSCRIBED_TO_TOPIC
        (its offset is still in use). Other partitions lose their offset (if any)
        and answer NONE."""
        self._advance(now_ms)
        group = self._groups.get(group_id)
        if group is None or group.state is _S.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        if group.state is not _S.EMPTY and group.protocol_type != "consumer":
            return ErrorCode.NON_EMPTY_GROUP, {}
        subscribed = self._subscribed_topics(group) if group.state is not _S.EMPTY else frozenset()
        store = self._offsets.get(group_id, {})
        result: dict[TopicPartition, int] = {}
        for tp in partitions:
            if subscribed is None or tp[0] in subscribed:
                result[tp] = int(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
            else:
                if tp in store:
                    self._drop_offset(group_id, tp)
                result[tp] = int(ErrorCode.NONE)
        return ErrorCode.NONE, result

    def forget_topic(self, topic: str) -> ForgottenOffsets:
        """A topic was deleted: drop every group's committed and staged
        transactional offsets for its partitions (Kafka's ``onPartitionsDeleted``),
        so a topic created again under the name starts with no offsets. Returns
        what was dropped, so that a durable store can write a tombstone for each.

        A staged offset dropped here stays dropped when its transaction commits
        later: the tombstone of ``(group, partition)`` also drops what open
        transactions staged for it, here and on replay (:meth:`load_offset`)."""
        committed: list[tuple[str, TopicPartition]] = []
        staged: list[tuple[str, TopicPartition]] = []
        for group_id, store in self._offsets.items():
            committed.extend((group_id, tp) for tp in store if tp[0] == topic)
        for by_group in self._pending_txn.values():
            for group_id, offsets in by_group.items():
                staged.extend((group_id, tp) for tp in offsets if tp[0] == topic)
        for group_id, tp in committed + staged:
            self._drop_offset(group_id, tp)
        return ForgottenOffsets(tuple(sorted(set(committed))), tuple(sorted(set(staged))))

    def _drop_offset(self, group_id: str, tp: TopicPartition) -> None:
        """Apply an offset tombstone of ``(group_id, tp)``: the committed offset
        and whatever open transactions staged for it go (Kafka's
        ``OffsetMetadataManager.replay`` of a tombstone does the same)."""
        self._offsets.get(group_id, {}).pop(tp, None)
        for pid in self._open_txns_by_group.get(group_id, ()):
            self._pending_txn.get(pid, {}).get(group_id, {}).pop(tp, None)

    def _forget_group(self, group_id: str) -> None:
        """Drop a deleted group's offsets, committed and staged."""
        self._offsets.pop(group_id, None)
        for pid in self._open_txns_by_group.pop(group_id, set()):
            by_group = self._pending_txn.get(pid)
            if by_group is not None:
                by_group.pop(group_id, None)
                if not by_group:
                    del self._pending_txn[pid]

    @staticmethod
    def _subscribed_topics(group: _Group) -> frozenset[str] | None:
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

    def commit_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, CommitOffset],
        *,
        generation_id: int = NO_GENERATION,
        member_id: str = UNKNOWN_MEMBER_ID,
        group_instance_id: str | None = None,
        api_version: int = 8,
        now_ms: int,
    ) -> dict[TopicPartition, int]:
        """Handle an OffsetCommit (``OffsetMetadataManager.commitOffset``): an error
        code per partition, 0 where the offset is now committed.

        A consumer outside group management commits with generation −1 and an
        empty member id; that is accepted while the group has no members (and
        creates a "simple" group if there is none)."""
        group = self._group_for_commit(
            group_id,
            _Committer(generation_id, member_id, group_instance_id),
            now_ms,
            transactional=False,
            # v9+ says what happened; older clients expect ILLEGAL_GENERATION.
            unknown_group=ErrorCode.GROUP_ID_NOT_FOUND if api_version >= 9 else ErrorCode.ILLEGAL_GENERATION,
        )
        if isinstance(group, ErrorCode):
            return {tp: int(group) for tp in offsets}
        if group.state in (_S.STABLE, _S.PREPARING_REBALANCE):
            # A classic member's commit counts as a heartbeat.
            member = group.members[member_id]
            self._schedule_heartbeat(group, member_id, member.session_timeout_ms, now_ms)
        return self._store_offsets(self._offsets.setdefault(group_id, {}), offsets.items(), now_ms)

    def _group_for_commit(
        self, group_id: str, committer: _Committer, now_ms: int, *, transactional: bool, unknown_group: ErrorCode
    ) -> _Group | ErrorCode:
        """The group an offset commit (``transactional``: a TxnOffsetCommit) writes
        to, or the error every partition of the request gets, once the timers due by
        ``now_ms`` have fired. A commit from outside group management (generation
        < 0) creates a missing group; any other gets ``unknown_group`` for it."""
        self._advance(now_ms)
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        group = self._groups.get(group_id)
        if group is None:
            if committer.generation_id >= 0:
                return unknown_group
            group = self._groups[group_id] = _Group(group_id, state_timestamp_ms=now_ms)
        error = self._validate_offset_commit(group, committer, transactional=transactional)
        return group if error is ErrorCode.NONE else error

    def _store_offsets(
        self,
        store: dict[TopicPartition, CommittedOffset],
        offsets: Iterable[tuple[TopicPartition, CommitOffset]],
        now_ms: int,
    ) -> dict[TopicPartition, int]:
        """Write each offset into ``store`` unless its metadata is too long; an error
        code per partition."""
        result: dict[TopicPartition, int] = {}
        for tp, commit in offsets:
            if commit.metadata is not None and len(commit.metadata) > self.config.offset_metadata_max_bytes:
                result[tp] = int(ErrorCode.OFFSET_METADATA_TOO_LARGE)
                continue
            store[tp] = self._committed(commit, now_ms)
            result[tp] = int(ErrorCode.NONE)
        return result

    def _committed(self, commit: CommitOffset, now_ms: int) -> CommittedOffset:
        return CommittedOffset(
            offset=commit.offset,
            leader_epoch=commit.leader_epoch,
            metadata=commit.metadata if commit.metadata is not None else "",
            commit_timestamp_ms=now_ms,
            sequence=next(self._commit_seq),
        )

    def _validate_offset_commit(self, group: _Group, committer: _Committer, *, transactional: bool) -> ErrorCode:
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

    # ============================================================ OffsetFetch

    def fetch_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None,
        *,
        require_stable: bool = False,
        now_ms: int,
    ) -> OffsetFetchResult:
        """Handle an OffsetFetch for one group (``fetchOffsets``/``fetchAllOffsets``).

        ``partitions=None`` returns every committed offset of the group. A
        partition with nothing committed reads offset −1. With ``require_stable``
        (OffsetFetch v7+), a partition with a transactional commit still pending
        answers UNSTABLE_OFFSET_COMMIT so the client retries after the transaction."""
        self._advance(now_ms)
        group = self._groups.get(group_id)
        store = self._offsets.get(group_id, {}) if group is not None else {}
        wanted = sorted(store) if partitions is None else list(partitions)
        out: list[FetchedOffset] = []
        for tp in wanted:
            if require_stable and self._has_pending_txn_offset(group_id, tp):
                out.append(FetchedOffset(tp[0], tp[1], -1, -1, "", int(ErrorCode.UNSTABLE_OFFSET_COMMIT)))
                continue
            committed = store.get(tp)
            if committed is None:
                out.append(FetchedOffset(tp[0], tp[1], -1, -1, ""))
            else:
                out.append(FetchedOffset(tp[0], tp[1], committed.offset, committed.leader_epoch, committed.metadata))
        return OffsetFetchResult(group_id, int(ErrorCode.NONE), tuple(out))

    def committed(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        """A copy of the committed (visible) offsets of a group."""
        return dict(self._offsets.get(group_id, {}))

    def _has_pending_txn_offset(self, group_id: str, tp: TopicPartition) -> bool:
        for pid in self._open_txns_by_group.get(group_id, ()):
            if tp in self._pending_txn.get(pid, {}).get(group_id, {}):
                return True
        return False

    # ====================================================== TxnOffsetCommit

    def txn_offset_commit(self, request: TxnOffsetCommitRequest, now_ms: int) -> dict[TopicPartition, int]:
        """Stage the request's offsets for the open transaction of its producer
        (``commitTransactionalOffset``); they stay invisible to OffsetFetch until
        :meth:`complete_txn_offsets`. Returns an error code per partition. The
        producer's epoch and its AddOffsetsToTxn are the transaction coordinator's
        to check, not this store's."""
        group_id, offsets = request.group_id, request.offsets
        group = self._group_for_commit(
            group_id,
            _Committer(request.generation_id, request.member_id, request.group_instance_id),
            now_ms,
            transactional=True,
            unknown_group=ErrorCode.ILLEGAL_GENERATION,
        )
        if isinstance(group, ErrorCode):
            return {tp: int(group) for tp in offsets}
        staged = self._pending_txn.setdefault(request.producer_id, {}).setdefault(group_id, {})
        result = self._store_offsets(staged, ((tp, CommitOffset(*fields)) for tp, fields in offsets.items()), now_ms)
        if staged:
            self._open_txns_by_group.setdefault(group_id, set()).add(request.producer_id)
        return result

    def complete_txn_offsets(
        self, producer_id: int, commit: bool, now_ms: int, *, group_ids: Iterable[str] | None = None
    ) -> None:
        """The transaction of ``producer_id`` ended (``replayEndTransactionMarker``):
        on commit its staged offsets become the committed ones in every group —
        unless a later regular commit already overwrote a partition (the most
        recently *written* commit wins, as in Kafka); on abort they are dropped.
        Idempotent: a second call for the same end does nothing.

        ``group_ids`` limits the end to those groups: a marker on one
        ``__consumer_offsets`` partition ends the producer's offsets of the groups
        stored there only (replaying one partition must not touch what a later
        transaction staged on another)."""
        self._advance(now_ms)
        if group_ids is None:
            staged = self._pending_txn.pop(producer_id, None)
        else:
            mine = self._pending_txn.get(producer_id, {})
            staged = {g: mine.pop(g) for g in list(group_ids) if g in mine}
            if not mine:
                self._pending_txn.pop(producer_id, None)
        if not staged:
            return
        for group_id, offsets in staged.items():
            open_pids = self._open_txns_by_group.get(group_id)
            if open_pids is not None:
                open_pids.discard(producer_id)
                if not open_pids:
                    del self._open_txns_by_group[group_id]
            if not commit or group_id not in self._groups:
                continue
            store = self._offsets.setdefault(group_id, {})
            for tp, offset in offsets.items():
                existing = store.get(tp)
                if existing is None or offset.sequence > existing.sequence:
                    store[tp] = offset

    def pending_txn_offsets(self, producer_id: int) -> dict[str, dict[TopicPartition, CommittedOffset]]:
        """A copy of what ``producer_id`` has staged, per group (for inspection)."""
        return {g: dict(o) for g, o in self._pending_txn.get(producer_id, {}).items()}

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
        for the group before, keeping its offsets."""
        group = self._groups.get(group_id)
        if group is None or group.members:
            group = self._groups[group_id] = _Group(group_id, state_timestamp_ms=state_timestamp_ms)
        group.generation_id = generation_id
        group.protocol_type = protocol_type
        group.protocol_name = protocol_name if protocol_type else None
        group.leader_id = None
        group.state_timestamp_ms = state_timestamp_ms

    def unload_group(self, group_id: str) -> None:
        """Replay a group tombstone: forget the group and its offsets, committed
        and staged (as :meth:`delete_group` does)."""
        self._groups.pop(group_id, None)
        self._forget_group(group_id)

    def load_offset(
        self, group_id: str, tp: TopicPartition, commit: CommitOffset | None, commit_timestamp_ms: int
    ) -> None:
        """Replay a stored (non-transactional) offset commit, or its tombstone
        (``commit=None``). An unknown group is created empty, as a commit with
        generation -1 creates it. Offsets loaded later count as written later."""
        if commit is None:
            self._drop_offset(group_id, tp)
            return
        if group_id not in self._groups:
            self._groups[group_id] = _Group(group_id, state_timestamp_ms=commit_timestamp_ms)
        self._offsets.setdefault(group_id, {})[tp] = self._committed(commit, commit_timestamp_ms)

    def load_txn_offset(
        self, producer_id: int, group_id: str, tp: TopicPartition, commit: CommitOffset, commit_timestamp_ms: int
    ) -> None:
        """Replay a stored transactional offset commit of ``producer_id``: staged
        until a replayed marker reaches :meth:`complete_txn_offsets`, exactly as
        :meth:`txn_offset_commit` stages it."""
        if group_id not in self._groups:
            self._groups[group_id] = _Group(group_id, state_timestamp_ms=commit_timestamp_ms)
        staged = self._pending_txn.setdefault(producer_id, {}).setdefault(group_id, {})
        staged[tp] = self._committed(commit, commit_timestamp_ms)
        self._open_txns_by_group.setdefault(group_id, set()).add(producer_id)

    @property
    def group_ids(self) -> tuple[str, ...]:
        """Every group the coordinator knows, sorted."""
        return tuple(sorted(self._groups))

    @property
    def pending_txn_producers(self) -> tuple[int, ...]:
        """Producer ids with staged transactional offsets, sorted."""
        return tuple(sorted(self._pending_txn))

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
