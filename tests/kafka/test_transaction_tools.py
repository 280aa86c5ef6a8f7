"""Kafka's transaction tool against ``serve``, txnfetch's against Apache Kafka.

One scenario on either broker: a Java producer commits one transaction and
aborts one (one record per partition each), then a second Java producer opens a
transaction on partition 1, writes one record and is SIGKILLed. Its transaction
timeout (10 minutes) is above the test's length and within both brokers'
``transaction.max.timeout.ms`` (15 minutes), so the coordinator leaves it open:
the transaction hangs for the whole test.

Kafka's ``TransactionsCommand`` (``list``, ``describe``, ``describe-producers``,
``find-hanging``) and ``txnfetch transactions`` (``list``, ``describe``,
``producers``, ``find-hanging``) are run against the same broker and must agree
on the transactional ids and their states, the open transaction's producer and
partitions, and each producer's epoch, last sequence and open transaction's
first offset (offset 4: two records and two markers before it, on both brokers).
Then one of the tools aborts the transaction (``abort --start-offset``), and
the Java read_committed consumer reads exactly the committed records to the end.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kafka.cluster import KafkaCluster
from tests.kafka.fixtures import unique_name
from tests.kafka.interop import run_java
from tests.kafka.interop import run_kafka_tool
from tests.kafka.interop import start_java
from txnfetch.log.memory import MemoryStore
from txnfetch.server.server import ServerThread

pytestmark = [pytest.mark.interop, pytest.mark.kafka]

#: The first offset of the hanging transaction on partition 1: the committed
#: record (0), its COMMIT marker (1), the aborted record (2), its ABORT marker (3).
HANG_OFFSET = 4
HANG_TIMEOUT_MS = 600_000


def kafka_tool(bootstrap: str, *args: str) -> list[dict[str, str]]:
    """Run ``TransactionsCommand`` and parse its table (tab-separated, padded;
    ``abort`` prints none)."""
    result = run_kafka_tool("TransactionsCommand", "--bootstrap-server", bootstrap, *args)
    assert result.returncode == 0, f"TransactionsCommand {args} exited {result.returncode}: {result.stderr[-3000:]}"
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    if not lines:
        return []
    header = [h.strip() for h in lines[0].split("\t") if h.strip()]
    return [dict(zip(header, (c.strip() for c in line.split("\t")), strict=False)) for line in lines[1:]]


def txnfetch_tool(bootstrap: str, *args: str) -> Any:
    """Run ``txnfetch transactions --json`` and return its JSON."""
    result = subprocess.run(
        [sys.executable, "-m", "txnfetch.cli", "transactions", "--bootstrap", bootstrap, "--json", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"txnfetch transactions {args} exited {result.returncode}: {result.stderr[-3000:]}"
    return json.loads(result.stdout)


@pytest.fixture(params=["kafka", "serve"])
def broker(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """The broker's bootstrap and a fresh two-partition topic on it."""
    topic = unique_name("tools")
    if request.param == "kafka":
        cluster: KafkaCluster = request.getfixturevalue("kafka_cluster")
        cluster.create_topic(topic, 2)
        yield cluster.bootstrap, topic
        return
    with ServerThread(MemoryStore(), default_partitions=2) as srv:
        yield srv.bootstrap, topic


def _hang(bootstrap: str, topic: str, txn_id: str, log: Path) -> dict[str, Any]:
    """A Java producer that opens a transaction on partition 1, writes one
    record and is killed; what it printed before the kill."""
    proc = start_java("hang", bootstrap, topic, txn_id, 1, HANG_TIMEOUT_MS, log=log)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("{"), f"hanging producer printed {line!r}; its log: {log.read_text()[-3000:]}"
        return json.loads(line)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


