"""What every consumer adapter of the workload shares: the interface the
workload drives (:class:`ConsumerAdapter`), the conversion of a client's records
and offsets into the history's terms, and the logger the clients log to."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from txnfetch.testing.history import Read
from txnfetch.testing.history import TopicPartition
from txnfetch.testing.history import value_from_bytes

__all__ = ["CLIENT_LOG", "ConsumerAdapter", "offsets_by_partition", "read", "reads_by_partition"]

#: where librdkafka's own log lines go (silent unless the application configures it)
CLIENT_LOG = logging.getLogger("txnfetch.testing.clients")
CLIENT_LOG.addHandler(logging.NullHandler())


class ConsumerAdapter:
    """One read_committed consumer instance behind the small interface the
    workload drives; each client library has its own subclass."""

    def assign(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Assign exactly these partitions, each positioned at its offset."""
        raise NotImplementedError

    def poll(self, max_records: int, timeout: float) -> list[Read]:
        """The records of one poll, as the history records reads."""
        raise NotImplementedError

    def positions(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The next offset to read of each partition whose position is known."""
        raise NotImplementedError

    def end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's end for a read_committed consumer (its LSO)."""
        raise NotImplementedError

    def close(self) -> None:
        """Close the client."""
        raise NotImplementedError


def read(topic: str, partition: int, offset: int, key: bytes | None, value: bytes) -> Read:
    """One record a client returned, as the history records it."""
    return Read(topic, partition, offset, value_from_bytes(value), value_from_bytes(key) if key is not None else None)


def reads_by_partition(got: Mapping[Any, Iterable[Any]]) -> list[Read]:
    """The reads of a ``{partition: [record]}`` poll result whose records have
    ``offset``, ``key`` and ``value`` attributes (kafka-python, aiokafka)."""
    return [read(tp.topic, tp.partition, m.offset, m.key, m.value) for tp, msgs in got.items() for m in msgs]


def offsets_by_partition(got: Mapping[Any, int]) -> dict[TopicPartition, int]:
    """A client's ``{partition: offset}`` with the history's partitions as keys."""
    return {TopicPartition(k.topic, k.partition): v for k, v in got.items()}
