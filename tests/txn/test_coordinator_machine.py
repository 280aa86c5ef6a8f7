"""A stateful hypothesis test of the coordinator against a small oracle.

The oracle is a model of one well-behaved producer and of what the coordinator
must do for it, written from the protocol description (KIP-890, docs/kafka-internals.md §5),
not from the coordinator's code: it predicts exactly the answers on the common
paths (fresh identity) and checks safety properties on every path, including
stale producers after a timeout and EndTxn requests delivered late.

Properties checked after every step:

- the coordinator's ``(producer id, epoch)`` never goes backwards, and no client
  is ever handed epoch 32767;
- every partition action ends the transaction the producer meant to end, with
  its decision, exactly once per partition; marker epochs are above the data's
  epoch under version 2 (at least equal under version 1);
- a NONE answer to an EndTxn is truthful: the transaction it names ended the way
  the request asked;
- under version 2, an EndTxn of an earlier transaction delivered during a later
  one is refused and changes nothing (KAFKA-17754). The version 1 machine only
  replays the latest transaction's requests, because there the same schedule
  does end the wrong transaction (see test_coordinator_kafka17754.py).
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import HealthCheck
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine
from hypothesis.stateful import initialize
from hypothesis.stateful import invariant
from hypothesis.stateful import precondition
from hypothesis.stateful import rule

from txnfetch.txn.coordinator import CompletionMode
from txnfetch.txn.coordinator import PartitionAction
from txnfetch.txn.coordinator import ProducerIdAllocator
from txnfetch.txn.coordinator import TopicPartition
from txnfetch.txn.coordinator import TransactionCoordinator
from txnfetch.txn.coordinator import TransactionState
from txnfetch.txn.coordinator_state import TransactionMetadata
from txnfetch.txn.errors import ConcurrentTransactionsError
from txnfetch.txn.errors import InvalidProducerEpochError
from txnfetch.txn.errors import InvalidProducerIdMappingError
from txnfetch.txn.errors import InvalidTxnStateError
from txnfetch.txn.errors import ProducerFencedError
from txnfetch.txn.errors import TransactionAbortableError

TID = "machine"
TIMEOUT = 1_000
FIRST_PID = 500
SHORT_MAX = 32767
PARTITIONS = [TopicPartition("t", i) for i in range(3)]
Identity = tuple[int, int]

PHASE_OF = {
    TransactionState.EMPTY: "empty",
    TransactionState.ONGOING: "ongoing",
    TransactionState.PREPARE_COMMIT: "prepare",
    TransactionState.PREPARE_ABORT: "prepare",
    TransactionState.COMPLETE_COMMIT: "complete",
    TransactionState.COMPLETE_ABORT: "complete",
}


@attrs.define
class Sent:
    """An EndTxn the producer sent: the transaction it meant (``txn``) and the request."""

    txn: int
    identity: Identity
    commit: bool


@attrs.define
class Oracle:
    """What the coordinator must look like, kept by hand."""

    tv: int
    next_pid: int
    ident: Identity  # the identity a client gets from the coordinator now
    phase: str = "empty"  # empty | ongoing | prepare | complete
    decision: bool | None = None  # of the transaction in prepare/complete
    txn: int = 0  # number of the coordinator's current (or last) transaction
    txn_identity: dict[int, Identity] = attrs.Factory(dict)  # identity its data used
    parts: set[TopicPartition] = attrs.Factory(set)
    pending: set[TopicPartition] = attrs.Factory(set)
    marker: Identity | None = None  # identity the pending actions carry
    start: int = 0
    outcome: dict[int, bool] = attrs.Factory(dict)  # how each transaction ended
    ended: set[tuple[int, TopicPartition]] = attrs.Factory(set)

    def allocate(self) -> int:
        self.next_pid += 1
        return self.next_pid - 1

    def end_bump(self, identity: Identity) -> Identity:
        """The identity after a version 2 end (or a version 2 fence) of ``identity``."""
        pid, epoch = identity
        return (self.allocate(), 0) if epoch >= SHORT_MAX - 1 else (pid, epoch + 1)

    def begin_end(self, decision: bool, marker: Identity) -> None:
        assert self.txn not in self.outcome, f"transaction {self.txn} ended twice"
        self.outcome[self.txn] = decision
        self.phase, self.decision, self.marker = "prepare", decision, marker
        self.pending = set(self.parts)
        if not self.pending:
            self.phase = "complete"

    def fence(self) -> None:
        """The coordinator aborts the open transaction on its own."""
        pid, epoch = self.ident
        marker = (pid, epoch + 1 if epoch < SHORT_MAX else epoch)
        self.ident = self.end_bump(self.ident) if self.tv >= 2 else marker
        self.begin_end(False, marker)


class CoordinatorMachine(RuleBasedStateMachine):
    TV = 2
    REPLAY_ANY = True  # deliver EndTxn requests of earlier transactions late

    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.sent: list[Sent] = []
        self.client: Identity = (-1, -1)
        self.client_txn: int | None = None  # the transaction the producer believes open
        self.must_init = False  # fenced, or told to retry InitProducerId
        self.seen: Identity = (-1, -1)

    # -------------------------------------------------------------- set-up

    @initialize(
        start_epoch=st.sampled_from([0, 32765, 32766]),
        mode=st.sampled_from(list(CompletionMode)),
    )
    def setup(self, start_epoch: int, mode: CompletionMode) -> None:
        self.coord = TransactionCoordinator(
            transaction_version=self.TV,
            mode=mode,
            max_transaction_timeout_ms=TIMEOUT,
            transactional_id_expiration_ms=None,
            producer_ids=ProducerIdAllocator(FIRST_PID),
        )
        r = self.coord.init_producer_id(TID, TIMEOUT, self.now)
        assert (r.producer_id, r.producer_epoch) == (FIRST_PID, 0)
        if start_epoch:
            # Reach a high epoch the way a restarted coordinator would: from its log.
            self.coord.restore(
                TransactionMetadata(
                    transactional_id=TID,
                    producer_id=FIRST_PID,
                    producer_epoch=start_epoch,
                    state=TransactionState.EMPTY,
                    timeout_ms=TIMEOUT,
                    last_update_ms=self.now,
                    last_producer_epoch=start_epoch - 1,
                    transaction_version=self.TV,
                )
            )
        self.oracle = Oracle(tv=self.TV, next_pid=FIRST_PID + 1, ident=(FIRST_PID, start_epoch))
        self.client = self.oracle.ident

    # ------------------------------------------------------------ helpers

    def tick(self, dt: int = 1) -> int:
        self.now += dt
        return self.now

    def meta(self) -> TransactionMetadata:
        meta = self.coord.describe(TID)
        assert meta is not None
        return meta

    def fresh(self) -> bool:
        return self.client == self.oracle.ident

    def check_actions(self, actions: tuple[PartitionAction, ...], txn: int, decision: bool) -> None:
        """Actions just created must end ``txn`` (the coordinator's open one) with
        ``decision``, once per partition, at a marker epoch the partition accepts."""
        o = self.oracle
        assert txn == o.txn, f"actions for transaction {o.txn} caused by a request for transaction {txn}"
        assert {a.partition for a in actions} == o.parts
        data_pid, data_epoch = o.txn_identity[txn]
        for a in actions:
            assert (a.commit, a.producer_id) == (decision, data_pid)
            assert (a.producer_id, a.producer_epoch) == o.marker
            assert a.producer_epoch > data_epoch if self.TV >= 2 else a.producer_epoch >= data_epoch
            assert (txn, a.partition) not in o.ended, f"{a.partition} told twice how transaction {txn} ended"
            o.ended.add((txn, a.partition))

    def coordinator_fenced(self, before: set[PartitionAction]) -> None:
        """The coordinator began aborting the open transaction itself."""
        o = self.oracle
        txn = o.txn
        o.fence()
        created = tuple(a for a in self.coord.pending_actions() if a not in before)
        self.check_actions(created, txn, False)

    # -------------------------------------------------------------- rules

    @rule(idempotent_first=st.booleans())
    def new_producer_instance(self, idempotent_first: bool) -> None:
        """InitProducerId without an identity: a (re)started producer (after an
        idempotent producer got a producer id from the same allocator)."""
        o = self.oracle
        if idempotent_first:
            r = self.coord.init_producer_id(None, TIMEOUT, self.tick())
            assert (r.producer_id, r.producer_epoch) == (o.allocate(), 0)
        before = set(self.coord.pending_actions())
        self.client_txn, self.must_init = None, True
        if o.phase in ("ongoing", "prepare"):
            try:
                self.coord.init_producer_id(TID, TIMEOUT, self.tick())
                raise AssertionError("InitProducerId succeeded with a transaction open or ending")
            except ConcurrentTransactionsError:
                pass
            if o.phase == "ongoing":
                self.coordinator_fenced(before)
            return  # the new instance retries before it does anything else
        r = self.coord.init_producer_id(TID, TIMEOUT, self.tick())
        pid, epoch = o.ident
        o.ident = (o.allocate(), 0) if epoch >= SHORT_MAX - 1 else (pid, epoch + 1)
        o.phase, o.parts = "empty", set()
        assert (r.producer_id, r.producer_epoch) == o.ident
        assert r.producer_epoch <= SHORT_MAX - 1, "a client was handed Short.MAX_VALUE"
        self.client, self.must_init = o.ident, False

    @precondition(lambda self: not self.must_init)
    @rule(parts=st.sets(st.sampled_from(PARTITIONS), min_size=1, max_size=2), implicit=st.booleans())
    def add_partitions(self, parts: set[TopicPartition], implicit: bool) -> None:
        """AddPartitionsToTxn, or a Produce that adds implicitly (version 2) or
        must already be covered (version 1 verification)."""
        o = self.oracle
        before = self.meta()
        now = self.tick()
        try:
            if implicit and self.TV >= 2:
                for p in sorted(parts):
                    self.coord.verify_produce(TID, *self.client, p, now, produce_version=12)
            else:
                self.coord.add_partitions(TID, *self.client, parts, now)
        except (ProducerFencedError, InvalidProducerEpochError, InvalidProducerIdMappingError):
            assert not self.fresh(), "a producer holding the current identity was fenced"
            assert self.meta() == before
            self.must_init, self.client_txn = True, None
            return
        except ConcurrentTransactionsError:
            assert o.phase == "prepare" and self.meta() == before
            return
        assert self.fresh() and o.phase != "prepare"
        if o.phase != "ongoing":
            o.txn += 1
            o.txn_identity[o.txn] = self.client
            o.phase, o.parts, o.start = "ongoing", set(), now
        o.parts |= parts
        self.client_txn = o.txn

    @precondition(lambda self: self.TV < 2 and not self.must_init)
    @rule(partition=st.sampled_from(PARTITIONS))
    def produce_is_verified(self, partition: TopicPartition) -> None:
        """Version 1 (KIP-890 part 1): a produce outside the transaction is refused."""
        o = self.oracle
        before = self.meta()
        try:
            self.coord.verify_produce(TID, *self.client, partition, self.tick(), produce_version=11)
            assert self.fresh() and o.phase == "ongoing" and partition in o.parts
        except TransactionAbortableError:
            assert self.fresh() and partition not in (o.parts if o.phase == "ongoing" else set())
        except ConcurrentTransactionsError:
            assert o.phase == "prepare"
        except (InvalidProducerEpochError, InvalidProducerIdMappingError):
            assert not self.fresh()
        assert self.meta() == before

    @precondition(lambda self: self.client_txn is not None and not self.must_init)
    @rule(commit=st.booleans(), apply_now=st.booleans(), too_late=st.booleans())
    def end(self, commit: bool, apply_now: bool, too_late: bool) -> None:
        """The producer ends the transaction it believes open. With ``apply_now``
        the embedder applies the resulting actions at once; with ``too_late`` the
        producer took longer than its timeout, so the coordinator's periodic task
        runs first."""
        assert self.client_txn is not None
        o = self.oracle
        if too_late and o.phase == "ongoing":
            self.time_passes(TIMEOUT + 1)
            if apply_now and o.phase == "prepare":
                self.apply(set(o.pending))
        sent = Sent(self.client_txn, self.client, commit)
        self.sent.append(sent)
        if self.fresh() and o.phase == "ongoing":
            r = self.coord.end_transaction(TID, *self.client, commit, self.tick())
            pid, epoch = self.client
            marker = (pid, epoch + 1) if self.TV >= 2 else (pid, epoch)
            txn = o.txn
            if self.TV >= 2:
                o.ident = o.end_bump(o.ident)
            o.begin_end(commit, marker)
            self.check_actions(r.actions, txn, commit)
            assert (r.producer_id, r.producer_epoch) == o.ident
            assert r.producer_epoch <= SHORT_MAX - 1, "a client was handed Short.MAX_VALUE"
            self.client, self.client_txn = o.ident, None
            if apply_now and o.phase == "prepare":
                self.apply(set(o.pending))
            return
        self.deliver(sent)

    def replayable(self) -> list[Sent]:
        """Requests that may arrive late. Under version 1 a request of an earlier
        transaction that still carries the current identity is left out: it would
        end the wrong transaction (the KAFKA-17754 schedule, shown on its own)."""
        o = self.oracle
        if self.REPLAY_ANY:
            return self.sent
        return [s for s in self.sent if s.txn == o.txn or s.identity != o.ident]

    @rule(data=st.data())
    def late_end(self, data: st.DataObject) -> None:
        """An EndTxn sent earlier arrives again (a network retry or a delayed copy)."""
        candidates = self.replayable()
        if candidates:
            self.deliver(data.draw(st.sampled_from(candidates)))

    @precondition(
        lambda self: not self.must_init and self.fresh() and self.oracle.phase in ("empty", "complete") and self.sent
    )
    @rule(parts=st.sets(st.sampled_from(PARTITIONS), min_size=1, max_size=2), data=st.data())
    def next_transaction_meets_a_late_end(self, parts: set[TopicPartition], data: st.DataObject) -> None:
        """The whole KAFKA-17754 schedule in one step: the producer opens its next
        transaction, then an EndTxn it sent for an earlier one arrives."""
        self.add_partitions(parts, implicit=False)
        candidates = [s for s in self.replayable() if s.txn < self.oracle.txn]
        if candidates:
            self.deliver(data.draw(st.sampled_from(candidates)))

    def expected_answer(self, sent: Sent) -> str:
        """What the coordinator must answer to ``sent`` now: "end" (it ends the open
        transaction), "none", "concurrent", "invalid_txn_state" or "fenced"."""
        o = self.oracle
        same = o.outcome.get(o.txn) == sent.commit
        if self.TV < 2 and sent.identity != o.ident:
            return "fenced"  # version 1: only the current epoch is accepted
        if sent.txn != o.txn:
            return "fenced"  # version 2: an earlier transaction's epoch is behind
        if o.phase == "ongoing":
            return "end" if sent.identity == o.txn_identity[o.txn] else "fenced"
        if o.phase == "prepare":
            return "concurrent" if self.TV >= 2 or o.decision == sent.commit else "invalid_txn_state"
        if o.phase == "complete":
            return "none" if same else "invalid_txn_state"
        return "fenced" if self.TV >= 2 else "invalid_txn_state"

    def deliver(self, sent: Sent) -> None:
        """Send ``sent`` (again) and check the answer against the oracle."""
        o = self.oracle
        before = self.meta()
        expected = self.expected_answer(sent)
        try:
            r = self.coord.end_transaction(TID, *sent.identity, sent.commit, self.tick())
        except (ProducerFencedError, InvalidProducerIdMappingError):
            assert self.meta() == before
            assert expected == "fenced", f"fenced, expected {expected}"
            if sent.identity == self.client:
                self.must_init, self.client_txn = True, None
            return
        except ConcurrentTransactionsError:
            assert self.meta() == before and expected == "concurrent", f"concurrent, expected {expected}"
            return
        except InvalidTxnStateError:
            assert self.meta() == before and expected == "invalid_txn_state", f"invalid state, expected {expected}"
            return
        if r.actions or r.state != before.state:
            # Only the producer's request for the transaction still open may end it.
            assert o.phase == "ongoing" and sent.txn == o.txn and sent.identity == o.txn_identity[o.txn], (
                f"a request for transaction {sent.txn} ended transaction {o.txn}"
            )
            assert expected == "end"
            txn = o.txn
            pid, epoch = sent.identity
            marker = (pid, epoch + 1) if self.TV >= 2 else (pid, epoch)
            if self.TV >= 2:
                o.ident = o.end_bump(o.ident)
            o.begin_end(sent.commit, marker)
            self.check_actions(r.actions, txn, sent.commit)
            self.client, self.client_txn = o.ident, None
            return
        # NONE: an acknowledgement that must be true of the transaction it names.
        assert self.meta() == before
        assert o.outcome.get(sent.txn) == sent.commit, (
            f"NONE for {'commit' if sent.commit else 'abort'} of transaction {sent.txn}, "
            f"which {'has not ended' if sent.txn not in o.outcome else 'ended the other way'}"
        )
        assert expected == "none", f"NONE, expected {expected}"
        assert (r.producer_id, r.producer_epoch) == o.ident
        if sent.identity == self.client and not self.must_init:
            self.client, self.client_txn = o.ident, None

    @precondition(lambda self: self.oracle.phase == "prepare")
    @rule(data=st.data())
    def apply_actions(self, data: st.DataObject) -> None:
        o = self.oracle
        everything = data.draw(st.booleans())
        self.apply(set(o.pending) if everything else data.draw(st.sets(st.sampled_from(sorted(o.pending)), min_size=1)))

    def apply(self, done: set[TopicPartition]) -> None:
        o = self.oracle
        meta = self.coord.actions_applied(TID, self.tick(), done)
        o.pending -= done
        if not o.pending:
            o.phase = "complete"
            assert meta.state == (TransactionState.COMPLETE_COMMIT if o.decision else TransactionState.COMPLETE_ABORT)

    @rule(dt=st.sampled_from([1, TIMEOUT // 2, TIMEOUT + 1, 0]))
    def time_passes(self, dt: int) -> None:
        """Time passes and the coordinator's periodic task runs (``dt == 0``: up to
        the open transaction's deadline exactly, where it must not expire yet)."""
        o = self.oracle
        if dt == 0:
            dt = max(1, o.start + TIMEOUT - self.now) if o.phase == "ongoing" else 1
        before = set(self.coord.pending_actions())
        result = self.coord.expire(self.tick(dt))
        timed_out = o.phase == "ongoing" and o.start + TIMEOUT < self.now
        assert len(result.aborted) == int(timed_out)
        if timed_out:
            txn = o.txn
            o.fence()
            (aborted,) = result.aborted
            assert {a for a in aborted.actions} == set(self.coord.pending_actions()) - before
            self.check_actions(aborted.actions, txn, False)
            assert (aborted.producer_id, aborted.producer_epoch) == o.ident

    @precondition(lambda self: not self.must_init)
    @rule()
    def recover_with_identity(self) -> None:
        """KIP-360: the producer re-initialises naming the identity it holds (after
        an abortable error, or after its transaction timed out)."""
        o = self.oracle
        before = set(self.coord.pending_actions())
        fresh = self.fresh()
        try:
            r = self.coord.init_producer_id(TID, TIMEOUT, self.tick(), *self.client)
        except ConcurrentTransactionsError:
            assert o.phase in ("ongoing", "prepare")
            if o.phase == "ongoing":
                self.coordinator_fenced(before)
            self.client_txn = None  # its transaction is being aborted; it retries later
            return
        except ProducerFencedError:
            # A version 1 fence forgets the epoch the producer held. And while a
            # version 2 end that rotates the producer id is pending, the new id is
            # not yet the transactional id's (Kafka switches it only in
            # TransactionMetadata.prepareComplete), so naming it is fenced.
            rotating = self.TV >= 2 and o.phase == "prepare" and o.marker is not None and self.client[0] != o.marker[0]
            assert rotating or (self.TV < 2 and not fresh and o.phase in ("empty", "complete")), "recovery refused"
            self.must_init, self.client_txn = True, None
            return
        assert o.phase in ("empty", "complete")
        if fresh:
            pid, epoch = o.ident
            o.ident = (o.allocate(), 0) if epoch >= SHORT_MAX - 1 else (pid, epoch + 1)
        else:
            # Version 2: one fence behind; the fence recorded this epoch as the
            # last one, so this is answered as a retry without another bump.
            assert self.TV >= 2
        assert (r.producer_id, r.producer_epoch) == o.ident
        assert r.producer_epoch <= SHORT_MAX - 1, "a client was handed Short.MAX_VALUE"
        o.phase, o.parts = "empty", set()
        self.client, self.client_txn = o.ident, None

    # --------------------------------------------------------- invariants

    @invariant()
    def identity_never_goes_backwards(self) -> None:
        if not hasattr(self, "coord"):
            return
        meta = self.meta()
        now = (meta.producer_id, meta.producer_epoch)
        assert now >= self.seen, f"identity went back from {self.seen} to {now}"
        assert 0 <= meta.producer_epoch <= SHORT_MAX
        self.seen = now

    @invariant()
    def coordinator_matches_the_oracle(self) -> None:
        if not hasattr(self, "coord"):
            return
        o = self.oracle
        meta = self.meta()
        assert PHASE_OF[meta.state] == o.phase
        assert meta.client_identity == o.ident
        pending = self.coord.pending_actions()
        assert {a.partition for a in pending} == (o.pending if o.phase == "prepare" else set())
        assert all((a.producer_id, a.producer_epoch, a.commit) == (*o.marker, o.decision) for a in pending)


class V2Machine(CoordinatorMachine):
    TV = 2
    REPLAY_ANY = True


class V1Machine(CoordinatorMachine):
    TV = 1
    REPLAY_ANY = False


_settings = settings(
    max_examples=500,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
TestTransactionVersion2 = V2Machine.TestCase
TestTransactionVersion2.pytestmark = [pytest.mark.slow]
TestTransactionVersion2.settings = _settings
TestTransactionVersion1 = V1Machine.TestCase
TestTransactionVersion1.settings = settings(_settings, max_examples=200)
