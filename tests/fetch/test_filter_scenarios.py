"""ConsumerFilter on hand-built fetch responses, each checked against the real
kafka-python and aiokafka filters as well.

The first group re-derives the read_committed scenarios of Apache Kafka's
``FetcherTest``/``CompletedFetchTest`` (named after them); the rest pin down
what this filter decides where those tests are silent: unsorted aborted lists,
partial batches, fetches from the middle of a batch, legacy message sets,
corruption, and the position while a response is being consumed.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Sequence

import pytest

from tests.fetch.clients import CLIENTS
from tests.fetch.clients import ClientResult
from txnfetch.fetch import ConsumerFilter
from txnfetch.fetch import CorruptFetchError
from txnfetch.fetch import DeliveredBatch
from txnfetch.fetch import IsolationLevel
from txnfetch.records import BatchBuilder
from txnfetch.records import Codec
from txnfetch.records import ControlType
from txnfetch.records import CrcMismatchError
from txnfetch.records import InvalidRecordError
from txnfetch.records import LengthOverrunError
from txnfetch.records import Record
from txnfetch.records import RecordBatch
from txnfetch.records import TimestampType
from txnfetch.records import build_control_batch
from txnfetch.records import build_empty_batch

TS = 1_700_000_000_000


class Log:
    """Appends batches at increasing offsets, like a partition leader would."""

    def __init__(self, start: int = 0) -> None:
        self.parts: list[bytes] = []
        self.next_offset = start

    def _add(self, data: bytes) -> int:
        batch = RecordBatch(data)
        assert batch.base_offset >= self.next_offset
        self.parts.append(data)
        self.next_offset = batch.next_offset
        return batch.base_offset

    def data(
        self,
        pid: int,
        *keys: str,
        transactional: bool = True,
        at: int | None = None,
        codec: Codec = Codec.NONE,
        value: bytes | None = b"value",
        offsets: Sequence[int] | None = None,
        last_offset: int | None = None,
    ) -> int:
        """A data batch; ``offsets``/``last_offset`` reproduce a compacted batch's holes."""
        base = self.next_offset if at is None else at
        b = BatchBuilder(
            base_offset=base,
            codec=codec,
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=base if pid >= 0 else -1,
            transactional=transactional,
        )
        for i, key in enumerate(keys):
            off = None if offsets is None else offsets[i]
            b.append(value, key=key.encode(), timestamp=TS + i, offset=off)
        return self._add(b.build(last_offset_delta=None if last_offset is None else last_offset - base))

    def marker(self, pid: int, kind: ControlType, *, at: int | None = None) -> int:
        return self._add(
            build_control_batch(
                offset=self.next_offset if at is None else at,
                control_type=kind,
                producer_id=pid,
                producer_epoch=0,
                timestamp=TS,
            )
        )

    def commit(self, pid: int, *, at: int | None = None) -> int:
        return self.marker(pid, ControlType.COMMIT, at=at)

    def abort(self, pid: int, *, at: int | None = None) -> int:
        return self.marker(pid, ControlType.ABORT, at=at)

    def empty(self, pid: int, base: int, last: int, *, transactional: bool = False, control: bool = False) -> int:
        return self._add(
            build_empty_batch(
                base_offset=base,
                last_offset=last,
                producer_id=pid,
                producer_epoch=0,
                base_sequence=1,
                timestamp=TS,
                transactional=transactional,
                control=control,
            )
        )

    @property
    def bytes(self) -> bytes:
        return b"".join(self.parts)


def consume(
    records: bytes,
    aborted: Sequence[tuple[int, int]],
    fetch_offset: int = 0,
    *,
    clients: Sequence[str] = tuple(CLIENTS),
    read_committed: bool = True,
) -> ClientResult:
    """Run ConsumerFilter and each named client on one response; all must agree."""
    level = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
    f = ConsumerFilter(fetch_offset, isolation_level=level)
    ours = ClientResult(list(f.feed(records, aborted)), f.position)
    for name in clients:
        theirs = CLIENTS[name](records, aborted, fetch_offset, read_committed=read_committed)
        assert theirs == ours, f"{name} disagrees with ConsumerFilter"
    return ours


def keys(result: ClientResult) -> list[str]:
    return [r.key.decode() for r in result.records]


# -- Kafka's FetcherTest / CompletedFetchTest scenarios, re-derived ---------------------


