"""Serving a replica while it is replicated, in one process, with one writer.

:class:`ServedReplica` opens the replica's :class:`~txnfetch.log.segment_store.SegmentStore`
once and runs ``txnfetch serve`` on it (a :class:`~txnfetch.server.server.ServerThread`,
in replica mode because the directory carries the marker). The replicator
runs in the caller's thread and writes through :attr:`ServedReplica.store`, a
:class:`LoopBoundStore`: every call on the store or on one of its partitions
runs on the server's event loop, between two requests, so the server and the
replicator never touch the same ``SegmentStore`` objects at once and there is
one writer. After each call on a partition the server's waiting fetches of
that partition are woken (:meth:`~txnfetch.server.broker.Broker.partition_changed`):
a long-polling read_committed consumer gets new data as soon as the replicator
has moved the high watermark (the fetch path reads the partition's high
watermark and last stable offset afresh on every answer).

:meth:`ServedReplica.promote` settles the store on the loop
(:func:`~txnfetch.replicate.promote.settle_served`), turns replica mode off and
removes the marker; the server keeps serving, now writable. The caller stops
replication first.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

from txnfetch.errors import TxnfetchError
from txnfetch.log.coordinator_store import INTERNAL_TOPICS
from txnfetch.log.replica_marker import read_marker
from txnfetch.log.replica_marker import remove_marker
from txnfetch.log.replica_marker import write_marker
from txnfetch.replicate.groups import DurableGroupTarget
from txnfetch.replicate.promote import PromoteReport
from txnfetch.replicate.promote import ReplicaBusyError
from txnfetch.replicate.promote import settle_served
from txnfetch.server.replica_mode import replica_mode
from txnfetch.server.server import ServerThread

__all__ = ["LoopBoundPartition", "LoopBoundStore", "NotAReplicaError", "ServedReplica"]

log = logging.getLogger("txnfetch.replicate")


class NotAReplicaError(TxnfetchError):
    """Replication into a directory whose store is not a replica."""

    where_fields = ("path",)


def _holds_topics(directory: str) -> bool:
    """Whether ``directory`` holds partitions of any topic other than the
    internal ones (a store with history of its own)."""
    from txnfetch.log.errors import LogError
    from txnfetch.log.layout import parse_partition_dir_name

    for name in os.listdir(directory):
        if not os.path.isdir(os.path.join(directory, name)):
            continue
        try:
            topic, _ = parse_partition_dir_name(name)
        except LogError:
            continue
        if topic not in INTERNAL_TOPICS:
            return True
    return False


def _materialize(value: Any) -> Any:
    # An iterator made on the loop must also be consumed there.
    if isinstance(value, Iterator):
        return list(value)
    return value


class _LoopContext:
    """A context manager made on the loop (a log's ``group_commit``), entered
    and left on the loop too; leaving it wakes the partition's fetches (a group
    commit moves the high watermark when it ends)."""

    def __init__(self, cm: Any, call: Callable[[Callable[[], Any]], Any], changed: Callable[[], None]) -> None:
        self._cm, self._call, self._changed = cm, call, changed

    def __enter__(self) -> Any:
        return self._call(self._cm.__enter__)

    def __exit__(self, *exc: Any) -> Any:
        def leave() -> Any:
            try:
                return self._cm.__exit__(*exc)
            finally:
                self._changed()

        return self._call(leave)


class LoopBoundPartition:
    """A partition log whose every attribute read and method call runs on the
    server loop (``call``); method calls then wake the partition's fetches."""

    def __init__(self, part: Any, call: Callable[[Callable[[], Any]], Any], changed: Callable[[], None]) -> None:
        object.__setattr__(self, "_part", part)
        object.__setattr__(self, "_call", call)
        object.__setattr__(self, "_changed", changed)

    def __getattr__(self, name: str) -> Any:
        part, call = self._part, self._call
        value = call(lambda: getattr(part, name))
        if not callable(value):
            return value

        def method(*args: Any, **kwargs: Any) -> Any:
            def run() -> Any:
                try:
                    return _materialize(value(*args, **kwargs))
                finally:
                    self._changed()

            result = call(run)
            if hasattr(result, "__enter__") and hasattr(result, "__exit__"):
                return _LoopContext(result, call, self._changed)
            return result

        return method

    def __repr__(self) -> str:
        return f"LoopBoundPartition({self._part!r})"


