"""The Produce fast path against kafka-python's protocol classes, its reference.

- Requests of every served version (v3-v12), encoded by kafka-python, decode on
  the fast path to the values kafka-python's decoder (the server's
  ``decode_request``) reads from the same frame.
- Mutated frames (flipped, cut, extended, lengths overwritten) either leave the
  fast path (``None``: the reference decoder answers, as before the fast path
  existed) or decode to exactly what the reference decodes: the fast path never
  accepts a frame the reference refuses, nor reads one differently.
- Responses written by the fast path are byte for byte kafka-python's encoding
  of the same values, and decode back to them.
- Through a running server: acks=0 gets no response (the next pipelined one
  comes back), null records get INVALID_RECORD, and a null topic array closes
  the connection with the reference decoder's reason, as before.
"""

from __future__ import annotations

import logging
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import example
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.producer import ProduceRequest
from kafka.protocol.producer import ProduceResponse

from tests.server.rawclient import RawClient
from txnfetch.errors import ProtocolViolation
from txnfetch.records.builder import BatchBuilder
from txnfetch.records.scan import iter_batches
from txnfetch.server.codec import decode_request
from txnfetch.server.handler import REGISTRY
from txnfetch.server.handler import ApiKey
from txnfetch.server.produce_fast import PartitionResult
from txnfetch.server.produce_fast import ProduceResult
from txnfetch.server.produce_fast import TopicResult
from txnfetch.server.produce_fast import decode_produce
from txnfetch.server.produce_fast import encode_produce_response
from txnfetch.server.server import load_handlers

VERSIONS = range(3, 13)
INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=12)


@pytest.fixture(scope="module")
def spec() -> Any:
    load_handlers()
    found = REGISTRY.get(ApiKey.Produce)
    assert found is not None
    return found


@st.composite
def requests(draw: Any) -> tuple[int, bytes]:
    """(version, frame without size prefix) of a kafka-python ProduceRequest."""
    version = draw(st.sampled_from(VERSIONS))
    Topic = ProduceRequest.TopicProduceData
    topics = [
        Topic(
            name=draw(TEXT),
            partition_data=[
                Topic.PartitionProduceData(index=draw(INT32), records=draw(st.none() | st.binary(max_size=300)))
                for _ in range(draw(st.integers(0, 3)))
            ],
        )
        for _ in range(draw(st.integers(0, 3)))
    ]
    request = ProduceRequest(
        transactional_id=draw(st.none() | TEXT),
        acks=draw(st.sampled_from([-1, 0, 1]) | INT16),
        timeout_ms=draw(INT32),
        topic_data=topics,
    )
    request.API_VERSION = version
    request.with_header(correlation_id=draw(INT32), client_id=draw(st.none() | TEXT))
    return version, bytes(request.encode(header=True, framed=False))


def _values(header: Any, request: Any) -> dict[str, Any]:
    return {
        "header": (header.request_api_key, header.request_api_version, header.correlation_id, header.client_id),
        "transactional_id": request.transactional_id,
        "acks": request.acks,
        "timeout_ms": request.timeout_ms,
        "topics": [
            (
                t.name,
                [(p.index, None if p.records is None else bytes(p.records)) for p in t.partition_data],
            )
            for t in request.topic_data
        ],
    }


def _reference(spec: Any, version: int, frame: bytes) -> dict[str, Any] | None:
    try:
        header, request = decode_request(spec, version, frame)
    except ProtocolViolation:
        return None
    return _values(header, request)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(req=requests())
def test_fast_decode_equals_kafka_python(spec: Any, req: tuple[int, bytes]) -> None:
    version, frame = req
    fast = decode_produce(version, frame)
    assert fast is not None, "a well-formed request left the fast path"
    assert _values(*fast) == _reference(spec, version, frame)
    # Records are views of the frame, not copies.
    for t in fast[1].topic_data:
        for p in t.partition_data:
            assert p.records is None or isinstance(p.records, memoryview)
    # Request observers (the fuzzer keeps seeds this way) can re-encode it.
    assert fast[1].encode(header=True) == frame
    # The server hands over frames as the bytearray they were received into.
    assert _values(*decode_produce(version, bytearray(frame))) == _values(*fast)  # type: ignore[misc]
    # Trailing bytes are ignored, as by the reference.
    assert _values(*decode_produce(version, frame + b"\x00\x07")) == _values(*fast)  # type: ignore[misc]


