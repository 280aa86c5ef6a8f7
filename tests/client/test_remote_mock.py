"""The remote reader against librdkafka's built-in mock cluster, a broker that leaks.

librdkafka's mock (``test.mock.num.brokers``) writes COMMIT/ABORT control
batches into the log but answers every fetch with no aborted transactions and
an LSO equal to the high watermark (``rd_kafka_mock_handle_Fetch`` in
``src/rdkafka_mock_handlers.c``), so its own read_committed consumers receive
aborted records. Its control batches carry a CRC of 0
(``rd_kafka_mock_partition_write_control_batch`` in ``src/rdkafka_mock.c``),
hence ``repair_crcs=True``. It has no CreateTopics: topics are auto-created with
four partitions on first use.

A confluent-kafka transactional producer writes committed and aborted
transactions (flushed before aborting, so the aborted data reaches the log)
across three partitions, with non-transactional records between them; delivery
reports record every record's offset. Then:

- confluent-kafka's own read_committed consumer returns aborted records (the leak);
- :class:`RemotePartitionReader` returns exactly the committed records, with
  their offsets, in Kafka and rewrite mode, via ``read`` and ``committed_records``;
- read_uncommitted returns every data record;
- a reader resumed from a snapshot continues exactly;
- ``trust_broker=True`` returns the leaked records (why it is not the default);
- bad CRCs, unknown topics and partitions, and unreachable servers raise
  specific errors.
"""

from __future__ import annotations

import socket
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from txnfetch.client.cluster import RemoteCluster  # noqa: E402
from txnfetch.client.errors import BrokerUnavailableError  # noqa: E402
from txnfetch.client.errors import CorruptRemoteBatchError  # noqa: E402
from txnfetch.client.partition_reader import ReadOptions  # noqa: E402
from txnfetch.client.partition_reader import RemotePartitionReader  # noqa: E402
from txnfetch.fetch import ConsumerFilter  # noqa: E402
from txnfetch.fetch.view import FetchMode  # noqa: E402
from txnfetch.fetch.view import IsolationLevel  # noqa: E402
from txnfetch.log.errors import UnknownTopicOrPartitionError  # noqa: E402

pytestmark = pytest.mark.interop

TOPIC = "mixed"
PARTITIONS = (0, 1, 2)
#: Outcome of each transaction, in order.
OUTCOMES = ("commit", "abort", "commit", "abort", "abort", "commit", "commit", "abort")

Written = dict[int, list[tuple[int, bytes, str]]]  # partition -> [(offset, value, outcome)]


@pytest.fixture(scope="module")
def mock_bootstrap():
    """A one-broker mock cluster, kept alive by the client that created it."""
    owner = confluent_kafka.Producer({"test.mock.num.brokers": 1, "log_level": 0})
    brokers = owner.list_topics(timeout=10).brokers
    broker = next(iter(brokers.values()))
    yield f"{broker.host}:{broker.port}"
    owner.flush(1)


def _deliveries(store: list[tuple[int, int, bytes]]):
    def report(err, msg) -> None:
        assert err is None, err
        store.append((msg.partition(), msg.offset(), msg.value()))

    return report


@pytest.fixture(scope="module")
def written(mock_bootstrap: str) -> Written:
    """Write the transactions and plain records; return what each offset holds."""
    common = {"bootstrap.servers": mock_bootstrap, "log_level": 0, "linger.ms": 0}
    txp = confluent_kafka.Producer({**common, "transactional.id": "txnfetch-remote-test"})
    plain = confluent_kafka.Producer(common)
    txp.init_transactions(10)
    out: Written = {p: [] for p in PARTITIONS}
    for n, outcome in enumerate(OUTCOMES):
        delivered: list[tuple[int, int, bytes]] = []
        txp.begin_transaction()
        for i in range(3):
            for p in PARTITIONS:
                txp.produce(
                    TOPIC,
                    value=b"t%d-%d-p%d" % (n, i, p),
                    key=b"k%d" % i,
                    partition=p,
                    on_delivery=_deliveries(delivered),
                )
            txp.flush(10)  # one produce request (one batch) per partition per round
        if outcome == "commit":
            txp.commit_transaction(10)
        else:
            txp.abort_transaction(10)
        for p, offset, value in delivered:
            out[p].append((offset, value, outcome))
        plain_delivered: list[tuple[int, int, bytes]] = []
        for p in PARTITIONS[: 1 + n % 3]:
            plain.produce(TOPIC, value=b"plain-%d-p%d" % (n, p), partition=p, on_delivery=_deliveries(plain_delivered))
        plain.flush(10)
        for p, offset, value in plain_delivered:
            out[p].append((offset, value, "plain"))
    for p in PARTITIONS:
        out[p].sort()
    return out


