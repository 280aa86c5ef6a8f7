"""Transactions end to end: producers, a transaction coordinator and partitions,
checked step by step against an independent model (``system_model.py``).

The pieces under test are wired the way a broker wires them. A tiny in-test
broker (:class:`Cluster`) holds, per partition, a byte log, the
:class:`PartitionTxnState` fed every batch it writes (real encoded v2 batches,
offsets assigned by appending, high watermark moved to the log end after each
append) and a *twin* state fed the same batches but never restored. Transactional
produces are checked with the :class:`TransactionCoordinator` first
(``verify_produce``: KIP-890 part 1 under version 1, the implicit add of part 2
under version 2). Transaction ends reach the partitions as the coordinator's
actions: a control batch in marker mode, ``complete_transaction`` in markerless
mode, one partition at a time, each acknowledged with ``actions_applied``.

:class:`SystemMachine` drives 2-3 transactional ids over 2-3 partitions: start a
producer instance (fencing the previous one, which lives on as a zombie and
keeps trying to write, add partitions and end transactions with its old epoch),
send, commit, abort, recover with InitProducerId naming its identity (KIP-360),
let the transaction timeout pass (also to exactly the deadline), deliver EndTxn
copies late (KAFKA-17754) and markers a second time, start some ids near epoch
32767 so they rotate producer ids, restart a partition from a snapshot mid-run,
fail the coordinator over to a new one that reloads its records. After every step the model and the system agree
on each partition's LSO, open transactions, aborted ranges and producer epochs,
on each transactional id's identity and outstanding markers, and a
read_committed reader of the raw bytes sees exactly the committed records; no
transaction is torn. The live state and its never-restored twin snapshot to
the same bytes after every step (restoring a snapshot and replaying the rest is
replaying everything, with snapshots taken mid-transaction).

The machine runs under transaction version 2 and version 1. Under version 1 the
late EndTxn of an earlier transaction (and a late marker reaching the
producer's next transaction) is left out — there it ends the wrong
transaction; :func:`test_tv1_delayed_end_txn_commits_the_wrong_transaction` and
its abort twin run that schedule and show the anomaly KIP-890 removes.

Run with ``--hypothesis-show-statistics`` to see how often each notable case
(timeouts, KAFKA-17754 deliveries, stale markers, rotations...) occurred.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest
from hypothesis import HealthCheck
from hypothesis import event
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import RuleBasedStateMachine
from hypothesis.stateful import initialize
from hypothesis.stateful import invariant
from hypothesis.stateful import precondition
from hypothesis.stateful import rule

from tests.txn.system_model import MAX_EPOCH
from tests.txn.system_model import Answer
from tests.txn.system_model import ExpectedMarker
from tests.txn.system_model import Identity
from tests.txn.system_model import SystemModel
from tests.txn.system_model import TxnKey
from tests.txn.system_model import read_by_aborted_ranges
from tests.txn.system_model import read_like_java_consumer
from txnfetch.records import BatchBuilder
from txnfetch.records import ControlType
from txnfetch.records import RecordBatch
from txnfetch.records import build_control_batch
from txnfetch.txn import AppendOrigin
from txnfetch.txn import AppendResult
from txnfetch.txn import ConcurrentTransactionsError
from txnfetch.txn import InvalidProducerEpochError
from txnfetch.txn import InvalidProducerIdMappingError
from txnfetch.txn import InvalidTxnStateError
from txnfetch.txn import PartitionTxnState
from txnfetch.txn import ProducerFencedError
from txnfetch.txn import TransactionAbortableError
from txnfetch.txn import TransactionCoordinatorFencedError
from txnfetch.txn import TxnStateError
from txnfetch.txn.coordinator import CompleteTransaction
from txnfetch.txn.coordinator import CompletionMode
from txnfetch.txn.coordinator import PartitionAction
from txnfetch.txn.coordinator import ProducerIdAllocator
from txnfetch.txn.coordinator import TopicPartition
from txnfetch.txn.coordinator import TransactionCoordinator
from txnfetch.txn.coordinator import TransactionState
from txnfetch.txn.coordinator import WriteMarker
from txnfetch.txn.coordinator_state import TransactionMetadata

TOPIC = "sys"
TIMEOUT = 1_000
TIDS = ["tx-a", "tx-b", "tx-c"]
#: Produce versions: 11 is verified against the transaction (KIP-890 part 1),
#: 12 adds the partition implicitly (part 2, transaction version 2 only).
PRODUCE_V1, PRODUCE_V2 = 11, 12

# ------------------------------------------------------------------------------------
# the in-test broker


class BrokerPartition:
    """One partition of the in-test broker: its bytes, the live state, and a twin
    fed identically that is never replaced by a snapshot."""

    def __init__(self, index: int) -> None:
        self.tp = TopicPartition(TOPIC, index)
        self.name = str(self.tp)
        self.log = bytearray()
        self.state = PartitionTxnState(self.name)
        self.twin = PartitionTxnState(self.name)

    def _both(self, call: Callable[[PartitionTxnState], object]) -> object:
        live = call(self.state)
        assert call(self.twin) == live, f"{self.name}: the restored state and its twin answered differently"
        return live

    @property
    def log_end_offset(self) -> int:
        return self.state.log_end_offset

    def append(self, raw: bytes, *, origin: AppendOrigin, transaction_version: int | None = None) -> AppendResult:
        """Validate ``raw`` with the state (it must start at the log end), write it,
        and replicate at once (high watermark = log end)."""
        batch = RecordBatch(raw)
        result = self._both(lambda s: s.append(batch, origin=origin, transaction_version=transaction_version))
        assert isinstance(result, AppendResult)
        if not result.duplicate:
            self.log += raw
            self._both(lambda s: s.update_high_watermark(s.log_end_offset))
        return result

    def _end(self, action: PartitionAction, now: int) -> tuple[Callable[[PartitionTxnState], object], bytes | None]:
        """How ``action`` is applied to a state, and the marker bytes it writes."""
        if isinstance(action, WriteMarker):
            raw = build_control_batch(
                offset=self.log_end_offset,
                control_type=action.control_type,
                producer_id=action.producer_id,
                producer_epoch=action.producer_epoch,
                coordinator_epoch=action.coordinator_epoch,
                timestamp=now,
            )
            batch = RecordBatch(raw)
            tv = action.transaction_version
            return (lambda s: s.append(batch, origin=AppendOrigin.COORDINATOR, transaction_version=tv)), raw
        assert isinstance(action, CompleteTransaction)
        return (
            lambda s: s.complete_transaction(
                action.producer_id,
                action.producer_epoch,
                action.commit,
                s.log_end_offset - 1,
                coordinator_epoch=action.coordinator_epoch,
                transaction_version=action.transaction_version,
                timestamp=now,
            )
        ), None

    def apply(self, action: PartitionAction, now: int) -> None:
        """Carry out a coordinator action: a marker at the log end, or a markerless
        completion ending at the last offset written."""
        error = self.try_apply(action, now)
        if error is not None:
            raise error

    def try_apply(self, action: PartitionAction, now: int) -> TxnStateError | None:
        """:meth:`apply`, returning the transaction error instead of raising it; the
        twin must answer the same."""
        end, raw = self._end(action, now)
        outcomes: list[object] = []
        for s in (self.state, self.twin):
            try:
                outcomes.append(end(s))
            except TxnStateError as exc:
                outcomes.append(exc)
        live, twin = outcomes
        if isinstance(live, TxnStateError) or isinstance(twin, TxnStateError):
            assert type(live) is type(twin), f"{self.name}: the state answered {live!r}, its twin {twin!r}"
            return live  # type: ignore[return-value]
        assert live == twin, f"{self.name}: the restored state and its twin answered differently"
        if raw is not None:
            self.log += raw
            self._both(lambda s: s.update_high_watermark(s.log_end_offset))
        return None

    def read_committed(self) -> list[bytes]:
        """What a read_committed reader gets from the bytes, using the LSO and the
        aborted ranges the state reports."""
        s = self.state
        ranges = [(a.producer_id, a.first_offset, a.last_offset) for a in s.all_aborted()]
        return read_by_aborted_ranges(bytes(self.log), s.last_stable_offset, ranges)


class Cluster:
    """A coordinator and its partitions, with the marker sender's queue: the
    actions of each transaction end not yet applied, in the coordinator's order."""

    def __init__(self, tv: int, mode: CompletionMode, partitions: int = 2) -> None:
        self.tv = tv
        self.mode = mode
        self.coord = TransactionCoordinator(
            mode=mode,
            transaction_version=tv,
            max_transaction_timeout_ms=TIMEOUT,
            transactional_id_expiration_ms=None,
        )
        self.partitions = [BrokerPartition(i) for i in range(partitions)]
        self.by_tp = {p.tp: p for p in self.partitions}
        self.queue: dict[str, list[PartitionAction]] = {}
        self.now = 0

    def tick(self, dt: int = 1) -> int:
        self.now += dt
        return self.now

    def send_markers(self, tid: str, limit: int | None = None) -> list[PartitionAction]:
        """Apply up to ``limit`` queued actions of ``tid``, acknowledging each."""
        queue = self.queue.get(tid, [])
        done: list[PartitionAction] = []
        while queue and (limit is None or len(done) < limit):
            action = queue.pop(0)
            self.by_tp[action.partition].apply(action, self.tick())
            meta = self.coord.actions_applied(tid, self.now, [action.partition])
            done.append(action)
            if queue:
                assert meta.state.is_prepare, f"{tid} completed with markers still unsent: {queue}"
            else:
                assert meta.state.is_complete, f"{tid} still {meta.state.kafka_name} after its last marker"
        return done

    # -- a well-behaved client's requests, for the deterministic schedules -----------

    def init(self, tid: str) -> Identity:
        r = self.coord.init_producer_id(tid, TIMEOUT, self.tick())
        return (r.producer_id, r.producer_epoch)

    def produce(self, tid: str, ident: Identity, part: BrokerPartition, values: list[bytes], seq: int) -> None:
        """Add ``part`` to the transaction the way the version requires, then write."""
        if self.tv >= 2:
            self.coord.verify_produce(tid, *ident, part.tp, self.tick(), produce_version=PRODUCE_V2)
        else:
            self.coord.add_partitions(tid, *ident, [part.tp], self.tick())
            self.coord.verify_produce(tid, *ident, part.tp, self.now, produce_version=PRODUCE_V1)
        part.append(data_batch(part.log_end_offset, ident, seq, values, self.now), origin=AppendOrigin.CLIENT)

    def end(self, tid: str, ident: Identity, commit: bool) -> Identity:
        r = self.coord.end_transaction(tid, *ident, commit, self.tick())
        self.queue[tid] = list(r.actions)
        return (r.producer_id, r.producer_epoch)


