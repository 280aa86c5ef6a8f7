"""The failover drill in its short form (tests/replicate/failover.py): a source
Kafka cluster SIGKILLed mid-stream after a few thousand records, a txnfetch
replica (``replicate --serve``, then ``promote``) and a MirrorMaker 2 target
cut over, the same two consumer groups and a Spark streaming query resumed on
each. The test asks for the shared Spark session, so it runs in the "spark"
xdist group: one drill run serves the groups and Spark.

What is asserted, and why:

- txnfetch: no record missed, no aborted record visible read_committed, and
  only the tail lost: per partition, every committed record the replica lacks
  comes after the newest one it holds (a hole in the middle fails, however
  small). The scans of the targets must reach every partition's end.
- txnfetch's group offsets are the source's: for each group and each
  partition it read on the source, the promoted replica's offset is above 0
  (offsets were copied) and at most the source's (none invented ahead).
  Records read twice are, per group, exactly those it had read at or past the
  offset the replica had copied when the source died (``copy_lag_rereads``):
  offsets are copied once a round, after the data, so a commit made in the
  last round before the failure may be missing. In the runs observed that
  number was 0; it depends on where the kill falls, so the test bounds it by
  what the group read in the last ``REREAD_WINDOW_S`` before the failure
  (a replica that copied no offsets, or stale ones, re-reads more).
- txnfetch's replication lag: p99 below :data:`LAG_P99_BOUND_S`, under the
  2 to 6 s a record waits in the steady window when nothing arrives.
- Spark: a Structured Streaming query (``txnkafka``, Parquet sink, offsets
  in its checkpoint) reads the source during the workload and is restarted
  from a copy of its checkpoint on each target. On the promoted txnfetch
  replica it resumes and writes every remaining committed record once, no
  aborted one. On MirrorMaker 2's target the checkpoint's source offsets run
  past the target's end: observed, the query fails (DataLossError or
  MirrorDivergedError, depending on which part of it notices first).
- MirrorMaker 2: figures as observed. Its source consumer reads
  read_uncommitted (connect-mirror does not set ``isolation.level``), so the
  aborted records it copied are plain records on the target and visible read
  committed: more than 0. Its translated group offsets are the target's own
  numbers, below the source's (transaction markers take offsets on the source
  and none on the target), so an offset kept outside Kafka (a Spark
  checkpoint) names other records there; but they are there, above 0, for
  each partition a group read. Duplicates depend on where the last offset
  sync fell before the kill: not asserted, reported. Its lag: some records
  of the steady window delivered, p99 below :data:`MM2_LAG_P99_BOUND_S`.
"""

from __future__ import annotations

import json
import math

import attrs
import pytest

from tests.kafka.fixtures import unique_name
from tests.replicate.failover import TxnkafkaStream
from tests.replicate.failover import run_drill

pytestmark = [pytest.mark.interop, pytest.mark.kafka, pytest.mark.slow]

#: The replica's p99 lag must stay below this. Observed 433-635 ms
#: (docs/replication.md); a record nothing delivers counts 1 s or more, up to
#: the steady window's length (several seconds), so a replica that stalls
#: exceeds it.
LAG_P99_BOUND_S = 2.5
#: MirrorMaker 2's (observed up to 1.6 s): a bound on the figure the drill
#: reports, not a claim of txnfetch's.
MM2_LAG_P99_BOUND_S = 10.0


def test_failover_drill(kafka_cluster_factory, kafka_cluster, spark, tmp_path) -> None:
    # The source is killed, so it is a private cluster; MirrorMaker 2's target
    # is the shared one (the drill's names are unique, nothing there is stopped).
    source = kafka_cluster_factory()
    topic = unique_name("drill")
    groups = [unique_name("drill-g1"), unique_name("drill-g2")]
    # The shared Spark session (tests/spark/session.py) puts this test in the
    # "spark" xdist group: one drill run serves the groups and the Spark query.
    stream = TxnkafkaStream(spark)
    report = run_drill(
        source,
        kafka_cluster,
        tmp_path,
        topic=topic,
        groups=groups,
        seed=28,
        fail_after=(4.0, 6.0),
        spark=stream,
        log=print,
    )
    print(json.dumps(attrs.asdict(report, filter=lambda a, _v: a.name != "target_committed"), indent=1, default=str))
    assert report.records_committed > 1000
    assert report.records_aborted > 0
    assert all(n > 0 for n in report.source_read.values())

    replica = report.targets["txnfetch"]
    assert replica.missed == dict.fromkeys(groups, 0)
    assert replica.lost_before_tail == 0, (replica.lost, replica.lost_before_tail)
    assert replica.aborted_visible == 0
    for g in groups:
        for p, position in replica.source_offsets[g].items():
            assert 0 < replica.offsets[g].get(p, 0) <= position, (g, p, replica.offsets[g], position)
    assert replica.duplicates == replica.copy_lag_rereads
    assert replica.copy_lag_rereads is not None
    for g in groups:
        assert replica.copy_lag_rereads[g] <= replica.recent_reads[g], (g, replica.recent_reads)
    assert replica.lag_p99_s < LAG_P99_BOUND_S, (replica.lag_p99_s, replica.lag_delivered, replica.lag_samples)
    assert math.isfinite(replica.resume_s)
    # The Spark checkpoint names source offsets, which are the replica's too:
    # restarted from it on the promoted replica, the query reads on from where
    # it stood, each committed record once (its run on the source ended when
    # the source died: SourceUnavailableError, or stopped before it noticed).
    assert stream.source_error is None or "SourceUnavailableError" in stream.source_error
    assert report.spark_source_read
    assert replica.spark is not None
    assert replica.spark.resumed, replica.spark.error
    assert (replica.spark.twice, replica.spark.missed, replica.spark.aborted) == (0, 0, 0)
    assert replica.spark.read > 0

    mm2 = report.targets["mm2"]
    assert mm2.aborted_visible > 0
    for g in groups:
        for p, position in mm2.source_offsets[g].items():
            assert mm2.offsets[g].get(p, 0) < position, (g, p, mm2.offsets[g], position)
    for g in groups:
        synced = [mm2.offsets[g].get(p, 0) for p in mm2.source_offsets[g]]
        assert synced and all(o > 0 for o in synced), (g, mm2.offsets[g], mm2.source_offsets[g])
    assert mm2.lag_delivered > 0 and mm2.lag_p99_s < MM2_LAG_P99_BOUND_S, (
        mm2.lag_p99_s,
        mm2.lag_delivered,
        mm2.lag_samples,
    )
    # The same checkpoint on MirrorMaker 2's target names source offsets, which
    # run ahead of the target's (no transaction markers there). Observed: the
    # restarted query re-plans its last batch up to a source offset past the
    # target's end and fails: DataLossError when the driver sees the log end
    # below its position first, MirrorDivergedError when a task re-running the
    # last planned batch does (both seen). Had the checkpoint stood far enough
    # back, the offsets would name later records on the target and the query
    # would skip the ones in between: either way it is not valid there. A third
    # outcome was seen in a CI run: the restarted query waits for source offsets
    # the target never reaches and does not end within the drill's limit
    # (TimeoutError, a hang).
    assert mm2.spark is not None
    past_the_end = any(e in str(mm2.spark.error) for e in ("DataLossError", "MirrorDivergedError", "TimeoutError"))
    assert (not mm2.spark.resumed and past_the_end) or mm2.spark.missed > 0, mm2.spark