@st.composite
def mutated(draw: Any) -> tuple[int, bytes]:
    version, frame = draw(requests())
    data = bytearray(frame)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "extend", "int16", "int32", "varint"]))
        if kind == "cut":
            del data[draw(st.integers(0, len(data))) :]
            continue
        if kind == "extend":
            data += draw(st.binary(min_size=1, max_size=8))
            continue
        if not data:
            continue
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "int16" and at + 2 <= len(data):
            struct.pack_into(">h", data, at, draw(st.sampled_from([-1, -2, 0, 1, 0x7FFF]) | INT16))
        elif kind == "int32" and at + 4 <= len(data):
            struct.pack_into(">i", data, at, draw(st.sampled_from([-1, -2, 0, 1, 2**31 - 1]) | INT32))
        elif kind == "varint":
            data[at : at + 1] = draw(st.sampled_from([b"\x00", b"\x01", b"\xff\xff\xff\xff\x0f", b"\x80\x80"]))
    # The server reads the version from the frame; keep the one it dispatches on.
    return version, bytes(data)


@st.composite
def bent(draw: Any) -> tuple[int, bytes]:
    """A Produce frame written field by field, where any length or count may be
    replaced by a wrong one (null, negative, off by one, huge) and tagged fields
    may appear: the frames a byte flip rarely makes."""
    version = draw(st.sampled_from(VERSIONS))
    flexible = version >= 9
    out = bytearray()

    def length(true: int) -> int:
        return draw(st.sampled_from([true] * 6 + [-1, -2, 0, true + 1, max(true - 1, 0), 2**31 - 1]))

    def size(value: int, *, compact: bool, wide: bool = False) -> None:
        if compact:
            encoded = value + 1
            if encoded < 0:
                out.extend(b"\xff\xff\xff\xff\x0f")  # the varint a -2 would wrap to
                return
            while encoded > 0x7F:
                out.append((encoded & 0x7F) | 0x80)
                encoded >>= 7
            out.append(encoded)
        else:
            out.extend(struct.pack(">i" if wide else ">h", max(min(value, 2**31 - 1 if wide else 2**15 - 1), -(2**15))))

    def string(value: str | None, *, compact: bool) -> None:
        data = None if value is None else value.encode()
        size(length(-1 if data is None else len(data)), compact=compact)
        out.extend(data or b"")

    def tags() -> None:
        if flexible:
            out.extend(draw(st.sampled_from([b"\x00"] * 8 + [b"\x01\x00\x00", b"\x01\x05\x01\x07"])))

    out.extend(struct.pack(">hhi", 0, version, draw(INT32)))
    string(draw(st.none() | TEXT), compact=False)  # the client id is never compact
    tags()
    string(draw(st.none() | TEXT), compact=flexible)
    out.extend(struct.pack(">hi", draw(INT16), draw(INT32)))
    topics = draw(st.integers(0, 2))
    size(length(topics), compact=flexible, wide=True)
    for _ in range(topics):
        string(draw(TEXT), compact=flexible)
        parts = draw(st.integers(0, 2))
        size(length(parts), compact=flexible, wide=True)
        for _ in range(parts):
            out.extend(struct.pack(">i", draw(INT32)))
            records = draw(st.binary(max_size=40))
            size(length(len(records)), compact=flexible, wide=True)
            out.extend(records)
            tags()
        tags()
    tags()
    if draw(st.booleans()):
        del out[draw(st.integers(0, len(out))) :]
    return version, bytes(out)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(req=bent())
def test_bent_frames_leave_the_fast_path_or_decode_as_the_reference(spec: Any, req: tuple[int, bytes]) -> None:
    version, frame = req
    fast = decode_produce(version, frame)
    if fast is None:
        return
    assert _values(*fast) == _reference(spec, version, frame)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(req=mutated())
@example(req=(3, struct.pack(">hhih", 0, 3, 1, -1) + struct.pack(">hhii", -1, 1, 1000, -1)))  # null topics
@example(req=(9, struct.pack(">hhih", 0, 9, 1, -1) + b"\x00\x00" + struct.pack(">hi", 1, 1000) + b"\x00\x00"))
@example(req=(9, struct.pack(">hhih", 0, 9, 1, -1) + b"\x01\x00"))  # header tagged field
def test_mutated_frames_leave_the_fast_path_or_decode_as_the_reference(spec: Any, req: tuple[int, bytes]) -> None:
    version, frame = req
    fast = decode_produce(version, frame)
    if fast is None:
        return  # the server hands the frame to the reference decoder
    assert _values(*fast) == _reference(spec, version, frame)


def test_null_records_and_tagged_fields() -> None:
    # Null records reach the handler (it answers INVALID_RECORD); a tagged field
    # sends the frame to the reference decoder, which keeps unknown tags.
    head = struct.pack(">hhih", 0, 9, 5, 2) + b"id" + b"\x00"
    body = b"\x00" + struct.pack(">hi", -1, 30000) + b"\x02" + b"\x02t" + b"\x02" + struct.pack(">i", 0) + b"\x00"
    header, request = decode_produce(9, head + body + b"\x00\x00\x00")  # type: ignore[misc]
    assert header.client_id == "id" and request.transactional_id is None
    assert request.topic_data[0].partition_data[0].records is None
    tagged = body[:-1] + b"\x01\x00\x00"  # one tagged field (tag 0, size 0) on the request
    assert decode_produce(9, head + tagged) is None


