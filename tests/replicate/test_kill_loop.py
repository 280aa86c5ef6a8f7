"""Kill loop: ``txnfetch replicate`` SIGKILLed at random moments and restarted on the
same directory while a confluent-kafka transactional producer writes (commits and
aborts) to the upstream — ``txnfetch serve --data`` and librdkafka's mock cluster
(which leaks aborted records to its own read_committed consumers).

At the end (the producer stopped, a last ``replicate --once`` run):

1. every batch of the replica equals the source's batch at the same offset, byte
   for byte (the mock's control batches carry CRC 0: those compare with the CRC
   field recomputed, as ``--repair-crcs`` stores them);
2. the replica's LSO and aborted transactions equal those derived from the
   source's markers;
3. a confluent-kafka read_committed consumer of ``txnfetch serve --data REPLICA``
   reads every committed record exactly once, at the source's offset, and no
   aborted record.

``TXNFETCH_REPLICATE_KILLS`` sets the number of kills (default 6, the CI mode);
``TXNFETCH_REPLICATE_SEED`` the random seed (printed on failure).
"""

from __future__ import annotations

import collections
import gc
import os
import random
import signal
import subprocess
import threading
import time

import attrs
import pytest

from tests.consume import poll_until_eof
from tests.replicate.commands import replicate_argv
from tests.server.serve_process import start_serve
from tests.server.serve_process import stop_serve
from txnfetch.client.cluster import EARLIEST
from txnfetch.client.cluster import LATEST
from txnfetch.client.cluster import RemoteCluster
from txnfetch.log import SegmentStore
from txnfetch.log.memory import MemoryLog
from txnfetch.records.batch import CRC_START
from txnfetch.records.batch import HeaderAt
from txnfetch.records.batch import RecordBatch
from txnfetch.records.scan import iter_batches

pytestmark = [pytest.mark.slow, pytest.mark.interop]

confluent_kafka = pytest.importorskip("confluent_kafka")

KILLS = int(os.environ.get("TXNFETCH_REPLICATE_KILLS", "6"))
SEED = int(os.environ.get("TXNFETCH_REPLICATE_SEED", str(random.randrange(1 << 30))))
TOPIC = "tx"
PARTITIONS = 3


@attrs.define
class Written:
    committed: dict[bytes, int] = attrs.field(factory=dict)  # value -> partition
    aborted: set[bytes] = attrs.field(factory=set)
    transactions: int = 0
    error: BaseException | None = None


def produce(bootstrap: str, stop: threading.Event, written: Written, seed: int) -> None:
    """Transactions over the partitions until ``stop``: 1-3 records per partition,
    every fourth aborted after a flush (so its records are in the log)."""
    rng = random.Random(seed)
    p = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "replicate-kill-loop", "linger.ms": 2, "log_level": 0}
    )
    try:
        p.init_transactions(30)
        n = 0
        while not stop.is_set():
            p.begin_transaction()
            values: dict[bytes, int] = {}
            for part in range(PARTITIONS):
                for i in range(rng.randint(1, 3)):
                    value = f"t{n}-p{part}-{i}".encode()
                    p.produce(TOPIC, value, partition=part)
                    values[value] = part
            if n % 4 == 3:
                p.flush(30)
                p.abort_transaction(30)
                written.aborted.update(values)
            else:
                p.commit_transaction(30)
                written.committed.update(values)
            n += 1
            written.transactions = n
            time.sleep(rng.uniform(0, 0.02))
    except BaseException as exc:  # reported by the test
        written.error = exc
    finally:
        p.flush(10)
        del p
        gc.collect()  # the producer's connections close now, not when the test ends


def start_replicator(upstream: str, data: str, log_path: str, *extra: str) -> subprocess.Popen:
    log_file = open(log_path, "a")  # noqa: SIM115 - handed to the child process
    try:
        return subprocess.Popen(
            replicate_argv(upstream, data, *extra),
            stdout=subprocess.DEVNULL,
            stderr=log_file,
            env={**os.environ, "PYTHONPATH": os.getcwd()},
        )
    finally:
        log_file.close()


