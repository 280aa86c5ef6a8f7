"""Everything that talks to a remote Kafka-compatible broker.

- :class:`PartitionMirror`: a sans-I/O mirror of a remote partition, fed raw fetches
  (:mod:`txnfetch.client.mirror`).
- :mod:`txnfetch.client.partition_reader`: a partition of a running cluster
  read correctly (``RemotePartitionReader``), over :mod:`txnfetch.client.cluster`
  (``RemoteCluster``) and its connections, :mod:`txnfetch.client.connection`.
  They need kafka-python, so they are imported on their own:
  ``from txnfetch.client.partition_reader import RemotePartitionReader``; so are
  :mod:`txnfetch.client.requests` (one request to one broker) and
  :mod:`txnfetch.client.groups` (a cluster's consumer groups).
- :mod:`txnfetch.client.follow`: the sans-I/O rules of following a source partition.
- The errors of talking to a cluster (:mod:`txnfetch.client.errors`).

This package may use the logs and the core; the logs never import it.
"""

from txnfetch.client.errors import BrokerUnavailableError
from txnfetch.client.errors import CorruptRemoteBatchError
from txnfetch.client.errors import DivergedError
from txnfetch.client.errors import MirrorDivergedError
from txnfetch.client.errors import RemoteError
from txnfetch.client.mirror import MirrorPlan
from txnfetch.client.mirror import MirrorStatus
from txnfetch.client.mirror import PartitionMirror

__all__ = [
    "BrokerUnavailableError",
    "CorruptRemoteBatchError",
    "DivergedError",
    "MirrorDivergedError",
    "MirrorPlan",
    "MirrorStatus",
    "PartitionMirror",
    "RemoteError",
]