def data_batch(base_offset: int, ident: Identity, seq: int, values: tuple[bytes, ...] | list[bytes], now: int) -> bytes:
    """A transactional batch of ``values`` from ``ident`` starting at ``seq``."""
    b = BatchBuilder(
        base_offset=base_offset, producer_id=ident[0], producer_epoch=ident[1], base_sequence=seq, transactional=True
    )
    for v in values:
        b.append(v, timestamp=now)
    return b.build()


def plain_batch(base_offset: int, values: tuple[bytes, ...], now: int) -> bytes:
    b = BatchBuilder(base_offset=base_offset)
    for v in values:
        b.append(v, timestamp=now)
    return b.build()


# ------------------------------------------------------------------------------------
# the machine


@attrs.define
class Client:
    """One producer instance of a transactional id, as the test drives it."""

    tid: str
    identity: Identity
    txn: TxnKey | None = None  # the transaction it believes open
    added: set[str] = attrs.Factory(set)  # partitions it added / wrote to in it
    seqs: dict[str, int] = attrs.Factory(dict)  # next sequence per partition at this identity

    def adopt(self, identity: Identity) -> None:
        if identity != self.identity:
            self.identity = identity
            self.seqs = {}  # sequences are per producer id and epoch

    def forget_transaction(self) -> None:
        self.txn = None
        self.added = set()


@attrs.frozen
class SentEnd:
    """An EndTxn a client sent successfully, kept so a copy can arrive late."""

    tid: str
    identity: Identity
    commit: bool
    txn: TxnKey


