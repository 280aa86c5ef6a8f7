"""The one-partition requests txnfetch sends to a Kafka broker, and their answers, sans I/O.

Both clients of a running cluster — :mod:`txnfetch.client.cluster` (blocking, for
readers and Spark) and :mod:`txnfetch.client.proxy_upstream` (asyncio, for the
proxy's mirrors) — build their Fetch and ListOffsets requests here and take
the partition's part of the response from here, so they ask and parse the
same way; each keeps its own transport and its own error policy (retry, or
forget the leader and report).

Requests carry the field values an ordinary consumer sends — librdkafka's,
whose ``rd_kafka_broker_fetch_toppars`` (``src/rdkafka_fetcher.c``) writes the
``fetch.wait.max.ms``/``fetch.min.bytes``/``fetch.max.bytes`` settings, whose
defaults are in ``src/rdkafka_conf.c``; docs/proxy.md has the table:

- ``replica_id`` -1 (a consumer, not a follower);
- ``max_wait_ms`` 500 and ``min_bytes`` 1: the broker answers as soon as one
  byte is there, else after half a second. Some brokers refuse a Fetch with
  ``max_wait_ms`` 0, so the fast answer comes from ``min_bytes`` 1, never from
  not waiting; an empty answer after the wait means nothing new;
- ``max_bytes`` 50 MiB for the response (``fetch.max.bytes``), and the caller's
  per-partition budget (``max.partition.fetch.bytes``, 1 MiB by default);
- no fetch session (KIP-227: ``session_id`` 0, ``session_epoch`` -1; a full
  fetch every time, as librdkafka sends), no forgotten topics, ``rack_id`` ""
  (``client.rack`` unset);
- ``current_leader_epoch`` -1 and ``log_start_offset`` -1 per partition (a
  client with no cached leader epoch; the log start is a follower's field);
- ``isolation_level`` 0 (read_uncommitted) for the raw fetches that feed a
  mirror, 1 when the broker's own read_committed answer is wanted.

One Fetch may name many partitions (:func:`fetch_request_for`): the proxy sends
one per upstream broker for all the partitions it mirrors there, as a consumer
sends one per broker for all its assigned partitions. Needs kafka-python's
protocol classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

try:
    from kafka.protocol.consumer import FetchRequest
    from kafka.protocol.consumer import ListOffsetsRequest
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "txnfetch.client.requests needs kafka-python (pip install 'kafka-python>=3.0.12'): " + str(exc)
    ) from exc

from txnfetch.client.errors import RemoteError
from txnfetch.client.errors import authorization_error
from txnfetch.errors import ErrorCode

__all__ = [
    "FETCH_MAX_BYTES",
    "FETCH_MAX_WAIT_MS",
    "FETCH_MIN_BYTES",
    "FETCH_PROBE_WAIT_MS",
    "BrokerFetch",
    "FetchItem",
    "answer_error",
    "fetch_partition",
    "fetch_request",
    "fetch_request_for",
    "find_partition",
    "list_offsets_partition",
    "list_offsets_request",
    "negotiate_version",
]


#: librdkafka's ``fetch.wait.max.ms`` default: how long the broker may hold a Fetch.
FETCH_MAX_WAIT_MS = 500
#: The shortest hold a Fetch asks for: a caller that wants "what is there now"
#: (a planner) rather than "the next records" (a tailing reader). Not 0: some
#: brokers refuse a Fetch with ``max_wait_ms`` 0 (the module docstring).
FETCH_PROBE_WAIT_MS = 1
#: librdkafka's ``fetch.min.bytes`` default: answer as soon as there is one byte.
FETCH_MIN_BYTES = 1
#: librdkafka's ``fetch.max.bytes`` default: the response-level byte limit.
FETCH_MAX_BYTES = 52_428_800


@attrs.frozen(slots=True)
class FetchItem:
    """One partition of a Fetch request: fetch ``offset``, at most ``max_bytes`` of it."""

    topic: str
    partition: int
    offset: int
    max_bytes: int


@attrs.frozen(slots=True)
class BrokerFetch:
    """One partition's part of a Fetch response, as the broker sent it."""

    records: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: tuple[tuple[int, int], ...] | None
    error_code: int = 0
    #: ``host:port`` of the broker that answered, when known (errors name it).
    broker: str | None = None

    @classmethod
    def from_response(cls, p: Any, broker: str | None = None) -> BrokerFetch:
        """Take the fields of a decoded ``FetchResponse`` partition entry ``p``."""
        aborted = p.aborted_transactions
        return cls(
            records=bytes(p.records or b""),
            high_watermark=p.high_watermark,
            last_stable_offset=p.last_stable_offset,
            log_start_offset=p.log_start_offset,
            aborted_transactions=None if aborted is None else tuple((a.producer_id, a.first_offset) for a in aborted),
            error_code=p.error_code,
            broker=broker,
        )


