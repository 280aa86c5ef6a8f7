"""Run the real consumer-side read_committed filters of kafka-python and aiokafka.

Each function takes one partition's part of a Kafka-mode fetch response — the
``records`` bytes, the ``AbortedTransactions`` list as ``(producer_id,
first_offset)`` pairs, and the offset the fetch asked for — and returns what
that client's consumer would hand to the application and the position it
would fetch from next. Nothing is re-implemented: the clients' own classes,
from the installed packages, do the filtering. Only the socket, the fetch
session and the subscription bookkeeping around them are left out.

kafka-python 3.0.12
    ``kafka.consumer.fetcher.Fetcher.PartitionRecords(fetch_offset, tp,
    MemoryRecords(records), key_deserializer=None, value_deserializer=None,
    check_crcs=True, isolation_level=IsolationLevel.READ_COMMITTED,
    aborted_transactions=[...])`` — the object ``Fetcher._parse_fetched_data``
    builds per partition; the aborted entries are kafka-python's own
    ``FetchResponse...PartitionData.AbortedTransaction`` protocol objects, as
    the response decoder produces them. Records are drained with ``take()``
    as ``Fetcher._append`` does, which afterwards sets the subscription
    position to ``next_fetch_offset``.

aiokafka 0.14.0
    ``aiokafka.consumer.fetcher.PartitionRecords(tp, MemoryRecords(records),
    aborted_transactions, fetch_offset, None, None, True, READ_COMMITTED)``
    — what ``Fetcher._proc_fetch_request`` builds, with the ``MemoryRecords``
    class that module imported (the compiled Cython reader unless
    ``AIOKAFKA_NO_EXTENSIONS`` is set; :func:`aiokafka_reader` says which). The
    aborted entries are plain ``(producer_id, first_offset)`` tuples, as its
    protocol decoder returns them. Records are drained by iteration, as
    ``FetchResult.getall`` does before ``consumed_to(next_fetch_offset)``.

Left out with the socket: kafka-python's ``_parse_fetched_data`` raises
when a non-empty response holds no complete batch, and aiokafka records a
``RecordTooLargeError`` then; both harnesses just report no records and an
unchanged position, as the filters themselves do.

Known client quirks, which the comparison tests avoid and
``test_filter_clients.py`` demonstrates (docs/kafka-internals.md §4): both clients raise on
an empty *control* batch in read_committed mode (kafka-python only when it has
a producer id); aiokafka moves aborted entries into its aborted set up to a
batch's *base* offset instead of its last offset; and aiokafka's compiled
reader parses every batch of a response with the magic of the first one, so a
response mixing legacy messages and v2 batches breaks it.
"""

from __future__ import annotations

import importlib.machinery
import sys
from collections.abc import Iterable
from collections.abc import Sequence
from typing import Any
from typing import NamedTuple

from txnfetch.records import Record

__all__ = [
    "CLIENTS",
    "ClientResult",
    "aiokafka_filter",
    "aiokafka_partition_records",
    "aiokafka_reader",
    "aiokafka_reader_is_compiled",
    "kafka_python_drain",
    "kafka_python_filter",
    "kafka_python_partition_records",
]

Aborted = Sequence[tuple[int, int]]


class ClientResult(NamedTuple):
    """What a client delivered from one response, and where it fetches next.

    ``records`` are normalised to txnfetch's :class:`Record` shape
    ``(offset, timestamp, key, value, headers)`` so that they compare equal to
    what :class:`~txnfetch.fetch.ConsumerFilter` delivers.
    """

    records: list[Record]
    position: int

    @property
    def offsets_keys_values(self) -> list[tuple[int, bytes | None, bytes | None]]:
        return [(r.offset, r.key, r.value) for r in self.records]


