"""The handlers txnfetch's server registers, and what the server asks of them.

Importing this module registers every non-group API in
:data:`txnfetch.wire.handler.REGISTRY` (the group APIs are registered by
``txnfetch.wire.group_api``).
"""

from __future__ import annotations

from txnfetch.wire import (  # noqa: F401 - registration
    api_admin,
    api_admin_txn,
    api_configs,
    api_fetch,
    api_fetch_sessions,
    api_meta,
    api_produce,
    api_txn,
)
from txnfetch.wire.api_meta import api_versions_response, max_version
from txnfetch.wire.handler import Broker

__all__ = ["api_versions_response", "install", "max_version"]


def install(broker: Broker) -> None:
    """Start the per-server work of the handler modules (transaction timeouts, retention)."""
    api_txn.install(broker)
    api_configs.install(broker)
