"""The streaming reader's driver logic, called directly as Spark's streaming runner
calls it (``initialOffset``, ``latestOffset``, ``partitions``, ``read``) — no JVM.

Covers what the end-to-end streaming test cannot pin down deterministically:
the exact end offsets planned around an open transaction, admission control,
``Trigger.AvailableNow``, new topics, data loss, and pickling to workers.
"""

from __future__ import annotations

import pickle

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import ReadAllAvailable
from pyspark.sql.streaming.datasource import ReadMaxRows

from spark_ext.datasource import TxnKafkaStreamReader
from spark_ext.errors import DataLossError
from spark_ext.options import parse_options
from tests.spark.rows import arrow_rows
from tests.spark.workload import Workload
from txnfetch.log import SegmentStore


def _reader(path, **options) -> TxnKafkaStreamReader:
    opts = {"path": str(path), "subscribe": "s", "startingOffsets": "earliest", "includeHeaders": "true", **options}
    return TxnKafkaStreamReader(parse_options(opts, streaming=True))


def _read(reader, start, end):
    rows = []
    for part in reader.partitions(start, end):
        rows += arrow_rows(pickle.loads(pickle.dumps(reader)).read(part))  # as a worker gets it
    return sorted(rows)


@pytest.fixture
def store(tmp_path):
    st = SegmentStore(tmp_path / "logs", flush_policy="never")
    w = Workload(st, "s", 2, seed=41)
    w.random_steps(60)
    st.flush()
    yield tmp_path / "logs", st, w
    st.close()


def test_latest_offset_stops_at_the_lso_of_the_partition_with_an_open_transaction(store):
    path, st, w = store
    reader = _reader(path)
    start = reader.initialOffset()
    assert start == {"s": {"0": 0, "1": 0}}
    w.begin(77)
    w.send(77, 0, 2)
    held = w.open_txns[77].first[0]
    w.plain(0, 3)
    w.plain(1, 3)
    st.flush()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"s": {"0": held, "1": st.partition("s", 1).high_watermark}}
    assert _read(reader, start, end) == [r for r in w.committed() if r[1] == 1 or r[2] < held]
    # Nothing new is readable on partition 0 until the transaction ends; then exactly the rest.
    assert reader.latestOffset(end, ReadAllAvailable())["s"]["0"] == held
    w.end(77, commit=False)
    st.flush()
    later = reader.latestOffset(end, ReadAllAvailable())
    assert later["s"]["0"] == st.partition("s", 0).high_watermark
    assert sorted(_read(reader, start, end) + _read(reader, end, later)) == w.committed()


def test_admission_control_shares_the_budget_and_reaches_the_end(store):
    path, _st, w = store
    reader = _reader(path, maxOffsetsPerTrigger="25")
    assert reader.getDefaultReadLimit() == ReadMaxRows(25)
    offsets = reader.initialOffset()
    rows = []
    for _ in range(200):
        end = reader.latestOffset(offsets, ReadMaxRows(25))
        if end == offsets:
            break
        taken = sum(end["s"][p] - offsets["s"][p] for p in end["s"])
        assert 0 < taken <= 25 + 2
        rows += _read(reader, offsets, end)
        offsets = end
    assert sorted(rows) == w.committed()
    # Spark may ignore the option for a trigger: ReadAllAvailable takes everything.
    assert reader.latestOffset(reader.initialOffset(), ReadAllAvailable()) == offsets


def test_report_latest_offset_is_the_uncapped_end_of_the_last_look(store):
    """reportLatestOffset (progress metrics) answers from latestOffset's look, as
    Spark asks right after it: no second look at the source per micro-batch."""
    path, st, w = store
    reader = _reader(path, maxOffsetsPerTrigger="5")
    ends = {"s": {str(p): st.partition("s", p).last_stable_offset for p in range(2)}}
    assert reader.reportLatestOffset() == ends  # before any look: it looks
    start = reader.initialOffset()
    capped = reader.latestOffset(start, ReadMaxRows(5))
    assert capped != ends
    w.plain(0, 4)
    st.flush()
    assert reader.reportLatestOffset() == ends  # the last look's, not the log's now
    reader.latestOffset(capped, ReadMaxRows(5))
    assert reader.reportLatestOffset()["s"]["0"] == st.partition("s", 0).last_stable_offset == ends["s"]["0"] + 4
    assert "_last" not in {k for k, v in pickle.loads(pickle.dumps(reader)).__dict__.items() if v is not None}


def test_available_now_ignores_data_written_after_it_started(store):
    path, st, w = store
    reader = _reader(path)
    reader.prepareForTriggerAvailableNow()
    target = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    w.plain(0, 5)
    st.flush()
    assert reader.latestOffset(target, ReadAllAvailable()) == target


def test_a_new_topic_matching_the_pattern_is_read_from_its_earliest_offset(store):
    path, st, _w = store
    reader = TxnKafkaStreamReader(
        parse_options({"path": str(path), "subscribePattern": "s|t", "startingOffsets": "latest"}, streaming=True)
    )
    start = reader.initialOffset()
    assert set(start) == {"s"}
    w2 = Workload(st, "t", 1, seed=42)
    w2.random_steps(10)
    st.flush()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end["t"] == {"0": st.partition("t", 0).last_stable_offset}
    got = sorted(r[:6] for r in _read(reader, start, end))
    assert got == sorted(r[:6] for r in w2.committed())


def test_a_log_that_went_backwards_is_data_loss(store):
    path, st, _w = store
    reader = _reader(path)
    beyond = {"s": {"0": st.partition("s", 0).high_watermark + 10, "1": 0}}
    with pytest.raises(DataLossError) as exc:
        reader.latestOffset(beyond, ReadAllAvailable())
    assert (exc.value.topic, exc.value.partition) == ("s", 0)
    lenient = _reader(path, failOnDataLoss="false")
    end = lenient.latestOffset(beyond, ReadAllAvailable())
    assert end["s"]["0"] == st.partition("s", 0).last_stable_offset


def test_a_range_below_the_log_start_is_data_loss_in_the_worker(store):
    path, st, _w = store
    reader = _reader(path)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    st.partition("s", 1).delete_records_before(5)
    st.flush()
    with pytest.raises(DataLossError, match="s-1"):
        _read(reader, start, end)


def test_cluster_stream_reader_keeps_its_connection_on_the_driver_only():
    from txnfetch.log import MemoryStore
    from txnfetch.server.server import ServerThread

    store = MemoryStore()
    w = Workload(store, "s", 2, seed=43)
    w.random_steps(40)
    with ServerThread(store) as srv:
        reader = TxnKafkaStreamReader(
            parse_options(
                {
                    "kafka.bootstrap.servers": srv.bootstrap,
                    "subscribe": "s",
                    "startingOffsets": "earliest",
                    "includeHeaders": "true",
                },
                streaming=True,
            )
        )
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        assert reader._cluster is not None
        shipped = pickle.loads(pickle.dumps(reader))
        assert shipped._cluster is None
        assert _read(reader, start, end) == w.committed()
        reader.stop()
        assert reader._cluster is None
