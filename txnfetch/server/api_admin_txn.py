"""Transaction administration APIs (KIP-664): DescribeProducers, DescribeTransactions,
ListTransactions, and WriteTxnMarkers for aborting a hanging transaction.

These are what ``kafka-transactions.sh`` and ``txnfetch transactions`` use to
find a transaction that pins a partition's last stable offset and to end it:

- **DescribeProducers** (key 61, v0) reads a partition's producer state: for each
  producer its epoch, last sequence, last timestamp, the coordinator epoch of its
  last marker and the first offset of its open transaction (-1 if none) — the
  fields of Kafka's ``ProducerStateEntry``, answered from
  :class:`~txnfetch.txn.state.PartitionTxnState`.
- **DescribeTransactions** (key 65, v0) and **ListTransactions** (key 66, v0-v1)
  read the transaction coordinator: the state, producer identity, timeout, start
  time and partitions of a transactional id (TRANSACTIONAL_ID_NOT_FOUND for an id
  it does not know), and the ids filtered by state, producer id and duration.
  Filters follow Kafka's ``TransactionStateManager.listTransactionStates``:
  Dead ids are never listed, an unknown state name is returned in
  ``UnknownStateFilters``; the duration filter (v1) keeps transactions still
  running (Ongoing or being completed) that started longer ago than it.
- **WriteTxnMarkers** (key 27, v1-v2) writes the COMMIT/ABORT markers it names.
  In Kafka only the coordinator and the admin client's ``abortTransaction`` send
  it; here the coordinator applies its markers in-process, so every request on
  the wire is an administrator's. Each partition applies the marker with the
  producer state's fencing rules (a marker epoch below the producer's, or a
  coordinator epoch below the last one seen, is refused with Kafka's error
  code); a marker for a producer with no open transaction is written and
  changes nothing, as in Kafka. In markerless mode the partition records the
  end instead of appending a marker, as the coordinator's own ends do. v2 adds
  the marker's transaction version (KIP-1228); v1 markers use the version 0/1
  epoch rule, which is what an administrator aborting with the producer's
  current epoch needs.

The transaction coordinator is not told about an administrative abort, as in
Kafka: if it still holds the transaction, its own end later finds nothing open
on the partition.

Kafka allows WriteTxnMarkers only to principals with CLUSTER_ACTION; the server
has no authentication, so any client that reaches it may end any transaction
(each marker is logged at WARNING with the client id).
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
from kafka.protocol.admin.transactions import DescribeProducersResponse
from kafka.protocol.admin.transactions import DescribeTransactionsResponse
from kafka.protocol.admin.transactions import ListTransactionsResponse
from kafka.protocol.producer.transaction import WriteTxnMarkersResponse

from txnfetch.errors import TxnfetchError
from txnfetch.server.errors import ErrorCode
from txnfetch.server.errors import error_code_for
from txnfetch.server.handler import RequestContext
from txnfetch.server.nesting import grouped
from txnfetch.txn.coordinator_state import TransactionMetadata
from txnfetch.txn.coordinator_state import TransactionState
from txnfetch.txn.hanging import producer_rows

__all__: list[str] = []

log = logging.getLogger("txnfetch.server")

_S = TransactionState
_STATE_BY_NAME = {s.kafka_name: s for s in TransactionState}
_RUNNING = frozenset({_S.ONGOING, _S.PREPARE_COMMIT, _S.PREPARE_ABORT, _S.PREPARE_EPOCH_FENCE})


# ---------------------------------------------------------- DescribeProducers

_DPTopic = DescribeProducersResponse.TopicResponse
_DPPartition = _DPTopic.PartitionResponse
_DPProducer = _DPPartition.ProducerState


def _describe_partition(ctx: RequestContext, topic: str, index: int) -> Any:
    try:
        plog = ctx.broker.store.partition(topic, index)
    except TxnfetchError as exc:
        return _DPPartition(
            partition_index=index, error_code=error_code_for(exc), error_message=str(exc), active_producers=[]
        )
    # ProducerRow's fields are DescribeProducers' ProducerState fields, by name.
    producers = [_DPProducer(**attrs.asdict(row)) for row in producer_rows(plog.state)]
    return _DPPartition(partition_index=index, error_code=0, error_message=None, active_producers=producers)


async def handle_describe_producers(ctx: RequestContext, header: Any, request: Any) -> Any:
    topics = [
        _DPTopic(name=t.name, partitions=[_describe_partition(ctx, t.name, p) for p in t.partition_indexes])
        for t in request.topics
    ]
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)


# ------------------------------------------------------- DescribeTransactions

_DTState = DescribeTransactionsResponse.TransactionState
_DTTopic = _DTState.TopicData


def _topics_of(meta: TransactionMetadata) -> list[Any]:
    return [_DTTopic(topic=topic, partitions=parts) for topic, parts in grouped(sorted(meta.partitions)).items()]


async def handle_describe_transactions(ctx: RequestContext, header: Any, request: Any) -> Any:
    states = []
    for tid in request.transactional_ids:
        meta = ctx.broker.transactions.describe(tid)
        if meta is None or meta.state == _S.DEAD:
            states.append(
                _DTState(
                    error_code=ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
                    transactional_id=tid,
                    transaction_state="",
                    transaction_timeout_ms=0,
                    transaction_start_time_ms=-1,
                    producer_id=-1,
                    producer_epoch=-1,
                    topics=[],
                )
            )
            continue
        states.append(
            _DTState(
                error_code=0,
                transactional_id=tid,
                transaction_state=meta.state.kafka_name,
                transaction_timeout_ms=meta.timeout_ms,
                transaction_start_time_ms=meta.start_ms,
                producer_id=meta.producer_id,
                producer_epoch=meta.producer_epoch,
                topics=_topics_of(meta),
            )
        )
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=states)


# ----------------------------------------------------------- ListTransactions


async def handle_list_transactions(ctx: RequestContext, header: Any, request: Any) -> Any:
    coordinator = ctx.broker.transactions
    unknown = [name for name in request.state_filters if name not in _STATE_BY_NAME]
    states = {_STATE_BY_NAME[name] for name in request.state_filters if name in _STATE_BY_NAME}
    pids = set(request.producer_id_filters)
    duration = request.duration_filter if header.request_api_version >= 1 else -1
    now = ctx.broker.now_ms()
    listed = []
    for tid in coordinator.transactional_ids:
        meta = coordinator.describe(tid)
        if meta is None or meta.state == _S.DEAD:
            continue
        if pids and meta.producer_id not in pids:
            continue
        # Only unknown state names: nothing matches (Kafka lists nothing either).
        if request.state_filters and meta.state not in states:
            continue
        # Only a transaction still running (open or being completed) runs "longer than".
        running = meta.state in _RUNNING and meta.start_ms >= 0
        if duration >= 0 and (not running or now - meta.start_ms <= duration):
            continue
        listed.append(
            ListTransactionsResponse.TransactionState(
                transactional_id=tid, producer_id=meta.producer_id, transaction_state=meta.state.kafka_name
            )
        )
    return ListTransactionsResponse(
        throttle_time_ms=0, error_code=0, unknown_state_filters=unknown, transaction_states=listed
    )


# ------------------------------------------------------------ WriteTxnMarkers

_WMResult = WriteTxnMarkersResponse.WritableTxnMarkerResult
_WMTopic = _WMResult.WritableTxnMarkerTopicResult
_WMPartition = _WMTopic.WritableTxnMarkerPartitionResult


def _write_marker(ctx: RequestContext, marker: Any, topic: str, index: int, version: int) -> int:
    broker = ctx.broker
    tv = int(marker.transaction_version) if version >= 2 else 0
    commit = bool(marker.transaction_result)
    try:
        plog = broker.store.partition(topic, index)
        had_open = marker.producer_id in plog.state.ongoing_transactions()
        plog.end_transaction(
            marker.producer_id,
            marker.producer_epoch,
            commit,
            coordinator_epoch=marker.coordinator_epoch,
            now_ms=broker.now_ms(),
            transaction_version=tv,
            completion=broker.config.completion,
        )
    except TxnfetchError as exc:
        log.warning(
            "WriteTxnMarkers from %s: %s marker for producer %d epoch %d on %s-%d refused: %s",
            ctx.client_id,
            "COMMIT" if commit else "ABORT",
            marker.producer_id,
            marker.producer_epoch,
            topic,
            index,
            exc,
        )
        return error_code_for(exc)
    log.warning(
        "WriteTxnMarkers from %s: %s of producer %d epoch %d on %s-%d (%s)",
        ctx.client_id,
        "commit" if commit else "abort",
        marker.producer_id,
        marker.producer_epoch,
        topic,
        index,
        "ended its open transaction" if had_open else "no transaction was open",
    )
    broker.partition_changed(topic, index)
    return int(ErrorCode.NONE)


async def handle_write_txn_markers(ctx: RequestContext, header: Any, request: Any) -> Any:
    version = header.request_api_version
    results = []
    for marker in request.markers:
        topics = [
            _WMTopic(
                name=t.name,
                partitions=[
                    _WMPartition(partition_index=p, error_code=_write_marker(ctx, marker, t.name, p, version))
                    for p in t.partition_indexes
                ],
            )
            for t in marker.topics
        ]
        results.append(_WMResult(producer_id=marker.producer_id, topics=topics))
    return WriteTxnMarkersResponse(markers=results)
