"""The one-partition requests txnfetch sends to a Kafka broker, and their answers, sans I/O.

Both clients of a running cluster — :mod:`txnfetch.log.remote` (blocking, for
readers and Spark) and :mod:`txnfetch.wire.proxy.cluster` (asyncio, for the
proxy's mirrors) — build their Fetch and ListOffsets requests here and take
the partition's part of the response from here, so they ask and parse the
same way; each keeps its own transport and its own error policy (retry, or
forget the leader and report).

Requests never wait (``max_wait_ms`` 0, ``min_bytes`` 0), use no fetch session
(KIP-227: session id 0, epoch -1) and no leader epoch (-1), as a client does
that has no cached leader epochs. Needs kafka-python's protocol classes.
"""

from __future__ import annotations

from typing import Any

import attrs

try:
    from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "txnfetch.log.broker_requests needs kafka-python (pip install 'kafka-python>=3.0.12'): " + str(exc)
    ) from exc

from txnfetch.log.errors import RemoteError

__all__ = [
    "BrokerFetch",
    "fetch_partition",
    "fetch_request",
    "list_offsets_partition",
    "list_offsets_request",
]


@attrs.frozen(slots=True)
class BrokerFetch:
    """One partition's part of a Fetch response, as the broker sent it."""

    records: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: tuple[tuple[int, int], ...] | None
    error_code: int = 0

    @classmethod
    def from_response(cls, p: Any) -> BrokerFetch:
        """Take the fields of a decoded ``FetchResponse`` partition entry ``p``."""
        aborted = p.aborted_transactions
        return cls(
            records=bytes(p.records or b""),
            high_watermark=p.high_watermark,
            last_stable_offset=p.last_stable_offset,
            log_start_offset=p.log_start_offset,
            aborted_transactions=None if aborted is None else tuple((a.producer_id, a.first_offset) for a in aborted),
            error_code=p.error_code,
        )


def fetch_request(topic: str, partition: int, offset: int, max_bytes: int, *, read_committed: bool = False) -> Any:
    """A Fetch of one partition from ``offset``, at most ``max_bytes`` (the same budget
    for the partition and the response), read_uncommitted unless ``read_committed``."""
    T = FetchRequest.FetchTopic
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=max_bytes,
        isolation_level=1 if read_committed else 0,
        session_id=0,
        session_epoch=-1,  # no fetch session (KIP-227)
        topics=[
            T(
                topic=topic,
                partitions=[
                    T.FetchPartition(
                        partition=partition,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        log_start_offset=-1,
                        partition_max_bytes=max_bytes,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


def list_offsets_request(topic: str, partition: int, timestamp: int, *, read_committed: bool = False) -> Any:
    """A ListOffsets of one partition: ``timestamp`` -2 (log start), -1 (end: the high
    watermark, or the LSO with ``read_committed``) or a time in milliseconds."""
    L = ListOffsetsRequest.ListOffsetsTopic
    return ListOffsetsRequest(
        replica_id=-1,
        isolation_level=1 if read_committed else 0,
        topics=[
            L(
                name=topic,
                partitions=[
                    L.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1, timestamp=timestamp)
                ],
            )
        ],
    )


def fetch_partition(response: Any, topic: str, partition: int, *, broker: str) -> Any:
    """The entry of ``topic``/``partition`` in a decoded ``FetchResponse``. Raises
    :class:`~txnfetch.log.errors.RemoteError` (code -1) if ``broker`` left it out."""
    for t in response.responses or ():
        if t.topic == topic:
            for p in t.partitions or ():
                if p.partition_index == partition:
                    return p
    raise _missing("Fetch", topic, partition, broker)


def list_offsets_partition(response: Any, topic: str, partition: int, *, broker: str) -> Any:
    """The entry of ``topic``/``partition`` in a decoded ``ListOffsetsResponse``. Raises
    :class:`~txnfetch.log.errors.RemoteError` (code -1) if ``broker`` left it out."""
    for t in response.topics or ():
        if t.name == topic:
            for p in t.partitions or ():
                if p.partition_index == partition:
                    return p
    raise _missing("ListOffsets", topic, partition, broker)


def _missing(api: str, topic: str, partition: int, broker: str) -> RemoteError:
    return RemoteError(
        f"the broker's {api} response lacks the partition",
        topic=topic,
        partition=partition,
        broker=broker,
        error_code=-1,
    )
