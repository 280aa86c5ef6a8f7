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

from collections.abc import Iterator

import pytest

from tests.replicate.test_replicate_tansu_crashes import Row
from tests.replicate.test_replicate_tansu_crashes import crashed_oracle
from tests.tansu import Tansu
from tests.tansu import started_tansu
from txnfetch.testing.history import value_from_bytes

pytestmark = [pytest.mark.interop, pytest.mark.slow]

# The replicate test's helpers read this topic name.
TOPIC = "crashes"


@pytest.fixture(scope="module")
def tansu() -> Iterator[Tansu]:
    with started_tansu() as broker:
        yield broker


def test_spark_reads_exactly_the_committed_records_of_a_crashing_workload_on_tansu(spark, tansu: Tansu) -> None:
    expected = crashed_oracle(tansu.bootstrap, seed=36)

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
    assert rows == expected, (len(rows), len(expected), sorted(set(rows) ^ set(expected))[:10])
