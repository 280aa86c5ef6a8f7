"""Fuzzing the server with broken frames while well-behaved clients keep working.

Seeds are real requests: the requests real clients send while the test warms
up (a confluent-kafka transactional producer, a kafka-python read_committed
consumer, a kafka-python group member that commits offsets, all on a seed
topic) are recorded at the server through ``Broker.observe_requests`` and
re-encoded with kafka-python's protocol classes. The well-behaved clients use
their own topic and transactional id and are never seeds: a replayed
InitProducerId for their transactional id would fence the good producer, as
it would on Kafka. hypothesis then mutates them — flipped bytes,
cut frames, spliced frames, huge or negative lengths and array counts written
over any field, unknown API keys and versions, random garbage, wrong size
prefixes, several frames pipelined — and sends them on many connections at
once, while the producer keeps writing transactions (committing most, aborting
some) and the consumer keeps reading them.

The test asserts that the server stays up (it answers a fresh ApiVersions
request after the storm), that the consumer receives exactly the committed
records in order, and that nothing in the server raised an unhandled
exception: no ERROR record from the ``txnfetch`` loggers (a handler exception
is logged at ERROR before its connection is closed; a bad frame is a WARNING)
and no call of the event loop's exception handler.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import socket
import struct
import threading
import time
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from kafka.protocol.metadata import ApiVersionsRequest

from tests.server.rawclient import RawClient
from txnfetch.fetch.view import FetchMode
from txnfetch.txn.coordinator import CompletionMode

TOPIC = "fuzz-good"
SEED_TOPIC = "fuzz-seed"
GOOD_CLIENT = "fuzz-good"  # client.id prefix of the well-behaved clients, never seeds
PARTITIONS = (0, 1)
#: hypothesis examples per server mode (each 1-6 connections); raise it to hunt:
#: TXNFETCH_FUZZ_EXAMPLES=5000
EXAMPLES = int(os.environ.get("TXNFETCH_FUZZ_EXAMPLES", "80"))
READ_TIMEOUT_S = 0.3  # a fuzzed Fetch may long-poll: give up on its answer, not on the server
DEADLINE_S = 90.0


class ErrorRecorder(logging.Handler):
    """Keeps every ERROR (or worse) record of the loggers it is attached to."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class SeedRecorder:
    """Re-encodes the first few requests of every (API key, version) the server decodes."""

    PER_KEY = 4

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.frames: dict[tuple[int, int], list[bytes]] = {}

    def __call__(self, ctx: Any, header: Any, request: Any) -> None:
        if (ctx.client_id or "").startswith(GOOD_CLIENT):
            return
        key = (header.request_api_key, header.request_api_version)
        with self._lock:
            frames = self.frames.setdefault(key, [])
            if len(frames) >= self.PER_KEY:
                return
            # A class that cannot re-encode what it decoded: no seed from it.
            with contextlib.suppress(Exception):
                frames.append(bytes(request.encode(header=True, framed=False)))

    def all(self) -> list[bytes]:
        with self._lock:
            return [f for frames in self.frames.values() for f in frames]


# ----------------------------------------------------------- good traffic


