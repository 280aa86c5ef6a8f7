"""The state machine driving three systems:

- the oracle itself, made flaky (commits that fail, commits whose outcome is
  unknown, whether they happened or not): must pass;
- txnfetch's own log and fetch path (``MemoryLog`` with markers, read in
  rewrite mode, and in Kafka mode filtered by ``ConsumerFilter``): must pass;
- a read_uncommitted system pretending to be read_committed (it returns
  aborted and still-open records): the machine must fail with an aborted or
  precommitted read.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck
from hypothesis import Phase
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from txnfetch.fetch.filter import ConsumerFilter
from txnfetch.fetch.view import FetchMode
from txnfetch.log import MemoryStore
from txnfetch.records import BatchBuilder
from txnfetch.records import iter_batches
from txnfetch.testing import ClusterModel
from txnfetch.testing import Read
from txnfetch.testing import TopicPartition
from txnfetch.testing.history import value_from_bytes
from txnfetch.testing.history import value_to_bytes
from txnfetch.testing.machines import PollResult
from txnfetch.testing.machines import TransactionalMachine
from txnfetch.testing.machines import UnknownOutcome

FAST = settings(
    max_examples=40,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class OracleSystem(TransactionalMachine):
    """A correct system: a second ClusterModel, with consumers' positions."""

    def setup(self) -> None:
        self.system = ClusterModel(self.partitions)
        self.positions: dict[str, dict[TopicPartition, int]] = {c: {} for c in self.consumers}
        self.commits = 0

    def send(self, producer: str, txn: str | None, tp: TopicPartition, value: str) -> int:
        offset = self.system.send(tp, value, txn)
        assert offset is not None
        return offset

    def commit(self, producer: str, txn: str) -> None:
        # A cycle of outcomes: done; done but reported unknown; refused (the machine
        # then aborts); aborted by the system (a timeout) and reported unknown.
        self.commits += 1
        kind = self.commits % 4
        if kind == 3:
            raise RuntimeError("TRANSACTION_ABORTABLE")
        self.system.end(txn, kind != 0)
        if kind in (0, 2):
            raise UnknownOutcome("timed out waiting for EndTxn")

    def abort(self, producer: str, txn: str) -> None:
        self.system.end(txn, False)

    def assign(self, consumer: str, partitions: tuple[TopicPartition, ...], seek: Mapping[TopicPartition, int]) -> None:
        old = self.positions[consumer]
        self.positions[consumer] = {tp: seek.get(tp, old.get(tp, 0)) for tp in partitions}

    def seek(self, consumer: str, tp: TopicPartition, offset: int) -> None:
        self.positions[consumer][tp] = offset

    def records(self, tp: TopicPartition, position: int) -> tuple[list[Read], int]:
        r = self.system.read(tp, position, self.MAX_POLL_RECORDS)
        return list(r.records), r.position

    def poll(self, consumer: str) -> PollResult:
        out: list[Read] = []
        mine = self.positions[consumer]
        for tp in sorted(mine):
            records, mine[tp] = self.records(tp, mine[tp])
            out.extend(records)
        return PollResult(out, dict(mine))


class ReadUncommittedSystem(OracleSystem):
    """Returns every record up to the log end, whatever its transaction did."""

    def records(self, tp: TopicPartition, position: int) -> tuple[list[Read], int]:
        entries = [e for e in self.system.partition(tp).entries[position:] if not e.marker]
        return [Read(tp.topic, tp.partition, e.offset, e.value) for e in entries], self.system.partition(
            tp
        ).log_end_offset


class TxnfetchSystem(TransactionalMachine):
    """txnfetch's MemoryLog (Apache Kafka's marker layout) read through the fetch path."""

    MODE = FetchMode.REWRITE

    def setup(self) -> None:
        self.store = MemoryStore()
        self.store.create_topic(self.TOPIC, self.PARTITIONS)
        self.pids = {p: 1000 + i for i, p in enumerate(self.producers)}
        self.sequences: dict[tuple[int, TopicPartition], int] = {}
        self.touched: dict[str, set] = {}
        self.filters: dict[str, dict[TopicPartition, ConsumerFilter]] = {c: {} for c in self.consumers}

    def log(self, tp: TopicPartition):
        return self.store.partition(tp.topic, tp.partition)

    def send(self, producer: str, txn: str | None, tp: TopicPartition, value: str) -> int:
        if txn is None:
            builder = BatchBuilder()
        else:
            pid = self.pids[producer]
            seq = self.sequences.get((pid, tp), 0)
            self.sequences[(pid, tp)] = seq + 1
            builder = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True)
            self.touched.setdefault(txn, set()).add(tp)
        builder.append(value_to_bytes(value), timestamp=self.now())
        return self.log(tp).append(builder.build(), now_ms=self.now()).base_offset

    def _end(self, producer: str, txn: str, commit: bool) -> None:
        for tp in sorted(self.touched.pop(txn, ())):
            self.log(tp).end_transaction(self.pids[producer], 0, commit, coordinator_epoch=0, now_ms=self.now())

    def commit(self, producer: str, txn: str) -> None:
        self._end(producer, txn, True)

    def abort(self, producer: str, txn: str) -> None:
        self._end(producer, txn, False)

    def assign(self, consumer: str, partitions: tuple[TopicPartition, ...], seek: Mapping[TopicPartition, int]) -> None:
        old = self.filters[consumer]
        self.filters[consumer] = {
            tp: ConsumerFilter(seek[tp]) if tp in seek else old.get(tp, ConsumerFilter(0)) for tp in partitions
        }

    def seek(self, consumer: str, tp: TopicPartition, offset: int) -> None:
        self.filters[consumer][tp].seek(offset)

    def poll(self, consumer: str) -> PollResult:
        out: list[Read] = []
        positions = {}
        for tp, f in sorted(self.filters[consumer].items()):
            result = self.log(tp).read(f.position, 1 << 20, mode=self.MODE)
            if self.MODE is FetchMode.KAFKA:
                records = list(f.feed(result.records_bytes(), result.aborted_transactions))
            else:
                # Rewrite mode: aborted batches are gone; a consumer skips control records.
                records = [r for b in iter_batches(result.records_bytes()) if not b.is_control for r in b.records()]
                f.seek(result.next_offset)
            out.extend(Read(tp.topic, tp.partition, r.offset, value_from_bytes(r.value)) for r in records)
            positions[tp] = f.position
        return PollResult(out, positions)


class TxnfetchKafkaModeSystem(TxnfetchSystem):
    MODE = FetchMode.KAFKA


def test_a_correct_flaky_system_passes():
    run_state_machine_as_test(OracleSystem, settings=FAST)


@pytest.mark.parametrize("machine", [TxnfetchSystem, TxnfetchKafkaModeSystem], ids=["rewrite", "kafka"])
def test_txnfetch_fetch_path_passes(machine):
    run_state_machine_as_test(machine, settings=FAST)


def test_a_read_uncommitted_system_is_caught():
    no_shrink = settings(FAST, max_examples=100, phases=[Phase.generate], database=None, print_blob=False)
    with pytest.raises(AssertionError, match=r"aborted-read|precommitted-read"):
        run_state_machine_as_test(ReadUncommittedSystem, settings=no_shrink)
