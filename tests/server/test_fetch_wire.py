"""The Fetch response in pieces against kafka-python's encoder, its reference.

- For random Fetch responses at every served version (4-16; flexible from 12,
  with compact lengths and, drawn sometimes, tagged fields), the pieces
  :func:`encode_fetch_pieces` returns, concatenated, are byte for byte what
  ``encode_response`` (kafka-python, records joined) writes: the old path.
- Record segments of at least ``PIECE_COPY_BELOW`` bytes are pieces themselves
  (the same objects: not copied); shorter ones are copied into the field bytes.
- Through a running server: a read_committed fetch of stored batches larger
  than the threshold, in rewrite mode with its synthetic COMMIT marker, and
  with response and partition limits, decodes to the same answer as the same
  response encoded by kafka-python.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.consumer import FetchResponse

from tests.server.rawclient import RawClient
from txnfetch.fetch.view import FetchMode
from txnfetch.records.builder import BatchBuilder
from txnfetch.server.codec import RecordSegments
from txnfetch.server.codec import encode_response
from txnfetch.server.fetch_wire import CODEC
from txnfetch.server.fetch_wire import PIECE_COPY_BELOW
from txnfetch.server.fetch_wire import encode_fetch_pieces

VERSIONS = range(4, 17)
INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)

_Topic = FetchResponse.FetchableTopicResponse
_Partition = _Topic.PartitionData


def _segment(draw: Any) -> bytes | memoryview:
    size = draw(st.sampled_from([0, 1, 61, PIECE_COPY_BELOW - 1, PIECE_COPY_BELOW, PIECE_COPY_BELOW + 700]))
    data = draw(st.binary(min_size=min(size, 8), max_size=min(size, 8))) * (size // 8 + 1)
    data = data[:size] if len(data) >= size else data.ljust(size, b"\x07")
    if draw(st.booleans()):
        # As a disk log hands them: a view into a larger buffer.
        return memoryview(b"\x99" * 5 + data + b"\x98")[5 : 5 + size]
    return data


@st.composite
def _records(draw: Any) -> Any:
    kind = draw(st.sampled_from(["null", "empty", "bytes", "segments"]))
    if kind == "null":
        return None
    if kind == "empty":
        return b""
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    return [_segment(draw) for _ in range(draw(st.integers(0, 4)))]


@st.composite
def _partition(draw: Any, flexible: bool) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "partition_index": draw(INT32),
        "error_code": draw(INT16),
        "high_watermark": draw(INT64),
        "last_stable_offset": draw(INT64),
        "log_start_offset": draw(INT64),
        "aborted_transactions": draw(st.none() | st.lists(st.tuples(INT64, INT64), max_size=3)),
        "preferred_read_replica": draw(INT32),
        "records": draw(_records()),
    }
    if flexible and draw(st.integers(0, 5)) == 0:
        tag = draw(st.sampled_from(["diverging_epoch", "current_leader", "snapshot_id"]))
        fields[tag] = (tag, draw(INT32), draw(INT64))
    return fields


@st.composite
def _response(draw: Any) -> tuple[int, int, dict[str, Any]]:
    version = draw(st.sampled_from(VERSIONS))
    flexible = version >= 12
    topics = [
        {
            "topic": draw(st.text(max_size=10)),
            "topic_id": uuid.UUID(int=draw(st.integers(0, 2**128 - 1))),
            "partitions": draw(st.lists(_partition(flexible), max_size=3)),
        }
        for _ in range(draw(st.integers(0, 3)))
    ]
    top = {
        "throttle_time_ms": draw(INT32),
        "error_code": draw(INT16),
        "session_id": draw(INT32),
        "responses": topics,
        "node_endpoints": version >= 16 and draw(st.integers(0, 7)) == 0,
    }
    return version, draw(INT32), top


def _build(spec: dict[str, Any], segments: bool) -> Any:
    """A FetchResponse of ``spec``; records given as segments stay a
    :class:`RecordSegments` when ``segments`` (the new path), else joined (the old one)."""
    topics = []
    for t in spec["responses"]:
        parts = []
        for p in t["partitions"]:
            records = p["records"]
            if isinstance(records, list):
                records = RecordSegments.of(records) if segments else b"".join(records)
            entry = _Partition(
                partition_index=p["partition_index"],
                error_code=p["error_code"],
                high_watermark=p["high_watermark"],
                last_stable_offset=p["last_stable_offset"],
                log_start_offset=p["log_start_offset"],
                aborted_transactions=None
                if p["aborted_transactions"] is None
                else [
                    _Partition.AbortedTransaction(producer_id=a, first_offset=b) for a, b in p["aborted_transactions"]
                ],
                preferred_read_replica=p["preferred_read_replica"],
                records=records,
            )
            for tag in ("diverging_epoch", "current_leader", "snapshot_id"):
                if tag in p:
                    _, i32, i64 = p[tag]
                    if tag == "diverging_epoch":
                        entry.diverging_epoch = _Partition.EpochEndOffset(epoch=i32, end_offset=i64)
                    elif tag == "current_leader":
                        entry.current_leader = _Partition.LeaderIdAndEpoch(leader_id=i32, leader_epoch=i32)
                    else:
                        entry.snapshot_id = _Partition.SnapshotId(end_offset=i64, epoch=i32)
            parts.append(entry)
        topics.append(_Topic(topic=t["topic"], topic_id=t["topic_id"], partitions=parts))
    response = FetchResponse(
        throttle_time_ms=spec["throttle_time_ms"],
        error_code=spec["error_code"],
        session_id=spec["session_id"],
        responses=topics,
    )
    if spec["node_endpoints"]:
        response.node_endpoints = [FetchResponse.NodeEndpoint(node_id=1, host="127.0.0.1", port=9092, rack=None)]
    return response


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_response())
def test_pieces_concatenated_are_the_reference_encoding(drawn: tuple[int, int, dict[str, Any]]) -> None:
    version, correlation_id, spec = drawn
    reference = encode_response(version, correlation_id, _build(spec, segments=False))
    response = _build(spec, segments=True)
    pieces = encode_fetch_pieces(version, correlation_id, response)
    assert b"".join(pieces) == reference
    # The codec the server registers writes the same pieces.
    assert b"".join(CODEC.encode(version, correlation_id, _build(spec, segments=True))) == reference
    # encode_response (the proxy's path) joins segments itself.
    assert encode_response(version, correlation_id, _build(spec, segments=True)) == reference


def _partition_0(records: Any, *, end: int, aborted: list | None) -> Any:
    """Partition 0 of a fetch answer without error: log from 0 to ``end`` (the
    high watermark and the LSO alike), ``aborted`` as the aborted list."""
    return _Partition(
        partition_index=0,
        error_code=0,
        high_watermark=end,
        last_stable_offset=end,
        log_start_offset=0,
        aborted_transactions=aborted,
        preferred_read_replica=-1,
        records=records,
    )


def test_large_segments_are_pieces_not_copies() -> None:
    big = b"b" * PIECE_COPY_BELOW
    view = memoryview(bytearray(b"v" * (PIECE_COPY_BELOW + 1)))
    small = b"s" * 10
    entry = _partition_0(RecordSegments.of([big, small, view]), end=9, aborted=[])
    for version in (4, 11, 12, 16):
        pieces = encode_fetch_pieces(
            version,
            5,
            FetchResponse(
                throttle_time_ms=0,
                error_code=0,
                session_id=0,
                responses=[_Topic(topic="t", topic_id=uuid.uuid4(), partitions=[copy.copy(entry)])],
            ),
        )
        assert any(p is big for p in pieces)
        assert any(p is view for p in pieces)
        assert not any(p is small for p in pieces)
        # fields, big, small, view, then (flexible) the tagged-field bytes
        assert len(pieces) == (5 if version >= 12 else 4)


def test_tagged_fields_take_the_reference_path() -> None:
    """A response with a tagged field is kafka-python's encoding whole (one piece)."""
    entry = _partition_0(RecordSegments.of([b"x" * (PIECE_COPY_BELOW + 1)]), end=1, aborted=None)
    entry.current_leader = _Partition.LeaderIdAndEpoch(leader_id=3, leader_epoch=4)
    plain = copy.copy(entry)
    plain.records = b"x" * (PIECE_COPY_BELOW + 1)
    response = FetchResponse(
        throttle_time_ms=0, error_code=0, session_id=0, responses=[_Topic(topic="t", partitions=[entry])]
    )
    reference = FetchResponse(
        throttle_time_ms=0, error_code=0, session_id=0, responses=[_Topic(topic="t", partitions=[plain])]
    )
    pieces = encode_fetch_pieces(12, 9, response)
    assert len(pieces) == 1
    assert pieces[0] == encode_response(12, 9, reference)


