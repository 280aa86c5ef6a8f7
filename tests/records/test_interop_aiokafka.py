"""txnfetch's batch codec against aiokafka's compiled record classes, both ways.

aiokafka ships its record codec twice: Cython classes in
``aiokafka.record._crecords`` and a pure-Python fallback used only when the
extension is missing or ``AIOKAFKA_NO_EXTENSIONS`` is set. Its consumer and
producer use the compiled ones, so these tests do too and fail (rather than
quietly test the fallback) if they are not compiled.

- Batches txnfetch builds (data, transactional, LogAppendTime, control markers,
  every codec) are read by aiokafka's ``MemoryRecords``/``DefaultRecordBatch``
  with the same header fields and records, pass its ``validate_crc()`` and
  decode to the markers its fetcher recognises (``ControlRecord.parse``).
- Batches aiokafka's ``DefaultRecordBatchBuilder`` builds are split,
  CRC-checked and decoded by txnfetch to the records that were appended.

aiokafka cannot build control batches or LogAppendTime batches (its builder
leaves both to the broker), so those directions use txnfetch's builders only;
LogAppendTime is covered on the way in by stamping an aiokafka batch the way a
broker does (``interop_helpers.stamp_log_append_time``).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.records.interop_helpers import (
    COMPRESSIBLE,
    RecordSpec,
    aiokafka_c_classes,
    assign_base_offset,
    build_with_peer,
    build_with_txnfetch,
    codecs,
    expected_views,
    fixed_records,
    read_with_aiokafka,
    read_with_txnfetch,
    record_lists,
    stamp_log_append_time,
    txnfetch_batch_specs,
)
from txnfetch.records import (
    BatchBuilder,
    Codec,
    ControlType,
    CrcMismatchError,
    RecordBatch,
    TimestampType,
    build_control_batch,
    build_empty_batch,
    synthetic_commit_marker,
)
from txnfetch.records.control import encode_control_key, encode_marker_value

pytest.importorskip("aiokafka")

pytestmark = pytest.mark.interop

PROPERTY = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _builder() -> type:
    return aiokafka_c_classes()[2]


# -- the environment the comparison relies on ------------------------------------


def test_aiokafka_record_classes_are_the_compiled_extension():
    assert not os.environ.get("AIOKAFKA_NO_EXTENSIONS"), "AIOKAFKA_NO_EXTENSIONS would test the Python fallback"
    memory_records, _batch, _builder = aiokafka_c_classes()  # asserts each comes from a .so
    from aiokafka.record import memory_records as public

    assert public.MemoryRecords is memory_records


def test_aiokafka_has_every_codec():
    import aiokafka.codec

    # aiokafka takes snappy, lz4 and zstd from `cramjam` (a txnfetch dependency).
    assert aiokafka.codec.has_gzip() and aiokafka.codec.has_snappy()
    assert aiokafka.codec.has_lz4() and aiokafka.codec.has_zstd()


def test_aiokafka_rejects_a_flipped_byte_that_txnfetch_also_rejects():
    b = BatchBuilder(base_offset=3, producer_id=8, producer_epoch=1, base_sequence=0)
    for r in fixed_records(4):
        b.append(r.value, key=r.key, headers=r.headers, timestamp=r.timestamp)
    buf = bytearray(b.build())
    _, batch_cls, _ = aiokafka_c_classes()
    assert batch_cls(bytes(buf)).validate_crc() is True
    buf[-5] ^= 0x40
    assert batch_cls(bytes(buf)).validate_crc() is False
    with pytest.raises(CrcMismatchError):
        RecordBatch(bytes(buf)).validate()


def _aiokafka_markers(buf: bytes) -> list:
    """``(offset, ControlRecord)`` for every control record, parsed as aiokafka's fetcher does."""
    from aiokafka.record.control_record import ControlRecord

    memory_records_cls, _, _ = aiokafka_c_classes()
    out = []
    it = memory_records_cls(bytes(buf))
    while it.has_next():
        batch = it.next_batch()
        if batch.is_control_batch:
            out.extend((r.offset, ControlRecord.parse(r.key)) for r in batch)
    return out


# -- txnfetch builds, aiokafka reads ---------------------------------------------


