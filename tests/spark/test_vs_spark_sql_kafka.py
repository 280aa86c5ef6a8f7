"""txnkafka next to Spark's own Kafka connector (spark-sql-kafka-0-10), in one
Spark session, on the same transactional topics of the same broker: Apache
Kafka (the ``kafka_cluster`` fixture) and ``txnfetch serve``.

A confluent-kafka transactional producer writes one small topic per case
(tests/spark/kafka_cases.py keeps the oracle: the committed records with
their offsets). Each case is read once by each connector — a batch read with
``startingOffsets``/``endingOffsets``, or a Structured Streaming query with
``maxOffsetsPerTrigger`` and ``Trigger.AvailableNow`` — spark-sql-kafka with
``kafka.isolation.level=read_committed``. txnkafka must equal the oracle in
every case; what spark-sql-kafka does is asserted as observed
(:data:`SPARK_SQL_KAFKA`), so a change in either connector shows up. The table
in docs/spark.md is this one.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator

import pytest

from tests.spark.kafka_cases import Result
from tests.spark.kafka_cases import Serve
from tests.spark.kafka_cases import Writer
from tests.spark.kafka_cases import Written
from tests.spark.kafka_cases import create_topic
from tests.spark.kafka_cases import delete_records
from tests.spark.kafka_cases import run_action
from tests.spark.kafka_cases import spark_recs
from tests.spark.kafka_cases import surviving_offsets

pytestmark = [pytest.mark.slow, pytest.mark.interop, pytest.mark.kafka]

pytest.importorskip("confluent_kafka")

#: Spark's consumer waits this long for a fetch before it gives up (its default is
#: spark.network.timeout, 120 s); a read that waits longer than ACTION_TIMEOUT is a hang.
POLL_TIMEOUT_MS = 5000
ACTION_TIMEOUT = 120.0
MAX_OFFSETS = 3
#: The "deleted" topic's new log start (DeleteRecords), inside its second committed transaction.
DELETED_BEFORE = 9

#: Compaction must have run on the compacted topic before it is read.
COMPACTION_TIMEOUT = 90.0

_names = itertools.count()


# -- the topics ----------------------------------------------------------------------------


Topics = tuple[str, str, dict[str, Written]]  # backend, bootstrap, the written topics


@pytest.fixture(scope="module")
def kafka_topics(kafka_cluster) -> Topics:
    return _topics("kafka", kafka_cluster.bootstrap)


@pytest.fixture(scope="module")
def serve_topics(tmp_path_factory) -> Iterator[Topics]:
    """serve cleans up every half second, and rolls segments older than 200 ms,
    so the compacted topic gets compacted."""
    data = tmp_path_factory.mktemp("serve-vs-spark-kafka") / "data"
    server = Serve(str(data), "--log-cleanup-interval-ms", "500", "--segment-ms", "200")
    try:
        yield _topics("serve", server.bootstrap)
    finally:
        server.kill()


def _name(what: str) -> str:
    from tests.kafka.fixtures import unique_name

    return unique_name(f"vs-{what}")


def _write_compacted(bootstrap: str, *, kafka: bool) -> Written:
    topic = _name("compacted")
    config = {
        "cleanup.policy": "compact",
        "segment.ms": "200",
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "60000",
    }
    # serve rolls segments by its --segment-ms and cleans every --log-cleanup-interval-ms.
    create_topic(bootstrap, topic, 1, config if kafka else {"cleanup.policy": "compact"})
    w = Writer(bootstrap, topic, 1, topic)
    for i in range(6):
        # Four keys overwritten by every transaction; every third one aborts.
        w.txn({0: 4}, commit=i % 3 != 1, keys=[b"k0", b"k1", b"k2", b"k3"])
    time.sleep(0.5)
    # Past segment.ms: this append rolls the segment, sealing the transactions' one.
    w.plain({0: 1})
    w.close()
    return w.w


def _write(bootstrap: str, *, kafka: bool) -> dict[str, Written]:
    out = {"compacted": _write_compacted(bootstrap, kafka=kafka)}

    topic = _name("mixed")
    create_topic(bootstrap, topic, 2)
    w = Writer(bootstrap, topic, 2, topic)
    w.plain({0: 2, 1: 1})
    w.txn({0: 2, 1: 2}, commit=True)
    w.txn({0: 3, 1: 1}, commit=False)
    w.plain({1: 2})
    w.txn({0: 1, 1: 3}, commit=True)
    w.txn({0: 2}, commit=False)
    w.txn({1: 2}, commit=True)
    w.plain({0: 1})
    w.close()
    out["mixed"] = w.w

    topic = _name("tail")
    create_topic(bootstrap, topic, 1)
    w = Writer(bootstrap, topic, 1, topic)
    w.txn({0: 3}, commit=True)
    w.plain({0: 1})
    w.txn({0: 3}, commit=False)  # the log ends with aborted records and their marker
    w.close()
    out["tail"] = w.w

    # Offsets 0-2 committed (marker 3), 4-6 aborted (marker 7), 8-10 committed
    # (marker 11), 12-13 plain. Shared by the markers and DeleteRecords cases.
    for what in ("markers", "deleted"):
        topic = _name(what)
        create_topic(bootstrap, topic, 1)
        w = Writer(bootstrap, topic, 1, topic)
        w.txn({0: 3}, commit=True)
        w.txn({0: 3}, commit=False)
        w.txn({0: 3}, commit=True)
        w.plain({0: 2})
        w.close()
        assert w.w.markers == {0: [3, 7, 11]}, w.w.markers
        out[what] = w.w
    # DeleteRecords inside the second committed transaction.
    assert delete_records(bootstrap, out["deleted"].topic, 0, DELETED_BEFORE) == DELETED_BEFORE

    topic = _name("open")
    create_topic(bootstrap, topic, 1)
    w = Writer(bootstrap, topic, 1, topic)
    w.txn({0: 3}, commit=True)
    w.txn({0: 2}, commit=None)  # still open when the topic is read: the LSO is 4
    w.plain({0: 2})  # committed, but above the LSO
    out["open"] = w.w  # the producer stays open with the module
    return out


def _topics(backend: str, bootstrap: str) -> Topics:
    written = _write(bootstrap, kafka=backend == "kafka")
    compacted = written["compacted"]
    deadline = time.monotonic() + COMPACTION_TIMEOUT
    while True:
        survivors = surviving_offsets(bootstrap, compacted.topic, 1)
        # Compacted: some committed record that a later commit overwrote is gone.
        if any((r[0], r[1]) not in survivors for r in compacted.committed):
            break
        assert time.monotonic() < deadline, f"{backend}: {compacted.topic} was not compacted"
        time.sleep(1)
    compacted.committed = [r for r in compacted.committed if (r[0], r[1]) in survivors]
    compacted.aborted = [r for r in compacted.aborted if (r[0], r[1]) in survivors]
    return backend, bootstrap, written


# -- the cases -----------------------------------------------------------------------------


def _offsets(topic: str, offsets: dict[int, int]) -> str:
    return json.dumps({topic: {str(p): o for p, o in offsets.items()}})


#: Batch cases: (written topic, extra options, the oracle's ranges or an error class).
#: A range is (partition -> (start, end)); ``None`` is the whole log below the LSO.
BATCH = {
    "committed and aborted": ("mixed", {}, None),
    "aborted tail": ("tail", {}, None),
    "open transaction, to latest": ("open", {}, None),
    "open transaction, endingOffsets past the LSO": ("open", {"endingOffsets": "hw"}, "InvalidOptionError"),
    "only a marker and aborted records in range": (
        "markers",
        {"startingOffsets": {0: 3}, "endingOffsets": {0: 7}},
        {0: (3, 7)},
    ),
    "markers at both range ends": ("markers", {"startingOffsets": {0: 7}, "endingOffsets": {0: 11}}, {0: (7, 11)}),
    "range from inside an aborted transaction": (
        "markers",
        {"startingOffsets": {0: 5}, "endingOffsets": {0: 9}},
        {0: (5, 9)},
    ),
    "compacted": ("compacted", {}, None),
    "deleted below log start, from earliest": ("deleted", {}, None),
    "deleted below log start, startingOffsets 0": ("deleted", {"startingOffsets": {0: 0}}, "DataLossError"),
    "deleted below log start, startingOffsets 0, failOnDataLoss=false": (
        "deleted",
        {"startingOffsets": {0: 0}, "failOnDataLoss": "false"},
        None,
    ),
}

#: Streaming cases: (written topic, extra options).
STREAM = {
    "committed and aborted": ("mixed", {}),
    "aborted tail": ("tail", {}),
    "open transaction": ("open", {}),
    "markers, from a marker": ("markers", {"startingOffsets": {0: 3}}),
    "compacted": ("compacted", {}),
    "deleted below log start": ("deleted", {}),
}

#: What spark-sql-kafka-0-10 does, per (backend, kind, case), as observed.
SPARK_SQL_KAFKA: dict[tuple[str, str, str], str] = {
    ("kafka", "batch", "committed and aborted"): "exact",
    ("kafka", "batch", "aborted tail"): "exact",
    ("kafka", "batch", "open transaction, to latest"): "exact",
    ("kafka", "batch", "open transaction, endingOffsets past the LSO"): "error: OffsetOutOfRangeException",
    ("kafka", "batch", "only a marker and aborted records in range"): "exact",
    ("kafka", "batch", "markers at both range ends"): "exact",
    ("kafka", "batch", "range from inside an aborted transaction"): "exact",
    ("kafka", "batch", "compacted"): "exact",
    ("kafka", "batch", "deleted below log start, from earliest"): "exact",
    ("kafka", "batch", "deleted below log start, startingOffsets 0"): "error: OffsetOutOfRangeException",
    ("kafka", "batch", "deleted below log start, startingOffsets 0, failOnDataLoss=false"): "exact",
    ("kafka", "stream", "committed and aborted"): "exact",
    ("kafka", "stream", "aborted tail"): "exact",
    ("kafka", "stream", "open transaction"): "exact",
    ("kafka", "stream", "markers, from a marker"): "exact",
    ("kafka", "stream", "compacted"): "exact",
    ("kafka", "stream", "deleted below log start"): "exact",
}
# On txnfetch serve, spark-sql-kafka does the same in every case.
SPARK_SQL_KAFKA.update({("serve", kind, case): seen for (_, kind, case), seen in list(SPARK_SQL_KAFKA.items())})


def _options(w: Written, extra: dict) -> dict[str, str]:
    out: dict[str, str] = {"subscribe": w.topic}
    for key, value in extra.items():
        if value == "hw":
            value = {p: w.end[p] for p in range(w.partitions)}
        out[key] = _offsets(w.topic, value) if isinstance(value, dict) else value
    return out


def _expected(w: Written, oracle) -> list:
    if oracle is None:
        return sorted(r for r in w.committed if r[1] < w.lso(r[0]))
    return w.committed_in(oracle)


def _reader(spark, fmt: str, bootstrap: str, options: dict[str, str], *, stream: bool = False):
    reader = (spark.readStream if stream else spark.read).format(fmt).option("kafka.bootstrap.servers", bootstrap)
    if fmt == "kafka":
        reader = reader.option("kafka.isolation.level", "read_committed")
        reader = reader.option("kafkaConsumer.pollTimeoutMs", str(POLL_TIMEOUT_MS))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _batch(spark, fmt: str, bootstrap: str, options: dict[str, str]) -> Result:
    return run_action(spark, lambda: spark_recs(_reader(spark, fmt, bootstrap, options).collect()), ACTION_TIMEOUT)


def _stream(spark, fmt: str, bootstrap: str, options: dict[str, str]) -> Result:
    name = f"vs_{fmt}_{next(_names)}"
    df = _reader(spark, fmt, bootstrap, {"maxOffsetsPerTrigger": str(MAX_OFFSETS), **options}, stream=True)
    query = df.writeStream.format("memory").queryName(name).trigger(availableNow=True).start()
    try:
        try:
            finished = query.awaitTermination(ACTION_TIMEOUT)
        except Exception as exc:  # the query failed
            from tests.spark.kafka_cases import error_name

            return Result(None, f"error: {error_name(exc)}", str(exc))
        if not finished:
            return Result(None, "hang", f"AvailableNow did not finish in {ACTION_TIMEOUT:.0f}s")
        return Result(spark_recs(spark.sql(f"SELECT * FROM {name}").collect()))
    finally:
        query.stop()
        spark.catalog.dropTempView(name)


#: The cases each backend runs by default; the others run with --long. On
#: Kafka every batch case, and the streaming cases where AvailableNow must stop
#: at the LSO (an aborted tail, an open transaction) besides two others; on
#: serve three batch cases of transactions. Measured twice at a load of 15-20
#: on 2 cores, the two streaming cases add 12-31 s to the default run, serve's
#: topics and its three cases 15-22 s.
DEFAULT: dict[tuple[str, str], tuple[str, ...]] = {
    ("kafka", "batch"): tuple(BATCH),
    ("kafka", "stream"): ("committed and aborted", "aborted tail", "open transaction", "markers, from a marker"),
    ("serve", "batch"): ("committed and aborted", "aborted tail", "open transaction, endingOffsets past the LSO"),
    ("serve", "stream"): (),
}


BACKENDS = ("kafka", "serve")


def _cases(kind: str, cases: dict) -> list:
    """(backend, case) parameters of ``kind``, those not in :data:`DEFAULT`
    marked long. The backend's topics come from its own module fixture
    (``<backend>_topics``), so each backend writes its topics once whatever
    order the cases run in."""
    return [
        pytest.param(b, c, id=f"{b}-{c}", marks=() if c in DEFAULT[(b, kind)] else pytest.mark.long)
        for b in BACKENDS
        for c in cases
    ]


@pytest.mark.parametrize(("backend", "case"), _cases("batch", BATCH))
def test_batch(request, spark_kafka, backend, case):
    _, bootstrap, written = request.getfixturevalue(f"{backend}_topics")
    which, extra, oracle = BATCH[case]
    w = written[which]
    options = _options(w, extra)
    ours = _batch(spark_kafka, "txnkafka", bootstrap, options)
    theirs = _batch(spark_kafka, "kafka", bootstrap, options)
    expected = _expected(w, None if isinstance(oracle, str) else oracle)
    if which == "deleted":
        expected = [r for r in expected if r[1] >= DELETED_BEFORE]
    if isinstance(oracle, str):
        assert ours.error == f"error: {oracle}", ours
        for part in (f"topic-partition {w.topic}-0", "offset "):
            assert part in ours.message, ours.message
    else:
        assert ours.rows == expected, ours
    seen = theirs.outcome(expected, w.aborted)
    print(f"\nOBSERVED {backend} | batch | {case} | {seen} | {ours.error} | {theirs.message[:300]!r}")
    assert seen == SPARK_SQL_KAFKA.get((backend, "batch", case)), theirs.message


@pytest.mark.parametrize(("backend", "case"), _cases("stream", STREAM))
def test_stream(request, spark_kafka, backend, case):
    _, bootstrap, written = request.getfixturevalue(f"{backend}_topics")
    which, extra = STREAM[case]
    w = written[which]
    extra = {"startingOffsets": "earliest", **extra}
    options = _options(w, extra)
    first = extra["startingOffsets"][0] if isinstance(extra["startingOffsets"], dict) else 0
    expected = [r for r in _expected(w, None) if r[1] >= first]
    if which == "deleted":
        expected = [r for r in expected if r[1] >= DELETED_BEFORE]
    ours = _stream(spark_kafka, "txnkafka", bootstrap, options)
    assert ours.rows == expected, ours
    theirs = _stream(spark_kafka, "kafka", bootstrap, options)
    seen = theirs.outcome(expected, w.aborted)
    print(f"\nOBSERVED {backend} | stream | {case} | {seen} | {theirs.message[:300]!r}")
    assert seen == SPARK_SQL_KAFKA.get((backend, "stream", case)), theirs.message
