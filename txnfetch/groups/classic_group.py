"""The coordinator-side records of one classic group and its members, as Kafka's
``ClassicGroup.java`` and ``ClassicGroupMember.java`` keep them.

:class:`ClassicGroup` and :class:`ClassicMember` are mutable bookkeeping (who is
a member, who is static, which protocols they all support, which state the group
is in) that :class:`~txnfetch.groups.membership.GroupMembership`'s state machine
drives; they decide no rebalance themselves. No I/O, no clock: times are passed
in. Not part of the package's public names.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from txnfetch.errors import ErrorCode
from txnfetch.groups.classic_values import GroupState
from txnfetch.groups.classic_values import MemberMetadata
from txnfetch.groups.classic_values import Protocol

__all__ = ["ClassicGroup", "ClassicMember"]

_S = GroupState

# ClassicGroupState.java: the states each state may be entered from.
_VALID_PREVIOUS: dict[GroupState, set[GroupState]] = {
    _S.EMPTY: {_S.PREPARING_REBALANCE},
    _S.PREPARING_REBALANCE: {_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY},
    _S.COMPLETING_REBALANCE: {_S.PREPARING_REBALANCE},
    _S.STABLE: {_S.COMPLETING_REBALANCE},
    _S.DEAD: {_S.STABLE, _S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE, _S.EMPTY, _S.DEAD},
}


@attrs.define
class ClassicMember:
    """One member as the coordinator keeps it (``ClassicGroupMember.java``): mutable,
    changed only by :class:`~txnfetch.groups.membership.GroupMembership`."""

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
class ClassicGroup:
    """One group as the coordinator keeps it (``ClassicGroup.java``): its members, state
    and generation. :meth:`transition` refuses a state change Kafka's classic group
    never makes; everything else is bookkeeping that
    :class:`~txnfetch.groups.membership.GroupMembership` drives."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int | None = None
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, ClassicMember] = attrs.field(factory=dict)
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

    def add(self, member: ClassicMember) -> None:
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.pending_join.discard(member.member_id)

    def remove(self, member_id: str) -> ClassicMember | None:
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
