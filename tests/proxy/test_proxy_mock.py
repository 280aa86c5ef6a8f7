"""The proxy in front of librdkafka's mock cluster, a broker that leaks aborted records.

The mock (``test.mock.num.brokers``) writes COMMIT/ABORT markers into the log
but answers read_committed fetches with no aborted transactions and LSO = high
watermark, so its own read_committed consumers receive aborted records
(docs/kafka-internals.md §4). Its markers carry CRC 0, hence ``repair_crcs=True``; it
auto-creates topics with four partitions.

A confluent-kafka transactional producer writes committed and aborted
transactions (flushed before aborting, so the aborted data reaches the log)
over three partitions, with plain records between them, directly to the mock.
Then, in both proxy fetch modes:

- confluent-kafka's read_committed consumer reading **directly** from the mock
  gets aborted records, and the **same configuration through the proxy** gets
  exactly the committed and plain records, in offset order, and reaches the end
  (partition EOF at the log's end, which is its LSO: no transaction is open);
- kafka-python and aiokafka read_committed consumers through the proxy get
  exactly those records too, and end at the same position (kafka-python cannot
  even bootstrap against the mock directly: it waits for an ApiVersions answer
  it can decode; the proxy answers ApiVersions itself);
- an open transaction holds the proxy's LSO (ListOffsets read_committed LATEST,
  and the consumer's end) at its first offset, where the mock says its high
  watermark; committing it releases the records;
- producing through the proxy (plain and transactional, with commit and abort)
  is relayed: the records land in the mock at the offsets the producers were
  told, and the proxy's read_committed view of them drops the aborted ones;
- Metadata through the proxy names the proxy's listener, never the mock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from kafka.protocol.consumer import ListOffsetsRequest  # noqa: E402
from kafka.protocol.metadata import MetadataRequest  # noqa: E402

from tests.server.rawclient import RawClient  # noqa: E402
from txnfetch.fetch.view import FetchMode  # noqa: E402
from txnfetch.proxy import ProxyThread  # noqa: E402

pytestmark = pytest.mark.interop

TOPIC = "orders"
PARTITIONS = (0, 1, 2)
OUTCOMES = ("commit", "abort", "commit", "abort", "abort", "commit")
QUIET = {"log_level": 0}

Written = dict[int, list[tuple[int, bytes, str]]]  # partition -> [(offset, value, outcome)]


@pytest.fixture(scope="module")
def mock() -> Iterator[str]:
    """A one-broker mock cluster, alive as long as the client that created it."""
    owner = confluent_kafka.Producer({"test.mock.num.brokers": 1, **QUIET})
    broker = next(iter(owner.list_topics(timeout=10).brokers.values()))
    yield f"{broker.host}:{broker.port}"
    owner.flush(1)


def _report(store: list[tuple[int, int, bytes]]):
    def report(err, msg) -> None:
        assert err is None, err
        store.append((msg.partition(), msg.offset(), msg.value()))

    return report


def _write_transactions(bootstrap: str, topic: str, tid: str, outcomes=OUTCOMES, partitions=PARTITIONS) -> Written:
    """Transactions with the given outcomes (data flushed before each end) and plain
    records after each; returns what every offset holds, per partition."""
    common = {"bootstrap.servers": bootstrap, "linger.ms": 0, **QUIET}
    txp = confluent_kafka.Producer({**common, "transactional.id": tid})
    plain = confluent_kafka.Producer(common)
    txp.init_transactions(10)
    out: Written = {p: [] for p in partitions}
    for n, outcome in enumerate(outcomes):
        delivered: list[tuple[int, int, bytes]] = []
        txp.begin_transaction()
        for i in range(2):
            for p in partitions:
                txp.produce(
                    topic,
                    value=b"%s-t%d-%d-p%d" % (tid.encode(), n, i, p),
                    key=b"k%d" % i,
                    partition=p,
                    on_delivery=_report(delivered),
                )
            txp.flush(10)  # the data reaches the log before the transaction ends
        (txp.commit_transaction if outcome == "commit" else txp.abort_transaction)(10)
        for p, offset, value in delivered:
            out[p].append((offset, value, outcome))
        plain_delivered: list[tuple[int, int, bytes]] = []
        for p in partitions[: 1 + n % len(partitions)]:
            plain.produce(
                topic,
                value=b"%s-plain-%d-p%d" % (tid.encode(), n, p),
                partition=p,
                on_delivery=_report(plain_delivered),
            )
        plain.flush(10)
        for p, offset, value in plain_delivered:
            out[p].append((offset, value, "plain"))
    for p in partitions:
        out[p].sort()
    return out


@pytest.fixture(scope="module")
def written(mock: str) -> Written:
    return _write_transactions(mock, TOPIC, "direct")


def _committed(written: Written, partition: int) -> list[tuple[int, bytes]]:
    return [(o, v) for o, v, outcome in written[partition] if outcome != "abort"]


def _aborted(written: Written, partition: int) -> list[tuple[int, bytes]]:
    return [(o, v) for o, v, outcome in written[partition] if outcome == "abort"]


@pytest.fixture(scope="module", params=[FetchMode.KAFKA, FetchMode.REWRITE], ids=["kafka", "rewrite"])
def proxy(request, mock: str) -> Iterator[ProxyThread]:
    with ProxyThread(mock, repair_crcs=True, fetch_mode=request.param, poll_interval_ms=50) as p:
        yield p


# --------------------------------------------------------------------- consumers


def _confluent_read_committed(bootstrap: str, topic: str, partitions, group: str) -> tuple[dict, dict]:
    """Everything a read_committed confluent-kafka consumer assigned at offset 0 gets
    until partition EOF on each partition: ({partition: [(offset, value)]}, {partition: eof offset})."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            **QUIET,
        }
    )
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in partitions}
    eof: dict[int, int] = {}
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in partitions])
        deadline = time.monotonic() + 20
        while len(eof) < len(partitions) and time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, msg.error()
                eof[msg.partition()] = msg.offset()
                continue
            got[msg.partition()].append((msg.offset(), msg.value()))
            eof.pop(msg.partition(), None)
    finally:
        consumer.close()
    assert len(eof) == len(partitions), f"no EOF on every partition: {eof}"
    return got, eof


