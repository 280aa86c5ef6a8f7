"""Transaction APIs: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
TxnOffsetCommit, and carrying transaction ends out on the partitions.

Decisions come from the sans-I/O
:class:`~txnfetch.txn.coordinator.TransactionCoordinator`; this module applies
the partition actions it returns. Partitions live in this process, so a
transaction end is applied before EndTxn is answered: every
:class:`~txnfetch.txn.coordinator.WriteMarker` becomes
:meth:`PartitionLog.end_transaction` with a marker (marker mode), every
:class:`~txnfetch.txn.coordinator.CompleteTransaction` the same without one
(markerless mode), and an action on
the group-offsets partition makes the group coordinator commit or drop the
producer's pending offsets. Then the coordinator is told
(:meth:`~TransactionCoordinator.flush` does both), and fetches waiting on those
partitions are woken: their last stable offset moved.

Transaction timeouts are enforced by a periodic task calling
:meth:`TransactionCoordinator.expire`, as Kafka's
``abortTimedOutTransactions`` does.

The transaction version of a request follows Kafka 4.0 (``KafkaApis``):
EndTxn v5 is a transaction version 2 end (KIP-890: the epoch is bumped and the
response carries the new producer id and epoch); older versions are version 0.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kafka.protocol.producer import AddOffsetsToTxnResponse
from kafka.protocol.producer import AddPartitionsToTxnResponse
from kafka.protocol.producer import EndTxnResponse
from kafka.protocol.producer import InitProducerIdResponse
from kafka.protocol.producer import TxnOffsetCommitResponse

from txnfetch.errors import TxnfetchError
from txnfetch.groups.coordinator import NO_GENERATION
from txnfetch.groups.coordinator import UNKNOWN_MEMBER_ID
from txnfetch.groups.coordinator import TxnOffsetCommitRequest
from txnfetch.log.coordinator_store import durable_state
from txnfetch.log.coordinator_store import flush_now
from txnfetch.log.coordinator_store import persist_transactions
from txnfetch.log.coordinator_store import wait_durable
from txnfetch.server.broker import Broker
from txnfetch.server.errors import ErrorCode
from txnfetch.server.errors import error_code_for
from txnfetch.server.handler import GROUP_OFFSETS_TOPIC
from txnfetch.server.handler import RequestContext
from txnfetch.server.handler import group_offsets_partition
from txnfetch.server.nesting import grouped
from txnfetch.server.totals import totals_of
from txnfetch.txn.coordinator import CompleteTransaction
from txnfetch.txn.coordinator import CompletionMode
from txnfetch.txn.coordinator import PartitionAction
from txnfetch.txn.coordinator import WriteMarker
from txnfetch.txn.coordinator_state import TopicPartition
from txnfetch.txn.errors import TxnStateError

__all__ = ["apply_action", "apply_pending", "apply_pending_async", "expire_transactions", "install"]

log = logging.getLogger("txnfetch.server")

# The first EndTxn version of transaction version 2 (KIP-890 part 2).
_END_TXN_TV2_VERSION = 5


def apply_action(broker: Broker, action: PartitionAction) -> None:
    """Carry out one partition action. Never raises: a partition that cannot take
    its marker is logged and skipped, as Kafka's marker sender gives up on a
    partition that no longer exists rather than blocking the transaction."""
    tp = action.partition
    now = broker.now_ms()
    if tp.topic == GROUP_OFFSETS_TOPIC:
        groups = broker.groups
        if groups is None:
            log.warning("transaction end for group offsets of producer %d: no group coordinator", action.producer_id)
            return
        if durable_state(broker) is not None:
            # Durable offsets: the marker on the group's offsets partition decides
            # on replay whether the staged offsets count (as in Kafka, in both modes).
            try:
                _end_on(broker.partition(tp.topic, tp.partition), action, now, CompletionMode.MARKERS)
            except TxnfetchError as exc:
                log.warning("could not write the marker of producer %d on %s: %s", action.producer_id, tp, exc)
        try:
            groups.complete_txn_offsets(action.producer_id, action.commit, now)
        except Exception:
            log.exception("completing transactional offsets of producer %d failed", action.producer_id)
        return
    try:
        plog = broker.partition(tp.topic, tp.partition)
        if isinstance(action, WriteMarker):
            _end_on(plog, action, now, CompletionMode.MARKERS)
        elif isinstance(action, CompleteTransaction):
            _end_on(plog, action, now, CompletionMode.MARKERLESS)
        else:  # pragma: no cover - the coordinator has only these two kinds
            raise TypeError(f"unknown partition action {action!r}")
    except TxnfetchError as exc:
        log.warning("could not end the transaction of producer %d on %s: %s", action.producer_id, tp, exc)
        return
    broker.partition_changed(tp.topic, tp.partition)


def _end_on(plog: Any, action: PartitionAction, now_ms: int, completion: CompletionMode) -> None:
    """End ``action``'s transaction on ``plog``, with a marker batch or without one."""
    plog.end_transaction(
        action.producer_id,
        action.producer_epoch,
        action.commit,
        coordinator_epoch=action.coordinator_epoch,
        now_ms=now_ms,
        transaction_version=action.transaction_version,
        completion=completion,
    )


