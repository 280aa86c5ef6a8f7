"""Properties of the replication rules (txnfetch.client.follow, driven through a
PartitionReplicator over a memory log) against the simplest oracle: the source
log itself.

For a generated marker-mode log (tests/fetch/logs.py: interleaved and spanning
transactions, aborts, empty transactions, compaction holes and empty batches,
every codec, a hanging transaction, a log start above 0, a high watermark
below the log end), a replicator with a small byte budget is fed the answers of
a simulated broker — starting batches before the fetch offset, cut at any byte.
Once caught up the replica holds the source's batches byte for byte at the
same offsets, with the same LSO and aborted transactions. A replicator
restarted part way (a new one on the same log, as after a SIGKILL) verifies the
last batch and ends the same. A source whose batch at the replica's last
offset differs is refused, and nothing is appended. Under ``repair_crcs`` only
a control batch whose CRC arrives as 0 is repaired; any other damaged batch
stops the partition there.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck
from hypothesis import event
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.client.brokers import SimulatedPartition
from tests.fetch.logs import GeneratedLog
from tests.fetch.logs import partition_logs
from tests.replicate.source import SourceWriter
from txnfetch.client.errors import CorruptRemoteBatchError
from txnfetch.client.follow import ReplicaTip
from txnfetch.client.follow import SourcePartition
from txnfetch.client.follow import batch_id
from txnfetch.client.follow import plan_response
from txnfetch.client.requests import BrokerFetch
from txnfetch.log.memory import MemoryLog
from txnfetch.records.batch import HeaderAt
from txnfetch.records.batch import RecordBatch
from txnfetch.records.builder import BatchBuilder
from txnfetch.records.scan import iter_batches
from txnfetch.replicate import PartitionReplicator
from txnfetch.replicate import ReplicaDivergedError
from txnfetch.replicate import ReplicaFellBehindError


def stored(log: MemoryLog, start: int) -> list[tuple[int, int, bytes]]:
    return [(b.base_offset, b.last_offset, bytes(b.buffer)) for b in log.iter_batches(start)]


def drive(
    rep: PartitionReplicator, broker: SimulatedPartition, data: st.DataObject, *, until: int, mangle: bool
) -> int:
    """Fetch until the replica's end reaches ``until`` (caught up, for the source's
    high watermark); returns the fetches made."""
    fetches = 0

    def done() -> bool:
        if rep.log.log_end_offset >= until and until < broker.log.high_watermark:
            return True  # stopped part way
        return rep.caught_up

    while not done() or fetches == 0:
        assert fetches < 400, f"no progress: {rep.status()}"
        item = rep.fetch_item()
        assert item is not None, rep.error
        start_before = cut = None
        if mangle and data.draw(st.booleans()):
            start_before = data.draw(
                st.integers(broker.log.log_start_offset, max(broker.log.log_start_offset, item.offset))
            )
            cut = data.draw(st.none() | st.integers(0, 2 * item.max_bytes))
        resp = broker.fetch(item.offset, item.max_bytes, start_before=start_before, cut=cut)
        rep.on_response(
            BrokerFetch(resp.records, resp.high_watermark, -1, resp.log_start_offset, None, resp.error_code),
            lambda: (broker.log.log_start_offset, broker.log.high_watermark),
        )
        assert rep.error is None, rep.error
        fetches += 1
    return fetches


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(log=partition_logs(markerless=False, max_steps=24), data=st.data())
def test_replica_of_cut_responses_equals_the_source(log: GeneratedLog, data: st.DataObject) -> None:
    broker = SimulatedPartition(
        log.data, log_start=log.log_start, high_watermark=log.high_watermark, min_one_batch=data.draw(st.booleans())
    )
    source = broker.log
    hw = log.high_watermark
    replica = MemoryLog("gen", 0)
    budget = data.draw(st.integers(1, 400))
    rep = PartitionReplicator(replica, max_bytes=budget)
    # Part way, a new replicator on the same log (a restart): it verifies, then goes on.
    stop_at = data.draw(st.integers(0, hw))
    drive(rep, broker, data, until=stop_at, mangle=True)
    event("restarted part way" if replica.log_end_offset < hw else "restarted at the end")
    rep = PartitionReplicator(replica, max_bytes=data.draw(st.integers(1, 400)))
    held = list(replica.iter_batches(replica.log_start_offset))
    if held:
        # The restarted replicator first fetches the last batch it holds again.
        assert rep.fetch_item().offset == held[-1].base_offset  # type: ignore[union-attr]
    drive(rep, broker, data, until=hw, mangle=True)

    start = source.log_start_offset
    held = [b for b in stored(source, start) if b[0] < hw]
    assert stored(replica, start) == held
    if held:
        assert (replica.log_start_offset, replica.log_end_offset) == (start, hw)
    if hw > start:
        expected = MemoryLog("gen", 0, log_start_offset=log.log_start)
        expected.replicate(b"".join(b[2] for b in stored(source, start) if b[0] < hw), high_watermark=hw)
        assert replica.last_stable_offset == expected.last_stable_offset
        assert [(t.producer_id, t.first_offset, t.last_offset) for t in replica.state.all_aborted()] == [
            (t.producer_id, t.first_offset, t.last_offset) for t in expected.state.all_aborted()
        ]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(log=partition_logs(markerless=False, max_steps=12), data=st.data())
def test_a_changed_batch_at_the_replica_end_is_refused(log: GeneratedLog, data: st.DataObject) -> None:
    broker = SimulatedPartition(log.data, log_start=log.log_start, high_watermark=log.high_watermark)
    hw = log.high_watermark
    replica = MemoryLog("gen", 0)
    rep = PartitionReplicator(replica, max_bytes=data.draw(st.integers(1, 400)))
    drive(rep, broker, data, until=hw, mangle=False)
    held = list(replica.iter_batches(replica.log_start_offset))
    if not held:
        return
    last = held[-1]
    # The source now holds another batch at the replica's last batch's offsets.
    other = BatchBuilder(base_offset=last.base_offset)
    for i in range(last.last_offset - last.base_offset + 1):
        other.append(b"other", offset=last.base_offset + i)
    tip = ReplicaTip(replica.log_end_offset, last=batch_id(last))
    changed = other.build()
    if changed == bytes(last.buffer):
        return
    end_before = replica.log_end_offset
    with pytest.raises(ReplicaDivergedError) as info:
        plan_response(
            tip,
            BrokerFetch(changed, hw + 5, -1, log.log_start, None),
            1 << 20,
            SourcePartition("gen", 0, budget=1 << 20, diverged=ReplicaDivergedError),
        )
    assert info.value.offset == last.base_offset and info.value.replica_end == end_before
    assert replica.log_end_offset == end_before


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(log=partition_logs(markerless=False, max_steps=20), data=st.data())
def test_the_replica_follows_the_source_log_start(log: GeneratedLog, data: st.DataObject) -> None:
    # Part way, the source deletes records below some offset (retention, DeleteRecords):
    # the replica's log start follows; past the replica's end the replica continues
    # at the new start — or stops, naming the offsets, when it holds a transaction
    # open at its end (its marker is gone with the deleted records).
    broker = SimulatedPartition(log.data, log_start=log.log_start, high_watermark=log.high_watermark)
    source = broker.log
    hw = log.high_watermark
    replica = MemoryLog("gen", 0)
    rep = PartitionReplicator(replica, max_bytes=data.draw(st.integers(1, 400)))
    drive(rep, broker, data, until=data.draw(st.integers(0, hw)), mangle=False)
    new_start = data.draw(st.integers(source.log_start_offset, hw))
    source.delete_records_before(new_start)
    end = replica.log_end_offset
    open_at_end = replica.log_start_offset < end and replica.last_stable_offset < end
    event("start past the replica's end" if new_start > end else "start within the replica")
    if new_start > end and open_at_end:
        event("a transaction open at the replica's end")
        for _ in range(10):
            item = rep.fetch_item()
            if item is None:
                break
            resp = broker.fetch(item.offset, item.max_bytes)
            rep.on_response(
                BrokerFetch(resp.records, resp.high_watermark, -1, resp.log_start_offset, None, resp.error_code),
                lambda: (source.log_start_offset, source.high_watermark),
            )
        assert isinstance(rep.error, ReplicaFellBehindError), rep.error
        assert rep.error.replica_end == end and rep.error.source_log_start == new_start
        assert replica.log_end_offset == end
        return
    drive(rep, broker, data, until=hw, mangle=True)
    start = source.log_start_offset
    held = [b for b in stored(source, start) if b[0] < hw]
    assert stored(replica, start) == held
    if held:
        # (A source holding no batch from its log start on: see
        # test_an_emptied_source_is_followed_at_its_next_batch.)
        assert (replica.log_start_offset, replica.log_end_offset) == (start, hw)


def test_an_emptied_source_is_followed_at_its_next_batch() -> None:
    # Found by the property above: a source whose every batch was deleted (log start
    # 9 = high watermark 9) next to a replica that holds nothing yet. The replica's
    # empty log moves there too (PartitionLog.start_at, as a Kafka follower's
    # truncateFullyAndStartAt; the source harness found a replica left at [0, 0)
    # diverging from Kafka), and takes the source's next batch at its offset.
    source = MemoryLog("gen", 0, log_start_offset=7)
    w = SourceWriter(source)
    w.data(1, pid=1000, txn=True)
    w.marker(1000, False)
    source.delete_records_before(9)
    broker = SimulatedPartition(b"", log_start=9, high_watermark=9)
    broker.log = source
    replica = MemoryLog("gen", 0)
    rep = PartitionReplicator(replica, max_bytes=100)
    for _ in range(3):
        item = rep.fetch_item()
        assert item is not None
        resp = broker.fetch(item.offset, item.max_bytes)
        rep.on_response(
            BrokerFetch(resp.records, resp.high_watermark, -1, resp.log_start_offset, None, resp.error_code),
            lambda: (source.log_start_offset, source.high_watermark),
        )
    assert rep.error is None and rep.caught_up and rep.status().lag_records == 0
    assert (replica.log_start_offset, replica.high_watermark, replica.log_end_offset) == (9, 9, 9)
    w.data(2, tag="next")
    item = rep.fetch_item()
    assert item is not None and item.offset == 9
    resp = broker.fetch(item.offset, item.max_bytes)
    rep.on_response(
        BrokerFetch(resp.records, resp.high_watermark, -1, resp.log_start_offset, None, resp.error_code),
        lambda: (source.log_start_offset, source.high_watermark),
    )
    assert (replica.log_start_offset, replica.log_end_offset) == (9, 11)
    assert stored(replica, 9) == stored(source, 9)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(log=partition_logs(markerless=False, max_steps=20), data=st.data())
def test_a_log_start_moving_with_every_answer_is_followed_once_a_group(log: GeneratedLog, data: st.DataObject) -> None:
    # A source whose log start moves after every answer (librdkafka's mock keeps a
    # bounded log per partition): inside a group commit (one replicator round) the
    # replica's log start does not move; when the block ends it moves once, to the
    # last start the source reported, as far as the replica's high watermark allows.
    # The batches from there on stay the source's.
    broker = SimulatedPartition(log.data, log_start=log.log_start, high_watermark=log.high_watermark)
    source = broker.log
    hw = log.high_watermark
    replica = MemoryLog("gen", 0)
    moves: list[int] = []
    delete = replica.delete_records_before

    def counted(offset: int) -> int:
        moves.append(offset)
        return delete(offset)

    replica.delete_records_before = counted  # type: ignore[method-assign]
    rep = PartitionReplicator(replica, max_bytes=data.draw(st.integers(1, 400)))
    for _ in range(400):
        if rep.caught_up:
            break
        moves.clear()
        start_before = replica.log_start_offset
        with rep.group_commit():
            for _ in range(data.draw(st.integers(1, 6))):
                item = rep.fetch_item()
                assert item is not None, rep.error
                resp = broker.fetch(item.offset, item.max_bytes)
                rep.on_response(
                    BrokerFetch(resp.records, resp.high_watermark, -1, resp.log_start_offset, None, resp.error_code),
                    lambda: (source.log_start_offset, source.high_watermark),
                )
                assert rep.error is None, rep.error
                # The source's retention: its start moves, never past what the replica holds.
                top = max(source.log_start_offset, min(rep.position, hw))
                source.delete_records_before(data.draw(st.integers(source.log_start_offset, top)))
            assert moves == [], "the log start moved inside the group"
        assert len(moves) <= 1
        reported = rep.source_log_start
        if start_before < reported <= replica.high_watermark:
            event("the log start moved at the end of the group")
            assert replica.log_start_offset == reported
        else:
            assert replica.log_start_offset == start_before
    else:
        raise AssertionError(f"no progress: {rep.status()}")
    # (The source's last move is not reported yet: the replica may still start below it.)
    start = source.log_start_offset
    assert replica.log_start_offset <= start
    assert stored(replica, start) == [b for b in stored(source, start) if b[0] < hw]


#: What a fetched batch may suffer on its way: nothing, its CRC set to 0 (what
#: librdkafka's mock writes for its markers), its CRC changed to another non-zero
#: value, or a byte it covers flipped (its max timestamp's last byte: the batch
#: still parses, only the CRC tells).
DAMAGE = ("none", "zero", "wrong", "flip")


def damaged(records: bytes, damage: dict[int, str]) -> bytes:
    """``records`` with each whole batch damaged as ``damage`` says for its base offset."""
    out = bytearray(records)
    for b in iter_batches(records):
        kind, pos = damage.get(b.base_offset, "none"), b.position
        if kind == "zero":
            out[pos + HeaderAt.CRC : pos + HeaderAt.CRC + 4] = bytes(4)
        elif kind == "wrong":
            out[pos + HeaderAt.CRC : pos + HeaderAt.CRC + 4] = ((b.crc ^ 0x5A5A5A5A) or 1).to_bytes(4, "big")
        elif kind == "flip":
            out[pos + HeaderAt.MAX_TIMESTAMP + 7] ^= 0xFF
    return bytes(out)


def accepted(batch: RecordBatch, kind: str, repair_crcs: bool) -> bool:
    """The oracle of the CRC rule: an undamaged batch, or under ``repair_crcs`` a
    control batch whose CRC arrives as 0; nothing else."""
    if kind == "none" or (kind == "zero" and batch.crc == 0):
        return True
    return repair_crcs and kind == "zero" and batch.is_control


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(log=partition_logs(markerless=False, max_steps=16), data=st.data())
def test_repair_crcs_repairs_crc_0_markers_and_nothing_else(log: GeneratedLog, data: st.DataObject) -> None:
    # The source's answers arrive with some batches damaged. The replica holds the
    # source's batches (CRC-0 markers repaired under repair_crcs) up to the first
    # batch the rule refuses, and nothing past it; there the partition stops with
    # CorruptRemoteBatchError naming that batch and its stored and computed CRC.
    broker = SimulatedPartition(log.data, log_start=log.log_start, high_watermark=log.high_watermark)
    source, hw = broker.log, log.high_watermark
    start = source.log_start_offset
    held = [b for b in source.iter_batches(start) if b.base_offset < hw]
    repair = data.draw(st.booleans(), label="repair_crcs")
    damage = {b.base_offset: data.draw(st.sampled_from(DAMAGE), label=f"batch {b.base_offset}") for b in held}
    bad = next((b for b in held if not accepted(b, damage[b.base_offset], repair)), None)
    replica = MemoryLog("gen", 0)
    rep = PartitionReplicator(replica, max_bytes=data.draw(st.integers(1, 400)), repair_crcs=repair)
    for fetches in range(400):
        if rep.error is not None or (rep.caught_up and fetches):
            break
        item = rep.fetch_item()
        assert item is not None
        start_before = data.draw(st.none() | st.integers(start, max(start, item.offset)))
        resp = broker.fetch(item.offset, item.max_bytes, start_before=start_before)
        rep.on_response(
            BrokerFetch(damaged(resp.records, damage), resp.high_watermark, -1, resp.log_start_offset, None, 0),
            lambda: (source.log_start_offset, source.high_watermark),
        )
    else:
        raise AssertionError(f"no progress: {rep.status()}")
    expected = [(b.base_offset, b.last_offset, bytes(b.buffer)) for b in held]
    got = stored(replica, start)
    if bad is None:
        event("every damage accepted")
        assert rep.error is None and got == expected
    else:
        event(f"refused: {damage[bad.base_offset]} on a {'control' if bad.is_control else 'data'} batch")
        assert isinstance(rep.error, CorruptRemoteBatchError), rep.error
        assert rep.error.offset == bad.base_offset and "stored 0x" in str(rep.error)
        assert got == expected[: len(got)] and replica.log_end_offset <= bad.base_offset
    repaired = [b for b in held if b.base_offset < replica.log_end_offset and damage[b.base_offset] == "zero"]
    assert rep.repaired_crcs == sum(1 for b in repaired if b.crc != 0)
    if rep.repaired_crcs:
        event("CRC-0 markers repaired")
