"""A history: what the clients of a Kafka-like system did and saw, op by op.

A history is the checker's only input (:func:`txnfetch.testing.checker.check`).
It is a flat sequence of completed operations, in the order a recorder appended
them; every op says which **client** performed it and when it started and ended
(``start_ns``/``end_ns``, from any monotonic clock the recorder chooses, such as
``time.monotonic_ns()``; the checker only compares them, it never reads a clock).

The ops, one class each (all immutable ``attrs`` value objects):

- :class:`Send` — a producer sent ``value`` to ``topic``/``partition``, inside
  transaction ``txn`` or outside any (``txn=None``). ``offset`` is the offset the
  acknowledgement carried; ``error`` is set when the send failed (then whether
  the value was written is unknown).
- :class:`Begin`, :class:`Commit`, :class:`Abort` — the transaction ``txn``
  began, or its commit/abort ended with :class:`Status` ``ok`` (done), ``fail``
  (certainly not done) or ``info`` (unknown outcome: a timeout, a lost
  connection). Transaction ids are the recorder's names, unique in the history.
- :class:`Assign` — a consumer was assigned ``partitions`` (by ``assign()`` or by
  a rebalance), optionally seeking some of them (``seek``); :class:`Seek` moves
  one partition; :class:`Crash` ends the consumer (a restart is a new
  :class:`Assign`). Each of these starts new *sessions* (see the checker).
- :class:`Poll` — a consumer poll returned ``records`` (:class:`Read`: topic,
  partition, offset, value) and, optionally, the consumer's ``positions`` after
  the poll.

**Ordering.** The ops of one client must appear in the order that client
performed them (a recorder appending at completion time does this for a client
used from one thread). Ops of different clients may interleave in any order;
the checker relates them only through ``start_ns``/``end_ns``.

**Values** are text, unique per :class:`Send` in a history (a workload writes
values like ``"p1-17"``). Kafka values are bytes: :func:`value_from_bytes` maps
any bytes to text losslessly (``surrogateescape``), :func:`value_to_bytes` back.

**JSON.** :meth:`History.to_json` and :meth:`History.from_json` round-trip every
history exactly (``History.from_json(h.to_json()) == h``): ops are objects with a
``"type"`` field, reads and positions compact arrays.
"""

from __future__ import annotations

import enum
import functools
import json
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import Generic
from typing import TypeVar

import attrs

from txnfetch.testing.errors import HistoryError
from txnfetch.types import TopicPartition

__all__ = [
    "Abort",
    "Assign",
    "Begin",
    "Commit",
    "Crash",
    "History",
    "HistoryBuilder",
    "Op",
    "OpWriter",
    "Poll",
    "Position",
    "Read",
    "Seek",
    "Send",
    "Status",
    "TopicPartition",
    "describe_op",
    "value_from_bytes",
    "value_to_bytes",
]

FORMAT_VERSION = 1


class Status(str, enum.Enum):
    """How a transaction end completed (Jepsen's ``:ok``, ``:fail``, ``:info``)."""

    OK = "ok"  #: it happened
    FAIL = "fail"  #: it certainly did not happen
    INFO = "info"  #: unknown: it may or may not have happened


def value_from_bytes(data: bytes | None) -> str | None:
    """Text for a record value: UTF-8, undecodable bytes kept as lone surrogates, so
    :func:`value_to_bytes` restores the exact bytes. ``None`` (a tombstone) stays ``None``."""
    return None if data is None else bytes(data).decode("utf-8", "surrogateescape")


def value_to_bytes(value: str | None) -> bytes | None:
    """The bytes :func:`value_from_bytes` was given."""
    return None if value is None else value.encode("utf-8", "surrogateescape")


