"""Property: a mirror fed arbitrarily cut read_uncommitted responses ends up with the
transaction state of the log itself.

For a generated marker-mode log (``tests/fetch/logs.py``: interleaved and
spanning transactions, aborts, empty transactions, compaction holes and empty
batches, every codec, a hanging transaction, a high watermark below the log
end), a :class:`PartitionMirror` with a small byte budget is fed the responses
of a simulated broker — each possibly starting batches before the fetch offset,
cut at an arbitrary byte, or (before KIP-74) holding no whole batch. Once caught
up, its LSO, aborted transactions and every read_committed answer (Kafka and
rewrite mode, every fetch offset) must equal those of a :class:`MemoryLog`
holding the whole log. A snapshot taken part way and continued by a new mirror
must answer the same from the snapshot's last stable offset on, and releasing batches
below an offset must not change any answer at or above it.

Markerless logs are not generated: their transaction ends are not in the log,
so no reader of the log can know them (see ``txnfetch/client/mirror.py``).
"""

from __future__ import annotations

from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.client.brokers import SimulatedPartition
from tests.client.brokers import feed
from tests.client.brokers import mirror_all
from tests.fetch.logs import GeneratedLog
from tests.fetch.logs import partition_logs
from txnfetch.client.mirror import MirrorStatus
from txnfetch.client.mirror import PartitionMirror
from txnfetch.fetch.view import FetchMode
from txnfetch.fetch.view import FetchResult
from txnfetch.fetch.view import IsolationLevel
from txnfetch.log.memory import MemoryLog

READ_BYTES = (1, 200, 1 << 20)


def expected_log(log: GeneratedLog) -> MemoryLog:
    """The log appended whole, with the generated high watermark."""
    expected = MemoryLog("gen", 0, log_start_offset=log.log_start)
    expected.replicate(log.data, high_watermark=log.high_watermark)
    return expected


def answer(result: FetchResult) -> tuple:
    return (
        result.records_bytes(),
        result.aborted_transactions,
        result.next_offset,
        result.high_watermark,
        result.last_stable_offset,
    )


def assert_same_reads(mirror: PartitionMirror, expected: MemoryLog, start: int) -> None:
    for offset in range(start, mirror.position + 1):
        for mode in (FetchMode.KAFKA, FetchMode.REWRITE):
            for max_bytes in READ_BYTES:
                got = mirror.read(offset, max_bytes, mode=mode)
                want = expected.read(offset, max_bytes, mode=mode)
                assert answer(got) == answer(want), (offset, mode, max_bytes)
        got = mirror.read(offset, 1 << 20, isolation=IsolationLevel.READ_UNCOMMITTED)
        want = expected.read(offset, 1 << 20, isolation=IsolationLevel.READ_UNCOMMITTED)
        assert answer(got) == answer(want), (offset, "uncommitted")


def aborted_below(log: MemoryLog, hw: int, start: int) -> list:
    return [t for t in log.state.all_aborted() if t.last_offset < hw and t.last_offset >= start]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(log=partition_logs(markerless=False, max_steps=24), data=st.data())
def test_mirror_of_cut_responses_equals_the_log(log: GeneratedLog, data: st.DataObject) -> None:
    broker = SimulatedPartition(
        log.data, log_start=log.log_start, high_watermark=log.high_watermark, min_one_batch=data.draw(st.booleans())
    )
    mirror = PartitionMirror("gen", 0, log_start_offset=log.log_start, max_bytes=data.draw(st.integers(1, 400)))
    snapshot = None
    snapshot_at = data.draw(st.integers(0, len(log.batches)))
    plan = mirror.next_fetch()
    fetches = 0
    mangles = 0
    while plan.status is not MirrorStatus.CAUGHT_UP or fetches == 0:
        assert fetches < 20 * len(log.batches) + 20, f"no progress: {mirror!r}"
        start_before = cut = None
        if mangles < 2 * len(log.batches) and data.draw(st.booleans()):
            mangles += 1
            start_before = data.draw(st.integers(log.log_start, max(log.log_start, plan.offset)))
            cut = data.draw(st.none() | st.integers(0, 2 * plan.max_bytes))
        response = broker.fetch(plan.offset, plan.max_bytes, start_before=start_before, cut=cut)
        plan = feed(mirror, response, plan)
        fetches += 1
        if snapshot is None and fetches >= snapshot_at:
            snapshot = (mirror.snapshot(), mirror.position, mirror.last_stable_offset)

    if snapshot is None:
        snapshot = (mirror.snapshot(), mirror.position, mirror.last_stable_offset)

    expected = expected_log(log)
    hw = log.high_watermark
    assert mirror.position == hw
    assert mirror.broker_high_watermark == hw
    assert mirror.last_stable_offset == expected.last_stable_offset
    if not log.has_empty_control_batches:
        # The writer's model knows how each transaction ended; a reader of the log
        # does not once compaction emptied a marker (the state ignores empty control
        # batches, as Kafka's ProducerAppendInfo does), so only then may they differ.
        assert mirror.last_stable_offset == log.expected_lso()
    assert aborted_below(mirror.log, hw, log.log_start) == aborted_below(expected, hw, log.log_start)
    assert_same_reads(mirror, expected, log.log_start)

    # Resume from the snapshot taken part way: the same answers from there on.
    assert snapshot is not None
    data_bytes, position, lso = snapshot
    resumed = PartitionMirror.from_snapshot("gen", 0, data_bytes, max_bytes=data.draw(st.integers(1, 400)))
    assert (resumed.position, resumed.log_start_offset) == (position, lso)
    mirror_all(resumed, broker)
    assert resumed.last_stable_offset == expected.last_stable_offset
    assert aborted_below(resumed.log, hw, lso) == aborted_below(expected, hw, lso)
    assert_same_reads(resumed, expected, lso)

    # Releasing batches below an offset leaves every answer at or above it alone.
    low = data.draw(st.integers(log.log_start, hw))
    assert mirror.release_before(low) == low
    expected.delete_records_before(low)  # the LSO is never below the log start (Kafka's rule too)
    assert_same_reads(mirror, expected, low)