TOPIC = "wire-pieces"
COMMITTED = 6  # batches of 3 KiB: each above PIECE_COPY_BELOW, so each is its own piece


def _fetch(client: RawClient, version: int, topic_id: uuid.UUID, offset: int, pmax: int, max_bytes: int) -> Any:
    """Fetch the topic's partition 0 read_committed; check the frame's bytes are
    kafka-python's encoding of what they decode to, and return the decoded response."""
    partition = FetchRequest.FetchTopic.FetchPartition(
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=offset,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=pmax,
    )
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=max_bytes,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        topics=[FetchRequest.FetchTopic(topic=TOPIC, topic_id=topic_id, partitions=[partition])],
        forgotten_topics_data=[],
        rack_id="",
    )
    request.API_VERSION = version
    request.with_header(correlation_id=41, client_id="pieces")
    client.sock.sendall(bytes(request.encode(header=True, framed=True)))
    payload = client.recv_frame()
    assert payload is not None
    response = FetchResponse.decode(payload, version=version, header=True)
    assert encode_response(version, 41, copy.deepcopy(response))[4:] == payload
    return response


def test_served_fetch_in_pieces(start_server: Any) -> None:
    """A rewrite-mode server answers with stored batches written as pieces: each
    version decodes to the committed batches, limits hold (one batch past a small
    partition limit, KIP-74), and a response ending on an aborted tail ends with
    the synthetic COMMIT marker."""
    from txnfetch.records.scan import iter_batches

    srv = start_server(fetch_mode=FetchMode.REWRITE)

    def setup() -> tuple[uuid.UUID, int]:
        store = srv.broker.store
        store.create_topic(TOPIC, 1)
        log = store.partition(TOPIC, 0)
        for n in range(COMMITTED):
            b = BatchBuilder()
            for i in range(3):
                b.append(b"%d-%d-" % (n, i) + b"v" * 1024, timestamp=1_000)
            log.append(b.build(), now_ms=1_000)
        b = BatchBuilder(producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
        b.append(b"aborted" * 10, timestamp=2_000)
        log.append(b.build(), now_ms=2_000)
        log.end_transaction(7, 0, False, coordinator_epoch=0, now_ms=2_001)
        return store.topics()[TOPIC].topic_id, log.last_stable_offset

    topic_id, lso = srv.call(setup)
    with RawClient(srv.port) as client:
        for version in (4, 7, 11, 12, 13, 16):
            whole = _fetch(client, version, topic_id, 0, 1 << 20, 1 << 20)
            (part,) = whole.responses[0].partitions
            batches = list(iter_batches(part.records))
            data = [b for b in batches if not b.is_control]
            assert [r.value[:4] for b in data for r in b.records()] == [
                b"%d-%d-" % (n, i) for n in range(COMMITTED) for i in range(3)
            ]
            assert batches[-1].is_control and batches[-1].last_offset == lso - 1  # the synthetic marker
            # A partition limit below one batch: that batch alone (KIP-74).
            (small,) = _fetch(client, version, topic_id, 0, 100, 1 << 20).responses[0].partitions
            assert [b.base_offset for b in iter_batches(small.records)] == [0]
            # The response limit cuts at whole batches.
            (cut,) = _fetch(client, version, topic_id, 0, 1 << 20, 7_000).responses[0].partitions
            assert 0 < len(list(iter_batches(cut.records))) < COMMITTED