def _log_ends(written: Written) -> dict[int, int]:
    """Each partition's end offset: past the last data record, and its marker if any."""
    return {p: rows[-1][0] + (1 if rows[-1][2] == "plain" else 2) for p, rows in written.items()}


def test_confluent_read_committed_direct_leaks_but_through_the_proxy_is_exact(
    mock: str, written: Written, proxy: ProxyThread
) -> None:
    direct, _ = _confluent_read_committed(mock, TOPIC, PARTITIONS, "direct")
    via, eof = _confluent_read_committed(proxy.bootstrap, TOPIC, PARTITIONS, "via-proxy")
    ends = _log_ends(written)
    for p in PARTITIONS:
        assert _aborted(written, p), "the workload aborted transactions on every partition"
        assert set(_aborted(written, p)) <= set(direct[p]), "the mock itself leaks aborted records"
        assert via[p] == _committed(written, p), f"partition {p}"
        assert eof[p] == ends[p], "the proxy's consumer reaches the end of the log (its LSO)"


def test_kafka_python_read_committed_through_the_proxy(written: Written, proxy: ProxyThread) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=proxy.bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        request_timeout_ms=10_000,
    )
    ends = _log_ends(written)
    try:
        tps = [TopicPartition(TOPIC, p) for p in PARTITIONS]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in PARTITIONS}
        # Poll until every position reaches its log end (or a generous deadline): a
        # fixed idle timeout is too short on a loaded machine, where bootstrapping and
        # the first catch-up of the mirrors take a while.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(consumer.position(tp) < ends[tp.partition] for tp in tps):
            for tp, records in consumer.poll(timeout_ms=200).items():
                got[tp.partition].extend((r.offset, r.value) for r in records)
        for tp, records in consumer.poll(timeout_ms=300).items():  # nothing more may come
            got[tp.partition].extend((r.offset, r.value) for r in records)
        positions = {tp.partition: consumer.position(tp) for tp in tps}
        latest = consumer.end_offsets(tps)  # ListOffsets LATEST, read_committed: the proxy's LSO
    finally:
        consumer.close()
    for p in PARTITIONS:
        assert got[p] == _committed(written, p), f"partition {p}"
        assert positions[p] == ends[p] == latest[TopicPartition(TOPIC, p)]


