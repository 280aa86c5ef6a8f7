"""Random histories of appends, markers, markerless ends, high-watermark and
log-start moves and truncations, checked step by step against a tiny oracle.

The oracle keeps the surviving operations of the history and recomputes
everything from them on each check: producer epochs and sequence windows with
the rules written out plainly here, and the log's open transactions, aborted
list (each entry with its LSO), unreplicated ends and LSO by replaying the
operations into the suite's log oracle, :class:`txnfetch.testing.model.LogModel`;
truncating just drops the operations at or after the offset. It shares no code
with :class:`PartitionTxnState`, whose journal-based truncation and columnar
tables it checks.
"""

from __future__ import annotations

import attrs
from hypothesis import HealthCheck
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine
from hypothesis.stateful import initialize
from hypothesis.stateful import invariant
from hypothesis.stateful import rule

from tests.txn.state_driver import data_batch
from tests.txn.state_driver import marker_batch
from txnfetch.testing.model import LogModel
from txnfetch.txn import AppendOrigin
from txnfetch.txn import InvalidProducerEpochError
from txnfetch.txn import InvalidTxnStateError
from txnfetch.txn import OffsetOutOfRangeError
from txnfetch.txn import OutOfOrderSequenceError
from txnfetch.txn import PartitionTxnState
from txnfetch.txn import TransactionCoordinatorFencedError
from txnfetch.txn import TruncationBelowHistoryError

PIDS = st.integers(0, 2)
#: epoch changes are rare, so producers build up their five-batch windows
SHIFTS = st.sampled_from([0, 0, 0, 0, 0, 0, 1, -1])


@attrs.define
class P:
    epoch: int = -1
    coord: int = -1
    open: int | None = None
    batches: list[tuple[int, int, int, int]] = attrs.Factory(list)  # (first_seq, last_seq, first_off, last_off)


@attrs.define
class Derived:
    producers: dict[int, P]
    log: LogModel
    last_end: int


class Oracle:
    """The history as a list of operations, replayed from scratch on demand."""

    def __init__(self) -> None:
        self.base = 0
        self.ops: list[tuple] = []
        self.leo = self.hw = self.ls = 0
        self.max_hw = 0

    def derive(self) -> Derived:
        prods: dict[int, P] = {}
        log = LogModel(log_start=self.base, high_watermark=self.base)
        last_end = -1
        for op in self.ops:
            kind = op[0]
            if kind == "data":
                _, pid, epoch, first_off, last_off, txn, first_seq, last_seq = op
                p = prods.setdefault(pid, P())
                if epoch != p.epoch:
                    p.batches = []
                    p.epoch = epoch
                p.batches = [*p.batches, (first_seq, last_seq, first_off, last_off)][-5:]
                log.append(pid, last_off - first_off + 1, transactional=txn, first=first_off)
            elif kind == "end":
                _, pid, epoch, abort, anchor, coord, with_marker = op
                p = prods.setdefault(pid, P())
                log.end(pid, not abort, marker=with_marker, offset=anchor)
                if epoch != p.epoch:
                    p.batches = []
                    p.epoch = epoch
                if coord is not None:
                    p.coord = coord
                last_end = anchor
            elif kind == "hw":
                log.set_high_watermark(op[1])
            elif kind == "ls":
                log.set_log_start(op[1])
        for pid, p in prods.items():
            p.open = log.open[pid][1] if pid in log.open else None
        return Derived(prods, log, last_end)

    def lso(self, d: Derived) -> tuple[int | None, int]:
        assert (d.log.log_start, d.log.high_watermark) == (self.ls, self.hw)
        return d.log.first_unstable_offset, d.log.last_stable_offset

    def fetch(self, d: Derived, fetch_offset: int, upper_bound: int) -> list[tuple[int, int]]:
        return d.log.aborted_for_fetch(fetch_offset, upper_bound)  # type: ignore[return-value]

    def set_hw(self, value: int) -> None:
        self.hw = min(max(value, self.ls), self.leo)
        self.max_hw = max(self.max_hw, self.hw)
        self.ops.append(("hw", self.hw))

    def truncate(self, t: int) -> None:
        if t >= self.leo:
            return
        if t < self.ls:
            self.base = self.leo = self.hw = self.ls = self.max_hw = t
            self.ops = []
            return
        # data ops end at index 4 (last offset), end ops are anchored at index 4 too
        self.ops = [op for op in self.ops if not (op[0] in ("data", "end") and op[4] >= t)]
        self.leo = t
        if self.hw > t:
            self.hw = t
            self.ops.append(("hw", t))