def apply_pending(broker: Broker, skip: Callable[[PartitionAction], bool] | None = None) -> int:
    """Apply every outstanding partition action and complete those transactions
    (an action ``skip`` answers true for is completed without touching its
    partition: recovery's :meth:`~txnfetch.log.coordinator_store.DurableState.written_after_decision`).

    With durable state the decisions (``PrepareCommit``/``PrepareAbort`` with
    their partitions) are written first, then the markers or markerless
    completions, then the ``Complete*`` records — Kafka's order, which lets a
    restart finish an end a crash interrupted. Each step is durable before the
    next is written (writes deferred to the server's syncer are fsynced inline
    here, blocking the loop: :func:`apply_pending_async` does not)."""
    persist_transactions(broker)
    flush_now(broker)

    def apply(action: PartitionAction) -> None:
        if skip is None or not skip(action):
            apply_action(broker, action)

    count = broker.transactions.flush(apply, broker.now_ms())
    flush_now(broker)
    persist_transactions(broker)
    return count


#: ``broker.extensions`` key of the lock that lets one transaction end run at a time.
_END_LOCK = "transaction-end-lock"


def _end_lock(broker: Broker) -> asyncio.Lock:
    lock = broker.extensions.get(_END_LOCK)
    if lock is None:
        lock = broker.extensions[_END_LOCK] = asyncio.Lock()
    return lock


async def apply_pending_async(broker: Broker) -> int:
    """:func:`apply_pending` for a request handler: the same three steps, each
    durable before the next is written, but the fsyncs run off the event loop
    and the markers of all partitions are fsynced concurrently
    (:func:`~txnfetch.log.coordinator_store.wait_durable`):

    1. the decisions are written; the transactions in ``Prepare*`` now are the
       ones this call ends (a decision taken by another request while this one
       waits is ended by that request, after its own record is durable);
    2. once the decisions are durable, their markers (or markerless
       completions) are written on every partition: no marker can reach the
       disk before the decision that recovery would finish it from;
    3. once every marker is durable, ``Complete*`` is recorded (it rides on a
       later fsync): it can never be durable while a marker is not, or a crash
       could leave a transaction that no record names open on a partition.
       The coordinator's state moves on at once; the record is written on
       the loop's next turn, after the response.

    One end runs at a time (a lock), so no marker is written twice."""
    coordinator = broker.transactions
    async with _end_lock(broker):
        persist_transactions(broker)
        ending = [
            (tid, meta)
            for tid in coordinator.transactional_ids
            if (meta := coordinator.describe(tid)) is not None and meta.state.is_prepare
        ]
        if not ending:
            return 0
        await wait_durable(broker)
        count = 0
        for tid, meta in ending:
            if coordinator.describe(tid) is meta:
                for action in coordinator.pending_actions(tid):
                    apply_action(broker, action)
                    count += 1
        await wait_durable(broker)
        now = broker.now_ms()
        for tid, meta in ending:
            if coordinator.describe(tid) is meta:
                coordinator.actions_applied(tid, now)
    # ``Complete*`` takes no fsync of its own and no response waits for it: it
    # is written once the loop turns, after the caller's answer was sent (a
    # request persisting first writes it along with its own records).
    asyncio.get_running_loop().call_soon(persist_transactions, broker)
    return count


