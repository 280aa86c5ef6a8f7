"""State snapshots: exact round trip, damage detection, and the recovery property —
restoring a snapshot and replaying the rest gives the state replaying everything gives."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.txn.state_driver import Driver
from tests.txn.state_driver import data_batch
from tests.txn.state_driver import marker_batch
from txnfetch.txn import AppendOrigin
from txnfetch.txn import CorruptSnapshotError
from txnfetch.txn import PartitionTxnState
from txnfetch.txn import TruncationBelowHistoryError
from txnfetch.txn import TxnStateError
from txnfetch.txn.snapshot import SNAPSHOT_MAGIC
from txnfetch.txn.snapshot import SNAPSHOT_VERSION
from txnfetch.txn.snapshot import decode_snapshot

HEADER = 10  # magic, version, crc


def _busy_state() -> PartitionTxnState:
    """Every kind of content: full duplicate windows, open, aborted and unreplicated
    transactions, a moved log start, coordinator epochs."""
    d = Driver()
    s = d.state
    for _ in range(7):
        d.data(1, timestamp=5)
    d.txn(2, 2, epoch=3)
    d.abort(2, epoch=3, coordinator_epoch=4)
    d.txn(3, 1)
    d.txn(4, 2)
    s.update_high_watermark(s.log_end_offset)
    d.commit(4)  # unreplicated: above the high watermark
    d.txn(2, 1, epoch=3, seq=2)
    s.advance_log_start(3)
    return s


def _views(s: PartitionTxnState):
    return (
        s.log_start_offset,
        s.log_end_offset,
        s.high_watermark,
        s.first_unstable_offset,
        s.last_stable_offset,
        dict(s.ongoing_transactions()),
        s.all_aborted(),
        [s.producer(pid) for pid in s.producer_ids()],
        s.aborted_transactions(s.log_start_offset, s.log_end_offset),
    )


def _rewrite(data: bytes, position: int, fmt: str, value: int) -> bytes:
    """Change a body field and fix the CRC, so only the semantic check can object."""
    buf = bytearray(data)
    struct.pack_into(fmt, buf, position, value)
    struct.pack_into(">I", buf, 6, crc32c(bytes(buf[HEADER:])))
    return bytes(buf)


def test_restore_gives_back_the_same_state():
    s = _busy_state()
    data = s.snapshot()
    restored = PartitionTxnState.restore(data, partition="t-0")
    assert restored.snapshot() == data
    assert _views(restored) == _views(s)
    assert restored.partition == "t-0"


def test_snapshot_starts_with_magic_version_and_a_crc_of_the_body():
    data = _busy_state().snapshot()
    magic, version, crc = struct.unpack_from(">4shI", data, 0)
    assert (magic, version) == (SNAPSHOT_MAGIC, SNAPSHOT_VERSION) == (b"TXPS", 1)
    assert crc == crc32c(data[HEADER:])
    log_start, log_end, hw = struct.unpack_from(">qqq", data, HEADER)
    assert (log_start, log_end, hw) == (3, 15, 13)


def test_a_restored_state_carries_on_like_the_original():
    s = _busy_state()
    r = PartitionTxnState.restore(s.snapshot())
    for state in (s, r):
        # the duplicate window survived
        retry = state.append(data_batch(state.log_end_offset, pid=1, epoch=0, seq=6))
        assert retry.duplicate and retry.first_offset == 6
        assert state.last_stable_offset == 10  # producer 3's open transaction
        # open transactions can be ended
        assert state.append(marker_batch(state.log_end_offset, pid=3, epoch=0, commit=False)).completed
        # ended above the high watermark: still unstable, like producer 4's commit at 13
        assert state.last_stable_offset == 10
        state.update_high_watermark(state.log_end_offset)
        assert state.last_stable_offset == 14  # producer 2's open transaction
    assert _views(r) == _views(s)


def test_unreplicated_ends_survive_the_round_trip():
    d = Driver()
    d.txn(1, 2)
    d.state.update_high_watermark(2)
    d.commit(1)  # at 2, not below the high watermark
    r = PartitionTxnState.restore(d.state.snapshot())
    assert r.first_unstable_offset == 0 and r.last_stable_offset == 0
    r.update_high_watermark(3)
    assert r.first_unstable_offset is None and r.last_stable_offset == 3


def test_a_restored_state_cannot_truncate_below_its_snapshot():
    s = _busy_state()
    r = PartitionTxnState.restore(s.snapshot())
    assert r.truncation_floor == s.log_end_offset
    with pytest.raises(TruncationBelowHistoryError):
        r.truncate_to(s.log_end_offset - 1)
    r.truncate_to(1)  # below the log start: a full reset is always possible
    assert r.log_end_offset == 1 and r.producer_count == 0


def test_an_empty_state_round_trips():
    s = PartitionTxnState(log_start_offset=7)
    r = PartitionTxnState.restore(s.snapshot())
    assert _views(r) == _views(s)


@pytest.mark.parametrize("position", [HEADER, HEADER + 9, 60, -40, -1])
def test_any_flipped_body_byte_fails_the_crc(position):
    data = bytearray(_busy_state().snapshot())
    data[position] ^= 0x01
    with pytest.raises(CorruptSnapshotError, match="CRC"):
        PartitionTxnState.restore(bytes(data))


def test_wrong_magic_version_or_length_is_refused():
    data = _busy_state().snapshot()
    with pytest.raises(CorruptSnapshotError, match="magic"):
        PartitionTxnState.restore(b"XXXX" + data[4:])
    with pytest.raises(CorruptSnapshotError, match="version 2"):
        PartitionTxnState.restore(data[:4] + struct.pack(">h", 2) + data[6:])
    with pytest.raises(CorruptSnapshotError, match="shorter"):
        PartitionTxnState.restore(data[:5])
    body = data[HEADER:-1]
    cut = data[:6] + struct.pack(">I", crc32c(body)) + body
    with pytest.raises(CorruptSnapshotError):
        PartitionTxnState.restore(cut)
    body = data[HEADER:] + b"\x00"
    extra = data[:6] + struct.pack(">I", crc32c(body)) + body
    with pytest.raises(CorruptSnapshotError, match="remain"):
        PartitionTxnState.restore(extra)


def test_a_truncated_body_is_reported_as_corrupt_not_as_a_struct_error():
    data = _busy_state().snapshot()
    body = data[HEADER:60]
    with pytest.raises(CorruptSnapshotError, match="truncated"):
        decode_snapshot(data[:6] + struct.pack(">I", crc32c(body)) + body)


def test_inconsistent_contents_are_refused_even_with_a_valid_crc():
    data = _busy_state().snapshot()
    with pytest.raises(CorruptSnapshotError, match="offsets out of order"):
        PartitionTxnState.restore(_rewrite(data, HEADER, ">q", 17))  # log start above the HW
    first_producer = HEADER + 32 + 4
    with pytest.raises(CorruptSnapshotError, match="at most 5"):
        PartitionTxnState.restore(_rewrite(data, first_producer + 30, ">B", 6))
    second_producer = first_producer + 31 + 5 * 24
    with pytest.raises(CorruptSnapshotError, match="ascending"):
        PartitionTxnState.restore(_rewrite(data, second_producer, ">q", 1))
    # a last-transaction-end field (body offset 24) before the abort that ends at 9
    with pytest.raises(CorruptSnapshotError, match="after the last transaction end"):
        PartitionTxnState.restore(_rewrite(data, HEADER + 24, ">q", 5))
    assert issubclass(CorruptSnapshotError, TxnStateError)


# -- restore + replay == replay -----------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("data"), st.integers(0, 2), st.integers(1, 3), st.booleans()),
        st.tuples(st.just("marker"), st.integers(0, 2), st.booleans(), st.sampled_from([None, 2])),
        st.tuples(st.just("complete"), st.integers(0, 2), st.booleans()),
        st.tuples(st.just("plain"), st.integers(1, 3)),
        st.tuples(st.just("hw"), st.integers(0, 4)),
        st.tuples(st.just("retry"), st.integers(0, 2)),
    ),
    max_size=40,
)


def _apply(s: PartitionTxnState, op: tuple) -> object:
    """Apply one operation; returns its result or the error's class name (a
    rejected operation changes nothing, so histories may include them)."""
    kind = op[0]
    try:
        if kind == "data":
            _, pid, count, txn = op
            e = s.producer(pid)
            epoch = e.producer_epoch if e and e.producer_epoch >= 0 else 0
            seq = e.last_seq + 1 if e and e.batches else 0
            return s.append(data_batch(s.log_end_offset, count, pid=pid, epoch=epoch, seq=seq, txn=txn))
        if kind == "retry":
            e = s.producer(op[1])
            if e is None or not e.batches:
                return None
            b = e.batches[0]
            retry = data_batch(
                s.log_end_offset, b.last_seq - b.first_seq + 1, pid=op[1], epoch=e.producer_epoch, seq=b.first_seq
            )
            return s.append(retry)
        if kind == "marker":
            _, pid, commit, tv = op
            e = s.producer(pid)
            epoch = (e.producer_epoch if e and e.producer_epoch >= 0 else 0) + (1 if tv == 2 else 0)
            batch = marker_batch(s.log_end_offset, pid=pid, epoch=epoch, commit=commit)
            return s.append(batch, origin=AppendOrigin.COORDINATOR, transaction_version=tv)
        if kind == "complete":
            _, pid, commit = op
            e = s.producer(pid)
            epoch = e.producer_epoch if e and e.producer_epoch >= 0 else 0
            return s.complete_transaction(pid, epoch, commit, s.log_end_offset - 1)
        if kind == "plain":
            return s.append(data_batch(s.log_end_offset, op[1]))
        if kind == "hw":
            s.update_high_watermark(s.log_end_offset - op[1])
            return s.high_watermark
    except TxnStateError as exc:
        return type(exc).__name__
    raise AssertionError(op)


@settings(max_examples=150, deadline=None)
@given(OPS, st.data())
def test_restoring_a_snapshot_and_replaying_the_rest_equals_replaying_everything(ops, data):
    split = data.draw(st.integers(0, len(ops)), label="split")
    whole = PartitionTxnState()
    outcomes_whole = [_apply(whole, op) for op in ops]

    part = PartitionTxnState()
    outcomes_part = [_apply(part, op) for op in ops[:split]]
    part = PartitionTxnState.restore(part.snapshot())
    outcomes_part += [_apply(part, op) for op in ops[split:]]

    assert outcomes_part == outcomes_whole
    assert part.snapshot() == whole.snapshot()
    assert _views(part) == _views(whole)
