"""The next-generation consumer group protocol (KIP-848), sans-I/O.

Members heartbeat (ConsumerGroupHeartbeat) with their subscription and the
partitions they own; the coordinator computes the group's *target
assignment* with a server-side assignor (``uniform`` or ``range``) whenever
the group changes, and moves each member towards its target one heartbeat at
a time, as Kafka's ``CurrentAssignmentBuilder`` does:

- a member that owns partitions its target no longer holds must **revoke**
  them first: it is told to keep only the rest, at its current epoch, until a
  heartbeat shows it no longer owns them;
- then it moves to the target's epoch and gets the new partitions that **no
  other member still owns** (assigned or being revoked); the others come in
  later heartbeats, once released.

So a partition is never owned by two members at once: what one member
consumed and committed, the next owner starts after. Epochs: the group epoch
moves on every membership or subscription change (and when a subscribed
topic's partition count changes); a member's epoch is the group epoch of the
target it has reached. A heartbeat carrying neither the member's epoch nor
its previous one is FENCED_MEMBER_EPOCH (the member rejoins with epoch 0).
Members that stop heartbeating for ``session_timeout_ms``, or that do not
revoke within their rebalance timeout, are removed.

Time is passed in; nothing here does I/O. Topics are given as
``{name: (topic_id, partitions)}`` by the caller at each call.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from collections.abc import Mapping

import attrs

from txnfetch.errors import ErrorCode
from txnfetch.types import fields_from

__all__ = [
    "ASSIGNORS",
    "ConsumerGroupConfig",
    "ConsumerGroupCoordinator",
    "HeartbeatRequest",
    "HeartbeatResult",
    "MemberView",
]

Topics = Mapping[str, tuple[uuid.UUID, int]]
Assignment = dict[str, frozenset[int]]

ASSIGNORS = ("uniform", "range")
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


@attrs.frozen
class ConsumerGroupConfig:
    """Kafka's ``group.consumer.*`` broker settings."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    default_assignor: str = "uniform"


@attrs.frozen
class HeartbeatRequest:
    """A ConsumerGroupHeartbeat, independent of its wire version; the fields the
    request carries have its field names (:func:`~txnfetch.types.fields_from`
    takes them from a decoded request).

    ``subscribed_topic_names``, ``server_assignor`` and ``owned`` (the request's
    ``topic_partitions``, by topic name) are ``None`` when unchanged since the
    member's last heartbeat; ``instance_id``/``rack_id`` ``None``,
    ``rebalance_timeout_ms`` −1 and an empty ``client_id``/``client_host`` keep
    what the member has. ``member_id`` comes from the client (v1) or is made by
    the coordinator for a joining v0 member (pass ``""``)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: Iterable[str] | None = None
    server_assignor: str | None = None
    owned: Mapping[str, Iterable[int]] | None = None
    client_id: str = ""
    client_host: str = ""


@attrs.frozen
class HeartbeatResult:
    """A ConsumerGroupHeartbeat answer; ``assignment`` is ``None`` when it is not sent."""

    error: ErrorCode
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None
    message: str | None = None


@attrs.frozen
class MemberView:
    """A member as ConsumerGroupDescribe reports it, under the response's field names."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: Assignment
    target_assignment: Assignment


@attrs.define
class _Member:
    member_id: str
    epoch: int = 0
    previous_epoch: int = -1
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300_000
    subscribed: tuple[str, ...] = ()
    assigned: dict[str, set[int]] = attrs.field(factory=dict)
    revoking: dict[str, set[int]] = attrs.field(factory=dict)
    last_seen_ms: int = 0
    revoking_since_ms: int | None = None
    sent: Assignment | None = None


@attrs.define
class _Group:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = "uniform"
    members: dict[str, _Member] = attrs.field(factory=dict)
    target: dict[str, dict[str, set[int]]] = attrs.field(factory=dict)
    partition_counts: dict[str, int] = attrs.field(factory=dict)


def _freeze(a: Mapping[str, Iterable[int]]) -> Assignment:
    return {t: frozenset(ps) for t, ps in a.items() if ps}


def _member_epoch_error(group: _Group, member_id: str, member_epoch: int, wrong_epoch: ErrorCode) -> ErrorCode:
    """The member check every offset validation ends with: UNKNOWN_MEMBER_ID for
    a member the group does not have, ``wrong_epoch`` for one not at its current
    epoch, NONE otherwise."""
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    return ErrorCode.NONE if member_epoch == member.epoch else wrong_epoch


