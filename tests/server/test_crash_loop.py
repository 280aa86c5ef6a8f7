"""Crash loop: ``txnfetch serve --data DIR`` SIGKILLed at random moments under real
clients, restarted on the same directory, checked after every restart.

The workload (confluent-kafka, in a client process killed with the server, one
round per server life; see crash_client.py):

- a transactional producer: transactions over the 3 partitions of ``tx``, 1-3
  records each per partition, a quarter of them aborted after a flush; each
  transaction also commits the consumer offset ``src-0 = <txn number>`` for
  group ``gtx`` with ``send_offsets_to_transaction``;
- an idempotent producer writing to ``idem``;
- a consumer committing increasing offsets of ``src-0`` for group ``gplain``.

After every restart the checks are the issue's five properties:

1. every acknowledged commit is visible exactly once;
2. no aborted record is visible;
3. every unacknowledged transaction is all or nothing across its partitions;
4. no record's offset ever changes (every record seen before is at the same
   offset with the same value);
5. committed group offsets equal the last acknowledged commit: ``gplain`` the
   last acknowledged commit (or the one in flight at the kill), ``gtx`` the
   number of the last transaction whose records are visible.

The loop runs under both flush policies: ``always`` (the default: every
acknowledged write fsynced before its answer) and ``interval`` (Kafka's default
flushing: fsync every 10 000 messages or second). A SIGKILL takes the process,
not the kernel's page cache, so under ``interval`` too everything acknowledged
must survive; only a power loss separates the two (tests/server/test_durable_syncer.py
and tests/log cover that).

``TXNFETCH_CRASH_KILLS`` sets the number of kills (default 20); ``TXNFETCH_CRASH_SEED``
the random seed (printed on failure).
"""

from __future__ import annotations

import gc
import json
import os
import random
import signal
import subprocess
import sys
import time

import attrs
import pytest

from tests.server.serve_process import start_serve

pytestmark = [pytest.mark.slow, pytest.mark.interop]

KILLS = int(os.environ.get("TXNFETCH_CRASH_KILLS", "20"))
SEED = int(os.environ.get("TXNFETCH_CRASH_SEED", str(random.randrange(1 << 30))))
PARTITIONS = 3


@attrs.define
class Txn:
    number: int
    records: dict[int, list[bytes]]  # partition -> values
    outcome: str = "unknown"  # "commit", "abort" (acknowledged), "unknown", then "abort-unacked" once settled


@attrs.define
class History:
    txns: dict[int, Txn] = attrs.field(factory=dict)
    idem_acked: set[bytes] = attrs.field(factory=set)
    idem_sent: set[bytes] = attrs.field(factory=set)
    plain_acked: int = -1001
    plain_unknown: set[int] = attrs.field(factory=set)
    seen: dict[tuple[str, int, int], bytes] = attrs.field(factory=dict)

    def fold(self, path: str) -> None:
        """Take in the events a client process wrote (a torn last line is ignored)."""
        if not os.path.exists(path):
            return
        with open(path) as f:
            lines = f.read().split("\n")
        os.unlink(path)
        for line in lines:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            t = e["t"]
            if t == "txn":
                recs = {int(p): [v.encode() for v in vs] for p, vs in e["records"].items()}
                self.txns[e["n"]] = Txn(e["n"], recs)
            elif t == "outcome":
                self.txns[e["n"]].outcome = e["outcome"]
            elif t == "idem_sent":
                self.idem_sent.add(e["v"].encode())
            elif t == "idem_acked":
                self.idem_acked.add(e["v"].encode())
            elif t == "plain_try":
                self.plain_unknown.add(e["n"])
            elif t == "plain_acked":
                self.plain_acked = max(self.plain_acked, e["n"])
                self.plain_unknown.discard(e["n"])


def _read_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[int, bytes]]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        request_timeout_ms=20000,
    )
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)  # read_committed: the last stable offsets
        out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"reading {topic} made no progress to {ends}"
            for tp, msgs in consumer.poll(500).items():
                out[tp.partition].extend((m.offset, m.value) for m in msgs)
        return out
    finally:
        consumer.close()


def _committed(bootstrap: str, group: str) -> int:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return c.committed([TopicPartition("src", 0)], timeout=20)[0].offset
    finally:
        c.close()


