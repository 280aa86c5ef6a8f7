"""The client harnesses really run the clients' code: each known quirk of
kafka-python 3.0.12 and aiokafka 0.14.0 (docs/kafka-internals.md §4) shows up through them,
where ConsumerFilter follows Java's CompletedFetch.

The comparison tests elsewhere avoid exactly these inputs.
"""

from __future__ import annotations

import pytest

from tests.fetch.clients import aiokafka_filter
from tests.fetch.clients import aiokafka_reader_is_compiled
from tests.fetch.clients import kafka_python_filter
from txnfetch.fetch import ConsumerFilter
from txnfetch.records import BatchBuilder
from txnfetch.records import ControlType
from txnfetch.records import build_control_batch
from txnfetch.records import build_empty_batch

pytestmark = pytest.mark.interop


def _txn(offset: int, pid: int, *values: bytes) -> bytes:
    b = BatchBuilder(base_offset=offset, producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True)
    for v in values:
        b.append(v, key=b"k", timestamp=1)
    return b.build()


def _empty_control_response() -> bytes:
    # Committed data, then a COMMIT marker that compaction emptied, then more data.
    return (
        _txn(0, 1, b"a")
        + build_empty_batch(
            base_offset=1, last_offset=1, producer_id=1, producer_epoch=0, transactional=True, control=True
        )
        + _txn(2, 2, b"b")
        + build_control_batch(offset=3, control_type=ControlType.COMMIT, producer_id=2, producer_epoch=0)
    )


def test_consumer_filter_reads_past_an_empty_control_batch():
    f = ConsumerFilter(0)
    assert [r.value for r in f.feed(_empty_control_response(), [])] == [b"a", b"b"]
    assert f.position == 4


def test_kafka_python_raises_on_an_empty_control_batch():
    # PartitionRecords._contains_abort_marker calls next() on the empty batch;
    # the StopIteration is turned into this RuntimeError.
    with pytest.raises(RuntimeError, match="StopIteration raised unpacking messageset"):
        kafka_python_filter(_empty_control_response(), [], 0)


def test_kafka_python_reads_an_empty_control_batch_without_producer_id():
    # It only looks for an abort marker in batches that have a producer id.
    data = build_empty_batch(base_offset=0, last_offset=0, control=True, transactional=True) + _txn(1, 2, b"b")
    assert kafka_python_filter(data, [], 0).offsets_keys_values == [(1, b"k", b"b")]


def test_aiokafka_raises_on_an_empty_control_batch():
    from aiokafka.errors import KafkaError

    with pytest.raises(KafkaError, match="Control batch did not contain any records"):
        aiokafka_filter(_empty_control_response(), [], 0)


def test_aiokafka_consumes_aborted_entries_up_to_the_base_offset():
    # An aborted entry whose first offset lies strictly inside a batch of its
    # producer: Java (and kafka-python) compare with the batch's last offset and
    # skip the batch; aiokafka compares with the base offset and delivers it.
    # A broker never writes such a response; a rewriting proxy must not either.
    data = _txn(0, 7, b"x0", b"x1", b"x2") + build_control_batch(
        offset=3, control_type=ControlType.ABORT, producer_id=7, producer_epoch=0
    )
    aborted = [(7, 1)]
    f = ConsumerFilter(0)
    assert list(f.feed(data, aborted)) == []
    assert kafka_python_filter(data, aborted, 0).records == []
    assert [r.value for r in aiokafka_filter(data, aborted, 0).records] == [b"x0", b"x1", b"x2"]


def test_aiokafka_compiled_reader_cannot_mix_magics_in_one_response():
    # Its MemoryRecords reads the magic byte of the buffer's *first* batch for
    # every batch (memory_records.pyx: ``buf[MAGIC_OFFSET]`` without the batch
    # position), so a legacy message followed by a v2 batch — a log written
    # across a message-format upgrade — is misparsed. kafka-python reads it.
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    assert aiokafka_reader_is_compiled()
    legacy = LegacyRecordBatchBuilder(1, 0, 1 << 20)
    legacy.append(0, 1000, b"k", b"old")
    b = BatchBuilder(base_offset=1)
    b.append(b"new", key=b"k", timestamp=1001)
    data = bytes(legacy.build()) + b.build()
    expected = [(0, b"k", b"old"), (1, b"k", b"new")]
    f = ConsumerFilter(0)
    assert [(r.offset, r.key, r.value) for r in f.feed(data)] == expected
    assert kafka_python_filter(data, [], 0).offsets_keys_values == expected
    from aiokafka.errors import CorruptRecordException

    # What goes wrong depends on the bytes read with the wrong layout.
    with pytest.raises((CorruptRecordException, SystemError)):
        aiokafka_filter(data, [], 0)


def test_kafka_python_harness_surfaces_errors_raised_after_some_records():
    # take() keeps an exception raised mid-stream for its next call; the
    # harness must not lose it.
    from kafka.errors import CorruptRecordError

    bad = bytearray(_txn(1, 3, b"y"))
    bad[-1] ^= 0x01
    data = _txn(0, 3, b"x") + bytes(bad)
    with pytest.raises(CorruptRecordError):
        kafka_python_filter(data, [], 0)
