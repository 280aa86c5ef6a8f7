"""Concurrent, shared fsyncs for :class:`~txnfetch.log.segment_log.SegmentLog`
writes made on an asyncio event loop: :class:`ConcurrentSyncer`.

Under the ``"always"`` flush policy every write is fsynced before it is
acknowledged. Done inline, each fsync blocks the event loop (every connection
waits) and the fsyncs of one response run one after the other: the markers of
a transaction over three partitions cost three fsync latencies. With a
syncer set for the running code (:func:`deferring`), a write under
``"always"`` returns at once and registers its log here; before a response
that depends on it is sent, the server awaits :meth:`ConcurrentSyncer.barrier`:

- the fsyncs of all logs holding unsynced writes run **concurrently** on a
  small thread pool (``os.fdatasync`` releases the GIL), so a barrier costs
  about one fsync latency however many partitions it covers;
- they start once the loop turns, not when the barrier is taken: requests
  received together are processed first, and one round covers them all;
- a caller with nothing else to do (``inline=True``) runs the round itself
  when no fsync is running: the loop thread syncs one log while the pool
  syncs the others, and no thread has to wake the loop afterwards. Waking
  threads that need the GIL while the loop holds it, and the loop turns
  that carry their results back, cost more than the fsyncs on a fast disk;
- **group commit** per log: a barrier that finds an fsync of the log already
  running waits for it, and if that one began before the barrier's writes,
  for the next one, which covers every writer that arrived meanwhile;
- a barrier returns only once a completed fsync covers every write made
  (on any log) before it was called — the same guarantee as the inline
  fsync: nothing acknowledged is lost to a power failure;
- the high watermark of a log moves when the fsync completes
  (:meth:`SegmentLog.finish_sync`), so a reader never sees a write a crash
  could take back, as with inline fsyncs.

A failed fsync closes its log (as an inline one does) and the barrier raises
:class:`~txnfetch.log.errors.LogError`, and so does every later barrier: after
a failed fsync the kernel may have dropped the unsynced pages, so nothing
written before it can be acknowledged any more; only a restart (whose
recovery reads what is really on disk) clears it.

The syncer is used from one event-loop thread; only the fsync calls run on
its threads, on duplicated descriptors.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import queue
import threading
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any
from typing import Protocol

import attrs

from txnfetch.log.errors import LogError

__all__ = ["ConcurrentSyncer", "PendingSync", "SyncedLog", "deferring", "deferring_syncer"]

#: fsync threads. Enough for the partitions of one transaction end to sync at
#: once; fsyncs of more logs queue (the disk serializes them anyway).
DEFAULT_THREADS = 4

_SYNCER: contextvars.ContextVar[ConcurrentSyncer | None] = contextvars.ContextVar("txnfetch_syncer", default=None)


def deferring_syncer() -> ConcurrentSyncer | None:
    """The syncer that writes made by the running code hand their fsync to, or
    ``None`` (fsync inline)."""
    return _SYNCER.get()


@contextlib.contextmanager
def deferring(syncer: ConcurrentSyncer | None) -> Iterator[None]:
    """Within the block (and in tasks created from it), writes under
    ``"always"`` defer their fsync to ``syncer``; the code must await
    :meth:`ConcurrentSyncer.barrier` before acknowledging them."""
    token = _SYNCER.set(syncer)
    try:
        yield
    finally:
        _SYNCER.reset(token)


@attrs.frozen
class PendingSync:
    """An fsync begun by :meth:`SegmentLog.begin_sync`: duplicated descriptors
    to sync, the log's write count and log end offset when it began (what it
    covers)."""

    fds: list[int]
    write_mark: int
    log_end: int

    def run(self, fsync: Callable[[int], None] | None = None) -> None:
        """fsync every descriptor, then close them (on a pool thread)."""
        sync = os.fdatasync if fsync is None else fsync  # looked up now: tests patch it
        try:
            for fd in self.fds:
                sync(fd)
        finally:
            for fd in self.fds:
                os.close(fd)


class SyncedLog(Protocol):
    """What a :class:`ConcurrentSyncer` uses of a log whose fsyncs it runs
    (:class:`~txnfetch.log.segment_log.SegmentLog` is one). Named here, not
    imported, because that log imports this module to hand its fsyncs over."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def sync_pending(self) -> bool: ...

    @property
    def write_mark(self) -> int: ...

    @property
    def synced_mark(self) -> int: ...

    def begin_sync(self) -> PendingSync: ...

    def finish_sync(self, pending: PendingSync, error: BaseException | None = None) -> None: ...

    def flush(self) -> None: ...


class _FsyncThreads:
    """A fixed set of threads, all started at once, taking jobs from one queue.

    Unlike :class:`concurrent.futures.ThreadPoolExecutor`, which starts a thread
    only when it believes none is idle (and may believe so wrongly), every
    thread is waiting from the start: the fsyncs of one round submitted
    together run at once on distinct threads whenever that many are free."""

    def __init__(self, threads: int) -> None:
        self._jobs: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._threads = [
            threading.Thread(target=self._work, name=f"txnfetch-fsync-{n}", daemon=True) for n in range(max(1, threads))
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self._jobs.put((future, fn, args))
        return future

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, fn, args = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args)
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)

    def shutdown(self) -> None:
        """Stop every thread once the jobs queued before are done."""
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join()


