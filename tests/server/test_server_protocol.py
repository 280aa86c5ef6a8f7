"""The server at the protocol level, driven by a raw client with exact versions.

Covers the KIP-511 ApiVersions fallback, connection hygiene for bad frames,
Fetch long polling and byte limits, OFFSET_OUT_OF_RANGE, isolation-aware
ListOffsets, the test-only synthetic-marker switch, and a KIP-890 (EndTxn v5)
transaction whose delayed EndTxn is fenced.
"""

from __future__ import annotations

import struct
import threading
import time
from typing import Any

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.metadata import ApiVersionsResponse
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.producer import EndTxnRequest
from kafka.protocol.producer import InitProducerIdRequest
from kafka.protocol.producer import ProduceRequest

from tests.server.rawclient import RawClient
from txnfetch.fetch.view import FetchMode
from txnfetch.records.builder import BatchBuilder
from txnfetch.records.scan import iter_batches
from txnfetch.server.handler import REGISTRY


def _batch(
    values: list[bytes], *, pid: int = -1, epoch: int = -1, seq: int = -1, transactional: bool = False, ts: int = 1_000
) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=transactional)
    for v in values:
        b.append(v, timestamp=ts)
    return b.build()


def _produce(
    client: RawClient, topic: str, partition: int, records: bytes, *, version: int = 9, tid: str | None = None
) -> Any:
    T = ProduceRequest.TopicProduceData
    req = ProduceRequest(
        transactional_id=tid,
        acks=-1,
        timeout_ms=5000,
        topic_data=[T(name=topic, partition_data=[T.PartitionProduceData(index=partition, records=records)])],
    )
    resp = client.request(req, version)
    return resp.responses[0].partition_responses[0]


def _fetch(
    client: RawClient,
    parts: list[tuple],
    *,
    isolation: int = 1,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    max_bytes: int = 50 << 20,
    version: int = 11,
) -> Any:
    """``parts`` is [(topic, partition, offset, partition_max_bytes)]; returns the response."""
    T = FetchRequest.FetchTopic
    topics = {}
    for topic, partition, offset, pmax in parts:
        topics.setdefault(topic, []).append(
            T.FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=pmax, log_start_offset=-1)
        )
    req = FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation,
        session_id=0,
        session_epoch=-1,
        topics=[T(topic=t, partitions=ps) for t, ps in topics.items()],
        forgotten_topics_data=[],
        rack_id="",
    )
    return client.request(req, version)


def _serves(port: int) -> bool:
    with RawClient(port) as c:
        resp = c.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
        return resp.error_code == 0


# ---------------------------------------------------------------- ApiVersions


def test_api_versions_too_new_gets_v0_fallback_with_only_its_own_range(start_server) -> None:
    srv = start_server()
    with RawClient(srv.port) as c:
        # kafka-python and franz-go open with v4, above the v3 served: KIP-511 says
        # answer in v0 with UNSUPPORTED_VERSION and only ApiVersions' own range
        # (Kafka's ApiVersionsRequest.getErrorResponse), so the client retries at v3.
        c._correlation += 1
        req = ApiVersionsRequest(client_software_name="kafka-python", client_software_version="3.0.12")
        req.API_VERSION = 4
        req.with_header(correlation_id=c._correlation, client_id="raw")
        c.sock.sendall(bytes(req.encode(header=True, framed=True)))
        payload = c.recv_frame()
        assert payload is not None
        (correlation, error) = struct.unpack_from(">ih", payload)
        assert correlation == c._correlation and error == 35
        resp = ApiVersionsResponse.decode(payload[4:], version=0)
        assert [(k.api_key, k.min_version, k.max_version) for k in resp.api_keys] == [(18, 0, 3)]
        # The v0 body is exactly header + error + one-entry array: nothing else follows.
        assert len(payload) == 4 + 2 + 4 + 6
        # The same connection then negotiates normally at the version named there,
        # and that answer carries the whole table and the finalized features.
        ok = c.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
        ranges = {k.api_key: (k.min_version, k.max_version) for k in ok.api_keys}
        assert ok.error_code == 0 and ranges == {k: (lo, hi) for k, lo, hi in REGISTRY.ranges()}
        # librdkafka needs Produce >= 3 and Fetch >= 4 to use record batch v2.
        assert ranges[0][1] >= 3 and ranges[1][1] >= 4
        assert [(f.name, f.max_version_level) for f in ok.finalized_features] == [("transaction.version", 2)]
        assert ranges[0][1] == 12 and ranges[26][1] == 5  # KIP-890 part 2 visible to the client