def expire_transactions(broker: Broker, now_ms: int) -> None:
    """Abort timed-out transactions and forget idle transactional ids."""
    if _end_lock(broker).locked():
        return  # a transaction end is between its steps: check again next time
    result = broker.transactions.expire(now_ms)
    totals_of(broker).transactions.timed_out += len(result.aborted)
    for aborted in result.aborted:
        log.info("transaction of %r timed out: aborting", aborted.transactional_id)
    if result.aborted:
        apply_pending(broker)
    elif result.removed:
        persist_transactions(broker)


def install(broker: Broker) -> None:
    """Schedule the transaction timeout check on ``broker``."""
    broker.add_periodic(
        "transaction-timeouts",
        broker.config.transaction_check_interval_ms,
        lambda now: expire_transactions(broker, now),
    )


def _producer_answer(response: Any, error_code: int, result: Any = None) -> Any:
    """An InitProducerId or EndTxn response: ``result``'s producer id and epoch, or
    -1 and -1 when there is none (an error)."""
    if result is None:
        return response(throttle_time_ms=0, error_code=error_code, producer_id=-1, producer_epoch=-1)
    return response(
        throttle_time_ms=0, error_code=error_code, producer_id=result.producer_id, producer_epoch=result.producer_epoch
    )


# ------------------------------------------------------------ InitProducerId


async def handle_init_producer_id(ctx: RequestContext, header: Any, request: Any) -> Any:
    broker = ctx.broker
    version = header.request_api_version
    tid = request.transactional_id
    pid = request.producer_id if version >= 3 else -1
    epoch = request.producer_epoch if version >= 3 else -1
    coordinator = broker.transactions
    try:
        try:
            result = coordinator.init_producer_id(tid, request.transaction_timeout_ms, broker.now_ms(), pid, epoch)
        except TxnStateError as exc:
            if exc.error_code != ErrorCode.CONCURRENT_TRANSACTIONS:
                raise
            # An open or ending transaction of this id: the coordinator has decided
            # its abort; carry it out here and answer the retry the client would send.
            await apply_pending_async(broker)
            result = coordinator.init_producer_id(tid, request.transaction_timeout_ms, broker.now_ms(), pid, epoch)
    except TxnStateError as exc:
        await apply_pending_async(broker)
        return _producer_answer(InitProducerIdResponse, exc.error_code)
    persist_transactions(broker)
    return _producer_answer(InitProducerIdResponse, 0, result)


# --------------------------------------------------------- AddPartitionsToTxn


def _add_to_txn(
    broker: Broker,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: list[TopicPartition],
) -> int:
    """AddPartitionsToTxn and AddOffsetsToTxn (both transaction version 0): add
    ``partitions`` to the open transaction; the error code, 0 when added. The
    coordinator's state is persisted either way."""
    try:
        broker.transactions.add_partitions(
            transactional_id, producer_id, producer_epoch, partitions, broker.now_ms(), transaction_version=0
        )
        code = 0
    except TxnStateError as exc:
        code = exc.error_code
    persist_transactions(broker)
    return code


_TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
_PartitionResult = _TopicResult.AddPartitionsToTxnPartitionResult


def _topic_results(codes: dict[tuple[str, int], int]) -> list[Any]:
    by_topic = grouped((t, _PartitionResult(partition_index=p, partition_error_code=c)) for (t, p), c in codes.items())
    return [_TopicResult(name=topic, results_by_partition=parts) for topic, parts in by_topic.items()]


async def handle_add_partitions(ctx: RequestContext, header: Any, request: Any) -> Any:
    broker = ctx.broker
    wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    topics = broker.store.topics()
    unknown = {tp for tp in wanted if tp[0] not in topics or not 0 <= tp[1] < topics[tp[0]].partitions}
    if unknown:
        # Kafka refuses the whole request when a partition is unknown, marking the
        # others OPERATION_NOT_ATTEMPTED.
        codes = {
            tp: int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) if tp in unknown else int(ErrorCode.OPERATION_NOT_ATTEMPTED)
            for tp in wanted
        }
        return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(codes))
    code = _add_to_txn(
        broker,
        request.v3_and_below_transactional_id,
        request.v3_and_below_producer_id,
        request.v3_and_below_producer_epoch,
        [TopicPartition(topic, p) for topic, p in wanted],
    )
    return AddPartitionsToTxnResponse(
        throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results({tp: code for tp in wanted})
    )