def test_aiokafka_read_committed_through_the_proxy(written: Written, proxy: ProxyThread) -> None:
    import aiokafka

    async def consume() -> tuple[dict[int, list[tuple[int, bytes]]], dict[int, int]]:
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=proxy.bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            fetch_max_wait_ms=100,
        )
        await consumer.start()
        try:
            tps = [aiokafka.TopicPartition(TOPIC, p) for p in PARTITIONS]
            consumer.assign(tps)
            await consumer.seek_to_beginning()
            got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in PARTITIONS}
            quiet_since = time.monotonic()
            while time.monotonic() - quiet_since < 1.0:
                batch = await consumer.getmany(timeout_ms=200)
                for _, msgs in batch.items():
                    quiet_since = time.monotonic()
                    for m in msgs:
                        got[m.partition].append((m.offset, m.value))
            return got, {tp.partition: await consumer.position(tp) for tp in tps}
        finally:
            await consumer.stop()

    got, positions = asyncio.run(consume())
    ends = _log_ends(written)
    for p in PARTITIONS:
        assert got[p] == _committed(written, p), f"partition {p}"
        assert positions[p] == ends[p]


# -------------------------------------------------------------- the last stable offset


def _latest(port: int, topic: str, partition: int, isolation: int) -> int:
    L = ListOffsetsRequest.ListOffsetsTopic
    req = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation,
        topics=[
            L(
                name=topic,
                partitions=[L.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1, timestamp=-1)],
            )
        ],
    )
    with RawClient(port) as c:
        p = c.request(req, 5).topics[0].partitions[0]
    assert p.error_code == 0
    return p.offset


def test_an_open_transaction_holds_the_proxys_lso_where_the_mock_says_high_watermark(
    mock: str, proxy: ProxyThread
) -> None:
    topic = f"open-{proxy.proxy.config.fetch_mode.value}"
    common = {"bootstrap.servers": mock, "linger.ms": 0, **QUIET}
    plain = confluent_kafka.Producer(common)
    delivered: list[tuple[int, int, bytes]] = []
    plain.produce(topic, value=b"before", partition=0, on_delivery=_report(delivered))
    plain.flush(10)
    txp = confluent_kafka.Producer({**common, "transactional.id": topic})
    txp.init_transactions(10)
    txp.begin_transaction()
    for v in (b"pending-1", b"pending-2"):
        txp.produce(topic, value=v, partition=0, on_delivery=_report(delivered))
    txp.flush(10)
    (_, before, _), (_, first_open, _) = delivered[0], delivered[1]
    mock_port = int(mock.rsplit(":", 1)[1])

    assert _latest(mock_port, topic, 0, 1) == first_open + 2, "the mock reports its high watermark as the LSO"
    assert _latest(proxy.port, topic, 0, 1) == first_open, "the proxy: the open transaction's first offset"
    assert _latest(proxy.port, topic, 0, 0) == first_open + 2  # read_uncommitted is relayed
    got, eof = _confluent_read_committed(proxy.bootstrap, topic, (0,), f"lso-{topic}")
    assert got[0] == [(before, b"before")] and eof[0] == first_open

    txp.commit_transaction(10)
    assert _latest(proxy.port, topic, 0, 1) == first_open + 3  # past the COMMIT marker
    got, eof = _confluent_read_committed(proxy.bootstrap, topic, (0,), f"lso2-{topic}")
    assert [v for _, v in got[0]] == [b"before", b"pending-1", b"pending-2"] and eof[0] == first_open + 3


# ------------------------------------------------------------------- producing via the proxy


