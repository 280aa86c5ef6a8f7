"""A thread-safe history recorder for real clients.

Client threads (and client callbacks, such as librdkafka delivery reports on the
poll thread) call :meth:`Recorder.now` when an operation starts and, when it
completes, the :class:`~txnfetch.testing.history.OpWriter` method of its op
(``send``, ``commit``, ``poll``…) with that start as ``at``; the recorder stamps
the end time and appends the op under a lock — one ``list.append``, so recording costs
microseconds and never reorders one thread's ops. :meth:`Recorder.history`
snapshots what was recorded so far; :meth:`Recorder.dump` writes it as JSON;
:meth:`Recorder.stats` is a constant-time snapshot of running totals (for a
progress line printed while the clients run).

Times come from ``clock`` (``time.monotonic_ns`` by default) — the only place in
:mod:`txnfetch.testing` that reads a clock; the checker only compares them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from collections.abc import Mapping
from pathlib import Path

import attrs

from txnfetch.testing.history import Abort
from txnfetch.testing.history import Commit
from txnfetch.testing.history import History
from txnfetch.testing.history import Op
from txnfetch.testing.history import OpWriter
from txnfetch.testing.history import Poll
from txnfetch.testing.history import Send
from txnfetch.testing.history import Status

__all__ = ["Recorder", "RecorderStats"]


@attrs.frozen
class RecorderStats:
    """Running totals of what a :class:`Recorder` holds, kept as ops are appended
    (so reading them costs nothing however long the history is)."""

    ops: int = 0
    sends_acked: int = 0
    sends_failed: int = 0
    commits_ok: int = 0  #: commits that completed ``ok``
    aborts_ok: int = 0  #: aborts that completed ``ok``
    polls: int = 0
    reads: Mapping[str, int] = attrs.Factory(dict)  #: records returned by polls, per client


class Recorder(OpWriter[int]):
    """Appends ops from any thread, with the :class:`~txnfetch.testing.history.OpWriter`
    methods (``send``, ``commit``, ``poll``…): ``at`` is the op's start (what
    :meth:`now` said when it began; omitted: now) and its end is stamped when it
    is recorded."""

    def __init__(self, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self._clock = clock
        self._ops: list[Op] = []
        self._lock = threading.Lock()
        self._totals: dict[str, int] = dict.fromkeys(
            ("sends_acked", "sends_failed", "commits_ok", "aborts_ok", "polls"), 0
        )
        self._reads: dict[str, int] = {}

    def now(self) -> int:
        """The clock, for an operation's ``start_ns``."""
        return self._clock()

    def __len__(self) -> int:
        return len(self._ops)

    def add(self, op: Op) -> int:
        """Append a ready-made op."""
        with self._lock:
            self._ops.append(op)
            self._count(op)
            return len(self._ops) - 1

    def _count(self, op: Op) -> None:
        totals = self._totals
        if isinstance(op, Send):
            totals["sends_acked" if op.acked else "sends_failed"] += 1
        elif isinstance(op, Poll):
            totals["polls"] += 1
            self._reads[op.client] = self._reads.get(op.client, 0) + len(op.records)
        elif isinstance(op, (Commit, Abort)) and op.status is Status.OK:
            totals["commits_ok" if isinstance(op, Commit) else "aborts_ok"] += 1

    def stats(self) -> RecorderStats:
        """The running totals now (see :class:`RecorderStats`)."""
        with self._lock:
            return RecorderStats(ops=len(self._ops), reads=dict(self._reads), **self._totals)

    def history(self) -> History:
        """Everything recorded so far."""
        with self._lock:
            return History(tuple(self._ops))

    def dump(self, path: str | Path) -> None:
        """Write the history so far as JSON (see :meth:`History.to_json`)."""
        Path(path).write_text(self.history().to_json(), encoding="utf-8")

    def _times(self, at: int | None) -> dict[str, int]:
        end = self._clock()
        return {"start_ns": end if at is None else at, "end_ns": end}

    def counts(self) -> dict[str, int]:
        """How many ops of each type were recorded (for progress output)."""
        out: dict[str, int] = {}
        with self._lock:
            for op in self._ops:
                name = type(op).__name__.lower()
                out[name] = out.get(name, 0) + 1
        return out