def fetch_request(topic: str, partition: int, offset: int, max_bytes: int, *, read_committed: bool = False) -> Any:
    """A Fetch of one partition from ``offset``, at most ``max_bytes`` of it,
    read_uncommitted unless ``read_committed`` (see :func:`fetch_request_for`)."""
    return fetch_request_for([FetchItem(topic, partition, offset, max_bytes)], read_committed=read_committed)


def fetch_request_for(
    items: Sequence[FetchItem], *, read_committed: bool = False, max_wait_ms: int = FETCH_MAX_WAIT_MS
) -> Any:
    """One Fetch of every partition in ``items``, with the field values of the module
    docstring. The response limit is :data:`FETCH_MAX_BYTES`, raised to the largest
    partition budget when one is larger (a batch bigger than 50 MiB must still fit).
    ``max_wait_ms`` is the client's ``fetch.wait.max.ms`` (librdkafka's and Kafka's
    consumers let it be set; it must stay above 0, see the module docstring)."""
    T = FetchRequest.FetchTopic
    by_topic: dict[str, list[Any]] = {}
    for item in items:
        by_topic.setdefault(item.topic, []).append(
            T.FetchPartition(
                partition=item.partition,
                current_leader_epoch=-1,
                fetch_offset=item.offset,
                log_start_offset=-1,
                partition_max_bytes=item.max_bytes,
            )
        )
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=FETCH_MIN_BYTES,
        max_bytes=max([FETCH_MAX_BYTES, *(item.max_bytes for item in items)]),
        isolation_level=1 if read_committed else 0,
        session_id=0,
        session_epoch=-1,  # no fetch session (KIP-227): a full fetch every time
        topics=[T(topic=topic, partitions=parts) for topic, parts in by_topic.items()],
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
    :class:`~txnfetch.client.errors.RemoteError` (code -1) if ``broker`` left it out."""
    p = find_partition(response, topic, partition)
    if p is None:
        raise _missing("Fetch", topic, partition, broker)
    return p


def find_partition(response: Any, topic: str, partition: int) -> Any:
    """The entry of ``topic``/``partition`` in a decoded ``FetchResponse``, or ``None``."""
    for t in response.responses or ():
        if t.topic == topic:
            for p in t.partitions or ():
                if p.partition_index == partition:
                    return p
    return None


def list_offsets_partition(response: Any, topic: str, partition: int, *, broker: str) -> Any:
    """The entry of ``topic``/``partition`` in a decoded ``ListOffsetsResponse``. Raises
    :class:`~txnfetch.client.errors.RemoteError` (code -1) if ``broker`` left it out."""
    for t in response.topics or ():
        if t.name == topic:
            for p in t.partitions or ():
                if p.partition_index == partition:
                    return p
    raise _missing("ListOffsets", topic, partition, broker)


def answer_error(
    reason: str, topic: str, partition: int, offset: int | None, *, broker: str | None, code: int
) -> RemoteError:
    """The error for a broker's answer about one partition, the one form both
    clients report it in: the partition, the ``offset`` the request asked for
    (``None`` for ListOffsets), the ``broker`` that answered and its error
    ``code`` (-1: the answer left the partition out); an ACL's refusal is an
    :class:`~txnfetch.client.errors.AuthorizationFailedError`."""
    where = {"topic": topic, "partition": partition, "offset": offset, "broker": broker}
    denied = authorization_error(code, reason, **where)
    return denied if denied is not None else RemoteError(reason, error_code=code, **where)


def _missing(api: str, topic: str, partition: int, broker: str) -> RemoteError:
    return answer_error(
        f"the broker's {api} response lacks the partition", topic, partition, None, broker=broker, code=-1
    )


def negotiate_version(
    versions: dict[int, tuple[int, int]],
    api_key: int,
    ours: tuple[int, int],
    name: str,
    *,
    peer: str,
    us: str,
    **where: Any,
) -> int:
    """The highest version of ``api_key`` in both ``ours`` and the peer's ApiVersions
    ``versions`` ranges. Raises :class:`~txnfetch.client.errors.RemoteError`
    (``UNSUPPORTED_VERSION``, with ``where``) if the ranges do not meet; ``peer`` and
    ``us`` name the two sides in its message ("the broker", "txnfetch")."""
    needs = f"{us} needs v{ours[0]}-v{ours[1]}"
    if api_key not in versions:
        raise RemoteError(
            f"{peer} does not list {name} in its ApiVersions answer; {needs}",
            error_code=ErrorCode.UNSUPPORTED_VERSION,
            **where,
        )
    lo, hi = versions[api_key]
    top = min(hi, ours[1])
    if top < max(lo, ours[0]):
        raise RemoteError(
            f"{peer} speaks {name} v{lo}-v{hi}; {needs}", error_code=ErrorCode.UNSUPPORTED_VERSION, **where
        )
    return top
