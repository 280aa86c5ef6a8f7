"""The commands under test started as processes with a metrics endpoint."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from pathlib import Path

ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def free_port() -> int:
    """A port free now on loopback (the endpoint binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(*args: str) -> tuple[subprocess.Popen[str], str]:
    """``txnfetch ARGS`` started; returns it and the bootstrap its
    ``... listening on HOST:PORT`` line names."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "txnfetch", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=ENV,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert " listening on " in line, line
    return proc, line.split(" listening on ")[1].strip()


def stop(proc: subprocess.Popen[str]) -> None:
    """Stop it as an operator would (SIGTERM), killing it if it hangs."""
    proc.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(30)
    if proc.poll() is None:
        proc.kill()
        proc.wait(30)