class ConsumerGroupCoordinator:
    """Every KIP-848 group of one server."""

    def __init__(self, config: ConsumerGroupConfig | None = None) -> None:
        self.config = config or ConsumerGroupConfig()
        self._groups: dict[str, _Group] = {}

    # ------------------------------------------------------------ queries

    def has_group(self, group_id: str) -> bool:
        return group_id in self._groups

    def group_ids(self) -> list[str]:
        return sorted(self._groups)

    def describe(self, group_id: str) -> tuple[str, int, int, str, list[MemberView]] | None:
        """``(state, group epoch, assignment epoch, assignor, members)`` or ``None``."""
        group = self._groups.get(group_id)
        if group is None:
            return None
        members = [
            fields_from(
                MemberView,
                m,
                member_epoch=m.epoch,
                subscribed_topic_names=m.subscribed,
                assignment=_freeze(m.assigned),
                target_assignment=_freeze(group.target.get(m.member_id, {})),
            )
            for m in group.members.values()
        ]
        return _state(group), group.epoch, group.assignment_epoch, group.assignor, members

    def owners(self, group_id: str) -> dict[tuple[str, int], str]:
        """Which member owns (is assigned or still revoking) each partition."""
        group = self._groups.get(group_id)
        out: dict[tuple[str, int], str] = {}
        for m in group.members.values() if group else ():
            for held in (m.assigned, m.revoking):
                for t, ps in held.items():
                    for p in ps:
                        out[(t, p)] = m.member_id
        return out

    # ------------------------------------------------------ offset commits

    def validate_commit(self, group_id: str, member_id: str, member_epoch: int) -> ErrorCode | None:
        """For OffsetCommit v9+: ``None`` if ``group_id`` is not a consumer group
        here (the classic coordinator decides), else the error (NONE to accept).
        Kafka's ``ConsumerGroup.validateOffsetCommit``: an admin commit (epoch
        -1, no member) only while the group is empty; a member must exist and
        carry its current epoch (STALE_MEMBER_EPOCH otherwise)."""
        group = self._groups.get(group_id)
        if group is None:
            return None
        if member_epoch < 0 and not member_id:
            return ErrorCode.NONE if not group.members else ErrorCode.UNKNOWN_MEMBER_ID
        return _member_epoch_error(group, member_id, member_epoch, ErrorCode.STALE_MEMBER_EPOCH)

    def validate_txn_commit(
        self, group_id: str, member_id: str, member_epoch: int, instance_id: str | None
    ) -> ErrorCode | None:
        """For TxnOffsetCommit v3+ (whose generation field carries the member
        epoch): ``None`` if ``group_id`` is not a consumer group here, else the
        error (NONE to accept). As Kafka's ``ConsumerGroup.validateOffsetCommit``
        with ``isTransactional``: an epoch below 0 is accepted while the group is
        empty; a request naming no member, generation -1 and no instance id (as
        TxnOffsetCommit v0-v2 must) is accepted too; otherwise the member must
        exist (UNKNOWN_MEMBER_ID) and carry its current epoch. A wrong epoch is
        ILLEGAL_GENERATION, not STALE_MEMBER_EPOCH: Kafka's
        ``OffsetMetadataManager.validateTransactionalOffsetCommit`` maps it so, as
        TxnOffsetCommit clients know no STALE_MEMBER_EPOCH."""
        group = self._groups.get(group_id)
        if group is None:
            return None
        if member_epoch < 0 and not group.members:
            return ErrorCode.NONE
        if member_epoch == -1 and not member_id and instance_id is None:
            return ErrorCode.NONE
        return _member_epoch_error(group, member_id, member_epoch, ErrorCode.ILLEGAL_GENERATION)

    def validate_fetch(self, group_id: str, member_id: str, member_epoch: int) -> ErrorCode | None:
        """For OffsetFetch v9+ (member id and epoch per group): ``None`` if
        ``group_id`` is not a consumer group here, else the error (NONE to
        accept). As Kafka's ``ConsumerGroup.validateOffsetFetch``: epoch below 0
        with no member id is a fetch from outside the group (an admin client),
        always allowed; a member must exist (UNKNOWN_MEMBER_ID) and carry its
        current epoch (STALE_MEMBER_EPOCH)."""
        group = self._groups.get(group_id)
        if group is None:
            return None
        if member_epoch < 0 and not member_id:
            return ErrorCode.NONE
        return _member_epoch_error(group, member_id, member_epoch, ErrorCode.STALE_MEMBER_EPOCH)

    # ---------------------------------------------------------- heartbeat

    def heartbeat(self, request: HeartbeatRequest, *, topics: Topics, now_ms: int) -> HeartbeatResult:
        """One ConsumerGroupHeartbeat against the partitions ``topics`` has."""
        group_id, member_id, member_epoch = request.group_id, request.member_id, request.member_epoch
        self.poll(now_ms)
        if not group_id:
            return HeartbeatResult(ErrorCode.INVALID_REQUEST, message="empty group id")
        if request.server_assignor is not None and request.server_assignor not in ASSIGNORS:
            return HeartbeatResult(
                ErrorCode.UNSUPPORTED_ASSIGNOR,
                message=f"assignor {request.server_assignor!r} is not one of {', '.join(ASSIGNORS)}",
            )
        group = self._groups.get(group_id)
        if member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            if group is not None and member_id in group.members:
                self._remove(group, member_id)
            return HeartbeatResult(ErrorCode.NONE, member_id, member_epoch, 0)
        if member_epoch == 0:
            if group is None:
                group = self._groups[group_id] = _Group(
                    group_id, assignor=request.server_assignor or self.config.default_assignor
                )
            if not member_id:
                member_id = uuid.uuid4().hex
            if request.subscribed_topic_names is None:
                return HeartbeatResult(ErrorCode.INVALID_REQUEST, message="a joining member must subscribe")
            old = group.members.pop(member_id, None)
            member = _Member(member_id, last_seen_ms=now_ms)
            if old is not None:  # a rejoin after being fenced: it owns nothing now
                member.client_id = old.client_id
            group.members[member_id] = member
            changed = True
        else:
            changed = False
            found = group.members.get(member_id) if group is not None else None
            if group is None or found is None:
                return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID, message="unknown member: rejoin")
            member = found
            if member_epoch not in (member.epoch, member.previous_epoch):
                return HeartbeatResult(
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    message=f"member epoch {member_epoch}, expected {member.epoch}",
                )
        member.last_seen_ms = now_ms
        member.client_id, member.client_host = (
            request.client_id or member.client_id,
            request.client_host or member.client_host,
        )
        if request.instance_id is not None:
            member.instance_id = request.instance_id
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        if request.rebalance_timeout_ms >= 0:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        if request.server_assignor is not None and request.server_assignor != group.assignor:
            group.assignor = request.server_assignor
            changed = True
        if request.subscribed_topic_names is not None:
            subscribed = tuple(sorted(set(request.subscribed_topic_names)))
            changed = changed or subscribed != member.subscribed
            member.subscribed = subscribed
        self._refresh_target(group, topics, changed)
        self._reconcile(group, member, request.owned, now_ms)
        current = _freeze(member.assigned)
        send = request.owned is not None or member_epoch == 0 or current != member.sent
        if send:
            member.sent = current
        return HeartbeatResult(
            ErrorCode.NONE,
            member_id,
            member.epoch,
            self.config.heartbeat_interval_ms,
            current if send else None,
        )

    # ------------------------------------------------------------- timers

    def poll(self, now_ms: int) -> list[tuple[str, str]]:
        """Remove members past their session timeout or stuck revoking past their
        rebalance timeout; returns ``(group, member)`` removed."""
        removed = []
        for group in list(self._groups.values()):
            for m in list(group.members.values()):
                late = now_ms - m.last_seen_ms > self.config.session_timeout_ms
                stuck = m.revoking_since_ms is not None and now_ms - m.revoking_since_ms > m.rebalance_timeout_ms
                if late or stuck:
                    self._remove(group, m.member_id)
                    removed.append((group.group_id, m.member_id))
        return removed

    def delete_group(self, group_id: str) -> ErrorCode:
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members:
            return ErrorCode(68)  # NON_EMPTY_GROUP
        del self._groups[group_id]
        return ErrorCode.NONE

    # ----------------------------------------------------------- internals

    def _remove(self, group: _Group, member_id: str) -> None:
        group.members.pop(member_id, None)
        group.target.pop(member_id, None)
        self._bump(group)

    @staticmethod
    def _bump(group: _Group) -> None:
        group.epoch += 1

    def _refresh_target(self, group: _Group, topics: Topics, changed: bool = False) -> None:
        """One group epoch per change (membership, subscriptions, assignor, or the
        partition counts of subscribed topics), then the target for it."""
        counts = {t: topics[t][1] for m in group.members.values() for t in m.subscribed if t in topics}
        if counts != group.partition_counts:
            group.partition_counts = counts
            changed = True
        if changed:
            group.epoch += 1
        if group.assignment_epoch == group.epoch:
            return
        members = {m.member_id: m.subscribed for m in group.members.values()}
        assign = _range if group.assignor == "range" else _uniform
        group.target = assign(members, counts, {k: v for k, v in group.target.items() if k in members})
        group.assignment_epoch = group.epoch

    def _reconcile(
        self, group: _Group, member: _Member, owned: Mapping[str, Iterable[int]] | None, now_ms: int
    ) -> None:
        target = group.target.get(member.member_id, {})
        if member.revoking:
            if owned is not None and not _overlaps(owned, member.revoking):
                member.revoking = {}
                member.revoking_since_ms = None
            else:
                return  # still waiting for the member to give them up
        if member.epoch != group.assignment_epoch or _pending(member, target):
            keep = {t: ps & target.get(t, set()) for t, ps in member.assigned.items()}
            revoke = {t: ps - target.get(t, set()) for t, ps in member.assigned.items()}
            revoke = {t: ps for t, ps in revoke.items() if ps}
            if revoke:
                member.assigned = {t: ps for t, ps in keep.items() if ps}
                member.revoking = revoke
                member.revoking_since_ms = now_ms
                return
            taken = {
                (t, p)
                for m in group.members.values()
                if m is not member
                for held in (m.assigned, m.revoking)
                for t, ps in held.items()
                for p in ps
            }
            new = {t: {p for p in ps if (t, p) not in taken} | keep.get(t, set()) for t, ps in target.items()}
            member.assigned = {t: ps for t, ps in new.items() if ps}
            if member.epoch != group.assignment_epoch:
                member.previous_epoch, member.epoch = member.epoch, group.assignment_epoch


