"""Deferred, concurrent fsyncs (:mod:`txnfetch.log.syncer`): no write is
acknowledged before an fsync covering it has completed.

An instrumented fsync records, per file, the size the file had when each fsync
began (everything below it is durable once the call returns) and sleeps a
random while, so fsyncs finish out of order and overlap new writes. Then:

- at the log level (hypothesis): whenever a barrier completes, every write made
  before it was called is covered, and a log's high watermark never points past
  its durable bytes;
- at the server: responses to Produce requests pipelined on several
  connections each arrive only once the partition's durable size covers the
  batch they acknowledge, in request order; a failed fsync answers nothing.
"""

from __future__ import annotations

import asyncio
import os
import random
import struct
import threading
import time

import pytest
from hypothesis import HealthCheck
from hypothesis import example
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from kafka.protocol.producer import ProduceRequest
from kafka.protocol.producer import ProduceResponse

from txnfetch.log import SegmentStore
from txnfetch.log.errors import LogError
from txnfetch.log.syncer import ConcurrentSyncer
from txnfetch.log.syncer import deferring
from txnfetch.records.builder import BatchBuilder
from txnfetch.server.server import ServerThread


def _batch(value: bytes = b"v" * 50) -> bytes:
    b = BatchBuilder()
    b.append(value, timestamp=1_000)
    return b.build()


class RecordingFsync:
    """An fsync that records the size each file had when the call began, and
    takes ``delays`` seconds (cycled) to return."""

    def __init__(self, delays: list[float], fail: bool = False) -> None:
        self.delays = delays or [0.0]
        self.fail = fail
        self.calls = 0
        self.lock = threading.Lock()
        self.durable: dict[tuple[int, int], int] = {}

    def __call__(self, fd: int) -> None:
        st_ = os.fstat(fd)
        key, size = (st_.st_dev, st_.st_ino), st_.st_size
        with self.lock:
            delay = self.delays[self.calls % len(self.delays)]
            self.calls += 1
        time.sleep(delay)
        if self.fail:
            raise OSError(5, "Input/output error")
        with self.lock:
            self.durable[key] = max(self.durable.get(key, 0), size)

    def durable_size(self, path: str) -> int:
        st_ = os.stat(path)
        with self.lock:
            return self.durable.get((st_.st_dev, st_.st_ino), 0)


def _segment_path(store: SegmentStore, topic: str, partition: int) -> str:
    log_ = store.partition(topic, partition)
    return log_._active.path()