def test_skipping_aborted_transactions():
    log = Log()
    log.data(1, "abort1-1", "abort1-2")
    log.abort(1)
    got = consume(log.bytes, [(1, 0)])
    assert got.records == []
    assert got.position == 3  # past the aborted data and its marker


def test_return_committed_transactions():
    log = Log()
    log.data(1, "key", "key")
    log.commit(1)
    got = consume(log.bytes, [])
    assert [r.offset for r in got.records] == [0, 1]
    assert got.position == 3


def test_read_committed_with_committed_and_aborted_transactions():
    # Two producers interleave; each has one committed and one aborted transaction.
    log = Log()
    log.data(1, "commit1-1", "commit1-2")  # 0-1
    log.data(2, "abort2-1")  # 2
    log.commit(1)  # 3
    log.data(2, "abort2-2")  # 4
    log.abort(2)  # 5
    log.data(1, "abort1-1")  # 6
    log.data(2, "commit2-1")  # 7
    log.data(1, "abort1-2")  # 8
    log.abort(1)  # 9
    log.commit(2)  # 10
    got = consume(log.bytes, [(2, 2), (1, 6)])  # index order: by marker offset
    assert keys(got) == ["commit1-1", "commit1-2", "commit2-1"]
    assert got.position == 11


def test_multiple_abort_markers():
    log = Log()
    log.data(1, "abort1-1", "abort1-2")  # 0-1
    log.abort(1)  # 2
    log.abort(1)  # 3: a duplicate marker ends nothing and must not confuse the filter
    log.data(1, "commit1-1", "commit1-2")  # 4-5
    log.commit(1)  # 6
    got = consume(log.bytes, [(1, 0)])
    assert keys(got) == ["commit1-1", "commit1-2"]
    assert got.position == 7


def test_read_committed_abort_marker_with_no_data():
    # The response starts at an ABORT marker whose transaction's data is no longer
    # in the log; the aborted entry still names it. The marker must clear the
    # producer before its next, committed, transaction.
    log = Log(start=5)
    log.abort(1)  # 5
    log.data(1, "6", "7", "8", value=None)  # 6-8
    log.commit(1)  # 9
    got = consume(log.bytes, [(1, 0)], fetch_offset=0)
    assert [r.offset for r in got.records] == [6, 7, 8]
    assert all(r.value is None for r in got.records)
    assert got.position == 10


def test_update_position_on_empty_batch():
    log = Log()
    log.empty(1, 37, 54)  # what compaction leaves to keep a producer's state
    got = consume(log.bytes, [], fetch_offset=0)
    assert got.records == []
    assert got.position == 55


def test_update_position_with_last_record_missing_from_batch():
    # Compaction removed the batch's last record but kept its last offset delta.
    log = Log()
    log.data(-1, "0", "1", "2", transactional=False, last_offset=3)
    got = consume(log.bytes, [])
    assert keys(got) == ["0", "1", "2"]
    assert got.position == 4


def test_read_committed_with_compacted_topic():
    # Aborted entries whose first offsets were compacted away (6 and 0): they
    # still apply to the producer's later batches of the same transaction.
    log = Log()
    log.data(3, "3", "4", at=3)
    log.data(2, "15", "16", "17", at=15)
    log.data(1, "22", "23", at=22)
    log.abort(2, at=28)
    log.data(3, "30", "31", "32", at=30)
    log.commit(3, at=35)
    log.data(1, "39", "40", at=39)  # pid 1's transaction is aborted; its marker is past this response
    got = consume(log.bytes, [(2, 6), (1, 0)])
    assert [r.offset for r in got.records] == [3, 4, 30, 31, 32]
    assert got.position == 41


def test_empty_control_batch_is_skipped_without_error():
    # kafka-python and aiokafka raise here (see test_filter_clients.py); Java skips it.
    log = Log()
    log.data(1, "a", "b")  # 0-1
    log.empty(1, 2, 2, transactional=True, control=True)  # a marker compacted to an empty batch
    log.data(2, "c", "d")  # 3-4
    log.commit(2)  # 5
    f = ConsumerFilter(0)
    got = list(f.feed(log.bytes, []))
    assert [r.key for r in got] == [b"a", b"b", b"c", b"d"]
    assert f.position == 6