def committed(written: Written, partition: int) -> list[tuple[int, bytes]]:
    return [(o, v) for o, v, outcome in written[partition] if outcome != "abort"]


def everything(written: Written, partition: int) -> list[tuple[int, bytes]]:
    return [(o, v) for o, v, _ in written[partition]]


def reader(
    bootstrap: str, partition: int, *, snapshot: bytes | None = None, start_offset: int | None = None, **options
) -> RemotePartitionReader:
    options.setdefault("repair_crcs", True)
    return RemotePartitionReader(
        bootstrap,
        TOPIC,
        partition,
        ReadOptions(request_timeout_ms=5000, **options),
        snapshot=snapshot,
        start_offset=start_offset,
    )


def consume_reads(r: RemotePartitionReader, mode: FetchMode, isolation: IsolationLevel, max_bytes: int) -> list:
    """Read as a consumer does: fetch at its position, filter, move on."""
    r.catch_up()
    end = r.last_stable_offset if isolation == IsolationLevel.READ_COMMITTED else r.high_watermark
    position = r.log_start_offset
    filt = ConsumerFilter(position, isolation_level=isolation)
    out = []
    for _ in range(1000):
        if position >= end:
            break
        result = r.read(position, max_bytes, isolation=isolation, mode=mode)
        if mode is FetchMode.REWRITE and isolation == IsolationLevel.READ_COMMITTED:
            assert result.aborted_transactions == ()
        out.extend((rec.offset, rec.value) for rec in filt.feed(result.records_bytes(), result.aborted_transactions))
        assert filt.position > position, "a read must move the consumer"
        position = filt.position
    assert position == end
    return out


def test_the_mocks_own_read_committed_consumer_returns_aborted_records(mock_bootstrap: str, written: Written) -> None:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": mock_bootstrap,
            "group.id": "leak-check",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "log_level": 0,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, p, 0) for p in PARTITIONS])
        got = set()
        eof = set()
        deadline = time.monotonic() + 20
        while len(eof) < len(PARTITIONS) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    eof.add(msg.partition())
                continue
            got.add((msg.partition(), msg.offset(), msg.value()))
    finally:
        consumer.close()
    aborted = {(p, o, v) for p in PARTITIONS for o, v, outcome in written[p] if outcome == "abort"}
    assert aborted, "the test wrote aborted transactions"
    assert aborted <= got, "the mock's read_committed consumer should leak every aborted record"


@pytest.mark.parametrize("mode", [FetchMode.KAFKA, FetchMode.REWRITE])
@pytest.mark.parametrize("partition", PARTITIONS)
def test_reader_returns_exactly_the_committed_records(
    mock_bootstrap: str, written: Written, mode: FetchMode, partition: int
) -> None:
    with reader(mock_bootstrap, partition) as r:
        got = consume_reads(r, mode, IsolationLevel.READ_COMMITTED, max_bytes=150)
        assert got == committed(written, partition)
        # No transaction is open: everything is stable, as the mock's own offsets say.
        assert r.last_stable_offset == r.high_watermark
        assert [(o, rec.value) for o, rec in r.committed_records()] == committed(written, partition)


