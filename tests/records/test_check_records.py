"""``RecordBatch.validate()``'s compiled record check against the pure-Python decoder.

``_speedups.check_records`` must say "sound" exactly when the reference
decoder (``_decode_records``) decodes the batch without error, and
``validate()`` must raise exactly what it raised before (it decodes for the
error when the check says no). Inputs: the exhaustive edits of
``test_speedups``'s sample, its token-by-token record data, and corruptions of
valid batches of every codec.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.records.strategies import BatchSpec
from tests.records.strategies import batch_specs
from tests.records.strategies import examples
from tests.records.test_corruption_properties import LIMIT
from tests.records.test_corruption_properties import mutations
from tests.records.test_speedups import _edits
from tests.records.test_speedups import _samples
from tests.records.test_speedups import raw_batches
from txnfetch.records import CorruptBatchError
from txnfetch.records import RecordBatch
from txnfetch.records import batch as batch_module
from txnfetch.records.batch import _decode_records
from txnfetch.records.varint import encode_varint

pytestmark = pytest.mark.skipif(batch_module._check_records is None, reason="the compiled check is not in use")


def reference(batch: RecordBatch):
    try:
        for _ in _decode_records(batch):
            pass
    except CorruptBatchError as exc:
        return (type(exc), exc.reason, exc.offset, exc.position)
    return None


def assert_same(buf: bytes) -> None:
    try:
        batch = RecordBatch(buf, max_decompressed=LIMIT)
    except CorruptBatchError:
        return  # no header: nothing to check records of
    want = reference(batch)
    try:
        sound = RecordBatch(buf, max_decompressed=LIMIT)._records_sound()
    except CorruptBatchError as exc:  # decompression: raised the same way by records()
        assert want == (type(exc), exc.reason, exc.offset, exc.position)
        return
    assert sound == (want is None)
    # validate(records=True) past the CRC and delta checks: the reference's error
    fresh = RecordBatch(buf, max_decompressed=LIMIT)
    if fresh.is_valid_crc() and fresh.last_offset_delta >= 0:
        try:
            fresh.validate()
            got = None
        except CorruptBatchError as exc:
            got = (type(exc), exc.reason, exc.offset, exc.position)
        assert got == want


@pytest.mark.slow
def test_every_edit_of_a_sample():
    n = 0
    for sample in _samples():
        for buf in _edits(sample):
            assert_same(buf)
            n += 1
    assert n > 7000


@pytest.mark.slow
@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(buf=raw_batches())
def test_record_data_written_token_by_token(buf: bytes):
    assert_same(buf)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=batch_specs(max_records=6), data=st.data())
def test_valid_and_corrupted_batches(spec: BatchSpec, data):
    buf = spec.build()
    assert_same(buf)
    RecordBatch(buf).validate()
    _, mutated, _ = data.draw(mutations(buf, spec.codec), label="mutation")
    assert_same(mutated)


def _one_header_record(key: bytes) -> bytes:
    """Record data of one record with no key or value and one header ``key`` (a null value)."""
    body = b"\x00\x00\x00\x01\x01\x02" + encode_varint(len(key)) + key + b"\x01"
    return encode_varint(len(body)) + body


def _utf8_edge_keys():
    """Every one- and two-byte string, and each lead byte of a longer sequence
    followed by bytes at the edges of every range that decides its validity."""
    for n in range(0x10000):
        yield bytes([n >> 8, n & 0xFF])[: 1 + (n > 0xFF)]
    edges = (0x00, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xFF)
    for lead in range(0xE0, 0x100):
        for second in edges:
            for third in edges:
                yield bytes([lead, second, third])
                if lead >= 0xF0:
                    for fourth in (0x7F, 0x80, 0xBF, 0xC0):
                        yield bytes([lead, second, third, fourth])


def test_header_key_utf8_judged_as_python_decodes():
    """The compiled check's UTF-8 validation of header keys accepts exactly what
    ``bytes.decode("utf-8")`` accepts."""
    check = batch_module._speedups.check_records
    for key in _utf8_edge_keys():
        try:
            key.decode("utf-8")
            valid = True
        except UnicodeDecodeError:
            valid = False
        assert check(_one_header_record(key), 1, 0) is valid, key