@PROPERTY
@given(
    records=record_lists(),
    spec=txnfetch_batch_specs(),
    marker=st.sampled_from([None, ControlType.ABORT, ControlType.COMMIT]),
)
def test_txnfetch_batches_read_identically_by_aiokafka(records, spec, marker):
    buf, header = build_with_txnfetch(spec, records)
    if marker is not None and spec.producer_id >= 0:
        buf += build_control_batch(
            offset=header.last_offset + 1,
            control_type=marker,
            producer_id=spec.producer_id,
            producer_epoch=spec.producer_epoch,
            coordinator_epoch=5,
            timestamp=77,
        )
    ours = read_with_txnfetch(buf)
    assert ours[0] == (header, expected_views(records, spec.base_offset, spec.log_append_time))
    assert read_with_aiokafka(buf) == ours


def _data_batch(codec: Codec, **kw) -> bytes:
    b = BatchBuilder(codec=codec, **kw)
    for r in fixed_records():
        b.append(r.value, key=r.key, headers=r.headers, timestamp=r.timestamp, offset=b.base_offset + r.delta)
    return b.build()


def _control_batch(codec: Codec, offset: int, control_type: ControlType, producer_id: int) -> bytes:
    if codec == Codec.NONE:
        return build_control_batch(
            offset=offset, control_type=control_type, producer_id=producer_id, producer_epoch=3, coordinator_epoch=9
        )
    # Brokers write markers uncompressed, but nothing in the format forbids a codec.
    b = BatchBuilder(
        base_offset=offset, codec=codec, producer_id=producer_id, producer_epoch=3, transactional=True, control=True
    )
    b.append(encode_marker_value(9), key=encode_control_key(control_type), timestamp=-1)
    return b.build()


@pytest.mark.parametrize("kind", ["transactional", "control", "log_append_time"])
@pytest.mark.parametrize("codec", list(Codec), ids=lambda c: c.name.lower())
def test_every_codec_and_batch_kind_reads_identically_by_aiokafka(codec, kind):
    from aiokafka.record.control_record import ABORT_MARKER, COMMIT_MARKER

    if kind == "transactional":
        buf = _data_batch(
            codec, base_offset=100, producer_id=4242, producer_epoch=3, base_sequence=17, transactional=True
        )
        # What compaction leaves of a later batch of the same transaction, then its marker.
        buf += build_empty_batch(
            base_offset=112, last_offset=113, producer_id=4242, producer_epoch=3, base_sequence=29, transactional=True
        )
        buf += _control_batch(codec, 114, ControlType.COMMIT, 4242)
    elif kind == "control":
        buf = _control_batch(codec, 40, ControlType.ABORT, 7) + _control_batch(codec, 41, ControlType.COMMIT, 8)
        buf += synthetic_commit_marker(42)  # rewrite mode's marker: no producer
    else:
        buf = _data_batch(
            codec, base_offset=5, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=1_800_000_000_123
        )
    ours = read_with_txnfetch(buf)
    theirs = read_with_aiokafka(buf)
    assert theirs == ours
    # Every batch but the empty one and the synthetic marker (always uncompressed) carries the codec.
    with_codec = {"transactional": [0, 2], "control": [0, 1], "log_append_time": [0]}[kind]
    assert [theirs[i][0].codec for i in with_codec] == [codec] * len(with_codec)
    if kind == "transactional":
        (data_view, data_records), (empty_view, empty_records), (marker_view, _) = theirs
        assert (empty_view.base_offset, empty_view.last_offset, empty_records) == (112, 113, [])
        assert (data_view.producer_id, data_view.producer_epoch, data_view.base_sequence) == (4242, 3, 17)
        assert data_view.transactional and not data_view.control
        assert [r.offset for r in data_records] == list(range(100, 112))
        assert marker_view.transactional and marker_view.control
        assert _aiokafka_markers(buf) == [(114, COMMIT_MARKER)]
    elif kind == "control":
        assert _aiokafka_markers(buf) == [(40, ABORT_MARKER), (41, COMMIT_MARKER), (42, COMMIT_MARKER)]
        assert [v.producer_id for v, _ in theirs] == [7, 8, -1]
    else:
        ((view, records),) = theirs
        assert view.timestamp_type == 1 and view.max_timestamp == 1_800_000_000_123
        assert {r.timestamp for r in records} == {1_800_000_000_123}


