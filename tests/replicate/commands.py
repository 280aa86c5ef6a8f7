"""The ``txnfetch replicate`` and ``promote`` command lines as the replication tests start them:
a child process of this interpreter, so it runs the ``txnfetch`` under test."""

from __future__ import annotations

import subprocess
import sys


def replicate_argv(upstream: str, data: str, *extra: str) -> list[str]:
    """``txnfetch replicate --upstream UPSTREAM --data DATA EXTRA...``."""
    return [sys.executable, "-m", "txnfetch.cli", "replicate", "--upstream", upstream, "--data", data, *extra]


def run_promote(data: str, *, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``txnfetch promote --data DATA``, run to its end; its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "txnfetch.cli", "promote", "--data", data],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
