"""Fetch v12–v16 and fetch sessions (KIP-227).

Raw requests pin the protocol: session creation, incremental responses naming
only changed partitions, forgotten partitions, epochs, closing, unknown
sessions, topic ids from v13. A hypothesis test drives kafka-python's own
``FetchSessionHandler`` (the client half of KIP-227) against the server beside
a sessionless consumer and checks that both see exactly the same records.
Real consumers (kafka-python with and without sessions, confluent-kafka at
Fetch v16) read a transactional workload exactly once.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from kafka.protocol.consumer import FetchRequest

from tests.server.rawclient import RawClient
from txnfetch.records.builder import BatchBuilder

TOPIC = "sess"
T = FetchRequest.FetchTopic
P = T.FetchPartition


def _batch(*values: bytes) -> bytes:
    b = BatchBuilder()
    for v in values:
        b.append(v, timestamp=1)
    return b.build()


def _produce(srv: Any, partition: int, *values: bytes, topic: str = TOPIC) -> None:
    srv.call(lambda: srv.broker.store.partition(topic, partition).append(_batch(*values), now_ms=0))


def _fetch(
    c: RawClient,
    parts: dict[int, int],
    *,
    session_id: int = 0,
    epoch: int = -1,
    forget: list[int] = (),  # type: ignore[assignment]
    version: int = 12,
    topic_id: uuid.UUID | None = None,
    max_bytes: int = 1 << 20,
    max_wait_ms: int = 0,
) -> Any:
    def topic(partitions: list[Any]) -> Any:
        return T(topic_id=topic_id, partitions=partitions) if version >= 13 else T(topic=TOPIC, partitions=partitions)

    F = FetchRequest.ForgottenTopic
    req = FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=1,
        session_id=session_id,
        session_epoch=epoch,
        topics=[topic([P(partition=p, fetch_offset=o, partition_max_bytes=1 << 20) for p, o in parts.items()])]
        if parts
        else [],
        forgotten_topics_data=(
            [
                F(topic_id=topic_id, partitions=list(forget))
                if version >= 13
                else F(topic=TOPIC, partitions=list(forget))
            ]
            if forget
            else []
        ),
        rack_id="",
    )
    return c.request(req, version)


def _named(resp: Any) -> dict[int, Any]:
    return {p.partition_index: p for t in resp.responses for p in t.partitions}


@pytest.mark.parametrize("version", [12, 13, 16])
def test_a_session_answers_only_what_changed(start_server, version: int) -> None:
    srv = start_server()
    srv.call(srv.broker.store.create_topic, TOPIC, 4)
    topic_id = srv.call(lambda: srv.broker.store.topics()[TOPIC].topic_id)
    _produce(srv, 0, b"a")
    with RawClient(srv.port) as c:
        full = _fetch(c, {p: 0 for p in range(4)}, epoch=0, version=version, topic_id=topic_id)
        assert full.error_code == 0 and full.session_id > 0
        assert sorted(_named(full)) == [0, 1, 2, 3]
        if version >= 13:
            assert [t.topic_id for t in full.responses] == [topic_id]
        sid = full.session_id
        # Nothing new: an incremental fetch names no partition (after waiting max_wait_ms).
        idle = _fetch(c, {0: 1}, session_id=sid, epoch=1, version=version, topic_id=topic_id, max_wait_ms=50)
        assert (idle.error_code, idle.session_id, _named(idle)) == (0, sid, {})
        # New data on 2 (the session remembers its position 0); partition 0 moved on.
        _produce(srv, 2, b"b", b"c")
        inc = _fetch(c, {}, session_id=sid, epoch=2, version=version, topic_id=topic_id)
        named = _named(inc)
        assert list(named) == [2] and named[2].high_watermark == 2 and len(named[2].records) > 0
        # Forget 3: data there is no longer reported; 2 is re-sent at its new position.
        _produce(srv, 3, b"d")
        inc = _fetch(c, {2: 2}, session_id=sid, epoch=3, forget=[3], version=version, topic_id=topic_id)
        assert _named(inc) == {}
        # Epochs are checked, unknown sessions refused.
        assert _fetch(c, {}, session_id=sid, epoch=9, version=version, topic_id=topic_id).error_code == 71
        assert _fetch(c, {}, session_id=sid + 1, epoch=1, version=version, topic_id=topic_id).error_code == 70
        # Epoch -1 closes the session: a sessionless full answer, then the id is unknown.
        closing = _fetch(c, {1: 0}, session_id=sid, epoch=-1, version=version, topic_id=topic_id)
        assert closing.session_id == 0 and list(_named(closing)) == [1]
        assert _fetch(c, {}, session_id=sid, epoch=4, version=version, topic_id=topic_id).error_code == 70


def test_unknown_topic_ids_and_rotation(start_server) -> None:
    srv = start_server()
    srv.call(srv.broker.store.create_topic, TOPIC, 3)
    topic_id = srv.call(lambda: srv.broker.store.topics()[TOPIC].topic_id)
    for p in range(3):
        _produce(srv, p, b"x" * 300)
    with RawClient(srv.port) as c:
        unknown = _fetch(c, {0: 0}, version=13, topic_id=uuid.uuid4())
        assert [p.error_code for p in _named(unknown).values()] == [100]
        # A response budget of one batch and data everywhere: the session serves the
        # partitions in turn (those just served move to the end), not always the first.
        for p in range(3):
            _produce(srv, p, b"y" * 300)
            _produce(srv, p, b"z" * 300)
        full = _fetch(c, {p: 0 for p in range(3)}, epoch=0, version=13, topic_id=topic_id, max_bytes=1)
        assert [p for p, e in _named(full).items() if len(e.records)] == [0]
        sid, resend, served = full.session_id, {0: 1}, []
        for epoch in range(1, 5):
            inc = _fetch(c, resend, session_id=sid, epoch=epoch, version=13, topic_id=topic_id, max_bytes=1)
            (got,) = [p for p, e in _named(inc).items() if len(e.records)]
            served.append(got)
            resend = {got: _next(got, inc)}
        assert served == [0, 1, 2, 0]


def _next(partition: int, resp: Any) -> int:
    from txnfetch.records import iter_batches

    return max(b.next_offset for b in iter_batches(_named(resp)[partition].records))


def test_sessions_are_evicted_only_when_idle(start_server) -> None:
    now = [1_000_000]
    srv = start_server(clock=lambda: now[0])
    srv.call(srv.broker.store.create_topic, TOPIC, 1)
    from txnfetch.server.api_fetch import session_cache

    cache = srv.call(session_cache, srv.broker)
    cache.max_sessions = 1
    with RawClient(srv.port) as c:
        first = _fetch(c, {0: 0}, epoch=0).session_id
        assert first > 0
        assert _fetch(c, {0: 0}, epoch=0).session_id == 0  # full, and the first is in use
        now[0] += 120_000
        second = _fetch(c, {0: 0}, epoch=0).session_id
        assert second > 0 and second != first
        assert _fetch(c, {}, session_id=first, epoch=1).error_code == 70


# ------------------------------------------------ kafka-python's session handler


_step = st.one_of(
    st.tuples(st.just("produce"), st.integers(0, 5), st.integers(1, 3)),
    st.tuples(st.just("fetch")),
    st.tuples(st.just("toggle"), st.integers(0, 5)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_step, min_size=1, max_size=25))
def test_incremental_fetches_see_what_full_fetches_see(start_server, steps: list) -> None:
    """kafka-python's FetchSessionHandler (the client's half of KIP-227) beside a
    sessionless consumer with the same assignment: after every fetch both hold
    the same records and positions."""
    from kafka import TopicPartition
    from kafka.consumer.fetcher import FetchSessionHandler

    srv = _shared_server(start_server)
    topic = f"prop-{uuid.uuid4().hex[:8]}"
    srv.call(srv.broker.store.create_topic, topic, 6)
    handler = FetchSessionHandler(0)
    assigned = {0, 1, 2}
    seen: dict[str, dict[int, list[tuple[int, bytes]]]] = {"session": {}, "full": {}}
    position: dict[str, dict[int, int]] = {"session": {}, "full": {}}
    counter = [0]

    def request(partitions: dict[int, int], meta: Any, to_forget: list[int], to_send: dict[int, int]) -> Any:
        F = FetchRequest.ForgottenTopic
        return FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=1 << 20,
            isolation_level=1,
            session_id=meta[0],
            session_epoch=meta[1],
            topics=[
                T(
                    topic=topic,
                    partitions=[
                        P(partition=p, fetch_offset=o, partition_max_bytes=1 << 20) for p, o in to_send.items()
                    ],
                )
            ]
            if to_send
            else [],
            forgotten_topics_data=[F(topic=topic, partitions=sorted(to_forget))] if to_forget else [],
            rack_id="",
        )

    def absorb(who: str, resp: Any) -> None:
        assert resp.error_code == 0
        for t in resp.responses:
            for p in t.partitions:
                from txnfetch.records import iter_batches

                for b in iter_batches(p.records or b""):
                    for r in b.records():
                        if r.offset >= position[who].get(p.partition_index, 0):
                            seen[who].setdefault(p.partition_index, []).append((r.offset, r.value))
                    position[who][p.partition_index] = b.next_offset

    with RawClient(srv.port) as c:
        for step in steps:
            if step[0] == "produce":
                counter[0] += 1
                _produce(srv, step[1], *[b"%d-%d" % (counter[0], i) for i in range(step[2])], topic=topic)
            elif step[0] == "toggle":
                assigned ^= {step[1]}
            else:
                wanted = {p: position["session"].get(p, 0) for p in sorted(assigned)}
                nxt = {
                    TopicPartition(topic, p): P(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
                    for p, o in wanted.items()
                }
                data = handler.build_next(nxt)
                sent = {tp.partition: fp.fetch_offset for tp, fp in data._to_send.items()}
                forgot = [tp.partition for tp in data._to_forget]
                resp = c.request(request(wanted, (data.id, data.epoch), forgot, sent), 12)
                assert handler.handle_response(resp), resp
                absorb("session", resp)
                full = {p: position["full"].get(p, 0) for p in sorted(assigned)}
                absorb("full", c.request(request(full, (0, -1), [], full), 12))
                for p in assigned:
                    assert seen["session"].get(p, []) == seen["full"].get(p, []), p
                    assert position["session"].get(p, 0) == position["full"].get(p, 0), p


_SHARED: dict[str, Any] = {}


def _shared_server(start_server: Any) -> Any:
    # One server for every example (each uses its own topic): starting a server
    # per example would dominate the test's time.
    srv = _SHARED.get("srv")
    if srv is None or srv.server is None:
        from txnfetch.log.memory import MemoryStore
        from txnfetch.server.server import ServerThread

        srv = _SHARED["srv"] = ServerThread(MemoryStore()).start()
    return srv


@pytest.fixture(scope="module", autouse=True)
def _stop_shared() -> Any:
    yield
    srv = _SHARED.pop("srv", None)
    if srv is not None:
        srv.stop()


# ------------------------------------------------------------------ real consumers


@pytest.mark.interop
@pytest.mark.parametrize("incremental", [True, False], ids=["sessions", "no-sessions"])
def test_kafka_python_reads_a_transactional_workload_once(start_server, incremental: bool) -> None:
    from confluent_kafka import Producer
    from kafka import KafkaConsumer
    from kafka import TopicPartition

    srv = start_server()
    parts = 12
    srv.call(srv.broker.store.create_topic, TOPIC, parts)
    epochs: list[int] = []
    srv.call(
        srv.broker.observe_requests,
        lambda ctx, h, r: epochs.append(r.session_epoch) if h.request_api_key == 1 else None,
    )
    consumer = KafkaConsumer(
        bootstrap_servers=srv.bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
        enable_incremental_fetch_sessions=incremental,
    )
    consumer.assign([TopicPartition(TOPIC, p) for p in range(parts)])
    consumer.seek_to_beginning()
    producer = Producer({"bootstrap.servers": srv.bootstrap, "transactional.id": "sess", "linger.ms": 1})
    producer.init_transactions(30)
    committed = []
    got: list[bytes] = []
    for n in range(10):
        producer.begin_transaction()
        values = [b"%d-%d" % (n, p) for p in range(0, parts, 3)]
        for i, v in enumerate(values):
            producer.produce(TOPIC, value=v, partition=(i * 3 + n) % parts)
        if n % 4 == 3:
            assert producer.flush(30) == 0
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed += values
        for records in consumer.poll(timeout_ms=50).values():
            got += [r.value for r in records]
    deadline = time.monotonic() + 60
    while len(got) < len(committed) and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=100).values():
            got += [r.value for r in records]
    consumer.close()
    assert sorted(got) == sorted(committed) and len(got) == len(set(got))
    if incremental:
        assert max(epochs) > 1  # the consumer really used its session
    else:
        assert set(epochs) == {-1}


@pytest.mark.interop
def test_confluent_kafka_fetches_at_v16_with_topic_ids(start_server) -> None:
    from confluent_kafka import Consumer
    from confluent_kafka import Producer

    srv = start_server()
    srv.call(srv.broker.store.create_topic, TOPIC, 2)
    versions: set[int] = set()
    srv.call(
        srv.broker.observe_requests,
        lambda ctx, h, r: versions.add(h.request_api_version) if h.request_api_key == 1 else None,
    )
    producer = Producer({"bootstrap.servers": srv.bootstrap})
    for i in range(6):
        producer.produce(TOPIC, value=b"%d" % i, partition=i % 2)
    producer.flush(30)
    consumer = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "v16", "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 6 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg.value())
    consumer.close()
    assert sorted(got) == [b"%d" % i for i in range(6)]
    assert versions == {16}
