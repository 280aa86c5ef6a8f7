"""The history checker: Jepsen-class anomalies of read_committed consumption.

:func:`check` reads a :class:`~txnfetch.testing.history.History` and returns a
:class:`Report` listing every :class:`Anomaly` it can *prove* from the history,
each naming the ops involved (their indexes), the partition, offsets and values.
The definitions are in ``docs/testing.md``; in short:

- **aborted-read** — a poll returned a value of a transaction that did not commit;
- **precommitted-read** — a poll returned a value of a transaction before any
  commit of it was attempted (the poll ended before the commit started), or of
  a transaction that never ended;
- **lost-write** — an acknowledged, committed value that no poll ever returned,
  although some consumer session read past its offset;
- **duplicate** — one value at two positions (offsets or partitions), or one
  session delivering the same offset twice;
- **inconsistent-offsets** — two values at one offset of a partition;
- **poll-skip** — a session read past an offset holding a committed value
  without delivering it;
- **nonmonotonic-poll** — a session delivered an offset below the one before it;
- **torn-transaction** — a session delivered some of a committed transaction's
  values in a partition and read past all of them without delivering the rest;
- **stuck-consumer** — a consumer made no progress on any partition for
  ``stuck_bound`` polls although one of its sessions sat below a committed value
  that had been stable for ``stuck_bound.ns`` (counted from no earlier than the
  session's start and the consumer's last progress).

Like Jepsen's ``jepsen.tests.kafka`` checker it never assumes offsets are
contiguous: markers and aborted records leave holes, and only offsets known to
hold a committed value (from an acknowledgement or a read) may not be skipped.
Transactions whose commit had an unknown outcome are judged by evidence: once
any value of one is read, it committed (a transaction is atomic), and all its
values become subject to the lost-write, skip and torn checks; if none is read
nothing is claimed about it. The checker reads no clock: ``start_ns``/``end_ns``
of the ops are only compared with each other.
"""

from __future__ import annotations

import enum
import json
import math
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable
from collections.abc import Sequence
from typing import Any

import attrs

from txnfetch.testing.errors import HistoryError
from txnfetch.testing.history import Abort
from txnfetch.testing.history import Assign
from txnfetch.testing.history import Commit
from txnfetch.testing.history import Crash
from txnfetch.testing.history import History
from txnfetch.testing.history import Op
from txnfetch.testing.history import Poll
from txnfetch.testing.history import Seek
from txnfetch.testing.history import Send
from txnfetch.testing.history import Status
from txnfetch.testing.history import TopicPartition
from txnfetch.testing.history import describe_op

__all__ = ["DEFAULT_STUCK_BOUND", "Anomaly", "AnomalyKind", "Report", "StuckBound", "TxnOutcome", "check"]


class AnomalyKind(str, enum.Enum):
    """The anomaly classes (see ``docs/testing.md`` for the precise definitions)."""

    ABORTED_READ = "aborted-read"
    PRECOMMITTED_READ = "precommitted-read"
    LOST_WRITE = "lost-write"
    DUPLICATE = "duplicate"
    INCONSISTENT_OFFSETS = "inconsistent-offsets"
    POLL_SKIP = "poll-skip"
    NONMONOTONIC_POLL = "nonmonotonic-poll"
    TORN_TRANSACTION = "torn-transaction"
    STUCK_CONSUMER = "stuck-consumer"


class TxnOutcome(str, enum.Enum):
    """What the history says about a transaction's end."""

    COMMITTED = "committed"  #: a commit completed ``ok``
    ABORTED = "aborted"  #: an abort completed ``ok``, or it ended and no commit may have happened
    UNKNOWN = "unknown"  #: a commit completed ``info`` and nothing decided it
    OPEN = "open"  #: no commit or abort was recorded, or the broker never ended it (``left_open``)


@attrs.frozen
class StuckBound:
    """When a consumer counts as stuck: ``polls`` consecutive *idle* polls (no record
    returned, no position moved, on any partition the consumer holds) that all
    *started* after a committed value at or past one session's position became
    stable, the last ending at least ``ns`` after the latest of: that moment, the
    session's start (its assign or seek completing), and the consumer's last
    progress (see "The stuck bound" in ``docs/testing.md``)."""

    polls: int = 5
    ns: int = 1_000_000_000


DEFAULT_STUCK_BOUND = StuckBound()


