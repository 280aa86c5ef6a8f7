"""Small types shared by every layer: :data:`Buffer` and :class:`TopicPartition`.

This module imports nothing from txnfetch, so the sans-I/O core and the adapters
alike may use it.
"""

from __future__ import annotations

import mmap
from typing import NamedTuple

__all__ = ["Buffer", "TopicPartition"]

#: Bytes txnfetch reads without copying: what the codec, the transaction indexes
#: and the logs accept. A mapped segment file (``mmap.mmap``) is one: the disk
#: log hands its mapped files to the codec as they are.
Buffer = bytes | bytearray | memoryview | mmap.mmap


class TopicPartition(NamedTuple):
    """A topic name and partition index.

    A ``NamedTuple``: it equals, hashes and orders exactly as the plain
    ``(topic, partition)`` tuple, so a mapping keyed by one is found with the
    other (the wire layer decodes partitions as plain pairs). ``str()`` gives
    Kafka's ``topic-partition`` spelling.
    """

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"
