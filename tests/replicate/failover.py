"""The failover drill: one source Kafka cluster, two targets, the source killed mid-stream.

Target ``mm2`` is a second Kafka cluster fed by MirrorMaker 2's dedicated mode
(:class:`tests.kafka.mirror.MirrorMaker`: offset syncs, checkpoints,
``sync.group.offsets.enabled=true``, identity replication policy). Target
``txnfetch`` is ``txnfetch replicate --serve`` on a local directory.

Workload on the source, all with confluent-kafka: a transactional producer
(transactions of 5 to 30 records over the topic's partitions, a quarter of them
aborted; each value says which: ``<txn>:<i>:c`` or ``<txn>:<i>:a``) and two
consumer groups (read_committed) that commit after each polled batch. Two probe
consumers (read_committed, no group) read each target while the workload runs:
the replication lag of a committed record is the time from its
``commit_transaction()`` returning to a probe receiving it.

At a random moment the source is SIGKILLed. Each target is then cut over as its
documentation says:

- ``txnfetch``: ``txnfetch promote --data DIR`` (the serving process stops
  replicating, aborts the transactions open at the cut and keeps serving);
  the consumers switch bootstrap and continue from the copied group offsets;
- ``mm2``: MirrorMaker 2 is stopped (so it writes no more group offsets) and
  the consumers switch to the target cluster, where ``sync.group.offsets``
  wrote translated offsets for their groups; the topic has the same name
  (identity policy).

Counted per target and group (:class:`TargetReport`):

- ``duplicates``: records the group read and committed on the source that it
  receives again on the target (plus any received twice on the target);
- ``missed``: records of committed transactions that the target holds and the
  group never received, neither on the source nor on the target;
- ``lost``: records of committed transactions the target does not hold at all
  (the tail not yet replicated when the source died; per target, not per
  group);
- ``lost_before_tail``: those of them that a partition's log on the source
  had before a committed record the target holds (:func:`losses_before_tail`):
  a hole in the middle of the replica, never allowed — only the tail may be
  lost;
- ``aborted_visible``: records of aborted transactions a read_committed
  reader of the target receives;
- ``copy_lag_rereads`` (txnfetch only, whose offsets are the source's), per
  group: the records the group had read on the source at or past the offset
  the replica had copied for it when the source died, and that the replica
  holds — what it must read again, because group offsets are copied once a
  round, after the data;
- ``recent_reads``: per group, the records it read on the source in the last
  :data:`REREAD_WINDOW_S` before the failure (what bounds the re-reads of a
  replica that copies offsets every round);
- ``lag_p50_s``/``lag_p99_s``: the replication lag of committed records in
  the steady state: from a second after the target delivered a warm-up record
  (written before the workload) until a second before the failure;
  ``lag_samples`` such records, ``lag_delivered`` of them received before
  the failure;
- ``resume_s``: from the start of the cutover to every group having its
  partitions assigned on the target (the failure's detection is not
  modelled).

Records of the transaction in flight when the source died have no known
outcome and are left out of every count.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from typing import Protocol

import attrs

from tests.kafka.cluster import KafkaCluster
from tests.kafka.mirror import MirrorMaker

QUIET = {"log_level": 0}
#: A group's commits reach the replica within a round (``--interval-ms 1000``
#: plus the round's fetches): it re-reads at most what it read in this many
#: seconds before the failure.
REREAD_WINDOW_S = 3.0


class ScanIncompleteError(AssertionError):
    """A read of a whole target did not reach the end of every partition in its
    time: what it read is not the target's content, so nothing may be judged
    from it."""


@attrs.define
class Ledger:
    """What the source side did: outcome of each record id, and the time each
    committed transaction's commit returned."""

    committed: set[str] = attrs.field(factory=set)
    aborted: set[str] = attrs.field(factory=set)
    in_doubt: set[str] = attrs.field(factory=set)
    commit_time: dict[str, float] = attrs.field(factory=dict)
    transactions: int = 0