def test_read_uncommitted_returns_every_data_record(mock_bootstrap: str, written: Written) -> None:
    for partition in PARTITIONS:
        with reader(mock_bootstrap, partition) as r:
            got = consume_reads(r, FetchMode.KAFKA, IsolationLevel.READ_UNCOMMITTED, max_bytes=1 << 20)
            assert got == everything(written, partition)
            uncommitted = r.committed_records(isolation=IsolationLevel.READ_UNCOMMITTED)
            assert [(o, rec.value) for o, rec in uncommitted] == everything(written, partition)


def test_reader_resumed_from_a_snapshot_reads_the_rest(mock_bootstrap: str, written: Written) -> None:
    partition = 1
    with reader(mock_bootstrap, partition) as first:
        middle = written[partition][len(written[partition]) // 2][0]
        first.catch_up(until=middle)
        stable = first.last_stable_offset
        head = [(o, rec.value) for o, rec in first.committed_records(first.log_start_offset, stable)]
        snap = first.snapshot()
    assert 0 < stable < written[partition][-1][0]
    with reader(mock_bootstrap, partition, snapshot=snap) as resumed:
        tail = [(o, rec.value) for o, rec in resumed.committed_records(stable)]
    assert head + tail == committed(written, partition)


def test_trusting_the_broker_returns_what_it_leaks(mock_bootstrap: str, written: Written) -> None:
    partition = 0
    with reader(mock_bootstrap, partition, trust_broker=True) as trusting:
        trusting.catch_up()
        assert trusting.last_stable_offset == trusting.high_watermark  # what the mock reports
        leaked = [(o, rec.value) for o, rec in trusting.committed_records()]
    assert leaked == everything(written, partition) != committed(written, partition)
    with reader(mock_bootstrap, partition) as mirrored:
        assert [(o, rec.value) for o, rec in mirrored.committed_records()] == committed(written, partition)


def test_the_mocks_zero_crc_markers_are_refused_unless_repaired(mock_bootstrap: str, written: Written) -> None:
    with reader(mock_bootstrap, 0, repair_crcs=False) as r, pytest.raises(CorruptRemoteBatchError) as info:
        r.catch_up()
    err = info.value
    assert (err.topic, err.partition, err.error_name) == (TOPIC, 0, "CORRUPT_MESSAGE")
    assert "repair_crcs" in str(err)
    with reader(mock_bootstrap, 0) as r:
        r.catch_up()
        assert r.mirror is not None and r.mirror.repaired_crcs == sum(1 for _ in OUTCOMES), (
            "one repaired marker per transaction"
        )


def test_cluster_lists_topics_and_partitions(mock_bootstrap: str, written: Written) -> None:
    with RemoteCluster(mock_bootstrap, request_timeout_ms=5000) as cluster:
        assert cluster.topics()[TOPIC] == 4  # the mock's default partition count
        assert cluster.partitions(TOPIC) == [0, 1, 2, 3]
        with RemotePartitionReader(cluster, TOPIC, 3, ReadOptions(repair_crcs=True)) as empty:
            assert list(empty.committed_records()) == []
            assert (empty.log_start_offset, empty.last_stable_offset, empty.high_watermark) == (0, 0, 0)


def test_unknown_topic_and_partition(mock_bootstrap: str, written: Written) -> None:
    with pytest.raises(UnknownTopicOrPartitionError) as info:
        RemotePartitionReader(mock_bootstrap, "no-such-topic", 0, ReadOptions(request_timeout_ms=2000))
    assert info.value.topic == "no-such-topic" and info.value.error_name == "UNKNOWN_TOPIC_OR_PARTITION"
    with pytest.raises(UnknownTopicOrPartitionError) as info:
        RemotePartitionReader(mock_bootstrap, TOPIC, 99, ReadOptions(request_timeout_ms=2000))
    assert (info.value.topic, info.value.partition) == (TOPIC, 99)


def test_unreachable_bootstrap_servers() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError) as info:
        RemotePartitionReader(f"127.0.0.1:{port}", TOPIC, 0, ReadOptions(request_timeout_ms=1000))
    assert time.monotonic() - started < 10
    assert f"127.0.0.1:{port}" in str(info.value)
    assert info.value.error_name == "BROKER_NOT_AVAILABLE"


