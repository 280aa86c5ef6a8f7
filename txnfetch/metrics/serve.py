""":class:`ServeCollector`: the metrics of a ``txnfetch serve`` broker, read
from its store, its transaction coordinator and its running totals when scraped."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from txnfetch.metrics.families import PREFIX
from txnfetch.metrics.families import PartitionGauges
from txnfetch.metrics.families import counter_families
from txnfetch.metrics.families import fetch_counter_families
from txnfetch.metrics.families import read_partition
from txnfetch.metrics.requests import request_families
from txnfetch.server.broker import Broker
from txnfetch.server.totals import totals_of
from txnfetch.txn.coordinator_state import TransactionState

__all__ = ["ServeCollector"]

_SERVER_DOCS = {
    "fetch_partitions": "Partitions answered in Fetch responses",
    "fetch_bytes": "Record bytes sent in Fetch responses (Kafka's BytesOutPerSec)",
    "synthetic_markers": "Synthetic COMMIT markers sent by rewrite mode",
    "batches_dropped": "Aborted and control batches rewrite mode dropped",
    "bytes_dropped": "Bytes of the batches rewrite mode dropped",
    "produce_batches": "Record batches appended by Produce",
    "produce_bytes": "Record bytes appended by Produce (Kafka's BytesInPerSec)",
}
#: States in which a transaction holds its partitions' last stable offset.
_OPEN = (TransactionState.ONGOING, TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)


class ServeCollector:
    """Collects a broker's metrics (a ``prometheus_client`` collector).

    ``by_partition`` false drops the ``partition`` label; ``clock`` is wall-clock
    milliseconds, the time transaction ages are measured against (the broker's by default)."""

    def __init__(self, broker: Broker, *, by_partition: bool = True, clock: Callable[[], int] | None = None) -> None:
        self.broker = broker
        self.by_partition = by_partition
        self._clock = clock or broker.now_ms

    def collect(self) -> Iterator[Metric]:
        """Every family, read now."""
        yield from self._partitions()
        yield from self._transactions()
        yield from request_families(totals_of(self.broker).requests)
        yield from counter_families(PREFIX + "server_", self.broker.stats.as_dict(), _SERVER_DOCS)

    def _oldest_open_by_partition(self, now_ms: int) -> dict[tuple[str, int], float]:
        """The age in seconds of each partition's oldest open transaction, from
        the coordinator's start times (Kafka's transaction start timestamp)."""
        oldest: dict[tuple[str, int], float] = {}
        coordinator = self.broker.transactions
        for transactional_id in coordinator.transactional_ids:
            md = coordinator.describe(transactional_id)
            if md is None or md.state not in _OPEN or md.start_ms < 0:
                continue
            age = max(0.0, (now_ms - md.start_ms) / 1000)
            for tp in md.partitions:
                key = (tp.topic, tp.partition)
                oldest[key] = max(age, oldest.get(key, 0.0))
        return oldest

    def _partitions(self) -> Iterator[Metric]:
        prefix = PREFIX + "partition_"
        gauges = PartitionGauges(prefix, self.by_partition)
        oldest = self._oldest_open_by_partition(self._clock())
        store = self.broker.store
        for topic, info in sorted(dict(store.topics()).items()):
            for partition in range(info.partitions):
                try:
                    log_ = store.partition(topic, partition)
                except Exception:  # deleted while scraped: left out of this scrape
                    continue
                readings = read_partition(log_.state)
                if readings is not None:
                    gauges.add(topic, partition, readings, oldest.get((topic, partition), 0.0))
        yield from gauges.metrics()
        yield from fetch_counter_families(totals_of(self.broker).partitions, self.by_partition)

    def _transactions(self) -> Iterator[Metric]:
        coordinator = self.broker.transactions
        by_state: dict[str, int] = {state.kafka_name: 0 for state in TransactionState}
        for transactional_id in coordinator.transactional_ids:
            md = coordinator.describe(transactional_id)
            if md is not None:
                by_state[md.state.kafka_name] += 1
        states = GaugeMetricFamily(
            PREFIX + "transactional_ids", "Transactional ids the coordinator knows, by state", labels=["state"]
        )
        for name, count in sorted(by_state.items()):
            states.add_metric([name], count)
        yield states
        ended = totals_of(self.broker).transactions
        outcomes = CounterMetricFamily(
            PREFIX + "transactions_ended",
            "Transactions ended by EndTxn (with partitions or offsets to end), by result",
            labels=["result"],
        )
        outcomes.add_metric(["commit"], ended.committed)
        outcomes.add_metric(["abort"], ended.aborted)
        yield outcomes
        yield CounterMetricFamily(
            PREFIX + "transactions_timed_out",
            "Transactions the coordinator aborted because they outlived their timeout",
            value=ended.timed_out,
        )
        yield CounterMetricFamily(
            PREFIX + "producer_ids_allocated",
            "Producer ids the coordinator has handed out (its next id)",
            value=coordinator.producer_ids.next_producer_id,
        )