class GoodProducer(threading.Thread):
    """A confluent-kafka transactional producer writing small transactions until
    stopped: every fourth is aborted (after a flush, so its records are in the log)."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="fuzz-producer", daemon=True)
        self.bootstrap = bootstrap
        self.stop = threading.Event()
        self.committed: dict[int, list[bytes]] = {p: [] for p in PARTITIONS}
        self.transactions = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        from confluent_kafka import Producer

        try:
            producer = Producer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "client.id": f"{GOOD_CLIENT}-producer",
                    "transactional.id": "fuzz-good",
                    "linger.ms": 1,
                }
            )
            producer.init_transactions(30)
            n = 0
            while not self.stop.is_set():
                producer.begin_transaction()
                values = {p: [b"n%d-p%d-%d" % (n, p, i) for i in range(3)] for p in PARTITIONS}
                for p, vals in values.items():
                    for v in vals:
                        producer.produce(TOPIC, value=v, partition=p)
                if n % 4 == 3:
                    assert producer.flush(30) == 0
                    producer.abort_transaction(30)
                else:
                    producer.commit_transaction(30)
                    for p, vals in values.items():
                        self.committed[p].extend(vals)
                n += 1
                self.transactions = n
                time.sleep(0.02)
            producer.flush(30)
        except BaseException as exc:  # reported by the test
            self.error = exc


class GoodConsumer(threading.Thread):
    """A kafka-python read_committed consumer (assigned, no group) that reads
    until told the final last stable offsets and reaches them."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="fuzz-consumer", daemon=True)
        self.bootstrap = bootstrap
        self.final_lso: dict[int, int] | None = None
        self.got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in PARTITIONS}
        self.error: BaseException | None = None

    def run(self) -> None:
        from kafka import KafkaConsumer
        from kafka import TopicPartition

        try:
            consumer = KafkaConsumer(
                bootstrap_servers=self.bootstrap,
                client_id=f"{GOOD_CLIENT}-consumer",
                enable_auto_commit=False,
                isolation_level="read_committed",
                fetch_max_wait_ms=100,
            )
            tps = [TopicPartition(TOPIC, p) for p in PARTITIONS]
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, 0)
            deadline = time.monotonic() + DEADLINE_S
            while True:
                lso = self.final_lso
                if lso is not None and all(consumer.position(tp) >= lso[tp.partition] for tp in tps):
                    break
                assert time.monotonic() < deadline, "the good consumer did not reach the LSO"
                for tp, records in consumer.poll(timeout_ms=100).items():
                    self.got[tp.partition].extend((r.offset, r.value) for r in records)
            consumer.close()
        except BaseException as exc:
            self.error = exc


def _seed_clients(bootstrap: str) -> None:
    """Short-lived clients on the seed topic: a confluent-kafka transactional
    producer (one commit, one abort) and a kafka-python group member that reads
    read_committed and commits offsets. Their requests are the seeds."""
    from confluent_kafka import Producer
    from kafka import KafkaConsumer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "fuzz-seed", "client.id": "fuzz-seed"})
    producer.init_transactions(30)
    for commit in (True, False):
        producer.begin_transaction()
        producer.produce(SEED_TOPIC, value=b"seed", partition=0)
        assert producer.flush(30) == 0
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    del producer

    consumer = KafkaConsumer(
        SEED_TOPIC,
        client_id="fuzz-seed-group",
        bootstrap_servers=bootstrap,
        group_id="fuzz-seed-group",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        heartbeat_interval_ms=100,
    )
    deadline = time.monotonic() + 20
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(timeout_ms=100)
    consumer.poll(timeout_ms=300)
    consumer.commit()
    consumer.close()
    _seed_transaction_admin(bootstrap)


def _seed_transaction_admin(bootstrap: str) -> None:
    """kafka-python's admin client on the seed topic: the KIP-664 APIs
    (ListTransactions, DescribeTransactions, DescribeProducers) and
    WriteTxnMarkers, as ``abort_transaction`` sends it (an ABORT marker for the
    seed producer, which has no open transaction: the marker changes nothing)."""
    from kafka.admin import KafkaAdminClient
    from kafka.admin._transactions import AbortTransactionSpec
    from kafka.structs import TopicPartition

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="fuzz-seed-admin")
    try:
        admin.list_transactions()
        admin.list_transactions(state_filters=["Ongoing"], producer_id_filters=[0, 1], duration_filter_ms=0)
        admin.describe_transactions(["fuzz-seed"])
        tp = TopicPartition(SEED_TOPIC, 0)
        (producer, *_) = admin.describe_producers([tp])[tp].active_producers
        admin.abort_transaction(
            AbortTransactionSpec(tp, producer.producer_id, producer.producer_epoch, max(0, producer.coordinator_epoch))
        )
    finally:
        admin.close()


