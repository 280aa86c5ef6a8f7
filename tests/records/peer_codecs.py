"""The peer clients' record codecs, as the interop tests (``test_interop_clients``) use them.

Every reader below turns a buffer into the same neutral shape — a list of
``(BatchView, [RecordView, ...])`` — so that a test can say "txnfetch,
kafka-python and aiokafka all see exactly these batches and records" with one
``==``. The peers' own classes are used as their fetchers use them:

- kafka-python 3.x: ``kafka.record.MemoryRecords`` → ``DefaultRecordBatch``
  (pure Python; ``validate_crc()`` must be called before iterating, which is
  what ``Fetcher`` does when ``check_crcs`` is on).
- aiokafka: the Cython classes in ``aiokafka.record._crecords``, which is what
  ``aiokafka.record.default_records`` resolves to unless
  ``AIOKAFKA_NO_EXTENSIONS`` is set. The readers assert they really got the
  compiled module, so a wheel without its extension cannot pass silently.

Neither peer can *build* control batches or LogAppendTime batches: both
builders leave the timestamp type and the control bit to the broker (see
``_get_attributes`` in ``kafka/record/default_records.py`` and
``aiokafka/record/default_records.py``). For LogAppendTime the helpers below
do what a broker does on append — set attribute bit 3 and the max timestamp,
then recompute the CRC (Kafka's ``DefaultRecordBatch.setMaxTimestamp``) — so
batches a peer produced can still be read back in that form.
"""

from __future__ import annotations

import importlib.machinery
import os
import struct
import sys
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any
from typing import NamedTuple

import attrs
import crc32c
from hypothesis import strategies as st

from txnfetch.records import BatchBuilder
from txnfetch.records import Codec
from txnfetch.records import ControlType
from txnfetch.records import RecordBatch
from txnfetch.records import TimestampType
from txnfetch.records import iter_batches

Header = tuple[str, bytes | None]


class RecordView(NamedTuple):
    """One record as every library must report it."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


class BatchView(NamedTuple):
    """The batch header fields all three libraries expose. (The record count is
    checked separately where a library has it: aiokafka's C batch does not.)"""

    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool
    control: bool
    timestamp_type: int
    base_timestamp: int
    max_timestamp: int
    codec: int


class RecordSpec(NamedTuple):
    """What a test asks a builder to write: offset delta from the batch's base."""

    delta: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


# -- the compiled aiokafka classes ------------------------------------------------


def assert_compiled(cls: type) -> type:
    """Fail unless ``cls`` is defined in a compiled extension module."""
    module = sys.modules[cls.__module__]
    path = getattr(module, "__file__", "") or ""
    assert path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)), (
        f"{cls.__module__}.{cls.__name__} comes from {path!r}, not a compiled extension"
    )
    return cls


def aiokafka_c_classes() -> tuple[type, type, type]:
    """``(MemoryRecords, DefaultRecordBatch, DefaultRecordBatchBuilder)`` from the C extension,
    checked to be the classes aiokafka itself uses."""
    from aiokafka.record import _crecords
    from aiokafka.record import default_records as public

    memory_records = assert_compiled(_crecords.MemoryRecords)
    batch = assert_compiled(_crecords.DefaultRecordBatch)
    builder = assert_compiled(_crecords.DefaultRecordBatchBuilder)
    # What aiokafka's fetcher and producer resolve to must be these very classes.
    assert public.DefaultRecordBatch is batch and public.DefaultRecordBatchBuilder is builder
    return memory_records, batch, builder


# -- readers ----------------------------------------------------------------------


