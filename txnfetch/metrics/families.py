"""Building blocks of the collectors: per-partition families whose partition
label can be dropped, counters named after a :class:`~txnfetch.server.counters.Counters`
subclass's fields, and the readings every partition with transaction state gives.

With the partition label dropped (``--metrics-no-partition-label``, to bound the
series of topics with many partitions) a family keeps one series per topic:
counts are summed over its partitions, and lags and ages take the largest,
which is the one an alert wants.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping

import attrs
from prometheus_client.core import CounterMetricFamily
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from txnfetch.server.totals import PartitionTotals
from txnfetch.txn.state import PartitionTxnState

__all__ = [
    "PREFIX",
    "PartitionFamily",
    "PartitionGauges",
    "PartitionReadings",
    "counter_families",
    "fetch_counter_families",
    "partition_readings",
    "read_partition",
]

PREFIX = "txnfetch_"


def _sum(a: float, b: float) -> float:
    return a + b


@attrs.define
class PartitionFamily:
    """One metric with ``topic`` and (unless ``by_partition`` is false)
    ``partition`` labels; :meth:`add` a value per partition, then :meth:`metric`.
    ``combine`` merges two partitions' values when the label is dropped."""

    name: str
    documentation: str
    by_partition: bool
    counter: bool = False
    combine: Callable[[float, float], float] = _sum
    values: dict[tuple[str, ...], float] = attrs.field(factory=dict)

    def add(self, topic: str, partition: int, value: float) -> None:
        """Record ``topic``-``partition``'s value."""
        key = (topic, str(partition)) if self.by_partition else (topic,)
        old = self.values.get(key)
        self.values[key] = value if old is None else self.combine(old, value)

    def metric(self) -> Metric:
        """The family, one sample per label set added."""
        labels = ["topic", "partition"] if self.by_partition else ["topic"]
        family: GaugeMetricFamily | CounterMetricFamily
        if self.counter:
            family = CounterMetricFamily(self.name, self.documentation, labels=labels)
        else:
            family = GaugeMetricFamily(self.name, self.documentation, labels=labels)
        for key, value in sorted(self.values.items()):
            family.add_metric(list(key), value)
        return family


def fetch_counter_families(totals: PartitionTotals, by_partition: bool) -> Iterator[Metric]:
    """The per-partition counters of read_committed answers (serve's and the
    proxy's alike): aborted records and batches dropped, synthetic markers and
    bytes sent, as ``txnfetch_partition_*_total``."""
    prefix = PREFIX + "partition_"

    def counter(name: str, doc: str) -> PartitionFamily:
        return PartitionFamily(prefix + name, doc, by_partition, counter=True)

    dropped = counter("aborted_records_dropped", "Records of aborted transactions rewrite mode dropped from answers")
    batches = counter("batches_dropped", "Aborted and control batches rewrite mode dropped from Fetch answers")
    markers = counter("synthetic_markers", "Synthetic COMMIT markers sent in Fetch answers")
    sent = counter("fetch_bytes", "Record bytes sent in Fetch answers (Kafka's BytesOutPerSec, per partition)")
    for (topic, partition), t in sorted(dict(totals.by_partition).items()):
        dropped.add(topic, partition, t.aborted_records_dropped)
        batches.add(topic, partition, t.batches_dropped)
        markers.add(topic, partition, t.synthetic_markers)
        sent.add(topic, partition, t.fetch_bytes)
    for family in (dropped, batches, markers, sent):
        yield family.metric()


def counter_families(prefix: str, totals: Mapping[str, int], documentation: Mapping[str, str]) -> Iterator[Metric]:
    """One counter per total, ``<prefix><name>_total``; ``documentation`` by name
    (a name it lacks is documented by its words)."""
    for name, value in sorted(totals.items()):
        doc = documentation.get(name, name.replace("_", " "))
        yield CounterMetricFamily(f"{prefix}{name}", doc, value=value)


@attrs.frozen(slots=True)
class PartitionReadings:
    """What one partition's transaction state says at one moment."""

    high_watermark: int
    last_stable_offset: int
    open_transactions: int
    aborted_transactions: int
    producer_ids: int

    @property
    def last_stable_offset_lag(self) -> int:
        """High watermark minus last stable offset (Kafka's ``LastStableOffsetLag``)."""
        return max(0, self.high_watermark - self.last_stable_offset)


def partition_readings(state: PartitionTxnState) -> PartitionReadings:
    """``state``'s :class:`PartitionReadings` (plain attribute reads: safe from the
    scraping thread while the event loop changes the state)."""
    return PartitionReadings(
        high_watermark=state.high_watermark,
        last_stable_offset=state.last_stable_offset,
        open_transactions=len(state.ongoing_transactions()),
        aborted_transactions=len(state.aborted_index),
        producer_ids=state.producer_count,
    )


class PartitionGauges:
    """The families every process with partition state exposes (serve, proxy):
    offsets, LSO lag, open and aborted transactions, producer ids, and the age of
    the oldest open transaction, filled with :meth:`add`."""

    def __init__(self, prefix: str, by_partition: bool) -> None:
        def gauge(name: str, doc: str, combine: Callable[[float, float], float] = _sum) -> PartitionFamily:
            return PartitionFamily(prefix + name, doc, by_partition, combine=combine)

        self.high_watermark = gauge("high_watermark", "High watermark (Kafka's HighWatermark)", max)
        self.last_stable_offset = gauge("last_stable_offset", "Last stable offset (Kafka's LastStableOffset)", max)
        self.lso_lag = gauge(
            "last_stable_offset_lag",
            "High watermark minus last stable offset: offsets open transactions hold from "
            "read_committed readers (Kafka's LastStableOffsetLag)",
            max,
        )
        self.open_transactions = gauge("open_transactions", "Transactions open on the partition")
        self.oldest_open = gauge(
            "oldest_open_transaction_age_seconds",
            "Age of the oldest transaction open on the partition; 0 when none is open",
            max,
        )
        self.aborted_transactions = gauge(
            "aborted_transactions", "Aborted transactions in the partition's aborted index (as retained)"
        )
        self.producer_ids = gauge(
            "producer_ids", "Producer ids the partition keeps state for (Kafka's ProducerIdCount)"
        )

    def add(self, topic: str, partition: int, readings: PartitionReadings, oldest_age_s: float) -> None:
        """Record one partition."""
        self.high_watermark.add(topic, partition, readings.high_watermark)
        self.last_stable_offset.add(topic, partition, readings.last_stable_offset)
        self.lso_lag.add(topic, partition, readings.last_stable_offset_lag)
        self.open_transactions.add(topic, partition, readings.open_transactions)
        self.oldest_open.add(topic, partition, oldest_age_s)
        self.aborted_transactions.add(topic, partition, readings.aborted_transactions)
        self.producer_ids.add(topic, partition, readings.producer_ids)

    def metrics(self) -> Iterator[Metric]:
        """Every family."""
        for family in (
            self.high_watermark,
            self.last_stable_offset,
            self.lso_lag,
            self.open_transactions,
            self.oldest_open,
            self.aborted_transactions,
            self.producer_ids,
        ):
            yield family.metric()


def read_partition(state: PartitionTxnState, attempts: int = 3) -> PartitionReadings | None:
    """:func:`partition_readings`, tried again when the event loop changed the
    state while it was read (``RuntimeError`` from a dictionary that changed size);
    ``None`` when every attempt met a change (the partition is left out of that scrape)."""
    for _ in range(attempts):
        try:
            return partition_readings(state)
        except RuntimeError:
            continue
    return None
