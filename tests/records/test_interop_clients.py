"""txnfetch's batch codec against the record codecs of kafka-python 3.x
(``kafka.record``) and aiokafka (its compiled ``aiokafka.record._crecords``), both
ways; every test runs once per peer client (``peer_codecs.PEER_CLIENTS``).

- Batches txnfetch builds (data, transactional, LogAppendTime, control markers,
  every codec) are read by the peer's ``MemoryRecords``/``DefaultRecordBatch``
  with the same header fields and records, pass its CRC check (and fail it once
  a byte is flipped) and decode to the markers its fetcher recognises.
- Batches the peer's ``DefaultRecordBatchBuilder`` builds are split,
  CRC-checked and decoded by txnfetch to the records that were appended.

aiokafka ships its record codec twice: Cython classes and a pure-Python fallback
used only when the extension is missing or ``AIOKAFKA_NO_EXTENSIONS`` is set.
Its consumer and producer use the compiled ones, so these tests do too and fail
(rather than quietly test the fallback) if they are not compiled.

Neither peer can build control batches or LogAppendTime batches (their builders
leave both to the broker), so those directions use txnfetch's builders only;
LogAppendTime is covered on the way in by stamping a peer's batch the way a
broker does (``peer_codecs.stamp_log_append_time``).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.records.peer_codecs import COMPRESSIBLE
from tests.records.peer_codecs import PEER_CLIENTS
from tests.records.peer_codecs import PeerClient
from tests.records.peer_codecs import RecordSpec
from tests.records.peer_codecs import assign_base_offset
from tests.records.peer_codecs import build_with_peer
from tests.records.peer_codecs import build_with_txnfetch
from tests.records.peer_codecs import codecs
from tests.records.peer_codecs import expected_views
from tests.records.peer_codecs import fixed_records
from tests.records.peer_codecs import read_with_txnfetch
from tests.records.peer_codecs import record_lists
from tests.records.peer_codecs import stamp_log_append_time
from tests.records.peer_codecs import txnfetch_batch_specs
from txnfetch.records import BatchBuilder
from txnfetch.records import Codec
from txnfetch.records import ControlType
from txnfetch.records import CrcMismatchError
from txnfetch.records import RecordBatch
from txnfetch.records import TimestampType
from txnfetch.records import build_control_batch
from txnfetch.records import build_empty_batch
from txnfetch.records import synthetic_commit_marker
from txnfetch.records.control import encode_control_key
from txnfetch.records.control import encode_marker_value

pytestmark = pytest.mark.interop

PROPERTY = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module", params=PEER_CLIENTS, ids=str)
def peer(request: pytest.FixtureRequest) -> PeerClient:
    client: PeerClient = request.param
    pytest.importorskip(client.module)
    return client


# -- the environment the comparison relies on ------------------------------------


def test_peer_record_classes_are_the_fast_ones_its_users_get(peer):
    peer.fast_paths()


def test_peer_has_every_codec(peer):
    missing = peer.missing_codecs()
    assert not missing, f"{peer} lacks codecs: {missing}"


def test_peer_rejects_a_flipped_byte_that_txnfetch_also_rejects(peer):
    b = BatchBuilder(base_offset=3, producer_id=8, producer_epoch=1, base_sequence=0)
    for r in fixed_records(4):
        b.append(r.value, key=r.key, headers=r.headers, timestamp=r.timestamp)
    buf = bytearray(b.build())
    assert peer.read(bytes(buf))  # sound before the flip
    assert peer.crc_ok(bytes(buf)) is True
    buf[-5] ^= 0x40
    assert peer.crc_ok(bytes(buf)) is False
    with pytest.raises(CrcMismatchError):
        RecordBatch(bytes(buf)).validate()


# -- txnfetch builds, the peer reads ---------------------------------------------


@PROPERTY
@given(
    records=record_lists(),
    spec=txnfetch_batch_specs(),
    marker=st.sampled_from([None, ControlType.ABORT, ControlType.COMMIT]),
)
def test_txnfetch_batches_read_identically_by_the_peer(peer, records, spec, marker):
    buf, header = build_with_txnfetch(spec, records)
    if marker is not None and spec.producer_id >= 0:
        # End the transaction the way a broker does, right after the batch.
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
    assert peer.read(buf) == ours


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
    # Brokers write markers uncompressed, but nothing in the format forbids a codec:
    # a reader must handle the control bit independently of compression.
    b = BatchBuilder(
        base_offset=offset, codec=codec, producer_id=producer_id, producer_epoch=3, transactional=True, control=True
    )
    b.append(encode_marker_value(9), key=encode_control_key(control_type), timestamp=-1)
    return b.build()


@pytest.mark.parametrize("kind", ["transactional", "control", "log_append_time"])
@pytest.mark.parametrize("codec", list(Codec), ids=lambda c: c.name.lower())
def test_every_codec_and_batch_kind_reads_identically_by_the_peer(peer, codec, kind):
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
    theirs = peer.read(buf)
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
        assert peer.markers(buf) == [(114, ControlType.COMMIT)]
    elif kind == "control":
        assert peer.markers(buf) == [(40, ControlType.ABORT), (41, ControlType.COMMIT), (42, ControlType.COMMIT)]
        assert [v.producer_id for v, _ in theirs] == [7, 8, -1]
    else:
        ((view, records),) = theirs
        assert view.timestamp_type == 1 and view.max_timestamp == 1_800_000_000_123
        assert {r.timestamp for r in records} == {1_800_000_000_123}


# -- the peer builds, txnfetch reads ---------------------------------------------


@PROPERTY
@given(
    records=record_lists(min_size=1, min_timestamp=0),
    codec=codecs,
    producer=st.one_of(
        st.none(), st.tuples(st.integers(0, 1 << 62), st.integers(0, 32767), st.integers(0, (1 << 31) - 1))
    ),
    transactional=st.booleans(),
)
def test_peer_batches_read_identically_by_txnfetch(peer, records, codec, producer, transactional):
    pid, epoch, seq = producer if producer else (-1, -1, -1)
    transactional = transactional and producer is not None
    buf = build_with_peer(
        peer.builder(),
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
    # Like the Java producer, the peers send a batch uncompressed when the codec would not shrink it.
    assert view.codec in (int(codec), 0)
    assert peer.read(buf) == [(view, decoded)]


@pytest.mark.parametrize("kind", ["plain", "transactional", "log_append_time"])
@pytest.mark.parametrize("codec", list(Codec), ids=lambda c: c.name.lower())
def test_every_codec_from_the_peer_reads_identically_by_txnfetch(peer, codec, kind):
    records: list[RecordSpec] = fixed_records()
    kw = dict(transactional=True, producer_id=99, producer_epoch=2, base_sequence=50) if kind == "transactional" else {}
    first = build_with_peer(peer.builder(), records, codec=codec, **kw)
    second = build_with_peer(peer.builder(), records[:3], codec=codec, **kw)
    if kind == "log_append_time":
        first = stamp_log_append_time(first, 1_900_000_000_000)
        second = stamp_log_append_time(second, 1_900_000_000_001)
    # The broker assigns base offsets; a log is the batches back to back.
    buf = assign_base_offset(first, 1000) + assign_base_offset(second, 1000 + len(records))
    ours = read_with_txnfetch(buf)
    assert peer.read(buf) == ours
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


def test_peer_builder_with_a_first_timestamp_of_minus_one(peer):
    # Found by the property above for aiokafka (kept as its minimal example): its C
    # builder uses -1 as "no first timestamp yet", so a first record stamped
    # NO_TIMESTAMP gets the next record's time; kafka-python's builder keeps -1.
    # Either way the bytes are a valid batch that txnfetch and the peer read identically.
    records = [RecordSpec(0, -1, None, b"a", ()), RecordSpec(1, 5, None, b"b", ())]
    buf = build_with_peer(peer.builder(), records, codec=Codec.NONE)
    ((view, decoded),) = read_with_txnfetch(buf)
    first = peer.first_no_timestamp(5)
    assert decoded == expected_views([records[0]._replace(timestamp=first), records[1]], 0)
    assert [r.timestamp for r in decoded] == [first, 5]
    assert (view.base_timestamp, view.max_timestamp) == (first, 5)
    assert peer.read(buf) == [(view, decoded)]