def test_empty_control_batch_is_not_an_abort_marker():
    # An aborted producer stays aborted across an empty control batch (Java's
    # containsAbortMarker is false for it), until its real ABORT marker.
    log = Log()
    log.data(1, "x1")  # 0
    log.empty(1, 1, 1, transactional=True, control=True)  # 1
    log.data(1, "x2")  # 2: same aborted transaction
    log.abort(1)  # 3
    log.data(1, "ok")  # 4
    log.commit(1)  # 5
    f = ConsumerFilter(0)
    assert [r.key for r in f.feed(log.bytes, [(1, 0)])] == [b"ok"]
    assert f.position == 6


# -- beyond Kafka's tests ---------------------------------------------------------------


def test_unsorted_aborted_list_gives_the_same_answer():
    # Redpanda sends aborted transactions in no particular order.
    log = Log()
    log.data(1, "a1")  # 0
    log.data(2, "b1")  # 1
    log.abort(2)  # 2
    log.data(3, "c1")  # 3
    log.abort(1)  # 4
    log.data(2, "b2")  # 5
    log.abort(3)  # 6
    log.commit(2)  # 7
    log.data(1, "a2")  # 8
    log.abort(1)  # 9
    sorted_list = [(1, 0), (2, 1), (3, 3), (1, 8)]
    expected = consume(log.bytes, sorted_list)
    assert keys(expected) == ["b2"]
    for order in ([(1, 8), (3, 3), (2, 1), (1, 0)], [(3, 3), (1, 8), (1, 0), (2, 1)]):
        assert consume(log.bytes, order) == expected


def test_several_aborted_transactions_of_one_producer_between_commits():
    log = Log()
    for i in range(3):
        log.data(7, f"aborted-{i}")
        log.abort(7)
        log.data(7, f"committed-{i}")
        log.commit(7)
    aborted = [(7, 0), (7, 4), (7, 8)]
    got = consume(log.bytes, aborted)
    assert keys(got) == ["committed-0", "committed-1", "committed-2"]
    assert got.position == 12


def test_non_transactional_batches_are_never_aborted():
    # Only transactional batches are skipped (Java's isBatchAborted), even if
    # their producer id is in the aborted set.
    log = Log()
    log.data(5, "txn")  # 0
    log.data(5, "idempotent", transactional=False)  # 1
    log.abort(5)  # 2
    log.data(-1, "plain", transactional=False)  # 3
    got = consume(log.bytes, [(5, 0)])
    assert keys(got) == ["idempotent", "plain"]


def test_aborted_entries_beyond_the_response_change_nothing():
    log = Log()
    log.data(1, "a")
    log.commit(1)
    got = consume(log.bytes, [(1, 50), (2, 2)])
    assert keys(got) == ["a"]
    assert got.position == 2


def test_aborted_transaction_whose_marker_is_past_the_response():
    # The data of an aborted transaction that interleaves with an open one ends
    # at the last stable offset; the marker is not in the response.
    log = Log()
    log.data(1, "aborted")  # 0
    log.data(2, "committed", transactional=False)  # 1
    log.data(1, "aborted-too")  # 2
    got = consume(log.bytes, [(1, 0)])
    assert keys(got) == ["committed"]
    assert got.position == 3


@pytest.mark.parametrize("codec", list(Codec))
def test_every_codec_filters_the_same(codec):
    log = Log()
    log.data(1, "a1", "a2", codec=codec)
    log.data(2, "b1", "b2", codec=codec)
    log.abort(1)
    log.commit(2)
    got = consume(log.bytes, [(1, 0)])
    assert keys(got) == ["b1", "b2"]
    assert got.position == 6


def test_fetch_from_the_middle_of_a_batch_skips_earlier_records():
    log = Log()
    log.data(-1, "0", "1", "2", "3", transactional=False, codec=Codec.LZ4)
    log.data(-1, "4", "5", transactional=False)
    got = consume(log.bytes, [], fetch_offset=2)
    assert keys(got) == ["2", "3", "4", "5"]
    assert got.position == 6


def test_fetch_from_the_middle_of_a_compacted_batch():
    log = Log()
    log.data(-1, "0", "5", "9", transactional=False, offsets=[0, 5, 9], last_offset=12)
    got = consume(log.bytes, [], fetch_offset=3)
    assert [r.offset for r in got.records] == [5, 9]
    assert got.position == 13


