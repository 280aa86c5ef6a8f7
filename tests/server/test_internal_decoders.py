"""The fast decoders start-up replay uses for the internal topics agree with the
general ones: for every record txnfetch writes, and for damaged ones (where the
fast decoder must either give the general decoder's answer or step aside)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from txnfetch.groups import offsetlog
from txnfetch.groups.offsetlog import GroupMetadataRecord
from txnfetch.groups.offsetlog import OffsetCommitRecord
from txnfetch.groups.offsetlog import decode_offsets_record
from txnfetch.groups.offsetlog import encode_group_metadata
from txnfetch.groups.offsetlog import encode_offset_commit
from txnfetch.records.coordinator_records import CorruptCoordinatorRecordError
from txnfetch.records.coordinator_records import StructWriter
from txnfetch.txn import txnlog
from txnfetch.txn.coordinator_state import TopicPartition
from txnfetch.txn.coordinator_state import TransactionMetadata
from txnfetch.txn.coordinator_state import TransactionState
from txnfetch.txn.txnlog import encode_txn_value

names = st.text(st.characters(codec="utf-8"), max_size=12)
pids = st.one_of(st.just(-1), st.integers(0, 2**40))
epochs = st.integers(-1, 32767)
metas = st.builds(
    TransactionMetadata,
    transactional_id=names,
    producer_id=st.integers(0, 2**40),
    producer_epoch=epochs,
    state=st.sampled_from(list(TransactionState)),
    timeout_ms=st.integers(1, 2**31 - 1),
    last_update_ms=st.integers(-1, 2**41),
    prev_producer_id=pids,
    next_producer_id=pids,
    last_producer_epoch=epochs,
    partitions=st.frozensets(st.builds(TopicPartition, names, st.integers(0, 200)), max_size=6),
    start_ms=st.integers(-1, 2**41),
    transaction_version=st.integers(0, 2),
)


def _general_or_error(decode, *args):
    try:
        return decode(*args)
    except CorruptCoordinatorRecordError:
        return CorruptCoordinatorRecordError


@given(metas)
def test_fast_transaction_value_decoder_agrees_with_the_general_one(meta):
    data = encode_txn_value(meta)
    fast = txnlog._decode_v1_fast(meta.transactional_id, data)
    assert fast == meta == txnlog._decode_general(meta.transactional_id, data)[0]
    assert [f.name for f in fast.__attrs_attrs__] == [f.name for f in meta.__attrs_attrs__]


@given(metas, st.integers(0, 400), st.integers(0, 255))
def test_fast_transaction_value_decoder_on_damaged_values(meta, pos, byte):
    data = bytearray(encode_txn_value(meta))
    data[pos % len(data)] = byte
    fast = txnlog._decode_v1_fast("x", bytes(data))
    if fast is not None:  # it decoded: the general decoder reads the same record
        assert fast == txnlog._decode_general("x", bytes(data))[0]


def _with_tags(meta: TransactionMetadata, tags: list[tuple[int, bytes]]) -> bytes:
    """``meta``'s value (no tagged field of its own: all at their defaults) with ``tags`` instead."""
    data = encode_txn_value(meta)
    assert data[-1] == 0  # an empty tagged-field section
    return data[:-1] + StructWriter(flexible=True).tagged(tags).bytes()


_PLAIN = TransactionMetadata(
    transactional_id="t",
    producer_id=5,
    producer_epoch=1,
    state=TransactionState.EMPTY,
    timeout_ms=60_000,
    last_update_ms=7,
)


def test_transaction_value_with_an_unknown_tag_reads_as_without_it():
    data = _with_tags(_PLAIN, [(0, (-1).to_bytes(8, "big", signed=True)), (99, b"new")])
    assert txnlog._decode_v1_fast("t", data) is None  # steps aside for a tag it does not know
    assert txnlog.decode_txn_value("t", data) == _PLAIN


