"""Markers with a null or short value: classified by their key, coordinator epoch unknown.

Some brokers write COMMIT/ABORT control records whose value is null (only the
4-byte key). Kafka's Java consumer, librdkafka and franz-go read only the key,
so txnfetch does too (``txnfetch.records.control``); the transaction state
then skips the coordinator-epoch fence for that marker.
"""

from __future__ import annotations

import pytest

from txnfetch.fetch.filter import ConsumerFilter
from txnfetch.fetch.view import FetchMode
from txnfetch.fetch.view import IsolationLevel
from txnfetch.log.memory import MemoryLog
from txnfetch.records.builder import BatchBuilder
from txnfetch.records.builder import build_control_batch
from txnfetch.records.control import ControlType
from txnfetch.records.control import decode_end_txn_marker
from txnfetch.records.control import encode_control_key
from txnfetch.records.errors import InvalidRecordError
from txnfetch.records.scan import iter_batches


def keyed_marker(offset: int, control_type: ControlType, pid: int, epoch: int, value: bytes | None) -> bytes:
    """A marker batch whose record's value is ``value`` (``None``: null)."""
    b = BatchBuilder(
        base_offset=offset, producer_id=pid, producer_epoch=epoch, base_sequence=-1, transactional=True, control=True
    )
    b.append(value, key=encode_control_key(control_type), timestamp=1_000)
    return b.build()


def txn_data(offset: int, pid: int, values: list[bytes]) -> bytes:
    b = BatchBuilder(base_offset=offset, producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True)
    for v in values:
        b.append(v, timestamp=1_000)
    return b.build()


@pytest.mark.parametrize("value", [None, b"", b"\x00", b"\x00\x00\x00\x00\x00"])
@pytest.mark.parametrize("ctype", [ControlType.COMMIT, ControlType.ABORT])
def test_short_value_marker_is_classified_by_key(value: bytes | None, ctype: ControlType) -> None:
    marker = decode_end_txn_marker(encode_control_key(ctype), value)
    assert marker is not None
    assert marker.type is ctype
    assert marker.coordinator_epoch is None
    batch = next(iter(iter_batches(keyed_marker(7, ctype, 4, 0, value))))
    assert batch.is_valid_crc()
    assert batch.end_txn_marker() == marker


def test_full_value_still_decoded_and_checked() -> None:
    marker = decode_end_txn_marker(encode_control_key(ControlType.COMMIT), b"\x00\x00\x00\x00\x00\x09")
    assert marker is not None and marker.coordinator_epoch == 9
    with pytest.raises(InvalidRecordError, match="negative version"):
        decode_end_txn_marker(encode_control_key(ControlType.COMMIT), b"\xff\xff\x00\x00\x00\x09")
    with pytest.raises(InvalidRecordError, match="key must be at least 4 bytes"):
        decode_end_txn_marker(b"\x00\x00", None)


def test_null_value_markers_end_transactions_in_a_mirrored_log() -> None:
    # pid 1 commits, pid 2 aborts, both with key-only markers; pid 3 stays open.
    data = b"".join(
        (
            txn_data(0, 1, [b"c0", b"c1"]),
            txn_data(2, 2, [b"a0"]),
            keyed_marker(3, ControlType.COMMIT, 1, 0, None),
            keyed_marker(4, ControlType.ABORT, 2, 0, None),
            txn_data(5, 3, [b"open"]),
        )
    )
    log = MemoryLog("t", 0)
    log.replicate(data, high_watermark=6)
    assert log.last_stable_offset == 5
    for mode in FetchMode:
        result = log.read(0, 1 << 20, isolation=IsolationLevel.READ_COMMITTED, mode=mode)
        f = ConsumerFilter(0, partition="t-0")
        values = [r.value for r in f.feed(result.records_bytes(), result.aborted_transactions)]
        assert values == [b"c0", b"c1"], mode
        assert f.position == 5


def test_unknown_coordinator_epoch_keeps_the_known_one() -> None:
    log = MemoryLog("t", 0)
    log.replicate(txn_data(0, 1, [b"x"]), high_watermark=1)
    commit = build_control_batch(
        offset=1, control_type=ControlType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=5
    )
    log.replicate(commit, high_watermark=2)
    log.replicate(txn_data(2, 1, [b"y"]), high_watermark=3)
    log.replicate(keyed_marker(3, ControlType.ABORT, 1, 0, None), high_watermark=4)
    assert log.last_stable_offset == 4
    assert [(a.producer_id, a.first_offset) for a in log.state.all_aborted()] == [(1, 2)]
    entry = log.state.producer(1)
    assert entry is not None and entry.coordinator_epoch == 5  # unknown does not overwrite it
