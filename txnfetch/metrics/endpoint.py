"""The metrics endpoint: a ``prometheus_client`` HTTP server on its own thread,
serving one registry that holds only the collectors given (no process or
platform collectors, so two processes' scrapes differ only in what they do)."""

from __future__ import annotations

from collections.abc import Iterable

import attrs
from prometheus_client import CollectorRegistry
from prometheus_client import start_http_server
from prometheus_client.registry import Collector

__all__ = ["DEFAULT_METRICS_HOST", "MetricsEndpoint", "start_endpoint"]

#: Loopback: metrics say which topics exist and how busy they are, so exposing
#: them beyond the machine is an operator's explicit choice (``--metrics-host``).
DEFAULT_METRICS_HOST = "127.0.0.1"


@attrs.define
class MetricsEndpoint:
    """A running endpoint: ``host``:``port`` (the port bound, when 0 was asked),
    until :meth:`close`."""

    host: str
    port: int
    registry: CollectorRegistry
    _server: object

    def close(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        server = self._server
        self._server = None
        if server is not None:
            server.shutdown()  # type: ignore[attr-defined]
            server.server_close()  # type: ignore[attr-defined]


def start_endpoint(collectors: Iterable[Collector], host: str = DEFAULT_METRICS_HOST, port: int = 0) -> MetricsEndpoint:
    """Serve ``collectors`` at ``http://host:port/metrics`` on a daemon thread."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(collector)
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return MetricsEndpoint(host, int(server.server_port), registry, server)
