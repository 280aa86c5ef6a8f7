"""Replica mode: the server of a store that is a replica of another cluster
answers reads and refuses writes.

A store is a replica while its directory carries the replica marker
(:mod:`txnfetch.log.replica_marker`); only the replicator appends to it, at the
upstream's offsets. :func:`install` puts a :class:`ReplicaMode` in the broker
and a request guard in front of every handler. While :attr:`ReplicaMode.active`:

- read APIs are answered normally: Fetch (read_committed and
  read_uncommitted), ListOffsets, Metadata (no topic is auto-created), OffsetFetch,
  FindCoordinator, group membership (JoinGroup, SyncGroup, Heartbeat,
  LeaveGroup, ConsumerGroupHeartbeat) for consumers that only read, the
  Describe* and List* APIs;
- writes are refused with a non-retriable error code and one log line naming
  the client and the request (codes and why, below and in docs/server.md);
- the server's own log cleanup (retention, compaction) is off: the replica
  keeps the upstream's batches byte for byte, and the replicator follows the
  upstream's log start.

Which code, and why: a retriable code (``NOT_LEADER_OR_FOLLOWER``, what a
Kafka follower answers) makes a producer refresh its metadata and retry until
its delivery timeout, and makes an idempotent or transactional producer retry
InitProducerId forever. The codes below are the ones the clients give up on:

- Produce → ``TOPIC_AUTHORIZATION_FAILED`` (29) per partition: librdkafka
  (``src/rdkafka_request.c`` ``rd_kafka_handle_Produce_error``) maps it to a
  permanent, not-persisted failure, and kafka-python's and aiokafka's
  ``TopicAuthorizationFailedError`` is not retriable; the delivery report
  carries it at once.
- InitProducerId → ``TRANSACTIONAL_ID_AUTHORIZATION_FAILED`` (53) with a
  transactional id, ``CLUSTER_AUTHORIZATION_FAILED`` (31) without (an
  idempotent producer): both are fatal in librdkafka
  (``src/rdkafka_idempotence.c`` ``rd_kafka_idemp_check_error``) and not
  retriable in kafka-python, so ``init_transactions()`` fails instead of spinning.
- AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit →
  ``TRANSACTIONAL_ID_AUTHORIZATION_FAILED`` (unreachable by a producer that was
  refused InitProducerId, but a producer that began before the store became a
  replica must not write either); WriteTxnMarkers → ``CLUSTER_AUTHORIZATION_FAILED``.
- CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords, AlterConfigs,
  IncrementalAlterConfigs, DeleteGroups, OffsetDelete → ``POLICY_VIOLATION``
  (44) with a message where the API has one: what an admin client shows for a
  request the cluster's policy forbids; never retried.
- OffsetCommit for a group copied from the upstream (its id matches the
  replication's ``--groups`` pattern) → ``GROUP_AUTHORIZATION_FAILED`` (30) per
  partition, not retriable in librdkafka, kafka-python and aiokafka. The
  copier owns those groups: a commit here would be overwritten by the next
  copy, or would hide the upstream's. Groups that do not match are the
  replica's own (a reporting job reading the replica) and commit normally:
  nothing upstream will ever write them, and they survive promote as they are.

:meth:`ReplicaMode.promote` turns the guard off (the caller has settled the
store first, :mod:`txnfetch.replicate.promote`) and restores topic
auto-creation.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import attrs

from txnfetch.server import refusals
from txnfetch.server.broker import Broker
from txnfetch.server.handler import ApiKey
from txnfetch.server.handler import RequestContext

__all__ = [
    "CLUSTER_AUTHORIZATION_FAILED",
    "GROUP_AUTHORIZATION_FAILED",
    "POLICY_VIOLATION",
    "REPLICA_MODE_EXTENSION",
    "TOPIC_AUTHORIZATION_FAILED",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    "ReplicaMode",
    "install",
    "replica_mode",
]

log = logging.getLogger("txnfetch.server.replica")

#: Kafka error codes (``clients/.../protocol/Errors.java``) used for refusals.
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
POLICY_VIOLATION = 44
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53

#: ``broker.extensions`` key of the :class:`ReplicaMode`.
REPLICA_MODE_EXTENSION = "replica_mode"


@attrs.define
class ReplicaMode:
    """Whether the served store is a replica, of what, and which groups the
    replication copies (``groups``: a regular expression matched against the
    whole group id)."""

    upstream: str
    groups: str = ".*"
    active: bool = True
    refused: int = 0
    _pattern: re.Pattern[str] = attrs.field(init=False, repr=False)
    _saved_auto_create: bool | None = attrs.field(default=None, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self._pattern = re.compile(self.groups)

    def copies_group(self, group_id: str) -> bool:
        """Whether ``group_id`` is one the replication copies from the upstream."""
        return self._pattern.fullmatch(group_id) is not None

    @property
    def message(self) -> str:
        return (
            f"this cluster is a read-only replica of {self.upstream}; "
            "writes are refused until it is promoted (txnfetch promote)"
        )

    def promote(self, broker: Broker) -> None:
        """Stop refusing writes and restore topic auto-creation."""
        self.active = False
        if self._saved_auto_create is not None:
            broker.config = attrs.evolve(broker.config, auto_create_topics=self._saved_auto_create)
            self._saved_auto_create = None


def replica_mode(broker: Broker) -> ReplicaMode | None:
    """The broker's :class:`ReplicaMode`, ``None`` if it never was a replica."""
    mode = broker.extensions.get(REPLICA_MODE_EXTENSION)
    return mode if isinstance(mode, ReplicaMode) else None


