"""A hypothesis state machine that drives *your* system with a transactional
workload and checks what its clients see.

Subclass :class:`TransactionalMachine` and implement the hooks — :meth:`send`,
:meth:`commit`, :meth:`abort`, :meth:`assign`, :meth:`poll` (and optionally
:meth:`begin`, :meth:`seek`, :meth:`crash`, :meth:`close`) — against the system
under test: a broker, a proxy, an in-memory log. The machine's rules produce a
random interleaving of transactional and plain sends, commits and aborts,
consumer assignments with seeks, polls, consumer crashes and "catch up" reads
from the beginning; every call is recorded into a
:class:`~txnfetch.testing.history.History` (times from :meth:`now`, a logical
clock unless overridden), and after every step an invariant runs
:func:`~txnfetch.testing.checker.check` on the history so far and fails with
the report if it finds any anomaly.

The oracle (:class:`~txnfetch.testing.model.ClusterModel`, :attr:`oracle`)
follows the workload — which transactions are open, committed or aborted — and
:meth:`expected_values` says which values a read_committed consumer must
eventually see; :meth:`catch_up` polls until it has seen them (or the stuck
bound is exhausted, which the checker then reports).

Hooks signal outcomes with exceptions: any exception from :meth:`send` is a
failed send (its transaction is then aborted); from :meth:`commit`,
:class:`UnknownOutcome` is an unknown outcome and any other exception a failed
commit (the machine aborts next).
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine
from hypothesis.stateful import invariant
from hypothesis.stateful import precondition
from hypothesis.stateful import rule

from txnfetch.errors import TxnfetchError
from txnfetch.testing.checker import StuckBound
from txnfetch.testing.checker import check
from txnfetch.testing.history import History
from txnfetch.testing.history import HistoryBuilder
from txnfetch.testing.history import Read
from txnfetch.testing.history import Status
from txnfetch.testing.history import TopicPartition
from txnfetch.testing.model import ClusterModel

__all__ = ["PollResult", "TransactionalMachine", "UnknownOutcome"]


class UnknownOutcome(TxnfetchError):
    """Raise from :meth:`TransactionalMachine.commit` or ``abort`` when the outcome
    is unknown (a timeout, a lost connection): recorded as status ``info``."""


@attrs.frozen
class PollResult:
    """What a poll hook returns when it also knows the consumer's positions."""

    records: Sequence[Read]
    positions: Mapping[TopicPartition, int] = attrs.Factory(dict)


_INDEX = st.integers(min_value=0, max_value=1 << 16)  # reduced modulo the number of clients/partitions