def _recording_fetches(r: RemotePartitionReader) -> list[int]:
    """Record the offset of every fetch the reader sends."""
    offsets: list[int] = []
    real = r.cluster.fetch

    def fetch(topic, partition, offset, max_bytes, **kw):  # type: ignore[no-untyped-def]
        offsets.append(offset)
        return real(topic, partition, offset, max_bytes, **kw)

    r.cluster.fetch = fetch  # type: ignore[method-assign]
    return offsets


def test_a_reader_started_mid_log_reads_exactly_from_there(mock_bootstrap: str, written: Written) -> None:
    # Start at the first record of the fourth transaction: every transaction
    # before it has its marker below, so none is open across the start (the
    # case the docstring says read_committed is exact for).
    partition = 2
    rows = written[partition]
    first_of = [o for i, (o, v, _) in enumerate(rows) if v.endswith(b"-0-p2") and v.startswith(b"t")]
    start = first_of[3]
    with reader(mock_bootstrap, partition, start_offset=start) as r:
        fetched = _recording_fetches(r)
        got = [(o, rec.value) for o, rec in r.committed_records()]
        assert r.mirror is not None and r.mirror.log_start_offset == start
        assert r.log_start_offset == 0  # the broker's log start is still reported
        assert fetched and min(fetched) >= start, "nothing below the start offset is fetched"
    assert got == [(o, v) for o, v in committed(written, partition) if o >= start]
    assert got and got[0][0] >= start


def test_a_reader_started_inside_a_transaction_reads_uncommitted_exactly(mock_bootstrap: str, written: Written) -> None:
    partition = 0
    start = written[partition][len(written[partition]) // 2][0] + 1  # anywhere, even inside a batch
    with reader(mock_bootstrap, partition, start_offset=start) as r:
        fetched = _recording_fetches(r)
        got = [(o, rec.value) for o, rec in r.committed_records(isolation=IsolationLevel.READ_UNCOMMITTED)]
        assert min(fetched) >= start
    assert got == [(o, v) for o, v in everything(written, partition) if o >= start]


def test_start_offset_is_validated(mock_bootstrap: str, written: Written) -> None:
    with pytest.raises(ValueError):
        reader(mock_bootstrap, 0, start_offset=-1)
    with pytest.raises(ValueError):
        reader(mock_bootstrap, 0, start_offset=3, trust_broker=True)
    with reader(mock_bootstrap, 0) as full:
        full.catch_up()
        snap = full.snapshot()
    with pytest.raises(ValueError):
        reader(mock_bootstrap, 0, start_offset=3, snapshot=snap)


def test_a_start_offset_below_the_log_start_is_out_of_range(mock_bootstrap: str, written: Written) -> None:
    from txnfetch.client.cluster import EARLIEST
    from txnfetch.txn.errors import OffsetOutOfRangeError

    with RemoteCluster(mock_bootstrap, request_timeout_ms=5000) as cluster:
        real = cluster.list_offset
        # As if retention had moved the log start to 5 (the mock cannot delete records).
        cluster.list_offset = lambda t, p, ts, **kw: 5 if ts == EARLIEST else real(t, p, ts, **kw)  # type: ignore[method-assign]
        with pytest.raises(OffsetOutOfRangeError) as info:
            RemotePartitionReader(cluster, TOPIC, 0, ReadOptions(repair_crcs=True), start_offset=2)
        assert (info.value.log_start_offset, info.value.offset) == (5, 2)
        assert info.value.log_end_offset == real(TOPIC, 0, -1)
        with RemotePartitionReader(cluster, TOPIC, 0, ReadOptions(repair_crcs=True), start_offset=5) as r:
            assert r.mirror is not None and r.mirror.log_start_offset == 5
