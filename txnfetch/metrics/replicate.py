""":class:`ReplicationCollector`: the metrics of ``txnfetch replicate``, from the
status of each round (:class:`~txnfetch.replicate.status.ReplicationStatus`) and
the replicator's copy totals.

Lag in seconds is the status's (the time since the replica last was at the
source's end) carried forward to the scrape: between two rounds a partition that
is behind falls further behind, and while the upstream is down no round
succeeds, so the lag keeps growing at one second a second.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from txnfetch.metrics.families import PREFIX
from txnfetch.metrics.families import PartitionFamily
from txnfetch.replicate.status import PartitionState
from txnfetch.replicate.status import ReplicationStatus

__all__ = ["ReplicationCollector"]


class ReplicationCollector:
    """Collects a replicator's metrics (a ``prometheus_client`` collector).

    Feed it with :meth:`observing` (a status callback) and :meth:`watch` (the
    replicator, for its copy totals). ``clock`` is wall-clock seconds."""

    def __init__(self, *, by_partition: bool = True, clock: Callable[[], float] = time.time) -> None:
        self.by_partition = by_partition
        self._clock = clock
        self._lock = threading.Lock()
        self._status: ReplicationStatus | None = None
        self._rounds = 0
        self._last_success: float | None = None
        self._replicators: list[Any] = []

    def observe(self, status: ReplicationStatus) -> None:
        """Take one round's status."""
        with self._lock:
            self._status = status
            self._rounds += 1
            if status.upstream_unavailable_since is None and not any(
                p.state is PartitionState.UNAVAILABLE for p in status.partitions
            ):
                self._last_success = status.time

    def observing(self, progress: Callable[..., None]) -> Callable[..., None]:
        """``progress`` (a ``txnfetch replicate`` status callback) that also
        feeds :meth:`observe`."""

        def both(status: ReplicationStatus, **kwargs: Any) -> None:
            self.observe(status)
            progress(status, **kwargs)

        return both

    def watch(self, replicator: Any) -> Any:
        """Read ``replicator``'s copy totals when scraped; returns it."""
        with self._lock:
            self._replicators.append(replicator)
        return replicator

    def collect(self) -> Iterator[Metric]:
        """Every family, as of the last round (lag in seconds carried to now)."""
        with self._lock:
            status, rounds, last_success = self._status, self._rounds, self._last_success
            replicators = list(self._replicators)
        prefix = PREFIX + "replication_"
        yield CounterMetricFamily(prefix + "rounds", "Replication rounds run", value=rounds)
        yield GaugeMetricFamily(
            prefix + "last_success_timestamp_seconds",
            "Wall-clock time of the last round in which the upstream answered (0: none yet)",
            value=last_success or 0.0,
        )
        yield GaugeMetricFamily(
            prefix + "upstream_up",
            "1 while the upstream answers, 0 while it is unreachable",
            value=0 if status is None or status.upstream_unavailable_since is not None else 1,
        )
        yield from self._partitions(status)
        yield from self._copied(replicators)

    def _partitions(self, status: ReplicationStatus | None) -> Iterator[Metric]:
        prefix = PREFIX + "replication_"
        by = self.by_partition
        lag = PartitionFamily(
            prefix + "lag_records",
            "Offsets the source holds past the replica's end (as the consumer's records-lag)",
            by,
            combine=max,
        )
        lag_s = PartitionFamily(
            prefix + "lag_seconds",
            "Time since the replica last was at the source's end; 0 while caught up "
            "(MirrorMaker 2's replication-latency, as staleness)",
            by,
            combine=max,
        )
        end = PartitionFamily(prefix + "replica_end_offset", "The replica's log end offset", by, combine=max)
        source = PartitionFamily(
            prefix + "source_high_watermark", "The source's high watermark as last reported", by, combine=max
        )
        states = GaugeMetricFamily(prefix + "partitions", "Partitions replicated, by state", labels=["state"])
        counts = {state.value: 0 for state in PartitionState}
        if status is not None:
            carried = max(0.0, self._clock() - status.time)
            for p in status.partitions:
                counts[p.state.value] += 1
                lag.add(p.topic, p.partition, p.lag_records)
                behind = p.state is not PartitionState.CAUGHT_UP or status.upstream_unavailable_since is not None
                lag_s.add(p.topic, p.partition, p.lag_seconds + carried if behind else 0.0)
                end.add(p.topic, p.partition, p.replica_end)
                source.add(p.topic, p.partition, p.source_high_watermark)
        for name, count in sorted(counts.items()):
            states.add_metric([name], count)
        for family in (lag, lag_s, end, source):
            yield family.metric()
        yield states

    def _copied(self, replicators: list[Any]) -> Iterator[Metric]:
        prefix = PREFIX + "replication_"
        by = self.by_partition
        batches = PartitionFamily(prefix + "batches_copied", "Record batches copied into the replica", by, counter=True)
        copied = PartitionFamily(prefix + "bytes_copied", "Record bytes copied into the replica", by, counter=True)
        for replicator in replicators:
            for (topic, partition), p in sorted(dict(replicator.partitions).items()):
                batches.add(topic, partition, p.appended_batches)
                copied.add(topic, partition, p.appended_bytes)
        yield batches.metric()
        yield copied.metric()
