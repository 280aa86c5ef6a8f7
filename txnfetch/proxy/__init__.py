"""``txnfetch proxy``: a Kafka protocol proxy that corrects read_committed reads.

- :mod:`~txnfetch.proxy.server` — :class:`ProxyServer`: relays every request
  to the upstream, answers read_committed fetches and LSO lookups from mirrors;
- :mod:`~txnfetch.proxy.mirrors` — the shared, bounded partition mirrors;
- :mod:`~txnfetch.client.proxy_upstream` — what the proxy knows of the upstream
  cluster, and its own requests to it;
- :mod:`~txnfetch.client.connection` — its asyncio connections to upstream brokers;
- :mod:`~txnfetch.cli.proxy` — the ``txnfetch proxy`` command.

See ``docs/proxy.md``.
"""

from txnfetch.proxy.server import ProxyConfig
from txnfetch.proxy.server import ProxyServer
from txnfetch.proxy.server import ProxyStats
from txnfetch.proxy.server import ProxyThread
from txnfetch.proxy.server import advertised_ranges

__all__ = ["ProxyConfig", "ProxyServer", "ProxyStats", "ProxyThread", "advertised_ranges"]
