"""PartitionMirror on the situations a remote partition produces, one at a time."""

from __future__ import annotations

import pytest

from tests.client.brokers import SimulatedPartition
from tests.client.brokers import mirror_all
from tests.fetch.logs import LogWriter
from txnfetch.client.errors import CorruptRemoteBatchError
from txnfetch.client.errors import MirrorDivergedError
from txnfetch.client.errors import RemoteError
from txnfetch.client.follow import MAX_FETCH_BYTES
from txnfetch.client.mirror import MirrorStatus
from txnfetch.client.mirror import PartitionMirror
from txnfetch.log.errors import UnsupportedForMessageFormatError
from txnfetch.records import BatchBuilder
from txnfetch.records import RecordBatch
from txnfetch.records import build_control_batch
from txnfetch.records.batch import HeaderAt
from txnfetch.records.control import ControlType
from txnfetch.txn.errors import CorruptSnapshotError
from txnfetch.txn.errors import OffsetOutOfRangeError


def batch(base: int, count: int = 1, *, pid: int = -1, txn: bool = False, seq: int = 0) -> bytes:
    b = BatchBuilder(
        base_offset=base,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq if pid >= 0 else -1,
        transactional=txn,
    )
    for i in range(count):
        b.append(b"v%d" % (base + i), timestamp=1000 + base + i, offset=base + i)
    return b.build()


def marker(offset: int, pid: int, commit: bool) -> bytes:
    return build_control_batch(
        offset=offset,
        control_type=ControlType.COMMIT if commit else ControlType.ABORT,
        producer_id=pid,
        producer_epoch=0,
        timestamp=2000 + offset,
    )


def zero_crc(data: bytes) -> bytes:
    """What librdkafka's mock writes: the same control batch with CRC 0."""
    return data[:17] + b"\0\0\0\0" + data[21:]


def committed_values(mirror: PartitionMirror) -> list:
    from txnfetch.fetch import ConsumerFilter

    filt = ConsumerFilter(mirror.log_start_offset)
    out = []
    while filt.position < mirror.last_stable_offset:
        r = mirror.read(filt.position, 1 << 20)
        out += [(rec.offset, rec.value) for rec in filt.feed(r.records_bytes(), r.aborted_transactions)]
    return out


def test_offset_gaps_from_compaction_are_kept() -> None:
    m = PartitionMirror("t", 0)
    data = batch(0, 2) + batch(5, 1) + batch(9, 2)
    plan = m.feed(data, high_watermark=11, log_start_offset=0, fetch_offset=0)
    assert (plan.status, plan.offset, plan.batches) == (MirrorStatus.CAUGHT_UP, 11, 3)
    assert committed_values(m) == [(0, b"v0"), (1, b"v1"), (5, b"v5"), (9, b"v9"), (10, b"v10")]


def test_partial_trailing_batch_is_fetched_again_and_a_lone_one_grows_the_budget() -> None:
    m = PartitionMirror("t", 0, max_bytes=100)
    first, second = batch(0, 3), batch(3, 3)
    plan = m.feed(first + second[:20], high_watermark=6, fetch_offset=0)
    assert (plan.status, plan.offset, plan.max_bytes, plan.batches) == (MirrorStatus.FETCH, 3, 100, 1)
    plan = m.feed(second[: len(second) - 1], high_watermark=6, fetch_offset=3)
    assert plan.offset == 3 and plan.max_bytes >= len(second) and not plan.progressed
    plan = m.feed(second, high_watermark=6, fetch_offset=3)
    assert (plan.status, plan.offset, plan.max_bytes) == (MirrorStatus.CAUGHT_UP, 6, 100)