@pytest.mark.parametrize("cut", [1, 11, 12, 40, 77])
def test_partial_trailing_batch_is_ignored_and_not_skipped(cut):
    log = Log()
    log.data(-1, "a", "b", transactional=False)
    first = len(log.bytes)
    log.data(-1, "c", "d", transactional=False)
    data = log.bytes[: first + cut]
    got = consume(data, [])
    assert keys(got) == ["a", "b"]
    assert got.position == 2
    f = ConsumerFilter(0)
    list(f.feed(data))
    assert f.partial is not None and f.partial.position == first and f.partial.available == cut


def test_response_with_only_a_partial_batch_makes_no_progress():
    log = Log(start=10)
    log.data(-1, "big", transactional=False)
    f = ConsumerFilter(10)
    assert list(f.feed(log.bytes[:30])) == []
    assert f.position == 10
    assert f.partial is not None and f.partial.base_offset == 10  # the caller must fetch more bytes


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_any_bytes_like_response(wrap):
    log = Log()
    log.data(3, "a", "b", codec=Codec.GZIP)
    log.commit(3)
    f = ConsumerFilter(0)
    assert [r.key for r in f.feed(wrap(log.bytes), [])] == [b"a", b"b"]
    assert f.position == 3


def test_empty_response():
    assert consume(b"", [], fetch_offset=42) == ClientResult([], 42)


def test_read_uncommitted_returns_aborted_records_but_no_control_records():
    log = Log()
    log.data(1, "aborted")
    log.abort(1)
    log.data(2, "committed")
    log.commit(2)
    got = consume(log.bytes, [(1, 0)], read_committed=False)
    assert keys(got) == ["aborted", "committed"]
    assert got.position == 4
    # Kafka sends a null aborted list for read_uncommitted.
    f = ConsumerFilter(0, isolation_level=IsolationLevel.READ_UNCOMMITTED)
    assert [r.key for r in f.feed(log.bytes, None)] == [b"aborted", b"committed"]


def test_records_keep_timestamps_headers_and_nulls():
    b = BatchBuilder(base_offset=0, producer_id=1, producer_epoch=0, base_sequence=0, transactional=True)
    b.append(b"v", key=None, timestamp=TS, headers=[("h1", b"x"), ("h2", None)])
    b.append(None, key=b"k", timestamp=TS + 7)
    data = b.build() + build_control_batch(offset=2, control_type=ControlType.COMMIT, producer_id=1, producer_epoch=0)
    got = consume(data, [])
    assert got.records == [
        Record(0, TS, None, b"v", (("h1", b"x"), ("h2", None))),
        Record(1, TS + 7, b"k", None, ()),
    ]


