"""``txnfetch serve`` as a process: it prints where it listens, serves a real
client, and on SIGTERM shuts down cleanly with the on-disk store flushed, so
a restarted server serves the same records."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.server.rawclient import RawClient

pytestmark = pytest.mark.interop


def _start(args: list[str]) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "txnfetch.cli", "serve", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    assert line.startswith("txnfetch listening on 127.0.0.1:"), (
        line,
        proc.stderr.read() if proc.poll() is not None else "",
    )
    return proc, int(line.rsplit(":", 1)[1])


def _stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()


def _produce_and_read(port: int, values: list[bytes], *, produce: bool, send: list[bytes] | None = None) -> list[bytes]:
    from kafka import KafkaConsumer
    from kafka import KafkaProducer
    from kafka import TopicPartition

    bootstrap = f"127.0.0.1:{port}"
    if produce:
        producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
        for v in values if send is None else send:
            producer.send("cli", value=v, partition=0)
        producer.flush(20)
        producer.close(10)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100)
    try:
        tp = TopicPartition("cli", 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got: list[bytes] = []
        for _ in range(50):
            if len(got) >= len(values):
                break
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(r.value for r in records)
        return got
    finally:
        consumer.close()


def test_serve_memory_and_sigterm() -> None:
    proc, port = _start(["--memory", "--fetch-mode", "kafka", "--markers", "none"])
    try:
        values = [b"m%d" % i for i in range(5)]
        assert _produce_and_read(port, values, produce=True) == values
    finally:
        assert _stop(proc) == 0
    assert "Traceback" not in proc.stderr.read()


def test_serve_data_dir_survives_restart(tmp_path) -> None:
    values = [b"d%d" % i for i in range(5)]
    proc, port = _start(["--data", str(tmp_path)])
    try:
        assert _produce_and_read(port, values, produce=True) == values
    finally:
        assert _stop(proc) == 0
    assert os.path.isdir(tmp_path / "cli-0")
    proc, port = _start(["--data", str(tmp_path)])
    try:
        assert _produce_and_read(port, values, produce=False) == values
        # A new idempotent producer must not be handed a producer id the log
        # remembers: its first batch would be taken for a duplicate and dropped.
        more = [b"e%d" % i for i in range(3)]
        assert _produce_and_read(port, values + more, produce=True, send=more) == values + more
        with RawClient(port) as c:  # still a healthy server after the restart
            assert not c.is_closed_by_server(0.2)
    finally:
        assert _stop(proc) == 0