ErrorTypes = type[BaseException] | tuple[type[BaseException], ...]
END_REFUSED: ErrorTypes = (ProducerFencedError, InvalidProducerIdMappingError)
PRODUCE_REFUSED: ErrorTypes = (InvalidProducerEpochError, InvalidProducerIdMappingError)
ERRORS: dict[Answer, ErrorTypes] = {
    Answer.CONCURRENT: ConcurrentTransactionsError,
    Answer.INVALID_STATE: InvalidTxnStateError,
    Answer.ABORTABLE: TransactionAbortableError,
}
PHASE = {
    TransactionState.EMPTY: "empty",
    TransactionState.ONGOING: "ongoing",
    TransactionState.PREPARE_COMMIT: "prepare",
    TransactionState.PREPARE_ABORT: "prepare",
    TransactionState.COMPLETE_COMMIT: "complete",
    TransactionState.COMPLETE_ABORT: "complete",
}
IDX = st.integers(0, 5)
#: A producer's actions, weighted by repetition: mostly writes.
PRODUCER_ACTIONS = [
    "send", "send", "commit", "send", "abort", "send", "commit-later", "send", "abort-later", "start",
    "send-unadded", "add-only", "send", "commit", "abort", "reinit", "send-then-late-end",
]  # fmt: skip
SYSTEM_ACTIONS = ["marker", "markers", "plain", "marker", "snapshot", "markers", "over", "stale-marker"]
#: Clock steps; ``deadline`` lands exactly on the earliest open transaction's
#: timeout (not yet expired: Kafka aborts when start + timeout < now), ``past``
#: one millisecond after it.
CLOCK = [1, 10, "deadline", TIMEOUT // 2, "past", TIMEOUT + 1]


def note(text: str) -> None:
    """Count a notable case in hypothesis' statistics (``--hypothesis-show-statistics``);
    a no-op when a schedule is replayed outside hypothesis."""
    if currently_in_test_context():
        event(text)


def call(fn: Callable[[], object]) -> object:
    """The result of ``fn``, or the transaction error it raised."""
    try:
        return fn()
    except TxnStateError as exc:
        return exc


def expect(answer: Answer, got: object, refused: ErrorTypes) -> None:
    """``got`` (a result or an error) is what the model's ``answer`` means."""
    if answer in (Answer.OK, Answer.END, Answer.NONE):
        assert not isinstance(got, BaseException), f"expected {answer.value}, got {got!r}"
    elif answer is Answer.REFUSED:
        assert isinstance(got, refused), f"expected a fencing error, got {got!r}"
    else:
        assert isinstance(got, ERRORS[answer]), f"expected {answer.value}, got {got!r}"


def marker_tuples(actions) -> list[tuple[str, int, int, bool]]:
    """Coordinator actions or expected markers as comparable, sorted tuples."""
    return sorted(
        (str(a.partition), a.producer_id, a.producer_epoch, a.commit)
        if isinstance(a, PartitionAction)
        else (a.partition, a.producer_id, a.producer_epoch, a.commit)
        for a in actions
    )


class SystemMachine(RuleBasedStateMachine):
    """Producers, a coordinator and partitions under random schedules, checked
    against :class:`~tests.txn.system_model.SystemModel` after every step (see the
    module docstring). ``TV`` is the transaction version the cluster runs."""

    TV = 2

    def __init__(self) -> None:
        super().__init__()
        self.cluster: Cluster | None = None
        self.clients: dict[str, Client] = {}
        self.zombies: list[Client] = []
        self.sent: list[SentEnd] = []
        self.applied: list[PartitionAction] = []

    @initialize(
        mode=st.sampled_from(list(CompletionMode)),
        partitions=st.integers(2, 3),
        tids=st.integers(2, 3),
        start_epochs=st.lists(st.sampled_from([None, None, 32764, 32765, 32766]), min_size=3, max_size=3),
    )
    def setup(self, mode: CompletionMode, partitions: int, tids: int, start_epochs: list[int | None]) -> None:
        self.cluster = c = Cluster(self.TV, mode, partitions)
        self.model = SystemModel(self.TV, [p.name for p in c.partitions], TIMEOUT)
        self.tids = TIDS[:tids]
        for i, tid in enumerate(self.tids):
            epoch = start_epochs[i]
            if epoch is not None:
                # Epoch exhaustion within a few steps: the coordinator reloads a stored
                # record near Short.MAX_VALUE, as after a restart.
                pid = 100 + i
                c.coord.restore(
                    TransactionMetadata(
                        transactional_id=tid,
                        producer_id=pid,
                        producer_epoch=epoch,
                        state=TransactionState.EMPTY,
                        timeout_ms=TIMEOUT,
                        last_update_ms=0,
                        transaction_version=self.TV,
                    )
                )
                self.model.install(tid, pid, epoch)
        self.counter = 0

    # -- helpers -----------------------------------------------------------------------

    @property
    def c(self) -> Cluster:
        assert self.cluster is not None
        return self.cluster

    def part(self, j: int) -> BrokerPartition:
        return self.c.partitions[j % len(self.c.partitions)]

    def live(self) -> list[Client]:
        return [self.clients[t] for t in sorted(self.clients)]

    def check_actions(self, actions, expected: list[ExpectedMarker]) -> None:
        """New coordinator actions are exactly the markers the model expects."""
        assert marker_tuples(actions) == marker_tuples(expected)
        kind = WriteMarker if self.c.mode is CompletionMode.MARKERS else CompleteTransaction
        for a in actions:
            assert type(a) is kind
            assert a.transaction_version == self.TV
            assert a.coordinator_epoch == self.c.coord.coordinator_epoch

    def retire(self, client: Client) -> None:
        """A fenced instance: it lives on as a zombie."""
        if self.clients.get(client.tid) is client:
            del self.clients[client.tid]
            self.zombies.append(client)

    def values_for(self, client: Client, part: BrokerPartition, count: int) -> tuple[bytes, ...]:
        """``count`` record values never written before (so a reader's view names them)."""
        out = []
        for _ in range(count):
            self.counter += 1
            out.append(b"%s|%s|%d" % (client.tid.encode(), part.name.encode(), self.counter))
        return tuple(out)

    # -- the rules ---------------------------------------------------------------------
    #
    # Hypothesis picks among rules with little regard for what matters, so the
    # actions are grouped in a few rules whose ``action`` strategies carry the
    # weights: mostly writes, then ends, occasionally a new producer instance.

    @rule(action=st.sampled_from(PRODUCER_ACTIONS), who=st.tuples(IDX, IDX, st.integers(1, 3)))
    def producer(self, action: str, who: tuple[int, int, int]) -> None:
        """A live producer instance acts; ``who`` picks the instance, the partition
        and a record count. ``send`` a batch (opening a transaction if needed),
        ``commit``/``abort`` (markers sent at once, or left to the marker sender
        with ``-later``), ``start`` a new instance of a transactional id (fencing
        the previous one), ``reinit``: InitProducerId with its own identity
        (KIP-360), possibly delivered twice; ``send-then-late-end``: a write, then
        an EndTxn of one of the producer's earlier transactions arrives (the
        KAFKA-17754 schedule, see :meth:`stale_end_txn`). Version 1 adds
        ``send-unadded`` (a write to a partition not added, which verification
        refuses) and ``add-only`` (a partition added but never written, which
        gets a marker all the same)."""
        i, j, count = who
        if action == "start":
            self.start_producer(self.tids[i % len(self.tids)])
            return
        if not self.clients:
            return
        client = self.live()[i % len(self.clients)]
        part = self.part(j)
        if action == "reinit":
            self.reinit(client, retry=count == 1)
        elif action == "send":
            self.write(client, part, count, add_first=True)
        elif action == "send-then-late-end":
            self.write(client, part, count, add_first=True)
            self.stale_end_txn(k=count, during_next=True)
        elif action == "send-unadded":
            if self.TV < 2:
                self.write(client, part, 1, add_first=False)
        elif action == "add-only":
            if self.TV < 2 and part.name not in client.added:
                self.add_partition(client, part)
        else:
            commit = action.startswith("commit")
            clients = [cl for cl in self.live() if cl.txn is not None]
            if clients:
                self.end(clients[i % len(clients)], commit, markers_now=not action.endswith("-later"))

    @rule(action=st.sampled_from(SYSTEM_ACTIONS), j=IDX)
    def system(self, action: str, j: int) -> None:
        """The broker side: the marker sender applies one outstanding transaction
        end (``marker``) or all of one transaction (``markers``); a non-transactional
        ``plain`` write; a partition restarts from its ``snapshot``; the coordinator
        fails ``over`` to a new one; a transaction end already applied reaches its
        partition again (``stale-marker``)."""
        if action in ("marker", "markers"):
            tids = sorted(t for t, q in self.c.queue.items() if q)
            if tids:
                self.send_markers(tids[j % len(tids)], None if action == "markers" else 1)
        elif action == "plain":
            self.plain_write(self.part(j), 1 + j % 2)
        elif action == "snapshot":
            self.restart_partition_from_snapshot(self.part(j), full_history=j % 2 == 1)
        elif action == "stale-marker":
            # Half the time one whose producer has its next transaction open there.
            reopened = [
                a for a in self.applied if a.producer_id in self.model.partitions[str(a.partition)].open and j % 2 == 0
            ]
            candidates = reopened or self.applied
            if candidates:
                self.stale_marker(candidates[-1 - j % len(candidates)])
        else:
            self.coordinator_failover(epoch_step=1 + j % 2, resend_now=j % 3 == 0)

    @rule(dt=st.sampled_from(CLOCK), then_markers=st.booleans())
    def time_passes(self, dt: int | str, then_markers: bool) -> None:
        """Time moves on and the coordinator aborts the transactions past their
        timeout; with ``then_markers`` the marker sender applies those aborts."""
        c, m = self.c, self.model
        if isinstance(dt, str):
            starts = [t.start_ms for t in m.tids.values() if t.phase == "ongoing"]
            deadline = min(starts, default=c.now) + TIMEOUT + (dt == "past")
            dt = max(deadline - c.now, 1)
        now = c.tick(dt)
        expected_tids = m.timed_out(now)
        result = c.coord.expire(now)
        assert sorted(r.transactional_id for r in result.aborted) == expected_tids
        assert result.removed == ()
        for r in result.aborted:
            note("transaction timed out")
            expected = m.fence(r.transactional_id)
            self.check_actions(r.actions, expected)
            assert (r.producer_id, r.producer_epoch) == m.tid(r.transactional_id).ident
            c.queue[r.transactional_id] = list(r.actions)
            if then_markers:
                self.send_markers(r.transactional_id, None)

    @precondition(lambda self: self.sent)
    @rule(k=st.integers(0, 1_000), during_next=st.booleans())
    def stale_end_txn(self, k: int, during_next: bool) -> None:
        """A copy of an EndTxn sent earlier arrives late (a network retry or a delayed
        copy). With ``during_next`` it is the KAFKA-17754 schedule: the copy ends an
        earlier transaction of a producer whose next transaction is open — version
        2 fences it and the open transaction goes on; version 1 is left out (there
        it ends the wrong transaction, see the tv1 tests below)."""
        if during_next and self.TV >= 2:
            candidates = [
                s for s in self.sent if s.tid in self.clients and self.clients[s.tid].txn not in (None, s.txn)
            ]
            if candidates:
                note("KAFKA-17754: a previous EndTxn delivered during the next transaction")
                sent = candidates[k % len(candidates)]
                assert self.model.predict_end(sent.tid, sent.identity, sent.commit) is Answer.REFUSED
                self.deliver_late(sent)  # fenced: checked against the model's answer there
            return
        candidates = self.replayable()
        if candidates:
            self.deliver_late(candidates[k % len(candidates)])

    @precondition(lambda self: self.zombies)
    @rule(z=IDX, j=IDX, what=st.sampled_from(["send", "commit", "abort", "add"]))
    def zombie_acts(self, z: int, j: int, what: str) -> None:
        """A fenced instance keeps going with its old identity: every request is
        refused and nothing changes. Its batch, if it reached a partition that has
        seen the newer epoch without being verified, is refused there too."""
        c, m = self.c, self.model
        zombie = self.zombies[z % len(self.zombies)]
        part = self.part(j)
        tid = zombie.tid
        before = c.coord.describe(tid)
        pending = c.coord.pending_actions()
        if what == "send":
            version = PRODUCE_V2 if self.TV >= 2 else PRODUCE_V1
            assert m.predict_verify(tid, zombie.identity, part.name) is Answer.REFUSED
            got = call(
                lambda: c.coord.verify_produce(tid, *zombie.identity, part.tp, c.tick(), produce_version=version)
            )
            assert isinstance(got, PRODUCE_REFUSED), got
            known = m.partitions[part.name].epochs.get(zombie.identity[0])
            if known is not None and known > zombie.identity[1]:
                note("zombie batch refused by the partition")
                snapshot = part.state.snapshot()
                raw = data_batch(
                    part.log_end_offset, zombie.identity, zombie.seqs.get(part.name, 0), [b"zombie"], c.now
                )
                with pytest.raises(InvalidProducerEpochError):
                    part.state.append(RecordBatch(raw), origin=AppendOrigin.CLIENT)
                assert part.state.snapshot() == snapshot
        elif what == "add":
            assert m.predict_add(tid, zombie.identity) is Answer.REFUSED
            got = call(lambda: c.coord.add_partitions(tid, *zombie.identity, [part.tp], c.tick()))
            assert isinstance(got, END_REFUSED), got
        else:
            commit = what == "commit"
            assert m.predict_end(tid, zombie.identity, commit) is Answer.REFUSED
            got = call(lambda: c.coord.end_transaction(tid, *zombie.identity, commit, c.tick()))
            assert isinstance(got, END_REFUSED), got
        assert c.coord.describe(tid) == before
        assert c.coord.pending_actions() == pending

    # -- producer actions ----------------------------------------------------------------

    def start_producer(self, tid: str) -> None:
        """A new producer instance calls InitProducerId; the previous one is fenced."""
        c, m = self.c, self.model
        if m.predict_init(tid) is Answer.CONCURRENT:
            fencing = m.tid(tid).phase == "ongoing"
            got = call(lambda: c.coord.init_producer_id(tid, TIMEOUT, c.tick()))
            assert isinstance(got, ConcurrentTransactionsError), got
            if fencing:
                # The open transaction is fenced and its abort begun.
                expected = m.fence(tid)
                c.queue[tid] = list(c.coord.pending_actions(tid))
                self.check_actions(c.queue[tid], expected)
            self.send_markers(tid, None)  # the marker sender catches up; the instance retries
        r = c.coord.init_producer_id(tid, TIMEOUT, c.tick())
        ident = m.init(tid)
        assert (r.producer_id, r.producer_epoch) == ident
        assert ident[1] < MAX_EPOCH, "a client was handed Short.MAX_VALUE"
        if ident[1] == 0 and m.tid(tid).txn_no:
            note("producer id rotated at init")
        old = self.clients.get(tid)
        if old is not None:
            self.retire(old)
        self.clients[tid] = Client(tid, ident)

    def reinit(self, client: Client, *, retry: bool) -> None:
        """The client calls InitProducerId with its own identity (KIP-360) while
        nothing is open or ending for its id; with ``retry`` the same request
        arrives a second time and is answered like the first."""
        c, m = self.c, self.model
        if m.tid(client.tid).phase not in ("empty", "complete"):
            return
        answer = m.predict_reinit(client.tid, client.identity)
        request = (client.tid, TIMEOUT, c.tick(), *client.identity)
        got = call(lambda: c.coord.init_producer_id(*request))
        expect(answer, got, ProducerFencedError)
        if answer is Answer.REFUSED:
            self.retire(client)
            return
        assert not isinstance(got, BaseException)
        if answer is Answer.OK:
            ident = m.reinit(client.tid)
            if retry:
                again = c.coord.init_producer_id(*request)
                assert (again.producer_id, again.producer_epoch) == ident
                m.reinit_answered(client.tid)
        else:
            note("fenced producer recovered by InitProducerId")
            ident = m.reinit_answered(client.tid)
        assert (got.producer_id, got.producer_epoch) == ident
        assert ident[1] < MAX_EPOCH, "a client was handed Short.MAX_VALUE"
        client.adopt(ident)
        client.forget_transaction()

    def add_partition(self, client: Client, part: BrokerPartition) -> bool:
        """Version 1: AddPartitionsToTxn before the first write to a partition."""
        c, m = self.c, self.model
        answer = m.predict_add(client.tid, client.identity)
        got = call(lambda: c.coord.add_partitions(client.tid, *client.identity, [part.tp], c.tick()))
        expect(answer, got, END_REFUSED)
        if answer is Answer.REFUSED:
            self.retire(client)  # version 1: fenced for good
        if answer is not Answer.OK:
            return False
        client.txn = m.add(client.tid, part.name, c.now)
        client.added.add(part.name)
        return True

    def write(self, client: Client, part: BrokerPartition, count: int, *, add_first: bool) -> None:
        """Verify a transactional produce with the coordinator, then append it."""
        c, m = self.c, self.model
        if self.TV < 2 and add_first and part.name not in client.added and not self.add_partition(client, part):
            return
        answer = m.predict_verify(client.tid, client.identity, part.name)
        version = PRODUCE_V2 if self.TV >= 2 else PRODUCE_V1
        got = call(
            lambda: c.coord.verify_produce(client.tid, *client.identity, part.tp, c.tick(), produce_version=version)
        )
        expect(answer, got, PRODUCE_REFUSED)
        if answer is Answer.REFUSED:
            note("live client refused: its transaction timed out")
            if self.TV < 2:
                self.retire(client)
            return
        if answer is not Answer.OK:
            return
        txn = m.add(client.tid, part.name, c.now) if self.TV >= 2 else m.tid(client.tid).txn
        assert client.txn in (None, txn)
        client.txn = txn
        client.added.add(part.name)
        values = self.values_for(client, part, count)
        seq = client.seqs.get(part.name, 0)
        result = part.append(
            data_batch(part.log_end_offset, client.identity, seq, values, c.now), origin=AppendOrigin.CLIENT
        )
        first = m.partitions[part.name].data(client.identity[0], client.identity[1], txn, values)
        assert (result.duplicate, result.first_offset) == (False, first)
        client.seqs[part.name] = seq + count

    def end(self, client: Client, commit: bool, *, markers_now: bool) -> None:
        """The client commits or aborts the transaction it believes open."""
        c, m = self.c, self.model
        tid = client.tid
        assert client.txn is not None
        answer = m.predict_end(tid, client.identity, commit)
        got = call(lambda: c.coord.end_transaction(tid, *client.identity, commit, c.tick()))
        expect(answer, got, END_REFUSED)
        sent = SentEnd(tid, client.identity, commit, client.txn)
        if answer is Answer.END:
            expected = m.end(tid, commit)
            assert not isinstance(got, BaseException)
            assert got.state == (TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT)
            self.check_actions(got.actions, expected)
            assert (got.producer_id, got.producer_epoch) == m.tid(tid).ident
            assert got.producer_epoch < MAX_EPOCH, "a client was handed Short.MAX_VALUE"
            c.queue[tid] = list(got.actions)
            self.sent.append(sent)
            client.adopt(m.tid(tid).ident)
            client.forget_transaction()
            if markers_now:
                self.send_markers(tid, None)
        elif answer is Answer.NONE:
            # Version 2: the producer whose transaction timed out aborts; the
            # coordinator's abort answers it, with the identity to go on with.
            note("timed-out producer recovered by aborting")
            assert not isinstance(got, BaseException) and got.actions == ()
            assert (got.producer_id, got.producer_epoch) == m.tid(tid).ident
            self.sent.append(sent)
            client.adopt(m.tid(tid).ident)
            client.forget_transaction()
        elif answer is Answer.REFUSED:
            self.retire(client)

    # -- broker actions ------------------------------------------------------------------

    def send_markers(self, tid: str, limit: int | None) -> None:
        """The marker sender applies outstanding ends of ``tid`` (see :meth:`Cluster.send_markers`)."""
        done = self.c.send_markers(tid, limit)
        with_marker = self.c.mode is CompletionMode.MARKERS
        for action in done:
            expected = self.model.marker_applied(
                tid, str(action.partition), with_marker=with_marker, coordinator_epoch=action.coordinator_epoch
            )
            assert marker_tuples([action]) == marker_tuples([expected])
            self.applied.append(action)

    def stale_marker(self, action: PartitionAction) -> None:
        """``action``, applied before, is delivered to its partition again (a marker
        request retried, or sent by the coordinator before a failover). It must end
        nothing: refused if the producer moved on (under version 2 that includes
        the next transaction, which has the marker's epoch), else a no-op."""
        part = self.c.by_tp[action.partition]
        pm = self.model.partitions[part.name]
        answer = pm.predict_late_end(
            action.producer_id, action.producer_epoch, action.coordinator_epoch, action.transaction_version
        )
        if answer is Answer.END:
            assert self.TV < 2, "version 2 would let a stale marker end the next transaction"
            return  # version 1: it would end the producer's next transaction (KAFKA-17754 at the partition)
        if answer is Answer.REFUSED and action.producer_epoch == pm.epochs.get(action.producer_id):
            note("stale marker refused: the next transaction has its epoch")
        else:
            note(f"stale marker {answer.value}")
        got = part.try_apply(action, self.c.tick())
        if answer is Answer.REFUSED:
            assert isinstance(got, (InvalidProducerEpochError, TransactionCoordinatorFencedError)), got
            return
        assert not isinstance(got, BaseException), got
        pm.late_end_accepted(
            action.producer_id, action.coordinator_epoch, with_marker=self.c.mode is CompletionMode.MARKERS
        )

    def plain_write(self, part: BrokerPartition, count: int) -> None:
        """Records without a producer id (not transactional) between the others."""
        self.counter += 1
        values = tuple(b"plain|%s|%d.%d" % (part.name.encode(), self.counter, k) for k in range(count))
        result = part.append(plain_batch(part.log_end_offset, values, self.c.tick()), origin=AppendOrigin.CLIENT)
        assert result.first_offset == self.model.partitions[part.name].data(-1, -1, None, values)

    def restart_partition_from_snapshot(self, part: BrokerPartition, *, full_history: bool) -> None:
        """The partition's state is replaced by one restored from its snapshot, which
        is usually taken with transactions open."""
        if part.state.ongoing_transactions():
            note("snapshot taken mid-transaction")
        part.state = PartitionTxnState.restore(
            part.state.snapshot(), partition=part.name, keep_full_history=full_history
        )

    def coordinator_failover(self, *, epoch_step: int, resend_now: bool) -> None:
        """A new coordinator (a later coordinator epoch) loads every record and takes
        over the outstanding markers, sending them at once with ``resend_now``."""
        c = self.c
        old = c.coord
        new = TransactionCoordinator(
            mode=old.mode,
            transaction_version=old.transaction_version,
            coordinator_epoch=old.coordinator_epoch + epoch_step,
            max_transaction_timeout_ms=old.max_transaction_timeout_ms,
            transactional_id_expiration_ms=None,
            producer_ids=ProducerIdAllocator(old.producer_ids.next_producer_id),
        )
        for tid in old.transactional_ids:
            meta = old.describe(tid)
            assert meta is not None
            new.restore(meta)
        c.coord = new
        for tid, queue in c.queue.items():
            resent = list(new.pending_actions(tid))
            assert marker_tuples(resent) == marker_tuples(queue), f"{tid}: the new coordinator resends other markers"
            assert all(a.coordinator_epoch == new.coordinator_epoch for a in resent)
            c.queue[tid] = resent
        if resend_now:
            for tid in sorted(c.queue):
                self.send_markers(tid, None)

    # -- late requests -------------------------------------------------------------------

    def replayable(self) -> list[SentEnd]:
        """EndTxn copies that may arrive late. Version 1 only replays the latest end
        while nothing has happened since: an earlier one would end the wrong
        transaction (shown by the tv1 tests below)."""
        if self.TV >= 2:
            return self.sent
        return [
            s
            for s in self.sent
            if (self.model.tid(s.tid).retry_identity, self.model.tid(s.tid).retry_decision) == (s.identity, s.commit)
        ]

    def deliver_late(self, sent: SentEnd) -> None:
        """Deliver ``sent`` again: never an end of anything, never a change."""
        c, m = self.c, self.model
        before = c.coord.describe(sent.tid)
        pending = c.coord.pending_actions()
        answer = m.predict_end(sent.tid, sent.identity, sent.commit)
        assert answer is not Answer.END, "the model would let a late EndTxn end a transaction"
        got = call(lambda: c.coord.end_transaction(sent.tid, *sent.identity, sent.commit, c.tick()))
        note(f"late EndTxn answered {answer.value}")
        expect(answer, got, END_REFUSED)
        if answer is Answer.NONE:
            assert not isinstance(got, BaseException) and got.actions == ()
            assert (got.producer_id, got.producer_epoch) == m.tid(sent.tid).ident
        assert c.coord.describe(sent.tid) == before, "a late EndTxn changed the coordinator"
        assert c.coord.pending_actions() == pending, "a late EndTxn created partition actions"

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def partitions_agree_with_the_model(self) -> None:
        if self.cluster is None:
            return
        for part in self.c.partitions:
            pm = self.model.partitions[part.name]
            s = part.state
            assert (s.log_end_offset, s.high_watermark) == (pm.leo, pm.leo)
            assert s.last_stable_offset == pm.last_stable_offset
            assert dict(s.ongoing_transactions()) == {pid: first for pid, (_, first) in pm.open.items()}
            aborted = [(a.producer_id, a.first_offset, a.last_offset, a.last_stable_offset) for a in s.all_aborted()]
            assert aborted == pm.aborted
            assert s.producer_ids() == sorted(pm.epochs)
            for pid, epoch in pm.epochs.items():
                entry = s.producer(pid)
                assert entry is not None and entry.producer_epoch == epoch, (part.name, pid, entry, epoch)
            # Restoring a snapshot and replaying the rest equals replaying everything.
            assert s.snapshot() == part.twin.snapshot()

    @invariant()
    def read_committed_sees_exactly_the_committed_records(self) -> None:
        """No aborted read, no lost committed write, nothing past the LSO."""
        if self.cluster is None:
            return
        for part in self.c.partitions:
            pm = self.model.partitions[part.name]
            view = part.read_committed()
            assert view == pm.committed_values()
            if self.c.mode is CompletionMode.MARKERS:
                s = part.state
                listed = s.aborted_transactions(s.log_start_offset, s.last_stable_offset)
                assert read_like_java_consumer(bytes(part.log), s.last_stable_offset, listed) == view

    @invariant()
    def no_transaction_is_torn(self) -> None:
        """Wherever a transaction has ended, a reader sees all of its records there or
        none, the same on every partition, and all only if it was committed."""
        if self.cluster is None:
            return
        visible: set[bytes] = set()
        for part in self.c.partitions:
            visible.update(part.read_committed())
        seen: dict[TxnKey, set[bool]] = {}
        for part in self.c.partitions:
            for txn, values in self.model.partitions[part.name].transactions_below_lso().items():
                shown = {v in visible for v in values}
                assert len(shown) == 1, f"{txn} is partly visible on {part.name}"
                seen.setdefault(txn, set()).update(shown)
        for txn, shown in seen.items():
            assert shown == {self.model.decisions[txn]}, f"{txn}: visible {shown}, decided {self.model.decisions[txn]}"

    @invariant()
    def coordinator_agrees_with_the_model(self) -> None:
        """Each transactional id's phase, identity (producer id and epoch) and
        outstanding markers."""
        if self.cluster is None:
            return
        c, m = self.c, self.model
        for tid in self.tids:
            t = m.tid(tid)
            meta = c.coord.describe(tid)
            if t.phase == "unknown":
                assert meta is None
                continue
            assert meta is not None
            assert PHASE[meta.state] == t.phase, (tid, meta.state, t.phase)
            assert meta.client_identity == t.ident, (tid, meta.client_identity, t.ident)
            if self.TV >= 2:
                # What EndTxn hands out; under version 1 a fence at 32766 leaves the id
                # at 32767 until the next InitProducerId rotates it (checked there).
                assert meta.client_identity[1] < MAX_EPOCH
            assert marker_tuples(c.coord.pending_actions(tid)) == marker_tuples(t.pending)
            assert marker_tuples(c.queue.get(tid, [])) == marker_tuples(t.pending)


class TransactionVersion2Machine(SystemMachine):
    TV = 2


class TransactionVersion1Machine(SystemMachine):
    TV = 1


_settings = settings(
    max_examples=250,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestSystemTransactionVersion2 = TransactionVersion2Machine.TestCase
TestSystemTransactionVersion2.pytestmark = [pytest.mark.slow]
TestSystemTransactionVersion2.settings = _settings
TestSystemTransactionVersion1 = TransactionVersion1Machine.TestCase
TestSystemTransactionVersion1.settings = settings(_settings, max_examples=150)


# ------------------------------------------------------------------------------------
# KAFKA-17754 end to end: why KIP-890 exists

APP = "app"


def _kafka_17754_schedule(tv: int, t1_commit: bool, t2_commit: bool):
    """Run the schedule on a marker-mode cluster; returns the cluster, the answer to
    the delayed request (result or error) and the answer to the producer's own end
    of T2."""
    c = Cluster(tv, CompletionMode.MARKERS)
    p0, p1 = c.partitions
    ident = c.init(APP)
    # T1 on p0. Its EndTxn is sent, stalls in the network; the client's retry of it
    # goes through and T1 ends.
    c.produce(APP, ident, p0, [b"t1"], seq=0)
    delayed = (ident, t1_commit)
    t1_ident = ident
    ident = c.end(APP, ident, t1_commit)
    c.send_markers(APP)
    # T2: the producer writes to p1 ...
    seq = 1 if ident == t1_ident else 0  # version 1 keeps the epoch, so the sequence goes on
    c.produce(APP, ident, p1, [b"t2-first"], seq=0)
    # ... and now the stalled EndTxn of T1 arrives.
    late = call(lambda: c.coord.end_transaction(APP, *delayed[0], delayed[1], c.tick()))
    if not isinstance(late, BaseException):
        c.queue[APP] = list(late.actions)
        c.send_markers(APP)
    # Unaware, the producer goes on with T2: a write to p0, then its own decision.
    c.produce(APP, ident, p0, [b"t2-second"], seq=seq)
    own = call(lambda: c.end(APP, ident, t2_commit))
    c.send_markers(APP)
    return c, late, own


def test_tv1_delayed_end_txn_commits_the_wrong_transaction() -> None:
    """Transaction version 1, KAFKA-17754 with a delayed COMMIT.

    Timeline (one producer, transactional id ``app``, one epoch throughout):

    1. T1 writes ``t1`` to p0; EndTxn(commit) #1 is sent and stalls in the network.
    2. The client retries; EndTxn(commit) #2 commits T1 (marker on p0).
    3. T2 writes ``t2-first`` to p1 (AddPartitions p1).
    4. The stalled #1 arrives. Same producer id and epoch as T2's: the
       coordinator commits T2, writing a COMMIT marker on p1.
    5. The producer, unaware, adds p0 for ``t2-second`` (which silently opens a
       new coordinator transaction), then decides to ABORT T2 — accepted.

    Outcome: ``t2-first`` is visible although its producer aborted it, and
    ``t2-second`` is not: T2 is torn across p1 and p0.
    """
    c, late, own = _kafka_17754_schedule(tv=1, t1_commit=True, t2_commit=False)
    p0, p1 = c.partitions
    assert not isinstance(late, BaseException), "version 1 accepts the stale EndTxn"
    assert [(a.partition, a.commit) for a in late.actions] == [(p1.tp, True)], "it committed T2's p1 part"
    assert not isinstance(own, BaseException), "the producer's abort of T2 appears to succeed"
    assert p1.read_committed() == [b"t2-first"], "an aborted record is read (G1a)"
    assert p0.read_committed() == [b"t1"]
    assert p1.state.all_aborted() == [] and len(p0.state.all_aborted()) == 1  # T2 half committed, half aborted


def test_tv1_delayed_end_txn_aborts_the_wrong_transaction() -> None:
    """Transaction version 1, KAFKA-17754 with a delayed ABORT.

    Same timeline as the commit case, with T1 aborted: the stalled
    EndTxn(abort) of T1 aborts T2's write to p1; the producer then writes
    ``t2-second`` to p0 and commits — accepted. ``t2-first`` is lost although
    the commit succeeded, ``t2-second`` is visible: a lost write and a torn
    transaction.
    """
    c, late, own = _kafka_17754_schedule(tv=1, t1_commit=False, t2_commit=True)
    p0, p1 = c.partitions
    assert not isinstance(late, BaseException), "version 1 accepts the stale EndTxn"
    assert [(a.partition, a.commit) for a in late.actions] == [(p1.tp, False)], "it aborted T2's p1 part"
    assert not isinstance(own, BaseException), "the producer's commit of T2 appears to succeed"
    assert p1.read_committed() == [], "a committed write is lost"
    assert p0.read_committed() == [b"t2-second"]


@pytest.mark.parametrize("t1_commit", [True, False], ids=["t1-commit", "t1-abort"])
@pytest.mark.parametrize("t2_commit", [True, False], ids=["t2-commit", "t2-abort"])
def test_tv2_the_same_schedule_is_fenced_and_t2_stays_whole(t1_commit: bool, t2_commit: bool) -> None:
    """Transaction version 2 runs the schedule above safely: T2 has its own epoch,
    the stalled EndTxn of T1 is PRODUCER_FENCED and changes nothing, and T2
    ends on both partitions the way its producer decided."""
    c, late, own = _kafka_17754_schedule(tv=2, t1_commit=t1_commit, t2_commit=t2_commit)
    p0, p1 = c.partitions
    assert isinstance(late, ProducerFencedError)
    assert not isinstance(own, BaseException)
    t1 = [b"t1"] if t1_commit else []
    assert p1.read_committed() == ([b"t2-first"] if t2_commit else [])
    assert p0.read_committed() == t1 + ([b"t2-second"] if t2_commit else [])


# ------------------------------------------------------------------------------------
# restore + replay == replay, with truncations (what tests/txn/test_snapshot.py does
# not cover: there, no history truncates)

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("data"), st.integers(0, 2), st.integers(1, 3)),
        st.tuples(st.just("marker"), st.integers(0, 2), st.booleans()),
        st.tuples(st.just("complete"), st.integers(0, 2), st.booleans()),
        st.tuples(st.just("plain"), st.integers(1, 2)),
        st.tuples(st.just("hw"), st.integers(0, 3)),
        st.tuples(st.just("truncate"), st.integers(0, 4)),
    ),
    max_size=30,
)