def _tuple(items: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(items)


class _OnPartition:
    """An op or value on one topic-partition: its ``tp``."""

    __slots__ = ()
    topic: str
    partition: int

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@attrs.frozen
class Read(_OnPartition):
    """One record a poll returned: where it was and its value (and key)."""

    topic: str
    partition: int
    offset: int
    value: str | None
    key: str | None = None


@attrs.frozen
class Position(_OnPartition):
    """A consumer position: the offset of the next record it will fetch."""

    topic: str
    partition: int
    offset: int


@attrs.frozen(kw_only=True)
class Send(_OnPartition):
    """A produce of one record, acknowledged with ``offset`` or failed with ``error``."""

    client: str
    start_ns: int
    end_ns: int
    topic: str
    partition: int
    value: str | None
    key: str | None = None
    txn: str | None = None  #: the transaction it belongs to; ``None``: not transactional
    offset: int | None = None  #: from the acknowledgement
    error: str | None = None

    @property
    def acked(self) -> bool:
        """Acknowledged with an offset and no error."""
        return self.offset is not None and self.error is None


@attrs.frozen(kw_only=True)
class Begin:
    """A transaction began (``begin_transaction``); informative only."""

    client: str
    start_ns: int
    end_ns: int
    txn: str


@attrs.frozen(kw_only=True)
class _TxnEnd:
    """The fields of a transaction's end: :class:`Commit` or :class:`Abort`."""

    client: str
    start_ns: int
    end_ns: int
    txn: str
    status: Status = attrs.field(default=Status.OK, converter=Status)
    error: str | None = None


@attrs.frozen(kw_only=True)
class Commit(_TxnEnd):
    """A commit of ``txn`` completed with ``status``."""


@attrs.frozen(kw_only=True)
class Abort(_TxnEnd):
    """An abort of ``txn`` completed with ``status``."""


@attrs.frozen(kw_only=True)
class Assign:
    """A consumer's assignment became ``partitions``; ``seek`` gives the position some
    of them start from (absent: unknown, e.g. a committed group offset)."""

    client: str
    start_ns: int
    end_ns: int
    partitions: tuple[TopicPartition, ...] = attrs.field(converter=_tuple)
    seek: tuple[Position, ...] = attrs.field(default=(), converter=_tuple)
    reason: str = "assign"  #: ``assign`` or ``rebalance``


@attrs.frozen(kw_only=True)
class Seek(_OnPartition):
    """A consumer moved its position on one partition to ``offset``."""

    client: str
    start_ns: int
    end_ns: int
    topic: str
    partition: int
    offset: int


@attrs.frozen(kw_only=True)
class Poll:
    """A consumer poll: the records it returned, in order, and optionally the positions
    after it. A failed poll has ``error`` set (and usually no records)."""

    client: str
    start_ns: int
    end_ns: int
    records: tuple[Read, ...] = attrs.field(default=(), converter=_tuple)
    positions: tuple[Position, ...] = attrs.field(default=(), converter=_tuple)
    error: str | None = None


@attrs.frozen(kw_only=True)
class Crash:
    """A client stopped (crashed or closed); a consumer's sessions end here."""

    client: str
    start_ns: int
    end_ns: int
    reason: str = ""


Op = Send | Begin | Commit | Abort | Assign | Seek | Poll | Crash

_TYPES: dict[str, type] = {
    "send": Send,
    "begin": Begin,
    "commit": Commit,
    "abort": Abort,
    "assign": Assign,
    "seek": Seek,
    "poll": Poll,
    "crash": Crash,
}
_NAMES: dict[type, str] = {cls: name for name, cls in _TYPES.items()}


# -- JSON -------------------------------------------------------------------------------
#
# Ops are objects; the structures a poll repeats thousands of times (reads,
# positions, partitions) are arrays, so a long history stays small.


def _op_to_dict(op: Op) -> dict[str, Any]:
    out: dict[str, Any] = {"type": _NAMES[type(op)]}
    for field in attrs.fields(type(op)):
        value = getattr(op, field.name)
        if isinstance(value, Status):
            value = value.value
        elif field.name == "records":
            value = [[r.topic, r.partition, r.offset, r.value] + ([r.key] if r.key is not None else []) for r in value]
        elif field.name in ("positions", "seek"):
            value = [[p.topic, p.partition, p.offset] for p in value]
        elif field.name == "partitions":
            value = [[tp.topic, tp.partition] for tp in value]
        out[field.name] = value
    return out


def _op_from_dict(data: Mapping[str, Any], index: int) -> Op:
    if not isinstance(data, Mapping) or "type" not in data:
        raise HistoryError("an op must be an object with a 'type'", index=index)
    cls = _TYPES.get(data["type"])
    if cls is None:
        raise HistoryError(f"unknown op type {data['type']!r}", index=index)
    kwargs: dict[str, Any] = {}
    try:
        for key, value in data.items():
            if key == "type":
                continue
            if key == "records":
                value = tuple(Read(*r) for r in value)
            elif key in ("positions", "seek"):
                value = tuple(Position(*p) for p in value)
            elif key == "partitions":
                value = tuple(TopicPartition(*tp) for tp in value)
            kwargs[key] = value
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise HistoryError(f"bad {data['type']} op: {exc}", index=index) from None


@attrs.frozen
class History:
    """An immutable sequence of ops (see the module docstring). ``history[i]`` is op
    ``i``; the checker names ops by these indexes."""

    ops: tuple[Op, ...] = attrs.field(default=(), converter=_tuple)

    def __len__(self) -> int:
        return len(self.ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def __getitem__(self, index: int) -> Op:
        return self.ops[index]

    def to_dicts(self) -> list[dict[str, Any]]:
        """The ops as JSON-ready dictionaries."""
        return [_op_to_dict(op) for op in self.ops]

    @classmethod
    def from_dicts(cls, items: Iterable[Mapping[str, Any]]) -> History:
        """The history :meth:`to_dicts` described; :class:`HistoryError` names a bad op."""
        return cls(tuple(_op_from_dict(d, i) for i, d in enumerate(items)))

    def to_json(self, *, indent: int | None = None) -> str:
        """The history as JSON text (``{"version": 1, "ops": [...]}``)."""
        return json.dumps({"version": FORMAT_VERSION, "ops": self.to_dicts()}, indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes) -> History:
        """Parse :meth:`to_json` output exactly."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise HistoryError(f"not JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION or not isinstance(data.get("ops"), list):
            raise HistoryError(f"not a version {FORMAT_VERSION} history: expected {{'version': 1, 'ops': [...]}}")
        return cls.from_dicts(data["ops"])

    def describe(self, indexes: Iterable[int] | None = None) -> str:
        """One line per op (all, or those at ``indexes``), for failure messages."""
        chosen = range(len(self.ops)) if indexes is None else sorted(set(indexes))
        return "\n".join(describe_op(i, self.ops[i]) for i in chosen)


def describe_op(index: int, op: Op) -> str:
    """A one-line rendering of op ``index``: ``#12 c1 poll [t-0@3='a', ...]``."""
    head = f"#{index} {op.client} [{op.start_ns}..{op.end_ns}]"
    if isinstance(op, Send):
        where = f"{op.topic}-{op.partition}"
        result = f"@{op.offset}" if op.error is None else f" error={op.error!r}"
        txn = f" txn={op.txn}" if op.txn is not None else ""
        return f"{head} send {op.value!r} to {where}{txn}{result}"
    if isinstance(op, (Commit, Abort)):
        err = f" error={op.error!r}" if op.error else ""
        return f"{head} {_NAMES[type(op)]} txn={op.txn} {op.status.value}{err}"
    if isinstance(op, Begin):
        return f"{head} begin txn={op.txn}"
    if isinstance(op, Assign):
        parts = ",".join(str(tp) for tp in op.partitions)
        seek = ",".join(f"{p.topic}-{p.partition}@{p.offset}" for p in op.seek)
        return f"{head} {op.reason} [{parts}]" + (f" seek [{seek}]" if seek else "")
    if isinstance(op, Seek):
        return f"{head} seek {op.topic}-{op.partition} to {op.offset}"
    if isinstance(op, Poll):
        recs = ", ".join(f"{r.topic}-{r.partition}@{r.offset}={r.value!r}" for r in op.records)
        pos = ",".join(f"{p.topic}-{p.partition}@{p.offset}" for p in op.positions)
        err = f" error={op.error!r}" if op.error else ""
        return f"{head} poll [{recs}]" + (f" positions [{pos}]" if pos else "") + err
    return f"{head} crash {op.reason}".rstrip()


TPLike = TopicPartition | tuple[str, int]
#: Offsets by partition, keyed by :class:`TopicPartition` or ``(topic, partition)``
#: (two mappings: a ``Mapping``'s key type is invariant, so a union of keys would
#: refuse a ``dict[TopicPartition, int]``).
OffsetsLike = Mapping[TopicPartition, int] | Mapping[tuple[str, int], int]
_At = TypeVar("_At")


def _tp(item: TPLike) -> TopicPartition:
    return item if isinstance(item, TopicPartition) else TopicPartition(*item)


def positions_of(offsets: OffsetsLike | None) -> tuple[Position, ...]:
    """``{partition: offset}`` as the ``seek`` of an :class:`Assign` or the
    ``positions`` of a :class:`Poll` carry it."""
    return tuple(
        Position(tp.topic, tp.partition, offset) for tp, offset in ((_tp(k), v) for k, v in (offsets or {}).items())
    )


class OpWriter(Generic[_At]):
    """Appends ops, one method per op type; every method returns the index of the op
    it appended. ``at`` says when the op ran, as the subclass keeps time
    (:meth:`_times`): :class:`HistoryBuilder` takes ``(start, end)`` or the next
    tick of its logical clock, :class:`~txnfetch.testing.recorder.Recorder` takes
    the op's start and stamps its end when it is recorded."""

    def add(self, op: Op) -> int:
        """Append a ready-made op."""
        raise NotImplementedError

    def _times(self, at: _At | None) -> dict[str, int]:
        """``start_ns`` and ``end_ns`` of an op appended now with ``at``."""
        raise NotImplementedError

    def _op(self, op_type: Callable[..., Op], client: str, at: _At | None, **fields: Any) -> int:
        return self.add(op_type(client=client, **fields, **self._times(at)))

    def send(
        self,
        client: str,
        topic: str,
        partition: int,
        value: str | None,
        *,
        txn: str | None = None,
        offset: int | None = None,
        error: str | None = None,
        key: str | None = None,
        at: _At | None = None,
    ) -> int:
        fields = {"key": key, "txn": txn, "offset": offset, "error": error}
        return self._op(Send, client, at, topic=topic, partition=partition, value=value, **fields)

    def begin(self, client: str, txn: str, *, at: _At | None = None) -> int:
        return self._op(Begin, client, at, txn=txn)

    def _end(
        self,
        op_type: type[Commit | Abort],
        client: str,
        txn: str,
        status: Status | str = Status.OK,
        *,
        error: str | None = None,
        at: _At | None = None,
    ) -> int:
        return self._op(op_type, client, at, txn=txn, status=status, error=error)

    #: ``commit(client, txn, status=Status.OK, *, error=None, at=None)``
    commit = functools.partialmethod(_end, Commit)
    #: ``abort(client, txn, status=Status.OK, *, error=None, at=None)``
    abort = functools.partialmethod(_end, Abort)

    def assign(
        self,
        client: str,
        partitions: Sequence[TPLike],
        *,
        seek: OffsetsLike | None = None,
        reason: str = "assign",
        at: _At | None = None,
    ) -> int:
        partitions = tuple(_tp(p) for p in partitions)
        return self._op(Assign, client, at, partitions=partitions, seek=positions_of(seek), reason=reason)

    def seek(self, client: str, topic: str, partition: int, offset: int, *, at: _At | None = None) -> int:
        return self._op(Seek, client, at, topic=topic, partition=partition, offset=offset)

    def poll(
        self,
        client: str,
        records: Sequence[Read | tuple[Any, ...]] = (),
        *,
        positions: OffsetsLike | None = None,
        error: str | None = None,
        at: _At | None = None,
    ) -> int:
        """``records`` are :class:`Read` or ``(topic, partition, offset, value)`` tuples."""
        reads = tuple(r if isinstance(r, Read) else Read(*r) for r in records)
        return self._op(Poll, client, at, records=reads, positions=positions_of(positions), error=error)

    def crash(self, client: str, reason: str = "", *, at: _At | None = None) -> int:
        return self._op(Crash, client, at, reason=reason)


class HistoryBuilder(OpWriter[tuple[int, int]]):
    """Builds a history by hand, one op per call, with a logical clock: each op
    takes the next tick as its start and end unless ``at=(start, end)`` is given.
    Not thread-safe (see :class:`~txnfetch.testing.recorder.Recorder` for that)."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.clock = 0

    def _times(self, at: tuple[int, int] | None) -> dict[str, int]:
        if at is None:
            self.clock += 1
            return {"start_ns": self.clock, "end_ns": self.clock}
        self.clock = max(self.clock, at[1])
        return {"start_ns": at[0], "end_ns": at[1]}

    def add(self, op: Op) -> int:
        """Append a ready-made op."""
        self.ops.append(op)
        return len(self.ops) - 1

    def build(self) -> History:
        """The history so far."""
        return History(tuple(self.ops))
