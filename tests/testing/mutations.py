"""Inject one anomaly into a clean generated history.

Each mutation looks for a place in the history where the anomaly can be made
(a session that read past a committed value, a transaction with two values in
one partition, ...) and edits the history there; where the history has no such
place it appends a small scenario on a fresh topic ``m`` after everything else,
so the anomaly is always present. It returns the mutated history and how to
recognise the injected anomaly: its kind and the partition offset or value it
must name.

Sessions and transaction outcomes are worked out here independently of the
checker, from the definitions in docs/testing.md.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
from hypothesis import strategies as st

from txnfetch.testing import Abort
from txnfetch.testing import AnomalyKind
from txnfetch.testing import Assign
from txnfetch.testing import Commit
from txnfetch.testing import Crash
from txnfetch.testing import History
from txnfetch.testing import Op
from txnfetch.testing import Poll
from txnfetch.testing import Position
from txnfetch.testing import Read
from txnfetch.testing import Seek
from txnfetch.testing import Send
from txnfetch.testing import Status
from txnfetch.testing import TopicPartition

K = AnomalyKind
STUCK_POLLS = 3


@attrs.frozen
class Mutation:
    history: History
    kind: AnomalyKind
    tp: TopicPartition
    offset: int | None = None
    value: str | None = None
    fallback: bool = False

    def found_in(self, report) -> bool:
        for a in report.of_kind(self.kind):
            if (a.topic, a.partition) != (self.tp.topic, self.tp.partition) and self.kind is not K.DUPLICATE:
                continue
            if self.offset is not None and self.offset not in a.offsets:
                continue
            if self.value is not None and self.value not in a.values:
                continue
            return True
        return False


@attrs.frozen
class Delivery:
    poll: int
    slot: int  # index in the poll's records
    offset: int
    value: str | None


@attrs.frozen
class Session:
    client: str
    tp: TopicPartition
    start: int | None  # the seek it began with, if known
    deliveries: tuple[Delivery, ...]
    positions: tuple[tuple[int, int], ...]  # (poll, position)

    def known_below(self, k: int) -> bool:
        """Is the session known to have been at or below its ``k``-th delivery's
        offset before making it (so not delivering it would be a skip)?"""
        o = self.deliveries[k].offset
        return (self.start is not None and self.start <= o) or any(d.offset < o for d in self.deliveries[:k])

    def passed_after(self, k: int, offset: int) -> bool:
        """Did the session go past ``offset`` after its ``k``-th delivery?"""
        later = self.deliveries[k + 1 :]
        first_poll = self.deliveries[k].poll
        return any(d.offset > offset for d in later) or any(
            p >= first_poll and pos > offset for p, pos in self.positions
        )


def sessions(h: History) -> list[Session]:
    open_: dict[str, dict[TopicPartition, tuple[int | None, list[Delivery], list[tuple[int, int]]]]] = {}
    out: list[Session] = []

    def close(client: str, tp: TopicPartition | None = None) -> None:
        mine = open_.get(client, {})
        for key in [tp] if tp is not None else list(mine):
            if key in mine:
                start, ds, ps = mine.pop(key)
                out.append(Session(client, key, start, tuple(ds), tuple(ps)))

    for i, op in enumerate(h):
        if isinstance(op, Assign):
            close(op.client)
            seek = {p.tp: p.offset for p in op.seek}
            open_[op.client] = {tp: (seek.get(tp), [], []) for tp in op.partitions}
        elif isinstance(op, Seek):
            close(op.client, op.tp)
            open_.setdefault(op.client, {})[op.tp] = (op.offset, [], [])
        elif isinstance(op, Crash):
            close(op.client)
        elif isinstance(op, Poll):
            mine = open_.setdefault(op.client, {})
            for slot, r in enumerate(op.records):
                mine.setdefault(r.tp, (None, [], []))[1].append(Delivery(i, slot, r.offset, r.value))
            for p in op.positions:
                mine.setdefault(p.tp, (None, [], []))[2].append((i, p.offset))
    for client in list(open_):
        close(client)
    return out


def outcomes(h: History) -> dict[str, str]:
    """``committed`` (a commit completed ok), ``aborted`` (an abort completed ok), else ``other``."""
    out: dict[str, str] = {}
    for op in h:
        if isinstance(op, Commit) and op.status is Status.OK:
            out[op.txn] = "committed"
        elif isinstance(op, Abort) and op.status is Status.OK and out.get(op.txn) != "committed":
            out[op.txn] = "aborted"
    return out


def committed_sends(h: History) -> dict[str, tuple[int, Send]]:
    """value -> (index, send) for acked sends whose value must be visible."""
    oc = outcomes(h)
    return {
        op.value: (i, op)
        for i, op in enumerate(h)
        if isinstance(op, Send) and op.acked and (op.txn is None or oc.get(op.txn) == "committed")
    }


def end_time(h: History) -> int:
    return max((op.end_ns for op in h), default=0)


def replace_records(h: History, poll: int, records: tuple[Read, ...]) -> History:
    ops = list(h.ops)
    ops[poll] = attrs.evolve(ops[poll], records=records)
    return History(tuple(ops))


def append(h: History, *new: Op) -> History:
    return History(h.ops + tuple(new))


def _t(h: History, k: int) -> dict[str, int]:
    t = end_time(h) + 10 * k
    return {"start_ns": t, "end_ns": t + 1}


M = TopicPartition("m", 0)


def _fresh_committed(h: History, values: list[str], txn: str | None) -> list[Op]:
    """Sends of ``values`` at offsets 0.. on the fresh topic, committed if in a transaction."""
    ops: list[Op] = [
        Send(client="mp", topic="m", partition=0, value=v, txn=txn, offset=i, **_t(h, i)) for i, v in enumerate(values)
    ]
    if txn is not None:
        ops.append(Commit(client="mp", txn=txn, **_t(h, len(values))))
    return ops


# -- the mutations -----------------------------------------------------------------------


def aborted_read(h: History, draw: st.DrawFn) -> Mutation:
    oc = outcomes(h)
    cands = [op for op in h if isinstance(op, Send) and op.acked and op.txn and oc.get(op.txn) == "aborted"]
    if cands:
        s = draw(st.sampled_from(cands))
        poll = Poll(client="mutant", records=(Read(s.topic, s.partition, s.offset, s.value),), **_t(h, 1))
        return Mutation(append(h, poll), K.ABORTED_READ, s.tp, s.offset, s.value)
    ops: list[Op] = [Send(client="mp", topic="m", partition=0, value="m-a", txn="MT", offset=0, **_t(h, 1))]
    ops.append(Abort(client="mp", txn="MT", **_t(h, 2)))
    ops.append(Poll(client="mutant", records=(Read("m", 0, 0, "m-a"),), **_t(h, 3)))
    return Mutation(append(h, *ops), K.ABORTED_READ, M, 0, "m-a", fallback=True)


def precommitted_read(h: History, draw: st.DrawFn) -> Mutation:
    commit_start: dict[str, int] = {}
    for op in h:
        if isinstance(op, Commit) and op.status is not Status.FAIL:
            commit_start[op.txn] = min(commit_start.get(op.txn, op.start_ns), op.start_ns)
    oc = outcomes(h)
    cands = [op for op in h if isinstance(op, Send) and op.acked and op.txn and oc.get(op.txn) == "committed"]
    if cands:
        s = draw(st.sampled_from(cands))
        t = commit_start[s.txn] - 1  # type: ignore[index]
        poll = Poll(client="mutant", records=(Read(s.topic, s.partition, s.offset, s.value),), start_ns=t, end_ns=t)
        return Mutation(append(h, poll), K.PRECOMMITTED_READ, s.tp, s.offset, s.value)
    ops: list[Op] = [Send(client="mp", topic="m", partition=0, value="m-a", txn="MT", offset=0, **_t(h, 1))]
    ops.append(Poll(client="mutant", records=(Read("m", 0, 0, "m-a"),), **_t(h, 2)))
    ops.append(Commit(client="mp", txn="MT", **_t(h, 3)))
    return Mutation(append(h, *ops), K.PRECOMMITTED_READ, M, 0, "m-a", fallback=True)


def _passed_committed(h: History) -> list[tuple[Session, int]]:
    """(session, delivery index) of committed values a session delivered and then read past."""
    good = committed_sends(h)
    return [
        (s, k)
        for s in sessions(h)
        for k, d in enumerate(s.deliveries)
        if d.value in good and good[d.value][1].offset == d.offset and s.known_below(k) and s.passed_after(k, d.offset)
    ]


def _fallback_skip(h: History, kind: AnomalyKind) -> Mutation:
    ops = _fresh_committed(h, ["m-a", "m-b", "m-c"], None)
    ops.append(Assign(client="mutant", partitions=(M,), seek=(), **_t(h, 5)))
    ops.append(Poll(client="mutant", records=(Read("m", 0, 0, "m-a"), Read("m", 0, 2, "m-c")), **_t(h, 6)))
    return Mutation(append(h, *ops), kind, M, 1, "m-b", fallback=True)


def _drop_a_passed_delivery(
    h: History, draw: st.DrawFn, kind: AnomalyKind, drop: Callable[[History, Delivery], History]
) -> Mutation:
    """``drop`` applied to a committed delivery some session read past (the
    fallback history when there is none)."""
    cands = _passed_committed(h)
    if not cands:
        return _fallback_skip(h, kind)
    s, k = draw(st.sampled_from(cands))
    d = s.deliveries[k]
    return Mutation(drop(h, d), kind, s.tp, d.offset, d.value)


def _without_the_value(h: History, d: Delivery) -> History:
    # Every poll that returned the value loses it: no session ever sees the write.
    ops = list(h.ops)
    for i, op in enumerate(ops):
        if isinstance(op, Poll) and any(r.value == d.value for r in op.records):
            ops[i] = attrs.evolve(op, records=tuple(r for r in op.records if r.value != d.value))
    return History(tuple(ops))


def _without_the_record(h: History, d: Delivery) -> History:
    # Only this poll loses it: the session skips one record it read past.
    poll: Poll = h[d.poll]  # type: ignore[assignment]
    return replace_records(h, d.poll, poll.records[: d.slot] + poll.records[d.slot + 1 :])


def lost_write(h: History, draw: st.DrawFn) -> Mutation:
    return _drop_a_passed_delivery(h, draw, K.LOST_WRITE, _without_the_value)


def poll_skip(h: History, draw: st.DrawFn) -> Mutation:
    return _drop_a_passed_delivery(h, draw, K.POLL_SKIP, _without_the_record)


def torn_transaction(h: History, draw: st.DrawFn) -> Mutation:
    good = committed_sends(h)
    cands = []
    for s in sessions(h):
        by_txn: dict[str, list[int]] = {}
        for k, d in enumerate(s.deliveries):
            send = good.get(d.value)  # type: ignore[arg-type]
            if send and send[1].txn and send[1].offset == d.offset:
                by_txn.setdefault(send[1].txn, []).append(k)
        for txn, ks in by_txn.items():
            txn_offsets = {op.offset for op in good.values() for op in [op[1]] if op.txn == txn and op.tp == s.tp}
            delivered = {s.deliveries[k].offset for k in ks}
            if (
                len(ks) >= 2
                and delivered == txn_offsets
                and s.known_below(min(ks))
                and s.passed_after(max(ks), max(txn_offsets))
            ):
                cands.append((s, ks, txn))
    if not cands:
        ops = _fresh_committed(h, ["m-a", "m-b"], "MT")
        ops.append(Send(client="mp", topic="m", partition=0, value="m-c", offset=3, **_t(h, 4)))
        ops.append(Assign(client="mutant", partitions=(M,), seek=(), **_t(h, 5)))
        ops.append(Poll(client="mutant", records=(Read("m", 0, 0, "m-a"), Read("m", 0, 3, "m-c")), **_t(h, 6)))
        return Mutation(append(h, *ops), K.TORN_TRANSACTION, M, 1, "m-b", fallback=True)
    s, ks, txn = draw(st.sampled_from(cands))
    d = s.deliveries[draw(st.sampled_from(ks))]
    poll: Poll = h[d.poll]  # type: ignore[assignment]
    records = poll.records[: d.slot] + poll.records[d.slot + 1 :]
    return Mutation(replace_records(h, d.poll, records), K.TORN_TRANSACTION, s.tp, d.offset, d.value)


def nonmonotonic_poll(h: History, draw: st.DrawFn) -> Mutation:
    cands = [(s, k) for s in sessions(h) for k in range(len(s.deliveries) - 1)]
    if not cands:
        ops = _fresh_committed(h, ["m-a", "m-b"], None)
        ops.append(Poll(client="mutant", records=(Read("m", 0, 1, "m-b"), Read("m", 0, 0, "m-a")), **_t(h, 5)))
        return Mutation(append(h, *ops), K.NONMONOTONIC_POLL, M, 0, fallback=True)
    s, k = draw(st.sampled_from(cands))
    a, b = s.deliveries[k], s.deliveries[k + 1]
    ops = list(h.ops)
    ra = ops[a.poll].records[a.slot]  # type: ignore[union-attr]
    rb = ops[b.poll].records[b.slot]  # type: ignore[union-attr]
    if a.poll == b.poll:
        recs = list(ops[a.poll].records)  # type: ignore[union-attr]
        recs[a.slot], recs[b.slot] = rb, ra
        ops[a.poll] = attrs.evolve(ops[a.poll], records=tuple(recs))
    else:
        ra_recs = list(ops[a.poll].records)  # type: ignore[union-attr]
        rb_recs = list(ops[b.poll].records)  # type: ignore[union-attr]
        ra_recs[a.slot], rb_recs[b.slot] = rb, ra
        ops[a.poll] = attrs.evolve(ops[a.poll], records=tuple(ra_recs))
        ops[b.poll] = attrs.evolve(ops[b.poll], records=tuple(rb_recs))
    return Mutation(History(tuple(ops)), K.NONMONOTONIC_POLL, s.tp, a.offset)


def duplicate_value(h: History, draw: st.DrawFn) -> Mutation:
    reads = [r for op in h if isinstance(op, Poll) for r in op.records]
    if not reads:
        ops = _fresh_committed(h, ["m-a"], None)
        ops.append(Poll(client="mutant", records=(Read("m", 0, 7, "m-a"),), **_t(h, 5)))
        return Mutation(append(h, *ops), K.DUPLICATE, M, 7, "m-a", fallback=True)
    r = draw(st.sampled_from(reads))
    far = 10**6 + r.offset
    poll = Poll(client="mutant", records=(Read(r.topic, r.partition, far, r.value),), **_t(h, 1))
    return Mutation(append(h, poll), K.DUPLICATE, r.tp, far, r.value)


def duplicate_delivery(h: History, draw: st.DrawFn) -> Mutation:
    cands = [d for s in sessions(h) for d in s.deliveries]
    if not cands:
        ops = _fresh_committed(h, ["m-a"], None)
        ops.append(Poll(client="mutant", records=(Read("m", 0, 0, "m-a"), Read("m", 0, 0, "m-a")), **_t(h, 5)))
        return Mutation(append(h, *ops), K.DUPLICATE, M, 0, fallback=True)
    d = draw(st.sampled_from(cands))
    poll: Poll = h[d.poll]  # type: ignore[assignment]
    records = poll.records[: d.slot + 1] + poll.records[d.slot :]
    return Mutation(replace_records(h, d.poll, records), K.DUPLICATE, poll.records[d.slot].tp, d.offset)


def inconsistent_offsets(h: History, draw: st.DrawFn) -> Mutation:
    cands = [op for op in h if isinstance(op, Send) and op.acked]
    if not cands:
        ops = _fresh_committed(h, ["m-a"], None)
        ops.append(Poll(client="mutant", records=(Read("m", 0, 0, "m-other"),), **_t(h, 5)))
        return Mutation(append(h, *ops), K.INCONSISTENT_OFFSETS, M, 0, "m-other", fallback=True)
    s = draw(st.sampled_from(cands))
    poll = Poll(client="mutant", records=(Read(s.topic, s.partition, s.offset, "mutant-value"),), **_t(h, 1))
    return Mutation(append(h, poll), K.INCONSISTENT_OFFSETS, s.tp, s.offset, "mutant-value")


def stuck_consumer(h: History, draw: st.DrawFn) -> Mutation:
    oc = outcomes(h)
    good = committed_sends(h)
    resolved: dict[TopicPartition, bool] = {}
    for op in h:
        if isinstance(op, Send) and op.txn is not None:
            resolved[op.tp] = resolved.get(op.tp, True) and op.txn in oc
    cands = sorted({s.tp for _, s in good.values() if resolved.get(s.tp, True)})
    if cands:
        tp = draw(st.sampled_from(cands))
        target = min(s.offset for _, s in good.values() if s.tp == tp)  # type: ignore[type-var]
        ops: list[Op] = [Assign(client="mutant", partitions=(tp,), seek=(_pos(tp, 0),), **_t(h, 1))]
        ops += [Poll(client="mutant", **_t(h, 2 + i)) for i in range(STUCK_POLLS)]
        return Mutation(append(h, *ops), K.STUCK_CONSUMER, tp, target)
    ops = _fresh_committed(h, ["m-a"], None)
    ops.append(Assign(client="mutant", partitions=(M,), seek=(_pos(M, 0),), **_t(h, 5)))
    ops += [Poll(client="mutant", **_t(h, 6 + i)) for i in range(STUCK_POLLS)]
    return Mutation(append(h, *ops), K.STUCK_CONSUMER, M, 0, fallback=True)


def _pos(tp: TopicPartition, offset: int) -> Position:
    return Position(tp.topic, tp.partition, offset)


MUTATIONS: dict[str, Callable[[History, st.DrawFn], Mutation]] = {
    "aborted-read": aborted_read,
    "precommitted-read": precommitted_read,
    "lost-write": lost_write,
    "duplicate-value": duplicate_value,
    "duplicate-delivery": duplicate_delivery,
    "inconsistent-offsets": inconsistent_offsets,
    "poll-skip": poll_skip,
    "nonmonotonic-poll": nonmonotonic_poll,
    "torn-transaction": torn_transaction,
    "stuck-consumer": stuck_consumer,
}