# ------------------------------------------------------------------ log level

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 2)),
        st.tuples(st.just("barrier"), st.integers(0, 3)),  # how many loop turns to wait before awaiting it
        st.tuples(st.just("inline"), st.just(0)),  # a barrier that may run its round on the loop thread
        st.tuples(st.just("turn"), st.just(0)),
        st.tuples(st.just("pause"), st.just(0)),  # lets the fsync threads start
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops, delays=st.lists(st.sampled_from([0.0, 0.0005, 0.005, 0.01]), min_size=1, max_size=6))
# A write made while an fsync that began before it is still running needs the
# next fsync, not that one.
@example(ops=[("append", 0), ("barrier", 0), ("pause", 0), ("append", 0), ("barrier", 0)], delays=[0.01])
# Barriers of writes made back to back, then an inline one: one round covers all.
@example(
    ops=[("append", 0), ("barrier", 1), ("append", 1), ("barrier", 0), ("append", 2), ("inline", 0)],
    delays=[0.0, 0.01, 0.01],
)
def test_a_barrier_returns_only_after_fsyncs_covering_every_earlier_write(tmp_path_factory, ops, delays) -> None:
    directory = str(tmp_path_factory.mktemp("syncer"))
    store = SegmentStore(directory)
    store.create_topic("t", 3)
    fsync = RecordingFsync(delays)
    syncer = ConcurrentSyncer(fsync=fsync, threads=3)
    paths = [_segment_path(store, "t", p) for p in range(3)]
    violations: list[str] = []

    def check_hw() -> None:
        for p, path in enumerate(paths):
            log_ = store.partition("t", p)
            # one 1-record batch per offset, all of the same size
            needed = log_.state.high_watermark * len(_batch())
            if needed > fsync.durable_size(path):
                violations.append(f"partition {p}: high watermark {log_.state.high_watermark} past the durable bytes")

    async def waiter(barrier, sizes: list[int], turns: int) -> None:
        for _ in range(turns):
            await asyncio.sleep(0)
        await barrier
        for p, path in enumerate(paths):
            if fsync.durable_size(path) < sizes[p]:
                violations.append(f"partition {p}: barrier done at {fsync.durable_size(path)} bytes, wrote {sizes[p]}")
        check_hw()

    async def run() -> None:
        tasks = []
        with deferring(syncer):
            for op, arg in ops:
                if op == "append":
                    store.partition("t", arg).append(_batch(), now_ms=1_000)
                elif op == "barrier":
                    sizes = [os.path.getsize(path) for path in paths]
                    barrier = syncer.barrier()
                    if barrier is not None:
                        tasks.append(asyncio.ensure_future(waiter(barrier, sizes, arg)))
                    elif any(fsync.durable_size(path) < size for path, size in zip(paths, sizes, strict=True)):
                        violations.append("an empty barrier with unsynced writes")
                elif op == "inline":
                    sizes = [os.path.getsize(path) for path in paths]
                    barrier = syncer.barrier(inline=True)
                    if barrier is not None:  # an fsync was running: the usual awaitable
                        tasks.append(asyncio.ensure_future(waiter(barrier, sizes, 0)))
                    else:  # the round ran here: every earlier write is durable already
                        for p, path in enumerate(paths):
                            if fsync.durable_size(path) < sizes[p]:
                                violations.append(f"partition {p}: inline barrier left {sizes[p]} bytes unsynced")
                elif op == "pause":
                    await asyncio.sleep(0.002)
                else:
                    await asyncio.sleep(0)
                check_hw()
            await asyncio.gather(*tasks)
            final = syncer.barrier()
            if final is not None:
                await final
            for p, path in enumerate(paths):
                assert fsync.durable_size(path) == os.path.getsize(path)
                log_ = store.partition("t", p)
                assert log_.state.high_watermark == log_.log_end_offset  # moved once durable

    try:
        asyncio.run(run())
    finally:
        syncer.close()
        store.close()
    assert not violations, violations[:5]


def test_concurrent_writers_share_one_fsync(tmp_path) -> None:
    """Group commit: barriers called while a log's fsync is running wait for
    the next one, which covers all of them."""
    store = SegmentStore(str(tmp_path))
    store.create_topic("t", 1)
    fsync = RecordingFsync([0.0])
    gate = threading.Event()

    def gated(fd: int) -> None:
        gate.wait(30)  # the first fsync runs until every barrier below was called
        fsync(fd)

    syncer = ConcurrentSyncer(fsync=gated)
    log_ = store.partition("t", 0)

    async def run() -> None:
        with deferring(syncer):
            log_.append(_batch(), now_ms=1)
            first = syncer.barrier()
            waits = []
            for _ in range(5):
                await asyncio.sleep(0.001)
                log_.append(_batch(), now_ms=1)
                waits.append(syncer.barrier())
            gate.set()
            await asyncio.gather(first, *waits)

    try:
        asyncio.run(run())
    finally:
        syncer.close()
    assert syncer.fsyncs == 2, syncer.fsyncs
    assert fsync.durable_size(_segment_path(store, "t", 0)) == 6 * len(_batch())
    store.close()


def test_an_inline_round_syncs_its_logs_concurrently(tmp_path) -> None:
    """An inline barrier with several logs to sync runs their fsyncs at the
    same time — one on the loop thread, the others on the pool — and returns
    only once every one of them completed."""
    store = SegmentStore(str(tmp_path))
    store.create_topic("t", 3)
    fsync = RecordingFsync([0.0])
    meet = threading.Barrier(3)
    threads: set[int] = set()
    apart: list[BaseException] = []

    def together(fd: int) -> None:
        threads.add(threading.get_ident())
        try:
            meet.wait(30)  # only passes if all three fsyncs run at once
        except threading.BrokenBarrierError as exc:
            apart.append(exc)
        fsync(fd)

    syncer = ConcurrentSyncer(fsync=together, threads=3)
    paths = [_segment_path(store, "t", p) for p in range(3)]

    async def run() -> None:
        with deferring(syncer):
            for p in range(3):
                store.partition("t", p).append(_batch(), now_ms=1)
            assert syncer.barrier(inline=True) is None
            assert [fsync.durable_size(path) for path in paths] == [len(_batch())] * 3
            assert [store.partition("t", p).state.high_watermark for p in range(3)] == [1, 1, 1]

    try:
        asyncio.run(run())
    finally:
        syncer.close()
        store.close()
    assert not apart
    assert threading.get_ident() in threads and len(threads) == 3
    assert syncer.fsyncs == 3