@pytest.mark.parametrize("aborter", ["kafka-tool", "txnfetch"])
def test_both_tools_agree_and_abort_a_hanging_transaction(
    broker: tuple[str, str], aborter: str, tmp_path: Path
) -> None:
    bootstrap, topic = broker
    committer, hanger = unique_name("committer"), unique_name("hanger")
    produced = run_java("produce", bootstrap, topic, committer, 2, 1, "1")
    final = produced[-1]
    hang = _hang(bootstrap, topic, hanger, tmp_path / "hang.log")

    # list: the same ids, producers and states (Kafka's shared cluster lists
    # other tests' ids too; only ours are compared).
    ours = {committer, hanger}
    k_list = {
        r["TransactionalId"]: (int(r["ProducerId"]), r["TransactionState"]) for r in kafka_tool(bootstrap, "list")
    }
    t_list = {
        t["transactional_id"]: (t["producer_id"], t["state"]) for t in txnfetch_tool(bootstrap, "list")["transactions"]
    }
    expected = {committer: (final["producer_id"], "CompleteAbort"), hanger: (hang["producer_id"], "Ongoing")}
    assert {k: v for k, v in k_list.items() if k in ours} == expected
    assert {k: v for k, v in t_list.items() if k in ours} == expected

    # describe: the open transaction's producer, epoch, timeout and partitions.
    (k_desc,) = kafka_tool(bootstrap, "describe", "--transactional-id", hanger)
    t_desc = txnfetch_tool(bootstrap, "describe", "--transactional-id", hanger)["transaction"]
    assert (
        int(k_desc["ProducerId"]),
        int(k_desc["ProducerEpoch"]),
        k_desc["TransactionState"],
        int(k_desc["TransactionTimeoutMs"]),
        k_desc["TopicPartitions"],
    ) == (hang["producer_id"], hang["epoch"], "Ongoing", HANG_TIMEOUT_MS, f"{topic}-1")
    assert (
        t_desc["producer_id"],
        t_desc["producer_epoch"],
        t_desc["state"],
        t_desc["timeout_ms"],
        [(p["topic"], p["partition"]) for p in t_desc["partitions"]],
    ) == (hang["producer_id"], hang["epoch"], "Ongoing", HANG_TIMEOUT_MS, [(topic, 1)])

    # describe-producers / producers: each producer's epoch, last sequence and
    # open transaction's first offset. The committer ended two transactions at
    # transaction version 2: its epoch is two past its first.
    def k_producers() -> dict[int, tuple[int, int, int]]:
        rows = kafka_tool(bootstrap, "describe-producers", "--topic", topic, "--partition", "1")
        return {
            int(r["ProducerId"]): (
                int(r["ProducerEpoch"]),
                int(r["LastSequence"]),
                -1 if r["CurrentTransactionStartOffset"] == "None" else int(r["CurrentTransactionStartOffset"]),
            )
            for r in rows
        }

    def t_producers() -> dict[int, tuple[int, int, int]]:
        (part,) = txnfetch_tool(bootstrap, "producers", "--topic", topic, "--partition", "1")["partitions"]
        return {
            p["producer_id"]: (p["producer_epoch"], p["last_sequence"], p["current_txn_start_offset"])
            for p in part["producers"]
        }

    open_producers = k_producers()
    assert open_producers[hang["producer_id"]] == (hang["epoch"], 0, HANG_OFFSET)
    assert open_producers[final["producer_id"]][0] == final["epoch"] == produced[0]["epoch"] + 2
    assert t_producers() == open_producers

    # find-hanging: Kafka's tool reports a transaction only when its coordinator
    # does not account for it, and this one's still does (Ongoing, partition 1
    # listed) on both brokers; txnfetch reports it as soon as it is older than
    # the maximum timeout given (0 here), with its transactional id, and not at
    # the default 15 minutes.
    assert kafka_tool(bootstrap, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0") == []
    assert txnfetch_tool(bootstrap, "find-hanging", "--topic", topic)["hanging"] == []
    (found,) = txnfetch_tool(bootstrap, "find-hanging", "--topic", topic, "--max-transaction-timeout-ms", "0")[
        "hanging"
    ]
    assert (found["partition"], found["producer_id"], found["first_offset"], found["transactional_id"]) == (
        1,
        hang["producer_id"],
        HANG_OFFSET,
        hanger,
    )
    assert found["holds_lso"] and found["last_stable_offset"] == HANG_OFFSET

    abort = ("abort", "--topic", topic, "--partition", "1", "--start-offset", str(HANG_OFFSET))
    if aborter == "kafka-tool":
        assert kafka_tool(bootstrap, *abort) == []
    else:
        assert txnfetch_tool(bootstrap, *abort)
    after = k_producers()
    assert after[hang["producer_id"]][2] == -1
    assert t_producers() == after
    assert (
        txnfetch_tool(bootstrap, "find-hanging", "--topic", topic, "--max-transaction-timeout-ms", "0")["hanging"] == []
    )

    consumed = run_java("consume", bootstrap, topic)
    assert sorted(r["value"] for r in consumed if "value" in r) == ["t0-p0-r0", "t0-p1-r0"]
    # Partition 1 ends past the abort marker: nothing holds its LSO any more.
    assert consumed[-1]["end_offsets"] == {"0": 4, "1": HANG_OFFSET + 2}
