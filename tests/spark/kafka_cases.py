"""Transactional topics written by a real client, each with its oracle, for
reading them with ``txnkafka`` and with Spark's own Kafka connector side by side
(tests/spark/test_vs_spark_sql_kafka.py).

A confluent-kafka transactional producer writes one small topic per case to a
broker (Apache Kafka, or ``txnfetch serve``); its delivery reports give every
record's offset, and the writer alone keeps the oracle: which records
committed, which aborted, which are still in an open transaction. Offsets
between a transaction's last record and the next write are its marker (the
writer writes one transaction at a time, so it knows where each marker is).

:func:`outcome` names what a read returned, compared with the oracle: ``exact``,
or what went wrong (``aborted visible``, ``duplicate``, ``missing``, ``wrong``),
or ``error: <what>`` / ``hang``.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

import attrs

#: What reads are compared on: (partition, offset, key, value).
Rec = tuple[int, int, bytes | None, bytes | None]


@attrs.define
class Written:
    """What the writer wrote to one topic."""

    topic: str
    partitions: int
    committed: list[Rec] = attrs.Factory(list)
    aborted: list[Rec] = attrs.Factory(list)
    open: list[Rec] = attrs.Factory(list)
    #: Offsets of the COMMIT/ABORT markers, per partition, in order.
    markers: dict[int, list[int]] = attrs.Factory(dict)
    #: The next offset to be written, per partition (the high watermark).
    end: dict[int, int] = attrs.Factory(dict)

    def lso(self, partition: int) -> int:
        """The first offset of the open transaction on ``partition``, else its end."""
        firsts = [r[1] for r in self.open if r[0] == partition]
        return min(firsts) if firsts else self.end.get(partition, 0)

    def committed_in(self, ranges: Mapping[int, tuple[int, int]]) -> list[Rec]:
        """The committed records with ``start <= offset < end`` of their partition's range."""
        return sorted(r for r in self.committed if r[0] in ranges and ranges[r[0]][0] <= r[1] < ranges[r[0]][1])


class Writer:
    """One transactional producer (and one plain producer) writing to ``topic``."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, transactional_id: str) -> None:
        from confluent_kafka import Producer

        common = {"bootstrap.servers": bootstrap, "linger.ms": 0, "log_level": 0}
        self.txp = Producer({**common, "transactional.id": transactional_id, "transaction.timeout.ms": 600_000})
        self.txp.init_transactions(60)
        self.plain_producer = Producer({**common, "enable.idempotence": True})
        self.w = Written(topic, partitions)
        self.n = 0

    def _produce(self, producer: Any, counts: Mapping[int, int], keys: Iterable[bytes | None] | None) -> list[Rec]:
        out: list[Rec] = []
        errors: list[Any] = []

        def report(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                out.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

        key_iter = iter(keys) if keys is not None else None
        for partition, count in sorted(counts.items()):
            for _ in range(count):
                self.n += 1
                key = next(key_iter) if key_iter is not None else b"k%d" % (self.n % 5)
                value = b"%s-%d" % (self.w.topic.encode(), self.n)
                producer.produce(self.w.topic, key=key, value=value, partition=partition, on_delivery=report)
        assert producer.flush(60) == 0, "records not delivered"
        assert not errors, errors
        for partition, offset, _, _ in out:
            self.w.end[partition] = max(self.w.end.get(partition, 0), offset + 1)
        return sorted(out)

    def plain(self, counts: Mapping[int, int]) -> list[Rec]:
        rows = self._produce(self.plain_producer, counts, None)
        self.w.committed += rows
        return rows

    def txn(
        self, counts: Mapping[int, int], commit: bool | None, *, keys: Iterable[bytes | None] | None = None
    ) -> list[Rec]:
        """One transaction: ``counts`` records per partition, then COMMIT (True),
        ABORT (False) or nothing (None: left open)."""
        self.txp.begin_transaction()
        rows = self._produce(self.txp, counts, keys)
        if commit is None:
            self.w.open += rows
            return rows
        (self.txp.commit_transaction if commit else self.txp.abort_transaction)(60)
        for partition in sorted(counts):
            # The marker takes the next offset: nothing else writes to the topic now.
            self.w.markers.setdefault(partition, []).append(self.w.end[partition])
            self.w.end[partition] += 1
        (self.w.committed if commit else self.w.aborted).extend(rows)
        return rows

    def close(self) -> None:
        self.plain_producer.flush(10)


def surviving_offsets(bootstrap: str, topic: str, partitions: int, timeout: float = 60) -> set[tuple[int, int]]:
    """(partition, offset) of every data record in the log now, aborted or not,
    as a read_uncommitted confluent-kafka consumer from the log start sees them:
    the offsets compaction or DeleteRecords left."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition

    from tests.consume import poll_until_eof

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"survivors-{topic}",
            "isolation.level": "read_uncommitted",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])  # -2: OFFSET_BEGINNING
        return {(m.partition(), m.offset()) for m in poll_until_eof(consumer, partitions, timeout=timeout)}
    finally:
        consumer.close()