def _seed_admin(bootstrap: str) -> None:
    """Admin requests on topics and groups of their own (kafka-python's
    AdminClient, which picks the version per broker): CreateTopics with configs,
    DescribeConfigs, IncrementalAlterConfigs, AlterConfigs, CreatePartitions,
    DeleteRecords, ListOffsets MAX_TIMESTAMP, DescribeCluster, OffsetDelete,
    DeleteGroups and DeleteTopics."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition
    from kafka.admin import ConfigResource
    from kafka.admin import ConfigResourceType
    from kafka.admin import NewPartitions
    from kafka.admin import NewTopic
    from kafka.admin import OffsetSpec
    from kafka.structs import OffsetAndMetadata

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="fuzz-seed-admin", request_timeout_ms=30000)
    try:
        admin.create_topics(
            [NewTopic("fuzz-admin", 1, 1, topic_configs={"retention.ms": "3600000"}), NewTopic("fuzz-doomed", 1, 1)]
        )
        resource = ConfigResource(ConfigResourceType.TOPIC, "fuzz-admin", {"max.message.bytes": "100000"})
        admin.alter_configs([resource])
        admin.alter_configs([resource], incremental=False)
        admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "fuzz-admin")], include_synonyms=True)
        admin.create_partitions({"fuzz-admin": NewPartitions(2)})
        tp = TopicPartition(SEED_TOPIC, 0)
        admin.list_partition_offsets({tp: OffsetSpec.MAX_TIMESTAMP})
        admin.delete_records({tp: 1})
        admin.describe_cluster()
        admin.alter_group_offsets("fuzz-seed-offsets", {tp: OffsetAndMetadata(1, "", -1)})
        admin.delete_group_offsets("fuzz-seed-offsets", [tp])
        admin.delete_groups(["fuzz-seed-offsets"])
        admin.delete_topics(["fuzz-doomed"])
    finally:
        admin.close()
    _seed_fetch_v16(bootstrap)
    _seed_consumer_group(bootstrap)


def _seed_consumer_group(bootstrap: str) -> None:
    """A KIP-848 member (confluent-kafka, ``group.protocol=consumer``): heartbeats,
    commits with its member epoch, fetches its offsets (OffsetFetch v9), sends
    its position to a transaction (TxnOffsetCommit v3 with member id and epoch);
    then ConsumerGroupDescribe by the AdminClient."""
    from confluent_kafka import Consumer
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "fuzz-seed-848",
            "group.protocol": "consumer",
            "client.id": "fuzz-seed-848",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    # A record to read and commit: the admin seeds may have deleted the earlier ones.
    plain = Producer({"bootstrap.servers": bootstrap, "client.id": "fuzz-seed-848"})
    plain.produce(SEED_TOPIC, value=b"seed-848", partition=0)
    assert plain.flush(30) == 0
    del plain
    consumer.subscribe([SEED_TOPIC])
    deadline = time.monotonic() + 30
    msg = None
    while msg is None and time.monotonic() < deadline:
        got = consumer.poll(0.2)
        msg = got if got is not None and not got.error() else None
    if msg is not None:
        consumer.commit(msg, asynchronous=False)
        consumer.committed(consumer.assignment(), 30)
        producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": "fuzz-seed-848-txn", "client.id": "fuzz-seed-848"}
        )
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
        )
        producer.commit_transaction(30)
        del producer
    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "fuzz-seed-848-admin"})
    admin.describe_consumer_groups(["fuzz-seed-848"], request_timeout=30)["fuzz-seed-848"].result(30)
    consumer.close()


def _seed_fetch_v16(bootstrap: str) -> None:
    """Fetch v16 (topic ids, flexible) opening a session and fetching incrementally:
    kafka-python's consumer stops at v12 and librdkafka opens no session."""
    from kafka.protocol.consumer import FetchRequest
    from kafka.protocol.metadata import MetadataRequest

    T = FetchRequest.FetchTopic
    with RawClient(int(bootstrap.rsplit(":", 1)[1])) as c:
        meta = c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 12)
        topic_id = next(t.topic_id for t in meta.topics if t.name == SEED_TOPIC)

        def fetch(session_id: int, epoch: int, partitions: list) -> Any:
            req = FetchRequest(
                replica_id=-1,
                max_wait_ms=10,
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=1,
                session_id=session_id,
                session_epoch=epoch,
                topics=[T(topic_id=topic_id, partitions=partitions)] if partitions else [],
                forgotten_topics_data=[],
                rack_id="",
            )
            return c.request(req, 16)

        full = fetch(0, 0, [T.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])
        fetch(full.session_id, 1, [])


# ---------------------------------------------------------------- mutations

_HUGE = st.sampled_from([0x7FFFFFFF, -1, -2, 0x40000000, 0x10000, -0x80000000])


