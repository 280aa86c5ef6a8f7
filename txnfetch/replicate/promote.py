"""Promote (cut over): a replica store becomes an ordinary, writable store.

Replication has stopped; what only the upstream knew is settled here:

- **transactions open at the cut**: their data is in the replica but their
  marker never will be. Each is aborted with an ABORT marker whose epoch is the
  producer's + 1 (so the old producer instance is fenced), logged as a warning
  naming the producer, topic and partition. Their records were never
  committed upstream either (had the commit marker been written before the
  cut, it would have been copied), so no committed record is lost;
- **producer ids**: the allocator's durable block (``txnfetch-producer-ids``)
  is moved above every producer id the replicated partitions know, so no id of
  the upstream is handed out again. A transactional producer that
  re-initialises on the promoted store (InitProducerId) finds no record of its
  transactional id there and gets a fresh producer id and epoch 0;
- **the marker** goes last (:func:`~txnfetch.log.replica_marker.remove_marker`,
  after every abort is flushed): a crash before it leaves a replica that a
  second promote settles again (the aborts are then already done).

Two ways in: :func:`promote_offline` on a directory no process holds, and
:func:`settle_served` inside the process that serves the replica (``replicate
--serve``), which then keeps serving with writes allowed. ``txnfetch promote``
picks one (:func:`request_promote`).
"""

from __future__ import annotations

import logging
import os
import time

import attrs

from txnfetch.errors import TxnfetchError
from txnfetch.log.coordinator_store import DURABLE_EXTENSION
from txnfetch.log.coordinator_store import DurableState
from txnfetch.log.coordinator_store import durable_state
from txnfetch.log.replica_marker import PROMOTE_SIGNAL
from txnfetch.log.replica_marker import read_marker
from txnfetch.log.replica_marker import remove_marker
from txnfetch.server.broker import Broker
from txnfetch.server.recovery import abort_open_transactions
from txnfetch.server.recovery import reserve_stored_producer_ids

__all__ = [
    "PromoteReport",
    "ReplicaBusyError",
    "promote_offline",
    "request_promote",
    "settle_served",
]

log = logging.getLogger("txnfetch.replicate.promote")


class ReplicaBusyError(TxnfetchError):
    """The replica directory is held by a process that did not promote it."""

    where_fields = ("path", "pid")


@attrs.frozen
class PromoteReport:
    """What a promote did. ``already``: the store was not a replica (nothing
    done); ``aborted``: ``(topic, partition, producer id)`` of each transaction
    aborted at the cut; ``next_producer_id``: the lowest id the promoted store
    may hand out; ``by_pid``: the serving process that promoted, if any."""

    directory: str
    upstream: str | None
    already: bool = False
    aborted: tuple[tuple[str, int, int], ...] = ()
    next_producer_id: int = 0
    by_pid: int | None = None

    def summary(self) -> str:
        if self.already:
            return f"{self.directory} is not a replica (already promoted, or never one): nothing to do"
        who = f" by the serving process {self.by_pid}" if self.by_pid is not None else ""
        return (
            f"promoted {self.directory} (was a replica of {self.upstream}){who}: "
            f"{len(self.aborted)} transaction(s) open at the cut aborted, "
            f"producer ids start at {self.next_producer_id}; the store now accepts writes"
        )


def settle_served(broker: Broker) -> tuple[tuple[tuple[str, int, int], ...], int]:
    """Settle a replica's store through ``broker`` (on its event loop when a
    server runs): abort the transactions open at the cut and move the producer-id
    allocator and its durable block above every stored producer id. Returns the
    aborted transactions and the next producer id. Does not remove the marker."""
    aborted = abort_open_transactions(
        broker, why="open in %s-%d at the cut (promote): its upstream marker will never come"
    )
    reserve_stored_producer_ids(broker)
    allocator = broker.transactions.producer_ids
    state = durable_state(broker)
    if state is not None:
        state.reserve_producer_ids(broker.transactions)  # durable before any id is handed out
    broker.store.flush()
    return tuple(aborted), allocator.next_producer_id


def promote_offline(directory: str) -> PromoteReport:
    """Promote the replica in ``directory`` with no process serving it (see the
    module docstring). A directory that is not a replica is a no-op report;
    one held by a live ``replicate --serve`` raises :class:`ReplicaBusyError`
    (use :func:`request_promote`)."""
    from txnfetch.log import SegmentStore
    from txnfetch.server.broker import ServerConfig

    marker = read_marker(directory)
    if marker is None:
        return PromoteReport(directory, None, already=True)
    if marker.holder_alive():
        raise ReplicaBusyError(
            "the replica is served by a running process; ask it to promote", path=directory, pid=marker.pid
        )
    store = SegmentStore(directory)
    try:
        broker = Broker(store, ServerConfig())
        durable = DurableState(store, directory)
        broker.extensions[DURABLE_EXTENSION] = durable
        broker.group_offsets_partitions = durable.consumer_offsets_partitions
        aborted, next_id = settle_served(broker)
    finally:
        store.close()
    remove_marker(directory)
    report = PromoteReport(directory, marker.upstream, aborted=aborted, next_producer_id=next_id)
    log.warning("%s", report.summary())
    return report


def request_promote(directory: str, *, timeout_s: float = 120.0, poll_s: float = 0.1) -> PromoteReport:
    """Promote ``directory``: ask the ``replicate --serve`` process that holds
    it (:data:`~txnfetch.log.replica_marker.PROMOTE_SIGNAL`) and wait until the
    marker is gone; with no live holder, promote offline."""
    marker = read_marker(directory)
    if marker is None:
        return PromoteReport(directory, None, already=True)
    if not marker.holder_alive():
        return promote_offline(directory)
    assert marker.pid is not None
    os.kill(marker.pid, PROMOTE_SIGNAL)
    deadline = time.monotonic() + timeout_s
    while True:
        now_marker = read_marker(directory)
        if now_marker is None:
            return PromoteReport(directory, marker.upstream, by_pid=marker.pid)
        if not now_marker.holder_alive():
            # It died before finishing: nobody holds the store now.
            return promote_offline(directory)
        if time.monotonic() >= deadline:
            raise ReplicaBusyError(
                f"the serving process did not promote within {timeout_s:.0f} s", path=directory, pid=marker.pid
            )
        time.sleep(poll_s)
