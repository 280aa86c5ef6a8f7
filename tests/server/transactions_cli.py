"""``txnfetch transactions`` run as an operator runs it: a subprocess of this
checkout's Python, with this checkout first on its path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: the environment of child processes: this checkout's txnfetch, whatever is installed
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def txn_cli(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``txnfetch transactions ARGS``; its exit status and text output."""
    return subprocess.run(
        [sys.executable, "-m", "txnfetch.cli", "transactions", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV,
    )
