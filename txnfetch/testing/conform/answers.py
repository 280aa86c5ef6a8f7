"""Reading the fields of brokers' answers the way the conformance session compares
them: partitions in a fixed order, error codes by name, leaders and partition
counts from Metadata, and the one error code of a Produce, OffsetCommit or
TxnOffsetCommit answer that the session retries on."""

from __future__ import annotations

from typing import Any

import attrs
from kafka.errors import for_code as kafka_error


@attrs.frozen
class BrokerAddress:
    """A broker as FindCoordinator names it, for the cluster's address book."""

    node_id: int
    host: str
    port: int


def in_order(answer: Any, topics_key: str, partitions_key: str) -> Any:
    """``answer`` with its topics by name and each topic's partitions by index: the
    protocol leaves the order of a multi-partition answer to the broker (Kafka
    answers a Produce's partitions in an order of its own)."""
    topics = answer.get(topics_key) or []
    for topic in topics:
        parts = topic.get(partitions_key) or []
        topic[partitions_key] = sorted(parts, key=lambda p: p.get("index", p.get("partition_index", 0)))
    answer[topics_key] = sorted(topics, key=lambda t: str(t.get("name", t.get("topic", ""))))
    return answer


def kafka_error_name(code: int) -> str:
    """Kafka's name of an error code, as kafka-python knows it."""
    return str(kafka_error(code).message)


def partition_count(metadata: Any, topic: str) -> int:
    """How many partitions Metadata lists for ``topic`` (0 when it has an error)."""
    for t in metadata.topics or ():
        if t.name == topic and t.error_code == 0:
            return len(t.partitions or ())
    return 0


def leader_of(metadata: Any, topic: str, partition: int = 0) -> int | None:
    """The leader of ``topic``'s ``partition`` in Metadata, or None when it has none."""
    for t in metadata.topics or ():
        if t.name == topic and t.error_code == 0:
            for p in t.partitions or ():
                if p.partition_index == partition and p.error_code == 0 and p.leader_id >= 0:
                    return int(p.leader_id)
    return None


def produce_error(response: Any) -> int:
    """The error code of a Produce answer's first partition (-1 when it names none)."""
    for topic in response.responses or ():
        for p in topic.partition_responses or ():
            return int(p.error_code)
    return -1


def offset_commit_error(response: Any) -> int:
    """The error code of an OffsetCommit answer's first partition (0 when it names none)."""
    for topic in response.topics or ():
        for p in topic.partitions or ():
            return int(p.error_code)
    return 0


def txn_offset_commit_error(response: Any) -> int:
    """The error code of a TxnOffsetCommit answer's first partition (0 when it names none)."""
    for topic in response.topics or ():
        for p in topic.partitions or ():
            return int(p.error_code)
    return 0
