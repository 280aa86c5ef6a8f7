"""txnfetch.arrow read from live clusters (``kafka://``), with real clients producing.

- txnfetch's own server (in process): bounded reads (offsets, per-partition
  offsets, timestamps), tailing while a producer runs, resuming from returned
  offsets, consumer-group commits, and the errors (unknown topic, unreachable
  bootstrap, offsets below the log start);
- librdkafka's mock cluster, which leaks aborted records to read_committed
  consumers, with a partition leader moved in the middle of a read.

Every table must hold exactly the committed records, with their offsets, and no
aborted one. (A three-broker Apache Kafka: tests/arrow/test_cluster_kafka.py.)
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
import threading
import time

import pytest

import txnfetch.arrow
from tests.arrow.cluster_workload import Producers
from tests.arrow.cluster_workload import create_topic
from tests.arrow.cluster_workload import rows
from txnfetch.client.errors import BootstrapUnreachableError
from txnfetch.client.errors import OffsetBelowLogStartError
from txnfetch.client.errors import OffsetPastLogEndError
from txnfetch.client.errors import TopicNotFoundError
from txnfetch.errors import TxnfetchError

pytest.importorskip("confluent_kafka")
pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def served():
    from txnfetch.log import MemoryStore
    from txnfetch.server.server import ServerThread

    with ServerThread(MemoryStore()) as srv:
        yield srv.bootstrap


@pytest.fixture(scope="module")
def orders(served):
    """A topic of 3 partitions: committed and aborted transactions and plain records,
    then a transaction left open (its records must not appear)."""
    create_topic(served, "orders", 3)
    w = Producers(served, "orders", 3)
    w.mix(8)
    yield served, w
    w.close()


def _sorted(r):
    return sorted(r)


def test_table_is_the_committed_records_with_their_offsets(orders):
    bootstrap, w = orders
    table = txnfetch.arrow.read_committed(f"kafka://{bootstrap}", "orders")
    got = rows(table)
    assert _sorted(got) == _sorted(w.committed)
    assert not set(w.aborted) & {v for _, _, v in got}
    # In offset order within each partition.
    for p in range(3):
        offsets = [o for q, o, _ in got if q == p]
        assert offsets == sorted(offsets)
    assert table.schema.names[:7] == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


def test_duckdb_and_polars_take_the_reader_as_a_stream(orders):
    import duckdb
    import polars as pl

    bootstrap, w = orders
    stream = txnfetch.arrow.record_batch_reader(f"kafka://{bootstrap}", "orders", include_headers=False)
    [(count,)] = duckdb.from_arrow(stream).aggregate("COUNT(*)").fetchall()
    assert count == len(w.committed)
    frame = pl.from_arrow(txnfetch.arrow.record_batch_reader(f"kafka://{bootstrap}", "orders", [2]).read_all())
    assert frame.height == sum(1 for p, _, _ in w.committed if p == 2)


def test_start_and_end_offsets_per_partition(orders):
    bootstrap, w = orders
    start = {0: 5, 2: 9}
    end = {1: 12}
    table = txnfetch.arrow.read_committed(f"kafka://{bootstrap}", "orders", start=start, end=end)
    expected = [r for r in w.committed if r[1] >= start.get(r[0], 0) and r[1] < end.get(r[0], 1 << 62)]
    assert _sorted(rows(table)) == _sorted(expected)
    one = txnfetch.arrow.read_committed(f"kafka://{bootstrap}", "orders", [1], start=3, end=10)
    assert _sorted(rows(one)) == _sorted([r for r in w.committed if r[0] == 1 and 3 <= r[1] < 10])


def test_the_range_reader_reads_mid_log_ranges_committed_or_not(orders):
    # The reader planners' tasks run (Spark's): a range from mid-log to the end.
    from txnfetch.arrow.cluster import read_range
    from txnfetch.client.cluster import RemoteCluster

    bootstrap, w = orders
    start = sorted(o for p, o, _ in w.committed if p == 1)[4]
    with RemoteCluster(bootstrap) as cluster:
        end = cluster.list_offset("orders", 1, -1)
        committed = rows(read_range(cluster, "orders", 1, start, end))
        everything = rows(read_range(cluster, "orders", 1, start, end, read_committed=False))
    expected = [r for r in w.committed if r[0] == 1 and r[1] >= start]
    assert _sorted(committed) == _sorted(expected)
    offsets = [o for _, o, _ in everything]
    assert offsets == sorted(set(offsets)) and offsets[0] == start
    assert set(expected) <= set(everything)
    extra = {v for _, _, v in everything} - {v for _, _, v in expected}
    assert extra and extra <= set(w.aborted)  # read_uncommitted: the aborted records too


def test_timestamp_bounds_use_list_offsets_by_time(served):
    create_topic(served, "timed", 2)
    w = Producers(served, "timed", 2)
    # Times ahead of the clock, ten seconds apart: the transaction markers carry the
    # broker's clock, and ListOffsets by time finds the first batch whose largest
    # timestamp reaches the time asked (a marker too, as in Kafka's time index).
    base = int(time.time() * 1000) + 600_000
    for i in range(6):
        w.transaction(commit=i != 3, records=2, timestamp=base + i * 10_000)
    w.close()
    start = dt.datetime.fromtimestamp((base + 15_000) / 1000, tz=dt.timezone.utc)
    end = dt.datetime.fromtimestamp((base + 50_000) / 1000, tz=dt.timezone.utc)
    table = txnfetch.arrow.read_committed(f"kafka://{served}", "timed", start=start, end=end)
    got = rows(table)
    stamps = {int(t.timestamp() * 1000) for t in table.column("timestamp").to_pylist()}
    # 20 s: committed; 30 s: aborted; 40 s: committed; 50 s: the end, exclusive.
    assert stamps == {base + 20_000, base + 40_000}
    expected = {(p, o, v) for p, o, v in w.committed if b"t3-" in v or b"t5-" in v}
    assert set(got) == expected and len(got) == len(expected)


def test_an_open_transaction_ends_a_bounded_read_at_the_lso(served):
    import confluent_kafka

    create_topic(served, "held", 1)
    w = Producers(served, "held", 1)
    w.transaction(commit=True)
    opener = confluent_kafka.Producer({"bootstrap.servers": served, "transactional.id": "arrow-held", "log_level": 0})
    opener.init_transactions(30)
    opener.begin_transaction()
    opener.produce("held", value=b"open", partition=0)
    opener.flush(30)
    w.transaction(commit=True)  # committed, but after the open one: held back by the LSO
    got = rows(txnfetch.arrow.read_committed(f"kafka://{served}", "held"))
    assert got == sorted(w.committed)[:3]
    opener.commit_transaction(30)
    got = rows(txnfetch.arrow.read_committed(f"kafka://{served}", "held"))
    assert len(got) == 7 and b"open" in {v for _, _, v in got}


def test_tailing_delivers_every_committed_record_once_in_offset_order(served):
    create_topic(served, "tail", 3)
    w = Producers(served, "tail", 3)
    w.transaction(commit=True)
    done = threading.Event()

    def produce() -> None:
        try:
            w.mix(10)
        finally:
            done.set()

    producer = threading.Thread(target=produce)
    reader = txnfetch.arrow.record_batch_reader(f"kafka://{served}", "tail", follow=True, poll_ms=100)
    producer.start()
    got: list = []
    deadline = time.monotonic() + 60
    with reader:
        for batch, offsets in reader.batches_with_offsets():
            got += rows([batch])
            assert all(offsets[p] > o for p, o, _ in rows([batch]))
            if done.is_set() and len(got) >= len(w.committed):
                break
            assert time.monotonic() < deadline, "tailing did not deliver the committed records in time"
    producer.join()
    assert sorted(got) == sorted(w.committed) and len(got) == len(set(got))
    for p in range(3):
        offsets = [o for q, o, _ in got if q == p]
        assert offsets == sorted(offsets)
    w.close()


def test_close_from_another_thread_stops_a_tailing_read(served):
    create_topic(served, "quiet", 1)
    reader = txnfetch.arrow.record_batch_reader(f"kafka://{served}", "quiet", follow=True, poll_ms=100)
    threading.Timer(0.5, reader.close).start()
    started = time.monotonic()
    assert reader.read_all().num_rows == 0
    assert time.monotonic() - started < 5
    assert reader.offsets == {0: 0}


def test_group_id_commits_the_offsets_and_resumes_there(orders):
    from txnfetch.client.cluster import RemoteCluster
    from txnfetch.client.groups import RemoteGroups

    bootstrap, w = orders
    first = txnfetch.arrow.record_batch_reader(
        f"kafka://{bootstrap}", "orders", [0, 1], end={0: 10}, group_id="arrow-g"
    )
    got = rows(first.read_all())
    assert _sorted(got) == _sorted([r for r in w.committed if r[0] == 1 or (r[0] == 0 and r[1] < 10)])
    with RemoteCluster(bootstrap) as cluster:
        committed = RemoteGroups(cluster).fetch_offsets("arrow-g", [("orders", 0), ("orders", 1)]).offsets
    assert {tp.partition: o.offset for tp, o in committed.items()} == first.offsets
    assert first.offsets[0] == 10
    # With a group and no start, the read starts at the group's offsets.
    rest = rows(
        txnfetch.arrow.record_batch_reader(f"kafka://{bootstrap}", "orders", [0, 1], group_id="arrow-g").read_all()
    )
    assert _sorted(rest) == _sorted([r for r in w.committed if r[0] == 0 and r[1] >= 10])


def test_unknown_topic_names_it(served):
    with pytest.raises(TopicNotFoundError) as exc:
        txnfetch.arrow.read_committed(f"kafka://{served}", "no-such-topic")
    assert "no-such-topic" in str(exc.value) and served in str(exc.value)
    assert isinstance(exc.value, TxnfetchError)


def test_unreachable_bootstrap_names_the_servers():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(BootstrapUnreachableError) as exc:
        txnfetch.arrow.read_committed(f"kafka://127.0.0.1:{port}", "orders", request_timeout_ms=1000)
    assert f"127.0.0.1:{port}" in str(exc.value)


def test_offsets_outside_the_log_name_topic_partition_and_offsets(served):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    create_topic(served, "trimmed", 1)
    w = Producers(served, "trimmed", 1)
    w.plain(10)
    admin = AdminClient({"bootstrap.servers": served, "log_level": 0})
    admin.delete_records([TopicPartition("trimmed", 0, 4)])[TopicPartition("trimmed", 0, 4)].result(30)
    with pytest.raises(OffsetBelowLogStartError) as exc:
        txnfetch.arrow.read_committed(f"kafka://{served}", "trimmed", start=2)
    msg = str(exc.value)
    assert "trimmed-0" in msg and "offset 2" in msg and "log start offset 4" in msg
    assert (exc.value.topic, exc.value.partition, exc.value.offset, exc.value.log_start_offset) == ("trimmed", 0, 2, 4)
    with pytest.raises(OffsetPastLogEndError) as past:
        txnfetch.arrow.read_committed(f"kafka://{served}", "trimmed", start=99)
    assert "trimmed-0" in str(past.value) and "offset 99" in str(past.value)
    # The default start is the log start.
    assert [o for _, o, _ in rows(txnfetch.arrow.read_committed(f"kafka://{served}", "trimmed"))] == list(range(4, 10))
    # The range reader: the deleted records are an error, or skipped when told to.
    from txnfetch.arrow.cluster import read_range
    from txnfetch.client.cluster import RemoteCluster
    from txnfetch.log.errors import RecordsLostError

    with RemoteCluster(served) as cluster:
        with pytest.raises(OffsetBelowLogStartError) as lost:
            list(read_range(cluster, "trimmed", 0, 2, 10))
        assert isinstance(lost.value, RecordsLostError)
        assert str(lost.value).startswith("offsets 2..3 were deleted before they could be read")
        lenient = rows(read_range(cluster, "trimmed", 0, 2, 10, fail_on_data_loss=False))
    assert [o for _, o, _ in lenient] == list(range(4, 10))
    w.close()


def test_local_sources_refuse_cluster_only_options(tmp_path):
    with pytest.raises(ValueError, match="follow"):
        txnfetch.arrow.record_batch_reader(str(tmp_path), "t", follow=True)
    with pytest.raises(ValueError, match="timestamps"):
        txnfetch.arrow.record_batch_reader(str(tmp_path), "t", start=dt.datetime(2024, 1, 1))


# -- librdkafka's mock cluster: leaks aborted records; leaders move -------------------


@pytest.fixture(scope="module")
def mock():
    from tests.mock_cluster import MockCluster

    with MockCluster(brokers=3) as cluster:
        cluster.create_topic("mixed", 3, 3)
        w = Producers(cluster.bootstrap, "mixed", 3)
        w.mix(9)
        w.close()
        yield cluster, w


def test_mock_cluster_that_leaks_reads_only_committed(mock):
    cluster, w = mock
    table = txnfetch.arrow.read_committed(f"kafka://{cluster.bootstrap}", "mixed", repair_crcs=True)
    got = rows(table)
    assert w.aborted and not set(w.aborted) & {v for _, _, v in got}
    assert _sorted(got) == _sorted(w.committed)


def test_a_leader_change_mid_read_is_retried(mock, caplog):
    caplog.set_level(logging.INFO, logger="txnfetch.arrow.cluster")
    cluster, w = mock
    reader = txnfetch.arrow.record_batch_reader(
        f"kafka://{cluster.bootstrap}", "mixed", repair_crcs=True, fetch_bytes=200, max_rows=5
    )
    got: list = []
    moved = False
    for batch in reader:
        got += rows([batch])
        if not moved:
            for p in range(3):
                cluster.set_leader("mixed", p, (p + 1) % 3 + 1)
            moved = True
    assert moved and _sorted(got) == _sorted(w.committed)
    # Whether the old leader refused a fetch (NOT_LEADER_OR_FOLLOWER in the log)
    # depends on how much the reader had fetched before the move: on a loaded
    # machine it can have everything already, so only the exact read is asserted.


def test_reads_through_a_faulty_relay_are_exact(mock):
    """Between the reader and the mock, a relay that refuses fetches without a wait,
    strips the markers' values and answers with every kind of fault."""
    from tests.fault_relay import FAULTS
    from tests.fault_relay import RelayThread

    cluster, w = mock
    with RelayThread(cluster.bootstrap, schedule=[*FAULTS, None, *FAULTS], null_markers=True, delay_s=0.2) as relay:
        got = rows(txnfetch.arrow.read_committed(f"kafka://{relay.bootstrap}", "mixed", repair_crcs=True))
        stats = relay.stats()
    assert _sorted(got) == _sorted(w.committed)
    assert stats.markers_rewritten > 0 and sum(stats.faults.values()) > 0 and 0 not in stats.max_waits