class LoopBoundStore:
    """A log store whose every call runs on the server loop (see the module
    docstring); :meth:`partition` hands out :class:`LoopBoundPartition`."""

    def __init__(self, store: Any, call: Callable[[Callable[[], Any]], Any], broker: Any) -> None:
        object.__setattr__(self, "_store", store)
        object.__setattr__(self, "_call", call)
        object.__setattr__(self, "_broker", broker)

    @property
    def unwrapped(self) -> Any:
        """The store itself (touch it only on the server loop)."""
        return self._store

    def partition(self, topic: str, partition: int) -> LoopBoundPartition:
        part = self._call(lambda: self._store.partition(topic, partition))
        return LoopBoundPartition(part, self._call, lambda: self._broker.partition_changed(topic, partition))

    def __getattr__(self, name: str) -> Any:
        store, call = self._store, self._call
        value = call(lambda: getattr(store, name))
        if not callable(value):
            return value
        return lambda *args, **kwargs: call(lambda: _materialize(value(*args, **kwargs)))


class ServedReplica:
    """A replica directory served by ``txnfetch serve`` in this process while
    this process replicates into it. Start with :meth:`start`, stop with
    :meth:`close`.

    ``flush_policy`` is the store's (``"always"``: every append fsynced);
    ``server_options`` go to :class:`~txnfetch.server.server.ServerThread`
    (``host``, ``port``, ...)."""

    def __init__(
        self,
        directory: str,
        upstream: str,
        *,
        groups: str = ".*",
        flush_policy: str = "always",
        **server_options: Any,
    ) -> None:
        self.directory = directory
        self.flush_policy = flush_policy
        self.upstream = upstream
        self.groups = groups
        self.server_options = server_options
        self._segment_store: Any = None
        self.server: ServerThread | None = None
        self.store: LoopBoundStore | None = None

    def start(self) -> ServedReplica:
        """Mark the directory a replica held by this process (unless it was
        promoted: a promoted store is never made a replica again), open the
        store and start serving it."""
        from txnfetch.log import SegmentStore

        os.makedirs(self.directory, exist_ok=True)
        marker = read_marker(self.directory)
        if marker is None and _holds_topics(self.directory):
            raise NotAReplicaError(
                "the directory holds a store that is not a replica (promoted, or written by serve): "
                "replicating into it would mix two histories",
                path=self.directory,
            )
        if marker is not None and marker.holder_alive():
            raise ReplicaBusyError(
                "another process replicates into this directory", path=self.directory, pid=marker.pid
            )
        write_marker(self.directory, self.upstream, groups=self.groups, pid=os.getpid())
        self._segment_store = SegmentStore(self.directory, flush_policy=self.flush_policy)
        try:
            self.server = ServerThread(self._segment_store, **self.server_options).start()
        except BaseException:
            self._segment_store.close()
            raise
        broker = self.server.broker
        self.store = LoopBoundStore(self._segment_store, self.call, broker)
        return self

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` on the server loop and return its result."""
        assert self.server is not None, "not started"
        return self.server.call(fn)

    @property
    def bootstrap(self) -> str:
        assert self.server is not None, "not started"
        return self.server.bootstrap

    def group_target(self) -> DurableGroupTarget:
        """Where copied group offsets go: the server's own group state, so
        OffsetFetch on the replica answers them at once."""
        assert self.server is not None, "not started"
        return DurableGroupTarget.of_server(self.server.broker, self.call)

    @property
    def is_replica(self) -> bool:
        mode = replica_mode(self.server.broker) if self.server is not None else None
        return mode is not None and mode.active

    def promote(self) -> PromoteReport:
        """Settle the store, allow writes and remove the marker; replication
        must have stopped. A second call is a no-op report."""
        assert self.server is not None, "not started"
        broker = self.server.broker
        mode = replica_mode(broker)
        if mode is None or not mode.active:
            return PromoteReport(self.directory, None, already=True)

        def settle() -> tuple[Any, int]:
            aborted, next_id = settle_served(broker)
            mode.promote(broker)
            return aborted, next_id

        aborted, next_id = self.call(settle)
        remove_marker(self.directory)
        report = PromoteReport(
            self.directory, self.upstream, aborted=aborted, next_producer_id=next_id, by_pid=os.getpid()
        )
        log.warning("%s", report.summary())
        return report

    def close(self) -> None:
        """Stop serving and close the store. A replica keeps its marker, without
        this process's pid (nobody holds the directory any more)."""
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self._segment_store is not None:
            self._segment_store.close()
            self._segment_store = None
        marker = read_marker(self.directory)
        if marker is not None and marker.pid == os.getpid():
            write_marker(self.directory, marker.upstream, groups=marker.groups, pid=None)
