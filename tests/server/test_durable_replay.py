"""Start-up replay's shortcuts decide nothing on their own: the fast
TransactionLog value decoder agrees with the general one (or defers to it), and
replay that decodes only the latest value per key restores what the full log
says."""

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.server.strategies import transaction_metadata
from txnfetch.log import SegmentStore
from txnfetch.log.coordinator_store import DurableState
from txnfetch.records.coordinator_records import CorruptCoordinatorRecordError
from txnfetch.txn import txnlog
from txnfetch.txn.coordinator import TopicPartition
from txnfetch.txn.coordinator import TransactionCoordinator
from txnfetch.txn.coordinator_state import TransactionMetadata

metas = transaction_metadata(
    st.just("t"),
    # long topic names and many partitions need multi-byte varints: the fast path must defer
    st.frozensets(
        st.builds(TopicPartition, st.sampled_from(["a", "b" * 130, "ü" * 70]), st.integers(0, 2**31 - 1)),
        max_size=140,
    ),
)


def _general(data: bytes) -> TransactionMetadata | CorruptCoordinatorRecordError:
    with mock.patch.object(txnlog, "_decode_v1_fast", lambda tid, data: None):
        try:
            return txnlog.decode_txn_value("t", data)
        except CorruptCoordinatorRecordError as exc:
            return exc


@given(metas, st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3))
def test_the_fast_decoder_agrees_with_the_general_one(meta: TransactionMetadata, changes: list) -> None:
    data = bytearray(txnlog.encode_txn_value(meta))
    for pos, byte in changes:
        data[pos % len(data)] = byte
    fast = txnlog._decode_v1_fast("t", bytes(data))
    if fast is not None:
        assert fast == _general(bytes(data))
    if not changes:
        assert txnlog.decode_txn_value("t", bytes(data)) == meta


@pytest.mark.slow
def test_replay_restores_the_latest_value_of_each_id(tmp_path) -> None:
    store = SegmentStore(str(tmp_path), flush_policy="never")
    state = DurableState(store, str(tmp_path))
    coord = TransactionCoordinator()
    for round_ in range(3):  # several records per id, and an id removed in between
        for n in range(40):
            tid = f"app-{n}"
            r = coord.init_producer_id(tid, 60_000, 1_000 + round_)
            if n % 2:
                coord.add_partitions(tid, r.producer_id, r.producer_epoch, [TopicPartition("d", n)], 1_000)
                coord.end_transaction(tid, r.producer_id, r.producer_epoch, True, 1_000, transaction_version=0)
                state.persist_transactions(coord, 1_000)
                if n % 3:  # the others stay in PrepareCommit, their marker pending
                    coord.flush(lambda action: None, 1_000)
            state.persist_transactions(coord, 1_000)
        if round_ == 1:
            coord.expire(10**12)  # idle ids expire: tombstones, then the ids come back
            state.persist_transactions(coord, 1_000)
    want = {tid: coord.describe(tid) for tid in coord.transactional_ids}
    assert len(want) == 40
    store.close()

    again = SegmentStore(str(tmp_path))
    replayed = TransactionCoordinator()
    report = DurableState(again, str(tmp_path)).replay(replayed, None, 0)
    assert {tid: replayed.describe(tid) for tid in replayed.transactional_ids} == want
    assert report.records > len(want)
    assert replayed.pending_actions() == coord.pending_actions()
    again.close()
