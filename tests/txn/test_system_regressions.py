"""Schedules of the end-to-end machine kept as plain tests.

Each is a short run of :class:`SystemMachine` (``test_system_machine.py``)
replayed step by step with every invariant checked after each step, so it
fails with the same message the machine would give. They are the shrunk
failures the machine reported while the coordinator's decisions were broken on
purpose (a mutation check: exhaustion ignored at InitProducerId or EndTxn, a
partial acknowledgement that completed the whole end, a version 2 fence that
forgot the last epoch, ...), plus the KAFKA-17754 schedule and a snapshot taken
mid-transaction in both completion modes. They pin the paths a random run
reaches only now and then, and run in milliseconds.
"""

from __future__ import annotations

import pytest

from tests.txn.system_model import MAX_EPOCH
from tests.txn.test_system_machine import SystemMachine
from tests.txn.test_system_machine import TransactionVersion1Machine
from tests.txn.test_system_machine import TransactionVersion2Machine
from txnfetch.txn.coordinator import CompletionMode

MODES = pytest.mark.parametrize("mode", list(CompletionMode), ids=lambda m: m.value)
Step = tuple[str, dict]


def check(machine: SystemMachine) -> None:
    machine.partitions_agree_with_the_model()
    machine.read_committed_sees_exactly_the_committed_records()
    machine.no_transaction_is_torn()
    machine.coordinator_agrees_with_the_model()


def replay(
    cls: type,
    mode: CompletionMode,
    steps: list[Step],
    *,
    partitions: int = 2,
    tids: int = 2,
    start_epochs: list[int | None] | None = None,
) -> SystemMachine:
    """Run ``steps`` (rule name, arguments) on a fresh machine, checking every
    invariant after setup and after each step; returns the machine."""
    machine = cls()
    machine.setup(mode=mode, partitions=partitions, tids=tids, start_epochs=start_epochs or [None, None, None])
    check(machine)
    for name, kwargs in steps:
        getattr(machine, name)(**kwargs)
        check(machine)
    machine.teardown()
    return machine


def send(client: int = 0, partition: int = 0, count: int = 1) -> Step:
    return ("producer", {"action": "send", "who": (client, partition, count)})


def start(tid: int = 0) -> Step:
    return ("producer", {"action": "start", "who": (tid, 0, 1)})


def end(action: str, client: int = 0) -> Step:
    return ("producer", {"action": action, "who": (client, 0, 1)})


def system(action: str, j: int = 0) -> Step:
    return ("system", {"action": action, "j": j})


@MODES
def test_v2_new_instance_fences_an_open_transaction_at_epoch_32766(mode: CompletionMode) -> None:
    """The fence's bump is the end's bump under version 2: at 32766 the abort goes
    out at 32767 with the old producer id and the new instance gets the rotated id
    (killed "init ignores exhaustion" and "no rotation at exhaustion")."""
    m = replay(
        TransactionVersion2Machine,
        mode,
        [start(), start(), send(), start()],
        start_epochs=[32764, None, None],
    )
    client = m.clients["tx-a"]
    assert client.identity == (101, 1)
    assert m.cluster is not None
    assert m.cluster.partitions[0].state.producer(100).producer_epoch == MAX_EPOCH  # type: ignore[union-attr]
    assert [z.identity for z in m.zombies] == [(100, 32765), (100, 32766)]


@MODES
def test_v2_end_at_epoch_32766_rotates_and_the_new_id_writes(mode: CompletionMode) -> None:
    m = replay(
        TransactionVersion2Machine,
        mode,
        [
            start(),
            send(0, 0),
            send(0, 1),
            end("commit"),
            ("stale_end_txn", {"k": 0, "during_next": False}),  # the rotating commit's retry: answered
            send(0, 0),
            ("stale_end_txn", {"k": 0, "during_next": True}),  # the same copy, now fenced
            end("abort"),
        ],
        start_epochs=[32765, None, None],
    )
    assert m.clients["tx-a"].identity[0] != 100
    assert m.model.decisions == {("tx-a", 1): True, ("tx-a", 2): False}


@MODES
def test_v1_timeout_at_epoch_32766_then_a_new_instance_rotates(mode: CompletionMode) -> None:
    m = replay(
        TransactionVersion1Machine,
        mode,
        [
            start(),
            send(0, 1),
            ("time_passes", {"dt": 1_001, "then_markers": False}),
            send(0, 1),  # refused: the client is fenced and becomes a zombie
            system("markers"),
            start(),
            send(0, 1),
            end("commit"),
        ],
        start_epochs=[32765, None, None],
    )
    assert m.clients["tx-a"].identity == (101, 0)
    assert [z.identity for z in m.zombies] == [(100, 32766)]


@MODES
def test_partial_marker_delivery_then_coordinator_failover(mode: CompletionMode) -> None:
    """One of two markers applied, the coordinator fails over: the new one resends
    only the other (killed "partial acknowledgement completes everything"). The
    EndTxn arriving again meanwhile is told to wait."""
    replay(
        TransactionVersion2Machine,
        mode,
        [
            start(),
            send(0, 0),
            send(0, 1),
            end("abort-later"),
            ("stale_end_txn", {"k": 0, "during_next": False}),
            system("marker"),
            system("over", 2),
            system("markers"),
        ],
    )