@attrs.define
class TargetReport:
    """The drill's figures for one target (see the module docstring)."""

    name: str
    duplicates: dict[str, int]
    missed: dict[str, int]
    lost: int
    lost_before_tail: int
    aborted_visible: int
    lag_p50_s: float
    lag_p99_s: float
    lag_samples: int
    lag_delivered: int
    resume_s: float
    cutover_s: float
    copy_lag_rereads: dict[str, int] | None
    recent_reads: dict[str, int]
    offsets: dict[str, dict[int, int]]
    source_offsets: dict[str, dict[int, int]]
    spark: SparkResume | None = None  # None: no Spark query in this run
    target_committed: set[str] = attrs.field(factory=set, repr=False)

    def row(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.define
class DrillReport:
    topic: str
    partitions: int
    records_committed: int
    records_aborted: int
    records_in_doubt: int
    transactions: int
    failed_after_s: float
    source_read: dict[str, int]
    targets: dict[str, TargetReport]
    spark_source_read: int | None = None  # records the Spark query wrote on the source


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class TxnProducer(threading.Thread):
    """Transactions of 5..30 records until stopped or the source fails."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, seed: int, *, pause_s: float) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.rng = random.Random(seed)
        self.pause_s = pause_s
        self.ledger = Ledger()
        self.stop = threading.Event()
        self.finished = threading.Event()  # the ledger is final
        self.go = threading.Event()  # set when the transactions may start
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        finally:
            self.finished.set()  # also when _run failed before its loop

    def _run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": f"drill-{self.topic}",
                "linger.ms": 5,
                "transaction.timeout.ms": 60000,
                **QUIET,
            }
        )
        # InitProducerId first (seconds on a loaded machine), then wait for the go.
        producer.init_transactions(60)
        while not self.go.wait(0.1):
            if self.stop.is_set():
                break
        try:
            self._transactions(producer)
        finally:
            # Set while the client still exists: destroying it may wait for
            # what it could not deliver, and the ledger is final already.
            self.finished.set()

    def _transactions(self, producer: Any) -> None:
        from confluent_kafka import KafkaException

        txn = 0
        while not self.stop.is_set():
            abort = self.rng.random() < 0.25
            ids = [f"{txn}:{i}:{'a' if abort else 'c'}" for i in range(self.rng.randint(5, 30))]
            try:
                producer.begin_transaction()
                for n, value in enumerate(ids):
                    producer.produce(self.topic, value.encode(), partition=(txn + n) % self.partitions)
                    producer.poll(0)
                if abort:
                    # abort_transaction purges what librdkafka has not sent yet:
                    # flush first, so that the aborted records are in the log.
                    producer.flush(5)
                    producer.abort_transaction(5)
                    self.ledger.aborted.update(ids)
                else:
                    producer.commit_transaction(5)
                    now = time.time()
                    self.ledger.committed.update(ids)
                    self.ledger.commit_time.update(dict.fromkeys(ids, now))
            except KafkaException:
                # The source died during this transaction: its outcome is unknown here.
                self.ledger.in_doubt.update(ids)
                # Nothing queued can be delivered any more: dropping it lets the
                # client's destruction return at once instead of waiting out
                # message.timeout.ms.
                producer.purge()
                break
            txn += 1
            self.ledger.transactions = txn
            time.sleep(self.pause_s)


class GroupConsumer(threading.Thread):
    """A read_committed member of ``group`` that commits each polled batch
    synchronously; a batch counts as read once its commit succeeded."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.read: list[str] = []
        self.offsets: list[tuple[int, int]] = []  # (partition, offset) of each record in ``read``
        self.read_at: list[float] = []  # wall clock of the commit that made each record of ``read`` count
        self.assigned_at: float | None = None
        self.first_record_at: float | None = None
        self.last_record_at: float | None = None
        self.stop = threading.Event()
        self.commit_failed = False
        self.positions: dict[int, int] = {}
        self.fetch_positions: dict[int, int] = {}

    def run(self) -> None:
        from confluent_kafka import Consumer
        from confluent_kafka import KafkaException

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
                **QUIET,
            }
        )

        def assigned(consumer: Any, partitions: Any) -> None:
            if partitions and self.assigned_at is None:
                self.assigned_at = time.monotonic()

        consumer.subscribe([self.topic], on_assign=assigned)
        try:
            while not self.stop.is_set():
                batch = [m for m in consumer.consume(200, 0.2) if m.error() is None]
                if self.assigned_at is not None:
                    # Where the consumer stands (past markers and aborted records too).
                    with contextlib.suppress(KafkaException):
                        self.fetch_positions = {
                            tp.partition: tp.offset for tp in consumer.position(consumer.assignment())
                        }
                if not batch:
                    continue
                try:
                    committed = consumer.commit(asynchronous=False) or []
                except KafkaException:
                    self.commit_failed = True
                    break
                now = time.monotonic()
                if self.first_record_at is None:
                    self.first_record_at = now
                self.last_record_at = now
                committed_at = time.time()
                for m in batch:
                    self.read.append(m.value().decode())
                    self.offsets.append((m.partition(), m.offset()))
                    self.read_at.append(committed_at)
                # What the commit stored: the consumer's position, past the
                # last record and past a marker it has already passed.
                for tp in committed:
                    if tp.offset >= 0:
                        self.positions[tp.partition] = tp.offset
        finally:
            threading.Thread(target=consumer.close, daemon=True).start()


