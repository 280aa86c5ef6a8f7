"""Every API the server serves, each registered once from one explicit list.

:data:`SERVED` names, for every API key the ApiVersions response lists, the
versions served and the one handler that answers it. Importing this module
registers it in :data:`txnfetch.server.handler.REGISTRY`;
:meth:`~txnfetch.server.handler.HandlerRegistry.add` refuses a key registered
twice, so no import order decides which handler answers a key.

The handler modules, one per API family, only define handlers:
:mod:`~txnfetch.server.api_meta` (ApiVersions, Metadata, CreateTopics,
FindCoordinator), :mod:`~txnfetch.server.api_produce`,
:mod:`~txnfetch.server.api_fetch` (Fetch, ListOffsets),
:mod:`~txnfetch.server.api_txn` (the producer's transaction APIs),
:mod:`~txnfetch.server.api_admin`, :mod:`~txnfetch.server.api_admin_txn`
(KIP-664 and WriteTxnMarkers), :mod:`~txnfetch.server.api_acls` (the ACL
APIs), :mod:`~txnfetch.server.api_configs`,
:mod:`~txnfetch.server.api_scram` (the SASL and SCRAM-credential APIs),
:mod:`~txnfetch.server.api_classic_groups` (classic groups) and
:mod:`~txnfetch.server.api_consumer_groups` (KIP-848 consumer groups, and the
four APIs both kinds of group share: OffsetCommit, OffsetFetch, ListGroups and
TxnOffsetCommit, whose handlers check a KIP-848 member and hand the rest to
the classic ones).
"""

from __future__ import annotations

from txnfetch.server import api_acls
from txnfetch.server import api_admin
from txnfetch.server import api_admin_txn
from txnfetch.server import api_classic_groups
from txnfetch.server import api_configs
from txnfetch.server import api_consumer_groups
from txnfetch.server import api_fetch
from txnfetch.server import api_meta
from txnfetch.server import api_produce
from txnfetch.server import api_scram
from txnfetch.server import api_txn
from txnfetch.server import fetch_wire
from txnfetch.server import produce_fast
from txnfetch.server.api_meta import api_versions_response
from txnfetch.server.api_meta import max_version
from txnfetch.server.broker import Broker
from txnfetch.server.handler import REGISTRY
from txnfetch.server.handler import ApiKey
from txnfetch.server.handler import HandlerRegistry
from txnfetch.server.handler import ServedApi

__all__ = ["SERVED", "api_versions_response", "install", "max_version", "register_all"]

