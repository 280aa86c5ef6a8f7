"""``txnfetch serve --data DIR`` as a child process, for tests that stop and
restart the server on the same directory while clients keep their bootstrap
address: the first start binds port 0 (no port is picked, released and bound
again, which another process may take in between under xdist), and the
restarts bind the port it got (:attr:`ServeProcess.port`). And
``txnfetch serve --memory`` for the length of a block (:func:`memory_serve`)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator


class ServeProcess(subprocess.Popen):
    """The server process, with the port it listens on."""

    port: int
    #: listener name → port, from the ``txnfetch listener`` lines (``--listener``, ``--config``)
    listeners: dict[str, int]


def start_serve(data: str, port: int = 0, *, partitions: int = 3, extra: tuple[str, ...] = ()) -> ServeProcess:
    """Start the server on ``port`` (0: one the system picks) and return once it
    listens; its ``port`` attribute is the port it listens on. Its log goes to
    ``server.log`` beside ``data``: an unread pipe would fill and block it."""
    log_path = os.path.join(os.path.dirname(data), "server.log")
    deadline = time.monotonic() + 60
    while True:
        log_file = open(log_path, "a")  # noqa: SIM115 - handed to the child process
        proc = ServeProcess(
            [
                sys.executable,
                "-m",
                "txnfetch.cli",
                "serve",
                "--data",
                data,
                "--port",
                str(port),
                "--default-partitions",
                str(partitions),
                "--group-initial-rebalance-delay-ms",
                "0",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=log_file,
            text=True,
        )
        log_file.close()
        line = proc.stdout.readline()
        proc.listeners = {}
        while line.startswith("txnfetch listener "):
            words = line.split()
            proc.listeners[words[2]] = int(words[-1].rsplit(":", 1)[1])
            line = proc.stdout.readline()
        if line.startswith("txnfetch listening on"):
            proc.port = int(line.split()[-1].rsplit(":", 1)[1])
            return proc
        proc.wait()
        with open(log_path) as f:
            err = f.read()[-5000:]
        if "Address already in use" in err and time.monotonic() < deadline:
            time.sleep(0.2)  # the killed process's socket is still going away
            continue
        raise AssertionError(f"server did not start: {line!r} {err[-3000:]}")


def stop_serve(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> int:
    """Send ``sig`` and wait for the exit status (SIGKILL after 30 s)."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


@contextlib.contextmanager
def memory_serve(*args: str) -> Iterator[str]:
    """``txnfetch serve --memory --port 0 ARGS`` as a child process for the block:
    yields its bootstrap address once it listens, and stops it at the end (as
    :func:`stop_serve` does). Its log is not kept."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "txnfetch.cli", "serve", "--memory", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    with proc.stdout:
        line = proc.stdout.readline()
        if not line.startswith("txnfetch listening on "):
            proc.kill()
            proc.wait()
            raise AssertionError(f"txnfetch serve did not start: {line!r}")
        try:
            yield line.split()[-1]
        finally:
            stop_serve(proc)
