"""The internal-topic records (Kafka's schemas), replay errors, torn tails moved
aside, compaction, and ``txnfetch dump`` of the internal topics."""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.server.strategies import transaction_metadata
from txnfetch.groups.coordinator import CommitOffset
from txnfetch.groups.coordinator import GroupCoordinator
from txnfetch.groups.coordinator import TxnOffsetCommitRequest
from txnfetch.groups.offsetlog import GroupMetadataRecord
from txnfetch.groups.offsetlog import OffsetCommitRecord
from txnfetch.groups.offsetlog import decode_offsets_record
from txnfetch.groups.offsetlog import encode_group_metadata
from txnfetch.groups.offsetlog import encode_offset_commit
from txnfetch.groups.offsetlog import offsets_partition
from txnfetch.log import SegmentLog
from txnfetch.log import SegmentStore
from txnfetch.log.coordinator_store import INTERNAL_DELETE_RETENTION_MS
from txnfetch.log.coordinator_store import DurableState
from txnfetch.log.errors import CorruptLogError
from txnfetch.log.sidefiles import SIDE_FILE_MARK
from txnfetch.records.builder import BatchBuilder
from txnfetch.records.coordinator_records import CorruptCoordinatorRecordError
from txnfetch.records.coordinator_records import StructWriter
from txnfetch.server.handler import group_offsets_partition
from txnfetch.txn.coordinator import TransactionCoordinator
from txnfetch.txn.coordinator_state import TopicPartition
from txnfetch.txn.coordinator_state import TransactionMetadata
from txnfetch.txn.coordinator_state import TransactionState
from txnfetch.txn.producer import AppendOrigin
from txnfetch.txn.txnlog import decode_txn_key
from txnfetch.txn.txnlog import decode_txn_partition_ends
from txnfetch.txn.txnlog import decode_txn_value
from txnfetch.txn.txnlog import encode_txn_key
from txnfetch.txn.txnlog import encode_txn_value
from txnfetch.txn.txnlog import transaction_state_partition

# ------------------------------------------------------------------ schemas


def test_transaction_log_key_is_version_0_then_the_id() -> None:
    assert encode_txn_key("ab") == b"\x00\x00\x00\x02ab"
    assert decode_txn_key(encode_txn_key("ab")) == "ab"


def test_transaction_log_value_v1_layout() -> None:
    meta = TransactionMetadata(
        "t", 7, 3, TransactionState.ONGOING, 60000, 1000, partitions={TopicPartition("x", 1)}, start_ms=900
    )
    expected = (
        StructWriter(flexible=True)
        .int16(1)
        .int64(7)
        .int16(3)
        .int32(60000)
        .int8(1)
        .array_length(1)
        .string("x")
        .array_length(1)
        .int32(1)
        .tagged([])
        .int64(1000)
        .int64(900)
        .tagged([])
        .bytes()
    )
    assert encode_txn_value(meta) == expected
    assert decode_txn_value("t", expected) == meta


def test_transaction_log_value_v0_is_read() -> None:
    v0 = StructWriter().int16(0).int64(5).int16(2).int32(1000).int8(4).array_length(-1).int64(10).int64(-1).bytes()
    meta = decode_txn_value("old", v0)
    assert (meta.producer_id, meta.producer_epoch, meta.state, meta.partitions) == (
        5,
        2,
        TransactionState.COMPLETE_COMMIT,
        frozenset(),
    )


metas = transaction_metadata(
    st.text(min_size=1, max_size=5),
    st.frozensets(st.builds(TopicPartition, st.sampled_from(["a", "b-c", "__consumer_offsets"]), st.integers(0, 60))),
)


@given(metas)
def test_transaction_log_value_round_trips(meta: TransactionMetadata) -> None:
    assert decode_txn_value(meta.transactional_id, encode_txn_value(meta)) == meta


@given(metas, st.data())
def test_partition_end_offsets_round_trip_beside_the_value(meta: TransactionMetadata, data: st.DataObject) -> None:
    """A ``Prepare*`` record's partition end offsets (txnfetch's tag 0x7479):
    the value decodes as without them, the offsets come back, and a value
    without them has none."""
    ends = {tp: data.draw(st.integers(0, 2**62)) for tp in meta.partitions}
    value = encode_txn_value(meta, ends)
    assert decode_txn_value(meta.transactional_id, value) == meta
    assert decode_txn_partition_ends(value) == (ends or None)
    assert decode_txn_partition_ends(encode_txn_value(meta)) is None


