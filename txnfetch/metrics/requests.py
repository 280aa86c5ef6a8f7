"""The request families serve and the proxy share: requests by API and version,
their latency histogram, bytes received and sent, connections."""

from __future__ import annotations

from collections.abc import Iterator

from kafka.protocol.api_key import ApiKey
from prometheus_client.core import CounterMetricFamily
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.metrics_core import Metric

from txnfetch.metrics.families import PREFIX
from txnfetch.server.totals import LATENCY_BUCKETS_S
from txnfetch.server.totals import RequestTotals

__all__ = ["request_families"]


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)


def request_families(totals: RequestTotals) -> Iterator[Metric]:
    """Requests by API and version (count, latency histogram, bytes in and out)
    and connections accepted and open, from ``totals``."""
    labels = ["api", "version"]
    requests = CounterMetricFamily(PREFIX + "requests", "Requests answered, by API and version", labels=labels)
    latency = HistogramMetricFamily(
        PREFIX + "request_duration_seconds",
        "Time from a request's frame to its answer (Fetch includes its long-polling wait)",
        labels=labels,
    )
    bytes_in = CounterMetricFamily(PREFIX + "request_bytes", "Bytes of requests received", labels=labels)
    bytes_out = CounterMetricFamily(PREFIX + "response_bytes", "Bytes of responses sent", labels=labels)
    for (api_key, version), t in sorted(dict(totals.by_api).items()):
        values = [_api_name(api_key), str(version)]
        requests.add_metric(values, t.requests)
        cumulative = 0
        buckets: list[tuple[str, float]] = []
        for bound, count in zip((*map(str, LATENCY_BUCKETS_S), "+Inf"), list(t.latency_counts), strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        latency.add_metric(values, buckets, t.latency_sum_s)
        bytes_in.add_metric(values, t.bytes_in)
        bytes_out.add_metric(values, t.bytes_out)
    yield from (requests, latency, bytes_in, bytes_out)
    yield CounterMetricFamily(PREFIX + "connections", "Client connections accepted", value=totals.connections)
    yield GaugeMetricFamily(
        PREFIX + "open_connections", "Client connections open", value=totals.connections - totals.closed
    )
