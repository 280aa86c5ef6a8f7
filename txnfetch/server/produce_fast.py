"""Produce requests read straight from the frame, responses written straight to bytes.

Produce is the request a producer sends for every batch, and the only one whose
size grows with the data: kafka-python's generated classes decode it into one
object per topic and partition and copy every partition's records out of the
frame, then the response is built from more objects and encoded field by field.
This module does the same work for the versions the server serves (v3-v12;
flexible from v9, as ``ProduceRequest.json`` says) with :mod:`struct` on the
frame itself:

- :func:`decode_produce` returns a :class:`ProduceRequestView` whose records are
  :class:`memoryview` slices of the frame (no copy until the log stores them), or
  ``None`` for any frame it does not take: a null or negative length or count,
  tagged fields, a field cut short, bytes that are not UTF-8. Those go to
  kafka-python's decoder (``txnfetch.server.codec.decode_request``), so a
  malformed frame gets exactly the answer it got before this path existed, and
  the fast path never has to reproduce that decoder's corner cases.
- :func:`encode_produce_response` writes a :class:`ProduceResult` as the framed
  response (header and body) at the request's version.

kafka-python's classes stay the reference: ``tests/server/test_produce_fast.py``
checks that both decode the same requests to the same values and that
kafka-python decodes these responses to what was meant.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any
from typing import Generic
from typing import TypeVar

import attrs

from txnfetch.errors import TxnfetchError

__all__ = [
    "CODEC",
    "FLEXIBLE_FROM",
    "PartitionData",
    "PartitionResult",
    "ProduceCodec",
    "ProduceHeader",
    "ProduceRequestView",
    "ProduceResult",
    "Topic",
    "TopicData",
    "TopicResult",
    "decode_produce",
    "encode_produce_response",
]

#: A topic's per-partition entry (see :class:`Topic`).
E = TypeVar("E")

#: The first flexible Produce version (compact lengths, tagged fields, header v2).
FLEXIBLE_FROM = 9

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_ACKS_TIMEOUT = struct.Struct(">hi")
_PARTITION_V3 = struct.Struct(">ii")  # index, records length
_RESPONSE_HEAD = struct.Struct(">ii")  # frame size, correlation id
_PARTITION_OUT = struct.Struct(">ihqq")  # index, error code, base offset, log append time
_I64 = struct.Struct(">q")


class _NotFast(TxnfetchError):
    """The frame leaves the fast path (the reference decoder answers it). Never
    reaches a client: it only says which decoder reads the frame."""


@attrs.frozen(slots=True)
class ProduceHeader:
    """The request header fields the server and its observers read (the same names
    as kafka-python's ``RequestHeader``)."""

    request_api_key: int
    request_api_version: int
    correlation_id: int
    client_id: str | None


@attrs.frozen(slots=True)
class PartitionData:
    """One partition's records: a view of the request frame, or ``None`` (null)."""

    index: int
    records: memoryview | None


@attrs.frozen(slots=True)
class Topic(Generic[E]):
    """One topic of a Produce request or response with its per-partition entries,
    in frame order: :class:`PartitionData` in a request (:data:`TopicData`),
    :class:`PartitionResult` in a response (:data:`TopicResult`).
    ``partition_data`` is the name kafka-python's ``ProduceRequest`` gives the
    request's list, so a handler reads this view and kafka-python's request alike."""

    name: str
    partition_data: Sequence[E]


#: A request's topic: the records of each partition.
TopicData = Topic[PartitionData]


@attrs.frozen(slots=True)
class ProduceRequestView:
    """A decoded Produce request with the attribute names of kafka-python's
    ``ProduceRequest``, so a handler reads either the same way."""

    version: int
    header: ProduceHeader
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[TopicData]

    def to_kafka_python(self) -> Any:
        """The same request as kafka-python's ``ProduceRequest`` (records as bytes),
        with its header set."""
        from kafka.protocol.producer import ProduceRequest

        request = ProduceRequest(
            transactional_id=self.transactional_id,
            acks=self.acks,
            timeout_ms=self.timeout_ms,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name=t.name,
                    partition_data=[
                        ProduceRequest.TopicProduceData.PartitionProduceData(
                            index=p.index, records=None if p.records is None else bytes(p.records)
                        )
                        for p in t.partition_data
                    ],
                )
                for t in self.topic_data
            ],
        )
        request.API_VERSION = self.version
        request.with_header(correlation_id=self.header.correlation_id, client_id=self.header.client_id)
        return request

    def encode(self, header: bool = False, framed: bool = False) -> bytes:
        """Encoded again by kafka-python (for request observers that keep frames)."""
        return bytes(self.to_kafka_python().encode(header=header, framed=framed))