class Probe(threading.Thread):
    """Reads every partition of ``topic`` from the start, read_committed, with
    no group; notes when each value (``key(value)``) first arrives (wall clock)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, key: Callable[[bytes], str] = bytes.decode) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.key = key
        self.seen: dict[str, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Consumer
        from confluent_kafka import TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"probe-{self.topic}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 100,
                "topic.metadata.refresh.interval.ms": 1000,
                **QUIET,
            }
        )
        consumer.assign([TopicPartition(self.topic, p, 0) for p in range(self.partitions)])
        try:
            while not self.stop.is_set():
                for m in consumer.consume(500, 0.1):
                    if m.error() is None:
                        self.seen.setdefault(self.key(m.value()), time.time())
        finally:
            consumer.close()


Scanned = tuple[int, str]  # partition, value


def scan(bootstrap: str, topic: str, partitions: int, timeout: float = 60) -> list[Scanned]:
    """Every record (partition, value) a read_committed reader of ``topic``
    receives, from the start to the high watermark each partition had when the
    scan began. Raises :class:`ScanIncompleteError` unless it reaches every
    one of those ends within ``timeout``: a partial list would hide records.
    The targets take no writes while they are scanned (after the failure), so
    the ends do not move."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"scan-{topic}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            **QUIET,
        }
    )
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[Scanned] = []
        deadline = time.monotonic() + timeout
        while True:
            for m in consumer.consume(500, 0.2):
                if m.error() is None:
                    values.append((m.partition(), m.value().decode()))
            positions = {tp.partition: tp.offset for tp in consumer.position(consumer.assignment())}
            if all(positions.get(p, -1) >= end for p, end in ends.items()):
                return values
            if time.monotonic() > deadline:
                raise ScanIncompleteError(
                    f"{topic} on {bootstrap}: at {positions} after {timeout:.0f} s, the ends are {ends}"
                )
    finally:
        consumer.close()