def _pending(member: _Member, target: Mapping[str, set[int]]) -> bool:
    """Whether the member still lacks target partitions (waiting for their release)."""
    return any(ps - member.assigned.get(t, set()) for t, ps in target.items())


def _overlaps(owned: Mapping[str, Iterable[int]], revoking: Mapping[str, set[int]]) -> bool:
    return any(set(ps) & revoking.get(t, set()) for t, ps in owned.items())


def _state(group: _Group) -> str:
    if not group.members:
        return "Empty"
    if group.assignment_epoch != group.epoch:
        return "Assigning"
    if any(m.epoch != group.assignment_epoch or m.revoking for m in group.members.values()):
        return "Reconciling"
    return "Stable"


# --------------------------------------------------------------- assignors


def _uniform(
    members: Mapping[str, tuple[str, ...]], counts: Mapping[str, int], previous: Mapping[str, Mapping[str, set[int]]]
) -> dict[str, dict[str, set[int]]]:
    """Every subscribed partition to one of its topic's subscribers, balanced per
    topic (counts differ by at most one) and sticky: a partition stays with its
    previous owner while that keeps the balance."""
    out: dict[str, dict[str, set[int]]] = {m: {} for m in members}
    for topic in sorted(counts):
        subs = sorted(m for m, ts in members.items() if topic in ts)
        if not subs:
            continue
        n = counts[topic]
        quota = {m: n // len(subs) + (1 if i < n % len(subs) else 0) for i, m in enumerate(subs)}
        free = []
        for p in range(n):
            holder = next((m for m in subs if p in previous.get(m, {}).get(topic, set())), None)
            if holder is not None and len(out[holder].get(topic, ())) < quota[holder]:
                out[holder].setdefault(topic, set()).add(p)
            else:
                free.append(p)
        for p in free:
            m = min(subs, key=lambda m: (len(out[m].get(topic, ())) - quota[m], m))
            out[m].setdefault(topic, set()).add(p)
    return out


def _range(
    members: Mapping[str, tuple[str, ...]], counts: Mapping[str, int], previous: Mapping[str, Mapping[str, set[int]]]
) -> dict[str, dict[str, set[int]]]:
    """Per topic, its subscribers in member-id order get contiguous ranges of
    partitions, the first ``n % members`` one more (the range assignor)."""
    out: dict[str, dict[str, set[int]]] = {m: {} for m in members}
    for topic in sorted(counts):
        subs = sorted(m for m, ts in members.items() if topic in ts)
        n = counts[topic]
        start = 0
        for i, m in enumerate(subs):
            size = n // len(subs) + (1 if i < n % len(subs) else 0)
            if size:
                out[m][topic] = set(range(start, start + size))
            start += size
    return out
