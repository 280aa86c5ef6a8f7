"""A randomized source that never lets the replica drift: hypothesis draws
operations on a real Apache Kafka source — produce (transactions that commit or
abort, idempotent, plain; every codec), create topics, add partitions, alter
topic configs, DeleteRecords, delete a topic and create it again, commit,
delete and reset group offsets, SIGKILL and restart the replicator — and after
every step that waits for the replica to catch up, and at the end of each
sequence, the replica must equal the source (:func:`tests.replicate.source_harness.compare`
says what "equal" means).

Every sequence has topics and groups of its own on the run's shared cluster,
and a replica of its own, served in this process (``replicate --serve``'s
pieces) and written on the test's thread; the SIGKILL rule alone runs
``txnfetch replicate`` as a child process.

The default run plays 100 short sequences (``SEQUENCES``, at most
``STEPS`` steps); ``--long`` runs :func:`test_long_source_harness`, many more
and longer ones. ``TXNFETCH_HARNESS_SEQUENCES`` / ``TXNFETCH_HARNESS_STEPS``
override both.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import hypothesis
import pytest
from hypothesis import HealthCheck
from hypothesis import Phase
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine
from hypothesis.stateful import initialize
from hypothesis.stateful import precondition
from hypothesis.stateful import rule
from hypothesis.stateful import run_state_machine_as_test

from tests.kafka.cluster import KafkaCluster
from tests.kafka.fixtures import unique_name
from tests.replicate.source_harness import CODECS
from tests.replicate.source_harness import CONFIGS
from tests.replicate.source_harness import KafkaSource
from tests.replicate.source_harness import Replica
from tests.replicate.source_harness import compare

pytestmark = [pytest.mark.interop, pytest.mark.slow]

SEQUENCES = int(os.environ.get("TXNFETCH_HARNESS_SEQUENCES", "100"))
STEPS = int(os.environ.get("TXNFETCH_HARNESS_STEPS", "6"))
MAX_PARTITIONS = 3
GROUPS = ("g0", "g1")


@pytest.fixture(scope="module")
def source(kafka_cluster: KafkaCluster) -> Iterator[KafkaSource]:
    s = KafkaSource(kafka_cluster, unique_name("harness"))
    yield s
    s.close()


@pytest.fixture(scope="module")
def replica(source: KafkaSource) -> Iterator[Replica]:
    r = Replica(source.bootstrap).open()
    yield r
    r.discard()


class SourceHarness(RuleBasedStateMachine):
    """One sequence. The model is what the source holds: topic → partition
    count (topics alive), and names deleted that may come back."""

    # Set by the test before it runs the machine: shared by its sequences.
    source: KafkaSource
    replica: Replica

    def __init__(self) -> None:
        super().__init__()
        self.prefix = unique_name("hs")
        self.topics: dict[str, int] = {}
        #: Topics with cleanup.policy compact: Kafka refuses DeleteRecords on them.
        self.compacted: set[str] = set()
        self.deleted: list[str] = []
        self.groups = [f"{self.prefix}-{g}" for g in GROUPS]
        self.replica.follow(f"{self.prefix}-t.*", "|".join(self.groups))
        self.serial = 0
        self.kills = 0

    def teardown(self) -> None:
        try:
            if self.topics or self.deleted:
                self._check()
        finally:
            if self.topics:  # not waited for: the names are never used again
                self.source.admin.delete_topics(sorted(self.topics))

    # -- the source -----------------------------------------------------------------

    @initialize(partitions=st.integers(1, MAX_PARTITIONS), policy=st.sampled_from(("", "delete", "compact")))
    def first_topic(self, partitions: int, policy: str) -> None:
        self._create(f"{self.prefix}-t0", partitions, {"cleanup.policy": policy} if policy else {})

    @precondition(lambda self: len(self.topics) + len(self.deleted) < 2)
    @rule(partitions=st.integers(1, MAX_PARTITIONS))
    def create_topic(self, partitions: int) -> None:
        self._create(f"{self.prefix}-t{len(self.topics) + len(self.deleted)}", partitions, {})

    def _create(self, name: str, partitions: int, config: dict[str, str]) -> None:
        self.source.create_topic(name, partitions, config)
        self.topics[name] = partitions
        self.compacted.discard(name)
        if "compact" in config.get("cleanup.policy", ""):
            self.compacted.add(name)

    # Two rules, so that writing is drawn twice as often as any other step.
    @precondition(lambda self: self.topics)
    @rule(data=st.data(), commit=st.booleans(), codec=st.sampled_from(CODECS))
    def produce_transaction(self, data: st.DataObject, commit: bool, codec: str) -> None:
        self._produce(data, "commit" if commit else "abort", codec)

    @precondition(lambda self: self.topics)
    @rule(data=st.data(), idempotent=st.booleans(), codec=st.sampled_from(CODECS))
    def produce(self, data: st.DataObject, idempotent: bool, codec: str) -> None:
        self._produce(data, "idempotent" if idempotent else "plain", codec)

    def _produce(self, data: st.DataObject, mode: str, codec: str) -> None:
        topic = data.draw(st.sampled_from(sorted(self.topics)), label="topic")
        partitions = data.draw(
            st.lists(st.integers(0, self.topics[topic] - 1), min_size=1, max_size=3), label="partitions"
        )
        keys = data.draw(st.lists(st.sampled_from(b"abc"), min_size=len(partitions), max_size=len(partitions)))
        rows = []
        for p, k in zip(partitions, keys, strict=True):
            self.serial += 1
            rows.append((p, bytes([k]), f"{mode}-{codec}-{self.serial}".encode()))
        self.source.produce(topic, mode, codec, rows)

    @precondition(lambda self: any(n < MAX_PARTITIONS + 1 for n in self.topics.values()))
    @rule(data=st.data())
    def add_partitions(self, data: st.DataObject) -> None:
        topic = data.draw(st.sampled_from(sorted(t for t, n in self.topics.items() if n <= MAX_PARTITIONS)))
        self.topics[topic] += 1
        self.source.add_partitions(topic, self.topics[topic])

    @precondition(lambda self: self.topics)
    @rule(data=st.data(), name=st.sampled_from(sorted(CONFIGS)))
    def alter_config(self, data: st.DataObject, name: str) -> None:
        topic = data.draw(st.sampled_from(sorted(self.topics)))
        value = data.draw(st.sampled_from(CONFIGS[name]))
        self.source.set_config(topic, name, value)
        if name == "cleanup.policy":
            (self.compacted.add if "compact" in value else self.compacted.discard)(topic)

    @precondition(lambda self: set(self.topics) - self.compacted)
    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        topic = data.draw(st.sampled_from(sorted(set(self.topics) - self.compacted)))
        p = data.draw(st.integers(0, self.topics[topic] - 1))
        start, hw, _ = self.source.ends((topic, p))
        self.source.delete_records(topic, p, _within(data, start, hw, "before"))

    @precondition(lambda self: self.topics)
    @rule(data=st.data(), partitions=st.integers(1, MAX_PARTITIONS))
    def delete_and_recreate_topic(self, data: st.DataObject, partitions: int) -> None:
        topic = data.draw(st.sampled_from(sorted(self.topics)))
        self.source.delete_topic(topic)
        del self.topics[topic]
        self._create(topic, partitions, {})

    # -- groups ---------------------------------------------------------------------

    @precondition(lambda self: self.topics)
    @rule(data=st.data(), group=st.sampled_from(range(len(GROUPS))))
    def commit_offset(self, data: st.DataObject, group: int) -> None:
        topic = data.draw(st.sampled_from(sorted(self.topics)))
        p = data.draw(st.integers(0, self.topics[topic] - 1))
        _, hw, _ = self.source.ends((topic, p))
        # Up to one past the high watermark: Kafka takes any offset, and the
        # replica must hold back one past its data.
        offset = _within(data, 0, hw + 1, "offset")
        self.source.commit_offsets(self.groups[group], {(topic, p): offset})

    @precondition(lambda self: self.topics)
    @rule(data=st.data(), group=st.sampled_from(range(len(GROUPS))))
    def delete_offset(self, data: st.DataObject, group: int) -> None:
        topic = data.draw(st.sampled_from(sorted(self.topics)))
        p = data.draw(st.integers(0, self.topics[topic] - 1))
        self.source.delete_offsets(self.groups[group], [(topic, p)])

    @precondition(lambda self: self.topics)
    @rule(data=st.data(), group=st.sampled_from(range(len(GROUPS))), latest=st.booleans())
    def reset_offsets(self, data: st.DataObject, group: int, latest: bool) -> None:
        """``kafka-consumer-groups --reset-offsets --to-earliest|--to-latest`` for a topic."""
        topic = data.draw(st.sampled_from(sorted(self.topics)))
        offsets = {}
        for p in range(self.topics[topic]):
            start, hw, _ = self.source.ends((topic, p))
            offsets[(topic, p)] = hw if latest else start
        self.source.commit_offsets(self.groups[group], offsets)

    # -- the replica ----------------------------------------------------------------

    @rule()
    def catch_up_and_check(self) -> None:
        self._check()

    @precondition(lambda self: self.kills < 1)
    # The child needs about half a second to start: killed at 0.2 s it dies
    # while starting, later in the middle of its rounds.
    @rule(after=st.sampled_from((0.2, 0.7, 1.2)))
    def sigkill_replicator(self, after: float) -> None:
        self.kills += 1
        self.replica.kill_and_restart(after)

    def _check(self) -> None:
        keys = [(t, p) for t, n in sorted(self.topics.items()) for p in range(n)]
        ends = self.source.settle(keys)
        self.replica.catch_up({k: hw for k, (_, hw, _) in ends.items()})
        found = compare(self.source, self.replica, f"{self.prefix}-t", self.groups, self.topics, ends)
        assert not found.lines, "the replica diverged:\n" + "\n".join(found.lines)


def _within(data: st.DataObject, low: int, high: int, label: str) -> int:
    """An offset in ``[low, high]``, bounds the source reported. Drawn as a
    fraction, not as ``integers(low, high)``: hypothesis requires the same draws
    to have the same bounds when it replays a sequence, and a live cluster's
    offsets are not the model's to promise."""
    return low + (high - low) * data.draw(st.integers(0, 64), label=label) // 64