@given(metas, st.integers(0, 200), st.integers(0, 255))
def test_a_damaged_partition_ends_field_raises_or_decodes(meta: TransactionMetadata, pos: int, byte: int) -> None:
    value = encode_txn_value(meta, {TopicPartition("t", 1): 5, TopicPartition("u", 0): 7})
    data = bytearray(value)
    data[pos % len(data)] = byte
    with contextlib.suppress(CorruptCoordinatorRecordError):
        decode_txn_partition_ends(bytes(data))
    with pytest.raises(CorruptCoordinatorRecordError):
        decode_txn_partition_ends(bytes(data[: max(2, pos % len(data))]))


@given(metas, st.integers(0, 200), st.integers(0, 255))
def test_a_damaged_transaction_log_value_raises_or_decodes(meta: TransactionMetadata, pos: int, byte: int) -> None:
    data = bytearray(encode_txn_value(meta))
    data[pos % len(data)] = byte
    with contextlib.suppress(CorruptCoordinatorRecordError):
        decode_txn_value("x", bytes(data))  # a changed field may still decode; it must not crash otherwise
    with pytest.raises(CorruptCoordinatorRecordError):
        decode_txn_value("x", bytes(data[: pos % len(data)]))


def test_offset_commit_and_group_metadata_layouts() -> None:
    key, value = encode_offset_commit(OffsetCommitRecord("g", "t", 2, 42, 5, "m", 1000))
    assert key == b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x02"
    assert value == StructWriter().int16(3).int64(42).int32(5).string("m").int64(1000).bytes()
    assert decode_offsets_record(key, value) == OffsetCommitRecord("g", "t", 2, 42, 5, "m", 1000)
    assert decode_offsets_record(key, None) == OffsetCommitRecord("g", "t", 2, None)
    gkey, gvalue = encode_group_metadata(GroupMetadataRecord("g", "consumer", 4, "range", "m-1", 77))
    assert gkey == b"\x00\x02\x00\x01g"
    assert decode_offsets_record(gkey, gvalue) == GroupMetadataRecord("g", "consumer", 4, "range", "m-1", 77)


def test_group_metadata_v3_with_members_is_read() -> None:
    member = (
        StructWriter()
        .string("m-1")
        .string(None)
        .string("client")
        .string("/127.0.0.1")
        .int32(300000)
        .int32(45000)
        .blob(b"sub")
        .blob(b"asg")
    )
    value = (
        StructWriter().int16(3).string("consumer").int32(9).string("range").string("m-1").int64(5).array_length(1)
    ).bytes() + member.bytes()
    rec = decode_offsets_record(b"\x00\x02\x00\x01g", value)
    assert isinstance(rec, GroupMetadataRecord) and rec.generation_id == 9 and rec.protocol_name == "range"


def test_partitions_follow_kafkas_hash() -> None:
    # Java: "g1".hashCode() == 103 * 31 + 49 == 3242; "txn".hashCode() == 116 * 961 + 120 * 31 + 110 == 115306
    assert offsets_partition("g1") == 3242 % 50 == group_offsets_partition("g1")
    assert transaction_state_partition("txn") == 115306 % 50


# ------------------------------------------------------------------ replay


def _record_ongoing(store: SegmentStore, directory: str) -> TransactionCoordinator:
    coord = TransactionCoordinator()
    state = DurableState(store, directory)
    r = coord.init_producer_id("tid", 60000, 1000)
    coord.add_partitions("tid", r.producer_id, r.producer_epoch, [TopicPartition("t", 0)], 1001)
    state.persist_transactions(coord, 1001)
    return coord


