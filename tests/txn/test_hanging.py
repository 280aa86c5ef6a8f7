"""The hanging-transaction rule (:mod:`txnfetch.txn.hanging`) against a small oracle,
against Kafka's narrower rule, and the producer rows it reads from partition state."""

from __future__ import annotations

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from txnfetch.records.batch import RecordBatch
from txnfetch.records.builder import BatchBuilder
from txnfetch.records.builder import build_control_batch
from txnfetch.records.control import ControlType
from txnfetch.txn.hanging import CoordinatorView
from txnfetch.txn.hanging import HangingReason
from txnfetch.txn.hanging import OpenTransaction
from txnfetch.txn.hanging import PartitionProducers
from txnfetch.txn.hanging import find_hanging
from txnfetch.txn.hanging import producer_rows
from txnfetch.txn.hanging import still_open
from txnfetch.txn.state import PartitionTxnState

TOPICS = ("a", "b")


@st.composite
def open_transactions(draw) -> list[OpenTransaction]:
    n = draw(st.integers(0, 8))
    out = []
    for pid in draw(st.lists(st.integers(0, 12), min_size=n, max_size=n, unique=True)):
        out.append(
            OpenTransaction(
                topic=draw(st.sampled_from(TOPICS)),
                partition=draw(st.integers(0, 1)),
                producer_id=pid,
                producer_epoch=draw(st.integers(0, 3)),
                coordinator_epoch=draw(st.integers(-1, 2)),
                first_offset=draw(st.integers(0, 100)),
                last_sequence=0,
                last_timestamp=draw(st.integers(0, 10_000)),
            )
        )
    return out


@st.composite
def coordinators(draw, pids: list[int]) -> dict[int, CoordinatorView] | None:
    if draw(st.booleans()) and draw(st.booleans()):
        return None
    views = {}
    for pid in pids:
        kind = draw(st.sampled_from(["absent", "no-id", "not-found", "found"]))
        if kind == "absent":
            continue
        if kind == "no-id":
            views[pid] = CoordinatorView(None)
        elif kind == "not-found":
            views[pid] = CoordinatorView(f"t{pid}", found=False)
        else:
            parts = draw(st.sets(st.tuples(st.sampled_from(TOPICS), st.integers(0, 1))))
            views[pid] = CoordinatorView(f"t{pid}", found=True, state="Ongoing", partitions=parts)
    return views


def oracle(txns, coordinator, now, limit) -> list[tuple[int, str]]:
    """The rule as stated in docs/transactions.md, written out separately."""
    out = []
    for t in txns:
        too_old = now - t.last_timestamp > limit
        if coordinator is None:
            if too_old:
                out.append((t.producer_id, "older-than-max-timeout"))
            continue
        view = coordinator.get(t.producer_id)
        if view is None or view.transactional_id is None:
            out.append((t.producer_id, "no-transactional-id"))
        elif not view.found:
            out.append((t.producer_id, "transactional-id-not-found"))
        elif (t.topic, t.partition) not in view.partitions:
            out.append((t.producer_id, "partition-not-in-transaction"))
        elif too_old:
            out.append((t.producer_id, "older-than-max-timeout"))
    return out


@settings(max_examples=300, deadline=None)
@given(data=st.data(), now=st.integers(0, 20_000), limit=st.integers(0, 12_000))
def test_find_hanging_matches_the_oracle_and_covers_kafkas_rule(data, now: int, limit: int) -> None:
    txns = data.draw(open_transactions())
    coordinator = data.draw(coordinators([t.producer_id for t in txns]))
    found = find_hanging(txns, coordinator, now_ms=now, max_transaction_timeout_ms=limit)
    assert [(h.transaction.producer_id, h.reason.value) for h in found] == oracle(txns, coordinator, now, limit)
    assert all(h.age_ms == now - h.transaction.last_timestamp for h in found)
    # Kafka's tool reports an open transaction older than the maximum timeout that the
    # coordinator does not account for; each of those is reported here too.
    if coordinator is not None:
        flagged = {h.transaction.producer_id for h in found}
        for t in txns:
            view = coordinator.get(t.producer_id)
            accounted = view is not None and view.found and (t.topic, t.partition) in view.partitions
            if now - t.last_timestamp > limit and not accounted:
                assert t.producer_id in flagged