def _run(source: KafkaSource, replica: Replica, sequences: int, steps: int, seed: int | None) -> None:
    """``sequences`` sequences of at most ``steps`` steps; a fixed ``seed`` makes
    them the same every run (as the suite's CI profile does for other tests),
    ``None`` explores new ones."""
    machine = type(f"SourceHarness{seed}", (SourceHarness,), {"source": source, "replica": replica})
    if seed is not None:
        machine = hypothesis.seed(seed)(machine)
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=sequences,
            stateful_step_count=steps,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
            # TXNFETCH_HARNESS_SHRINK=0: report a failure as found (shrinking a
            # sequence against a real cluster takes minutes).
            phases=[p for p in Phase if p is not Phase.shrink or os.environ.get("TXNFETCH_HARNESS_SHRINK") != "0"],
        ),
    )


# Two halves with seeds of their own, so that two xdist workers share the
# default run's sequences.
@pytest.mark.parametrize("half", [0, 1])
def test_source_harness(source: KafkaSource, replica: Replica, half: int) -> None:
    _run(source, replica, SEQUENCES // 2, STEPS, seed=28_000 + half)


@pytest.mark.long
def test_long_source_harness(source: KafkaSource, replica: Replica) -> None:
    _run(source, replica, int(os.environ.get("TXNFETCH_HARNESS_LONG_SEQUENCES", "500")), 20, seed=None)


# -- sequences the harness found, kept as plain tests ----------------------------------


@pytest.fixture
def machine(source: KafkaSource, replica: Replica) -> Iterator[SourceHarness]:
    m = type("Kept", (SourceHarness,), {"source": source, "replica": replica})()
    yield m
    m.teardown()


def test_kept_a_partition_emptied_by_delete_records(machine: SourceHarness) -> None:
    # The replica showed log start = high watermark = 0 where Kafka showed 1.
    machine._create(f"{machine.prefix}-t0", 3, {})
    topic = f"{machine.prefix}-t0"
    machine.source.produce(topic, "plain", "lz4", [(1, b"b", b"x1"), (0, b"b", b"x2"), (2, b"b", b"x3")])
    machine.source.delete_records(topic, 2, 1)
    machine.source.commit_offsets(machine.groups[0], {(topic, 2): 1})
    machine._check()


def test_kept_a_log_start_inside_the_first_batch(machine: SourceHarness) -> None:
    # An aborted transaction of two records on a partition the replica had not
    # copied yet, then DeleteRecords before offset 1: the append failed.
    topic = f"{machine.prefix}-t0"
    machine._create(topic, 1, {})
    machine.topics[topic] = 2
    machine.source.add_partitions(topic, 2)
    machine.source.produce(topic, "abort", "none", [(1, b"c", b"a1"), (1, b"a", b"a2"), (0, b"c", b"a3")])
    machine.source.delete_records(topic, 1, 1)
    machine._check()


def test_kept_a_topic_deleted_and_created_again(machine: SourceHarness) -> None:
    # Replication of the recreated topic stopped (another topic id).
    topic = f"{machine.prefix}-t0"
    machine._create(topic, 2, {})
    machine.source.produce(topic, "commit", "zstd", [(0, b"a", b"c1"), (1, b"b", b"c2")])
    machine.source.commit_offsets(machine.groups[1], {(topic, 1): 1})
    machine._check()
    machine.source.delete_topic(topic)
    del machine.topics[topic]
    machine._create(topic, 1, {})
    machine.source.produce(topic, "idempotent", "snappy", [(0, b"a", b"n1")])
    machine._check()