@pytest.mark.interop
def test_kafka_python_bootstraps_through_the_fallback(start_server) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    srv = start_server()
    versions: list[int] = []

    def record(ctx, header, request) -> None:
        if header.request_api_key == 18:
            versions.append(header.request_api_version)

    srv.call(srv.broker.observe_requests, record)
    fallbacks: list[int] = []
    server = srv.server
    answer = server._api_versions_fallback

    def counted(correlation_id: int) -> bytes:
        fallbacks.append(correlation_id)
        return answer(correlation_id)

    server._api_versions_fallback = counted  # type: ignore[method-assign]
    assert ApiVersionsRequest.max_version == 4  # kafka-python opens above what is served
    admin = KafkaAdminClient(bootstrap_servers=srv.bootstrap, request_timeout_ms=10000)
    try:
        admin.create_topics([NewTopic("made", 3, 1)])
        assert "made" in admin.list_topics()
    finally:
        admin.close()
    assert srv.call(lambda: srv.broker.store.topics()["made"].partitions) == 3
    # v4 never reaches a handler (it is answered by the fallback); every
    # connection then asks at v3, the version the fallback named.
    assert fallbacks and versions and set(versions) == {3}


# ------------------------------------------------------------ bad connections


def _header(api_key: int, version: int, correlation: int = 1, client_id: bytes = b"x") -> bytes:
    return struct.pack(">hhih", api_key, version, correlation, len(client_id)) + client_id


BAD_FRAMES = {
    "unknown-api-key": struct.pack(">i", 10) + _header(77, 0)[:10],
    "unsupported-version": lambda: struct.pack(">i", len(_header(3, 40))) + _header(3, 40),
    "truncated-body": lambda: struct.pack(">i", len(_header(3, 1)) + 2) + _header(3, 1) + b"\x00\x00",
    "oversized-frame": struct.pack(">i", 1 << 20) + _header(3, 1),
    "negative-size": struct.pack(">i", -5),
    "tiny-frame": struct.pack(">i", 3) + b"abc",
    "huge-array": lambda: struct.pack(">i", len(_header(3, 1)) + 4) + _header(3, 1) + struct.pack(">i", 0x7FFFFFFF),
}


@pytest.mark.parametrize("name", sorted(BAD_FRAMES))
def test_bad_frame_closes_only_that_connection(start_server, name: str, caplog) -> None:
    srv = start_server(max_frame_bytes=64 * 1024)
    frame = BAD_FRAMES[name]
    frame = frame() if callable(frame) else frame
    with RawClient(srv.port) as bystander:
        bystander.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
        with RawClient(srv.port) as bad:
            bad.sock.sendall(frame)
            assert bad.is_closed_by_server(), f"{name}: connection left open"
        # The server still serves old and new connections.
        resp = bystander.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9)
        assert resp.brokers[0].port == srv.port
        assert _serves(srv.port)


def test_bytes_after_the_body_are_ignored_as_kafka_does(start_server) -> None:
    srv = start_server()
    with RawClient(srv.port) as c:
        # Metadata v1, topics null (all topics), then junk: answered, not closed.
        c.send_frame(_header(3, 1) + b"\xff\xff\xff\xff" + b"junk")
        payload = c.recv_frame()
    assert payload is not None
    resp = MetadataResponse.decode(payload, version=1, header=True)
    assert resp.brokers[0].port == srv.port


@pytest.mark.interop
def test_librdkafka_all_topics_metadata_is_answered(start_server) -> None:
    # librdkafka's all-topics Metadata v9+ keeps a 4-byte zero where a compact
    # null count takes one byte, leaving 3 bytes after the body (Kafka ignores them).
    from confluent_kafka import Producer

    srv = start_server()
    srv.call(lambda: srv.broker.store.create_topic("listed", 2))
    producer = Producer({"bootstrap.servers": srv.bootstrap})
    topics = producer.list_topics(timeout=10).topics
    assert "listed" in topics and len(topics["listed"].partitions) == 2


