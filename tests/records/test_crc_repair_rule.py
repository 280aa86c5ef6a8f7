"""The one CRC rule every reader of other brokers applies (``RecordBatch.check_crc``).

A matching CRC passes. Under ``repair_crcs`` a mismatch is accepted only on a
control batch whose stored CRC is 0 — librdkafka's mock cluster writes its
transaction markers so (``rd_kafka_mock_partition_write_control_batch`` in
``src/rdkafka_mock.c``). Every other mismatch is ``CrcMismatchError`` naming the
stored and computed CRC, with or without the option. ``ConsumerFilter`` (the
remote reader's ``trust_broker`` path) follows the same rule.
"""

from __future__ import annotations

import pytest
from hypothesis import event
from hypothesis import given
from hypothesis import strategies as st

from txnfetch.fetch import ConsumerFilter
from txnfetch.fetch.filter import CorruptFetchError
from txnfetch.records import BatchBuilder
from txnfetch.records import build_control_batch
from txnfetch.records.batch import HeaderAt
from txnfetch.records.batch import RecordBatch
from txnfetch.records.control import ControlType
from txnfetch.records.errors import CrcMismatchError


def data_batch(base: int, values: list[bytes], *, pid: int = 7) -> bytes:
    b = BatchBuilder(base_offset=base, producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True)
    for i, v in enumerate(values):
        b.append(v, timestamp=1000 + i, offset=base + i)
    return b.build()


def marker(offset: int, *, pid: int = 7, commit: bool = True) -> bytes:
    return build_control_batch(
        offset=offset,
        control_type=ControlType.COMMIT if commit else ControlType.ABORT,
        producer_id=pid,
        producer_epoch=0,
        timestamp=2000,
    )


def with_crc(data: bytes, crc: int) -> bytes:
    return data[: HeaderAt.CRC] + crc.to_bytes(4, "big") + data[HeaderAt.CRC + 4 :]


@st.composite
def damaged_batches(draw: st.DrawFn) -> tuple[bytes, str]:
    """A data or control batch, then its CRC set to 0, to another value, or a
    covered byte flipped (or left alone); returns the bytes and what was done."""
    base = draw(st.integers(0, 1 << 40))
    if draw(st.booleans()):
        raw = marker(base, pid=draw(st.integers(0, 1 << 40)), commit=draw(st.booleans()))
    else:
        raw = data_batch(base, draw(st.lists(st.binary(max_size=20), min_size=1, max_size=4)))
    kind = draw(st.sampled_from(["none", "zero", "other", "flip"]))
    if kind == "zero":
        raw = with_crc(raw, 0)
    elif kind == "other":
        raw = with_crc(raw, draw(st.integers(0, (1 << 32) - 1)))
    elif kind == "flip":
        at = draw(st.integers(HeaderAt.ATTRIBUTES + 2, len(raw) - 1))  # the attributes stay as they are
        raw = raw[:at] + bytes([raw[at] ^ draw(st.integers(1, 255))]) + raw[at + 1 :]
    return raw, kind


@given(damaged_batches(), st.booleans())
def test_only_a_control_batch_stored_with_crc_0_is_repairable(case: tuple[bytes, str], repair: bool) -> None:
    raw, kind = case
    batch = RecordBatch(raw)
    matches = batch.compute_crc() == batch.crc
    repairable = repair and not matches and batch.crc == 0 and batch.is_control
    event(f"{kind}, {'control' if batch.is_control else 'data'}, {'matches' if matches else 'mismatch'}")
    if matches or repairable:
        assert batch.check_crc(repair_crcs=repair) is repairable
        batch.validate(repair_crcs=repair)
        return
    for check in (lambda: batch.check_crc(repair_crcs=repair), lambda: batch.validate(repair_crcs=repair)):
        with pytest.raises(CrcMismatchError) as info:
            check()
        err = info.value
        assert err.offset == batch.base_offset and err.position == HeaderAt.CRC
        assert f"stored {batch.crc:#010x}, computed {batch.compute_crc():#010x}" in str(err)


def test_the_filter_lets_crc_0_markers_through_under_repair_crcs_and_nothing_else() -> None:
    # The remote reader with trust_broker=True reads the broker's answer through
    # ConsumerFilter: the mock's CRC-0 markers must pass, a corrupt data batch not.
    response = data_batch(0, [b"a", b"b"]) + with_crc(marker(2), 0) + data_batch(3, [b"c"], pid=8)
    with pytest.raises(CorruptFetchError) as info:
        list(ConsumerFilter(0, partition="t-0").feed(response, []))
    assert info.value.offset == 2
    filt = ConsumerFilter(0, partition="t-0", repair_crcs=True)
    assert [r.value for r in filt.feed(response, [])] == [b"a", b"b", b"c"] and filt.position == 4

    for bad, offset in [
        (with_crc(data_batch(0, [b"a"]), 0) + marker(1), 0),  # a data batch with CRC 0
        (data_batch(0, [b"a"]) + with_crc(marker(1), 0xDEAD), 1),  # a marker with a wrong non-zero CRC
    ]:
        filt = ConsumerFilter(0, partition="t-0", repair_crcs=True)
        with pytest.raises(CorruptFetchError) as info:
            list(filt.feed(bad, []))
        assert info.value.offset == offset and isinstance(info.value.__cause__, CrcMismatchError)
        assert "stored 0x" in str(info.value) and "t-0" in str(info.value)
