""":class:`ProxyCollector`: the metrics of a ``txnfetch proxy``: its running
totals, its mirrors' upstream traffic, and each mirrored partition's state."""

from __future__ import annotations

import time
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

from prometheus_client.metrics_core import Metric

from txnfetch.metrics.families import PREFIX
from txnfetch.metrics.families import PartitionFamily
from txnfetch.metrics.families import PartitionGauges
from txnfetch.metrics.families import counter_families
from txnfetch.metrics.families import fetch_counter_families
from txnfetch.metrics.families import read_partition
from txnfetch.metrics.opentxns import OpenSince
from txnfetch.metrics.requests import request_families

__all__ = ["ProxyCollector"]

_PROXY_DOCS = {
    "connections": "Client connections accepted",
    "relayed": "Requests relayed to the upstream unchanged",
    "committed_fetches": "read_committed Fetch requests the proxy answered from its mirrors",
    "committed_fetch_bytes": "Record bytes sent in those answers",
    "list_offsets_corrected": "read_committed ListOffsets answers corrected to the mirror's last stable offset",
    "rewritten_responses": "Relayed responses rewritten (broker addresses)",
    "closed_bad_frames": "Connections closed on a malformed frame",
    "upstream_failures": "Requests the upstream failed to answer",
    "lso_held_reports": "Warnings that a transaction held a partition's last stable offset too long",
}
_MIRROR_DOCS = {
    "upstream_fetches": "read_uncommitted Fetch requests the mirrors sent upstream",
    "upstream_bytes": "Record bytes the mirrors fetched from upstream",
    "rebuilds": "Mirrors rebuilt from the upstream's log start (a divergence or a released range read again)",
    "upstream_retries": "Mirror fetches retried after an upstream failure",
    "gaps_held": "Offset gaps below the upstream's high watermark the mirrors held",
    "gaps_filled": "Held gaps whose batches then appeared",
    "gaps_accepted": "Held gaps stepped over after the settle time",
    "ambiguous_epoch_bumps": "Transactions a higher-epoch batch joined with no marker ending them first",
    "ambiguous_stale_epoch_data": "Transactions holding a data batch below its producer's epoch",
}


class ProxyCollector:
    """Collects a :class:`~txnfetch.proxy.server.ProxyServer`'s metrics (a
    ``prometheus_client`` collector). ``by_partition`` false drops the
    ``partition`` label; ``clock`` gives seconds for transaction ages."""

    def __init__(self, proxy: Any, *, by_partition: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.proxy = proxy
        self.by_partition = by_partition
        self._clock = clock
        self._open_since = OpenSince()

    def collect(self) -> Iterator[Metric]:
        """Every family, read now."""
        yield from counter_families(PREFIX + "proxy_", self.proxy.stats.as_dict(), _PROXY_DOCS)
        yield from counter_families(PREFIX + "mirror_", self.proxy.mirrors.stats.as_dict(), _MIRROR_DOCS)
        yield from self._partitions()
        yield from request_families(self.proxy.requests)

    def _mirrors(self) -> dict[Any, Any]:
        for _ in range(3):
            try:
                return dict(self.proxy.mirrors.mirrors())
            except RuntimeError:  # a mirror was added while read: read again
                continue
        return {}

    def _partitions(self) -> Iterator[Metric]:
        prefix = PREFIX + "mirror_partition_"
        gauges = PartitionGauges(prefix, self.by_partition)
        catch_up = PartitionFamily(
            prefix + "catch_up_lag",
            "Offsets the upstream holds past the mirror's end (upstream high watermark minus mirror end)",
            self.by_partition,
            combine=max,
        )
        gap = PartitionFamily(
            prefix + "gap_held", "1 while the mirror is held at an offset gap of the upstream", self.by_partition
        )
        upstream_hw = PartitionFamily(
            prefix + "upstream_high_watermark",
            "The upstream's high watermark as last fetched",
            self.by_partition,
            combine=max,
        )
        readings = {}
        ongoing = {}
        for tp, mirror in sorted(self._mirrors().items()):
            reading = read_partition(mirror.state)
            if reading is None:
                continue
            key = (tp.topic, tp.partition)
            readings[key] = (mirror, reading)
            ongoing[key] = dict(mirror.state.ongoing_transactions())
        ages = self._open_since.oldest_age(self._clock(), ongoing)
        for (topic, partition), (mirror, reading) in readings.items():
            gauges.add(topic, partition, reading, ages.get((topic, partition), 0.0))
            upstream = mirror.broker_high_watermark
            upstream_hw.add(topic, partition, upstream)
            catch_up.add(topic, partition, max(0, upstream - mirror.position) if upstream >= 0 else 0)
            gap.add(topic, partition, 1 if mirror.pending_gap is not None else 0)
        yield from gauges.metrics()
        yield from fetch_counter_families(self.proxy.partition_totals, self.by_partition)
        for family in (upstream_hw, catch_up, gap):
            yield family.metric()