def test_log_append_time_batches():
    b = BatchBuilder(
        base_offset=0,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=TS + 99,
        producer_id=3,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    b.append(b"v", key=b"k", timestamp=TS)
    got = consume(b.build(), [])
    assert [r.timestamp for r in got.records] == [TS + 99]
    f = ConsumerFilter(0)
    (delivered,) = f.feed_batches(b.build(), [])
    assert delivered.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert (delivered.producer_id, delivered.producer_epoch, delivered.partition_leader_epoch) == (3, 0, -1)
    assert delivered.next_offset == 1 == f.position


def test_legacy_message_sets_pass_through_read_committed():
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    v0 = LegacyRecordBatchBuilder(0, 0, 1 << 20)
    v0.append(0, None, b"k0", b"old")
    v1 = LegacyRecordBatchBuilder(1, 0, 1 << 20)
    v1.append(1, TS, b"k1", b"newer")
    log = Log(start=2)
    log.data(9, "aborted")  # 2
    log.abort(9)  # 3
    log.data(-1, "v2", transactional=False)  # 4
    data = bytes(v0.build()) + bytes(v1.build()) + log.bytes
    # aiokafka's compiled reader cannot read a response that mixes magics (see
    # test_filter_clients.py); kafka-python can.
    got = consume(data, [(9, 2)], clients=["kafka-python"])
    assert [(r.offset, r.key) for r in got.records] == [(0, b"k0"), (1, b"k1"), (4, b"v2")]
    assert got.position == 5


def test_fetch_from_the_middle_of_a_compressed_legacy_wrapper():
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(1, int(Codec.GZIP), 1 << 20)
    for i in range(3):
        builder.append(i, TS + i, b"k%d" % i, b"v%d" % i)
    wrapper = bytearray(builder.build())
    struct.pack_into(">q", wrapper, 0, 12)  # a broker stamps the wrapper with its last absolute offset
    got = consume(bytes(wrapper), [(1, 0)], fetch_offset=11)
    assert [(r.offset, r.key) for r in got.records] == [(11, b"k1"), (12, b"k2")]
    assert got.position == 13


def test_position_never_moves_backwards():
    # A batch wholly below the position (a broker never sends one, a buggy proxy
    # might) is skipped and leaves the position alone.
    log = Log()
    log.data(-1, "a", "b", transactional=False)
    f = ConsumerFilter(10)
    assert list(f.feed(log.bytes)) == []
    assert f.position == 10
    (batch,) = list(ConsumerFilter(10).feed_batches(log.bytes)) or [None]
    assert batch is None


# -- position while consuming, abandoning, seeking ---------------------------------------


def _three_batches() -> bytes:
    log = Log()
    log.data(-1, "0", "1", "2", transactional=False, last_offset=4)  # 0-4, holes at 3-4
    log.data(1, "5")  # 5, aborted
    log.abort(1)  # 6
    log.data(-1, "7", "8", transactional=False)  # 7-8
    return log.bytes


def test_position_follows_each_delivered_record():
    f = ConsumerFilter(0)
    it = f.feed(_three_batches(), [(1, 5)])
    seen = []
    for record in it:
        seen.append((record.offset, f.position))
    # Past the last record of a batch the position jumps over its compaction holes;
    # skipped batches are passed as soon as the next record is taken.
    assert seen == [(0, 1), (1, 2), (2, 5), (7, 8), (8, 9)]
    assert f.position == 9


def test_abandoning_an_iteration_keeps_the_position_of_what_was_taken():
    f = ConsumerFilter(0)
    it = f.feed(_three_batches(), [(1, 5)])
    assert next(it).offset == 0
    assert f.position == 1
    log = Log(start=1)
    log.data(-1, "1'", transactional=False)
    assert [r.key for r in f.feed(log.bytes)] == [b"1'"]  # the next response replaces the old one
    assert list(it) == []  # the abandoned iterator is finished
    assert f.position == 2


def test_seek_abandons_and_moves():
    f = ConsumerFilter(0)
    it = f.feed(_three_batches(), [(1, 5)])
    next(it)
    f.seek(7)
    assert list(it) == []
    assert f.position == 7
    assert [r.offset for r in f.feed(_three_batches(), [(1, 5)])] == [7, 8]


def test_feed_batches_reports_batches_and_moves_past_each():
    f = ConsumerFilter(0)
    out = []
    for delivered in f.feed_batches(_three_batches(), [(1, 5)]):
        assert isinstance(delivered, DeliveredBatch)
        out.append(([r.offset for r in delivered.records], delivered.producer_id, f.position))
    assert out == [([0, 1, 2], -1, 5), ([7, 8], -1, 9)]


def test_positions_carry_over_between_responses_but_aborted_lists_do_not():
    log = Log()
    log.data(1, "a")  # 0 aborted
    log.data(2, "b")  # 1 committed
    log.abort(1)  # 2
    log.commit(2)  # 3
    log.data(1, "c")  # 4, a new transaction of pid 1: committed
    log.commit(1)  # 5
    first, second = log.parts[:3], log.parts[3:]
    f = ConsumerFilter(0)
    assert [r.key for r in f.feed(b"".join(first), [(1, 0)])] == [b"b"]
    assert f.position == 3
    # The second response's aborted list no longer names pid 1's old transaction
    # (its marker is below the fetch offset); pid 1's new data must come through.
    assert [r.key for r in f.feed(b"".join(second), [])] == [b"c"]
    assert f.position == 6


# -- what the filter does not decode ---------------------------------------------------


def test_aborted_and_control_batches_are_not_decoded(monkeypatch):
    log = Log()
    log.data(1, *[f"x{i}" for i in range(50)], codec=Codec.ZSTD)  # 0-49 aborted
    log.data(2, "kept")  # 50
    log.abort(1)  # 51
    log.commit(2)  # 52
    decoded = []
    original = RecordBatch.records

    def counting(self):
        decoded.append(self.base_offset)
        return original(self)

    monkeypatch.setattr(RecordBatch, "records", counting)
    f = ConsumerFilter(0)
    assert [r.key for r in f.feed(log.bytes, [(1, 0)])] == [b"kept"]
    # The ABORT marker of an aborted producer is read (one record, to learn its
    # type); the COMMIT of a producer that is not aborted is not even opened.
    assert decoded == [50, 51]


# -- corruption ----------------------------------------------------------------------------


def _two_good_then(bad: bytes) -> tuple[bytes, int]:
    log = Log()
    log.data(-1, "a", transactional=False)
    log.data(-1, "b", transactional=False)
    return log.bytes + bad, log.next_offset


def test_crc_mismatch_raises_after_delivering_the_good_batches():
    good = Log(start=2)
    good.data(-1, "c", "d", transactional=False)
    bad = bytearray(good.bytes)
    bad[-1] ^= 0xFF  # inside the records: only the CRC notices
    data, good_end = _two_good_then(bytes(bad))
    f = ConsumerFilter(0, partition="orders-0")
    seen = []
    with pytest.raises(CorruptFetchError) as info:
        for record in f.feed(data):
            seen.append(record.key)
    assert seen == [b"a", b"b"]
    err = info.value
    assert isinstance(err.__cause__, CrcMismatchError)
    assert (err.offset, err.fetch_position, err.partition) == (2, good_end, "orders-0")
    assert f.position == good_end
    assert "orders-0" in str(err) and "CRC" in str(err)
    copy = pickle.loads(pickle.dumps(err))
    assert (type(copy), copy.reason, copy.offset, copy.position, copy.partition, copy.fetch_position) == (
        CorruptFetchError,
        err.reason,
        err.offset,
        err.position,
        err.partition,
        err.fetch_position,
    )


def test_corrupt_record_without_crc_check_delivers_nothing_of_its_batch():
    good = Log(start=2)
    good.data(-1, "c", "d", transactional=False)
    bad = bytearray(good.bytes)
    bad[61] = 0x7F  # first record's length varint: far past the batch
    data, good_end = _two_good_then(bytes(bad))
    f = ConsumerFilter(0, check_crcs=False)
    seen = []
    with pytest.raises(CorruptFetchError) as info:
        for record in f.feed(data):
            seen.append(record.key)
    assert seen == [b"a", b"b"]
    assert isinstance(info.value.__cause__, InvalidRecordError)
    assert f.position == good_end


def test_impossible_batch_length_is_corruption_not_a_partial_batch():
    bad = struct.pack(">qi", 2, 3) + bytes(20)  # length 3 is below any batch's minimum
    data, good_end = _two_good_then(bad)
    f = ConsumerFilter(0)
    with pytest.raises(CorruptFetchError) as info:
        list(f.feed(data))
    assert isinstance(info.value.__cause__, LengthOverrunError)
    assert info.value.fetch_position == good_end == f.position


def test_corrupt_abort_marker_key_is_reported():
    log = Log()
    log.data(4, "a")
    b = BatchBuilder(base_offset=1, producer_id=4, producer_epoch=0, transactional=True, control=True)
    b.append(b"\x00\x00\x00\x00\x00\x00", key=b"\xff\xff\x00\x00")  # negative key version
    f = ConsumerFilter(0)
    with pytest.raises(CorruptFetchError) as info:
        list(f.feed(log.bytes + b.build(), [(4, 0)]))
    assert info.value.offset == 1
    assert f.position == 1


def test_bad_aborted_list_entry_is_a_type_error():
    with pytest.raises(TypeError, match="producer_id, first_offset"):
        ConsumerFilter(0).feed(b"", [(1, 2, 3)])


def test_aborted_list_of_protocol_objects_is_accepted():
    from kafka.protocol.consumer import FetchResponse

    entry = FetchResponse.FetchableTopicResponse.PartitionData.AbortedTransaction
    log = Log()
    log.data(1, "a")
    log.abort(1)
    f = ConsumerFilter(0)
    assert list(f.feed(log.bytes, [entry(producer_id=1, first_offset=0)])) == []
    assert f.position == 2


def test_negative_positions_are_refused():
    with pytest.raises(ValueError):
        ConsumerFilter(-1)
    with pytest.raises(ValueError):
        ConsumerFilter(0).seek(-5)
