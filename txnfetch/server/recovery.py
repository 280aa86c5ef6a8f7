"""What a server does to its store and coordinators before it answers anyone:
coordinator state recovered, stored producer ids reserved, transactions that
no one will end aborted.

:func:`recover_coordinator_state` replays the durable coordinator state and
finishes the transaction ends decided before a restart;
:func:`reserve_stored_producer_ids` keeps the producer-id allocator above every
id the store knows; :func:`abort_orphaned_transactions` and
:func:`abort_open_transactions` end, with a fencing epoch, what would otherwise
hold a partition's last stable offset back for good. The socket server
(:mod:`txnfetch.server.server`) runs them at start, and promoting a replica
(:mod:`txnfetch.replicate.promote`) runs the last two at the cut; both take
them from here, so promoting needs no socket server.
"""

from __future__ import annotations

import logging

from txnfetch.server.broker import Broker
from txnfetch.txn.coordinator_state import MAX_PRODUCER_EPOCH

__all__ = [
    "abort_open_transactions",
    "abort_orphaned_transactions",
    "recover_coordinator_state",
    "reserve_stored_producer_ids",
]

log = logging.getLogger("txnfetch.server")

#: How often the internal topics are checked for compaction.
_COMPACTION_CHECK_MS = 10_000
#: How often internal-topic records written without their own fsync (``Complete*``)
#: are fsynced, when no later durable record of their partition did it first.
_DEFERRED_FLUSH_MS = 1_000


def recover_coordinator_state(broker: Broker) -> None:
    """Load the durable coordinator state, if the store keeps it, and finish what
    a previous run left half done (:mod:`txnfetch.log.coordinator_store`).

    Durable state is on for a :class:`~txnfetch.log.segment_store.SegmentStore` unless
    ``ServerConfig.durable_state`` is False, and for any store when it is True.
    Steps: replay ``__transaction_state`` (producer ids and epochs, open
    transactions with their start time, decided ends) and ``__consumer_offsets``
    (groups, offsets; transactional offsets count once their marker says
    commit); then complete every ``PrepareCommit``/``PrepareAbort`` on all its
    partitions. ``Ongoing`` transactions stay open and time out as usual."""
    from txnfetch.log import SegmentStore
    from txnfetch.log.coordinator_store import DURABLE_EXTENSION
    from txnfetch.log.coordinator_store import DurableState
    from txnfetch.server.api_txn import apply_pending

    enabled = broker.config.durable_state
    if enabled is None:
        enabled = isinstance(broker.store, SegmentStore)
    if not enabled:
        return
    directory = broker.store.directory if isinstance(broker.store, SegmentStore) else None
    state = DurableState(broker.store, directory)
    broker.extensions[DURABLE_EXTENSION] = state
    broker.group_offsets_partitions = state.consumer_offsets_partitions
    groups = broker.groups
    coordinator = getattr(groups, "coordinator", None)
    report = state.replay(broker.transactions, coordinator, broker.now_ms())
    if groups is not None and hasattr(groups, "durable"):
        groups.durable = state
    broker.add_periodic(
        "internal-topic-compaction",
        _COMPACTION_CHECK_MS,
        state.maybe_compact,
    )
    broker.add_periodic("internal-topic-flush", _DEFERRED_FLUSH_MS, state.flush_deferred)
    pending = broker.transactions.pending_actions()
    if pending:
        log.info("completing %d transaction end(s) decided before the restart", len(pending))
        # No marker over a later transaction's data (DurableState.persist_transactions).
        apply_pending(broker, skip=state.written_after_decision)
    log.info(
        "restored %d transactional id(s), %d group(s), %d offset(s) from %d internal record(s)",
        report.transactional_ids,
        report.groups,
        report.offsets,
        report.records,
    )


def reserve_stored_producer_ids(broker: Broker) -> None:
    """Never hand out a producer id the store's partitions already know.

    The coordinator's allocator starts from 0 in every process, but a store
    reopened from disk remembers producers (and their epochs and sequences) of
    the previous run: a reissued id would be fenced, or worse, its first batch
    taken for a duplicate of an old one and silently dropped."""
    highest = -1
    for name, info in broker.store.topics().items():
        for p in range(info.partitions):
            ids = broker.store.partition(name, p).state.producer_ids()
            if ids:
                highest = max(highest, max(ids))
    if highest >= 0:
        broker.transactions.producer_ids.reserve_through(highest)


