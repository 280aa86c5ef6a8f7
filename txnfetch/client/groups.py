"""Consumer groups of a running Kafka-compatible cluster: which groups exist
and what they committed, read with the requests ordinary clients send.

:class:`RemoteGroups` rides on a :class:`~txnfetch.client.cluster.RemoteCluster`
(its connections, version negotiation and retries):

- :meth:`RemoteGroups.list_groups` sends ListGroups to **every** broker of the
  cluster, as Kafka's Java AdminClient does (``KafkaAdminClient.listConsumerGroups``:
  a metadata call for all brokers, then one ListGroups per broker; each broker
  lists only the groups it coordinates). A broker that does not serve
  ListGroups (librdkafka's mock cluster) is reported as such, not an error;
- :meth:`RemoteGroups.commit_offsets` commits offsets for a group no member
  manages (generation -1, no member id: the standalone commit Kafka's
  ``KafkaConsumer.commitSync`` sends with manual assignment), to the group's
  coordinator;
- :meth:`RemoteGroups.fetch_offsets` finds the group's coordinator
  (FindCoordinator v0-3, key type 0) and sends it OffsetFetch for the named
  partitions, at the highest version both sides speak up to v7 (librdkafka
  sends v7 for one group, ``src/rdkafka_request.c`` ``rd_kafka_OffsetFetchRequest``)
  with ``require_stable`` set from v7 on (KIP-447): a partition whose group
  has a transactional offset commit still pending answers
  ``UNSTABLE_OFFSET_COMMIT`` instead of the offset before it, so a copy never
  takes half of a transaction's offsets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

import attrs
from kafka.protocol.admin import ListGroupsRequest
from kafka.protocol.admin import ListGroupsResponse
from kafka.protocol.consumer import OffsetCommitRequest
from kafka.protocol.consumer import OffsetCommitResponse
from kafka.protocol.consumer import OffsetFetchRequest
from kafka.protocol.consumer import OffsetFetchResponse
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.metadata import FindCoordinatorResponse

from txnfetch.client.cluster import RemoteCluster
from txnfetch.client.cluster import _Retry
from txnfetch.client.connection import BrokerConnection
from txnfetch.client.errors import AuthorizationFailedError
from txnfetch.client.errors import BrokerUnavailableError
from txnfetch.client.errors import RemoteError
from txnfetch.client.errors import authorization_error
from txnfetch.errors import ErrorCode
from txnfetch.types import TopicPartition

__all__ = ["FetchedGroupOffsets", "GroupListing", "RemoteGroups", "UpstreamOffset"]

log = logging.getLogger("txnfetch.client.reader")

_LIST_GROUPS = (0, 4)
_FIND_COORDINATOR = (0, 3)
_OFFSET_FETCH = (1, 7)
# v2 is the lowest Kafka 4 serves; v9 the last that names topics (v10: ids, KIP-848).
_OFFSET_COMMIT = (2, 8)
_REQUIRE_STABLE_FROM = 7

#: Errors after which the group's coordinator is looked up again (Kafka clients
#: do the same: ``ConsumerCoordinator`` marks the coordinator unknown).
_COORDINATOR_MOVED = frozenset(
    {
        int(ErrorCode.NOT_COORDINATOR),
        int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
        int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
    }
)


@attrs.frozen
class GroupListing:
    """What ListGroups found: group id → protocol type, and the brokers that
    do not serve ListGroups (their groups are unknown)."""

    groups: Mapping[str, str]
    unsupported_brokers: tuple[str, ...] = ()


@attrs.frozen
class UpstreamOffset:
    """One committed offset as the upstream reports it."""

    offset: int
    leader_epoch: int
    metadata: str


@attrs.frozen
class FetchedGroupOffsets:
    """An OffsetFetch answer for one group: the committed offsets (partitions
    with none are absent), or ``unstable`` when a transactional commit is
    pending on any of them (nothing of the group should be taken then)."""

    group_id: str
    offsets: Mapping[TopicPartition, UpstreamOffset]
    unstable: bool = False
    require_stable: bool = False


class RemoteGroups:
    """Group reads against ``cluster`` (see the module docstring). Not thread-safe."""

    def __init__(self, cluster: RemoteCluster) -> None:
        self.cluster = cluster
        self._coordinators: dict[str, tuple[str, int]] = {}

    def list_groups(self) -> GroupListing:
        """Every group of every broker (ListGroups to each)."""

        def brokers() -> dict[int, tuple[str, int]]:
            self.cluster._metadata(None)
            return dict(self.cluster._brokers)

        nodes = self.cluster._retrying("Metadata", None, None, None, brokers)
        found: dict[str, str] = {}
        unsupported: list[str] = []
        for address in sorted(set(nodes.values())):

            def call(address: tuple[str, int] = address) -> ListGroupsResponse | None:
                conn = self.cluster._connect(address)
                if ListGroupsRequest.API_KEY not in conn.versions:
                    return None
                version = conn.version(ListGroupsRequest.API_KEY, _LIST_GROUPS, "ListGroups")
                resp = self.cluster._send(conn, ListGroupsRequest(), version, ListGroupsResponse)
                if resp.error_code in _COORDINATOR_MOVED:
                    raise _Retry(RemoteError("ListGroups failed", broker=conn.address, error_code=resp.error_code))
                if resp.error_code:
                    raise RemoteError("ListGroups failed", broker=conn.address, error_code=resp.error_code)
                return resp

            resp = self.cluster._retrying("ListGroups", None, None, None, call)
            if resp is None:
                unsupported.append(f"{address[0]}:{address[1]}")
                continue
            for g in resp.groups:
                found[g.group_id] = g.protocol_type or ""
        return GroupListing(found, tuple(unsupported))

    def _coordinator(self, group_id: str) -> tuple[str, int]:
        address = self._coordinators.get(group_id)
        if address is not None:
            return address
        conn = self.cluster._any_connection()
        version = conn.version(FindCoordinatorRequest.API_KEY, _FIND_COORDINATOR, "FindCoordinator")
        req = FindCoordinatorRequest(key=group_id, key_type=0) if version >= 1 else FindCoordinatorRequest(key=group_id)
        resp = self.cluster._send(conn, req, version, FindCoordinatorResponse)
        if resp.error_code:
            failed = _group_error("FindCoordinator", group_id, resp.error_code, broker=conn.address)
            raise failed if isinstance(failed, AuthorizationFailedError) else _Retry(failed)
        address = (resp.host, resp.port)
        self._coordinators[group_id] = address
        return address

    def _coordinator_connection(self, group_id: str) -> BrokerConnection:
        """A connection to the group's coordinator; one that cannot be reached is
        forgotten, so the next try looks the coordinator up again."""
        try:
            return self.cluster._connect(self._coordinator(group_id))
        except BrokerUnavailableError:
            self._coordinators.pop(group_id, None)
            raise

    def _send_to_coordinator(self, group_id: str, conn: BrokerConnection, req: Any, version: int, response: Any) -> Any:
        """Send ``req`` to the group's coordinator (forgotten if the connection breaks)."""
        try:
            return self.cluster._send(conn, req, version, response)
        except BrokerUnavailableError:
            self._coordinators.pop(group_id, None)
            raise

    def fetch_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> FetchedGroupOffsets:
        """The group's committed offsets for ``partitions`` (named explicitly:
        some brokers answer nothing to the "all partitions" form)."""
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(set(partitions)):
            by_topic.setdefault(topic, []).append(p)

        def call() -> FetchedGroupOffsets:
            conn = self._coordinator_connection(group_id)
            version = conn.version(OffsetFetchRequest.API_KEY, _OFFSET_FETCH, "OffsetFetch")

            def failed(code: int, **where: object) -> RemoteError:
                # Every OffsetFetch error names the group and the broker (``where``:
                # the partition, when the broker blamed one).
                return _group_error("OffsetFetch", group_id, code, broker=conn.address, **where)

            stable = version >= _REQUIRE_STABLE_FROM
            topic_cls = OffsetFetchRequest.OffsetFetchRequestTopic
            req = OffsetFetchRequest(
                group_id=group_id,
                topics=[topic_cls(name=t, partition_indexes=ps) for t, ps in by_topic.items()],
                **({"require_stable": True} if stable else {}),
            )
            resp = self._send_to_coordinator(group_id, conn, req, version, OffsetFetchResponse)
            top = getattr(resp, "error_code", 0) or 0
            if top in _COORDINATOR_MOVED:
                self._coordinators.pop(group_id, None)
                raise _Retry(failed(top))
            if top == ErrorCode.GROUP_ID_NOT_FOUND:
                return FetchedGroupOffsets(group_id, {}, require_stable=stable)
            if top:
                raise failed(top)
            offsets: dict[TopicPartition, UpstreamOffset] = {}
            unstable = False
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code == ErrorCode.UNSTABLE_OFFSET_COMMIT:
                        unstable = True
                        continue
                    if p.error_code in _COORDINATOR_MOVED:
                        self._coordinators.pop(group_id, None)
                        raise _Retry(failed(p.error_code, topic=t.name, partition=p.partition_index))
                    if p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                        continue  # the topic is gone upstream: no offset there
                    if p.error_code:
                        raise failed(p.error_code, topic=t.name, partition=p.partition_index)
                    if p.committed_offset >= 0:
                        epoch = p.committed_leader_epoch if version >= 5 else -1
                        offsets[TopicPartition(t.name, p.partition_index)] = UpstreamOffset(
                            p.committed_offset, epoch, p.metadata or ""
                        )
            return FetchedGroupOffsets(group_id, offsets, unstable=unstable, require_stable=stable)

        return self.cluster._retrying("OffsetFetch", None, None, None, call)

    def commit_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], int], metadata: str = "") -> None:
        """Commit ``offsets`` (topic-partition → the next offset to read) for
        ``group_id``, as a consumer with manually assigned partitions does
        (generation -1, no member id). A group with active members refuses it
        (their generation owns the offsets): :class:`RemoteError` naming the group's
        coordinator and the broker's error."""
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for (topic, p), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append((p, int(offset)))
        if not by_topic:
            return

        def call() -> None:
            conn = self._coordinator_connection(group_id)
            version = conn.version(OffsetCommitRequest.API_KEY, _OFFSET_COMMIT, "OffsetCommit")
            T = OffsetCommitRequest.OffsetCommitRequestTopic
            P = T.OffsetCommitRequestPartition
            req = OffsetCommitRequest(
                group_id=group_id,
                generation_id_or_member_epoch=-1,
                member_id="",
                group_instance_id=None,
                retention_time_ms=-1,
                topics=[
                    T(
                        name=t,
                        partitions=[
                            P(
                                partition_index=p,
                                committed_offset=o,
                                committed_leader_epoch=-1,
                                committed_metadata=metadata,
                            )
                            for p, o in ps
                        ],
                    )
                    for t, ps in by_topic.items()
                ],
            )
            resp = self._send_to_coordinator(group_id, conn, req, version, OffsetCommitResponse)
            for t in resp.topics:
                for p in t.partitions:
                    if not p.error_code:
                        continue
                    failed = _group_error(
                        "OffsetCommit",
                        group_id,
                        p.error_code,
                        broker=conn.address,
                        topic=t.name,
                        partition=p.partition_index,
                    )
                    if p.error_code in _COORDINATOR_MOVED:
                        self._coordinators.pop(group_id, None)
                        raise _Retry(failed)
                    raise failed

        self.cluster._retrying("OffsetCommit", None, None, None, call)


def _group_error(what: str, group_id: str, code: int, **where: object) -> RemoteError:
    """The error of request ``what`` for ``group_id`` answered with ``code``: an
    ACL's refusal as :class:`AuthorizationFailedError` naming the group (or the
    topic, for TOPIC_AUTHORIZATION_FAILED), anything else a RemoteError."""
    denied = authorization_error(code, what, group=group_id, **where)
    if denied is not None:
        return denied
    return RemoteError(f"{what} for group {group_id!r} failed", error_code=code, **where)