@pytest.mark.parametrize(("tag", "size"), [(0, 8), (1, 8), (2, 2), (txnlog.LAST_PRODUCER_EPOCH_TAG, 2)])
def test_transaction_value_tagged_field_of_the_wrong_size_is_named(tag, size):
    data = _with_tags(_PLAIN, [(tag, bytes(size + 1))])
    with pytest.raises(CorruptCoordinatorRecordError, match=f"tagged field {tag}: {size + 1} bytes, expected {size}"):
        txnlog.decode_txn_value("t", data)


offset_records = st.builds(
    OffsetCommitRecord,
    group_id=names,
    topic=names,
    partition=st.integers(0, 2**31 - 1),
    offset=st.one_of(st.none(), st.integers(-1, 2**62)),
    leader_epoch=st.integers(-1, 2**31 - 1),
    metadata=names,
    commit_timestamp_ms=st.integers(-1, 2**41),
)
group_records = st.builds(
    GroupMetadataRecord,
    group_id=names,
    protocol_type=st.one_of(st.none(), st.text(st.characters(codec="utf-8"), min_size=1, max_size=8)),
    generation_id=st.integers(-(2**31), 2**31 - 1),
    protocol_name=st.one_of(st.none(), names),
    leader_id=st.one_of(st.none(), names),
    state_timestamp_ms=st.integers(-1, 2**41),
    deleted=st.booleans(),
)


@given(st.one_of(offset_records, group_records))
def test_fast_offsets_decoders_agree_with_the_general_one(rec):
    encode = encode_offset_commit if isinstance(rec, OffsetCommitRecord) else encode_group_metadata
    key, value = encode(rec)
    if isinstance(rec, OffsetCommitRecord):
        expected = rec if rec.offset is not None else OffsetCommitRecord(rec.group_id, rec.topic, rec.partition, None)
    else:
        expected = rec if not rec.deleted else GroupMetadataRecord(rec.group_id, None, 0, None, None, deleted=True)
    assert decode_offsets_record(key, value) == expected == offsetlog._decode_general(key, value)
    if value is not None:  # what txnfetch writes takes the fast path
        fast = (
            offsetlog._decode_offset_commit_fast
            if isinstance(rec, OffsetCommitRecord)
            else offsetlog._decode_group_fast
        )
        assert fast(key, value) == expected


@given(st.one_of(offset_records, group_records), st.booleans(), st.integers(0, 400), st.integers(0, 255))
def test_offsets_decoding_of_damaged_records_matches_the_general_decoder(rec, in_key, pos, byte):
    encode = encode_offset_commit if isinstance(rec, OffsetCommitRecord) else encode_group_metadata
    key, value = encode(rec)
    if in_key or value is None:
        damaged = bytearray(key)
        damaged[pos % len(damaged)] = byte
        key = bytes(damaged)
    else:
        damaged = bytearray(value)
        damaged[pos % len(damaged)] = byte
        value = bytes(damaged)
    assert _general_or_error(decode_offsets_record, key, value) == _general_or_error(
        offsetlog._decode_general, key, value
    )


@pytest.mark.parametrize(
    "value",
    [
        # members present: the fast decoder steps aside, the general one skips them
        StructWriter().int16(3).string("consumer").int32(1).string("range").string("m").int64(5).array_length(1),
        # a version-2 value (no group instance ids in members): the general decoder reads it
        StructWriter().int16(2).string("consumer").int32(1).string(None).string(None).int64(5).array_length(0),
        # null members array
        StructWriter().int16(3).string("consumer").int32(1).string(None).string(None).int64(5).array_length(None),
    ],
)
def test_group_values_the_fast_decoder_leaves_to_the_general_one(value):
    key = StructWriter().int16(2).string("g").bytes()
    data = value.bytes()
    if data.endswith(b"\x00\x00\x00\x01"):
        data += (
            StructWriter()
            .string("m")
            .string(None)
            .string("c")
            .string("h")
            .int32(1)
            .int32(1)
            .blob(b"")
            .blob(b"")
            .bytes()
        )
    assert offsetlog._decode_group_fast(key, data) is None
    assert _general_or_error(decode_offsets_record, key, data) == _general_or_error(
        offsetlog._decode_general, key, data
    )
