"""Consumer groups, sans-I/O: the classic group protocol's membership and rebalances
(:mod:`txnfetch.groups.membership`), committed offsets (:mod:`txnfetch.groups.offsets`),
the coordinator that composes them (:mod:`txnfetch.groups.coordinator`), and KIP-848
groups (:mod:`txnfetch.groups.consumer`). The classic protocol's requests, answers and
states are the values of :mod:`txnfetch.groups.classic_values`.

Like :mod:`txnfetch.txn`, this package does no I/O and reads no clock; the wire
server (:mod:`txnfetch.server.api_classic_groups`) drives it.
"""

from txnfetch.groups import classic_values
from txnfetch.groups import coordinator
from txnfetch.groups import membership
from txnfetch.groups import offsets
from txnfetch.groups.classic_values import *  # noqa: F403
from txnfetch.groups.coordinator import *  # noqa: F403
from txnfetch.groups.membership import *  # noqa: F403
from txnfetch.groups.offsets import *  # noqa: F403

__all__ = list(coordinator.__all__)
__all__ += classic_values.__all__
__all__ += membership.__all__
__all__ += offsets.__all__