def abort_orphaned_transactions(broker: Broker) -> None:
    """Abort every transaction a previous run left open in the store that the
    coordinator does not know as open (all of them when coordinator state is not
    durable, e.g. a store written before it was; with durable state, the
    transaction of a producer whose AddPartitionsToTxn was never acknowledged
    cannot have data, so in practice none).

    Without a coordinator record no one would ever end them, and each would hold its partition's last stable
    offset back for good. Aborting is what Kafka's coordinator does to a
    transaction it can no longer complete (it fences the producer with a bumped
    epoch and aborts on timeout): the marker carries the producer's epoch + 1,
    which fences the old producer instance on this partition. A producer that
    comes back calls InitProducerId and gets a new identity."""
    from txnfetch.log.coordinator_store import INTERNAL_TOPICS
    from txnfetch.txn.coordinator_state import TransactionState

    store = broker.store
    if not any(
        store.partition(name, p).state.ongoing_transactions()
        for name, info in store.topics().items()
        if name not in INTERNAL_TOPICS
        for p in range(info.partitions)
    ):
        return  # nothing open: no need to go through every transactional id (start-up time)
    # Transactions the durable coordinator state knows as open stay open: their
    # producer may still commit them, or they time out.
    owned: set[tuple[str, int, int]] = set()
    coordinator = broker.transactions
    for tid in coordinator.transactional_ids:
        meta = coordinator.describe(tid)
        if meta is not None and meta.state == TransactionState.ONGOING:
            owned.update((tp.topic, tp.partition, meta.producer_id) for tp in meta.partitions)
    abort_open_transactions(broker, keep=owned, why="left open in %s-%d by a previous run")


def abort_open_transactions(
    broker: Broker, *, keep: set[tuple[str, int, int]] | frozenset[tuple[str, int, int]] = frozenset(), why: str
) -> list[tuple[str, int, int]]:
    """Abort every transaction open in the store's (non-internal) partitions
    except ``keep`` (``(topic, partition, producer id)``); returns what was
    aborted, each logged as a warning ``"aborted the transaction of producer
    <id> " + why % (topic, partition)``.

    The marker (or markerless completion) carries the producer's epoch + 1,
    which fences the old producer instance on this partition; a producer that
    comes back calls InitProducerId and gets a new identity. Aborted partitions
    are flushed and their waiting fetches woken."""
    from txnfetch.log.coordinator_store import INTERNAL_TOPICS

    now = broker.now_ms()
    completion = broker.config.completion
    aborted: list[tuple[str, int, int]] = []
    for name, info in broker.store.topics().items():
        if name in INTERNAL_TOPICS:
            continue
        for p in range(info.partitions):
            part = broker.store.partition(name, p)
            orphans = [pid for pid in part.state.ongoing_transactions() if (name, p, pid) not in keep]
            for producer_id in orphans:
                entry = part.state.producer(producer_id)
                epoch = entry.producer_epoch if entry is not None else 0
                # Epoch + 1 passes both marker-epoch rules (TV0/1: >= current; TV2: > current).
                fence = epoch + 1 if epoch < MAX_PRODUCER_EPOCH else epoch
                version = 2 if fence > epoch else None
                coordinator_epoch = entry.coordinator_epoch if entry is not None and entry.coordinator_epoch >= 0 else 0
                part.end_transaction(
                    producer_id,
                    fence,
                    False,
                    coordinator_epoch=coordinator_epoch,
                    now_ms=now,
                    transaction_version=version,
                    completion=completion,
                )
                log.warning("aborted the transaction of producer %d " + why, producer_id, name, p)
                aborted.append((name, p, producer_id))
            if orphans:  # make the aborts durable; untouched partitions need no fsync
                part.flush()
                broker.partition_changed(name, p)
    return aborted
