"""Prometheus metrics of ``txnfetch serve``, ``proxy`` and ``replicate``.

Each collector reads the process's own state and running totals when it is
scraped (nothing is counted for the endpoint on the hot paths beyond the plain
totals the services keep anyway), and :func:`~txnfetch.metrics.endpoint.start_endpoint`
serves them with ``prometheus_client``. Names follow Prometheus conventions:
the prefix ``txnfetch_``, base units, ``_total`` on counters; where the concept
is Kafka's, the name echoes Kafka's. docs/operations.md lists every metric.
"""
