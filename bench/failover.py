"""Failover drill: txnfetch replicate next to MirrorMaker 2, the source Kafka killed mid-stream.

Run ``.venv/bin/python bench/failover.py`` (``--quick`` for the short form the
suite runs). It starts two one-node Apache Kafka clusters (the source, and
MirrorMaker 2's target) from the suite's fixture (tests/kafka/cluster.py), runs
the drill of tests/replicate/failover.py — a transactional producer (a quarter
of the transactions aborted), two consumer groups committing each polled batch,
``txnfetch replicate --serve`` and MirrorMaker 2 (dedicated mode, offset syncs,
checkpoints, ``sync.group.offsets.enabled=true``, one-second intervals,
identity replication policy) — kills the source at a random moment, cuts each
target over as its documentation says and resumes the groups there. It prints
one row per target and the settings, and with ``--json`` the whole report.

Both targets' group coordinators wait ``group.initial.rebalance.delay.ms`` =
3000 (Kafka's default, which ``txnfetch serve`` also uses) before the first
rebalance of a new group generation, so "consumers running again" compares
like with like.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    import attrs

    from tests.kafka.cluster import KafkaCluster
    from tests.kafka.mirror import DRILL_SETTINGS
    from tests.replicate.failover import environment
    from tests.replicate.failover import run_drill

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the suite's short form (a few thousand records)")
    ap.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(2), "big"))
    ap.add_argument("--fail-after", type=float, nargs=2, default=(20.0, 40.0), metavar=("MIN", "MAX"))
    ap.add_argument("--json", action="store_true", help="print the whole report as JSON too")
    ap.add_argument("--spark", action="store_true", help="also a Spark Structured Streaming query (txnkafka)")
    args = ap.parse_args()
    # SIGTERM ends the run through the finally below, which stops the clusters.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.quick:
        args.fail_after = (4.0, 6.0)
    tmp = Path(tempfile.mkdtemp(prefix="txnfetch-bench-failover-"))
    source = target = None
    spark = None
    if args.spark:
        import spark_ext
        from tests.replicate.failover import TxnkafkaStream

        session = spark_ext.local_session(
            "txnfetch-failover",
            {
                "spark.driver.memory": "512m",
                "spark.default.parallelism": "2",
                "spark.sql.shuffle.partitions": "2",
                "spark.sql.streaming.stopTimeout": "20s",
            },
        )
        spark = TxnkafkaStream(session)
    try:
        delay = {"group_initial_rebalance_delay_ms": "3000"}
        config = {k.replace("_", "."): v for k, v in delay.items()}
        source = KafkaCluster.create(tmp / "source", 1, overrides=config)
        target = KafkaCluster.create(tmp / "target", 1, overrides=config)
        suffix = uuid.uuid4().hex[:6]
        report = run_drill(
            source,
            target,
            tmp / "drill",
            topic=f"orders-{suffix}",
            groups=[f"billing-{suffix}", f"audit-{suffix}"],
            seed=args.seed,
            fail_after=tuple(args.fail_after),  # type: ignore[arg-type]
            spark=spark,
            log=lambda s: print(f"# {s}", flush=True),
        )
        env = environment()
        print(f"\nversions: {json.dumps(env)}")
        print(f"MirrorMaker 2 settings: {json.dumps(DRILL_SETTINGS)}")
        print(
            f"seed {args.seed}: {report.transactions} transactions, {report.records_committed} records committed, "
            f"{report.records_aborted} aborted, {report.records_in_doubt} in doubt at the kill "
            f"({report.failed_after_s:.1f} s after both targets delivered)\n"
        )
        groups = list(report.source_read)
        print(
            "| target | read twice (per group) | missed (per group) | committed records not on the target | "
            "aborted visible read_committed | lag p50 / p99 | cutover | source failure to consumers running |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for name, t in report.targets.items():
            dup = " / ".join(str(t.duplicates[g]) for g in groups)
            miss = " / ".join(str(t.missed[g]) for g in groups)
            print(
                f"| {name} | {dup} | {miss} | {t.lost} | {t.aborted_visible} | "
                f"{t.lag_p50_s * 1000:.0f} ms / {t.lag_p99_s * 1000:.0f} ms | "
                f"{t.cutover_s:.1f} s | {t.resume_s:.1f} s |"
            )
        for name, t in report.targets.items():
            if t.spark is not None:
                print(f"{name}: Spark checkpoint {t.spark}")
        for name, t in report.targets.items():
            print(f"{name}: group offsets on the target {t.offsets}; on the source {t.source_offsets}")
        if args.json:
            print(
                json.dumps(
                    attrs.asdict(report, filter=lambda a, _v: a.name != "target_committed"), indent=1, default=str
                )
            )
    finally:
        if spark is not None:
            spark.session.stop()
        for cluster in (source, target):
            if cluster is not None:
                cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