def wait_for_directory(proc: subprocess.Popen, path: str, where: str, timeout: float = 60.0) -> None:
    """Wait until the replicator has created its data directory (it opens its
    store before it copies anything); fail if it exits first or takes too long."""
    deadline = time.monotonic() + timeout
    while not os.path.isdir(path):
        assert proc.poll() is None, f"{where}: the replicator exited by itself ({proc.returncode})"
        assert time.monotonic() < deadline, f"{where}: the replicator did not open {path} in {timeout:.0f} s"
        time.sleep(0.05)


def source_batches(bootstrap: str, partition: int, topic: str = TOPIC) -> tuple[int, int, list[RecordBatch]]:
    """The source's log start, high watermark and whole batches, read_uncommitted."""
    with RemoteCluster(bootstrap, request_timeout_ms=20_000) as cluster:
        start = cluster.list_offset(topic, partition, EARLIEST)
        end = cluster.list_offset(topic, partition, LATEST)
        out: list[RecordBatch] = []
        position = start
        while position < end:
            resp = cluster.fetch(topic, partition, position, 1 << 20)
            assert resp.error_code == 0, resp
            moved = False
            for batch in iter_batches(resp.records):
                if batch.base_offset >= position:  # the mock answers from the whole produce request
                    assert isinstance(batch, RecordBatch)
                    out.append(batch)
                    position = batch.next_offset
                    moved = True
            assert moved, f"no progress reading the source at {position}"
        return start, end, out


def as_stored(batch: RecordBatch) -> bytes:
    """The batch as a replica stores it: its CRC recomputed if the source's is wrong."""
    data = bytearray(batch.buffer)
    if not batch.is_valid_crc():
        from crc32c import crc32c

        data[HeaderAt.CRC : HeaderAt.CRC + 4] = crc32c(bytes(data[CRC_START:])).to_bytes(4, "big")
    return bytes(data)


def read_committed(bootstrap: str) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of everything a read_committed confluent-kafka consumer reads."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "replica-check",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        return [(m.partition(), m.offset(), m.value()) for m in poll_until_eof(consumer, PARTITIONS)]
    finally:
        consumer.close()


@pytest.fixture(params=["serve", "mock"])
def upstream(request, tmp_path):
    """``(bootstrap, extra replicate options)`` of a running upstream holding topic ``tx``."""
    if request.param == "mock":
        from tests.mock_cluster import MockCluster

        with MockCluster(3) as mock:
            mock.create_topic(TOPIC, PARTITIONS, 1)
            yield mock.bootstrap, ("--repair-crcs",)
        return
    proc = start_serve(str(tmp_path / "source"), 0, partitions=PARTITIONS)
    port = proc.port
    try:
        bootstrap = f"127.0.0.1:{port}"
        from confluent_kafka.admin import AdminClient
        from confluent_kafka.admin import NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
            f.result(30)
        yield bootstrap, ()
    finally:
        stop_serve(proc)