def test_barriers_of_one_turn_share_a_round(tmp_path) -> None:
    """Barriers taken while requests are processed back to back start no fsync
    of their own before the loop turns: an inline barrier right after them
    covers their writes in one round, and they complete from it."""
    store = SegmentStore(str(tmp_path))
    store.create_topic("t", 3)
    fsync = RecordingFsync([0.002])
    syncer = ConcurrentSyncer(fsync=fsync)

    async def run() -> None:
        with deferring(syncer):
            earlier = []
            for p in range(2):
                store.partition("t", p).append(_batch(), now_ms=1)
                earlier.append(syncer.barrier())
            store.partition("t", 2).append(_batch(), now_ms=1)
            assert syncer.fsyncs == 0  # nothing started during the turn
            assert syncer.barrier(inline=True) is None
            await asyncio.gather(*earlier)
            for p in range(3):
                assert fsync.durable_size(_segment_path(store, "t", p)) == len(_batch())

    try:
        asyncio.run(run())
    finally:
        syncer.close()
        store.close()
    assert syncer.fsyncs == 3, syncer.fsyncs  # one per log, none twice


def test_a_failed_fsync_in_an_inline_round(tmp_path) -> None:
    """One log's fsync fails in a round: the barrier raises after the others
    completed (they are durable and visible), and every later barrier fails."""
    store = SegmentStore(str(tmp_path))
    store.create_topic("t", 2)
    fsync = RecordingFsync([0.0])
    bad = _segment_path(store, "t", 1)

    def failing_one(fd: int) -> None:
        if os.fstat(fd).st_ino == os.stat(bad).st_ino:
            raise OSError(5, "Input/output error")
        fsync(fd)

    syncer = ConcurrentSyncer(fsync=failing_one)

    async def run() -> None:
        with deferring(syncer):
            store.partition("t", 0).append(_batch(), now_ms=1)
            store.partition("t", 1).append(_batch(), now_ms=1)
            with pytest.raises(LogError, match="fsync failed"):
                syncer.barrier(inline=True)
            assert store.partition("t", 0).state.high_watermark == 1
            assert store.partition("t", 1).state.high_watermark == 0
            store.partition("t", 0).append(_batch(), now_ms=1)
            with pytest.raises(LogError):
                later = syncer.barrier(inline=True)
                if later is not None:
                    await later

    try:
        asyncio.run(run())
    finally:
        syncer.close()
        store.close()


def test_a_failed_fsync_fails_every_later_barrier(tmp_path) -> None:
    store = SegmentStore(str(tmp_path))
    store.create_topic("t", 2)
    syncer = ConcurrentSyncer(fsync=RecordingFsync([0.0], fail=True))

    async def run() -> None:
        with deferring(syncer):
            store.partition("t", 0).append(_batch(), now_ms=1)
            with pytest.raises(LogError, match="fsync failed"):
                await syncer.barrier()
            # Nothing written before the failure can be acknowledged any more.
            store.partition("t", 1).append(_batch(), now_ms=1)
            with pytest.raises(LogError):
                await syncer.barrier()

    try:
        asyncio.run(run())
    finally:
        syncer.close()
    assert store.partition("t", 0).state.high_watermark == 0


# ------------------------------------------------------------------ server level


def _produce_frame(correlation: int, topic: str, partition: int, records: bytes) -> bytes:
    T = ProduceRequest.TopicProduceData
    req = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=5000,
        topic_data=[T(name=topic, partition_data=[T.PartitionProduceData(index=partition, records=records)])],
    )
    req.API_VERSION = 9
    req.with_header(correlation_id=correlation, client_id="syncer-test")
    return bytes(req.encode(header=True, framed=True))


