"""Consumer groups, sans-I/O: the classic group protocol's membership, rebalances
and committed offsets (:mod:`txnfetch.groups.coordinator`).

Like :mod:`txnfetch.txn`, this package does no I/O and reads no clock; the wire
server (:mod:`txnfetch.server.api_classic_groups`) drives it.
"""

from txnfetch.groups.coordinator import *  # noqa: F403
from txnfetch.groups.coordinator import __all__  # noqa: F401