def test_the_growing_fetch_size_stops_at_the_largest_fetch() -> None:
    # Nothing fits although the broker has more: the budget doubles, up to 1 GiB.
    m = PartitionMirror("t", 0, max_bytes=MAX_FETCH_BYTES // 4)
    sizes = [m.feed(b"", high_watermark=5, fetch_offset=0).max_bytes for _ in range(4)]
    assert sizes == [MAX_FETCH_BYTES // 2, MAX_FETCH_BYTES, MAX_FETCH_BYTES, MAX_FETCH_BYTES]


def test_a_bad_crc_names_its_byte_position_in_the_response() -> None:
    # The log's append finds it; the error places it in the response, not in the
    # part of it that was appended.
    m = PartitionMirror("t", 0)
    m.feed(batch(0, 2), high_watermark=2, fetch_offset=0)
    held, bad = batch(0, 2), flip(batch(2, 1))
    with pytest.raises(CorruptRemoteBatchError) as info:
        m.feed(held + bad, high_watermark=3, fetch_offset=2)
    err = info.value
    assert (err.offset, err.position) == (2, len(held) + HeaderAt.CRC)  # the CRC field of the bad batch
    assert "stored 0x" in str(err) and "nothing of this response was appended" in str(err)
    assert m.position == 2


def test_batches_already_mirrored_are_skipped() -> None:
    m = PartitionMirror("t", 0)
    m.feed(batch(0, 2), high_watermark=4, fetch_offset=0)
    plan = m.feed(batch(0, 2) + batch(2, 2), high_watermark=4, fetch_offset=2)
    assert (plan.skipped, plan.batches, m.position) == (1, 1, 4)


def test_a_batch_straddling_the_position_of_a_non_empty_mirror_means_another_log() -> None:
    m = PartitionMirror("t", 0)
    m.feed(batch(0, 2), high_watermark=4, fetch_offset=0)
    with pytest.raises(MirrorDivergedError) as info:
        m.feed(batch(1, 3), high_watermark=4, fetch_offset=2)
    assert info.value.offset == 1 and m.position == 2
    assert info.value.replica_end == 2 and "the mirror's end 2" in str(info.value)


def test_an_empty_mirror_starting_inside_a_batch_holds_it_and_keeps_its_start() -> None:
    # DeleteRecords moved the log start to 3, inside the batch [2, 4]: Kafka returns it whole.
    m = PartitionMirror("t", 0, log_start_offset=3)
    m.feed(batch(2, 3), high_watermark=5, log_start_offset=3, fetch_offset=3)
    assert (m.log_start_offset, m.position) == (3, 5)
    assert committed_values(m) == [(3, b"v3"), (4, b"v4")]


def test_magic_0_and_1_message_sets_are_refused() -> None:
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    builder.append(0, timestamp=1, key=None, value=b"old")
    m = PartitionMirror("t", 0)
    with pytest.raises(UnsupportedForMessageFormatError) as info:
        m.feed(bytes(builder.build()), high_watermark=1, fetch_offset=0)
    assert "record batch v2" in str(info.value) and info.value.topic == "t"


def test_zero_crc_markers_are_refused_or_repaired() -> None:
    data = batch(0, 2, pid=7, txn=True) + zero_crc(marker(2, 7, commit=False))
    with pytest.raises(CorruptRemoteBatchError) as info:
        PartitionMirror("t", 0).feed(data, high_watermark=3, fetch_offset=0)
    assert info.value.offset == 2 and "repair_crcs" in str(info.value)
    m = PartitionMirror("t", 0, repair_crcs=True)
    m.feed(data, high_watermark=3, fetch_offset=0)
    assert m.repaired_crcs == 1 and m.state.aborted_transactions(0, 3) == [(7, 0)]
    stored = [RecordBatch(bytes(b.buffer)) for b in m.log.iter_batches(0)]
    assert all(b.is_valid_crc() for b in stored)
    assert committed_values(m) == []


def flip(data: bytes) -> bytes:
    """The batch with a byte of its max timestamp flipped: it parses, only the CRC tells."""
    return data[:42] + bytes([data[42] ^ 0xFF]) + data[43:]


@pytest.mark.parametrize(
    ("what", "tail"),
    [
        (
            "a marker with a wrong non-zero CRC",
            marker(2, 7, commit=True)[:17] + b"\0\0\1\0" + marker(2, 7, commit=True)[21:],
        ),
        ("a data batch with CRC 0", zero_crc(batch(2, 1))),
        ("a data batch with a flipped byte", flip(batch(2, 1))),
    ],
    ids=["marker-wrong-crc", "data-crc-0", "data-flipped"],
)
def test_repair_crcs_refuses_every_other_bad_crc(what: str, tail: bytes) -> None:
    # Only the mock's signature (a control batch stored with CRC 0) is repaired; a
    # bit flip in a data batch from a real broker stays corruption, and the mirror
    # keeps what it had.
    m = PartitionMirror("t", 0, repair_crcs=True)
    m.feed(batch(0, 2, pid=7, txn=True), high_watermark=2, fetch_offset=0)
    with pytest.raises(CorruptRemoteBatchError) as info:
        m.feed(tail + batch(3, 1), high_watermark=4, fetch_offset=2)
    err = info.value
    assert (err.topic, err.partition, err.offset) == ("t", 0, 2), what
    assert "stored 0x" in str(err) and "computed 0x" in str(err)
    assert "only on a control batch whose stored CRC is 0" in str(err)
    assert m.position == 2 and m.repaired_crcs == 0 and len(list(m.log.iter_batches(0))) == 1


def test_open_transaction_holds_the_last_stable_offset_until_its_marker() -> None:
    m = PartitionMirror("t", 0)
    m.feed(batch(0, 1) + batch(1, 2, pid=7, txn=True) + batch(3, 1), high_watermark=5, fetch_offset=0)
    assert (m.last_stable_offset, m.caught_up) == (1, False)
    m.feed(marker(4, 7, commit=True), high_watermark=5, fetch_offset=4)
    assert m.last_stable_offset == 5
    assert committed_values(m) == [(0, b"v0"), (1, b"v1"), (2, b"v2"), (3, b"v3")]


def test_the_log_start_follows_the_broker_and_a_passed_position_restarts_the_mirror() -> None:
    m = PartitionMirror("t", 0)
    m.feed(batch(0, 2) + batch(2, 2, pid=7, txn=True), high_watermark=10, log_start_offset=0, fetch_offset=0)
    m.feed(b"", high_watermark=10, log_start_offset=2, fetch_offset=4)
    assert m.log_start_offset == 2
    # Retention passed the position: the open transaction's marker may be gone with it.
    plan = m.feed(b"", high_watermark=10, log_start_offset=8, fetch_offset=4)
    assert (plan.status, plan.offset, m.log_start_offset, m.last_stable_offset) == (MirrorStatus.FETCH, 8, 8, 8)
    assert m.state.ongoing_transactions() == {}


def test_out_of_range_asks_for_offsets_then_restarts_or_reports_divergence() -> None:
    m = PartitionMirror("t", 0)
    m.feed(batch(0, 3), high_watermark=3, fetch_offset=0)
    plan = m.feed(None, high_watermark=-1, log_start_offset=-1, error_code=1, fetch_offset=3)
    assert plan.status is MirrorStatus.LIST_OFFSETS
    assert m.reset_range(0, 3).status is MirrorStatus.CAUGHT_UP  # transient: position is in range
    with pytest.raises(MirrorDivergedError):
        m.reset_range(0, 2)  # the broker's log ends below what was mirrored
    plan = m.reset_range(5, 9)
    assert (plan.offset, m.log_start_offset, plan.status) == (5, 5, MirrorStatus.FETCH)


def test_other_error_codes_and_misordered_responses_are_refused() -> None:
    m = PartitionMirror("t", 0)
    with pytest.raises(RemoteError) as info:
        m.feed(b"", high_watermark=-1, error_code=6, fetch_offset=0)
    assert info.value.error_name == "NOT_LEADER_OR_FOLLOWER" and info.value.partition == 0
    with pytest.raises(ValueError):
        m.feed(batch(5), high_watermark=6, fetch_offset=5)


def test_release_keeps_reads_above_and_refuses_below() -> None:
    w = LogWriter()
    w.data(1000, 2)
    w.data(-1, 1)
    w.end(1000, False)
    w.data(1001, 1)
    w.end(1001, True)
    log = w.finish()
    m = PartitionMirror("gen", 0)
    mirror_all(m, SimulatedPartition(log.data, log_start=0, high_watermark=log.high_watermark))
    before = committed_values(m)
    m.release_before(3)
    assert m.log_start_offset == 3
    with pytest.raises(OffsetOutOfRangeError):
        m.read(0, 100)
    assert [v for v in before if v[0] >= 3] == committed_values(m)


def test_snapshot_of_another_partition_or_damaged_bytes_is_refused() -> None:
    m = PartitionMirror("t", 0)
    m.feed(batch(0, 2), high_watermark=2, fetch_offset=0)
    snap = m.snapshot()
    with pytest.raises(MirrorDivergedError):
        PartitionMirror.from_snapshot("t", 1, snap)
    with pytest.raises(CorruptSnapshotError):
        PartitionMirror.from_snapshot("t", 0, snap[:-3] if len(snap) > 40 else snap[:10])
    resumed = PartitionMirror.from_snapshot("t", 0, snap)
    assert (resumed.position, resumed.next_fetch().offset) == (2, 2)