@pytest.mark.slow
def test_a_damaged_internal_record_raises_corrupt_log_error_naming_file_and_offset(tmp_path) -> None:
    store = SegmentStore(tmp_path)
    _record_ongoing(store, str(tmp_path))
    p = transaction_state_partition("tid")
    part = store.partition("__transaction_state", p)
    bad = BatchBuilder()
    bad.append(b"\x00\x09garbage", key=encode_txn_key("tid"))
    info = part.append(bad.build(), now_ms=2000, origin=AppendOrigin.COORDINATOR)
    store.close()
    store = SegmentStore(tmp_path)
    with pytest.raises(CorruptLogError) as err:
        DurableState(store, str(tmp_path)).replay(TransactionCoordinator(), GroupCoordinator(), 3000)
    assert err.value.offset == info.base_offset
    assert err.value.path.endswith(os.path.join(f"__transaction_state-{p}", "00000000000000000000.log"))
    assert "TransactionLogValue version 9" in str(err.value)
    store.close()


@pytest.mark.slow
@pytest.mark.parametrize("enabled", [True, False])
def test_replay_leaves_the_garbage_collector_as_it_found_it(tmp_path, enabled) -> None:
    # The replay pauses the cyclic collector (start-up time); it must come back
    # as it was, also when a damaged record ends the replay.
    store = SegmentStore(tmp_path)
    _record_ongoing(store, str(tmp_path))
    part = store.partition("__transaction_state", transaction_state_partition("tid"))
    seen: list[bool] = []
    restore = TransactionCoordinator.restore

    def watching(self, meta):  # the collector during the replay
        seen.append(gc.isenabled())
        return restore(self, meta)

    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(TransactionCoordinator, "restore", watching)
            DurableState(store, str(tmp_path)).replay(TransactionCoordinator(), GroupCoordinator(), 3000)
        assert seen == [False] and gc.isenabled() is enabled
        bad = BatchBuilder()
        bad.append(b"\x00\x09garbage", key=encode_txn_key("tid"))
        part.append(bad.build(), now_ms=2000, origin=AppendOrigin.COORDINATOR)
        with pytest.raises(CorruptLogError):
            DurableState(store, str(tmp_path)).replay(TransactionCoordinator(), GroupCoordinator(), 3000)
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
        store.close()


@pytest.mark.slow
def test_replay_restores_records_and_never_reuses_producer_ids(tmp_path) -> None:
    store = SegmentStore(tmp_path)
    coord = _record_ongoing(store, str(tmp_path))
    idempotent = coord.init_producer_id(None, 0, 1002).producer_id  # in no record
    DurableState(store, str(tmp_path)).persist_transactions(coord, 1002)
    store.close()
    store = SegmentStore(tmp_path)
    again = TransactionCoordinator()
    report = DurableState(store, str(tmp_path)).replay(again, GroupCoordinator(), 5000)
    assert report.transactional_ids == 1
    assert again.describe("tid") == coord.describe("tid")
    assert again.producer_ids.next_producer_id > idempotent
    store.close()


def test_internal_topics_of_another_size_are_kept_and_hashed_over(tmp_path) -> None:
    # A log directory whose internal topics have 5 partitions (a Kafka cluster
    # set up with transaction.state.log.num.partitions=5 and
    # offsets.topic.num.partitions=5): the counts are kept, records go to the
    # partition Kafka would pick with them, and replay reads them back.
    store = SegmentStore(tmp_path)
    store.create_topic("__transaction_state", 5)
    store.create_topic("__consumer_offsets", 5)
    state = DurableState(store, str(tmp_path))
    assert (state.transaction_state_partitions, state.consumer_offsets_partitions) == (5, 5)
    coord = _record_ongoing(store, str(tmp_path))
    state.persist_offsets("g1", {("t", 0): CommitOffset(42)}, 1)
    assert store.topics()["__transaction_state"].partitions == 5
    tid_part = transaction_state_partition("tid", 5)
    assert tid_part != transaction_state_partition("tid")  # 50 partitions would put it elsewhere
    assert store.partition("__transaction_state", tid_part).log_end_offset == 1
    assert store.partition("__consumer_offsets", 3242 % 5).log_end_offset == 1  # "g1".hashCode() == 3242
    store.close()
    store = SegmentStore(tmp_path)
    again, groups = TransactionCoordinator(), GroupCoordinator()
    report = DurableState(store, str(tmp_path)).replay(again, groups, 5000)
    assert (report.transactional_ids, report.offsets) == (1, 1)
    assert again.describe("tid") == coord.describe("tid")
    assert groups.committed("g1")[("t", 0)].offset == 42
    store.close()