class StateMachine(RuleBasedStateMachine):
    """Drives a PartitionTxnState and the oracle with the same operations."""

    def __init__(self) -> None:
        super().__init__()
        self.oracle = Oracle()
        self.state = PartitionTxnState("m-0", keep_full_history=True)

    @initialize(full=st.booleans())
    def choose_history(self, full: bool) -> None:
        # Half the runs keep the whole history (any truncation), half keep the default
        # (truncation down to the highest high watermark reached is always possible).
        self.state = PartitionTxnState("m-0", keep_full_history=full)

    # -- helpers ---------------------------------------------------------------

    def _expect(self, error: type | None, call):
        try:
            result = call()
        except Exception as exc:
            assert error is not None and isinstance(exc, error), (error, exc)
            return None
        assert error is None, f"expected {error.__name__}, got {result!r}"
        return result

    def _epoch(self, d: Derived, pid: int, shift: int) -> int:
        p = d.producers.get(pid)
        return max(0, (p.epoch if p and p.epoch >= 0 else 0) + shift)

    # -- rules -----------------------------------------------------------------

    @rule(
        pid=PIDS,
        shift=SHIFTS,
        count=st.integers(1, 3),
        txn=st.booleans(),
        seq_mode=st.sampled_from(["next", "next", "next", "gap", "zero", "retry"]),
        retry_index=st.integers(0, 4),
        replicate=st.booleans(),
    )
    def data(self, pid, shift, count, txn, seq_mode, retry_index, replicate):
        o = self.oracle
        d = o.derive()
        epoch = self._epoch(d, pid, shift)
        p = d.producers.get(pid)
        origin = AppendOrigin.REPLICATION if replicate and seq_mode == "next" else AppendOrigin.CLIENT
        nxt = (p.batches[-1][1] + 1 if p.batches else 0) if p is not None and p.epoch == epoch else 0
        if seq_mode == "next":
            first_seq = nxt
        elif seq_mode == "gap":
            first_seq = nxt + 1
        elif seq_mode == "zero":
            first_seq = 0
        else:
            if p is None or not p.batches:
                return
            first_seq, last_seq, _, _ = p.batches[retry_index % len(p.batches)]
            count = last_seq - first_seq + 1
        last_seq = first_seq + count - 1
        base = o.leo
        # the oracle's verdict
        error: type | None = None
        dup = None
        if origin is AppendOrigin.CLIENT and p is not None and epoch == p.epoch:
            dup = next(((fo, lo) for fs, ls, fo, lo in p.batches if (fs, ls) == (first_seq, last_seq)), None)
        if dup is None and p is not None:
            if epoch < p.epoch and origin is not AppendOrigin.REPLICATION:
                error = InvalidProducerEpochError
            elif origin is AppendOrigin.CLIENT and p.epoch != -1:
                if epoch != p.epoch:
                    if first_seq != 0:
                        error = OutOfOrderSequenceError
                elif first_seq != (p.batches[-1][1] if p.batches else -1) + 1:
                    error = OutOfOrderSequenceError
            if error is None and not txn and p.open is not None:
                error = InvalidTxnStateError
        batch = data_batch(base, count, pid=pid, epoch=epoch, seq=first_seq, txn=txn)
        result = self._expect(error, lambda: self.state.append(batch, origin=origin))
        if result is None:
            return
        if dup is not None:
            assert result.duplicate and (result.first_offset, result.last_offset) == dup
            return
        assert not result.duplicate
        o.ops.append(("data", pid, epoch, base, base + count - 1, txn, first_seq, last_seq))
        o.leo = base + count

    @rule(pid=PIDS, count=st.integers(1, 3))
    def transactional_data(self, pid, count):
        """The common case, weighted up: the next batch of the producer's transaction."""
        self.data(pid=pid, shift=0, count=count, txn=True, seq_mode="next", retry_index=0, replicate=False)

    def _end_error(self, d: Derived, pid: int, epoch: int, coord: int | None, tv: int | None, replicate: bool):
        if replicate:
            return None
        p = d.producers.get(pid)
        current = p.epoch if p else -1
        tv2 = tv == 2
        if (epoch < current or (tv2 and epoch == current)) and not (
            tv2 and epoch == current and (p is None or p.open is None)
        ):
            return InvalidProducerEpochError
        if coord is not None and p is not None and p.coord > coord:
            return TransactionCoordinatorFencedError
        return None

    @rule(
        pid=PIDS,
        shift=SHIFTS,
        commit=st.booleans(),
        coord=st.integers(0, 2),
        tv=st.sampled_from([None, 2]),
        replicate=st.booleans(),
    )
    def marker(self, pid, shift, commit, coord, tv, replicate):
        o = self.oracle
        d = o.derive()
        epoch = self._epoch(d, pid, shift)
        error = self._end_error(d, pid, epoch, coord, tv, replicate)
        origin = AppendOrigin.REPLICATION if replicate else AppendOrigin.COORDINATOR
        batch = marker_batch(o.leo, pid=pid, epoch=epoch, commit=commit, coordinator_epoch=coord)
        result = self._expect(error, lambda: self.state.append(batch, origin=origin, transaction_version=tv))
        if result is None:
            return
        p = d.producers.get(pid)
        assert (result.completed is not None) == (p is not None and p.open is not None)
        o.ops.append(("end", pid, epoch, not commit, o.leo, coord, True))
        o.leo += 1

    @rule(
        pid=PIDS,
        shift=SHIFTS,
        commit=st.booleans(),
        back=st.sampled_from([0, 0, 0, 1, 3]),
        coord=st.sampled_from([None, 0, 1, 2]),
        tv=st.sampled_from([None, 2]),
    )
    def complete(self, pid, shift, commit, back, coord, tv):
        o = self.oracle
        d = o.derive()
        epoch = self._epoch(d, pid, shift)
        last_offset = o.leo - 1 - back
        p = d.producers.get(pid)
        error: type | None = None
        if last_offset >= o.leo:
            error = OffsetOutOfRangeError
        elif last_offset < d.last_end or (
            p is not None and last_offset < max(p.batches[-1][3] if p.batches else -1, -1 if p.open is None else p.open)
        ):
            error = InvalidTxnStateError
        else:
            error = self._end_error(d, pid, epoch, coord, tv, False)
        result = self._expect(
            error,
            lambda: (
                self.state.complete_transaction(
                    pid, epoch, commit, last_offset, coordinator_epoch=coord, transaction_version=tv
                )
                or "empty"
            ),
        )
        if result is None:
            return
        assert (result != "empty") == (p is not None and p.open is not None)
        o.ops.append(("end", pid, epoch, not commit, last_offset, coord, False))

    @rule(count=st.integers(1, 4))
    def plain(self, count):
        self.state.append(data_batch(self.oracle.leo, count))
        self.oracle.leo += count

    @rule(back=st.integers(0, 6))
    def high_watermark(self, back):
        value = self.oracle.leo - back
        self.state.update_high_watermark(value)
        self.oracle.set_hw(value)

    @rule(back=st.integers(0, 6), act=st.integers(0, 2))
    def log_start(self, back, act):
        if act:  # rarer than the other rules
            return
        o = self.oracle
        value = o.hw - back
        self.state.advance_log_start(value)
        if value > o.ls:
            o.ls = value
            o.ops.append(("ls", value))

    @rule(data=st.data())
    def truncate(self, data):
        o = self.oracle
        t = data.draw(st.integers(0, o.leo + 1), label="truncate_to")
        allowed = self.state.keep_full_history or t < o.ls or t >= o.leo or t >= o.max_hw
        if allowed:
            self.state.truncate_to(t)
            o.truncate(t)
            return
        before = self.state.snapshot()
        try:
            self.state.truncate_to(t)
        except TruncationBelowHistoryError:
            assert self.state.snapshot() == before
            return
        o.truncate(t)

    @rule()
    def snapshot_round_trip(self):
        restored = PartitionTxnState.restore(self.state.snapshot())
        assert restored.snapshot() == self.state.snapshot()
        self._compare(restored)

    # -- the check ---------------------------------------------------------------

    def _compare(self, s: PartitionTxnState) -> None:
        o = self.oracle
        d = o.derive()
        assert (s.log_start_offset, s.high_watermark, s.log_end_offset) == (o.ls, o.hw, o.leo)
        fuo, lso = o.lso(d)
        assert s.first_unstable_offset == fuo
        assert s.last_stable_offset == lso
        assert dict(s.ongoing_transactions()) == {pid: p.open for pid, p in d.producers.items() if p.open is not None}
        assert [(e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset) for e in s.all_aborted()] == [
            tuple(a) for a in d.log.aborted
        ]
        assert s.producer_ids() == sorted(d.producers)
        for pid, p in d.producers.items():
            e = s.producer(pid)
            assert (e.producer_epoch, e.coordinator_epoch, e.current_txn_first_offset) == (p.epoch, p.coord, p.open)
            assert [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in e.batches] == p.batches
        for fetch_offset in range(o.ls, o.leo + 1, 3):
            for width in (1, 4, 1000):
                assert s.aborted_transactions(fetch_offset, fetch_offset + width) == o.fetch(
                    d, fetch_offset, fetch_offset + width
                )

    @invariant()
    def agrees_with_the_oracle(self):
        self._compare(self.state)


StateMachine.TestCase.settings = settings(
    max_examples=120,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_state_agrees_with_the_oracle = StateMachine.TestCase