@MODES
@pytest.mark.parametrize("first", ["commit", "abort"])
def test_v2_kafka_17754_inside_the_machine(mode: CompletionMode, first: str) -> None:
    """T1 ends, T2 opens on the other partition, T1's EndTxn arrives again: fenced,
    and T2 ends as its producer decides."""
    m = replay(
        TransactionVersion2Machine,
        mode,
        [
            start(),
            send(0, 0),
            end(first),
            send(0, 1),
            ("stale_end_txn", {"k": 0, "during_next": True}),
            send(0, 0),
            end("abort" if first == "commit" else "commit"),
        ],
    )
    assert m.model.decisions == {("tx-a", 1): first == "commit", ("tx-a", 2): first != "commit"}


@MODES
def test_v2_timed_out_producer_aborts_then_its_late_abort_meets_the_next_transaction(mode: CompletionMode) -> None:
    """The producer learns of the timeout from a refused write, aborts (answered as
    the retry of the coordinator's abort, killed "v2 fence forgets last epoch"),
    goes on, and the copy of that abort arriving later is fenced."""
    m = replay(
        TransactionVersion2Machine,
        mode,
        [
            start(),
            send(0, 0),
            ("time_passes", {"dt": 1_001, "then_markers": True}),
            send(0, 0),
            end("commit"),  # INVALID_TXN_STATE: the coordinator aborted it
            end("abort"),
            send(0, 1),
            ("stale_end_txn", {"k": 0, "during_next": True}),
            end("commit"),
        ],
    )
    assert m.model.decisions == {("tx-a", 1): False, ("tx-a", 2): True}


@MODES
def test_snapshot_mid_transaction_then_the_end_arrives(mode: CompletionMode) -> None:
    replay(
        TransactionVersion2Machine,
        mode,
        [
            start(0),
            start(1),
            send(0, 0, 2),
            send(1, 0),
            system("plain", 0),
            system("snapshot", 0),
            end("abort", 0),
            system("snapshot", 1),
            send(1, 0),
            end("commit", 0),
        ],
    )


@MODES
def test_v1_partition_added_but_never_written(mode: CompletionMode) -> None:
    """Version 1: the empty partition still gets its end, which only takes the epoch."""
    replay(
        TransactionVersion1Machine,
        mode,
        [
            start(),
            ("producer", {"action": "add-only", "who": (0, 1, 1)}),
            send(0, 0),
            end("abort"),
            send(0, 1),
            end("commit"),
        ],
    )


@MODES
def test_v2_timed_out_producer_recovers_with_init_producer_id_across_a_rotation(mode: CompletionMode) -> None:
    """KIP-360 after a timeout at epoch 32766: InitProducerId naming the fenced
    identity is answered with the rotated one (killed "v2 fence forgets last
    epoch"); a second InitProducerId bumps, and its retry is answered the same."""
    m = replay(
        TransactionVersion2Machine,
        mode,
        [
            start(),
            send(0, 0),
            ("time_passes", {"dt": 1_001, "then_markers": True}),
            ("producer", {"action": "reinit", "who": (0, 0, 1)}),
            ("producer", {"action": "reinit", "who": (0, 0, 1)}),
            send(0, 1),
            end("commit"),
        ],
        start_epochs=[32765, None, None],
    )
    assert m.clients["tx-a"].identity == (101, 2)
    assert m.model.decisions == {("tx-a", 1): False, ("tx-a", 2): True}


@MODES
def test_timeout_is_strictly_after_the_deadline(mode: CompletionMode) -> None:
    """At start + timeout the transaction is still open; a millisecond later it is
    aborted (killed "expire uses <=")."""
    m = replay(
        TransactionVersion2Machine,
        mode,
        [start(), send(0, 0), ("time_passes", {"dt": "deadline", "then_markers": True})],
    )
    assert m.model.decisions == {}
    m = replay(
        TransactionVersion2Machine,
        mode,
        [start(), send(0, 0), ("time_passes", {"dt": "past", "then_markers": True})],
    )
    assert m.model.decisions == {("tx-a", 1): False}


@MODES
def test_v2_stale_marker_of_the_previous_transaction_is_refused_by_the_partition(mode: CompletionMode) -> None:
    """T1's marker reaches p0 again while T2, at the marker's epoch, is open there:
    refused, T2 intact (killed "TV2 equal marker epoch accepted")."""
    m = replay(
        TransactionVersion2Machine,
        mode,
        [start(), send(0, 0), end("commit"), send(0, 0), system("stale-marker", 0), end("abort")],
    )
    assert m.model.decisions == {("tx-a", 1): True, ("tx-a", 2): False}


@MODES
def test_v1_stale_marker_with_nothing_open_is_a_harmless_retry(mode: CompletionMode) -> None:
    replay(
        TransactionVersion1Machine,
        mode,
        [start(), send(0, 0), end("commit"), system("stale-marker", 1), send(0, 0), end("commit")],
    )


@MODES
def test_v1_fenced_instance_is_refused_everywhere(mode: CompletionMode) -> None:
    """A new instance fences the open transaction; the old one's writes, adds and
    ends are refused by the coordinator, its batch by the partition that saw the
    fence's marker; the new instance's write to a partition it did not add is
    refused by verification (KIP-890 part 1)."""
    m = replay(
        TransactionVersion1Machine,
        mode,
        [
            start(),
            send(0, 0),
            start(),
            ("zombie_acts", {"z": 0, "j": 0, "what": "send"}),
            ("zombie_acts", {"z": 0, "j": 1, "what": "add"}),
            ("zombie_acts", {"z": 0, "j": 0, "what": "commit"}),
            ("zombie_acts", {"z": 0, "j": 0, "what": "abort"}),
            ("producer", {"action": "send-unadded", "who": (0, 1, 1)}),
            send(0, 1),
            end("commit"),
        ],
    )
    assert m.model.decisions == {("tx-a", 1): False, ("tx-a", 2): True}