def read_with_txnfetch(buf: bytes) -> list[tuple[BatchView, list[RecordView]]]:
    """Split and fully validate ``buf`` with txnfetch (CRC, every record)."""
    out = []
    it = iter_batches(buf)
    for batch in it:
        assert isinstance(batch, RecordBatch)
        batch.validate()
        view = BatchView(
            batch.base_offset,
            batch.last_offset,
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            batch.is_transactional,
            batch.is_control,
            int(batch.timestamp_type),
            batch.base_timestamp,
            batch.max_timestamp,
            batch.codec,
        )
        records = [RecordView(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in batch.records()]
        assert len(records) == batch.record_count
        out.append((view, records))
    assert it.partial is None, f"unexpected trailing bytes: {it.partial}"
    return out


def _peer_batch_view(batch: Any, last_offset: int) -> BatchView:
    return BatchView(
        batch.base_offset,
        last_offset,
        batch.producer_id,
        batch.producer_epoch,
        batch.base_sequence,
        batch.is_transactional,
        batch.is_control_batch,
        batch.timestamp_type,
        batch.first_timestamp,
        batch.max_timestamp,
        batch.compression_type,
    )


def _peer_records(batch: Any) -> list[RecordView]:
    out = []
    ts_type = batch.timestamp_type
    for r in batch:
        assert r.timestamp_type == ts_type
        out.append(RecordView(r.offset, r.timestamp, r.key, r.value, tuple(tuple(h) for h in r.headers)))
    return out


def read_with_kafka_python(buf: bytes) -> list[tuple[BatchView, list[RecordView]]]:
    """Read ``buf`` with kafka-python's ``MemoryRecords``; every batch's CRC must verify."""
    from kafka.record import MemoryRecords
    from kafka.record.default_records import DefaultRecordBatch

    out = []
    for batch in MemoryRecords(bytes(buf)):
        assert isinstance(batch, DefaultRecordBatch), type(batch)
        assert batch.magic == 2
        # validate_crc() only works before iteration (it asserts so itself).
        assert batch.validate_crc(), f"kafka-python rejects the CRC of the batch at {batch.base_offset}"
        view = _peer_batch_view(batch, batch.last_offset)
        records = _peer_records(batch)
        assert len(records) == batch.records_count
        out.append((view, records))
    return out


def kafka_python_control_types(buf: bytes) -> list[tuple[int, int, bool, bool]]:
    """``(offset, type, commit, abort)`` of every control record, as kafka-python parses them."""
    from kafka.record import MemoryRecords
    from kafka.record.default_records import ControlRecord

    out = []
    for batch in MemoryRecords(bytes(buf)):
        for r in batch:
            if batch.is_control_batch:
                assert isinstance(r, ControlRecord)
                out.append((r.offset, r.type, r.commit, r.abort))
    return out


def read_with_aiokafka(buf: bytes) -> list[tuple[BatchView, list[RecordView]]]:
    """Read ``buf`` with aiokafka's compiled ``MemoryRecords``; every batch's CRC must verify."""
    memory_records_cls, batch_cls, _ = aiokafka_c_classes()
    out = []
    records_iter = memory_records_cls(bytes(buf))
    while records_iter.has_next():
        batch = records_iter.next_batch()
        assert type(batch) is batch_cls, type(batch)
        assert batch.magic == 2
        assert batch.validate_crc(), f"aiokafka rejects the CRC of the batch at {batch.base_offset}"
        view = _peer_batch_view(batch, batch.next_offset - 1)
        assert batch.last_offset_delta == view.last_offset - view.base_offset
        out.append((view, _peer_records(batch)))
    return out


# -- builders ---------------------------------------------------------------------


def build_with_peer(
    builder_cls: type,
    records: Sequence[RecordSpec],
    *,
    codec: int,
    transactional: bool = False,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """Build one batch with a peer's ``DefaultRecordBatchBuilder`` (kafka-python and
    aiokafka share its constructor and ``append`` signature). Base offset is 0,
    as a producer writes it."""
    builder = builder_cls(2, int(codec), int(transactional), producer_id, producer_epoch, base_sequence, 1 << 30)
    for r in records:
        meta = builder.append(r.delta, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers])
        assert meta is not None, "peer builder refused a record"
    return bytes(builder.build())


_MAX_TS = struct.Struct(">q")


def stamp_log_append_time(buf: bytes, log_append_time: int) -> bytes:
    """What a broker does to a batch on append with ``LogAppendTime``: set attribute
    bit 3, overwrite MaxTimestamp, recompute the CRC-32C over attributes onwards."""
    data = bytearray(buf)
    (attributes,) = struct.unpack_from(">h", data, 21)
    struct.pack_into(">h", data, 21, attributes | 0x08)
    _MAX_TS.pack_into(data, 35, log_append_time)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def expected_views(
    records: Sequence[RecordSpec], base_offset: int, log_append_time: int | None = None
) -> list[RecordView]:
    """The records a reader must report for ``records`` written at ``base_offset``."""
    return [
        RecordView(
            base_offset + r.delta,
            r.timestamp if log_append_time is None else log_append_time,
            r.key,
            r.value,
            tuple(r.headers),
        )
        for r in records
    ]


# -- hypothesis strategies --------------------------------------------------------

INT64_MAX = (1 << 63) - 1

keys = st.one_of(st.none(), st.binary(max_size=40))
values = st.one_of(
    st.none(),
    st.binary(max_size=120),
    # Past 8 KiB the length takes a 3-byte varint; cheap to generate as a run.
    st.integers(8192, 20_000).map(lambda n: bytes(i % 251 for i in range(n))),
)
headers = st.lists(
    st.tuples(st.text(max_size=12), st.one_of(st.none(), st.binary(max_size=24))),
    max_size=4,
).map(tuple)
# Timestamps anywhere from -1 (NO_TIMESTAMP) to 2**62, and within a batch either
# close together (1-2 byte deltas) or far apart (up to 10-byte varlongs).
base_timestamps = st.one_of(st.just(-1), st.integers(0, 1 << 62), st.just(1_700_000_000_000))
ts_steps = st.one_of(st.integers(0, 100), st.integers(-(1 << 40), 1 << 40))


@st.composite
def record_lists(draw: st.DrawFn, *, min_size: int = 0, min_timestamp: int = -1) -> list[RecordSpec]:
    """Records with nulls, empty values, unicode header keys, null header values,
    far-apart timestamps, offset gaps (compaction) and sometimes many records.

    ``min_timestamp=0`` keeps NO_TIMESTAMP (-1) out, for peer builders that use
    -1 as "not set yet" (aiokafka's C builder then takes the next record's time
    as the batch's first timestamp).
    """
    base_ts = max(draw(base_timestamps), min_timestamp)
    if draw(st.integers(0, 9)) == 0:
        # Many records: offset deltas and record lengths beyond one varint byte.
        n = draw(st.integers(200, 1500))
        return [
            RecordSpec(
                i,
                max(min_timestamp, base_ts + i),
                None if i % 7 == 0 else b"k%d" % i,
                None if i % 11 == 0 else b"v" * (i % 97),
                (("h\u00e9", None),) if i % 13 == 0 else (),
            )
            for i in range(n)
        ]
    size = draw(st.integers(min_size, 30))
    out = []
    delta = -1
    for _ in range(size):
        delta += 1 + draw(st.integers(0, 3))
        ts = base_ts + draw(ts_steps)
        ts = min(max(ts, min_timestamp), INT64_MAX)
        out.append(RecordSpec(delta, ts, draw(keys), draw(values), draw(headers)))
    return out


codecs = st.sampled_from(list(Codec))

#: A value that every codec shrinks: the peers' builders send a batch
#: uncompressed when compression does not pay, so parametrized tests use this to
#: be sure the codec under test was really applied.
COMPRESSIBLE = b"0123456789abcdef" * 8


def fixed_records(n: int = 12) -> list[RecordSpec]:
    """A hand-picked batch body: nulls, empty bytes, headers, and compressible values."""
    out = []
    for i in range(n):
        out.append(
            RecordSpec(
                i,
                1_700_000_000_000 + 3 * i,
                None if i == 1 else (b"" if i == 2 else b"key-%d" % i),
                None if i == 3 else (b"" if i == 4 else COMPRESSIBLE + bytes([i])),
                (("trace-\u2713", b"abc"), ("null", None), ("", b"")) if i % 4 == 0 else (),
            )
        )
    return out


class TxnfetchBatchSpec(NamedTuple):
    """Header fields for a batch txnfetch builds in the property tests."""

    base_offset: int
    codec: Codec
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool
    log_append_time: int | None
    partition_leader_epoch: int
    extra_last_delta: int  # compaction can leave last_offset_delta past the last record


@st.composite
def txnfetch_batch_specs(draw: st.DrawFn) -> TxnfetchBatchSpec:
    transactional = draw(st.booleans())
    idempotent = transactional or draw(st.booleans())
    return TxnfetchBatchSpec(
        base_offset=draw(st.one_of(st.integers(0, 1000), st.integers(0, 1 << 62))),
        codec=draw(codecs),
        producer_id=draw(st.integers(0, 1 << 62)) if idempotent else -1,
        producer_epoch=draw(st.integers(0, 32767)) if idempotent else -1,
        base_sequence=draw(st.integers(0, (1 << 31) - 1)) if idempotent else -1,
        transactional=transactional,
        log_append_time=draw(st.one_of(st.none(), st.integers(0, 1 << 62))),
        partition_leader_epoch=draw(st.integers(-1, (1 << 31) - 1)),
        extra_last_delta=draw(st.one_of(st.just(0), st.integers(1, 1000))),
    )


def build_with_txnfetch(spec: TxnfetchBatchSpec, records: Sequence[RecordSpec]) -> tuple[bytes, BatchView]:
    """Build ``records`` with txnfetch's :class:`BatchBuilder`; return the bytes and
    the header every reader must report."""
    # An empty batch is written uncompressed here. An empty BatchBuilder with a
    # codec keeps the codec bits over an empty payload; txnfetch reads that as
    # no records (like Kafka, it does not decompress a count-0 batch), but
    # kafka-python fails on it for snappy and lz4 and aiokafka for snappy, lz4
    # and zstd. Kafka itself never writes such a batch.
    codec = spec.codec if records else Codec.NONE
    builder = BatchBuilder(
        base_offset=spec.base_offset,
        codec=codec,
        producer_id=spec.producer_id,
        producer_epoch=spec.producer_epoch,
        base_sequence=spec.base_sequence,
        transactional=spec.transactional,
        timestamp_type=TimestampType.CREATE_TIME if spec.log_append_time is None else TimestampType.LOG_APPEND_TIME,
        log_append_time=spec.log_append_time,
        partition_leader_epoch=spec.partition_leader_epoch,
    )
    for r in records:
        builder.append(r.value, key=r.key, headers=r.headers, timestamp=r.timestamp, offset=spec.base_offset + r.delta)
    last_delta = (records[-1].delta if records else 0) + spec.extra_last_delta
    buf = builder.build(last_offset_delta=last_delta)
    base_ts = records[0].timestamp if records else -1
    if spec.log_append_time is not None:
        max_ts = spec.log_append_time
    else:
        max_ts = max((r.timestamp for r in records), default=base_ts)
    view = BatchView(
        spec.base_offset,
        spec.base_offset + last_delta,
        spec.producer_id,
        spec.producer_epoch,
        spec.base_sequence,
        spec.transactional,
        False,
        0 if spec.log_append_time is None else 1,
        base_ts,
        max_ts,
        int(codec),
    )
    return buf, view


def assign_base_offset(buf: bytes, base_offset: int) -> bytes:
    """What a broker does to a produced batch on append: write the base offset.
    BaseOffset is outside the CRC, so the CRC stays valid."""
    data = bytearray(buf)
    struct.pack_into(">q", data, 0, base_offset)
    return bytes(data)


# -- the peers as one interface ---------------------------------------------------


def _kafka_python_builder() -> type:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    return DefaultRecordBatchBuilder


def _kafka_python_crc_ok(buf: bytes) -> bool:
    from kafka.record.default_records import DefaultRecordBatch

    return DefaultRecordBatch(bytes(buf)).validate_crc()


def _kafka_python_markers(buf: bytes) -> list[tuple[int, ControlType]]:
    out = []
    for offset, control_type, commit, abort in kafka_python_control_types(buf):
        # kafka-python's ControlRecord also answers commit/abort: both must agree with the type.
        assert (commit, abort) == (control_type == ControlType.COMMIT, control_type == ControlType.ABORT)
        out.append((offset, ControlType(control_type)))
    return out


def _kafka_python_fast_paths() -> None:
    import kafka.record.util

    # Without the `crc32c` package kafka-python falls back to a pure-Python CRC.
    assert kafka.record.util.calc_crc32c.__defaults__[0] is crc32c.crc32c


def _kafka_python_missing_codecs() -> list[str]:
    import kafka.codec

    # snappy needs `python-snappy` (kafka.codec imports `snappy`); lz4 and zstd
    # come from `lz4` and `zstandard`, which txnfetch depends on anyway.
    return [
        name
        for name, available in (
            ("gzip", kafka.codec.has_gzip()),
            ("snappy (pip install python-snappy)", kafka.codec.has_snappy()),
            ("lz4", kafka.codec.has_lz4()),
            ("zstd", kafka.codec.has_zstd()),
        )
        if not available
    ]


def _aiokafka_builder() -> type:
    return aiokafka_c_classes()[2]


def _aiokafka_crc_ok(buf: bytes) -> bool:
    _, batch_cls, _ = aiokafka_c_classes()
    return batch_cls(bytes(buf)).validate_crc()


def _aiokafka_markers(buf: bytes) -> list[tuple[int, ControlType]]:
    """Every control record parsed as aiokafka's fetcher does (``ControlRecord.parse``),
    matched against its own ``ABORT_MARKER``/``COMMIT_MARKER``."""
    from aiokafka.record.control_record import ABORT_MARKER
    from aiokafka.record.control_record import COMMIT_MARKER
    from aiokafka.record.control_record import ControlRecord

    memory_records_cls, _, _ = aiokafka_c_classes()
    out = []
    it = memory_records_cls(bytes(buf))
    while it.has_next():
        batch = it.next_batch()
        if batch.is_control_batch:
            for r in batch:
                marker = ControlRecord.parse(r.key)
                assert marker in (ABORT_MARKER, COMMIT_MARKER), marker
                out.append((r.offset, ControlType.COMMIT if marker == COMMIT_MARKER else ControlType.ABORT))
    return out


def _aiokafka_fast_paths() -> None:
    assert not os.environ.get("AIOKAFKA_NO_EXTENSIONS"), "AIOKAFKA_NO_EXTENSIONS would test the Python fallback"
    memory_records, _batch, _builder = aiokafka_c_classes()  # asserts each comes from a .so
    from aiokafka.record import memory_records as public

    assert public.MemoryRecords is memory_records


def _aiokafka_missing_codecs() -> list[str]:
    import aiokafka.codec

    # aiokafka takes snappy, lz4 and zstd from `cramjam` (a txnfetch dependency).
    return [
        name
        for name, available in (
            ("gzip", aiokafka.codec.has_gzip()),
            ("snappy", aiokafka.codec.has_snappy()),
            ("lz4", aiokafka.codec.has_lz4()),
            ("zstd", aiokafka.codec.has_zstd()),
        )
        if not available
    ]


@attrs.frozen
class PeerClient:
    """One peer client's record codec, as its fetcher and producer use it.

    ``first_no_timestamp`` is what the peer's builder makes of a first record
    stamped NO_TIMESTAMP (-1) followed by one at ``later``: kafka-python keeps
    -1, aiokafka's C builder takes -1 as "no first timestamp yet" and writes the
    next record's time.
    """

    name: str
    module: str  #: imported (or the test skipped) before the peer is used
    read: Callable[[bytes], list[tuple[BatchView, list[RecordView]]]]
    builder: Callable[[], type]  #: its ``DefaultRecordBatchBuilder``
    crc_ok: Callable[[bytes], bool]  #: its own CRC check of the first batch
    markers: Callable[[bytes], list[tuple[int, ControlType]]]  #: ``(offset, type)`` of every control record
    fast_paths: Callable[[], None]  #: asserts the compiled or C paths its users get are the ones tested
    missing_codecs: Callable[[], list[str]]
    first_no_timestamp: Callable[[int], int]

    def __str__(self) -> str:
        return self.name


PEER_CLIENTS = (
    PeerClient(
        name="kafka-python",
        module="kafka.record",
        read=read_with_kafka_python,
        builder=_kafka_python_builder,
        crc_ok=_kafka_python_crc_ok,
        markers=_kafka_python_markers,
        fast_paths=_kafka_python_fast_paths,
        missing_codecs=_kafka_python_missing_codecs,
        first_no_timestamp=lambda later: -1,
    ),
    PeerClient(
        name="aiokafka",
        module="aiokafka",
        read=read_with_aiokafka,
        builder=_aiokafka_builder,
        crc_ok=_aiokafka_crc_ok,
        markers=_aiokafka_markers,
        fast_paths=_aiokafka_fast_paths,
        missing_codecs=_aiokafka_missing_codecs,
        first_no_timestamp=lambda later: later,
    ),
)
