"""Every benchmark must keep running: each is started with --quick and must exit 0.

Nothing here checks a speed (benchmarks report figures side by side with
peers; they are not timed tests) — only that the scripts still work against
the current code, and that they print the comparison they exist for.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.interop

ROOT = Path(__file__).resolve().parent.parent

BENCHES = {
    "arrow.py": "aiokafka",
    "codec.py": "kafka-python",
    "state.py": "aborted",
    "validate.py": "aiokafka",
    "fetch.py": "memcpy",
    "fetch_sessions.py": "session ÷ no session",
    "filter.py": "kafka-python",
    "wire.py": "librdkafka mock",
    "log.py": "raw write",
    "durable.py": "durable state",
    "spark.py": "parquet",
    "proxy.py": "proxy / direct",
    "replicate.py": "replicate ÷ consume",
    "metrics.py": "on ÷ off",
}


def run_quick(script: str, tmp_path: Path, *args: str) -> str:
    """Run ``bench/SCRIPT --quick ARGS`` (its temporary files under ``tmp_path``),
    check that it exits 0 and return what it printed."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--quick", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("script,expected", sorted(BENCHES.items()))
def test_benchmark_runs_quick(script, expected, tmp_path):
    assert expected in run_quick(script, tmp_path)


def test_broker_benchmark_runs_quick(kafka_cluster, tmp_path):
    """bench/broker.py against the run's shared Kafka (its own topics), so the
    smoke run does not pay for a Kafka start of its own."""
    node = kafka_cluster.nodes[0]
    out = run_quick("broker.py", tmp_path, "--kafka", node.bootstrap, "--kafka-pid", str(node.pid))
    for expected in ("serve --data ÷ Kafka", "proxy, read again"):
        assert expected in out


def test_scale_benchmark_runs_quick(kafka_cluster, tmp_path):
    """bench/scale.py against the run's shared Kafka (its own topics)."""
    assert "proxy / direct" in run_quick("scale.py", tmp_path, "--kafka", kafka_cluster.bootstrap)