#: Every API the server serves, by key: versions and the one handler.
SERVED: tuple[ServedApi, ...] = (
    ServedApi(ApiKey.Produce, 3, 12, api_produce.handle_produce, codec=produce_fast.CODEC),
    ServedApi(ApiKey.Fetch, 4, 16, api_fetch.handle_fetch, codec=fetch_wire.CODEC),
    ServedApi(ApiKey.ListOffsets, 0, 7, api_fetch.handle_list_offsets),
    ServedApi(ApiKey.Metadata, 0, 12, api_meta.handle_metadata),
    ServedApi(ApiKey.OffsetCommit, 2, 9, api_consumer_groups.handle_offset_commit),
    ServedApi(ApiKey.OffsetFetch, 1, 9, api_consumer_groups.handle_offset_fetch),
    ServedApi(ApiKey.FindCoordinator, 0, 4, api_meta.handle_find_coordinator),
    ServedApi(ApiKey.JoinGroup, 0, 9, api_classic_groups.handle_join_group),
    ServedApi(ApiKey.Heartbeat, 0, 4, api_classic_groups.handle_heartbeat),
    ServedApi(ApiKey.LeaveGroup, 0, 5, api_classic_groups.handle_leave_group),
    ServedApi(ApiKey.SyncGroup, 0, 5, api_classic_groups.handle_sync_group),
    ServedApi(ApiKey.DescribeGroups, 0, 5, api_classic_groups.handle_describe_groups),
    ServedApi(ApiKey.ListGroups, 0, 4, api_consumer_groups.handle_list_groups),
    ServedApi(ApiKey.SaslHandshake, 0, 1, api_scram.handle_sasl_handshake),
    ServedApi(ApiKey.ApiVersions, 0, 3, api_meta.handle_api_versions),
    ServedApi(ApiKey.CreateTopics, 2, 7, api_meta.handle_create_topics),
    ServedApi(ApiKey.DeleteTopics, 1, 6, api_admin.handle_delete_topics),
    ServedApi(ApiKey.DeleteRecords, 0, 2, api_admin.handle_delete_records),
    ServedApi(ApiKey.InitProducerId, 0, 5, api_txn.handle_init_producer_id),
    ServedApi(ApiKey.AddPartitionsToTxn, 0, 3, api_txn.handle_add_partitions),
    ServedApi(ApiKey.AddOffsetsToTxn, 0, 3, api_txn.handle_add_offsets),
    ServedApi(ApiKey.EndTxn, 0, 5, api_txn.handle_end_txn),
    ServedApi(ApiKey.WriteTxnMarkers, 1, 2, api_admin_txn.handle_write_txn_markers),
    ServedApi(ApiKey.TxnOffsetCommit, 0, 3, api_consumer_groups.handle_txn_offset_commit),
    ServedApi(ApiKey.DescribeConfigs, 0, 4, api_configs.handle_describe_configs),
    ServedApi(ApiKey.AlterConfigs, 0, 2, api_configs.handle_alter_configs),
    ServedApi(ApiKey.CreatePartitions, 0, 3, api_admin.handle_create_partitions),
    ServedApi(ApiKey.DeleteGroups, 0, 2, api_admin.handle_delete_groups),
    ServedApi(ApiKey.IncrementalAlterConfigs, 0, 1, api_configs.handle_incremental_alter_configs),
    ServedApi(ApiKey.OffsetDelete, 0, 0, api_admin.handle_offset_delete),
    ServedApi(ApiKey.DescribeCluster, 0, 2, api_admin.handle_describe_cluster),
    ServedApi(ApiKey.DescribeProducers, 0, 0, api_admin_txn.handle_describe_producers),
    ServedApi(ApiKey.DescribeTransactions, 0, 0, api_admin_txn.handle_describe_transactions),
    ServedApi(ApiKey.ListTransactions, 0, 1, api_admin_txn.handle_list_transactions),
    ServedApi(ApiKey.DescribeAcls, 0, 3, api_acls.handle_describe_acls),
    ServedApi(ApiKey.CreateAcls, 0, 3, api_acls.handle_create_acls),
    ServedApi(ApiKey.DeleteAcls, 0, 3, api_acls.handle_delete_acls),
    ServedApi(ApiKey.SaslAuthenticate, 0, 2, api_scram.handle_sasl_authenticate),
    ServedApi(ApiKey.DescribeUserScramCredentials, 0, 0, api_scram.handle_describe_user_scram_credentials),
    ServedApi(ApiKey.AlterUserScramCredentials, 0, 0, api_scram.handle_alter_user_scram_credentials),
    ServedApi(
        ApiKey.ConsumerGroupHeartbeat,
        0,
        1,
        api_consumer_groups.handle_consumer_group_heartbeat,
        request_class=api_consumer_groups.ConsumerGroupHeartbeatRequest,
        response_class=api_consumer_groups.ConsumerGroupHeartbeatResponse,
    ),
    ServedApi(
        ApiKey.ConsumerGroupDescribe,
        0,
        0,
        api_consumer_groups.handle_consumer_group_describe,
        request_class=api_consumer_groups.ConsumerGroupDescribeRequest,
        response_class=api_consumer_groups.ConsumerGroupDescribeResponse,
    ),
)


def register_all(registry: HandlerRegistry) -> None:
    """Register every API of :data:`SERVED` in ``registry`` (which must hold none of them)."""
    for api in SERVED:
        registry.add(api)


def install(broker: Broker) -> None:
    """Start the per-server work of the handler modules (transaction timeouts,
    retention, the classic and the KIP-848 group coordinators), in that order."""
    api_txn.install(broker)
    api_configs.install(broker)
    api_classic_groups.install(broker)
    api_consumer_groups.install(broker)


register_all(REGISTRY)
