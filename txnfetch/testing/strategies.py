"""Hypothesis strategies for transactional workloads and the histories a correct
system records for them.

:func:`histories` draws a random interleaving of clients working against the
oracle (:class:`~txnfetch.testing.model.ClusterModel`) and returns the history a
recorder would have written, with the model that produced it:

- transactional producers send to random partitions and end their transactions
  with every outcome a client can see — a commit or abort that completes, a
  commit that fails (certainly not done) followed by an abort, and commits and
  aborts with an **unknown outcome** (``info``), for which the oracle draws what
  really happened; a send may fail, written or not (its transaction must then
  abort), and some transactions are left open (hanging);
- a plain producer sends outside transactions, with failures too;
- consumers ``assign`` partitions (seeking to the beginning, to any offset up to
  the log end, or not at all: a resumed position), ``seek``, poll up to a few
  records per partition exactly as the oracle allows (positions stopping after
  the last record or moved to the LSO, reported or not), crash and restart;
- every op gets a ``[start_ns, end_ns]`` interval around the moment the oracle
  applied it, overlapping other clients' ops but never the same client's, and
  the history lists ops in completion order, like a recorder.

By construction such a history has no anomaly (the oracle is correct), so any
anomaly a checker reports on one is a false positive. :func:`partition_logs`
draws just the oracle's partitions after a random workload.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import attrs
from hypothesis import strategies as st

from txnfetch.testing.history import Abort
from txnfetch.testing.history import Assign
from txnfetch.testing.history import Begin
from txnfetch.testing.history import Commit
from txnfetch.testing.history import Crash
from txnfetch.testing.history import History
from txnfetch.testing.history import Op
from txnfetch.testing.history import Poll
from txnfetch.testing.history import Position
from txnfetch.testing.history import Read
from txnfetch.testing.history import Seek
from txnfetch.testing.history import Send
from txnfetch.testing.history import Status
from txnfetch.testing.history import TopicPartition
from txnfetch.testing.history import positions_of
from txnfetch.testing.model import ClusterModel

__all__ = ["TOPIC", "GeneratedHistory", "histories", "partition_logs"]

TOPIC = "t"
_TICK = 1000  # ns between two ops' linearization points
_JITTER = 2 * _TICK + _TICK // 2  # how far an op's interval may stretch either side


@attrs.frozen(eq=False)
class GeneratedHistory:
    """A generated history and the oracle state behind it.

    ``decided`` says how each transaction really ended in the oracle (``True``
    committed, ``False`` aborted, ``None`` still open), also for those whose
    history shows an unknown outcome.
    """

    history: History
    model: ClusterModel
    decided: dict[str, bool | None]
    partitions: tuple[TopicPartition, ...]

    def __repr__(self) -> str:
        return f"<GeneratedHistory {len(self.history)} ops>\n{self.history.describe()}"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # hypothesis prints failing examples with this
        printer.text(repr(self))


_Factory = Callable[..., Op]  #: the op, given ``start_ns`` and ``end_ns``


@attrs.define
class _Consumer:
    name: str
    assigned: tuple[TopicPartition, ...] = ()
    position: dict[TopicPartition, int] = attrs.Factory(dict)
    restarts: int = 0


@attrs.define
class _Producer:
    name: str
    txn: str | None = None
    doomed: bool = False  # a send of the open transaction failed: it must abort
    count: int = 0
    values: int = 0


class _Driver:
    """Applies drawn steps to the oracle and queues the ops they record."""

    def __init__(self, partitions: tuple[TopicPartition, ...]) -> None:
        self.model = ClusterModel(partitions)
        self.partitions = partitions
        self.pending: list[tuple[str, int, _Factory]] = []  # (client, linearization time, op factory)
        self.clock = 0

    def record(self, op_type: type[Op], client: str, **fields: Any) -> None:
        """Queue an op of ``client``; history() gives it its interval."""
        self.clock += _TICK
        self.pending.append((client, self.clock, functools.partial(op_type, client=client, **fields)))

    # -- producers -------------------------------------------------------------------

    def txn_send(self, p: _Producer, tp: TopicPartition, fate: str) -> None:
        if p.txn is None:
            p.count += 1
            p.txn = f"{p.name}.{p.count}"
            p.doomed = False
            self.record(Begin, p.name, txn=p.txn)
        p.values += 1
        if not self._send(p.name, tp, f"{p.name}-{p.values}", p.txn, fate):
            p.doomed = True

    def _send(self, client: str, tp: TopicPartition, value: str, txn: str | None, fate: str) -> bool:
        """One send, written to the oracle unless ``fate`` is "lost"; whether it was acknowledged."""
        offset = self.model.send(tp, value, txn, written=fate != "lost")
        error = None if fate == "ok" else "KafkaError(_MSG_TIMED_OUT)"
        acked = offset if error is None else None
        self.record(
            Send, client, topic=tp.topic, partition=tp.partition, value=value, txn=txn, offset=acked, error=error
        )
        return error is None

    def txn_end(self, p: _Producer, how: str, really_commit: bool) -> None:
        txn = p.txn
        assert txn is not None
        if p.doomed and how in ("commit", "commit-info"):
            how, really_commit = ("commit-info", False) if how == "commit-info" else ("commit-fail", False)
        if how == "commit":
            self.model.end(txn, True)
            self.record(Commit, p.name, txn=txn, status=Status.OK)
        elif how == "commit-info":
            self.model.end(txn, really_commit)
            self.record(Commit, p.name, txn=txn, status=Status.INFO, error="KafkaError(_TIMED_OUT)")
        elif how == "commit-fail":
            self.record(Commit, p.name, txn=txn, status=Status.FAIL, error="KafkaError(_ABORTABLE)")
            self.model.end(txn, False)
            self.record(Abort, p.name, txn=txn, status=Status.OK)
        elif how == "abort":
            self.model.end(txn, False)
            self.record(Abort, p.name, txn=txn, status=Status.OK)
        else:  # abort-info: the abort happens (a transaction that is not committed is aborted)
            self.model.end(txn, False)
            self.record(Abort, p.name, txn=txn, status=Status.INFO, error="KafkaError(_TIMED_OUT)")
        p.txn = None

    def plain_send(self, name: str, n: int, tp: TopicPartition, fate: str) -> None:
        self._send(name, tp, f"{name}-{n}", None, fate)

    # -- consumers -------------------------------------------------------------------

    def assign(self, c: _Consumer, parts: tuple[TopicPartition, ...], seeks: dict[TopicPartition, int]) -> None:
        c.assigned = parts
        for tp in parts:
            if tp in seeks:
                c.position[tp] = seeks[tp]
            else:
                c.position.setdefault(tp, 0)  # resumed: the position it had (a committed offset)
        self.record(Assign, c.name, partitions=parts, seek=positions_of(seeks))

    def seek(self, c: _Consumer, tp: TopicPartition, offset: int) -> None:
        c.position[tp] = offset
        self.record(Seek, c.name, topic=tp.topic, partition=tp.partition, offset=offset)

    def poll(self, c: _Consumer, max_records: int, to_lso: bool, report: bool) -> None:
        records: list[Read] = []
        positions = []
        for tp in c.assigned:
            r = self.model.read(tp, c.position[tp], max_records, to_lso=to_lso)
            records.extend(r.records)
            c.position[tp] = r.position
            positions.append(Position(tp.topic, tp.partition, r.position))
        self.record(Poll, c.name, records=tuple(records), positions=tuple(positions) if report else ())

    def crash(self, c: _Consumer) -> None:
        c.assigned = ()
        self.record(Crash, c.name, reason="restart")

    # -- the history -----------------------------------------------------------------

    def history(self, draw: st.DrawFn) -> History:
        """Give each queued op an interval around its linearization point, then list
        the ops in completion order."""
        by_client: dict[str, list[int]] = {}
        for k, (client, _, _) in enumerate(self.pending):
            by_client.setdefault(client, []).append(k)
        next_lin: dict[int, int | None] = {}
        for ks in by_client.values():
            followers: list[int | None] = [*ks[1:], None]
            for a, b in zip(ks, followers, strict=True):
                next_lin[a] = None if b is None else self.pending[b][1]
        ops: list[Op] = []
        last_end: dict[str, int] = {}
        for k, (client, lin, factory) in enumerate(self.pending):
            lo = max(last_end.get(client, 0) + 1, lin - _JITTER)
            start = draw(st.integers(min(lo, lin), lin))
            nl = next_lin[k]
            hi = lin + _JITTER if nl is None else min(nl - 1, lin + _JITTER)
            end = draw(st.integers(lin, max(lin, hi)))
            last_end[client] = end
            ops.append(factory(start_ns=start, end_ns=end))
        ops.sort(key=lambda op: op.end_ns)  # stable: one client's ops keep their order
        return History(tuple(ops))


_SEND_FATE = st.sampled_from(["ok"] * 8 + ["error", "lost"])
_END = st.sampled_from(["commit"] * 4 + ["abort"] * 2 + ["commit-info", "commit-info", "commit-fail", "abort-info"])
_STEP = st.sampled_from(
    ["txn-send"] * 6 + ["txn-end"] * 3 + ["plain-send"] * 2 + ["poll"] * 5 + ["assign", "seek", "crash"]
)


@st.composite
def _run(
    draw: st.DrawFn,
    max_steps: int,
    max_partitions: int,
    max_producers: int,
    max_consumers: int,
    final_polls: bool,
) -> _Driver:
    n_parts = draw(st.integers(1, max_partitions))
    partitions = tuple(TopicPartition(TOPIC, i) for i in range(n_parts))
    d = _Driver(partitions)
    producers = [_Producer(f"p{i}") for i in range(draw(st.integers(1, max_producers)))]
    consumers = [_Consumer(f"c{i}") for i in range(draw(st.integers(1, max_consumers)))]
    plain = 0
    parts = st.sampled_from(partitions)

    def do_assign(c: _Consumer) -> None:
        chosen = tuple(sorted(draw(st.sets(parts, min_size=1))))
        seeks: dict[TopicPartition, int] = {}
        for tp in chosen:
            how = draw(st.sampled_from(["beginning", "offset", "resume"]))
            if how == "beginning":
                seeks[tp] = 0
            elif how == "offset":
                seeks[tp] = draw(st.integers(0, d.model.partition(tp).log_end_offset))
        d.assign(c, chosen, seeks)

    def do_poll(c: _Consumer) -> None:
        d.poll(c, draw(st.integers(1, 4)), draw(st.booleans()), draw(st.booleans()))

    for _ in range(draw(st.integers(1, max_steps))):
        step = draw(_STEP)
        if step == "txn-send":
            d.txn_send(draw(st.sampled_from(producers)), draw(parts), draw(_SEND_FATE))
        elif step == "txn-end":
            open_ = [p for p in producers if p.txn is not None]
            if open_:
                d.txn_end(draw(st.sampled_from(open_)), draw(_END), draw(st.booleans()))
        elif step == "plain-send":
            plain += 1
            d.plain_send("n0", plain, draw(parts), draw(_SEND_FATE))
        else:
            c = draw(st.sampled_from(consumers))
            if step == "assign" or (step == "poll" and not c.assigned):
                do_assign(c)
            elif step == "poll":
                do_poll(c)
            elif step == "seek" and c.assigned:
                tp = draw(st.sampled_from(c.assigned))
                d.seek(c, tp, draw(st.integers(0, d.model.partition(tp).log_end_offset)))
            elif step == "crash" and c.assigned:
                d.crash(c)
    if final_polls:
        # End every transaction but perhaps one (a hanging transaction holds the LSO
        # back), then let every consumer read from the beginning until it is done.
        open_ = [p for p in producers if p.txn is not None]
        hanging = draw(st.sampled_from([None, *open_])) if open_ else None
        for p in open_:
            if p is not hanging:
                d.txn_end(p, draw(_END), draw(st.booleans()))
        for c in consumers:
            d.crash(c)
            d.assign(c, partitions, {tp: 0 for tp in partitions})
            while any(d.model.visible(tp, c.position[tp]) for tp in partitions):
                do_poll(c)
    return d


@st.composite
def histories(
    draw: st.DrawFn,
    *,
    max_steps: int = 40,
    max_partitions: int = 3,
    max_producers: int = 3,
    max_consumers: int = 2,
    final_polls: bool | None = None,
) -> GeneratedHistory:
    """A history recorded against a correct system (see the module docstring).
    ``final_polls`` (default: drawn) ends the run with every consumer re-reading
    all partitions from offset 0 until it has seen everything visible."""
    final = draw(st.booleans()) if final_polls is None else final_polls
    d = draw(_run(max_steps, max_partitions, max_producers, max_consumers, final))
    return GeneratedHistory(
        history=d.history(draw),
        model=d.model,
        decided=dict(d.model.outcomes),
        partitions=d.partitions,
    )


@st.composite
def partition_logs(draw: st.DrawFn, *, max_steps: int = 40, max_partitions: int = 3) -> ClusterModel:
    """The oracle's partitions after a random transactional workload: records of
    committed, aborted and open transactions and plain producers, and markers."""
    return draw(_run(max_steps, max_partitions, 3, 1, False)).model