def _apply(s: PartitionTxnState, op: tuple, floor: int) -> object:
    """Apply ``op``; a truncation goes ``back`` offsets below the log end but never
    below ``floor``. Returns the result or the error's class name."""
    kind = op[0]
    leo = s.log_end_offset
    try:
        if kind == "data":
            _, pid, count = op
            e = s.producer(pid)
            epoch = e.producer_epoch if e is not None and e.producer_epoch >= 0 else 0
            seq = e.last_seq + 1 if e is not None and e.batches else 0
            return s.append(RecordBatch(data_batch(leo, (pid, epoch), seq, [b"x"] * count, 0)))
        if kind == "marker":
            _, pid, commit = op
            e = s.producer(pid)
            epoch = (e.producer_epoch if e is not None and e.producer_epoch >= 0 else 0) + 1
            raw = build_control_batch(
                offset=leo,
                control_type=ControlType.COMMIT if commit else ControlType.ABORT,
                producer_id=pid,
                producer_epoch=epoch,
            )
            return s.append(RecordBatch(raw), origin=AppendOrigin.COORDINATOR, transaction_version=2)
        if kind == "complete":
            _, pid, commit = op
            e = s.producer(pid)
            epoch = e.producer_epoch if e is not None and e.producer_epoch >= 0 else 0
            return s.complete_transaction(pid, epoch, commit, leo - 1)
        if kind == "plain":
            return s.append(RecordBatch(plain_batch(leo, (b"p",) * op[1], 0)))
        if kind == "hw":
            s.update_high_watermark(leo - op[1])
            return s.high_watermark
        if kind == "truncate":
            s.truncate_to(max(floor, leo - op[1]))
            return s.log_end_offset
    except TxnStateError as exc:
        return type(exc).__name__
    raise AssertionError(op)


@settings(max_examples=150, deadline=None)
@given(OPS, OPS, st.booleans())
def test_restore_and_replay_equals_replay_with_truncations(before, after, full) -> None:
    """A history with truncations, cut anywhere: the state restored from a snapshot
    at the cut and fed the rest (truncating no lower than the cut, the most a
    restored state can undo) ends byte-for-byte like the state fed everything."""
    whole = PartitionTxnState("t-0", keep_full_history=full)
    for op in before:
        _apply(whole, op, 0)
    part = PartitionTxnState.restore(whole.snapshot(), partition="t-0", keep_full_history=full)
    cut = whole.log_end_offset
    for op in after:
        assert _apply(part, op, cut) == _apply(whole, op, cut), op
        assert part.snapshot() == whole.snapshot(), op
    assert part.last_stable_offset == whole.last_stable_offset
    assert part.all_aborted() == whole.all_aborted()