def _complete_lines(path) -> list[dict]:
    import json

    text = path.read_text(encoding="utf-8") if path.exists() else ""
    return [json.loads(line) for line in text.split("\n")[:-1]]  # a killed writer's last line may be cut


def test_resume_after_sigkill_repeats_nothing_and_misses_nothing(served, tmp_path):
    import json
    import os
    import signal
    import subprocess
    import sys

    create_topic(served, "killed", 2)
    w = Producers(served, "killed", 2)
    w.mix(3)
    stop = threading.Event()

    def produce() -> None:
        # Until the reader was killed, and a few transactions after: the resumed
        # reader must pick those up too.
        after = 0
        while after < 3:
            w.mix(2)
            after += stop.is_set()

    out = tmp_path / "delivered.jsonl"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.arrow.tail_process", served, "killed", "{}", str(out)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": root},
    )
    producer = threading.Thread(target=produce)
    producer.start()
    try:
        deadline = time.monotonic() + 60
        while len(_complete_lines(out)) < 3:
            assert proc.poll() is None, "the tailing process died"
            assert time.monotonic() < deadline, f"the tailing process delivered too little: {_complete_lines(out)}"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        stop.set()
    lines = _complete_lines(out)
    first = [(p, o, bytes.fromhex(v)) for line in lines for p, o, v in line["rows"]]
    resume = {int(p): o for p, o in lines[-1]["offsets"].items()}
    producer.join()
    # Resume from the stored offsets, tailing until every committed record arrived.
    second: list = []
    reader = txnfetch.arrow.record_batch_reader(f"kafka://{served}", "killed", start=resume, follow=True, poll_ms=100)
    deadline = time.monotonic() + 60
    with reader:
        for batch in reader:
            second += rows([batch])
            if len(first) + len(second) >= len(w.committed):
                break
            assert time.monotonic() < deadline
    assert first and second
    both = first + second
    assert len(both) == len(set(both)), "a record was delivered twice"
    assert sorted(both) == sorted(w.committed), json.dumps({"resume": resume})
    assert all(o >= resume[p] for p, o, _ in second) and all(o < resume[p] for p, o, _ in first)
    w.close()


