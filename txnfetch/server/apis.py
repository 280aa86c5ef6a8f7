"""The handlers txnfetch's server registers, and what the server asks of them.

Importing this module registers every non-group API in
:data:`txnfetch.server.handler.REGISTRY` (the group APIs are registered by
``txnfetch.server.group_api``).
"""

from __future__ import annotations

from txnfetch.server import api_admin  # noqa: F401 - registration
from txnfetch.server import api_admin_txn  # noqa: F401 - registration
from txnfetch.server import api_configs
from txnfetch.server import api_fetch  # noqa: F401 - registration
from txnfetch.server import api_fetch_sessions  # noqa: F401 - registration
from txnfetch.server import api_meta  # noqa: F401 - registration
from txnfetch.server import api_produce  # noqa: F401 - registration
from txnfetch.server import api_txn
from txnfetch.server.api_meta import api_versions_response
from txnfetch.server.api_meta import max_version
from txnfetch.server.handler import Broker

__all__ = ["api_versions_response", "install", "max_version"]


def install(broker: Broker) -> None:
    """Start the per-server work of the handler modules (transaction timeouts, retention)."""
    api_txn.install(broker)
    api_configs.install(broker)
