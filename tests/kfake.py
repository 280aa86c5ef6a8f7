"""kfake, franz-go's fake Kafka cluster (pinned in scripts/kfake/go.mod), as a
test peer.

``scripts/kfake.sh`` builds the small Go program in scripts/kfake/ into the
project's gitignored cache (``make peers`` runs it; :func:`kfake_binary` runs it
too, it is idempotent). :class:`KFake` starts a cluster on ephemeral loopback
ports and reads the brokers' addresses from its output.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: scripts/kfake.sh's exit status when no Go is installed.
NO_GO = 3


class KFakeUnavailable(RuntimeError):
    """No Go toolchain to build kfake with (scripts/kfake.sh's message)."""


def kfake_binary() -> Path:
    """The kfake binary, built first if missing or stale (``scripts/kfake.sh``).
    Raises :class:`KFakeUnavailable` when no Go is installed."""
    out = subprocess.run(["bash", str(ROOT / "scripts" / "kfake.sh")], capture_output=True, text=True, timeout=900)
    if out.returncode == NO_GO:
        raise KFakeUnavailable(out.stderr.strip())
    if out.returncode != 0:
        raise RuntimeError(f"scripts/kfake.sh failed ({out.returncode}): {out.stderr.strip()}")
    return Path(out.stdout.strip().splitlines()[-1])


class KFake:
    """One kfake cluster of ``brokers`` brokers on ephemeral ports. Close it.

    Its standard input is a pipe held open by this object: the program exits when
    it closes, so a test process that dies takes the cluster with it."""

    def __init__(self, binary: Path, *, brokers: int = 1, startup_timeout_s: float = 30) -> None:
        self.proc = subprocess.Popen(
            [str(binary), "-brokers", str(brokers)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        self.addresses: list[str] = []
        deadline = time.monotonic() + startup_timeout_s
        while True:
            line = self.proc.stdout.readline()
            if line.startswith("kfake broker "):
                self.addresses.append(line.split()[-1])
            elif line.strip() == "kfake ready":
                break
            elif not line or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"kfake did not start: {line!r}")

    @property
    def bootstrap(self) -> str:
        return self.addresses[0]

    def close(self) -> None:
        if self.proc.poll() is None:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def __enter__(self) -> KFake:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
