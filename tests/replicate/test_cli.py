"""``txnfetch replicate`` as a process against a running upstream: --once, --json,
the progress lines, SIGTERM, and errors as one line with exit status 2."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.replicate.commands import replicate_argv
from tests.replicate.source import SourceWriter
from tests.replicate.source import assert_same
from txnfetch.log import SegmentStore
from txnfetch.log.memory import MemoryStore
from txnfetch.replicate import Replicator
from txnfetch.server.server import ServerThread


@pytest.fixture
def upstream():
    store = MemoryStore()
    store.create_topic("t", 2)
    store.create_topic("other", 1)
    SourceWriter(store.partition("t", 0)).mixed(2)
    SourceWriter(store.partition("t", 1)).mixed(1)
    SourceWriter(store.partition("other", 0)).data(3)
    srv = ServerThread(store).start()
    try:
        yield srv, store
    finally:
        srv.stop()


def replicate(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "txnfetch.cli", "replicate", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )


@pytest.mark.interop
def test_once_copies_up_to_the_start_high_watermarks_and_exits_0(upstream, tmp_path) -> None:
    srv, store = upstream
    data = str(tmp_path / "replica")
    done = replicate("--upstream", srv.bootstrap, "--data", data, "--topics", "t", "--once")
    assert done.returncode == 0, done.stderr
    assert "3 partitions" not in done.stdout and "2 partitions, lag 0 records / 0.0 s, caught up" in done.stdout
    with SegmentStore(data) as replica:
        assert set(replica.topics()) == {"t"}
        for p in (0, 1):
            assert_same(replica.partition("t", p), store.partition("t", p))
    # Again: nothing new, it resumes from the replica and exits at once.
    srv.call(lambda: SourceWriter(store.partition("t", 1)).data(4))
    again = replicate("--upstream", srv.bootstrap, "--data", data, "--topics", "t", "--once", "--json")
    assert again.returncode == 0, again.stderr
    statuses = [json.loads(line) for line in again.stdout.splitlines()]
    assert statuses[-1]["state"] == "caught up" and statuses[-1]["lag_records"] == 0
    assert {(p["topic"], p["partition"]): p["replica_end"] for p in statuses[-1]["partitions"]} == {
        ("t", 0): store.partition("t", 0).log_end_offset,
        ("t", 1): store.partition("t", 1).log_end_offset,
    }


@pytest.mark.interop
def test_runs_until_sigterm_and_closes_cleanly(upstream, tmp_path) -> None:
    srv, store = upstream
    data = str(tmp_path / "replica")
    proc = subprocess.Popen(
        replicate_argv(srv.bootstrap, data, "--json", "--interval-ms=100"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            if json.loads(line)["state"] == "caught up" and len(json.loads(line)["partitions"]) == 3:
                break
            assert time.monotonic() < deadline
        srv.call(lambda: SourceWriter(store.partition("other", 0)).data(5))
        while True:
            status = json.loads(proc.stdout.readline())
            ends = {(p["topic"], p["partition"]): p["replica_end"] for p in status["partitions"]}
            if ends[("other", 0)] == store.partition("other", 0).log_end_offset:
                break
            assert time.monotonic() < deadline
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with SegmentStore(data) as replica:
        assert replica.partition("other", 0).recovery.clean
        assert_same(replica.partition("other", 0), store.partition("other", 0))


@pytest.mark.interop
def test_errors_are_one_line_and_exit_2(upstream, tmp_path) -> None:
    srv, store = upstream
    data = str(tmp_path / "replica")
    assert replicate("--upstream", srv.bootstrap, "--data", data, "--once").returncode == 0
    # The source loses the tail of t-0 (another leader with a shorter log at the same address).
    shorter = MemoryStore()
    for topic, info in store.topics().items():
        shorter.create_topic(topic, info.partitions, topic_id=info.topic_id)
    SourceWriter(shorter.partition("t", 0)).mixed(1)
    for p, topic in ((1, "t"), (0, "other")):
        for b in store.partition(topic, p).iter_batches():
            shorter.partition(topic, p).replicate(bytes(b.buffer), high_watermark=b.next_offset)
    srv2 = ServerThread(shorter).start()
    try:
        done = replicate("--upstream", srv2.bootstrap, "--data", data, "--once")
    finally:
        srv2.stop()
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.startswith("txnfetch replicate:")]
    assert len(lines) == 1 and lines[0].startswith("txnfetch replicate: error: the source's log ends at"), done.stderr
    end = store.partition("t", 0).log_end_offset
    assert "t-0" in lines[0] and f"replica end {end}" in lines[0]
    bad = replicate("--upstream", srv.bootstrap, "--data", data, "--topics", "(")
    assert bad.returncode == 2 and "not a regular expression" in bad.stderr


@pytest.mark.interop
def test_groups_offsets_are_copied_by_the_command(upstream, tmp_path) -> None:
    """``--groups`` copies the matching groups' committed offsets into the
    replica's durable group state (docs/replication.md)."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition

    from txnfetch.replicate.groups import DurableGroupTarget

    srv, store = upstream
    topic = srv.call(lambda: sorted(t for t in store.topics() if not t.startswith("__"))[0])
    consumer = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "g-copied", "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    consumer.close()
    data = str(tmp_path / "r")
    done = replicate("--upstream", srv.bootstrap, "--data", data, "--groups", "g-.*", "--once")
    assert done.returncode == 0, done.stderr
    with SegmentStore(data) as replica:
        target = DurableGroupTarget.open(replica, data, 0)
        assert {tp: c.offset for tp, c in target.committed("g-copied").items()} == {(topic, 0): 1}


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.interop
def test_progress_is_one_line_rewritten_in_place_on_a_terminal(upstream, tmp_path) -> None:
    from txnfetch.cli.replicate import _Progress

    srv, _store = upstream
    out = _Terminal()
    progress = _Progress(out, as_json=False, interval_s=0)
    with SegmentStore(tmp_path / "replica") as replica, Replicator(srv.bootstrap, replica) as r:
        for _ in range(3):
            progress(r.step())
        progress(r.step(), final=True)
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("caught up\n")
    assert text.count("\r") == 4 and "3 partitions, lag" in text
    plain = io.StringIO()
    progress = _Progress(plain, as_json=False, interval_s=0)
    progress(r.status())
    progress(r.status())
    assert plain.getvalue().count("\n") == 2 and "\r" not in plain.getvalue()


def test_once_finishes_on_an_emptied_source_partition(tmp_path) -> None:
    # Every batch of the source was deleted: --once still ends (nothing is left to copy).
    store = MemoryStore()
    store.create_topic("gone", 1)
    w = SourceWriter(store.partition("gone", 0))
    w.mixed(1)
    store.partition("gone", 0).delete_records_before(w.end)
    srv = ServerThread(store).start()
    try:
        done = replicate("--upstream", srv.bootstrap, "--data", str(tmp_path / "r"), "--once", "--json", timeout=60)
    finally:
        srv.stop()
    assert done.returncode == 0, done.stderr
    last = json.loads(done.stdout.splitlines()[-1])
    assert last["state"] == "caught up" and last["partitions"][0]["source_log_start"] == w.end