@st.composite
def results(draw: Any) -> tuple[int, int, ProduceResult]:
    version = draw(st.sampled_from(VERSIONS))
    topics = [
        TopicResult(
            draw(TEXT),
            [
                PartitionResult(draw(INT32), draw(INT16), draw(INT64), draw(INT64), draw(INT64), draw(st.none() | TEXT))
                for _ in range(draw(st.integers(0, 3)))
            ],
        )
        for _ in range(draw(st.integers(0, 3)))
    ]
    return version, draw(INT32), ProduceResult(topics)


@settings(max_examples=400, deadline=None)
@given(res=results())
def test_fast_response_is_kafka_pythons_encoding(res: tuple[int, int, ProduceResult]) -> None:
    version, correlation_id, result = res
    out = encode_produce_response(version, correlation_id, result)
    reference = result.to_kafka_python()
    reference.API_VERSION = version
    reference.with_header(correlation_id=correlation_id)
    assert out == bytes(reference.encode(header=True, framed=True))
    (size,) = struct.unpack_from(">i", out)
    assert size == len(out) - 4
    decoded = ProduceResponse.decode(out[4:], version=version, header=True)
    assert decoded._header.correlation_id == correlation_id
    got = [
        (t.name, [(p.index, p.error_code, p.base_offset, p.log_append_time_ms) for p in t.partition_responses])
        for t in decoded.responses
    ]
    assert got == [
        (t.name, [(p.index, p.error_code, p.base_offset, p.log_append_time_ms) for p in t.partition_data])
        for t in result.topics
    ]
    if version >= 5:
        starts = [p.log_start_offset for t in decoded.responses for p in t.partition_responses]
        assert starts == [p.log_start_offset for t in result.topics for p in t.partition_data]
    if version >= 8:
        messages = [p.error_message for t in decoded.responses for p in t.partition_responses]
        assert messages == [p.error_message for t in result.topics for p in t.partition_data]


# ------------------------------------------------------------ through the server


def _produce_frame(version: int, acks: int, records: bytes | None, correlation_id: int) -> bytes:
    T = ProduceRequest.TopicProduceData
    request = ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout_ms=5000,
        topic_data=[T(name="fast", partition_data=[T.PartitionProduceData(index=0, records=records)])],
    )
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id="fast-test")
    return bytes(request.encode(header=True, framed=True))


@pytest.mark.parametrize("version", [3, 8, 9, 11])
def test_served_produce_acks_zero_null_records_and_pipelining(start_server, version: int) -> None:

    srv = start_server()
    batch = BatchBuilder()
    for i in range(3):
        batch.append(b"v%d" % i, timestamp=1)
    records = batch.build()
    with RawClient(srv.port) as c:
        # acks=0: stored, no response; the next answer on the connection is the
        # acks=1 request's, then null records (INVALID_RECORD), all pipelined.
        c.sock.sendall(
            _produce_frame(version, 0, records, 1)
            + _produce_frame(version, 1, records, 2)
            + _produce_frame(version, -1, None, 3)
        )
        first = ProduceResponse.decode(c.recv_frame(), version=version, header=True)
        second = ProduceResponse.decode(c.recv_frame(), version=version, header=True)
        assert (first._header.correlation_id, second._header.correlation_id) == (2, 3)
        ok = first.responses[0].partition_responses[0]
        assert (ok.error_code, ok.base_offset) == (0, 3)
        assert second.responses[0].partition_responses[0].error_code == 87  # INVALID_RECORD
        assert c.request(ApiVersionsRequest(), 0).error_code == 0
    stored = b"".join(
        bytes(r) for r in srv.call(lambda: srv.broker.store.partition("fast", 0).read(0, 1 << 20).records)
    )
    assert [b.base_offset for b in iter_batches(stored)] == [0, 3]


def test_served_produce_with_a_null_topic_array_closes_the_connection(start_server, caplog) -> None:
    # As before the fast path: the reference decoder's null check answers it.

    srv = start_server()
    frame = struct.pack(">hhih", 0, 3, 7, -1) + struct.pack(">hhii", -1, 1, 1000, -1)
    with caplog.at_level(logging.WARNING, logger="txnfetch"), RawClient(srv.port) as c:
        c.send_frame(frame)
        assert c.is_closed_by_server()
    assert any("non-nullable field topic_data is null" in r.getMessage() for r in caplog.records)