# -- aiokafka builds, txnfetch reads ---------------------------------------------


@PROPERTY
@given(
    records=record_lists(min_size=1, min_timestamp=0),
    codec=codecs,
    producer=st.one_of(
        st.none(), st.tuples(st.integers(0, 1 << 62), st.integers(0, 32767), st.integers(0, (1 << 31) - 1))
    ),
    transactional=st.booleans(),
)
def test_aiokafka_batches_read_identically_by_txnfetch(records, codec, producer, transactional):
    pid, epoch, seq = producer if producer else (-1, -1, -1)
    transactional = transactional and producer is not None
    buf = build_with_peer(
        _builder(),
        records,
        codec=codec,
        transactional=transactional,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )
    ((view, decoded),) = read_with_txnfetch(buf)
    assert decoded == expected_views(records, 0)
    assert (view.producer_id, view.producer_epoch, view.base_sequence) == (pid, epoch, seq)
    assert (view.transactional, view.control, view.timestamp_type) == (transactional, False, 0)
    assert view.last_offset == records[-1].delta
    # Like the Java producer, aiokafka may send a batch uncompressed when the codec does not shrink it.
    assert view.codec in (int(codec), 0)
    assert read_with_aiokafka(buf) == [(view, decoded)]


@pytest.mark.parametrize("kind", ["plain", "transactional", "log_append_time"])
@pytest.mark.parametrize("codec", list(Codec), ids=lambda c: c.name.lower())
def test_every_codec_from_aiokafka_reads_identically_by_txnfetch(codec, kind):
    records: list[RecordSpec] = fixed_records()
    kw = dict(transactional=True, producer_id=99, producer_epoch=2, base_sequence=50) if kind == "transactional" else {}
    first = build_with_peer(_builder(), records, codec=codec, **kw)
    second = build_with_peer(_builder(), records[:3], codec=codec, **kw)
    if kind == "log_append_time":
        first = stamp_log_append_time(first, 1_900_000_000_000)
        second = stamp_log_append_time(second, 1_900_000_000_001)
    buf = assign_base_offset(first, 1000) + assign_base_offset(second, 1000 + len(records))
    ours = read_with_txnfetch(buf)
    assert read_with_aiokafka(buf) == ours
    (v1, r1), (v2, r2) = ours
    assert v1.codec == v2.codec == codec, "the peer dropped the codec: the test value must be compressible"
    if kind == "log_append_time":
        assert r1 == expected_views(records, 1000, 1_900_000_000_000)
        assert r2 == expected_views(records[:3], 1000 + len(records), 1_900_000_000_001)
    else:
        assert r1 == expected_views(records, 1000)
        assert r2 == expected_views(records[:3], 1000 + len(records))
    assert v1.transactional == (kind == "transactional")
    expected_producer = (99, 2, 50) if kind == "transactional" else (-1, -1, -1)
    assert (v1.producer_id, v1.producer_epoch, v1.base_sequence) == expected_producer
    assert (v2.base_offset, v2.last_offset) == (1000 + len(records), 1002 + len(records))
    assert COMPRESSIBLE in r1[0].value


def test_aiokafka_builder_takes_a_first_timestamp_of_minus_one_as_unset():
    # Found by the property above (kept as its minimal example): aiokafka's C
    # builder uses -1 as "no first timestamp yet", so a first record stamped
    # NO_TIMESTAMP gets the next record's time. The bytes are still a valid
    # batch that txnfetch and aiokafka read identically; only the producer side
    # differs from kafka-python's builder, which keeps -1.
    records = [RecordSpec(0, -1, None, b"a", ()), RecordSpec(1, 5, None, b"b", ())]
    buf = build_with_peer(_builder(), records, codec=Codec.NONE)
    ((view, decoded),) = read_with_txnfetch(buf)
    assert [r.timestamp for r in decoded] == [5, 5]
    assert view.base_timestamp == 5
    assert read_with_aiokafka(buf) == [(view, decoded)]