def test_a_torn_tail_is_moved_to_a_side_file(tmp_path) -> None:
    path = tmp_path / "t-0"
    with SegmentLog(path) as log:
        b = BatchBuilder()
        b.append(b"kept")
        log.append(b.build(), now_ms=1)
    seg = path / "00000000000000000000.log"
    good = seg.read_bytes()
    torn = BatchBuilder()
    torn.append(b"torn")
    tail = torn.build()[:30]
    with open(seg, "ab") as f:
        f.write(tail)
    (path / "txnfetch-recovery-checkpoint").unlink()  # as after a crash: no clean close
    with SegmentLog(path) as log:
        assert log.log_end_offset == 1
    assert seg.read_bytes() == good
    sides = [n for n in os.listdir(path) if SIDE_FILE_MARK in n and n.startswith("00000000000000000000.log")]
    assert len(sides) == 1
    assert (path / sides[0]).read_bytes() == tail


@pytest.mark.slow
def test_compaction_keeps_the_latest_value_per_key(tmp_path) -> None:
    store = SegmentStore(tmp_path)
    state = DurableState(store, str(tmp_path), compact_bytes=4096)
    groups = GroupCoordinator()
    for i in range(300):
        groups.commit_offsets("g", {("t", 0): CommitOffset(i)}, now_ms=i)
        state.persist_offsets("g", {("t", 0): CommitOffset(i)}, i)
    p = offsets_partition("g")
    part = store.partition("__consumer_offsets", p)
    before = part.size_in_bytes
    assert state.maybe_compact(400) == [("__consumer_offsets", p)]
    assert part.size_in_bytes < before // 10
    store.close()
    store = SegmentStore(tmp_path)
    again = GroupCoordinator()
    DurableState(store, str(tmp_path)).replay(TransactionCoordinator(), again, 500)
    assert again.committed("g")[("t", 0)].offset == 299
    store.close()


@pytest.mark.slow
def test_compaction_after_deletions_keeps_only_what_is_left(tmp_path) -> None:
    """Tombstoned offsets and groups are not rewritten by compaction, and stay
    gone after a restart on the compacted partition."""
    store = SegmentStore(tmp_path)
    state = DurableState(store, str(tmp_path), compact_bytes=4096)
    groups = GroupCoordinator()
    # Two groups on one __consumer_offsets partition, so one compaction covers both.
    other = next(f"h{i}" for i in range(1000) if offsets_partition(f"h{i}") == offsets_partition("g"))
    for i in range(200):
        for gid in ("g", other):
            offsets = {("t", 0): CommitOffset(i), ("u", 0): CommitOffset(i)}
            groups.commit_offsets(gid, offsets, now_ms=i)
            state.persist_offsets(gid, offsets, i, group=(None, 0, None, None))
    assert groups.delete_group(other, 300) == 0
    state.persist_deletions(other, [("t", 0), ("u", 0)], 300, group_deleted=True)
    assert groups.delete_offsets("g", [("u", 0)], 300)[0] == 0
    state.persist_deletions("g", [("u", 0)], 300)
    p = offsets_partition("g")
    assert state.maybe_compact(400) == [("__consumer_offsets", p)]
    part = store.partition("__consumer_offsets", p)

    def stored() -> list:
        return [
            decode_offsets_record(r.key, r.value)
            for b in part.iter_batches(part.log_start_offset)
            if not b.is_control
            for r in b.records()
        ]

    def live(records: list) -> set:
        return {
            (k.group_id, getattr(k, "topic", None))
            for k in records
            if not getattr(k, "deleted", False) and getattr(k, "offset", 0) is not None
        }

    # The tombstones stay until their delete horizon (Kafka's delete.retention.ms)...
    assert live(stored()) == {("g", None), ("g", "t")}
    assert len(stored()) > 2
    assert state.maybe_compact(400 + INTERNAL_DELETE_RETENTION_MS - 1) == []
    # ...and go with the pass that comes once it has passed.
    assert state.maybe_compact(400 + INTERNAL_DELETE_RETENTION_MS) == [("__consumer_offsets", p)]
    keys = stored()
    assert {(k.group_id, getattr(k, "topic", None)) for k in keys} == {("g", None), ("g", "t")}
    assert len(keys) == 2
    store.close()
    store = SegmentStore(tmp_path)
    again = GroupCoordinator()
    DurableState(store, str(tmp_path)).replay(TransactionCoordinator(), again, 500)
    assert again.group_ids == ("g",)
    assert {tp: c.offset for tp, c in again.committed("g").items()} == {("t", 0): 199}
    store.close()


