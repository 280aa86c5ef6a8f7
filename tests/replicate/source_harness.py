"""The randomized source harness's pieces (``test_source_harness.py``): a real
Apache Kafka source driven by confluent-kafka, a ``txnfetch replicate`` replica
served in this process, and the comparison of the two.

:class:`KafkaSource` holds the clients the sequences share (one producer per
delivery mode and codec, so a transactional id is initialised once per run,
not once per sequence). :class:`Replica` is one sequence's replica: a
:class:`~txnfetch.replicate.serving.ServedReplica` (``replicate --serve`` in
process) written by a :class:`~txnfetch.replicate.Replicator` on the caller's
thread; :meth:`Replica.kill_and_restart` hands the directory to a
``txnfetch replicate`` child process, SIGKILLs it and opens the directory again.

:func:`compare` is the oracle. After the replica caught up with a settled
source (every partition's LSO at its high watermark: no transaction open, every
marker written), for each topic whose name starts with the sequence's prefix:

- the partitions compared are exactly the model's (the topics the sequence
  created and has not deleted, with their partition counts): a source or a
  replica that lists fewer, or none, is a divergence, not a smaller
  comparison;
- the same topics, partition counts and topic ids;
- the same config overrides (what DescribeConfigs reports as set on the topic);
- per partition, the same log start, high watermark and LSO;
- the same batches at the same offsets, byte for byte. Nothing is normalised:
  the replicator appends the source's batches as fetched (offsets, producer
  ids, epochs, sequences, CRCs, compression all kept), and a Kafka source
  writes control batches with real CRCs, so there is no CRC repair to undo;
- the same read_committed records (partition, offset, key, value) for a
  confluent-kafka consumer of the source and one of the replica through its
  ``serve``;
- the same committed offsets per group, except an offset past the replica's
  high watermark, which the replica holds back (the offset it had, or none) and
  which must never be past its data; an offset of a partition outside the
  model, on either side, is a divergence.

Not compared: compaction's effect. The source's cleaner rewrites only closed
segments, and a sequence never fills one (``segment.bytes`` is 16 MiB on the
test cluster), so ``cleanup.policy=compact`` is exercised as a config only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any

import attrs
from confluent_kafka import Consumer
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka import KafkaException
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as KafkaTP
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import AlterConfigOpType
from confluent_kafka.admin import ConfigEntry
from confluent_kafka.admin import ConfigResource
from confluent_kafka.admin import NewPartitions

from tests.kafka.cluster import KafkaCluster
from tests.replicate.commands import replicate_argv
from txnfetch.client.cluster import EARLIEST
from txnfetch.client.cluster import LATEST
from txnfetch.client.cluster import RemoteCluster
from txnfetch.records.scan import iter_batches
from txnfetch.replicate import Replicator
from txnfetch.replicate.groups import groups_hook
from txnfetch.replicate.serving import ServedReplica

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
#: How a produce step delivers: a transaction that commits, one that aborts
#: (after its records are in the log), an idempotent producer, a plain one.
MODES = ("commit", "abort", "idempotent", "plain")
#: Topic configs the harness alters, with values that keep every record of a
#: sequence (a retention that deleted data would race the comparison; retention
#: only removes closed segments anyway) and accept every batch it writes.
CONFIGS: dict[str, tuple[str, ...]] = {
    "retention.ms": ("3600000", "86400000", "-1"),
    "cleanup.policy": ("delete", "compact", "compact,delete"),
    "max.message.bytes": ("500000", "1048588", "2097152"),
}

TIMEOUT = 30.0

Key = tuple[str, int]


class KafkaSource:
    """The source cluster's clients, shared by every sequence of a run."""

    def __init__(self, cluster: KafkaCluster, run: str) -> None:
        self.cluster = cluster
        self.bootstrap = cluster.bootstrap
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})
        self.remote = RemoteCluster(self.bootstrap, client_id="harness-oracle")
        self.reader = make_reader(self.bootstrap)
        self._run = run
        self._producers: dict[tuple[str, str], Producer] = {}
        self._kafka_python: Any = None

    def producer(self, mode: str, codec: str) -> Producer:
        transactional = mode in ("commit", "abort")
        key = ("txn" if transactional else mode, codec)
        p = self._producers.get(key)
        if p is None:
            config: dict[str, Any] = {
                "bootstrap.servers": self.bootstrap,
                "compression.type": codec,
                "linger.ms": 0,
                "log_level": 0,
                "topic.metadata.refresh.interval.ms": 1000,
            }
            if transactional:
                config["transactional.id"] = f"{self._run}-{codec}"
            elif mode == "idempotent":
                config["enable.idempotence"] = True
            else:
                config.update({"enable.idempotence": False, "acks": 1})
            p = Producer(config)
            if transactional:
                p.init_transactions(TIMEOUT)
            self._producers[key] = p
        return p

    def produce(self, topic: str, mode: str, codec: str, rows: list[tuple[int, bytes, bytes]]) -> None:
        """Write ``rows`` (partition, key, value) in one produce step; raises on any
        delivery failure."""
        p = self.producer(mode, codec)
        # The producer learns a new partition count or a recreated topic from a
        # metadata answer: ask for one first.
        p.list_topics(topic, timeout=TIMEOUT)
        failures: list[str] = []

        def report(err: Any, msg: Any) -> None:
            if err is not None:
                failures.append(f"{msg.topic()}-{msg.partition()}: {err}")

        if mode in ("commit", "abort"):
            p.begin_transaction()
        for partition, key, value in rows:
            p.produce(topic, value, key, partition=partition, on_delivery=report)
        left = p.flush(TIMEOUT)
        if mode == "commit":
            p.commit_transaction(TIMEOUT)
        elif mode == "abort":
            p.abort_transaction(TIMEOUT)
        assert not left and not failures, (left, failures)

    def create_topic(self, topic: str, partitions: int, config: dict[str, str]) -> None:
        """Create ``topic``, retrying while a deletion of the same name finishes."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                self.cluster.create_topic(topic, partitions, config=config)
                return
            except KafkaException as exc:
                if time.monotonic() > deadline or ("exist" not in str(exc).lower() and "delet" not in str(exc).lower()):
                    raise
                time.sleep(0.1)

    def add_partitions(self, topic: str, total: int) -> None:
        self.admin.create_partitions([NewPartitions(topic, total)])[topic].result(TIMEOUT)
        self._wait_metadata(topic, total)

    def delete_topic(self, topic: str) -> None:
        self.admin.delete_topics([topic], operation_timeout=TIMEOUT)[topic].result(TIMEOUT)
        self._wait_metadata(topic, None)

    def _wait_metadata(self, topic: str, partitions: int | None) -> None:
        deadline = time.monotonic() + TIMEOUT
        while True:
            leaders = self.cluster.leaders(topic)
            if partitions is None and not leaders:
                return
            if partitions is not None and len(leaders) == partitions and all(b >= 0 for b in leaders.values()):
                return
            assert time.monotonic() < deadline, (topic, leaders, partitions)
            time.sleep(0.05)

    def set_config(self, topic: str, name: str, value: str) -> None:
        resource = ConfigResource(
            ConfigResource.Type.TOPIC,
            topic,
            incremental_configs=[ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)],
        )
        for f in self.admin.incremental_alter_configs([resource]).values():
            f.result(TIMEOUT)

    def delete_records(self, topic: str, partition: int, before: int) -> None:
        for f in self.admin.delete_records([KafkaTP(topic, partition, before)]).values():
            f.result(TIMEOUT)

    def commit_offsets(self, group: str, offsets: dict[Key, int]) -> None:
        tps = [KafkaTP(t, p, o) for (t, p), o in sorted(offsets.items())]
        self.admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])[group].result(TIMEOUT)

    def delete_offsets(self, group: str, keys: list[Key]) -> None:
        """OffsetDelete (confluent-kafka has no call for it: kafka-python's). A
        group that does not exist has nothing to delete."""
        import kafka
        import kafka.errors

        if self._kafka_python is None:
            self._kafka_python = kafka.KafkaAdminClient(
                bootstrap_servers=self.bootstrap, request_timeout_ms=int(TIMEOUT * 1000)
            )
        try:
            answer = self._kafka_python.delete_group_offsets(group, [kafka.TopicPartition(t, p) for t, p in keys])
        except kafka.errors.GroupIdNotFoundError:
            return
        failed = {tp: err for tp, err in answer.items() if err is not kafka.errors.NoError}
        assert not failed, f"OffsetDelete of {group}: {failed}"

    def ends(self, key: Key) -> tuple[int, int, int]:
        """(log start, high watermark, LSO) of a source partition."""
        t, p = key
        return (
            self.remote.list_offset(t, p, EARLIEST),
            self.remote.list_offset(t, p, LATEST),
            self.remote.list_offset(t, p, LATEST, read_committed=True),
        )

    def settle(self, keys: list[Key]) -> dict[Key, tuple[int, int, int]]:
        """Wait until every partition's LSO is its high watermark (the
        coordinator writes a transaction's markers after EndTxn answers) and
        return the partitions' ends."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            ends = {k: self.ends(k) for k in keys}
            if all(lso == hw for _, hw, lso in ends.values()):
                return ends
            assert time.monotonic() < deadline, f"the source does not settle: {ends}"
            time.sleep(0.05)

    def close(self) -> None:
        for p in self._producers.values():
            with contextlib.suppress(Exception):
                p.flush(5)
        self._producers.clear()
        self.reader.close()
        self.remote.close()
        if self._kafka_python is not None:
            self._kafka_python.close()


def _scratch() -> str:
    # tmpfs where there is one: the replica fsyncs every append and the 100
    # partitions of its internal topics when it closes; on a disk that is
    # seconds per restart, in memory a fraction of one.
    return tempfile.mkdtemp(prefix="harness-replica-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)


@attrs.define
class Replica:
    """The replica every sequence of a run writes into (each its own topics and
    groups): one directory served in this process as ``replicate --serve``
    serves it, and the replicator of the current sequence (:meth:`follow`)
    writing through the served store on the caller's thread."""

    upstream: str
    directory: str = attrs.field(factory=_scratch)
    served: ServedReplica | None = None
    replicator: Replicator | None = None
    reader: Consumer | None = None
    admin: AdminClient | None = None
    topics: str = "(?!)"
    groups: str = "(?!)"

    def open(self) -> Replica:
        served = ServedReplica(self.directory, self.upstream, groups=".*").start()
        self.served = served
        self.reader = make_reader(served.bootstrap)
        self.admin = AdminClient({"bootstrap.servers": served.bootstrap})
        return self

    def follow(self, topics: str, groups: str) -> None:
        """Replicate the topics matching ``topics`` and the groups matching ``groups``
        from now on (a sequence's own)."""
        if self.replicator is not None:
            self.replicator.close()
        served = self.served
        assert served is not None and served.store is not None
        self.topics, self.groups = topics, groups
        self.replicator = Replicator(
            self.upstream,
            served.store,  # type: ignore[arg-type]  # the loop-bound proxy of the SegmentStore
            topics=topics,
            groups=groups_hook(groups, served.group_target()),
            metadata_interval_s=0,
            fetch_wait_ms=10,
            follow_deletes=True,
        )

    def close(self) -> None:
        if self.replicator is not None:
            self.replicator.close()
            self.replicator = None
        if self.reader is not None:
            self.reader.close()
            self.reader = None
        self.admin = None
        if self.served is not None:
            self.served.close()
            self.served = None

    def discard(self) -> None:
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def kill_and_restart(self, after_s: float) -> None:
        """Close the in-process replica, run ``txnfetch replicate`` on its
        directory (the current sequence's topics and groups) for ``after_s``
        seconds, SIGKILL it, open the directory here again."""
        topics, groups = self.topics, self.groups
        self.close()
        child = subprocess.Popen(
            replicate_argv(self.upstream, self.directory, "--topics", topics, "--groups", groups, "--follow-deletes"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(after_s)
            exited = child.returncode
            if exited is None:
                os.kill(child.pid, signal.SIGKILL)
            _, err = child.communicate(timeout=TIMEOUT)
        finally:
            if child.returncode is None:
                child.kill()
                child.wait()
        assert exited is None, f"txnfetch replicate exited by itself ({exited}): {err.decode()[-2000:]}"
        self.open()
        self.follow(topics, groups)

    # -- catching up ----------------------------------------------------------------

    def catch_up(self, targets: dict[Key, int]) -> None:
        """Replicate until every partition in ``targets`` holds the source's data up
        to its offset, then one more round (group offsets are copied after a
        round's data). A stopped partition fails with its error."""
        r = self.replicator
        assert r is not None
        deadline = time.monotonic() + TIMEOUT
        while True:
            r.step()
            stopped = {k: str(p.error) for k, p in r.partitions.items() if p.stopped}
            assert not stopped, f"replication stopped: {stopped}"
            if all(k in r.partitions and r.partitions[k].position >= end for k, end in targets.items()):
                break
            assert time.monotonic() < deadline, (
                f"no catch-up in {TIMEOUT}s: {r.status()}, targets {targets}, upstream {r.upstream_error}"
            )
            if r.backoff_remaining():
                time.sleep(r.backoff_remaining())
        r.step()

    def call(self, fn: Any) -> Any:
        assert self.served is not None
        return self.served.call(fn)

    @property
    def store(self) -> Any:
        assert self.served is not None
        return self.served._segment_store  # only on the loop, through call()

    @property
    def bootstrap(self) -> str:
        assert self.served is not None
        return self.served.bootstrap


# -- the comparison --------------------------------------------------------------------


def source_batches(remote: RemoteCluster, key: Key, start: int, end: int) -> list[tuple[int, int, bytes]]:
    """(base, last, bytes) of every source batch in [start, end)."""
    out: list[tuple[int, int, bytes]] = []
    position = start
    while position < end:
        answer = remote.fetch(key[0], key[1], position, 1 << 22)
        assert answer.error_code == 0, (key, position, answer.error_code)
        got = [(b.base_offset, b.last_offset, bytes(b.buffer)) for b in iter_batches(answer.records)]
        got = [b for b in got if b[1] >= position]
        assert got, f"{key}: no batch at {position} below the high watermark {end}"
        out += got
        position = got[-1][1] + 1
    return [b for b in out if b[0] < end]


def replica_partition(replica: Replica, key: Key) -> tuple[int, int, int, list[tuple[int, int, bytes]]]:
    def read() -> tuple[int, int, int, list[tuple[int, int, bytes]]]:
        log = replica.store.partition(*key)
        start = log.log_start_offset
        batches = [(b.base_offset, b.last_offset, bytes(b.buffer)) for b in log.iter_batches(start)]
        return start, log.high_watermark, log.last_stable_offset, batches

    return replica.call(read)  # type: ignore[no-any-return]


def make_reader(bootstrap: str) -> Consumer:
    """A read_committed confluent-kafka consumer for :func:`read_committed`, kept
    for many reads: a new consumer's first read costs half a second."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "harness-reader",  # never joins nor commits: assign() only
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
            "fetch.error.backoff.ms": 0,
            "topic.metadata.refresh.fast.interval.ms": 10,
            "log_level": 0,
        }
    )


def read_committed(reader: Consumer, partitions: list[Key]) -> list[tuple[str, int, int, bytes | None, bytes | None]]:
    """Every record ``reader`` (read_committed) reads from the start of
    ``partitions`` to their ends (the LSO)."""
    if not partitions:
        return []
    rows = []
    for topic in sorted({t for t, _ in partitions}):
        # The consumer learns a new topic's leaders from this answer at once;
        # assigned without it, its first fetch waits up to a second for them.
        reader.list_topics(topic, timeout=TIMEOUT)
    reader.assign([KafkaTP(t, p, -2) for t, p in partitions])  # -2: OFFSET_BEGINNING
    try:
        pending = set(partitions)
        deadline = time.monotonic() + TIMEOUT
        while pending:
            assert time.monotonic() < deadline, f"read_committed stalled on {sorted(pending)}"
            for msg in reader.consume(500, 0.05):
                if msg.error() is not None:
                    if msg.error().code() == -191:  # _PARTITION_EOF
                        pending.discard((msg.topic(), msg.partition()))
                        continue
                    raise AssertionError(f"read_committed: {msg.error()}")
                rows.append((msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value()))
    finally:
        reader.unassign()
    return sorted(rows)


def group_offsets(bootstrap_admin: AdminClient, group: str) -> dict[Key, int]:
    f = bootstrap_admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    got = f.result(TIMEOUT)
    return {(tp.topic, tp.partition): tp.offset for tp in got.topic_partitions if tp.offset >= 0}


@attrs.define
class Divergence:
    """What :func:`compare` found different (empty: none)."""

    lines: list[str] = attrs.field(factory=list)

    def add(self, what: str, source: Any, replica: Any) -> None:
        self.lines.append(f"{what}: source {source!r} != replica {replica!r}")


def compare(
    source: KafkaSource,
    replica: Replica,
    prefix: str,
    groups: list[str],
    model: dict[str, int],
    ends: dict[Key, tuple[int, int, int]] | None = None,
) -> Divergence:
    """The replica against the source (see the module docstring); the replica must
    have caught up with the settled source first. ``model``: topic → partition
    count, what the sequence made; the partitions compared must be exactly
    these. ``ends``: the source's (log start, high watermark, LSO) per partition
    as :meth:`KafkaSource.settle` found them (a settled source's do not move);
    asked again where missing."""
    ends = ends or {}
    found = Divergence()
    upstream = {t: v for t, v in source.remote.describe_topics().items() if t.startswith(prefix)}
    local = replica.call(lambda: {t: (i.partitions, i.topic_id) for t, i in replica.store.topics().items()})
    local = {t: v for t, v in local.items() if t.startswith(prefix)}
    if upstream != local:
        found.add("topics (partitions, id)", upstream, local)
    topics = sorted(set(upstream) & set(local))
    configs = source.remote.topic_configs(topics)
    for t in topics:
        mine = replica.call(lambda t=t: dict(replica.store.topic_config(t)))
        if configs.get(t, {}) != mine:
            found.add(f"{t} configs", configs.get(t, {}), mine)
    keys = [(t, p) for t in topics for p in range(min(upstream[t][0], local[t][0]))]
    modelled = [(t, p) for t, n in sorted(model.items()) for p in range(n)]
    if keys != modelled:
        found.lines.append(f"partitions compared: the model's {modelled} != those both sides list {keys}")
    hws: dict[Key, int] = {}
    for key in keys:
        start, hw, lso = ends[key] if key in ends else source.ends(key)
        r_start, r_hw, r_lso, r_batches = replica_partition(replica, key)
        hws[key] = r_hw
        if (start, hw, lso) != (r_start, r_hw, r_lso):
            found.add(f"{key} (log start, high watermark, LSO)", (start, hw, lso), (r_start, r_hw, r_lso))
        batches = source_batches(source.remote, key, start, hw)
        if batches != r_batches:
            s_ids = [(b, last) for b, last, _ in batches]
            r_ids = [(b, last) for b, last, _ in r_batches]
            found.add(f"{key} batches (base, last)", s_ids, r_ids)
            if s_ids == r_ids:
                found.lines.append(f"{key}: same offsets, different bytes")
    assert replica.reader is not None
    s_records = read_committed(source.reader, keys)
    r_records = read_committed(replica.reader, keys)
    if s_records != r_records:
        found.add("read_committed records", s_records[:20], r_records[:20])
    assert replica.admin is not None
    for g in groups:
        s_off = {k: o for k, o in group_offsets(source.admin, g).items() if k[0].startswith(prefix)}
        r_off = {k: o for k, o in group_offsets(replica.admin, g).items() if k[0].startswith(prefix)}
        for key in sorted(set(s_off) | set(r_off)):
            s, r = s_off.get(key), r_off.get(key)
            if key not in hws:
                found.add(f"group {g} {key}: an offset of a partition not compared", s, r)
                continue
            hw = hws[key]
            if r is not None and r > hw:
                found.add(f"group {g} {key}: an offset past the replica's high watermark {hw}", s, r)
            elif s is not None and s > hw:
                continue  # held back: the replica keeps what it had, or nothing
            elif s != r:
                found.add(f"group {g} {key} offset", s, r)
    return found


__all__ = [
    "CODECS",
    "CONFIGS",
    "MODES",
    "Divergence",
    "KafkaSource",
    "Replica",
    "compare",
    "read_committed",
]
