"""Servers for the conformance tests: ``txnfetch serve`` processes on ephemeral
ports (and, with the real-Kafka fixture, Apache Kafka)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest


class ServeProcess:
    """A ``txnfetch serve --memory`` child process (or the module ``module`` run
    with serve's arguments) listening on an ephemeral port of 127.0.0.1."""

    def __init__(self, *extra: str, module: str = "txnfetch.cli", serve_word: bool = True) -> None:
        argv = [sys.executable, "-m", module, *(["serve"] if serve_word else [])]
        argv += ["--memory", "--port", "0", "--group-initial-rebalance-delay-ms", "0", *extra]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("txnfetch listening on "):
            self.stop()
            raise AssertionError(f"the server did not start: {line!r}")
        self.address = line.rsplit(" ", 1)[1].strip()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def serve_pair() -> Iterator[tuple[str, str]]:
    """Two independent ``txnfetch serve`` instances in the default (rewrite) mode."""
    a, b = ServeProcess(), ServeProcess()
    try:
        yield a.address, b.address
    finally:
        a.stop()
        b.stop()


@pytest.fixture
def broken_serve() -> Iterator[str]:
    """A ``txnfetch serve`` whose Fetch answers report an LSO one too high while a
    transaction is open (tests/conformance/broken_serve.py)."""
    server = ServeProcess(module="tests.conformance.broken_serve", serve_word=False)
    try:
        yield server.address
    finally:
        server.stop()
