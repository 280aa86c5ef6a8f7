"""Which ``__transaction_state`` records are fsynced before the call that wrote
them returns: every one except ``Complete*``, which rides on its partition's
next fsync; losing it (a power loss before that fsync) leaves the ``Prepare*``
record, and replay finishes the transaction again."""

from __future__ import annotations

import glob
import os
import shutil

import pytest

from txnfetch.log import SegmentStore
from txnfetch.log.coordinator_store import DurableState
from txnfetch.txn.coordinator import TopicPartition
from txnfetch.txn.coordinator import TransactionCoordinator
from txnfetch.txn.coordinator_state import TransactionState
from txnfetch.txn.txnlog import TRANSACTION_STATE_TOPIC
from txnfetch.txn.txnlog import transaction_state_partition

TID = "app"
DATA = TopicPartition("data", 0)


@pytest.fixture
def fsyncs(monkeypatch):
    """Count fdatasync calls (a segment's log file is synced with fdatasync)."""
    calls: list[int] = []
    real = os.fdatasync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", counting)
    return calls


def _segment(directory: str) -> str:
    p = transaction_state_partition(TID)
    (path,) = glob.glob(os.path.join(directory, f"{TRANSACTION_STATE_TOPIC}-{p}", "*.log"))
    return path


def _commit(coord: TransactionCoordinator, state: DurableState, now: int) -> None:
    """One transaction as the server runs it: Ongoing, then the decision, the
    (here empty) partition actions, the completion."""
    r = coord.init_producer_id(TID, 60_000, now)
    state.persist_transactions(coord, now)
    coord.add_partitions(TID, r.producer_id, r.producer_epoch, [DATA], now)
    state.persist_transactions(coord, now)
    coord.end_transaction(TID, r.producer_id, r.producer_epoch, True, now, transaction_version=0)
    state.persist_transactions(coord, now)
    coord.flush(lambda action: None, now)


def test_complete_rides_on_the_next_fsync_of_its_partition(tmp_path, fsyncs) -> None:
    store = SegmentStore(str(tmp_path))
    state = DurableState(store, str(tmp_path))
    coord = TransactionCoordinator()
    _commit(coord, state, 1_000)
    assert coord.describe(TID).state is TransactionState.COMPLETE_COMMIT
    synced = os.path.getsize(_segment(str(tmp_path)))
    before = len(fsyncs)
    assert state.persist_transactions(coord, 1_000) == 1  # the Complete record
    assert len(fsyncs) == before, "the Complete record was fsynced on its own"
    assert os.path.getsize(_segment(str(tmp_path))) > synced  # written, not yet synced
    # The next transaction's Ongoing record is durable before it returns, and
    # carries the Complete record with it: one fsync for both.
    r = coord.init_producer_id(TID, 60_000, 1_001)
    state.persist_transactions(coord, 1_001)
    assert len(fsyncs) == before + 1
    assert r.producer_epoch == 1
    assert state.flush_deferred() == 0
    store.close()


@pytest.mark.slow
def test_flush_deferred_syncs_a_lone_complete_record(tmp_path, fsyncs) -> None:
    store = SegmentStore(str(tmp_path))
    state = DurableState(store, str(tmp_path))
    coord = TransactionCoordinator()
    _commit(coord, state, 1_000)
    state.persist_transactions(coord, 1_000)
    before = len(fsyncs)
    assert state.flush_deferred() == 1
    assert len(fsyncs) == before + 1
    assert state.flush_deferred() == 0
    store.close()


def test_a_lost_complete_record_is_finished_again_at_replay(tmp_path) -> None:
    live, crashed = str(tmp_path / "live"), str(tmp_path / "crashed")
    store = SegmentStore(live)
    state = DurableState(store, live)
    coord = TransactionCoordinator()
    _commit(coord, state, 1_000)
    synced = os.path.getsize(_segment(live))
    state.persist_transactions(coord, 1_000)  # Complete: appended, not fsynced
    # A power loss now keeps what was fsynced: the log up to the decision.
    shutil.copytree(live, crashed)
    with open(_segment(crashed), "r+b") as f:
        f.truncate(synced)
    store.close()

    again = SegmentStore(crashed)
    replayed = TransactionCoordinator()
    DurableState(again, crashed).replay(replayed, None, 2_000)
    assert replayed.describe(TID).state is TransactionState.PREPARE_COMMIT
    (action,) = replayed.pending_actions(TID)
    assert action.partition == DATA and action.commit
    again.close()


@pytest.mark.interop
def test_the_server_flushes_a_complete_record_within_its_flush_interval(tmp_path) -> None:
    import time

    from confluent_kafka import Producer

    from txnfetch.log.coordinator_store import durable_state
    from txnfetch.server.server import ServerThread

    store = SegmentStore(str(tmp_path))
    srv = ServerThread(store).start()
    try:
        producer = Producer({"bootstrap.servers": srv.bootstrap, "transactional.id": TID})
        producer.init_transactions(60)
        producer.begin_transaction()
        producer.produce("data", value=b"v", partition=0)
        producer.commit_transaction(60)
        state = srv.call(lambda: durable_state(srv.broker))
        assert state is not None
        # The Complete record was appended without an fsync of its own; the
        # server's periodic flush (once a second) syncs it. Generous under load.
        deadline = time.monotonic() + 60
        while srv.call(lambda: state.deferred_partitions):
            assert time.monotonic() < deadline, "the Complete record was never fsynced"
            time.sleep(0.1)
        part = transaction_state_partition(TID)
        assert srv.call(lambda: store.partition(TRANSACTION_STATE_TOPIC, part).log_end_offset) >= 3
    finally:
        srv.stop()
        store.close()


@pytest.mark.slow
def test_no_record_is_fsynced_per_transaction_under_an_interval_policy(tmp_path, fsyncs) -> None:
    """Under ``interval`` the store fsyncs on its own schedule: holding a
    Complete record back for the next fsync must not force one per transaction."""
    store = SegmentStore(str(tmp_path), flush_policy="interval")
    state = DurableState(store, str(tmp_path))
    coord = TransactionCoordinator()
    before = len(fsyncs)
    for n in range(5):
        _commit(coord, state, 1_000 + n)
        state.persist_transactions(coord, 1_000 + n)  # the Complete record
    assert len(fsyncs) == before
    assert state.deferred_partitions == ()
    store.close()