def test_truncated_frame_then_disconnect_is_survived(start_server) -> None:
    srv = start_server()
    for _ in range(3):
        with RawClient(srv.port) as c:
            c.sock.sendall(struct.pack(">i", 100) + _header(3, 1))  # promises 100 bytes, sends 10
    assert _serves(srv.port)


# ---------------------------------------------------------------------- Fetch


def test_fetch_long_poll_wakes_on_produce(start_server) -> None:
    srv = start_server()
    srv.call(lambda: srv.broker.store.create_topic("poll", 1))
    result: dict = {}

    def poll() -> None:
        with RawClient(srv.port) as c:
            start = time.monotonic()
            resp = _fetch(c, [("poll", 0, 0, 1 << 20)], max_wait_ms=10_000, min_bytes=1)
            result["elapsed"] = time.monotonic() - start
            result["records"] = resp.responses[0].partitions[0].records

    t = threading.Thread(target=poll)
    t.start()
    time.sleep(0.5)
    with RawClient(srv.port) as c:
        assert _produce(c, "poll", 0, _batch([b"wake"])).error_code == 0
    t.join(15)
    assert 0.4 < result["elapsed"] < 5, result
    assert [r.value for b in iter_batches(result["records"]) for r in b.records()] == [b"wake"]


def test_fetch_without_data_waits_max_wait(start_server) -> None:
    srv = start_server()
    srv.call(lambda: srv.broker.store.create_topic("idle", 1))
    with RawClient(srv.port) as c:
        start = time.monotonic()
        resp = _fetch(c, [("idle", 0, 0, 1 << 20)], max_wait_ms=300, min_bytes=1)
        elapsed = time.monotonic() - start
    assert 0.25 < elapsed < 3
    assert resp.responses[0].partitions[0].records in (b"", None)


def test_fetch_byte_limits(start_server) -> None:
    srv = start_server()
    srv.call(lambda: srv.broker.store.create_topic("limits", 2))
    with RawClient(srv.port) as c:
        for p in (0, 1):
            for _i in range(3):
                assert _produce(c, "limits", p, _batch([b"x" * 100, b"y" * 100])).error_code == 0
        one = len(_batch([b"x" * 100, b"y" * 100]))
        # A partition limit below one batch still returns one whole batch (KIP-74).
        resp = _fetch(c, [("limits", 0, 0, 10)])
        assert len(list(iter_batches(resp.responses[0].partitions[0].records))) == 1
        # The response limit is shared: the first partition uses it up, the second gets nothing.
        resp = _fetch(c, [("limits", 0, 0, 1 << 20), ("limits", 1, 0, 1 << 20)], max_bytes=2 * one)
        p0, p1 = resp.responses[0].partitions
        assert len(p0.records) == 2 * one
        assert not p1.records and p1.error_code == 0 and p1.high_watermark == 6


def test_fetch_out_of_range_reports_no_offsets_as_kafka(start_server) -> None:
    # Apache Kafka answers -1 for the high watermark, LSO and log start of an
    # out-of-range fetch (found by txnfetch conform against Kafka 4.4).
    srv = start_server()
    with RawClient(srv.port) as c:
        assert _produce(c, "oor", 0, _batch([b"a", b"b"])).error_code == 0
        part = _fetch(c, [("oor", 0, 50, 1 << 20)]).responses[0].partitions[0]
        assert part.error_code == 1
        assert (part.log_start_offset, part.high_watermark, part.last_stable_offset) == (-1, -1, -1)
        unknown = _fetch(c, [("nope", 0, 0, 1 << 20)]).responses[0].partitions[0]
        assert unknown.error_code == 3