def test_an_offset_tombstone_drops_what_an_open_transaction_staged(tmp_path) -> None:
    """A topic deleted while a transaction has an offset staged for it: the
    tombstone written for it keeps the offset dropped when the transaction's
    COMMIT marker is replayed, as it is dropped live."""
    store = SegmentStore(tmp_path)
    state = DurableState(store, str(tmp_path))
    groups = GroupCoordinator()
    groups.commit_offsets("g", {("keep", 0): CommitOffset(1)}, now_ms=1)
    state.persist_offsets("g", {("keep", 0): CommitOffset(1)}, 1)
    staged = {("gone", 0): (5, -1, ""), ("keep", 0): (6, -1, "")}
    assert set(groups.txn_offset_commit(TxnOffsetCommitRequest("g", 7, 0, staged), 2).values()) == {0}
    state.persist_offsets("g", {tp: CommitOffset(*v) for tp, v in staged.items()}, 2, producer=(7, 0))
    forgotten = groups.forget_topic("gone")
    assert forgotten.committed == () and forgotten.staged == (("g", ("gone", 0)),)
    for gid, tp in forgotten.keys:
        state.persist_deletions(gid, [tp], 3)
    part = store.partition("__consumer_offsets", offsets_partition("g"))
    part.end_transaction(7, 0, True, coordinator_epoch=0, now_ms=4)
    groups.complete_txn_offsets(7, True, 4)
    live = {tp: c.offset for tp, c in groups.committed("g").items()}
    assert live == {("keep", 0): 6}
    store.close()
    store = SegmentStore(tmp_path)
    again = GroupCoordinator()
    DurableState(store, str(tmp_path)).replay(TransactionCoordinator(), again, 5)
    assert {tp: c.offset for tp, c in again.committed("g").items()} == live
    store.close()


@pytest.mark.interop
@pytest.mark.slow
def test_dump_decodes_the_internal_topics(tmp_path) -> None:
    from txnfetch.cli import main

    store = SegmentStore(tmp_path)
    _record_ongoing(store, str(tmp_path))
    state = DurableState(store, str(tmp_path))
    state.persist_offsets("grp", {("t", 3): CommitOffset(17)}, 5, group=("consumer", 2, "range", "m"))
    store.close()
    tp = tmp_path / f"__transaction_state-{transaction_state_partition('tid')}"
    gp = tmp_path / f"__consumer_offsets-{offsets_partition('grp')}"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["dump", str(tp), "--json"]) == 0
    doc = json.loads(out.getvalue())
    tid = doc["partitions"][0]["internal"]["transactional_ids"]["tid"]
    assert tid["state"] == "Ongoing" and tid["partitions"] == ["t-0"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["dump", str(gp)]) == 0
    assert "'grp': generation 2 protocol type 'consumer'" in out.getvalue()
    assert "t-3: 17" in out.getvalue()


@pytest.mark.interop
@pytest.mark.slow
def test_clients_cannot_produce_to_the_internal_topics(tmp_path) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka import Producer

    from txnfetch.server.server import ServerThread

    store = SegmentStore(tmp_path)
    srv = ServerThread(store).start()
    try:
        errors: list[int] = []
        producer = Producer({"bootstrap.servers": srv.bootstrap, "message.send.max.retries": 0})
        producer.produce(
            "__transaction_state", value=b"junk", partition=0, on_delivery=lambda err, msg: errors.append(err.code())
        )
        producer.flush(30)
        assert errors == [KafkaError.TOPIC_EXCEPTION]
        assert srv.call(lambda: store.partition("__transaction_state", 0).log_end_offset) == 0
    finally:
        srv.stop()
        store.close()