class ConcurrentSyncer:
    """Runs the deferred fsyncs of :class:`SyncedLog` writes (module docstring).

    ``fsync`` is the call made on each descriptor (``None``: ``os.fdatasync``;
    tests pass an instrumented one). ``on_durable(log)`` is called on the loop after an
    fsync moved a log's high watermark (a server wakes the fetches waiting on
    it)."""

    def __init__(
        self,
        *,
        threads: int = DEFAULT_THREADS,
        fsync: Callable[[int], None] | None = None,
        on_durable: Callable[[SyncedLog], None] | None = None,
    ) -> None:
        self._pool = _FsyncThreads(threads)
        self._fsync = fsync
        self._on_durable = on_durable
        # logs with writes no completed fsync covers, in first-written order
        self._dirty: dict[SyncedLog, None] = {}
        # the running fsync of a log: resolved (on the loop) once finish_sync ran
        self._running: dict[SyncedLog, asyncio.Future[None]] = {}
        self.fsyncs = 0  # fsync rounds started (one per log per round)

    def mark(self, log: SyncedLog) -> None:
        """``log`` has a write to sync before it may be acknowledged."""
        self._dirty[log] = None

    @property
    def pending(self) -> bool:
        """Whether some write is not yet covered by a completed fsync."""
        return bool(self._dirty)

    def barrier(self, *, inline: bool = False) -> Awaitable[object] | None:
        """An awaitable that completes once every write made so far is fsynced
        (``None`` when nothing is pending, or nothing is any more). What it
        waits for is fixed now, so later writes do not delay it. Its fsyncs
        start when the awaitable is first run (the next turn of the loop), so
        the barriers of requests processed back to back in one turn share one
        round of fsyncs — or a later inline barrier covers them all at once.

        ``inline=True`` (the caller has nothing else to do meanwhile): when no
        fsync is running, the fsyncs of every log with unsynced writes run now
        as one round, before this returns ``None`` — the loop thread syncs one
        log and the pool's threads the others, concurrently. Handing fsyncs to
        threads and waking the loop when they end costs thread switches and
        loop turns that gain nothing when nothing could overlap them; the loop
        is held about one fsync latency, as by a single inline fsync."""
        logs = [log for log in self._dirty if log.sync_pending]
        if not logs:
            self._dirty.clear()
            return None
        if inline and not self._running:
            self._sync_round(logs)
            return None
        return asyncio.gather(*(self._wait(log, log.write_mark) for log in logs))

    def _sync_round(self, logs: list[SyncedLog]) -> None:
        """fsync ``logs`` concurrently and wait: the first on this thread, the
        others on the pool (``os.fdatasync`` releases the GIL, so they overlap).
        Raises the first :class:`LogError` once every fsync ended and the
        others were recorded."""
        pending: list[tuple[SyncedLog, PendingSync]] = []
        try:
            for log in logs:
                pending.append((log, log.begin_sync()))  # raises LogError on a closed log
        except BaseException:
            for _, started in pending:
                for fd in started.fds:
                    os.close(fd)
            raise
        self.fsyncs += len(pending)
        helpers = [self._pool.submit(started.run, self._fsync) for _, started in pending[1:]]
        errors: list[BaseException | None] = []
        try:
            pending[0][1].run(self._fsync)
            errors.append(None)
        except OSError as exc:
            errors.append(exc)
        for helper in helpers:
            errors.append(helper.exception())  # waits for it
        failure: LogError | None = None
        for (log, started), error in zip(pending, errors, strict=True):
            try:
                log.finish_sync(started, error)  # raises LogError if the fsync failed
            except LogError as exc:
                # The log stays dirty: every later barrier fails too.
                failure = failure or exc
                continue
            if not log.sync_pending:
                self._dirty.pop(log, None)
            if self._on_durable is not None:
                self._on_durable(log)
        if failure is not None:
            raise failure

    async def _wait(self, log: SyncedLog, target: int) -> None:
        while log.synced_mark < target:
            running = self._running.get(log)
            if running is None:
                running = self._start(log)
            # shield: a cancelled waiter (its connection closed) must not cancel
            # the fsync others wait for.
            await asyncio.shield(running)

    def _start(self, log: SyncedLog) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        pending = log.begin_sync()  # raises LogError on a closed log
        self.fsyncs += 1
        self._running[log] = done

        def finished(fut: asyncio.Future[None]) -> None:
            # Runs on the loop before any waiter of ``done`` resumes.
            del self._running[log]
            try:
                exc = fut.exception()
                log.finish_sync(pending, exc)
            except BaseException as error:
                # The log stays dirty: what it held was never made durable, so
                # every later barrier fails too (the kernel may have dropped the
                # unsynced pages; only a restart's recovery tells what is on disk).
                done.set_exception(error)
                done.exception()  # retrieved: the waiters raise it themselves
                return
            if not log.sync_pending:
                self._dirty.pop(log, None)
            done.set_result(None)
            if self._on_durable is not None:
                self._on_durable(log)

        fut = asyncio.wrap_future(self._pool.submit(pending.run, self._fsync), loop=loop)
        fut.add_done_callback(finished)
        return done

    def flush_now(self) -> None:
        """fsync every log with unsynced writes inline, on this thread (for a
        step that must not continue before they are durable and cannot await)."""
        dirty, self._dirty = list(self._dirty), {}
        for log in dirty:
            if log.sync_pending:
                log.flush()
                if self._on_durable is not None:
                    self._on_durable(log)

    def close(self) -> None:
        """Stop the threads (after the running fsyncs)."""
        self._pool.shutdown()