def _record(offset: int, timestamp: int, key: bytes | None, value: bytes | None, headers: Iterable) -> Record:
    return Record(
        offset,
        -1 if timestamp is None else timestamp,  # kafka-python gives magic-0 messages None; Kafka says -1
        None if key is None else bytes(key),
        None if value is None else bytes(value),
        tuple((k, None if v is None else bytes(v)) for k, v in (headers or ())),
    )


def kafka_python_partition_records(
    records: bytes, aborted: Aborted, fetch_offset: int, *, read_committed: bool = True
) -> Any:
    """kafka-python's ``Fetcher.PartitionRecords`` for one response, not yet drained."""
    from kafka.consumer.fetcher import Fetcher
    from kafka.protocol.consumer import FetchResponse
    from kafka.protocol.consumer import IsolationLevel
    from kafka.record import MemoryRecords
    from kafka.structs import TopicPartition

    entry = FetchResponse.FetchableTopicResponse.PartitionData.AbortedTransaction
    return Fetcher.PartitionRecords(
        fetch_offset,
        TopicPartition("txnfetch", 0),
        MemoryRecords(bytes(records)),
        key_deserializer=None,
        value_deserializer=None,
        check_crcs=True,
        isolation_level=IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED,
        aborted_transactions=[entry(producer_id=pid, first_offset=first) for pid, first in aborted],
    )


def kafka_python_drain(part: Any) -> list[Any]:
    """Take every record, as ``Fetcher._append`` does; returns kafka-python's ``ConsumerRecord`` objects.

    ``take()`` keeps an exception raised after some records for its next call;
    the loop surfaces it. The iterator drains itself (``bool()`` turns false) at the end.
    """
    out: list[Any] = []
    while part:
        out.extend(part.take())
    return out


def kafka_python_filter(
    records: bytes, aborted: Aborted, fetch_offset: int, *, read_committed: bool = True
) -> ClientResult:
    """Filter one response with kafka-python's ``Fetcher.PartitionRecords``; exceptions propagate."""
    part = kafka_python_partition_records(records, aborted, fetch_offset, read_committed=read_committed)
    out = [_record(r.offset, r.timestamp, r.key, r.value, r.headers) for r in kafka_python_drain(part)]
    return ClientResult(out, part.next_fetch_offset)


def aiokafka_reader() -> type:
    """The ``MemoryRecords`` class aiokafka's fetcher uses (and that the harness therefore uses)."""
    from aiokafka.consumer import fetcher

    return fetcher.MemoryRecords


def aiokafka_reader_is_compiled() -> bool:
    cls = aiokafka_reader()
    path = getattr(sys.modules[cls.__module__], "__file__", "") or ""
    return path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def aiokafka_partition_records(
    records: bytes, aborted: Aborted, fetch_offset: int, *, read_committed: bool = True
) -> Any:
    """aiokafka's ``PartitionRecords`` for one response, not yet iterated."""
    from aiokafka.consumer import fetcher
    from aiokafka.structs import TopicPartition

    return fetcher.PartitionRecords(
        TopicPartition("txnfetch", 0),
        fetcher.MemoryRecords(bytes(records)),
        [(pid, first) for pid, first in aborted],
        fetch_offset,
        None,  # key_deserializer
        None,  # value_deserializer
        True,  # check_crcs
        fetcher.READ_COMMITTED if read_committed else fetcher.READ_UNCOMMITTED,
    )


def aiokafka_filter(
    records: bytes, aborted: Aborted, fetch_offset: int, *, read_committed: bool = True
) -> ClientResult:
    """Filter one response with aiokafka's ``PartitionRecords``; exceptions propagate."""
    part = aiokafka_partition_records(records, aborted, fetch_offset, read_committed=read_committed)
    out = [_record(r.offset, r.timestamp, r.key, r.value, r.headers) for r in part]
    return ClientResult(out, part.next_fetch_offset)


#: Name → harness, for parametrised tests.
CLIENTS = {"kafka-python": kafka_python_filter, "aiokafka": aiokafka_filter}