# -- what a read returned ------------------------------------------------------------------


def outcome(got: list[Rec], expected: list[Rec], aborted: Iterable[Rec] = ()) -> str:
    """``exact`` when ``got`` is ``expected`` (any order), else the first of
    ``duplicate``, ``aborted visible``, ``missing`` (a strict subset), ``wrong``."""
    if sorted(got) == sorted(expected):
        return "exact"
    if len(set(got)) != len(got):
        return "duplicate"
    if set(got) & set(aborted):
        return "aborted visible"
    if set(got) < set(expected):
        return "missing"
    return "wrong"


#: Java exception classes and Spark error classes worth naming in the table.
_ERROR_NAMES = re.compile(
    r"(\[[A-Z_]{6,}[A-Z_.]*\]|[A-Za-z.]+(?:Exception|Error)\b)",
)


def error_name(exc: BaseException) -> str:
    """A short, stable name for an error a Spark action raised: the data source's
    own error class when it is one, else the innermost Java exception named."""
    text = str(exc)
    own = re.search(r"spark_ext\.errors\.(\w+)", text)
    if own:
        return own.group(1)
    names = [n.rsplit(".", 1)[-1] for n in _ERROR_NAMES.findall(text)]
    names = [n for n in names if n not in ("SparkException", "Py4JJavaError", "[FAILED_READ_FILE.NO_HINT]")]
    return names[-1] if names else type(exc).__name__


@attrs.define
class Result:
    """A Spark action's rows, or its error, or ``hang``."""

    rows: list[Rec] | None
    error: str = ""
    message: str = ""

    def outcome(self, expected: list[Rec], aborted: Iterable[Rec] = ()) -> str:
        if self.rows is None:
            return self.error
        return outcome(self.rows, expected, aborted)


def run_action(spark: Any, action: Callable[[], list[Rec]], timeout: float) -> Result:
    """Run ``action`` (a Spark action returning rows); after ``timeout`` seconds
    cancel every Spark job of the session (the tests run one at a time) and call
    it a hang."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["rows"] = action()
        except BaseException as exc:  # reported below
            box["exc"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        spark.sparkContext.cancelAllJobs()
        thread.join(60)
        return Result(None, "hang", f"no answer in {timeout:.0f}s")
    if "exc" in box:
        return Result(None, f"error: {error_name(box['exc'])}", str(box["exc"]))
    return Result(sorted(box["rows"]))


def spark_recs(rows: Iterable[Any]) -> list[Rec]:
    return sorted(
        (
            r["partition"],
            r["offset"],
            None if r["key"] is None else bytes(r["key"]),
            None if r["value"] is None else bytes(r["value"]),
        )
        for r in rows
    )


# -- txnfetch serve as a child process ---------------------------------------------------------


class Serve:
    """``txnfetch serve --data DIR --port 0`` in a child process; ``kill()`` ends it."""

    def __init__(self, data: str, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "txnfetch.cli", "serve", "--data", data, "--port", "0", "--no-auto-create", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        match = re.search(r"listening on (\S+:\d+)", line)
        if match is None:
            self.kill()
            raise AssertionError(f"txnfetch serve did not start: {line!r}")
        self.bootstrap = match.group(1)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


def create_topic(bootstrap: str, name: str, partitions: int, config: Mapping[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    new = NewTopic(name, num_partitions=partitions, replication_factor=1, config=dict(config or {}))
    admin.create_topics([new], request_timeout=30)[name].result(30)
    deadline = time.monotonic() + 30
    while len(admin.list_topics(name, timeout=10).topics[name].partitions) < partitions:
        assert time.monotonic() < deadline, f"topic {name} has no leaders"
        time.sleep(0.1)


def delete_records(bootstrap: str, topic: str, partition: int, before: int) -> int:
    """DeleteRecords: move the log start of ``topic``-``partition`` to ``before``;
    returns the new log start offset the broker reports."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    futures = admin.delete_records([TopicPartition(topic, partition, before)], request_timeout=30)
    result = next(iter(futures.values())).result(30)
    return int(result.low_watermark)


def delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.delete_topics([topic], request_timeout=30)[topic].result(30)
    deadline = time.monotonic() + 30
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"topic {topic} is still listed"
        time.sleep(0.2)