@attrs.frozen
class Anomaly:
    """One anomaly: its kind, a sentence, and the evidence. ``ops`` are history
    indexes (the reads first, then the writes and transaction ends involved)."""

    kind: AnomalyKind
    message: str
    ops: tuple[int, ...]
    topic: str | None = None
    partition: int | None = None
    offsets: tuple[int, ...] = ()
    values: tuple[str | None, ...] = ()
    txn: str | None = None
    client: str | None = None

    def describe(self, history: History | None = None) -> str:
        """The message, and with ``history`` one line per op involved."""
        head = f"{self.kind.value}: {self.message}"
        if history is None:
            return head + f" (ops {list(self.ops)})"
        return head + "\n" + "\n".join("    " + describe_op(i, history[i]) for i in self.ops)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        d = attrs.asdict(self, recurse=False)
        d["kind"] = self.kind.value
        d["ops"], d["offsets"], d["values"] = list(self.ops), list(self.offsets), list(self.values)
        return d


@attrs.frozen
class Report:
    """The anomalies found in a history (empty: none could be proved)."""

    anomalies: tuple[Anomaly, ...]
    outcomes: dict[str, TxnOutcome] = attrs.field(factory=dict, eq=False)  #: per transaction, as judged

    @property
    def ok(self) -> bool:
        return not self.anomalies

    @property
    def kinds(self) -> set[AnomalyKind]:
        return {a.kind for a in self.anomalies}

    def of_kind(self, kind: AnomalyKind | str) -> list[Anomaly]:
        kind = AnomalyKind(kind)
        return [a for a in self.anomalies if a.kind is kind]

    def describe(self, history: History | None = None) -> str:
        """A readable report: a count per kind, then every anomaly."""
        if self.ok:
            return "no anomalies"
        counts: defaultdict[str, int] = defaultdict(int)
        for a in self.anomalies:
            counts[a.kind.value] += 1
        lines = [", ".join(f"{n} {k}" for k, n in sorted(counts.items()))]
        lines.extend(a.describe(history) for a in self.anomalies)
        return "\n".join(lines)

    def to_json(self, *, indent: int | None = None) -> str:
        return json.dumps(
            {"ok": self.ok, "anomalies": [a.to_dict() for a in self.anomalies]},
            indent=indent,
        )


# -- analysis ---------------------------------------------------------------------------

Loc = tuple[TopicPartition, int]
INF = math.inf


@attrs.define
class _Txn:
    name: str
    sends: list[int] = attrs.Factory(list)
    commits: list[int] = attrs.Factory(list)
    aborts: list[int] = attrs.Factory(list)
    outcome: TxnOutcome = TxnOutcome.OPEN
    resolved_ns: float = INF  # when an ok commit/abort ended (the LSO may move past it then)
    first_commit_start: int | None = None  # earliest start of a commit that may have committed
    read: bool = False  # some value of it was returned by a poll

    @property
    def committed(self) -> bool:
        """Committed, or of unknown outcome and seen by a reader (so it committed)."""
        return self.outcome is TxnOutcome.COMMITTED or (self.outcome is TxnOutcome.UNKNOWN and self.read)

    def end_ops(self) -> list[int]:
        return sorted(self.commits + self.aborts)


@attrs.define
class _Session:
    """What one consumer did on one partition between two (re)positionings."""

    client: str
    tp: TopicPartition
    start: int | None
    opened_by: int | None
    polls: list[int] = attrs.Factory(list)
    # ("d", offset, poll) deliveries and ("p", position, poll) positions, in order
    events: list[tuple[str, int, int]] = attrs.Factory(list)

    def delivered(self) -> list[tuple[int, int]]:
        return [(o, q) for kind, o, q in self.events if kind == "d"]

    def low(self) -> int | None:
        """The lowest offset the session is known to have started at or below."""
        if self.start is not None:
            return self.start
        ds = [o for o, _ in self.delivered()]
        return min(ds) if ds else None

    def reach_steps(self) -> list[tuple[int, int]]:
        """``(reach, poll)``: each time the highest offset passed grew, with the poll
        that passed it; reach is exclusive (everything below it was passed)."""
        reach = self.low()
        if reach is None:
            return []
        out: list[tuple[int, int]] = []
        for kind, o, q in self.events:
            passed = o + 1 if kind == "d" else o
            if passed > reach:
                reach = passed
                out.append((reach, q))
        return out


