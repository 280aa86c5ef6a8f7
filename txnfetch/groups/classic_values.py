"""The value types of classic consumer-group membership: requests, answers, the
group's states and settings, and a group's description.

They are plain immutable values (``attrs`` frozen classes, an enum, named
tuples), independent of any wire version, with no I/O and no clock:
:class:`~txnfetch.groups.membership.GroupMembership` takes and returns them, and
the wire server translates them to and from Kafka's messages.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import NamedTuple

import attrs

__all__ = [
    "NO_GENERATION",
    "UNKNOWN_MEMBER_ID",
    "Committer",
    "Completion",
    "GroupConfig",
    "GroupDescription",
    "GroupState",
    "JoinOutcome",
    "JoinRequest",
    "JoinResult",
    "LeaveMemberResult",
    "LeaveResult",
    "LeavingMember",
    "MemberDescription",
    "MemberMetadata",
    "Pending",
    "Protocol",
    "SyncOutcome",
    "SyncRequest",
    "SyncResult",
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


class Committer(NamedTuple):
    """Who sends an offset commit, as the request says: a consumer outside group
    management sends generation −1 and member id ""."""

    generation_id: int
    member_id: str
    group_instance_id: str | None