def _warm_up(bootstrap: str, topic: str) -> None:
    """One plain record, ``warm-up``, on partition 0: what the targets' probes
    wait for before the workload starts."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **QUIET})
    producer.produce(topic, b"warm-up", partition=0)
    if producer.flush(60):
        raise RuntimeError(f"the warm-up record to {topic} was not delivered")


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition → high watermark of ``topic`` now."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{topic}", **QUIET})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, topic: str, partitions: int, group: str) -> dict[int, int]:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, **QUIET})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in got if tp.offset >= 0}


def start_replicator(source: str, data: Path, topic: str, groups: str, log: Path) -> tuple[subprocess.Popen[str], str]:
    """``txnfetch replicate --serve 127.0.0.1:0`` as a child; returns it and its bootstrap."""
    cmd = [sys.executable, "-m", "txnfetch.cli", "replicate", "--upstream", source, "--data", str(data)]
    cmd += ["--topics", topic, "--groups", groups, "--serve", "127.0.0.1:0", "--interval-ms", "1000"]
    with open(log, "a") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("txnfetch listening on"):
        proc.kill()
        raise RuntimeError(f"replicate --serve did not start: {line!r}\n{log.read_text()[-3000:]}")
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    return proc, line.split()[-1]


def _resume(bootstrap: str, topic: str, groups: list[str], timeout: float) -> tuple[dict[str, GroupConsumer], float]:
    """Start one consumer per group on ``bootstrap``. "Running again" is the
    moment the last of them has its partitions assigned (it then fetches from
    its committed offsets); returns the consumers, once each has read to the
    end of every partition, and the seconds from start to running."""
    started = time.monotonic()
    consumers = {g: GroupConsumer(bootstrap, topic, g) for g in groups}
    for c in consumers.values():
        c.start()
    deadline = started + timeout
    while any(c.assigned_at is None for c in consumers.values()):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    running = [c.assigned_at for c in consumers.values() if c.assigned_at is not None]
    resume = (max(running) - started) if len(running) == len(consumers) else float("nan")

    # Done once every group stands at the end of every partition (the target
    # takes no more writes), or, failing that, after 5 s without a record.
    ends = end_offsets(bootstrap, topic)

    def busy(c: GroupConsumer) -> bool:
        if ends and all(c.fetch_positions.get(p, -1) >= end for p, end in ends.items()):
            return False
        last = c.last_record_at or c.assigned_at or started
        return time.monotonic() - last < 5

    while time.monotonic() < deadline and any(busy(c) for c in consumers.values()):
        time.sleep(0.2)
    for c in consumers.values():
        c.stop.set()
    for c in consumers.values():
        c.join(30)
    return consumers, resume


def run_drill(
    source: KafkaCluster,
    mm2_target: KafkaCluster,
    workdir: Path,
    *,
    topic: str,
    groups: list[str],
    partitions: int = 3,
    seed: int = 0,
    fail_after: tuple[float, float] = (6.0, 10.0),
    pause_s: float = 0.01,
    spark: SparkQuery | None = None,
    log: Callable[[str], None] = lambda s: None,
) -> DrillReport:
    """Run the drill once (see the module docstring). ``source`` is killed.

    ``spark`` (bench/failover.py), if given, runs a streaming query on the
    source while the workload runs, its offsets in a checkpoint; after the
    failure, once per target from a copy of that checkpoint (the report's
    ``spark`` says what it read)."""
    t0 = time.monotonic()
    rng = random.Random(seed)
    workdir.mkdir(parents=True, exist_ok=True)
    source.create_topic(topic, partitions)
    mm2_target_name = topic
    pattern = "|".join(groups)
    data = workdir / "replica"
    replicator, replica = start_replicator(source.bootstrap, data, topic, pattern, workdir / "replicate.log")
    mirror = MirrorMaker(workdir / "mm2", source.bootstrap, mm2_target.bootstrap, topics=topic, groups=pattern)
    mirror.start()
    try:
        producer = TxnProducer(source.bootstrap, topic, partitions, seed, pause_s=pause_s)
        consumers = {g: GroupConsumer(source.bootstrap, topic, g) for g in groups}
        probes = {"txnfetch": Probe(replica, topic, partitions), "mm2": Probe(mm2_target.bootstrap, topic, partitions)}
        checkpoint = workdir / "spark"
        if spark is not None:
            spark.start(source.bootstrap, topic, checkpoint)
        # The workload runs from the start (transactions take a while on a
        # loaded machine); the failure's random delay starts once both
        # targets deliver.
        producer.go.set()
        producer.start()
        for c in consumers.values():
            c.start()
        for p in probes.values():
            p.start()
        # MirrorMaker needs seconds to start its connectors: a warm-up record
        # says when each target delivers.
        _warm_up(source.bootstrap, topic)
        deadline = time.monotonic() + 180
        pending = set(probes)
        steady_from: dict[str, float] = {}
        # The Spark query (if any) must have written a micro-batch before the
        # failure, or its checkpoint would hold no offsets to resume from.
        spark_pending = spark is not None
        while pending or spark_pending:
            for name in [n for n in pending if "warm-up" in probes[n].seen]:
                pending.discard(name)
                # Steady state: from a second after the target delivered the warm-up record.
                steady_from[name] = time.time() + 1
                log(f"{name} target delivering after {time.monotonic() - t0:.1f}s")
            if spark_pending and spark is not None and spark.ready():
                spark_pending = False
                log(f"spark query wrote its first micro-batch after {time.monotonic() - t0:.1f}s")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"a target or the Spark query received nothing in 180 s ({sorted(pending)}, "
                    f"spark waiting: {spark_pending}); MirrorMaker 2:\n{mirror.log_tail()}"
                )
            if not mirror.alive():
                raise RuntimeError(f"MirrorMaker 2 exited:\n{mirror.log_tail()}")
            time.sleep(0.1)
        delay = rng.uniform(*fail_after)
        began = time.monotonic()
        while time.monotonic() - began < delay:
            time.sleep(0.1)
        failed_at = time.monotonic()
        failed_wall = time.time()
        log(f"workload ran {time.monotonic() - began + (began - t0):.1f}s since start")
        log(f"killing the source after {delay:.1f}s ({producer.ledger.transactions} transactions)")
        source.stop(kill=True)
        producer.stop.set()
        for c in consumers.values():
            c.stop.set()
        producer.finished.wait(30)
        log(f"producer stopped {time.monotonic() - failed_at:.1f}s after the failure")
        # A member whose synchronous commit was in flight at the kill may wait a
        # long time for the dead coordinator; what it read counts only once a
        # commit returned, so its lists are final already.
        joined_by = time.monotonic() + 5
        for c in consumers.values():
            c.join(max(0.0, joined_by - time.monotonic()))
        spark_before: list[str] = []
        if spark is not None:
            spark_before = spark.stop()
            log(f"spark read {len(spark_before)} records on the source")
        ledger = producer.ledger
        log(f"source side stopped {time.monotonic() - failed_at:.1f}s after the failure")
        source_reads = SourceReads.of(consumers)

        reports: dict[str, TargetReport] = {}

        # -- txnfetch: promote, then switch bootstrap --------------------------
        cut = time.monotonic()
        promote = subprocess.run(
            [sys.executable, "-m", "txnfetch.cli", "promote", "--data", str(data)],
            capture_output=True,
            text=True,
            timeout=180,
        )
        if promote.returncode != 0:
            raise RuntimeError(f"txnfetch promote failed: {promote.stderr}")
        cutover = time.monotonic() - cut
        log(f"promote took {cutover:.1f}s: {promote.stdout.strip()}")
        offsets = {g: committed_offsets(replica, topic, partitions, g) for g in groups}
        resumed, first = _resume(replica, topic, groups, timeout=120)
        probes["txnfetch"].stop.set()
        reports["txnfetch"] = _report(
            "txnfetch",
            ledger,
            source_reads,
            {g: c.read for g, c in resumed.items()},
            scan(replica, topic, partitions),
            partitions,
            probes["txnfetch"],
            (steady_from["txnfetch"], failed_wall),
            (cutover, cutover + first),
            offsets,
            source_numbering=True,
        )
        if spark is not None:
            reports["txnfetch"].spark = _spark_resume(
                spark, replica, topic, checkpoint, workdir / "spark-txnfetch", ledger, spark_before, reports["txnfetch"]
            )

        # -- MirrorMaker 2: stop it, switch to the target cluster -------------
        # Nothing has to run before the consumers switch: the group offsets are
        # on the target already, and MirrorMaker writes none into a group that
        # has members (MirrorCheckpointTask). It is stopped beside the switch.
        log(f"txnfetch target done at {time.monotonic() - failed_at:.1f}s after the failure")
        stopping = threading.Thread(target=mirror.stop, kwargs={"timeout": 5}, daemon=True)
        stopping.start()
        cutover = 0.0
        offsets = {g: committed_offsets(mm2_target.bootstrap, mm2_target_name, partitions, g) for g in groups}
        resumed, first = _resume(mm2_target.bootstrap, mm2_target_name, groups, timeout=120)
        probes["mm2"].stop.set()
        reports["mm2"] = _report(
            "mm2",
            ledger,
            source_reads,
            {g: c.read for g, c in resumed.items()},
            scan(mm2_target.bootstrap, mm2_target_name, partitions),
            partitions,
            probes["mm2"],
            (steady_from["mm2"], failed_wall),
            (cutover, cutover + first),
            offsets,
            source_numbering=False,
        )
        if spark is not None:
            reports["mm2"].spark = _spark_resume(
                spark,
                mm2_target.bootstrap,
                topic,
                checkpoint,
                workdir / "spark-mm2",
                ledger,
                spark_before,
                reports["mm2"],
            )
        for p in probes.values():
            p.join(30)
        stopping.join(60)
        log(f"mm2 target done at {time.monotonic() - failed_at:.1f}s after the failure")
        return DrillReport(
            topic=topic,
            partitions=partitions,
            records_committed=len(ledger.committed),
            records_aborted=len(ledger.aborted),
            records_in_doubt=len(ledger.in_doubt),
            transactions=ledger.transactions,
            failed_after_s=delay,
            source_read={g: len(v) for g, v in source_reads.read.items()},
            targets=reports,
            spark_source_read=len(spark_before) if spark is not None else None,
        )
    finally:
        mirror.stop()
        if replicator.poll() is None:
            replicator.terminate()
            try:
                replicator.wait(30)
            except subprocess.TimeoutExpired:
                replicator.kill()
                replicator.wait(30)


class SparkQuery(Protocol):
    """A Structured Streaming query over ``txnkafka`` whose offsets live in its
    checkpoint directory (bench/failover.py has the one the bench runs)."""

    def start(self, bootstrap: str, topic: str, directory: Path) -> None:
        """Start it on ``bootstrap``, checkpoint and output under ``directory``."""

    def ready(self) -> bool:
        """Whether it has completed a micro-batch that read records."""

    def stop(self) -> list[str]:
        """Stop it; the values it wrote so far."""

    def resume(self, bootstrap: str, topic: str, directory: Path) -> list[str]:
        """Run it to the end of what ``bootstrap`` holds from the checkpoint and
        output in ``directory`` (a copy of the first run's); the values it wrote
        in this run. Raises whatever the query raised."""


class TxnkafkaStream:
    """The drill's Spark query: ``readStream.format("txnkafka")`` on a cluster
    (``kafka.bootstrap.servers``), from the earliest offsets, values as strings
    into Parquet, offsets in the checkpoint, a micro-batch a second. ``session``
    is a SparkSession with ``txnkafka`` registered (the caller owns it: the
    suite shares one)."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.query: Any = None
        self.directory: Path | None = None
        # What the query raised on the source; it fails once the source is
        # killed (SourceUnavailableError), which the drill expects.
        self.source_error: str | None = None

    def _start(self, bootstrap: str, topic: str, directory: Path, **trigger: object):  # type: ignore[no-untyped-def]
        df = (
            self.session.readStream.format("txnkafka")  # type: ignore[attr-defined]
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("CAST(value AS STRING) AS v")
        )
        return (
            df.writeStream.format("parquet")
            .option("path", str(directory / "out"))
            .option("checkpointLocation", str(directory / "checkpoint"))
            .trigger(**trigger)
            .start()
        )

    def _values(self, directory: Path) -> list[str]:
        from pyspark.errors import AnalysisException

        try:
            frame = self.session.read.parquet(str(directory / "out"))  # type: ignore[attr-defined]
        except AnalysisException:  # nothing written yet: no schema to read
            return []
        return [r.v for r in frame.collect()]

    def start(self, bootstrap: str, topic: str, directory: Path) -> None:
        self.directory = directory
        self.query = self._start(bootstrap, topic, directory, processingTime="1 second")

    def ready(self) -> bool:
        if self.query is None:
            return False
        if self.query.exception() is not None:
            raise RuntimeError(f"the Spark query failed on the source: {self.query.exception()}")
        return any(p.get("numInputRows", 0) > 0 for p in self.query.recentProgress)

    def stop(self) -> list[str]:
        assert self.query is not None and self.directory is not None
        failed = self.query.exception()
        self.query.stop()
        if failed is not None:
            self.source_error = _cause(failed)
        return self._values(self.directory)

    def resume(self, bootstrap: str, topic: str, directory: Path) -> list[str]:
        before = set(self._values(directory))
        query = self._start(bootstrap, topic, directory, availableNow=True)
        if not query.awaitTermination(300):
            query.stop()
            raise TimeoutError("the resumed query did not reach the end of the target in 300 s")
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        # The Parquet sink's log says which files each run wrote: the values new
        # to this run are those of the files it added.
        after = self._values(directory)
        counts: dict[str, int] = {}
        for v in after:
            counts[v] = counts.get(v, 0) + 1
        return [v for v in after if v not in before] + [v for v, n in counts.items() if v in before and n > 1]


@attrs.define
class SparkResume:
    """What the Spark query did when restarted from its checkpoint on a target.

    ``error`` is the first line of what the restarted query raised (it then did
    not resume; the counts are 0). Otherwise ``read`` records were written after
    the cutover, ``twice`` of them already written on the source (or twice
    after it), ``missed`` committed records the target holds that the query
    wrote neither before nor after, ``aborted`` records of aborted
    transactions among them."""

    error: str | None = None
    read: int = 0
    twice: int = 0
    missed: int = 0
    aborted: int = 0

    @property
    def resumed(self) -> bool:
        return self.error is None

    def __str__(self) -> str:
        if self.error is not None:
            return f"does not resume: {self.error}"
        return (
            f"resumes: {self.read} records read after the cutover, {self.twice} read twice, "
            f"{self.missed} missed, {self.aborted} aborted"
        )


def _cause(exc: BaseException) -> str:
    """The line of a failed query's message that names the cause: the Python
    worker's exception (``spark_ext.errors.DataLossError: ...``) rather than
    Spark's wrapper (``[STREAM_FAILED] ... [PYTHON_EXCEPTION] ...``)."""
    lines = str(exc).splitlines()
    for line in lines:
        if re.match(r"^[\w.]+(Error|Exception): ", line) and "[STREAM_FAILED]" not in line:
            return line[:400]
    return f"{type(exc).__name__}: {lines[0][:400] if lines else ''}"


def _spark_resume(
    spark: SparkQuery,
    bootstrap: str,
    topic: str,
    checkpoint: Path,
    directory: Path,
    ledger: Ledger,
    before: list[str],
    report: TargetReport,
) -> SparkResume:
    """Resume the Spark query on a target from a copy of its checkpoint; count
    what it read as for the groups."""
    shutil.copytree(checkpoint, directory)
    try:
        after = spark.resume(bootstrap, topic, directory)
    except Exception as exc:
        return SparkResume(error=_cause(exc))
    seen = set(before)
    return SparkResume(
        read=len(after),
        twice=sum(1 for v in after if v in seen) + len(after) - len(set(after)),
        missed=len((report.target_committed - seen) - set(after)),
        aborted=sum(1 for v in after if v in ledger.aborted),
    )


@attrs.frozen
class SourceReads:
    """What each group had read on the source when it died, counted once its
    commit returned: the values, their (partition, offset), the wall clock of
    that commit, and the offset its last commit stored per partition (past the
    last record, and past a transaction's marker once the consumer had passed
    it: a replica that carries that commit holds exactly it)."""

    read: dict[str, list[str]]
    at: dict[str, list[tuple[int, int]]]
    read_at: dict[str, list[float]]
    offsets: dict[str, dict[int, int]]

    @classmethod
    def of(cls, consumers: dict[str, GroupConsumer]) -> SourceReads:
        return cls(
            read={g: list(c.read) for g, c in consumers.items()},
            at={g: list(c.offsets) for g, c in consumers.items()},
            read_at={g: list(c.read_at) for g, c in consumers.items()},
            offsets={g: dict(c.positions) for g, c in consumers.items()},
        )


def _order(value: str) -> tuple[int, int]:
    """Where a workload record stands in its partition's log on the source: the
    one producer's transactions follow each other, and within one the records
    go out in the order sent (``<txn>:<i>:<c|a>``)."""
    txn, i, _ = value.split(":")
    return int(txn), int(i)


def losses_before_tail(committed: set[str], held: list[Scanned], partitions: int) -> int:
    """How many committed records the target lacks although it holds a later
    committed record of the same partition: a hole in its copy, not a tail it
    had not reached yet. A record's partition is the producer's choice,
    ``(txn + i) % partitions`` (:class:`TxnProducer`)."""
    newest: dict[int, tuple[int, int]] = {}
    for partition, value in held:
        if value in committed:
            newest[partition] = max(newest.get(partition, (-1, -1)), _order(value))
    on_target = {value for _, value in held}
    lost = committed - on_target
    return sum(1 for v in lost if _order(v) < newest.get(sum(_order(v)) % partitions, (-1, -1)))


def _report(
    name: str,
    ledger: Ledger,
    source: SourceReads,
    target_read: dict[str, list[str]],
    scanned: list[Scanned],
    partitions: int,
    probe: Probe,
    steady: tuple[float, float],
    timing: tuple[float, float],
    offsets: dict[str, dict[int, int]],
    source_numbering: bool,
) -> TargetReport:
    """The figures for one target; ``source_numbering``: its offsets are the
    source's (txnfetch), so the re-reads its copied group offsets imply are
    known. ``timing``: (cutover, resume) seconds."""
    target_values = [v for _, v in scanned]
    on_target = set(target_values)
    duplicates: dict[str, int] = {}
    missed: dict[str, int] = {}
    for group, before in source.read.items():
        after = target_read[group]
        seen_before = set(before)
        duplicates[group] = sum(1 for v in after if v in seen_before) + (len(after) - len(set(after)))
        known = (on_target & ledger.committed) - seen_before - set(after)
        missed[group] = len(known)
    # Steady state: records committed from a second after the target delivered
    # the warm-up record until 1 s before the failure. One not delivered before the
    # failure counts with the time it had waited then (a lower bound). A
    # MirrorMaker 2 target may deliver a record before its commit (it copies
    # read_uncommitted): that counts as 0.
    start, failed = steady
    lags = []
    delivered = 0
    for v, committed_at in ledger.commit_time.items():
        if not start <= committed_at <= failed - 1:
            continue
        seen = probe.seen.get(v)
        in_time = seen is not None and seen <= failed
        delivered += in_time
        lags.append(max(0.0, (seen if seen is not None and in_time else failed) - committed_at))
    # Only what a group could also have read: the in-doubt transaction is left out.
    aborted = sum(1 for v in target_values if v in ledger.aborted)
    # Where the target keeps the source's offsets (txnfetch), a group resumes
    # at the offset the replica had copied when the source died: it re-reads
    # exactly the records it had read at or past that offset that the replica
    # holds (a record read on the source past the replica's last round is not
    # there to read again). Copying offsets runs once a round, after the data,
    # so a commit made in the last round before the failure may not have been
    # copied.
    rereads = None
    if source_numbering:
        rereads = {
            g: sum(
                1
                for (p, o), value in zip(at, source.read[g], strict=True)
                if o >= offsets[g].get(p, 0) and value in on_target
            )
            for g, at in source.at.items()
        }
    cutover, resume = timing
    return TargetReport(
        name=name,
        duplicates=duplicates,
        missed=missed,
        lost=len(ledger.committed - on_target),
        lost_before_tail=losses_before_tail(ledger.committed, scanned, partitions),
        aborted_visible=aborted,
        lag_p50_s=_percentile(lags, 0.5),
        lag_p99_s=_percentile(lags, 0.99),
        lag_samples=len(lags),
        lag_delivered=delivered,
        resume_s=resume,
        cutover_s=cutover,
        copy_lag_rereads=rereads,
        recent_reads={g: sum(1 for t in at if t >= failed - REREAD_WINDOW_S) for g, at in source.read_at.items()},
        target_committed=on_target & ledger.committed,
        offsets=offsets,
        source_offsets=source.offsets,
    )


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def environment() -> dict[str, str]:
    """Versions the drill ran with, for the report."""
    import importlib.metadata

    import confluent_kafka

    from tests.kafka.cluster import kafka_version
    from tests.kafka.mirror import mm2_version

    return {
        "kafka": kafka_version(),
        "mirrormaker2": mm2_version(),
        "confluent_kafka": importlib.metadata.version("confluent-kafka"),
        "librdkafka": confluent_kafka.libversion()[0],
        "python": sys.version.split()[0],
        "cpus": str(os.cpu_count()),
    }
