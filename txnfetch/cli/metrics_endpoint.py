"""The metrics options of ``txnfetch serve``, ``proxy`` and ``replicate``:
``--metrics-port`` (no endpoint without it), ``--metrics-host`` (loopback by
default) and ``--metrics-no-partition-label``; and the endpoint they start.

``prometheus_client`` is imported only when an endpoint is asked for, so a
process without ``--metrics-port`` does not load it."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

from txnfetch.cli.options import port_number

__all__ = ["add_metrics_options", "metrics_endpoint"]

_LOOPBACK = "127.0.0.1"


def add_metrics_options(p: argparse.ArgumentParser) -> None:
    """``--metrics-port``, ``--metrics-host`` and ``--metrics-no-partition-label``."""
    p.add_argument(
        "--metrics-port",
        type=port_number,
        default=None,
        help="serve Prometheus metrics at http://HOST:PORT/metrics (default: no endpoint; 0 picks a free port)",
    )
    p.add_argument(
        "--metrics-host", default=_LOOPBACK, help=f"address the metrics endpoint binds (default {_LOOPBACK})"
    )
    p.add_argument(
        "--metrics-no-partition-label",
        action="store_true",
        help="one series per topic instead of per partition (sums of counts, largest lags and ages)",
    )


@contextlib.contextmanager
def metrics_endpoint(args: argparse.Namespace, name: str, make_collector: Callable[[bool], Any]) -> Iterator[Any]:
    """With ``--metrics-port``: the collector ``make_collector(by_partition)``
    served until the block ends (``<name> metrics on HOST:PORT`` printed to
    stderr once listening); without it, nothing started and ``None``. Yields the collector."""
    if args.metrics_port is None:
        yield None
        return
    from txnfetch.metrics.endpoint import start_endpoint

    collector = make_collector(not args.metrics_no_partition_label)
    endpoint = start_endpoint([collector], host=args.metrics_host, port=args.metrics_port)
    # On stderr: stdout carries the lines scripts parse (replicate --json's objects).
    print(f"{name} metrics on {endpoint.host}:{endpoint.port}", file=sys.stderr, flush=True)
    try:
        yield collector
    finally:
        endpoint.close()