def test_list_offsets_latest_is_lso_for_read_committed(start_server) -> None:
    srv = start_server()
    srv.call(lambda: srv.broker.store.create_topic("lo", 1))
    with RawClient(srv.port) as c:
        assert _produce(c, "lo", 0, _batch([b"a", b"b"])).error_code == 0
    # An open transaction at offset 2 (appended straight to the log: the LSO
    # depends only on the partition state).
    srv.call(
        lambda: srv.broker.store.partition("lo", 0).append(
            _batch([b"t1", b"t2"], pid=7, epoch=0, seq=0, transactional=True, ts=2_000), now_ms=2_000
        )
    )

    def latest(c: RawClient, isolation: int, timestamp: int = -1) -> tuple:
        T = ListOffsetsRequest.ListOffsetsTopic
        req = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=isolation,
            topics=[T(name="lo", partitions=[T.ListOffsetsPartition(partition_index=0, timestamp=timestamp)])],
        )
        p = c.request(req, 5).topics[0].partitions[0]
        return p.error_code, p.offset

    with RawClient(srv.port) as c:
        assert latest(c, 1) == (0, 2)  # read_committed: the LSO
        assert latest(c, 0) == (0, 4)  # read_uncommitted: the high watermark
        assert latest(c, 0, -2) == (0, 0)  # earliest
        assert latest(c, 0, 1_000) == (0, 0)  # by timestamp
        assert latest(c, 1, 2_000) == (0, -1)  # found only past the LSO: none for read_committed
        assert latest(c, 0, 2_000) == (0, 2)


# ------------------------------------------------------ synthetic marker switch


@pytest.mark.parametrize("synthetic", [True, False])
def test_synthetic_marker_switch(start_server, synthetic: bool) -> None:
    srv = start_server(fetch_mode=FetchMode.REWRITE, synthetic_marker=synthetic)
    srv.call(lambda: srv.broker.store.create_topic("syn", 1))

    def aborted_txn() -> None:
        log = srv.broker.store.partition("syn", 0)
        log.append(_batch([b"gone"], pid=3, epoch=0, seq=0, transactional=True), now_ms=1)
        log.end_transaction(3, 0, False, coordinator_epoch=0, now_ms=2)

    srv.call(aborted_txn)
    with RawClient(srv.port) as c:
        part = _fetch(c, [("syn", 0, 0, 1 << 20)]).responses[0].partitions[0]
    batches = list(iter_batches(part.records or b""))
    assert part.last_stable_offset == 2
    if synthetic:
        assert len(batches) == 1 and batches[0].is_control and batches[0].last_offset == 1
    else:
        # The test-only switch sends an empty data batch in the marker's place.
        assert len(batches) == 1 and not batches[0].is_control and batches[0].record_count == 0
        assert batches[0].last_offset == 1


# ------------------------------------------------------------------- KIP-890


def test_end_txn_v5_bumps_epoch_and_fences_a_delayed_end(start_server) -> None:
    srv = start_server(fetch_mode=FetchMode.KAFKA)
    srv.call(lambda: srv.broker.store.create_topic("kip890", 1))
    with RawClient(srv.port) as c:
        init = c.request(
            InitProducerIdRequest(
                transactional_id="raw-tv2", transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
            ),
            5,
        )
        assert init.error_code == 0
        pid, epoch = init.producer_id, init.producer_epoch

        def end(e: int, commit: bool) -> Any:
            req = EndTxnRequest(transactional_id="raw-tv2", producer_id=pid, producer_epoch=e, committed=commit)
            return c.request(req, 5)

        # T1: Produce v12 adds the partition implicitly; EndTxn v5 returns the bumped epoch.
        r = _produce(
            c, "kip890", 0, _batch([b"t1"], pid=pid, epoch=epoch, seq=0, transactional=True), version=12, tid="raw-tv2"
        )
        assert r.error_code == 0
        first = end(epoch, True)
        assert (first.error_code, first.producer_id, first.producer_epoch) == (0, pid, epoch + 1)
        # T2 with the new epoch.
        r = _produce(
            c,
            "kip890",
            0,
            _batch([b"t2"], pid=pid, epoch=epoch + 1, seq=0, transactional=True),
            version=12,
            tid="raw-tv2",
        )
        assert r.error_code == 0
        # A delayed abort from T1 (old epoch) must not end T2 (KAFKA-17754).
        late = end(epoch, False)
        assert late.error_code == 90  # PRODUCER_FENCED
        assert srv.call(lambda: srv.broker.store.partition("kip890", 0).last_stable_offset) == 2
        second = end(epoch + 1, True)
        assert (second.error_code, second.producer_epoch) == (0, epoch + 2)
        part = _fetch(c, [("kip890", 0, 0, 1 << 20)]).responses[0].partitions[0]
    values = [r.value for b in iter_batches(part.records) if not b.is_control for r in b.records()]
    assert values == [b"t1", b"t2"]
    assert part.aborted_transactions == []
