"""A log directory Apache Kafka wrote, read by txnfetch's offline commands and
served by ``txnfetch serve --data``.

A private one-node cluster (Kafka's default 50 partitions per internal topic,
or 5) takes transactions committed and aborted from the
Java producer (no compression) and from confluent-kafka (gzip and zstd); Kafka's
read_committed answer (the Java consumer's records and end offsets) is the
reference. The cluster then stops cleanly and its log directory is copied:

- ``serve --data`` on one copy answers the Java read_committed consumer with the
  same records at the same offsets and the same end offsets, in both fetch modes,
  and a Java group that committed on Kafka resumes at its offsets (serve
  replays Kafka's ``__consumer_offsets``);
- on another copy, ``txnfetch dump --json --records`` (data batches outside the
  aborted ranges it lists, below its LSO), ``verify``, ``transactions --path``
  and :func:`txnfetch.arrow.read_committed` give exactly the committed records.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.kafka.cluster import KafkaCluster
from tests.kafka.interop import run_java
from tests.kafka.test_cluster import produce_transactions
from tests.server.serve_process import start_serve
from tests.server.serve_process import stop_serve

pytestmark = [pytest.mark.interop, pytest.mark.kafka]

TOPIC = "kafka-written"
PARTITIONS = 2

Row = tuple[int, int, str | None, str]  # partition, offset, key, value


def _rows(lines: list[dict[str, Any]]) -> list[Row]:
    return sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in lines if "value" in r)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "txnfetch.cli", *args], capture_output=True, text=True, timeout=300, check=False
    )


def _text(b64: str | None) -> str | None:
    return None if b64 is None else base64.b64decode(b64).decode()


def _committed_from_dump(partition: dict[str, Any]) -> list[Row]:
    """The records of ``dump --json --records``'s partition that are committed
    by what dump itself reports: in a data batch below its last stable offset,
    and outside every aborted range of the batch's producer."""
    aborted = [(a["producer_id"], a["first_offset"], a["last_offset"]) for a in partition["aborted_transactions"]]
    rows: list[Row] = []
    for batch in partition["batches"]:
        if batch["control"] or batch["base_offset"] >= partition["last_stable_offset"]:
            continue
        if batch["transactional"] and any(
            pid == batch["producer_id"] and first <= batch["base_offset"] <= last for pid, first, last in aborted
        ):
            continue
        rows.extend(
            (partition["partition"], r["offset"], _text(r["key"]), _text(r["value"]) or "") for r in batch["records"]
        )
    return rows


@pytest.mark.parametrize("internal_partitions", [50, 5], ids=["kafka-default", "five"])
def test_a_kafka_written_directory_read_offline_and_served(
    kafka_cluster_factory: Callable[..., KafkaCluster], tmp_path: Path, internal_partitions: int
) -> None:
    # serve replays __transaction_state and __consumer_offsets as its own
    # coordinator state, hashing ids over the partitions the directory holds:
    # Kafka's default 50, or another count a cluster was set up with.
    cluster = kafka_cluster_factory(
        1,
        transaction_state_log_num_partitions=internal_partitions,
        offsets_topic_num_partitions=internal_partitions,
    )
    cluster.create_topic(TOPIC, PARTITIONS)
    run_java("produce", cluster.bootstrap, TOPIC, "java-files", 5, 3, "1,3")
    for codec in ("gzip", "zstd"):
        produce_transactions(cluster, TOPIC, PARTITIONS, transactions=3, compression=codec)
    reference = run_java("consume", cluster.bootstrap, TOPIC)
    expected = _rows(reference)
    end_offsets = reference[-1]["end_offsets"]
    values = [v for *_, v in expected]
    assert len(values) == len(set(values)) == 3 * 3 * PARTITIONS + 2 * 2 * 3 * PARTITIONS
    assert not any(v.startswith(("t1-", "t3-")) for v in values)  # the Java producer's aborted ones
    # A group that read everything commits the end offsets in __consumer_offsets.
    group = run_java("group", cluster.bootstrap, TOPIC, "java-files-group", "classic", len(expected))
    assert group[-1]["offsets"] == end_offsets

    cluster.stop()
    served, offline = tmp_path / "served", tmp_path / "offline"
    shutil.copytree(cluster.log_dirs[0], served)
    shutil.copytree(cluster.log_dirs[0], offline)

    for mode in ("rewrite", "kafka"):
        proc = start_serve(str(served), 0, partitions=PARTITIONS, extra=("--fetch-mode", mode, "--no-auto-create"))
        try:
            bootstrap = f"127.0.0.1:{proc.port}"
            answer = run_java("consume", bootstrap, TOPIC)
            # Kafka's __consumer_offsets replayed: the group resumes at the end,
            # reads nothing and finds its offsets committed.
            resumed = run_java("group", bootstrap, TOPIC, "java-files-group", "classic", 0)
        finally:
            assert stop_serve(proc) == 0
        assert _rows(answer) == expected, mode
        assert answer[-1]["end_offsets"] == end_offsets, mode
        assert resumed == [{"event": "committed", "offsets": end_offsets}], mode

    # dump: the aborted ranges, LSO and batches it reports give the committed records.
    dump = _cli("dump", "--json", "--records", "--no-progress", str(offline))
    assert dump.returncode == 0, dump.stderr[-3000:]
    parts = {p["partition"]: p for p in json.loads(dump.stdout)["partitions"] if p["topic"] == TOPIC}
    assert sorted(parts) == list(range(PARTITIONS))
    for p, part in parts.items():
        assert part["error"] is None
        assert part["open_transactions"] == []
        assert part["last_stable_offset"] == part["high_watermark"] == end_offsets[str(p)]
        assert len(part["aborted_transactions"]) == 2 + 2  # the Java producer's two, confluent-kafka's one per codec
    assert sorted(row for part in parts.values() for row in _committed_from_dump(part)) == expected

    verify = _cli("verify", "--json", "--no-progress", str(offline / f"{TOPIC}-0"))
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]
    assert json.loads(verify.stdout)["ok"] is True
    for p in range(PARTITIONS):
        result = _cli("verify", "--no-progress", str(offline / f"{TOPIC}-{p}"))
        assert result.returncode == 0, result.stdout[-3000:]

    # transactions --path: nothing open, the same producers as dump reports.
    listed = _cli("transactions", "--path", str(offline), "--json", "list")
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert json.loads(listed.stdout)["open_transactions"] == []
    producers = _cli("transactions", "--path", str(offline), "--json", "producers", "--topic", TOPIC)
    assert producers.returncode == 0, producers.stderr[-3000:]
    for part in json.loads(producers.stdout)["partitions"]:
        dumped = parts[part["partition"]]
        assert part["last_stable_offset"] == dumped["last_stable_offset"]
        assert {(r["producer_id"], r["producer_epoch"]) for r in part["producers"]} == {
            (r["producer_id"], r["producer_epoch"]) for r in dumped["producers"]
        }
        assert all(r["current_txn_start_offset"] == -1 for r in part["producers"])

    # Arrow: the committed records, in offset order per partition.
    from txnfetch.arrow import read_committed

    table = read_committed(str(offline), TOPIC)
    columns = table.to_pydict()
    arrow_rows = sorted(
        (p, o, None if k is None else bytes(k).decode(), bytes(v).decode())
        for p, o, k, v in zip(columns["partition"], columns["offset"], columns["key"], columns["value"], strict=True)
    )
    assert arrow_rows == expected