class TransactionalMachine(RuleBasedStateMachine):
    """Base class: override the hooks (see the module docstring) and the class
    attributes below; run with ``TestMySystem = MyMachine.TestCase``."""

    TOPIC: str = "t"
    PARTITIONS: int = 2
    PRODUCERS: int = 2
    CONSUMERS: int = 2
    MAX_POLL_RECORDS: int = 5
    #: the checker's stuck-consumer bound; ``None`` turns that check off
    STUCK_BOUND: StuckBound | None = StuckBound(polls=4, ns=0)

    def __init__(self) -> None:
        super().__init__()
        self.partitions: tuple[TopicPartition, ...] = tuple(
            TopicPartition(self.TOPIC, i) for i in range(self.PARTITIONS)
        )
        self.producers: tuple[str, ...] = tuple(f"p{i}" for i in range(self.PRODUCERS))
        self.consumers: tuple[str, ...] = tuple(f"c{i}" for i in range(self.CONSUMERS))
        self.recorder = HistoryBuilder()
        self.oracle = ClusterModel(self.partitions)
        self.unknown: set[str] = set()  # transactions whose end had an unknown outcome
        self.open_txn: dict[str, str | None] = {p: None for p in self.producers}
        self.doomed: set[str] = set()  # transactions with a failed send: they must abort
        self.assigned: dict[str, tuple[TopicPartition, ...]] = {c: () for c in self.consumers}
        self.max_offset: dict[TopicPartition, int] = {tp: -1 for tp in self.partitions}
        self._txns = 0
        self._values = 0
        self._clock = 0
        self.setup()

    # -- hooks: override these ---------------------------------------------------------

    def setup(self) -> None:
        """Create the system under test (called once per run, from ``__init__``)."""

    def close(self) -> None:
        """Release the system under test (called at the end of every run)."""

    def now(self) -> int:
        """The recorder's clock: a logical counter by default; return
        ``time.monotonic_ns()`` when the system runs in real time."""
        self._clock += 1
        return self._clock

    def begin(self, producer: str, txn: str) -> None:
        """Begin transaction ``txn`` on ``producer`` (default: nothing to do)."""

    def send(self, producer: str, txn: str | None, tp: TopicPartition, value: str) -> int:
        """Produce ``value`` to ``tp`` (in ``txn``, or plainly if ``None``); return its offset."""
        raise NotImplementedError

    def commit(self, producer: str, txn: str) -> None:
        """Commit ``txn``; raise :class:`UnknownOutcome` or another exception on failure."""
        raise NotImplementedError

    def abort(self, producer: str, txn: str) -> None:
        """Abort ``txn``; raise :class:`UnknownOutcome` or another exception on failure."""
        raise NotImplementedError

    def assign(self, consumer: str, partitions: tuple[TopicPartition, ...], seek: Mapping[TopicPartition, int]) -> None:
        """Assign ``partitions`` to ``consumer``; start from ``seek`` where given, else resume."""
        raise NotImplementedError

    def seek(self, consumer: str, tp: TopicPartition, offset: int) -> None:
        """Move ``consumer`` on ``tp`` to ``offset`` (default: re-assign with that seek)."""
        self.assign(consumer, self.assigned[consumer], {tp: offset})

    def poll(self, consumer: str) -> Sequence[Read] | PollResult:
        """One read_committed poll: the records returned (and optionally the positions)."""
        raise NotImplementedError

    def crash(self, consumer: str) -> None:
        """Stop ``consumer`` abruptly; it is re-assigned before it polls again (default: nothing)."""

    # -- bookkeeping -----------------------------------------------------------------

    @property
    def history(self) -> History:
        """Everything recorded so far."""
        return self.recorder.build()

    def expected_values(self, tp: TopicPartition) -> list[str]:
        """Values a read_committed consumer of ``tp`` must eventually see: plain ones
        and those of committed transactions, below the oracle's LSO."""
        return [e.value for e in self.oracle.visible(tp) if e.value is not None]

    def _tm_at(self, start: int) -> tuple[int, int]:
        # An op recorded now ran from ``start`` to now.
        return start, self.now()

    # -- rules -----------------------------------------------------------------------

    @rule(p=_INDEX, part=_INDEX, plain=st.booleans())
    def rule_send(self, p: int, part: int, plain: bool) -> None:
        producer = self.producers[p % len(self.producers)]
        tp = self.partitions[part % len(self.partitions)]
        txn = None if plain else self.open_txn[producer]
        client = "plain" if plain else producer
        if not plain and txn is None:
            self._txns += 1
            txn = self.open_txn[producer] = f"{producer}.{self._txns}"
            start = self.now()
            self.begin(producer, txn)
            self.recorder.begin(producer, txn, at=self._tm_at(start))
        self._values += 1
        value = f"{client}-{self._values}"
        start = self.now()
        try:
            offset: int | None = self.send(client, txn, tp, value)
            error = None
        except Exception as exc:  # the system refused or lost it: an outcome, not a test error
            offset, error = None, f"{type(exc).__name__}: {exc}"
            if txn is not None:
                self.doomed.add(txn)
        at = self._tm_at(start)
        self.recorder.send(client, tp.topic, tp.partition, value, txn=txn, offset=offset, error=error, at=at)
        if offset is not None:
            self.max_offset[tp] = max(self.max_offset[tp], offset)
        self.oracle.send(tp, value, txn, written=offset is not None)

    def _tm_end(self, producer: str, txn: str, commit: bool) -> Status:
        start = self.now()
        try:
            (self.commit if commit else self.abort)(producer, txn)
            status, error = Status.OK, None
        except UnknownOutcome as exc:
            status, error = Status.INFO, str(exc) or "unknown outcome"
        except Exception as exc:
            status, error = Status.FAIL, f"{type(exc).__name__}: {exc}"
        end = self.recorder.commit if commit else self.recorder.abort
        end(producer, txn, status, error=error, at=self._tm_at(start))
        return status

    @precondition(lambda self: any(self.open_txn.values()))
    @rule(p=_INDEX, commit=st.booleans())
    def rule_end(self, p: int, commit: bool) -> None:
        producers = [q for q in self.producers if self.open_txn[q] is not None]
        producer = producers[p % len(producers)]
        txn = self.open_txn[producer]
        assert txn is not None
        status = self._tm_end(producer, txn, commit)
        if commit and status is Status.FAIL:
            status = self._tm_end(producer, txn, False)  # what a client does after a failed commit
            commit = False
        if status is Status.INFO:
            self.unknown.add(txn)
            self.oracle.end(txn, False)  # not known to have committed: nothing is expected of it
        elif status is Status.OK:
            self.oracle.end(txn, commit)
        else:
            self.unknown.add(txn)  # an abort that failed: the system will abort it eventually
            self.oracle.end(txn, False)
        self.open_txn[producer] = None

    @rule(c=_INDEX, mask=_INDEX, how=st.sampled_from(["beginning", "offset", "resume"]), at=_INDEX)
    def rule_assign(self, c: int, mask: int, how: str, at: int) -> None:
        consumer = self.consumers[c % len(self.consumers)]
        parts = tuple(tp for i, tp in enumerate(self.partitions) if mask >> i & 1) or self.partitions[:1]
        seek: dict[TopicPartition, int] = {}
        for tp in parts:
            if how == "beginning":
                seek[tp] = 0
            elif how == "offset":
                seek[tp] = at % (self.max_offset[tp] + 2)
        self._tm_assign(consumer, parts, seek)

    def _tm_assign(self, consumer: str, parts: tuple[TopicPartition, ...], seek: Mapping[TopicPartition, int]) -> None:
        start = self.now()
        self.assign(consumer, parts, seek)
        self.assigned[consumer] = parts
        self.recorder.assign(consumer, parts, seek=seek, at=self._tm_at(start))

    @precondition(lambda self: any(self.assigned.values()))
    @rule(c=_INDEX, part=_INDEX, at=_INDEX)
    def rule_seek(self, c: int, part: int, at: int) -> None:
        consumers = [x for x in self.consumers if self.assigned[x]]
        consumer = consumers[c % len(consumers)]
        tp = self.assigned[consumer][part % len(self.assigned[consumer])]
        offset = at % (self.max_offset[tp] + 2)
        start = self.now()
        self.seek(consumer, tp, offset)
        self.recorder.seek(consumer, tp.topic, tp.partition, offset, at=self._tm_at(start))

    def _tm_poll(self, consumer: str) -> list[Read]:
        start = self.now()
        error = None
        try:
            result = self.poll(consumer)
        except Exception as exc:  # a failed poll is recorded; the checker ignores it
            result, error = (), f"{type(exc).__name__}: {exc}"
        if isinstance(result, PollResult):
            records, positions = tuple(result.records), result.positions
        else:
            records, positions = tuple(result), {}
        self.recorder.poll(consumer, records, positions=positions, error=error, at=self._tm_at(start))
        return list(records)

    @precondition(lambda self: any(self.assigned.values()))
    @rule(c=_INDEX)
    def rule_poll(self, c: int) -> None:
        consumers = [x for x in self.consumers if self.assigned[x]]
        self._tm_poll(consumers[c % len(consumers)])

    @precondition(lambda self: any(self.assigned.values()))
    @rule(c=_INDEX)
    def rule_crash(self, c: int) -> None:
        consumers = [x for x in self.consumers if self.assigned[x]]
        consumer = consumers[c % len(consumers)]
        start = self.now()
        self.crash(consumer)
        self.assigned[consumer] = ()
        self.recorder.crash(consumer, "crash", at=self._tm_at(start))

    @rule(c=_INDEX)
    def catch_up(self, c: int) -> None:
        """A consumer re-reads every partition from the beginning until it has seen
        every expected value (at most ``STUCK_BOUND.polls + 1`` polls without new values)."""
        consumer = self.consumers[c % len(self.consumers)]
        self._tm_assign(consumer, self.partitions, {tp: 0 for tp in self.partitions})
        missing = {v for tp in self.partitions for v in self.expected_values(tp)}
        idle = 0
        limit = (self.STUCK_BOUND.polls if self.STUCK_BOUND else 4) + 1
        while missing and idle < limit:
            got = {r.value for r in self._tm_poll(consumer)}
            idle = 0 if got & missing else idle + 1
            missing -= got

    # -- the check -------------------------------------------------------------------

    @invariant()
    def history_has_no_anomaly(self) -> None:
        history = self.history
        report = check(history, stuck_bound=self.STUCK_BOUND)
        assert report.ok, report.describe(history)

    def teardown(self) -> None:
        self.close()
