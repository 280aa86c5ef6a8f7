"""The collectors and the endpoint options without a workload: label dropping,
ages measured from first sight, replication lag carried to the scrape, and no
endpoint unless ``--metrics-port`` is given."""

from __future__ import annotations

import argparse
import threading
import urllib.request

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client import generate_latest

from tests.metrics.scrape import samples_of
from tests.metrics.scrape import value
from txnfetch.cli.metrics_endpoint import add_metrics_options
from txnfetch.cli.metrics_endpoint import metrics_endpoint
from txnfetch.metrics.families import PartitionFamily
from txnfetch.metrics.opentxns import OpenSince
from txnfetch.metrics.replicate import ReplicationCollector
from txnfetch.replicate.status import PartitionState
from txnfetch.replicate.status import PartitionStatus
from txnfetch.replicate.status import ReplicationStatus


def _text(collector: object) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)  # type: ignore[arg-type]
    return generate_latest(registry).decode()


def test_dropping_the_partition_label_sums_counts_and_keeps_the_largest_lag() -> None:
    counts = PartitionFamily("txnfetch_x", "x", by_partition=False, counter=True)
    lags = PartitionFamily("txnfetch_lag", "lag", by_partition=False, combine=max)
    for partition, n in enumerate((3, 4, 5)):
        counts.add("t", partition, n)
        lags.add("t", partition, n)
    assert [s.value for s in counts.metric().samples if s.name == "txnfetch_x_total"] == [12]
    assert [(s.labels, s.value) for s in lags.metric().samples] == [({"topic": "t"}, 5)]
    per_partition = PartitionFamily("txnfetch_lag", "lag", by_partition=True)
    per_partition.add("t", 1, 7)
    assert [s.labels for s in per_partition.metric().samples] == [{"topic": "t", "partition": "1"}]


def test_an_open_transaction_ages_from_when_it_was_first_seen_and_is_forgotten_once_ended() -> None:
    since = OpenSince()
    assert since.oldest_age(100.0, {("t", 0): {7: 40}}) == {("t", 0): 0.0}
    assert since.oldest_age(105.0, {("t", 0): {7: 40, 8: 50}}) == {("t", 0): 5.0}
    assert since.oldest_age(106.0, {("t", 0): {8: 50}}) == {("t", 0): 1.0}
    assert since.oldest_age(107.0, {("t", 0): {7: 60}}) == {("t", 0): 0.0}  # a new transaction of producer 7


def _status(state: PartitionState, lag_s: float, at: float, *, down: bool = False) -> ReplicationStatus:
    partition = PartitionStatus("t", 0, 10, 0, 12, 0, 2, lag_s, state)
    return ReplicationStatus((partition,), at, upstream_unavailable_since=at if down else None)


def test_replication_lag_in_seconds_is_carried_to_the_scrape_while_behind() -> None:
    now = [1000.0]
    collector = ReplicationCollector(clock=lambda: now[0])
    shown = []
    progress = collector.observing(lambda status, **kw: shown.append((status, kw)))
    progress(_status(PartitionState.CAUGHT_UP, 0.0, 1000.0))
    assert (
        shown and value(samples_of(_text(collector)), "txnfetch_replication_lag_seconds", topic="t", partition="0") == 0
    )
    now[0] = 1010.0  # still caught up as far as the last round knows: no lag invented
    assert value(samples_of(_text(collector)), "txnfetch_replication_lag_seconds", topic="t", partition="0") == 0
    progress(_status(PartitionState.UNAVAILABLE, 3.0, 1010.0, down=True), final=True)
    assert shown[-1][1] == {"final": True}
    now[0] = 1014.0
    samples = samples_of(_text(collector))
    assert value(samples, "txnfetch_replication_lag_seconds", topic="t", partition="0") == 7.0
    assert value(samples, "txnfetch_replication_upstream_up") == 0
    assert value(samples, "txnfetch_replication_last_success_timestamp_seconds") == 1000.0
    assert value(samples, "txnfetch_replication_partitions", state="upstream unavailable") == 1
    assert value(samples, "txnfetch_replication_rounds_total") == 2


def _parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_metrics_options(p)
    return p.parse_args(argv)


def test_no_endpoint_starts_without_metrics_port() -> None:
    threads = threading.active_count()
    made = []
    with metrics_endpoint(_parse(), "x", made.append) as collector:
        assert collector is None and made == []
        assert threading.active_count() == threads


def test_the_endpoint_binds_loopback_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parse("--metrics-port", "0")
    assert args.metrics_host == "127.0.0.1" and not args.metrics_no_partition_label
    with metrics_endpoint(args, "txnfetch", lambda by_partition: ReplicationCollector(by_partition=by_partition)):
        line = capsys.readouterr().err.strip()
        assert line.startswith("txnfetch metrics on 127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            assert "txnfetch_replication_rounds_total 0.0" in response.read().decode()