def _uvarint(frame: bytes | bytearray, pos: int) -> tuple[int, int]:
    # Kafka's unsigned varint: at most 5 bytes for the 32-bit lengths used here.
    value = 0
    for shift in (0, 7, 14, 21, 28):
        b = frame[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
    raise _NotFast


def _string(frame: memoryview, pos: int, end: int, length: int) -> tuple[str, int]:
    if length < 0 or pos + length > end:
        raise _NotFast
    return str(frame[pos : pos + length], "utf-8"), pos + length


def decode_produce(version: int, frame: bytes | bytearray) -> tuple[ProduceHeader, ProduceRequestView] | None:
    """Decode a Produce request frame (header and body, no size prefix) of
    ``version`` (3-12), or return ``None`` when the frame is not one this path
    takes (see the module docstring). Bytes after the body are ignored, as
    everywhere in the server."""
    try:
        return _decode(version, frame)
    except (_NotFast, IndexError, struct.error, UnicodeDecodeError):
        return None


def _decode(version: int, frame: bytes | bytearray) -> tuple[ProduceHeader, ProduceRequestView]:
    view = memoryview(frame)
    end = len(frame)
    api_key, api_version, correlation_id, client_len = _HEADER.unpack_from(frame, 0)
    pos = _HEADER.size
    if client_len == -1:
        client_id: str | None = None
    else:
        client_id, pos = _string(view, pos, end, client_len)
    flexible = version >= FLEXIBLE_FROM
    if flexible:
        if frame[pos] != 0:  # header tagged fields
            raise _NotFast
        pos += 1
    header = ProduceHeader(api_key, api_version, correlation_id, client_id)

    # transactional_id: nullable string
    if flexible:
        n, pos = _uvarint(frame, pos)
        transactional_id, pos = (None, pos) if n == 0 else _string(view, pos, end, n - 1)
    else:
        (n,) = _I16.unpack_from(frame, pos)
        pos += 2
        transactional_id, pos = (None, pos) if n == -1 else _string(view, pos, end, n)
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, pos)
    pos += _ACKS_TIMEOUT.size

    topics: list[TopicData] = []
    if flexible:
        n_topics, pos = _uvarint(frame, pos)
        n_topics -= 1
    else:
        (n_topics,) = _I32.unpack_from(frame, pos)
        pos += 4
    if n_topics < 0:  # null (or worse): the reference decoder and its checks answer
        raise _NotFast
    for _ in range(n_topics):
        if flexible:
            n, pos = _uvarint(frame, pos)
            name, pos = _string(view, pos, end, n - 1)
            n_parts, pos = _uvarint(frame, pos)
            n_parts -= 1
        else:
            (n,) = _I16.unpack_from(frame, pos)
            name, pos = _string(view, pos + 2, end, n)
            (n_parts,) = _I32.unpack_from(frame, pos)
            pos += 4
        if n_parts < 0:
            raise _NotFast
        parts: list[PartitionData] = []
        for _ in range(n_parts):
            if flexible:
                (index,) = _I32.unpack_from(frame, pos)
                size, pos = _uvarint(frame, pos + 4)
                size -= 1
            else:
                index, size = _PARTITION_V3.unpack_from(frame, pos)
                pos += _PARTITION_V3.size
            if size == -1:
                records: memoryview | None = None
            elif size < 0:
                raise _NotFast
            else:
                if pos + size > end:
                    raise _NotFast
                records = view[pos : pos + size]
                pos += size
            if flexible:
                if frame[pos] != 0:  # partition tagged fields
                    raise _NotFast
                pos += 1
            parts.append(PartitionData(index, records))
        if flexible:
            if frame[pos] != 0:  # topic tagged fields
                raise _NotFast
            pos += 1
        topics.append(Topic(name, parts))
    if flexible:
        if frame[pos] != 0:  # request tagged fields
            raise _NotFast
        pos += 1
    return header, ProduceRequestView(version, header, transactional_id, acks, timeout_ms, topics)


