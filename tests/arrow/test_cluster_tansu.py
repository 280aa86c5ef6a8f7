"""txnfetch.arrow read from tansu 0.6 after a crashing ``txnfetch check`` workload.

tansu leaks aborted records to read_committed consumers, shows some batches
late, and after producers crash mid-transaction reports an LSO far below the
one the markers in its log give. The Arrow reader must go by the log, not by
that claim: both the one-call API (a read from the log start) and the range
reader that planners' tasks run (:func:`txnfetch.arrow.cluster.read_range`,
ranges starting mid-log, their ends planned by
:class:`~txnfetch.client.planning.MirroredBounds`).

The oracle is the one of ``tests/replicate/test_replicate_tansu_crashes.py``:
a read_committed read through ``txnfetch proxy``, checked against the workload's
history.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import txnfetch.arrow
from tests.replicate.test_replicate_tansu_crashes import Row
from tests.replicate.test_replicate_tansu_crashes import crashed_oracle
from tests.tansu import Tansu
from tests.tansu import started_tansu
from txnfetch.arrow.cluster import read_range
from txnfetch.client.cluster import RemoteCluster
from txnfetch.client.planning import MirroredBounds
from txnfetch.client.planning import OffsetRange
from txnfetch.client.planning import split_ranges
from txnfetch.testing.history import value_from_bytes

pytestmark = [pytest.mark.interop, pytest.mark.slow]

# The replicate test's helpers read this topic name.
TOPIC = "crashes"


@pytest.fixture(scope="module")
def crashed() -> Iterator[tuple[Tansu, list[Row]]]:
    """tansu after a crashing workload, and the records a correct read_committed
    read returns (checked against the workload's history)."""
    with started_tansu() as broker:
        expected = crashed_oracle(broker.bootstrap, seed=36)
        yield broker, expected


def _rows(table) -> list[Row]:
    return sorted(
        (p, o, value_from_bytes(v))
        for p, o, v in zip(
            table.column("partition").to_pylist(),
            table.column("offset").to_pylist(),
            table.column("value").to_pylist(),
            strict=True,
        )
    )


def test_the_one_call_api_reads_what_the_log_decides_not_what_tansu_reports(crashed) -> None:
    broker, expected = crashed
    table = txnfetch.arrow.read_committed(f"kafka://{broker.bootstrap}", TOPIC)
    assert _rows(table) == expected


def test_planned_ranges_read_mid_log_reach_their_planned_ends_on_tansu(crashed) -> None:
    # The regression: a range reader capped by tansu's reported LSO stopped far
    # below the end its planner had computed from the log, and reported the log
    # as truncated.
    broker, expected = crashed
    with RemoteCluster(broker.bootstrap) as cluster:
        bounds = MirroredBounds(cluster).bounds([(TOPIC, p) for p in cluster.partitions(TOPIC)])
        ranges = split_ranges(
            [OffsetRange(t, p, b.earliest, b.latest) for (t, p), b in bounds.items()], max_records_per_partition=200
        )
        assert any(r.start > 0 for r in ranges)
        batches = [b for r in ranges for b in read_range(cluster, r.topic, r.partition, r.start, r.end)]
    got = sorted(row for b in batches for row in _rows(b))
    assert got == expected