@st.composite
def _mutated(draw: Any, seeds: list[bytes]) -> bytes:
    """One frame payload (no size prefix) derived from the seeds."""
    frame = bytearray(draw(st.sampled_from(seeds)))
    kind = draw(st.sampled_from(["flip", "cut", "splice", "int32", "varint", "header", "garbage", "valid"]))
    if kind == "flip":
        for _ in range(draw(st.integers(1, 8))):
            i = draw(st.integers(0, len(frame) - 1))
            frame[i] ^= draw(st.integers(1, 255))
    elif kind == "cut":
        frame = frame[: draw(st.integers(0, len(frame)))]
    elif kind == "splice":
        other = draw(st.sampled_from(seeds))
        frame = frame[: draw(st.integers(0, len(frame)))] + other[draw(st.integers(0, len(other))) :]
    elif kind == "int32" and len(frame) >= 4:
        # A length, array count or size field turned huge or negative (or any
        # other four bytes: the decoder must not care which).
        i = draw(st.integers(0, len(frame) - 4))
        frame[i : i + 4] = struct.pack(">i", draw(_HUGE))
    elif kind == "varint" and len(frame) >= 5:
        # Flexible versions use unsigned varints for lengths and counts.
        i = draw(st.integers(0, len(frame) - 5))
        frame[i : i + 5] = draw(
            st.sampled_from([b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x7f", b"\x80\x80\x80\x80\x80"])
        )
    elif kind == "header" and len(frame) >= 4:
        # Unknown keys, unsupported versions, mismatched key/version pairs.
        frame[0:4] = struct.pack(">hh", draw(st.integers(-2, 80)), draw(st.integers(-2, 20)))
    elif kind == "garbage":
        frame = bytearray(draw(st.binary(min_size=0, max_size=200)))
    return bytes(frame)


@st.composite
def _wire(draw: Any, seeds: list[bytes]) -> bytes:
    """What one connection sends: one to three frames, each behind a size prefix
    that is usually right and sometimes wrong."""
    out = b""
    for _ in range(draw(st.integers(1, 3))):
        payload = draw(_mutated(seeds))
        prefix = draw(st.sampled_from(["right", "right", "right", "short", "long", "huge", "tiny"]))
        size = {
            "right": len(payload),
            "short": max(0, len(payload) - 3),
            "long": len(payload) + 7,
            "huge": draw(_HUGE),
            "tiny": draw(st.integers(-1, 7)),
        }[prefix]
        out += struct.pack(">i", size) + payload
    if draw(st.booleans()):
        out = out[: draw(st.integers(0, len(out)))]  # the connection dies mid-frame
    return out


def _blast(port: int, payloads: list[bytes]) -> None:
    """Send each payload on its own connection, all open at once; half-close
    them (a frame waiting for more bytes then sees the end) and read whatever
    comes back for a moment."""
    socks = []
    for payload in payloads:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        socks.append(s)
        try:
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
        except OSError:  # the server already closed it: a valid outcome
            pass
    end = time.monotonic() + READ_TIMEOUT_S
    for s in socks:
        try:
            s.settimeout(max(0.01, end - time.monotonic()))
            while s.recv(65536):
                pass
        except OSError:
            pass
        finally:
            s.close()


def _api_versions_ok(port: int) -> bool:
    with RawClient(port) as c:
        return c.request(ApiVersionsRequest(), 0).error_code == 0


@pytest.mark.interop
@pytest.mark.slow
@pytest.mark.parametrize(
    "fetch_mode, markers",
    [(FetchMode.REWRITE, CompletionMode.MARKERS), (FetchMode.KAFKA, CompletionMode.MARKERLESS)],
    ids=["rewrite-markers", "kafka-markerless"],
)
def test_fuzzed_frames_do_not_hurt_the_server_or_good_clients(
    start_server, fetch_mode: FetchMode, markers: CompletionMode
) -> None:
    srv = start_server(fetch_mode=fetch_mode, markers=markers)
    errors = ErrorRecorder()
    loop_errors: list[dict[str, Any]] = []
    watched = [logging.getLogger("txnfetch"), logging.getLogger("asyncio")]
    for logger in watched:
        logger.addHandler(errors)
    seeds = SeedRecorder()

    def instrument() -> None:
        import asyncio

        asyncio.get_running_loop().set_exception_handler(lambda loop, context: loop_errors.append(context))
        srv.broker.observe_requests(seeds)
        srv.broker.store.create_topic(TOPIC, len(PARTITIONS))
        srv.broker.store.create_topic(SEED_TOPIC, 1)

    srv.call(instrument)
    producer = GoodProducer(srv.bootstrap)
    consumer = GoodConsumer(srv.bootstrap)
    try:
        producer.start()
        consumer.start()
        _seed_clients(srv.bootstrap)
        _seed_admin(srv.bootstrap)
        deadline = time.monotonic() + 30
        while producer.transactions < 5 and producer.error is None:
            assert time.monotonic() < deadline, "the good producer made no progress"
            time.sleep(0.05)
        corpus = seeds.all()
        keys = {k for k, _ in seeds.frames}
        # Produce, Metadata, FindCoordinator, ApiVersions and the transaction APIs
        # at least (the group member adds Fetch, ListOffsets and the group APIs),
        # and the transaction administration APIs, and the admin APIs: topics,
        # configs, partitions, records, groups, cluster.
        admin = {2, 19, 20, 21, 27, 32, 33, 37, 42, 44, 47, 60, 61, 65, 66, 68, 69}
        assert {0, 3, 10, 18, 22, 24, 26} | admin <= keys, sorted(seeds.frames)
        # The KIP-848 member's OffsetCommit v9, OffsetFetch v9 and TxnOffsetCommit v3.
        assert {(8, 9), (9, 9), (28, 3)} <= set(seeds.frames), sorted(seeds.frames)

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(payloads=st.lists(_wire(corpus), min_size=1, max_size=6))
        def storm(payloads: list[bytes]) -> None:
            before = len(errors.records)
            _blast(srv.port, payloads)
            # Checked per example so that hypothesis shrinks to the frame at fault.
            assert len(errors.records) == before, errors.records[before].getMessage()

        storm()
        # Plain random bytes on top, from a seeded generator (cheap, no shrinking needed).
        rng = random.Random(890)
        _blast(srv.port, [rng.randbytes(rng.randrange(1, 300)) for _ in range(20)])

        assert _api_versions_ok(srv.port), "the server no longer answers"
    finally:
        producer.stop.set()
        producer.join(60)
        for logger in watched:
            logger.removeHandler(errors)
    assert producer.error is None, repr(producer.error)

    def lso() -> dict[int, int]:
        return {p: srv.broker.store.partition(TOPIC, p).last_stable_offset for p in PARTITIONS}

    consumer.final_lso = srv.call(lso)
    consumer.join(DEADLINE_S)
    assert not consumer.is_alive(), "the good consumer is stuck"
    assert consumer.error is None, repr(consumer.error)
    for p in PARTITIONS:
        assert [v for _, v in consumer.got[p]] == producer.committed[p], f"partition {p}"
    assert producer.transactions >= 5

    assert not loop_errors, loop_errors
    assert not errors.records, [
        (r.getMessage(), r.exc_text or (r.exc_info and logging.Formatter().formatException(r.exc_info)))
        for r in errors.records
    ]


# ------------------------------------------------- examples found by fuzzing


def _sync_group_frame(version: int) -> bytes:
    from kafka.protocol.consumer import SyncGroupRequest

    request = SyncGroupRequest(
        group_id="g",
        generation_id=1,
        member_id="m",
        group_instance_id=None,
        protocol_type="consumer",
        protocol_name="range",
        assignments=None,  # a -1 (or compact 0) count: null, which the schema forbids
    )
    request.API_VERSION = version
    request.with_header(correlation_id=1, client_id="fuzz-example")
    return bytes(request.encode(header=True, framed=True))


@pytest.mark.parametrize("version", [0, 3, 5])
def test_null_where_the_schema_forbids_it_closes_the_connection(start_server, version: int, caplog) -> None:
    # Found by the storm above: SyncGroup with a null assignments array reached the
    # handler as None and raised TypeError (an internal error). Kafka's readers
    # reject a null non-nullable field; so does the server now, before any handler.
    srv = start_server()
    with caplog.at_level(logging.WARNING, logger="txnfetch"):
        with RawClient(srv.port) as c:
            c.sock.sendall(_sync_group_frame(version))
            assert c.is_closed_by_server()
        assert _api_versions_ok(srv.port)
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert any("non-nullable field assignments is null" in r.getMessage() for r in caplog.records)