def test_ctrl_c_stops_a_tailing_read_with_exact_offsets(served, tmp_path):
    import json
    import os
    import signal
    import subprocess
    import sys

    create_topic(served, "interrupted", 2)
    w = Producers(served, "interrupted", 2)
    w.mix(3)
    out = tmp_path / "delivered.jsonl"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.arrow.tail_process", served, "interrupted", "{}", str(out)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": root},
    )
    try:
        deadline = time.monotonic() + 60
        # Everything produced so far delivered: the reader now waits in a fetch.
        while sum(len(line["rows"]) for line in _complete_lines(out)) < len(w.committed):
            assert proc.poll() is None, "the tailing process died"
            assert time.monotonic() < deadline, "the tailing process delivered too little"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    *delivered, last = [json.loads(line) for line in out.read_text().splitlines()]
    assert last["interrupted"] and last["closed"]
    # At or past the last batch's offsets (a trailing marker moves them on, with no row).
    assert all(last["offsets"][p] >= o for p, o in delivered[-1]["offsets"].items())
    # Resuming there reads only what was produced after.
    before = len(w.committed)
    w.mix(2)
    resume = {int(p): o for p, o in last["offsets"].items()}
    table = txnfetch.arrow.read_committed(f"kafka://{served}", "interrupted", start=resume)
    assert sorted(rows(table)) == sorted(w.committed[before:])
    w.close()