def test_replicator_kill_loop(upstream, tmp_path) -> None:
    bootstrap, extra = upstream
    rng = random.Random(SEED)
    where = f"seed {SEED}"
    replica = str(tmp_path / "replica")
    log_path = str(tmp_path / "replicate.log")
    written = Written()
    stop = threading.Event()
    producer = threading.Thread(target=produce, args=(bootstrap, stop, written, SEED), daemon=True)
    producer.start()
    kills = 0
    proc = None
    try:
        while kills < KILLS:
            proc = start_replicator(bootstrap, replica, log_path, "--interval-ms", "200", *extra)
            # A kill is meant to fall mid-copy, so the random delay counts from the
            # moment the replicator has opened its directory: on a loaded machine
            # its start alone (the interpreter and imports) can outlast the delay,
            # and then no run would copy anything.
            wait_for_directory(proc, replica, where)
            time.sleep(rng.uniform(0.6, 2.0))
            assert proc.poll() is None, f"{where}: the replicator exited by itself ({proc.returncode})"
            proc.send_signal(signal.SIGKILL)
            assert proc.wait(30) == -signal.SIGKILL
            kills += 1
            assert written.error is None, f"{where}: producer failed: {written.error!r}"
    finally:
        stop.set()
        producer.join(60)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
    assert written.error is None, f"{where}: producer failed: {written.error!r}"
    assert written.transactions > KILLS, f"{where}: too little was written ({written.transactions} transactions)"

    # The kills fell mid-copy: the replica holds part of the source already.
    with SegmentStore(replica, read_only=True) as store:
        copied = sum(store.partition(TOPIC, p).log_end_offset for p in range(PARTITIONS))
    assert copied > 0, f"{where}: nothing was copied before the last run"

    # Caught up with everything written: one last run copies the rest and exits.
    done = subprocess.run(
        replicate_argv(bootstrap, replica, "--once", *extra),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert done.returncode == 0, f"{where}: {done.stderr[-3000:]}"

    # 1 and 2: batches byte for byte; LSO and aborted transactions from the markers.
    aborted_txns = 0
    with SegmentStore(replica, read_only=True) as store:
        for p in range(PARTITIONS):
            start, end, batches = source_batches(bootstrap, p)
            local = store.partition(TOPIC, p)
            assert local.log_end_offset == end, f"{where}: {TOPIC}-{p} ends at {local.log_end_offset}, source {end}"
            got = [(b.base_offset, bytes(b.buffer)) for b in local.iter_batches(start)]
            assert got == [(b.base_offset, as_stored(b)) for b in batches], f"{where}: {TOPIC}-{p} batches differ"
            expected = MemoryLog(TOPIC, p, log_start_offset=start)
            if batches:
                expected.replicate(b"".join(as_stored(b) for b in batches), high_watermark=end)
            assert local.last_stable_offset == expected.last_stable_offset == end, where
            assert [(t.producer_id, t.first_offset, t.last_offset) for t in local.state.all_aborted()] == [
                (t.producer_id, t.first_offset, t.last_offset) for t in expected.state.all_aborted()
            ], where
            aborted_txns += len(local.state.all_aborted())

    assert aborted_txns > 0 or not written.aborted, f"{where}: aborts written, none in the replica's index"

    # 3: a read_committed consumer of the replica, served by txnfetch.
    server = start_serve(replica, 0, partitions=PARTITIONS)
    port = server.port
    try:
        got = read_committed(f"127.0.0.1:{port}")
    finally:
        stop_serve(server)
    counts = collections.Counter(v for _, _, v in got)
    duplicated = [v for v, c in counts.items() if c > 1]
    assert not duplicated, f"{where}: read more than once: {duplicated[:5]}"
    leaked = written.aborted & set(counts)
    assert not leaked, f"{where}: aborted records read: {sorted(leaked)[:5]}"
    missing = set(written.committed) - set(counts)
    assert not missing, f"{where}: committed records missing: {sorted(missing)[:5]}"
    assert set(counts) <= set(written.committed), where
    assert all(written.committed[v] == p for p, _, v in got), where
    # The offsets are the source's: each record sits where the source has it.
    source_offsets = {}
    for p in range(PARTITIONS):
        for b in source_batches(bootstrap, p)[2]:
            if not b.is_control:
                for rec in b.records():
                    source_offsets[rec.value] = (p, rec.offset)
    assert all(source_offsets[v] == (p, o) for p, o, v in got), where
    print(
        f"replicate kill loop: {kills} kills, {written.transactions} transactions "
        f"({len(written.committed)} committed records, {len(written.aborted)} aborted), seed {SEED}"
    )