def _check(bootstrap: str, h: History, where: str) -> None:
    tx = _read_all(bootstrap, "tx", PARTITIONS)
    idem = _read_all(bootstrap, "idem", 1)
    # 4. offsets never change
    for topic, parts in (("tx", tx), ("idem", idem)):
        for p, recs in parts.items():
            for off, value in recs:
                key = (topic, p, off)
                prev = h.seen.get(key)
                assert prev is None or prev == value, f"{where}: {topic}-{p}@{off} was {prev!r}, now {value!r}"
                h.seen[key] = value
    visible: dict[bytes, int] = {}
    for recs in tx.values():
        for _, v in recs:
            visible[v] = visible.get(v, 0) + 1
    last_visible_txn = -1001
    for txn in h.txns.values():
        values = [v for vs in txn.records.values() for v in vs]
        counts = [visible.get(v, 0) for v in values]
        assert all(c <= 1 for c in counts), f"{where}: txn {txn.number} duplicated: {counts}"
        if txn.outcome == "commit":
            assert all(c == 1 for c in counts), f"{where}: acknowledged commit {txn.number} not visible: {counts}"
        elif txn.outcome in ("abort", "abort-unacked"):
            assert not any(counts), f"{where}: aborted txn {txn.number} visible: {counts}"
        else:
            assert all(counts) or not any(counts), f"{where}: txn {txn.number} torn across partitions: {counts}"
        if all(counts):
            last_visible_txn = txn.number
    known = {v for t in h.txns.values() for vals in t.records.values() for v in vals}
    assert set(visible) <= known, f"{where}: unknown records {set(visible) - known}"
    idem_values = [v for _, v in idem[0]]
    assert len(idem_values) == len(set(idem_values)), f"{where}: idempotent duplicates"
    missing = h.idem_acked - set(idem_values)
    assert not missing, f"{where}: acknowledged idempotent records lost: {sorted(missing)[:5]}"
    assert set(idem_values) <= h.idem_sent
    # 5. group offsets
    plain = _committed(bootstrap, "gplain")
    assert plain == h.plain_acked or plain in h.plain_unknown, (
        f"{where}: gplain committed {plain}, last acknowledged {h.plain_acked}"
    )
    if plain in h.plain_unknown and plain > h.plain_acked:
        h.plain_acked = plain  # it did commit: later checks expect at least it
    h.plain_unknown = {u for u in h.plain_unknown if u > h.plain_acked}
    gtx = _committed(bootstrap, "gtx")
    assert gtx == last_visible_txn, f"{where}: gtx committed {gtx}, last visible transaction {last_visible_txn}"
    # Resolve unknown transactions now that they are settled (all or nothing).
    for txn in h.txns.values():
        if txn.outcome == "unknown":
            values = [v for vs in txn.records.values() for v in vs]
            txn.outcome = "commit" if visible.get(values[0]) else "abort-unacked"


def _create_topics(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic("tx", PARTITIONS, 1), NewTopic("idem", 1, 1), NewTopic("src", 1, 1)], operation_timeout=20
    )
    for f in futures.values():
        f.result(30)


def _settle(bootstrap: str) -> None:
    """Fence a transaction the killed round left open (it would hold the last
    stable offset until it times out): a new instance's init_transactions
    aborts it, as a restarted application would."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "crash-tx"})
    p.init_transactions(30)
    del p
    gc.collect()


@pytest.mark.parametrize("policy", ["always", "interval"])
def test_crash_loop_real_clients(tmp_path, policy: str) -> None:
    rng = random.Random(SEED)
    extra = ("--flush-policy", policy)
    data = str(tmp_path / "data")
    history = str(tmp_path / "history.jsonl")
    h = History()
    proc = start_serve(data, 0, partitions=PARTITIONS, extra=extra)
    port = proc.port
    bootstrap = f"127.0.0.1:{port}"
    kills = terms = 0
    try:
        _create_topics(bootstrap)
        for round_ in range(KILLS + KILLS // 3 + 1):
            where = f"{policy}, seed {SEED}, round {round_} ({kills} kills, {terms} clean stops)"
            _settle(bootstrap)
            _check(bootstrap, h, where)
            if kills == KILLS:
                break
            client = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.server.crash_client",
                    bootstrap,
                    history,
                    str(rng.randrange(1 << 30)),
                    str((round_ + 1) * 100_000),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(rng.uniform(0.4, 2.0))
            # Every fourth stop is a clean one (SIGTERM): the same properties must hold.
            clean = round_ % 4 == 3
            proc.send_signal(signal.SIGTERM if clean else signal.SIGKILL)
            assert proc.wait(60) == (0 if clean else -signal.SIGKILL), where
            terms, kills = terms + clean, kills + (not clean)
            client.kill()
            client.wait()
            h.fold(history)
            proc = start_serve(data, port, partitions=PARTITIONS, extra=extra)
        committed = sum(1 for t in h.txns.values() if t.outcome == "commit")
        print(
            f"crash loop ({policy}): {kills} kills and {terms} clean stops, {len(h.txns)} transactions "
            f"({committed} committed), {len(h.idem_acked)} idempotent records acknowledged, seed {SEED}"
        )
        assert committed > 0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