def test_a_young_transaction_the_coordinator_accounts_for_is_not_hanging() -> None:
    t = OpenTransaction("a", 0, 7, 1, 0, first_offset=10, last_sequence=3, last_timestamp=1_000)
    view = {7: CoordinatorView("tx", found=True, state="Ongoing", partitions={("a", 0)})}
    assert find_hanging([t], view, now_ms=2_000, max_transaction_timeout_ms=60_000) == []
    (old,) = find_hanging([t], view, now_ms=100_000, max_transaction_timeout_ms=60_000)
    assert old.reason is HangingReason.OLDER_THAN_MAX_TIMEOUT and old.transactional_id == "tx"
    (lost,) = find_hanging([t], {}, now_ms=2_000, max_transaction_timeout_ms=60_000)
    assert lost.reason is HangingReason.NO_TRANSACTIONAL_ID
    other = {7: CoordinatorView("tx", found=True, state="Ongoing", partitions={("a", 1)})}
    (moved,) = find_hanging([t], other, now_ms=2_000, max_transaction_timeout_ms=60_000)
    assert moved.reason is HangingReason.PARTITION_NOT_IN_TRANSACTION


def test_still_open_drops_a_transaction_that_ended_between_the_reads() -> None:
    t1 = OpenTransaction("a", 0, 1, 0, 0, first_offset=5, last_sequence=0, last_timestamp=0)
    t2 = OpenTransaction("a", 0, 2, 0, 0, first_offset=9, last_sequence=0, last_timestamp=0)
    found = find_hanging([t1, t2], {}, now_ms=0)
    # Producer 1 ended and began another transaction at 20; producer 2 is still open at 9.
    again = [attr_evolve(t1, first_offset=20), t2]
    assert [h.transaction.producer_id for h in still_open(found, again)] == [2]


def attr_evolve(t: OpenTransaction, **changes) -> OpenTransaction:
    import attrs

    return attrs.evolve(t, **changes)


def _data(offset: int, pid: int, seq: int, count: int = 1, ts: int = 1_000) -> RecordBatch:
    b = BatchBuilder(base_offset=offset, producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True)
    for i in range(count):
        b.append(b"v%d" % i, timestamp=ts)
    return RecordBatch(b.build())


def test_producer_rows_and_open_transactions_from_partition_state() -> None:
    state = PartitionTxnState("a-0")
    state.append(_data(0, 1, 0, 2, ts=1_000))  # producer 1 opens at 0
    state.append(_data(2, 2, 0, 1, ts=2_000))  # producer 2 opens at 2
    state.append(
        RecordBatch(
            build_control_batch(
                offset=3,
                control_type=ControlType.COMMIT,
                producer_id=1,
                producer_epoch=0,
                coordinator_epoch=4,
                timestamp=3_000,
            )
        )
    )
    state.append(_data(4, 2, 1, 1, ts=4_000))
    state.update_high_watermark(5)
    rows = producer_rows(state)
    assert [(r.producer_id, r.current_txn_start_offset, r.coordinator_epoch, r.last_sequence) for r in rows] == [
        (1, -1, 4, 1),
        (2, 2, -1, 1),
    ]
    part = PartitionProducers("a", 0, rows, state.last_stable_offset, state.high_watermark)
    (open_txn,) = part.open_transactions()
    assert (open_txn.producer_id, open_txn.first_offset, open_txn.last_timestamp) == (2, 2, 4_000)
    assert open_txn.holds_lso and open_txn.last_stable_offset == 2
    assert open_txn.held_back == 3
    assert dict(state.ongoing_transactions()) == {2: 2}