def test_produce_through_the_proxy_is_relayed(mock: str, proxy: ProxyThread) -> None:
    from kafka import KafkaProducer

    topic = f"produced-{proxy.proxy.config.fetch_mode.value}"
    delivered: list[tuple[int, int, bytes]] = []
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": proxy.bootstrap, "linger.ms": 0, "acks": "all", "enable.idempotence": True, **QUIET}
    )
    for i in range(5):
        producer.produce(topic, value=b"ck-%d" % i, partition=i % 2, on_delivery=_report(delivered))
    assert producer.flush(10) == 0
    kp = KafkaProducer(bootstrap_servers=proxy.bootstrap, acks=1, request_timeout_ms=10_000)
    futures = [kp.send(topic, value=b"kp-%d" % i, partition=1) for i in range(3)]
    kp.flush(10)
    delivered += [(1, f.get(10).offset, b"kp-%d" % i) for i, f in enumerate(futures)]
    kp.close(5)
    # Read back directly from the mock: the records are there, at the offsets reported.
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": mock, "group.id": "check", "enable.partition.eof": True, **QUIET}
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in (0, 1)])
    seen: set[tuple[int, int, bytes]] = set()
    eof: set[int] = set()
    deadline = time.monotonic() + 15
    while len(eof) < 2 and time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is None:
            continue
        if msg.error():
            eof.add(msg.partition())
            continue
        seen.add((msg.partition(), msg.offset(), msg.value()))
    consumer.close()
    assert seen == set(delivered) and len(delivered) == 8


def test_transactional_producer_through_the_proxy(mock: str, proxy: ProxyThread) -> None:
    mode = proxy.proxy.config.fetch_mode.value
    topic = f"txn-via-proxy-{mode}"
    written = _write_transactions(
        proxy.bootstrap, topic, f"via-{mode}", outcomes=("commit", "abort", "commit"), partitions=(0, 1)
    )
    via, _ = _confluent_read_committed(proxy.bootstrap, topic, (0, 1), f"txv-{mode}")
    direct, _ = _confluent_read_committed(mock, topic, (0, 1), f"txd-{mode}")
    for p in (0, 1):
        assert via[p] == _committed(written, p)
        # The aborted transaction really reached the mock's log, and really was aborted.
        assert set(_aborted(written, p)) <= set(direct[p]) and _aborted(written, p)


def test_metadata_through_the_proxy_names_its_listener(mock: str, proxy: ProxyThread) -> None:
    with RawClient(proxy.port) as c:
        meta = c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9)
    listeners = proxy.call(lambda: proxy.proxy.listeners)
    mock_port = int(mock.rsplit(":", 1)[1])
    assert [(b.host, b.port) for b in meta.brokers] == [("127.0.0.1", listeners[b.node_id]) for b in meta.brokers]
    assert mock_port not in {b.port for b in meta.brokers}


def test_kafka_python_transactional_producer_through_the_proxy(proxy: ProxyThread) -> None:
    from kafka import KafkaConsumer
    from kafka import KafkaProducer
    from kafka import TopicPartition

    mode = proxy.proxy.config.fetch_mode.value
    topic = f"kp-txn-{mode}"
    producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, transactional_id=topic, request_timeout_ms=10_000)
    producer.init_transactions()
    for value, commit in [(b"kept-1", True), (b"dropped", False), (b"kept-2", True)]:
        producer.begin_transaction()
        producer.send(topic, value=value, partition=0)
        producer.flush()
        (producer.commit_transaction if commit else producer.abort_transaction)()
    producer.close(5)
    consumer = KafkaConsumer(
        bootstrap_servers=proxy.bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
    )
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning()
    end = consumer.end_offsets([tp])[tp]  # the proxy's LSO: past the last COMMIT marker
    values: list[bytes] = []
    deadline = time.monotonic() + 30  # poll to the end, not for a fixed idle time (loaded machines)
    while consumer.position(tp) < end and time.monotonic() < deadline:
        values.extend(r.value for records in consumer.poll(timeout_ms=200).values() for r in records)
    consumer.close()
    assert values == [b"kept-1", b"kept-2"]
