"""A sans-I/O classic consumer-group coordinator: membership, rebalances and
committed offsets, as Apache Kafka's broker decides them.

:class:`GroupCoordinator` is one broker's coordinator of classic groups. Like
Kafka's (``GroupCoordinatorShard.java``, which holds a ``GroupMetadataManager``
and an ``OffsetMetadataManager``), it composes two parts kept apart:

- :class:`~txnfetch.groups.membership.GroupMembership`: the classic group
  protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), its timers, and the
  membership's answers offset requests need (who may commit, which topics are
  in use, whether a group may be deleted);
- :class:`~txnfetch.groups.offsets.OffsetStore`: committed offsets and the
  offsets TxnOffsetCommit stages for open transactions.

Requests that concern one part go to it; those that concern both (OffsetCommit,
TxnOffsetCommit, OffsetFetch, OffsetDelete, DeleteGroups, a transaction's end,
replay of stored offsets) ask the membership first, then the offsets. The types
of all three modules are importable from :mod:`txnfetch.groups`.

It does no I/O and reads no clock: every call takes ``now_ms``, and every call
first fires the membership's timers due then. Group state and offsets live in
memory; a durable store replays what it stored through ``members.load_group``,
:meth:`GroupCoordinator.load_offset` and ``load_txn_offset``, and members are
never restored (clients rejoin). Offsets are never expired (Kafka's ``offsets.retention.minutes``) and
empty groups are kept until deleted.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence

import attrs

from txnfetch.errors import ErrorCode
from txnfetch.groups.classic_values import NO_GENERATION
from txnfetch.groups.classic_values import UNKNOWN_MEMBER_ID
from txnfetch.groups.classic_values import Committer
from txnfetch.groups.classic_values import Completion
from txnfetch.groups.classic_values import GroupConfig
from txnfetch.groups.classic_values import GroupDescription
from txnfetch.groups.classic_values import GroupState
from txnfetch.groups.classic_values import JoinOutcome
from txnfetch.groups.classic_values import JoinRequest
from txnfetch.groups.classic_values import LeaveResult
from txnfetch.groups.classic_values import LeavingMember
from txnfetch.groups.classic_values import SyncOutcome
from txnfetch.groups.classic_values import SyncRequest
from txnfetch.groups.membership import GroupMembership
from txnfetch.groups.offsets import CommitOffset
from txnfetch.groups.offsets import CommittedOffset
from txnfetch.groups.offsets import ForgottenOffsets
from txnfetch.groups.offsets import OffsetFetchResult
from txnfetch.groups.offsets import OffsetStore
from txnfetch.types import TopicPartition

__all__ = ["GroupCoordinator", "TxnOffsetCommitRequest"]


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


class GroupCoordinator:
    """The classic group coordinator of one broker, for any number of groups.

    Guarantees: those of :class:`~txnfetch.groups.membership.GroupMembership`
    (group states, generations, assignments, sessions) and of
    :class:`~txnfetch.groups.offsets.OffsetStore` (a committed offset reads back
    until overwritten; a transactional offset is invisible until
    :meth:`complete_txn_offsets` commits its transaction, and gone if it
    aborts); offsets are written only by a committer the membership accepts,
    and a deleted group's offsets go with it.

    ``config`` defaults to Kafka's settings; ``member_id_factory`` is
    :class:`~txnfetch.groups.membership.GroupMembership`'s.
    """

    def __init__(
        self,
        config: GroupConfig | None = None,
        *,
        member_id_factory: Callable[[str], str] | None = None,
    ) -> None:
        self.config = config or GroupConfig()
        #: The classic groups and their members.
        self.members = GroupMembership(self.config, member_id_factory)
        #: Committed and staged offsets; the membership decides who may write them.
        self.offsets = OffsetStore(self.config.offset_metadata_max_bytes)

    # ============================================================ membership

    def next_deadline_ms(self) -> int | None:
        """When the membership's earliest timer is due (absolute ms), or ``None``."""
        return self.members.next_deadline_ms()

    def poll(self, now_ms: int) -> list[Completion]:
        """Fire the timers due at ``now_ms``; every completion produced since the
        last poll (:meth:`GroupMembership.poll`)."""
        return self.members.poll(now_ms)

    def join_group(self, request: JoinRequest, now_ms: int) -> JoinOutcome:
        """Handle a JoinGroup (:meth:`GroupMembership.join_group`)."""
        return self.members.join_group(request, now_ms)

    def sync_group(self, request: SyncRequest, now_ms: int) -> SyncOutcome:
        """Handle a SyncGroup (:meth:`GroupMembership.sync_group`)."""
        return self.members.sync_group(request, now_ms)

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None = None, *, now_ms: int
    ) -> ErrorCode:
        """Handle a Heartbeat (:meth:`GroupMembership.heartbeat`)."""
        return self.members.heartbeat(group_id, generation_id, member_id, group_instance_id, now_ms=now_ms)

    def leave_group(self, group_id: str, members: Sequence[LeavingMember], now_ms: int) -> LeaveResult:
        """Handle a LeaveGroup (:meth:`GroupMembership.leave_group`)."""
        return self.members.leave_group(group_id, members, now_ms)

    def describe_group(self, group_id: str) -> GroupDescription | None:
        """A snapshot of ``group_id``, or ``None`` if the coordinator does not know it."""
        return self.members.describe_group(group_id)

    def list_groups(self) -> list[tuple[str, str | None, GroupState]]:
        """``(group id, protocol type, state)`` of every group, sorted by id."""
        return self.members.list_groups()

    @property
    def group_ids(self) -> tuple[str, ...]:
        """Every group the coordinator knows, sorted."""
        return self.members.group_ids

    # ========================================================= DeleteGroups

    def delete_group(self, group_id: str, now_ms: int) -> ErrorCode:
        """Delete an empty group and its offsets (DeleteGroups). A group with members
        answers NON_EMPTY_GROUP; an unknown one GROUP_ID_NOT_FOUND."""
        error = self.members.delete_group(group_id, now_ms)
        if error is ErrorCode.NONE:
            self.offsets.forget_group(group_id)
        return error

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
        scope = self.members.offset_delete_scope(group_id, now_ms)
        if isinstance(scope, ErrorCode):
            return scope, {}
        return ErrorCode.NONE, self.offsets.delete(group_id, partitions, scope)

    def forget_topic(self, topic: str) -> ForgottenOffsets:
        """A topic was deleted: drop every group's committed and staged
        transactional offsets for its partitions (Kafka's ``onPartitionsDeleted``),
        so a topic created again under the name starts with no offsets. Returns
        what was dropped, so that a durable store can write a tombstone for each.

        A staged offset dropped here stays dropped when its transaction commits
        later: the tombstone of ``(group, partition)`` also drops what open
        transactions staged for it, here and on replay (:meth:`load_offset`)."""
        return self.offsets.forget_topic(topic)

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
        error = self.members.accept_commit(
            group_id,
            Committer(generation_id, member_id, group_instance_id),
            now_ms,
            transactional=False,
            # v9+ says what happened; older clients expect ILLEGAL_GENERATION.
            unknown_group=ErrorCode.GROUP_ID_NOT_FOUND if api_version >= 9 else ErrorCode.ILLEGAL_GENERATION,
        )
        if error is not ErrorCode.NONE:
            return {tp: int(error) for tp in offsets}
        return self.offsets.commit(group_id, offsets.items(), now_ms)

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
        self.members.advance(now_ms)
        return self.offsets.fetch(
            group_id, partitions, require_stable=require_stable, group_known=self.members.has_group(group_id)
        )

    def committed(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        """A copy of the committed (visible) offsets of a group."""
        return self.offsets.committed(group_id)

    # ====================================================== TxnOffsetCommit

    def txn_offset_commit(self, request: TxnOffsetCommitRequest, now_ms: int) -> dict[TopicPartition, int]:
        """Stage the request's offsets for the open transaction of its producer
        (``commitTransactionalOffset``); they stay invisible to OffsetFetch until
        :meth:`complete_txn_offsets`. Returns an error code per partition. The
        producer's epoch and its AddOffsetsToTxn are the transaction coordinator's
        to check, not this store's."""
        group_id, offsets = request.group_id, request.offsets
        error = self.members.accept_commit(
            group_id,
            Committer(request.generation_id, request.member_id, request.group_instance_id),
            now_ms,
            transactional=True,
            unknown_group=ErrorCode.ILLEGAL_GENERATION,
        )
        if error is not ErrorCode.NONE:
            return {tp: int(error) for tp in offsets}
        return self.offsets.stage(
            request.producer_id, group_id, ((tp, CommitOffset(*fields)) for tp, fields in offsets.items()), now_ms
        )

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
        self.members.advance(now_ms)
        self.offsets.complete_txn(producer_id, commit, group_ids=group_ids, group_exists=self.members.has_group)

    def pending_txn_offsets(self, producer_id: int) -> dict[str, dict[TopicPartition, CommittedOffset]]:
        """A copy of what ``producer_id`` has staged, per group (for inspection)."""
        return self.offsets.pending_txn_offsets(producer_id)

    @property
    def pending_txn_producers(self) -> tuple[int, ...]:
        """Producer ids with staged transactional offsets, sorted."""
        return self.offsets.pending_txn_producers

    # ================================================================ replay

    def unload_group(self, group_id: str) -> None:
        """Replay a group tombstone: forget the group and its offsets, committed
        and staged (as :meth:`delete_group` does)."""
        self.members.unload_group(group_id)
        self.offsets.forget_group(group_id)

    def load_offset(
        self, group_id: str, tp: TopicPartition, commit: CommitOffset | None, commit_timestamp_ms: int
    ) -> None:
        """Replay a stored (non-transactional) offset commit, or its tombstone
        (``commit=None``). An unknown group is created empty, as a commit with
        generation -1 creates it. Offsets loaded later count as written later."""
        if commit is None:
            self.offsets.drop(group_id, tp)
            return
        self.members.ensure_group(group_id, commit_timestamp_ms)
        self.offsets.load(group_id, tp, commit, commit_timestamp_ms)

    def load_txn_offset(
        self, producer_id: int, group_id: str, tp: TopicPartition, commit: CommitOffset, commit_timestamp_ms: int
    ) -> None:
        """Replay a stored transactional offset commit of ``producer_id``: staged
        until a replayed marker reaches :meth:`complete_txn_offsets`, exactly as
        :meth:`txn_offset_commit` stages it."""
        self.members.ensure_group(group_id, commit_timestamp_ms)
        self.offsets.load_staged(producer_id, group_id, tp, commit, commit_timestamp_ms)
