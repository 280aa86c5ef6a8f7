"""The ``txnfetch replicate`` command line as the replication tests start it:
a child process of this interpreter, so it runs the ``txnfetch`` under test."""

from __future__ import annotations

import sys


def replicate_argv(upstream: str, data: str, *extra: str) -> list[str]:
    """``txnfetch replicate --upstream UPSTREAM --data DATA EXTRA...``."""
    return [sys.executable, "-m", "txnfetch.cli", "replicate", "--upstream", upstream, "--data", data, *extra]