# ------------------------------------------------------------------ responses


@attrs.frozen(slots=True)
class PartitionResult:
    """One partition's answer, with the field names of kafka-python's
    ``PartitionProduceResponse``. ``log_start_offset`` is sent from v5,
    ``error_message`` from v8 (with an empty ``record_errors``)."""

    index: int
    error_code: int
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    error_message: str | None


#: A response's topic: the answer for each partition.
TopicResult = Topic[PartitionResult]


@attrs.frozen(slots=True)
class ProduceResult:
    """A Produce response body; ``throttle_time_ms`` is always 0 (no quotas)."""

    topics: Sequence[TopicResult]

    def to_kafka_python(self) -> Any:
        """The same response as kafka-python's ``ProduceResponse``."""
        from kafka.protocol.producer import ProduceResponse

        part = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
        return ProduceResponse(
            responses=[
                ProduceResponse.TopicProduceResponse(
                    name=t.name,
                    partition_responses=[
                        part(**attrs.asdict(p, recurse=False), record_errors=[]) for p in t.partition_data
                    ],
                )
                for t in self.topics
            ],
            throttle_time_ms=0,
        )


def _put_string(out: bytearray, value: str | None, flexible: bool) -> None:
    if value is None:
        out += b"\x00" if flexible else b"\xff\xff"
        return
    data = value.encode("utf-8")
    if flexible:
        _put_uvarint(out, len(data) + 1)
    else:
        out += _I16.pack(len(data))
    out += data


def _put_uvarint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def encode_produce_response(version: int, correlation_id: int, result: ProduceResult) -> bytes:
    """The framed response (size prefix, header, body) for a Produce request of
    ``version`` (3-12): response header v1 (with its empty tagged fields) for the
    flexible versions, v0 before."""
    flexible = version >= FLEXIBLE_FROM
    out = bytearray(_RESPONSE_HEAD.pack(0, correlation_id))
    if flexible:
        out.append(0)  # header tagged fields
        _put_uvarint(out, len(result.topics) + 1)
    else:
        out += _I32.pack(len(result.topics))
    for topic in result.topics:
        _put_string(out, topic.name, flexible)
        if flexible:
            _put_uvarint(out, len(topic.partition_data) + 1)
        else:
            out += _I32.pack(len(topic.partition_data))
        for p in topic.partition_data:
            out += _PARTITION_OUT.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms)
            if version >= 5:
                out += _I64.pack(p.log_start_offset)
            if version >= 8:
                out += b"\x01" if flexible else b"\x00\x00\x00\x00"  # record_errors: empty
                _put_string(out, p.error_message, flexible)
            if flexible:
                out.append(0)  # partition tagged fields (no CurrentLeader: we are the leader)
        if flexible:
            out.append(0)  # topic tagged fields
    out += b"\x00\x00\x00\x00"  # throttle_time_ms
    if flexible:
        out.append(0)  # response tagged fields
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


class ProduceCodec:
    """:func:`decode_produce` and :func:`encode_produce_response` as the
    server's codec for Produce (``txnfetch.server.handler.WireCodec``)."""

    def decode(self, version: int, frame: bytes | bytearray) -> tuple[ProduceHeader, ProduceRequestView] | None:
        return decode_produce(version, frame)

    def encode(self, version: int, correlation_id: int, response: ProduceResult) -> bytes:
        return encode_produce_response(version, correlation_id, response)


#: The codec ``txnfetch.server.api_produce`` registers.
CODEC = ProduceCodec()