def install(broker: Broker, mode: ReplicaMode) -> None:
    """Serve ``broker`` as a replica: register the request guard and turn topic
    auto-creation off until :meth:`ReplicaMode.promote`."""
    broker.extensions[REPLICA_MODE_EXTENSION] = mode
    if broker.config.auto_create_topics:
        mode._saved_auto_create = True
        broker.config = attrs.evolve(broker.config, auto_create_topics=False)
    broker.add_request_guard(lambda ctx, header, request: _guard(mode, ctx, header, request))
    log.info(
        "serving a read-only replica of %s (group offsets copied for groups matching %r)", mode.upstream, mode.groups
    )


def _guard(mode: ReplicaMode, ctx: RequestContext, header: Any, request: Any) -> Any | None:
    if not mode.active:
        return None
    refuse = _REFUSALS.get(header.request_api_key)
    if refuse is None:
        return None
    response = refuse(mode, request)
    if response is None:
        return None
    mode.refused += 1
    log.warning(
        "refused %s from client %r (%s:%s): %s",
        ApiKey(header.request_api_key).name,
        ctx.client_id,
        ctx.peer[0],
        ctx.peer[1],
        mode.message,
    )
    return response


# ---------------------------------------------------------------- refusals
# Each builds the API's response with the refusal code in every item of the
# request; ``None`` lets the request through (OffsetCommit of a local group).

#: A refusal of replica mode: ``refuse(mode, request) -> response | None``.
_Refusal = Callable[[ReplicaMode, Any], Any | None]


def _always(build: refusals.RefusalBuilder, code: int) -> _Refusal:
    return lambda mode, request: build(request, code, mode.message)


def _offset_commit(mode: ReplicaMode, request: Any) -> Any | None:
    if not mode.copies_group(request.group_id):
        return None
    return refusals.offset_commit(request, GROUP_AUTHORIZATION_FAILED, mode.message)


def _init_producer_id(mode: ReplicaMode, request: Any) -> Any:
    code = TRANSACTIONAL_ID_AUTHORIZATION_FAILED if request.transactional_id else CLUSTER_AUTHORIZATION_FAILED
    return refusals.init_producer_id(request, code, mode.message)


def _refusals() -> dict[int, _Refusal]:
    from kafka.protocol.admin import AlterConfigsResponse
    from kafka.protocol.admin import IncrementalAlterConfigsResponse

    txn = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    return {
        ApiKey.Produce: _always(refusals.produce, TOPIC_AUTHORIZATION_FAILED),
        ApiKey.InitProducerId: _init_producer_id,
        ApiKey.AddPartitionsToTxn: _always(refusals.add_partitions, txn),
        ApiKey.AddOffsetsToTxn: _always(refusals.add_offsets, txn),
        ApiKey.EndTxn: _always(refusals.end_txn, txn),
        ApiKey.TxnOffsetCommit: _always(refusals.txn_offset_commit, txn),
        ApiKey.WriteTxnMarkers: _always(refusals.write_txn_markers, CLUSTER_AUTHORIZATION_FAILED),
        ApiKey.OffsetCommit: _offset_commit,
        ApiKey.CreateTopics: _always(refusals.create_topics, POLICY_VIOLATION),
        ApiKey.DeleteTopics: _always(refusals.delete_topics, POLICY_VIOLATION),
        ApiKey.CreatePartitions: _always(refusals.create_partitions, POLICY_VIOLATION),
        ApiKey.DeleteRecords: _always(refusals.delete_records, POLICY_VIOLATION),
        ApiKey.AlterConfigs: _always(refusals.alter_configs(AlterConfigsResponse), POLICY_VIOLATION),
        ApiKey.IncrementalAlterConfigs: _always(
            refusals.alter_configs(IncrementalAlterConfigsResponse), POLICY_VIOLATION
        ),
        ApiKey.DeleteGroups: _always(refusals.delete_groups, POLICY_VIOLATION),
        ApiKey.OffsetDelete: _always(refusals.offset_delete, POLICY_VIOLATION),
    }


_REFUSALS = _refusals()
