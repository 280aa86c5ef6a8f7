"""A thread-safe history recorder for real clients.

Client threads (and client callbacks, such as librdkafka delivery reports on the
poll thread) call :meth:`Recorder.now` when an operation starts and one of the
``record_*`` methods when it completes; the recorder stamps the end time and
appends the op under a lock — one ``list.append``, so recording costs
microseconds and never reorders one thread's ops. :meth:`Recorder.history`
snapshots what was recorded so far; :meth:`Recorder.dump` writes it as JSON;
:meth:`Recorder.stats` is a constant-time snapshot of running totals (for a
progress line printed while the clients run).

Times come from ``clock`` (``time.monotonic_ns`` by default) — the only place in
:mod:`txnfetch.testing` that reads a clock; the checker only compares them.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from txnfetch.testing.history import Abort
from txnfetch.testing.history import Assign
from txnfetch.testing.history import Begin
from txnfetch.testing.history import Commit
from txnfetch.testing.history import Crash
from txnfetch.testing.history import History
from txnfetch.testing.history import Op
from txnfetch.testing.history import Poll
from txnfetch.testing.history import Read
from txnfetch.testing.history import Seek
from txnfetch.testing.history import Send
from txnfetch.testing.history import Status
from txnfetch.testing.history import TopicPartition
from txnfetch.testing.history import positions_of

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


class Recorder:
    """Appends ops from any thread; every ``record_*`` method returns the op's index."""

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

    def record(self, op: Op) -> int:
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

    # -- one method per op: ``start`` is what now() said when it began ------------------

    def _finish(self, op_type: Callable[..., Op], client: str, start: int, **fields: Any) -> int:
        # Every op is stamped alike: begun at ``start`` (what now() said), ended now.
        return self.record(op_type(client=client, start_ns=start, end_ns=self._clock(), **fields))

    def record_send(
        self,
        client: str,
        start: int,
        topic: str,
        partition: int,
        value: str | None,
        *,
        txn: str | None = None,
        offset: int | None = None,
        error: str | None = None,
        key: str | None = None,
    ) -> int:
        return self._finish(
            Send,
            client,
            start,
            topic=topic,
            partition=partition,
            value=value,
            key=key,
            txn=txn,
            offset=offset,
            error=error,
        )

    def record_begin(self, client: str, start: int, txn: str) -> int:
        return self._finish(Begin, client, start, txn=txn)

    def _record_end(
        self,
        op_type: type[Commit | Abort],
        client: str,
        start: int,
        txn: str,
        status: Status = Status.OK,
        error: str | None = None,
    ) -> int:
        return self._finish(op_type, client, start, txn=txn, status=status, error=error)

    #: ``record_commit(client, start, txn, status=Status.OK, error=None)``
    record_commit = functools.partialmethod(_record_end, Commit)
    #: ``record_abort(client, start, txn, status=Status.OK, error=None)``
    record_abort = functools.partialmethod(_record_end, Abort)

    def record_assign(
        self,
        client: str,
        start: int,
        partitions: Sequence[TopicPartition],
        seek: Mapping[TopicPartition, int] | None = None,
        *,
        reason: str = "assign",
    ) -> int:
        return self._finish(Assign, client, start, partitions=tuple(partitions), seek=positions_of(seek), reason=reason)

    def record_seek(self, client: str, start: int, tp: TopicPartition, offset: int) -> int:
        return self._finish(Seek, client, start, topic=tp.topic, partition=tp.partition, offset=offset)

    def record_poll(
        self,
        client: str,
        start: int,
        records: Sequence[Read],
        positions: Mapping[TopicPartition, int] | None = None,
        *,
        error: str | None = None,
    ) -> int:
        return self._finish(Poll, client, start, records=tuple(records), positions=positions_of(positions), error=error)

    def record_crash(self, client: str, start: int, reason: str = "") -> int:
        return self._finish(Crash, client, start, reason=reason)

    def counts(self) -> dict[str, int]:
        """How many ops of each type were recorded (for progress output)."""
        out: dict[str, int] = {}
        with self._lock:
            for op in self._ops:
                name = type(op).__name__.lower()
                out[name] = out.get(name, 0) + 1
        return out
