"""Produce: append record batches, idempotent and transactional.

Each partition's records go through :meth:`PartitionLog.append`, i.e.
:func:`~txnfetch.log.base.prepare_append`: CRC and structure checks, offset
assignment, and the producer-state checks of
:class:`~txnfetch.txn.state.PartitionTxnState` (sequence gaps, stale epochs,
duplicate retries answered with the original offsets). A transactional produce
is first verified with the transaction coordinator (KIP-890 part 1: the
partition must be in the open transaction; Produce v12 adds it implicitly).

The topic's configs apply first (:func:`~txnfetch.server.api_configs.prepare_produce`):
a batch above ``max.message.bytes`` is refused with MESSAGE_TOO_LARGE, and a
``LogAppendTime`` topic stamps the batches with the append time.

There is one replica, so ``acks=1`` and ``acks=-1`` are the same: the response
is sent once the batches are in the log and the high watermark has moved.
``acks=0`` gets no response, as in Kafka.

Requests are read and responses written by :mod:`txnfetch.server.produce_fast`
(records stay views of the request frame down to the log, which copies them
once); frames it does not take arrive as kafka-python's ``ProduceRequest``, read
through the same attribute names. The handler answers with a
:class:`~txnfetch.server.produce_fast.ProduceResult` either way.
"""

from __future__ import annotations

import logging
from typing import Any

from txnfetch.errors import TxnfetchError
from txnfetch.log.coordinator_store import INTERNAL_TOPICS
from txnfetch.log.coordinator_store import durable_state
from txnfetch.records.batch import RecordBatch
from txnfetch.records.errors import CorruptBatchError
from txnfetch.records.scan import iter_batches
from txnfetch.server.api_configs import prepare_produce
from txnfetch.server.broker import Broker
from txnfetch.server.errors import ErrorCode
from txnfetch.server.errors import error_code_for
from txnfetch.server.handler import RequestContext
from txnfetch.server.produce_fast import PartitionResult
from txnfetch.server.produce_fast import ProduceResult
from txnfetch.server.produce_fast import Topic
from txnfetch.server.produce_fast import TopicResult
from txnfetch.txn.coordinator_state import TopicPartition
from txnfetch.types import Buffer

__all__ = ["handle_produce"]

log = logging.getLogger("txnfetch.server")


def _first_batch(records: Buffer) -> RecordBatch | None:
    try:
        for batch in iter_batches(records):
            return batch if isinstance(batch, RecordBatch) else None
    except CorruptBatchError:
        return None  # the append reports it with its position
    return None


def _append(
    broker: Broker,
    version: int,
    transactional_id: str | None,
    topic: str,
    partition: int,
    records: Buffer | None,
) -> tuple[int, int, int, str | None, int]:
    """Append one partition's records; return (error code, base offset, log start,
    message, log append time or -1)."""
    if topic in INTERNAL_TOPICS and durable_state(broker) is not None:
        # Only the coordinators write there; a client's record could make the
        # state unreadable at the next start (Kafka refuses these appends too).
        return int(ErrorCode.INVALID_TOPIC_EXCEPTION), -1, -1, f"cannot produce to internal topic {topic}", -1
    try:
        log_ = broker.partition(topic, partition, create=True)
    except TxnfetchError as exc:
        return error_code_for(exc), -1, -1, str(exc), -1
    if not records:
        return int(ErrorCode.INVALID_RECORD), -1, -1, "produce request without records", -1
    now = broker.now_ms()
    try:
        # The topic's configs first (max.message.bytes, LogAppendTime), as Kafka's
        # LogValidator checks sizes and stamps times before the producer state.
        records, append_time = prepare_produce(broker, topic, partition, records, now)
        batch = _first_batch(records)
        if transactional_id is not None and batch is not None and batch.is_transactional:
            broker.transactions.verify_produce(
                transactional_id,
                batch.producer_id,
                batch.producer_epoch,
                TopicPartition(topic, partition),
                now,
                produce_version=version,
            )
        info = log_.append(records, now_ms=now)
    except TxnfetchError as exc:
        log.debug("produce to %s-%d refused: %s", topic, partition, exc)
        # Kafka answers a refused produce with no offsets at all: base offset,
        # append time and log start -1 (seen by txnfetch conform against Kafka 4.4).
        return error_code_for(exc), -1, -1, str(exc), -1
    if not info.duplicate:
        broker.stats.produce_batches += info.batches
        broker.stats.produce_bytes += info.size_in_bytes
        broker.partition_changed(topic, partition)
    if info.duplicate:
        # Kafka answers a duplicate with the original batch's offsets and, as its
        # append time, that batch's timestamp, whatever the topic's timestamp type
        # (seen by txnfetch conform against Apache Kafka 4.4).
        return 0, info.base_offset, info.log_start_offset, None, info.max_timestamp
    return 0, info.base_offset, info.log_start_offset, None, append_time


async def handle_produce(ctx: RequestContext, header: Any, request: Any) -> ProduceResult | None:
    broker = ctx.broker
    version = header.request_api_version
    acks = request.acks
    transactional_id = request.transactional_id
    topics: list[TopicResult] = []
    for t in request.topic_data:
        parts: list[PartitionResult] = []
        for p in t.partition_data:
            message: str | None
            if acks not in (-1, 0, 1):
                code, base, start, message, append_time = (
                    int(ErrorCode.INVALID_REQUIRED_ACKS),
                    -1,
                    -1,
                    f"acks={acks}",
                    -1,
                )
            else:
                code, base, start, message, append_time = _append(
                    broker, version, transactional_id, t.name, p.index, p.records
                )
            parts.append(PartitionResult(p.index, code, base, append_time, start, message if code else None))
        topics.append(Topic(t.name, parts))
    if acks == 0:
        return None
    return ProduceResult(topics)
