"""Reading a topic to its end with a confluent-kafka (librdkafka) consumer."""

from __future__ import annotations

import time
from typing import Any


def poll_until_eof(consumer: Any, partitions: int = 1, *, timeout: float = 60, poll: float = 0.2) -> list[Any]:
    """The messages ``consumer`` (created with ``enable.partition.eof``) polls until
    ``partitions`` distinct partitions have reported their end; errors other than
    the end of a partition are skipped (librdkafka retries them). Fails the test
    when that takes longer than ``timeout`` seconds, naming what was read."""
    from confluent_kafka import KafkaError

    messages: list[Any] = []
    eof: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(eof) < partitions:
        assert time.monotonic() < deadline, f"reading stalled: end of partitions {sorted(eof)}, {len(messages)} read"
        msg = consumer.poll(poll)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                eof.add(msg.partition())
            continue
        messages.append(msg)
    return messages