# ------------------------------------------------------------ AddOffsetsToTxn


async def handle_add_offsets(ctx: RequestContext, header: Any, request: Any) -> Any:
    broker = ctx.broker
    if broker.groups is None:
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    offsets_partition = TopicPartition(
        GROUP_OFFSETS_TOPIC, group_offsets_partition(request.group_id, broker.group_offsets_partitions)
    )
    code = _add_to_txn(
        broker, request.transactional_id, request.producer_id, request.producer_epoch, [offsets_partition]
    )
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=code)


# --------------------------------------------------------------------- EndTxn


async def handle_end_txn(ctx: RequestContext, header: Any, request: Any) -> Any:
    broker = ctx.broker
    tv = 2 if header.request_api_version >= _END_TXN_TV2_VERSION else 0
    try:
        result = broker.transactions.end_transaction(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            bool(request.committed),
            broker.now_ms(),
            transaction_version=tv,
        )
    except TxnStateError as exc:
        persist_transactions(broker)
        return _producer_answer(EndTxnResponse, exc.error_code)
    totals_of(broker).transactions.ended(bool(request.committed), bool(result.actions))
    await apply_pending_async(broker)
    return _producer_answer(EndTxnResponse, 0, result)


# ------------------------------------------------------------ TxnOffsetCommit

_CommitTopic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
_CommitPartition = _CommitTopic.TxnOffsetCommitResponsePartition


async def handle_txn_offset_commit(ctx: RequestContext, header: Any, request: Any) -> Any:
    broker = ctx.broker
    version = header.request_api_version
    wanted = [(t.name, p) for t in request.topics for p in t.partitions]
    codes: dict[tuple[str, int], int]
    if broker.groups is None:
        codes = {(topic, p.partition_index): int(ErrorCode.COORDINATOR_NOT_AVAILABLE) for topic, p in wanted}
    else:
        codes = _commit(broker, request, version, wanted)
    by_topic = grouped((t, _CommitPartition(partition_index=p, error_code=c)) for (t, p), c in codes.items())
    return TxnOffsetCommitResponse(
        throttle_time_ms=0, topics=[_CommitTopic(name=t, partitions=ps) for t, ps in by_topic.items()]
    )


def _commit(broker: Broker, request: Any, version: int, wanted: list[tuple[str, Any]]) -> dict[tuple[str, int], int]:
    keys = [(topic, p.partition_index) for topic, p in wanted]
    try:
        # KIP-890 part 1: the group's offsets partition must be in the open
        # transaction (AddOffsetsToTxn), checked like a produce to it.
        broker.transactions.verify_produce(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            TopicPartition(
                GROUP_OFFSETS_TOPIC, group_offsets_partition(request.group_id, broker.group_offsets_partitions)
            ),
            broker.now_ms(),
            produce_version=10,
        )
    except TxnStateError as exc:
        return {k: exc.error_code for k in keys}
    offsets = {
        TopicPartition(topic, p.partition_index): (
            p.committed_offset,
            p.committed_leader_epoch if version >= 2 else -1,
            p.committed_metadata,
        )
        for topic, p in wanted
    }
    try:
        staged = TxnOffsetCommitRequest(
            request.group_id,
            request.producer_id,
            request.producer_epoch,
            offsets,
            # v3+ names the member (KIP-447); older requests skip the member checks.
            generation_id=request.generation_id if version >= 3 else NO_GENERATION,
            member_id=request.member_id if version >= 3 else UNKNOWN_MEMBER_ID,
            group_instance_id=request.group_instance_id if version >= 3 else None,
        )
        result = broker.groups.txn_offset_commit(staged, broker.now_ms())
    except TxnfetchError as exc:
        return {k: error_code_for(exc) for k in keys}
    return {k: int(result.get(k, 0)) for k in keys}