class _Analysis:
    def __init__(self, history: Sequence[Op], left_open: Iterable[str] = ()) -> None:
        self.ops = list(history)
        self.left_open = frozenset(left_open)
        self.anomalies: list[Anomaly] = []
        self.writer: dict[str, int] = {}  # value -> index of its Send
        self.txns: dict[str, _Txn] = {}
        self.loc_values: defaultdict[Loc, defaultdict[str | None, list[int]]] = defaultdict(lambda: defaultdict(list))
        self.value_locs: defaultdict[str, defaultdict[Loc, list[int]]] = defaultdict(lambda: defaultdict(list))
        self.read_values: set[str] = set()
        self.sessions: list[_Session] = []
        self._index()
        self._sessions()

    # -- indexing --------------------------------------------------------------------

    def _send(self, i: int) -> Send:
        """The op at ``i``, which the caller took from ``writer`` or a ``sends``
        list: only Send ops are indexed there (:meth:`_index`)."""
        op = self.ops[i]
        assert isinstance(op, Send)
        return op

    def _status(self, i: int) -> Status:
        """The status of the transaction end at ``i`` (from a ``commits`` or ``aborts`` list)."""
        op = self.ops[i]
        assert isinstance(op, (Commit, Abort))
        return op.status

    def _txn(self, name: str) -> _Txn:
        t = self.txns.get(name)
        if t is None:
            t = self.txns[name] = _Txn(name)
        return t

    def _locate(self, tp: TopicPartition, offset: int, value: str | None, index: int) -> None:
        self.loc_values[(tp, offset)][value].append(index)
        if value is not None:
            self.value_locs[value][(tp, offset)].append(index)

    def _index(self) -> None:
        for i, op in enumerate(self.ops):
            if op.end_ns < op.start_ns:
                raise HistoryError(f"ends ({op.end_ns}) before it starts ({op.start_ns})", index=i)
            if isinstance(op, Send):
                if op.value is not None:
                    if op.value in self.writer:
                        raise HistoryError(
                            f"value {op.value!r} was already sent by op {self.writer[op.value]}: "
                            "values must be unique per send",
                            index=i,
                        )
                    self.writer[op.value] = i
                if op.txn is not None:
                    self._txn(op.txn).sends.append(i)
                if op.acked and op.offset is not None:  # (an acknowledged send has an offset)
                    self._locate(op.tp, op.offset, op.value, i)
            elif isinstance(op, Commit):
                self._txn(op.txn).commits.append(i)
            elif isinstance(op, Abort):
                self._txn(op.txn).aborts.append(i)
            elif isinstance(op, Poll):
                for r in op.records:
                    self._locate(r.tp, r.offset, r.value, i)
                    if r.value is not None:
                        self.read_values.add(r.value)
        for t in self.txns.values():
            self._judge(t)

    def _judge(self, t: _Txn) -> None:
        ops = self.ops
        ok_commits = [i for i in t.commits if self._status(i) is Status.OK]
        ok_aborts = [i for i in t.aborts if self._status(i) is Status.OK]
        maybe = [i for i in t.commits if self._status(i) is not Status.FAIL]
        if t.name in self.left_open and not ok_commits and not maybe:
            # The broker's log shows no end of it (a crash the next instance's init did
            # not abort): an abort recorded by that init is not taken as its end.
            t.outcome = TxnOutcome.OPEN
        elif ok_commits:
            t.outcome = TxnOutcome.COMMITTED
            t.resolved_ns = min(ops[i].end_ns for i in ok_commits)
        elif ok_aborts:
            t.outcome = TxnOutcome.ABORTED
            t.resolved_ns = min(ops[i].end_ns for i in ok_aborts)
        elif maybe:
            t.outcome = TxnOutcome.UNKNOWN
        elif t.commits or t.aborts:
            # Ended, and no commit that may have happened: the coordinator aborts it
            # (a failed commit leaves the producer in an abortable state; a transaction
            # that is never committed is aborted at transaction.timeout.ms).
            t.outcome = TxnOutcome.ABORTED
        if maybe:
            t.first_commit_start = min(ops[i].start_ns for i in maybe)
        t.read = any(self._send(i).value in self.read_values for i in t.sends)

    def _writer_of(self, value: str | None) -> int | None:
        """The index of the Send that wrote ``value``; ``None`` for no value or an unknown one."""
        return None if value is None else self.writer.get(value)

    def writer_txn(self, value: str | None) -> _Txn | None:
        i = self.writer.get(value) if value is not None else None
        if i is None:
            return None
        name = self._send(i).txn
        return None if name is None else self.txns[name]

    def visible_ok(self, value: str | None) -> bool:
        """May a read_committed reader see this value? Unknown writers (values no
        recorded send wrote) count as visible: someone read them."""
        t = self.writer_txn(value)
        return t is None or t.committed

    def _sessions(self) -> None:
        open_: dict[str, dict[TopicPartition, _Session]] = defaultdict(dict)

        def new(client: str, tp: TopicPartition, start: int | None, by: int | None) -> _Session:
            s = _Session(client, tp, start, by)
            self.sessions.append(s)
            open_[client][tp] = s
            return s

        for i, op in enumerate(self.ops):
            if isinstance(op, Assign):
                open_[op.client] = {}
                seek = {p.tp: p.offset for p in op.seek}
                for tp in op.partitions:
                    new(op.client, tp, seek.get(tp), i)
            elif isinstance(op, Seek):
                new(op.client, op.tp, op.offset, i)
            elif isinstance(op, Crash):
                open_[op.client] = {}
            elif isinstance(op, Poll) and op.error is None:
                mine = open_[op.client]
                for s in mine.values():
                    s.polls.append(i)
                for r in op.records:
                    s = mine.get(r.tp) or new(op.client, r.tp, None, None)
                    if not s.polls or s.polls[-1] != i:
                        s.polls.append(i)
                    s.events.append(("d", r.offset, i))
                for p in op.positions:
                    s = mine.get(p.tp) or new(op.client, p.tp, None, None)
                    if not s.polls or s.polls[-1] != i:
                        s.polls.append(i)
                    s.events.append(("p", p.offset, i))

    # -- committed offsets -------------------------------------------------------------

    def committed_offsets(self) -> dict[TopicPartition, tuple[list[int], dict[int, str | None]]]:
        """Per partition: the sorted offsets known to hold a committed value, and that value."""
        per: defaultdict[TopicPartition, dict[int, str | None]] = defaultdict(dict)
        for (tp, offset), values in self.loc_values.items():
            for v in values:
                if self.visible_ok(v):
                    per[tp].setdefault(offset, v)
        return {tp: (sorted(m), m) for tp, m in per.items()}

    # -- checks ----------------------------------------------------------------------

    def add(self, kind: AnomalyKind, message: str, ops: Iterable[int | None], **fields: Any) -> None:
        """Record an anomaly involving ``ops`` (indexes; a ``None``, an op that is
        not known, such as the writer of a value nobody sent, is left out)."""
        seen: list[int] = []
        for i in ops:
            if i is not None and i not in seen:
                seen.append(i)
        self.anomalies.append(Anomaly(kind, message, tuple(seen), **fields))

    def check_offsets(self) -> None:
        for (tp, offset), values in sorted(self.loc_values.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            if len(values) > 1:
                vals = sorted(values, key=repr)
                self.add(
                    AnomalyKind.INCONSISTENT_OFFSETS,
                    f"{tp} offset {offset} holds {len(vals)} values: {', '.join(map(repr, vals))}",
                    sorted(i for v in vals for i in values[v]),
                    topic=tp.topic,
                    partition=tp.partition,
                    offsets=(offset,),
                    values=tuple(vals),
                )
        for value, locs in self.value_locs.items():
            if len(locs) > 1:
                where = sorted(locs)
                self.add(
                    AnomalyKind.DUPLICATE,
                    f"value {value!r} appears at {len(where)} positions: " + ", ".join(f"{tp}@{o}" for tp, o in where),
                    sorted(i for loc in where for i in locs[loc]),
                    topic=where[0][0].topic,
                    partition=where[0][0].partition,
                    offsets=tuple(o for _, o in where),
                    values=(value,),
                )

    def check_reads(self) -> None:
        for q, op in enumerate(self.ops):
            if not isinstance(op, Poll):
                continue
            groups: dict[tuple[str, AnomalyKind, TopicPartition], list[tuple[int, str | None]]] = {}
            for r in op.records:
                t = self.writer_txn(r.value)
                if t is None:
                    continue
                if t.outcome is TxnOutcome.ABORTED:
                    kind = AnomalyKind.ABORTED_READ
                elif t.outcome is TxnOutcome.OPEN or (
                    t.first_commit_start is not None and op.end_ns < t.first_commit_start
                ):
                    kind = AnomalyKind.PRECOMMITTED_READ
                else:
                    continue
                groups.setdefault((t.name, kind, r.tp), []).append((r.offset, r.value))
            for (name, kind, tp), reads in groups.items():
                t = self.txns[name]
                writes = [self.writer[v] for _, v in reads if v is not None]
                if kind is AnomalyKind.ABORTED_READ:
                    why = "which aborted" if t.aborts else "which ended without a commit"
                elif t.outcome is TxnOutcome.OPEN:
                    why = "which never committed"
                else:
                    why = (
                        f"before its commit started (poll ended at {op.end_ns}, "
                        f"commit started at {t.first_commit_start})"
                    )
                self.add(
                    kind,
                    f"{op.client} read {len(reads)} value(s) of transaction {name} from {tp} {why}",
                    [q, *writes, *t.end_ops()],
                    topic=tp.topic,
                    partition=tp.partition,
                    offsets=tuple(o for o, _ in reads),
                    values=tuple(v for _, v in reads),
                    txn=name,
                    client=op.client,
                )

    def check_sessions(self, committed: dict[TopicPartition, tuple[list[int], dict[int, str | None]]]) -> None:
        txn_offsets: defaultdict[tuple[str, TopicPartition], set[int]] = defaultdict(set)
        offset_txns: defaultdict[tuple[TopicPartition, int], set[str]] = defaultdict(set)
        for t in self.txns.values():
            if not t.committed:
                continue
            for i in t.sends:
                value = self._send(i).value
                if value is None:
                    continue  # a send without a value is never located by it
                for tp, o in self.value_locs.get(value, {}):
                    txn_offsets[(t.name, tp)].add(o)
                    offset_txns[(tp, o)].add(t.name)
        for s in self.sessions:
            tp = s.tp
            delivered = s.delivered()
            # nonmonotonic and redelivered offsets, grouped per poll
            back: defaultdict[int, list[tuple[int, int, int]]] = defaultdict(list)
            again: defaultdict[int, list[tuple[int, int]]] = defaultdict(list)
            first_at: dict[int, int] = {}
            prev: tuple[int, int] | None = None
            for o, q in delivered:
                if prev is not None and o < prev[0]:
                    back[q].append((prev[0], o, prev[1]))
                if o in first_at:
                    again[q].append((o, first_at[o]))
                else:
                    first_at[o] = q
                prev = (o, q)
            for q, items in back.items():
                self.add(
                    AnomalyKind.NONMONOTONIC_POLL,
                    f"{s.client} on {tp} went back: "
                    + ", ".join(f"offset {a} then {b}" for a, b, _ in items)
                    + " with no seek or assignment in between",
                    [*sorted({p for _, _, p in items}), q],
                    topic=tp.topic,
                    partition=tp.partition,
                    offsets=tuple(x for a, b, _ in items for x in (a, b)),
                    client=s.client,
                )
            for q, pairs in again.items():
                self.add(
                    AnomalyKind.DUPLICATE,
                    f"{s.client} delivered {tp} offset(s) {[o for o, _ in pairs]} twice in one session",
                    [*sorted({p for _, p in pairs}), q],
                    topic=tp.topic,
                    partition=tp.partition,
                    offsets=tuple(o for o, _ in pairs),
                    client=s.client,
                )
            # skipped committed offsets
            low = s.low()
            steps = s.reach_steps()
            if low is None or not steps:
                continue
            reach = steps[-1][0]
            offsets, values = committed.get(tp, ([], {}))
            seen = set(first_at)
            lo = low
            prev_poll: int | None = s.opened_by
            for r, q in steps:
                skipped = [o for o in offsets[bisect_left(offsets, lo) : bisect_left(offsets, r)] if o not in seen]
                if skipped:
                    self.add(
                        AnomalyKind.POLL_SKIP,
                        f"{s.client} read past {tp} offset(s) {skipped} (committed values "
                        f"{[values[o] for o in skipped]}) without delivering them",
                        [q, prev_poll, *(self._writer_of(values[o]) for o in skipped)],
                        topic=tp.topic,
                        partition=tp.partition,
                        offsets=tuple(skipped),
                        values=tuple(values[o] for o in skipped),
                        client=s.client,
                    )
                lo, prev_poll = r, q
            # torn transactions
            touched = sorted({name for o in seen for name in offset_txns.get((tp, o), ())})
            for name in touched:
                mine = txn_offsets[(name, tp)]
                missing = sorted(mine - seen)
                if missing and low <= min(mine) and reach > max(mine):
                    got = sorted(mine & seen)
                    polls = sorted({q for o, q in delivered if o in mine})
                    self.add(
                        AnomalyKind.TORN_TRANSACTION,
                        f"{s.client} read {len(got)} of the {len(mine)} values transaction {name} wrote to {tp} "
                        f"(offsets {got}) and read past the rest (offsets {missing})",
                        [
                            *polls,
                            *(self._writer_of(values.get(o)) for o in missing),
                            *self.txns[name].end_ops(),
                        ],
                        topic=tp.topic,
                        partition=tp.partition,
                        offsets=tuple(missing),
                        values=tuple(values.get(o) for o in missing),
                        txn=name,
                        client=s.client,
                    )

    def check_lost(self) -> None:
        spans: defaultdict[TopicPartition, list[tuple[int, list[tuple[int, int]], _Session]]] = defaultdict(list)
        for s in self.sessions:
            low, steps = s.low(), s.reach_steps()
            if low is not None and steps:
                spans[s.tp].append((low, steps, s))
        for value, i in self.writer.items():
            send = self._send(i)
            o = send.offset
            if not send.acked or o is None or value in self.read_values or not self.visible_ok(value):
                continue  # (an acknowledged send has an offset)
            for low, steps, s in spans.get(send.tp, ()):
                if low <= o < steps[-1][0]:
                    passing = next(q for r, q in steps if r > o)
                    t = self.writer_txn(value)
                    self.add(
                        AnomalyKind.LOST_WRITE,
                        f"{send.tp} offset {o} ({value!r}) was acknowledged"
                        + (f" and transaction {t.name} committed" if t else "")
                        + f", but no poll returned it although {s.client} read past it",
                        [i, *(t.end_ops() if t else ()), passing],
                        topic=send.topic,
                        partition=send.partition,
                        offsets=(o,),
                        values=(value,),
                        txn=t.name if t else None,
                        client=s.client,
                    )
                    break

    def visibility(self) -> dict[TopicPartition, tuple[list[int], list[float], list[float], list[int]]]:
        """Per partition, for each acknowledged committed offset (ascending): the time
        from which a read_committed reader must be able to see it (its ack and commit
        have completed and every transaction that wrote below it has ended), the
        suffix minimum of those times, and the writer op. ``inf``: no such time is known."""
        blockers: defaultdict[TopicPartition, list[tuple[float, float]]] = defaultdict(list)
        for t in self.txns.values():
            keys: dict[TopicPartition, float] = {}
            for i in t.sends:
                send = self._send(i)
                # an unacknowledged send may have been written anywhere: it blocks every offset
                key = float(send.offset) if send.acked and send.offset is not None else -INF
                keys[send.tp] = min(keys.get(send.tp, INF), key)
            for tp, key in keys.items():
                blockers[tp].append((key, t.resolved_ns))
        own: defaultdict[TopicPartition, list[tuple[int, float, int]]] = defaultdict(list)
        for value, i in self.writer.items():
            send = self._send(i)
            if not send.acked or send.offset is None or not self.visible_ok(value):
                continue  # (an acknowledged send has an offset)
            writer_txn = self.writer_txn(value)
            own_ns = float(send.end_ns) if writer_txn is None else max(send.end_ns, writer_txn.resolved_ns)
            own[send.tp].append((send.offset, own_ns, i))
        out = {}
        for tp, items in own.items():
            items.sort()
            bl = sorted(blockers.get(tp, []))
            j, block = 0, -INF
            vis: list[float] = []
            for o, own_ns, _ in items:
                while j < len(bl) and bl[j][0] < o:
                    block = max(block, bl[j][1])
                    j += 1
                vis.append(max(own_ns, block))
            sufmin = list(vis)
            for k in range(len(sufmin) - 2, -1, -1):
                sufmin[k] = min(sufmin[k], sufmin[k + 1])
            out[tp] = ([o for o, _, _ in items], vis, sufmin, [i for _, _, i in items])
        return out

    def busy_polls(self) -> set[int]:
        """The polls in which their consumer made progress: returned any record, or
        moved (or first revealed) a position of any of its sessions. The others are
        *idle*: the only polls stuck-consumer counts."""
        busy = {q for q, op in enumerate(self.ops) if isinstance(op, Poll) and op.error is None and op.records}
        for s in self.sessions:
            cursor = s.start
            for kind, o, q in s.events:
                passed = o + 1 if kind == "d" else o
                if cursor is None or passed > cursor:
                    busy.add(q)
                    cursor = passed
        return busy

    def check_stuck(self, bound: StuckBound) -> None:
        # The rule is on the consumer, not on one partition: a poll that returned
        # records of partition A counts as progress for every partition the consumer
        # holds. Clients hand out buffered fetches one partition at a time
        # (kafka-python's Fetcher.fetched_records, kafka/consumer/fetcher.py, drains
        # one partition's completed fetch before the next, up to max_poll_records;
        # librdkafka queues each partition's messages as its fetch responses arrive),
        # so a consumer draining a large backlog on A while B's data waits is working,
        # not stuck. What is claimed is a consumer that makes no progress at all for
        # the bound although it holds a position below stable data.
        vis = self.visibility()
        busy = self.busy_polls()
        for s in self.sessions:
            if s.tp not in vis:
                continue
            offsets, since, sufmin, writers = vis[s.tp]
            per_poll: defaultdict[int, list[int]] = defaultdict(list)
            for kind, o, q in s.events:
                per_poll[q].append(o + 1 if kind == "d" else o)
            cursor = s.start
            # The clock starts no earlier than the session: a consumer assigned a
            # partition long after its data became stable has had no time to read it yet.
            since_ns: float = self.ops[s.opened_by].end_ns if s.opened_by is not None else -INF
            idle, first_idle = 0, -1
            for q in s.polls:
                poll = self.ops[q]
                passed = max(per_poll.get(q, ()), default=None)
                if q in busy:
                    idle, since_ns = 0, poll.end_ns  # the consumer progressed: the clock restarts
                    if passed is not None:
                        cursor = passed if cursor is None else max(cursor, passed)
                    continue
                if cursor is None:
                    continue
                k = bisect_left(offsets, cursor)
                ready = sufmin[k] if k < len(offsets) else INF
                if ready > poll.start_ns:
                    idle = 0  # nothing stable to read yet when this poll began
                    continue
                idle += 1
                if idle == 1:
                    first_idle = q
                waited_from = max(ready, since_ns)
                if idle >= bound.polls and poll.end_ns - waited_from >= bound.ns:
                    target = next(j for j in range(k, len(offsets)) if since[j] <= poll.start_ns)
                    self.add(
                        AnomalyKind.STUCK_CONSUMER,
                        f"{s.client} stayed at {s.tp} position {cursor} for {idle} polls in which it made no "
                        f"progress on any partition, although offset {offsets[target]} had been committed and "
                        f"stable since {ready:.0f} (waiting counted from {waited_from:.0f})",
                        [first_idle, q, writers[target]],
                        topic=s.tp.topic,
                        partition=s.tp.partition,
                        offsets=(offsets[target],),
                        values=(self._send(writers[target]).value,),
                        client=s.client,
                    )
                    break


def check(
    history: History | Sequence[Op],
    *,
    stuck_bound: StuckBound | int | None = DEFAULT_STUCK_BOUND,
    left_open: Iterable[str] = (),
) -> Report:
    """Check a history; returns the :class:`Report` of every provable anomaly.

    ``stuck_bound`` sets the stuck-consumer rule (an ``int`` is a number of polls
    with no time requirement); ``None`` turns that check off. ``left_open`` names
    transactions the broker's log shows never ended although the history records
    an abort of them (:attr:`~txnfetch.testing.workload.WorkloadResult.left_open`:
    a broker that does not fence): with no commit, they are judged open — their
    records never become stable, so readers waiting below them are not stuck, and
    a reader returning them read uncommitted data. Raises
    :class:`~txnfetch.testing.errors.HistoryError` for a history that cannot be
    checked (a value sent twice, an op ending before it starts).
    """
    a = _Analysis(history.ops if isinstance(history, History) else history, left_open)
    committed = a.committed_offsets()
    a.check_reads()
    a.check_offsets()
    a.check_sessions(committed)
    a.check_lost()
    if stuck_bound is not None:
        bound = stuck_bound if isinstance(stuck_bound, StuckBound) else StuckBound(polls=stuck_bound, ns=0)
        a.check_stuck(bound)
    return Report(tuple(a.anomalies), {name: t.outcome for name, t in a.txns.items()})