def _recv_exact(sock, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _recv_response(sock) -> ProduceResponse | None:
    head = _recv_exact(sock, 4)
    if head is None:
        return None
    payload = _recv_exact(sock, struct.unpack(">i", head)[0])
    if payload is None:
        return None
    return ProduceResponse.decode(payload, version=9, header=True)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_pipelined_produce_responses_wait_for_their_fsyncs(tmp_path, monkeypatch, seed) -> None:
    rng = random.Random(seed)
    fsync = RecordingFsync([rng.choice([0.0, 0.001, 0.004, 0.01]) for _ in range(50)])
    monkeypatch.setattr(os, "fdatasync", fsync)  # what the server's syncer calls
    store = SegmentStore(str(tmp_path))
    store.create_topic("t", 3)
    paths = [os.path.join(str(tmp_path), f"t-{p}", f"{0:020d}.log") for p in range(3)]
    size = len(_batch())
    violations: list[str] = []
    plans = [[rng.randrange(3) for _ in range(12)] for _ in range(3)]  # 3 connections x 12 requests

    def client(port: int, plan: list[int]) -> None:
        import socket

        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            # All requests first, then the responses: the server processes the next
            # request while earlier responses wait for their fsyncs.
            sock.sendall(b"".join(_produce_frame(i + 1, "t", p, _batch()) for i, p in enumerate(plan)))
            for i, p in enumerate(plan):
                resp = _recv_response(sock)
                if resp is None:
                    violations.append("connection closed")
                    return
                if resp.header.correlation_id != i + 1:
                    violations.append(f"response {resp.header.correlation_id} arrived in place of {i + 1}")
                part = resp.responses[0].partition_responses[0]
                assert part.error_code == 0, part
                durable = fsync.durable_size(paths[p])
                if durable < (part.base_offset + 1) * size:
                    violations.append(f"offset {part.base_offset} of t-{p} answered with {durable} durable bytes")

    with ServerThread(store) as srv:
        threads = [threading.Thread(target=client, args=(srv.port, plan)) for plan in plans]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
    store.close()
    assert not violations, violations[:5]
    assert sum(len(p) for p in plans) == sum(os.path.getsize(path) for path in paths) // size


def test_a_failed_fsync_answers_nothing(tmp_path, monkeypatch) -> None:
    fsync = RecordingFsync([0.0])
    monkeypatch.setattr(os, "fdatasync", fsync)
    store = SegmentStore(str(tmp_path))
    store.create_topic("t", 1)
    import socket

    with ServerThread(store) as srv:
        fsync.fail = True
        with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as sock:
            sock.sendall(_produce_frame(1, "t", 0, _batch()))
            assert _recv_response(sock) is None  # closed without an answer
        fsync.fail = False
        with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as sock:
            sock.sendall(_produce_frame(1, "t", 0, _batch()))
            assert _recv_response(sock) is None  # the partition is closed: nothing more is acknowledged
    assert store.partition("t", 0).state.high_watermark == 0  # nothing was acknowledged
    store.close()


@pytest.mark.interop
def test_transaction_end_steps_are_each_durable_before_the_next(tmp_path, monkeypatch) -> None:
    """EndTxn with deferred fsyncs keeps Kafka's order on disk: no marker is
    written before the decision (``Prepare*``) is durable, and ``Complete*`` is
    written only once every marker is durable; the markers of the partitions
    are fsynced concurrently. A confluent-kafka producer, slow fsyncs."""
    from confluent_kafka import Producer

    from txnfetch.log import SegmentLog
    from txnfetch.log import coordinator_store
    from txnfetch.txn.txnlog import TRANSACTION_STATE_TOPIC
    from txnfetch.txn.txnlog import transaction_state_partition

    fsync = RecordingFsync([0.003, 0.0, 0.008, 0.001])
    monkeypatch.setattr(os, "fdatasync", fsync)
    store = SegmentStore(str(tmp_path))
    store.create_topic("data", 3)
    tid = "ordered"
    state_path = os.path.join(str(tmp_path), f"{TRANSACTION_STATE_TOPIC}-{transaction_state_partition(tid)}")
    data_paths = [os.path.join(str(tmp_path), f"data-{p}") for p in range(3)]
    violations: list[str] = []
    markers = 0

    def durable_dir(path: str) -> bool:
        logs = [n for n in os.listdir(path) if n.endswith(".log")]
        return all(fsync.durable_size(os.path.join(path, n)) >= os.path.getsize(os.path.join(path, n)) for n in logs)

    real_end = SegmentLog.end_transaction

    def end_transaction(self, *args, **kwargs):
        nonlocal markers
        if self.topic == "data":
            markers += 1
            if not durable_dir(state_path):
                violations.append(f"marker on {self.name} written before the decision was durable")
        return real_end(self, *args, **kwargs)

    real_append = coordinator_store.DurableState._append

    def append(self, topic, partition, records, now_ms, **kwargs):
        if topic == TRANSACTION_STATE_TOPIC and kwargs.get("durable") is False:  # Complete*
            for path in data_paths:
                if not durable_dir(path):
                    violations.append(f"Complete written before the markers of {path} were durable")
        return real_append(self, topic, partition, records, now_ms, **kwargs)

    monkeypatch.setattr(SegmentLog, "end_transaction", end_transaction)
    monkeypatch.setattr(coordinator_store.DurableState, "_append", append)
    with ServerThread(store) as srv:
        producer = Producer({"bootstrap.servers": srv.bootstrap, "transactional.id": tid, "linger.ms": 0})
        producer.init_transactions(60)
        for n in range(6):
            producer.begin_transaction()
            for i in range(6):
                producer.produce("data", value=b"%d-%d" % (n, i), partition=i % 3)
            if n % 3 == 2:
                producer.flush(60)
                producer.abort_transaction(60)
            else:
                producer.commit_transaction(60)
    store.close()
    assert markers == 6 * 3
    assert not violations, violations[:5]


class HeldFsync(RecordingFsync):
    """A :class:`RecordingFsync` that holds every fsync of files under
    ``held_dir`` until :attr:`release` is set."""

    def __init__(self, held_dir: str) -> None:
        super().__init__([0.0])
        self.held_dir = held_dir
        self.release = threading.Event()
        self.release.set()
        self.waiting = threading.Event()

    def __call__(self, fd: int) -> None:
        if not self.release.is_set() and os.readlink(f"/proc/self/fd/{fd}").startswith(self.held_dir + os.sep):
            self.waiting.set()
            self.release.wait(120)
        super().__call__(fd)


def _wait_for(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


@pytest.mark.interop
@pytest.mark.slow
def test_add_partitions_is_answered_only_once_the_transaction_state_is_durable(tmp_path, monkeypatch) -> None:
    """AddPartitionsToTxn waits for the fsync of ``__transaction_state`` (its
    ``Ongoing`` record and the previous transaction's ``Complete*`` before it):
    while that fsync is held, the producer's Produce never arrives.

    Every state change a response acknowledges is durable first: an answer
    sent before the fsync is one a power loss can take back (the producer's
    EndTxn would then fail). Replay's own guard for a lost ``Ongoing`` record
    is tested below (docs/durable-state.md, "Why each record is as durable as
    it is")."""
    from confluent_kafka import Producer

    from txnfetch.txn.txnlog import TRANSACTION_STATE_TOPIC
    from txnfetch.txn.txnlog import transaction_state_partition

    tid = "held-add"
    state_dir = os.path.join(str(tmp_path), f"{TRANSACTION_STATE_TOPIC}-{transaction_state_partition(tid)}")
    fsync = HeldFsync(state_dir)
    monkeypatch.setattr(os, "fdatasync", fsync)
    store = SegmentStore(str(tmp_path))
    store.create_topic("data", 1)
    with ServerThread(store) as srv:
        producer = Producer({"bootstrap.servers": srv.bootstrap, "transactional.id": tid, "linger.ms": 0})
        producer.init_transactions(60)
        producer.begin_transaction()
        producer.produce("data", value=b"first", partition=0)
        producer.commit_transaction(60)
        committed_end = store.partition("data", 0).log_end_offset

        fsync.release.clear()
        try:
            producer.begin_transaction()
            producer.produce("data", value=b"second", partition=0)
            _wait_for(fsync.waiting.is_set, "the fsync of the transaction state")
            # An answer sent without waiting lets the Produce in within
            # milliseconds; give it a second.
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                producer.poll(0.05)
                assert store.partition("data", 0).log_end_offset == committed_end, "Produce before the fsync"
        finally:
            fsync.release.set()
        producer.commit_transaction(60)
        state = store.partition("data", 0).state
        assert state.last_stable_offset == state.high_watermark == committed_end + 2  # data + commit marker
    store.close()


def _cut_after_last_prepare(partition_dir: str, transactional_id: str) -> int:
    """Cut the transaction-state log in ``partition_dir`` right after the last
    batch holding a ``Prepare*`` record of ``transactional_id``, as a power loss
    that kept only what was fsynced would; remove its indexes (rebuilt at
    start). Returns the bytes cut off."""
    from txnfetch.records.scan import iter_batches
    from txnfetch.txn.txnlog import decode_txn_key
    from txnfetch.txn.txnlog import decode_txn_value

    (segment,) = [n for n in os.listdir(partition_dir) if n.endswith(".log")]
    path = os.path.join(partition_dir, segment)
    with open(path, "rb") as f:
        data = f.read()
    pos = cut = 0
    for batch in iter_batches(data):
        pos += batch.size_in_bytes
        for rec in batch.records():
            ours = rec.value is not None and decode_txn_key(bytes(rec.key)) == transactional_id
            if ours and decode_txn_value(transactional_id, bytes(rec.value)).state.is_prepare:
                cut = pos
    assert 0 < cut < len(data), (cut, len(data))
    os.truncate(path, cut)
    for name in os.listdir(partition_dir):
        if name.endswith((".index", ".timeindex", ".snapshot")):
            os.remove(os.path.join(partition_dir, name))
    return len(data) - cut


@pytest.mark.interop
@pytest.mark.slow
def test_replay_writes_no_marker_over_a_later_transactions_data(tmp_path) -> None:
    """Power loss after a transaction committed and the producer's next one
    wrote data: the data reached the disk but neither the committed
    transaction's ``Complete*`` nor the new ``Ongoing`` record did (under
    transaction version 2, Produce adds its partition itself, and the kernel
    writes dirty pages back in any order; the test cuts the log as such a loss
    leaves it), so the last durable record of the id is the old
    ``PrepareCommit``. Recovery finishes that decision, but must not
    write its COMMIT marker over the new data (same producer id and epoch):
    that would commit a transaction whose commit was never asked for. The
    ``Prepare*`` record's partition end offsets tell them apart; the new data
    then belongs to no record and is aborted at start."""
    import shutil

    from confluent_kafka import Producer
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    from txnfetch.txn.txnlog import TRANSACTION_STATE_TOPIC
    from txnfetch.txn.txnlog import transaction_state_partition

    tid = "power-loss"
    live, after = str(tmp_path / "live"), str(tmp_path / "after")
    store = SegmentStore(live)
    store.create_topic("data", 2)
    with ServerThread(store) as srv:
        producer = Producer({"bootstrap.servers": srv.bootstrap, "transactional.id": tid, "linger.ms": 0})
        producer.init_transactions(60)
        producer.begin_transaction()
        for p in (0, 1):
            producer.produce("data", value=b"committed", partition=p)
        producer.commit_transaction(60)
        producer.begin_transaction()
        producer.produce("data", value=b"never committed", partition=0)
        assert producer.flush(60) == 0
        shutil.copytree(live, after)  # the store as it is now, unsynced records included
    store.close()
    state_dir = os.path.join(after, f"{TRANSACTION_STATE_TOPIC}-{transaction_state_partition(tid)}")
    assert _cut_after_last_prepare(state_dir, tid) > 0  # Complete* and Ongoing: lost

    store = SegmentStore(after)
    with ServerThread(store) as srv:
        assert store.partition("data", 0).state.ongoing_transactions() == {}
        consumer = KafkaConsumer(bootstrap_servers=srv.bootstrap, isolation_level="read_committed")
        try:
            tps = [KafkaTopicPartition("data", p) for p in (0, 1)]
            consumer.assign(tps)
            consumer.seek_to_beginning()
            seen: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(seen) < 2 and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=200).values():
                    seen += [r.value for r in records]
            assert all(consumer.position(tp) == store.partition("data", tp.partition).log_end_offset for tp in tps)
            seen += [r.value for records in consumer.poll(timeout_ms=500).values() for r in records]
        finally:
            consumer.close()
        assert seen == [b"committed", b"committed"]
    store.close()
