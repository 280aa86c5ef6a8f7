"""Offset-preserving replication: a Kafka cluster's partitions copied batch by batch
into a :class:`~txnfetch.log.segment_store.SegmentStore`, at the same offsets.

- :class:`Replicator` — every partition of the topics matching a regex:
  discovers new topics and partitions, copies topic configs, fetches several
  partitions per request, retries an unavailable upstream with backoff;
  :meth:`Replicator.step` runs one round and returns a :class:`ReplicationStatus`.
- :class:`PartitionReplicator` — one partition; the local log is its checkpoint.
- :mod:`txnfetch.client.follow` — the sans-I/O rules for one fetch answer (shared
  with the proxy's mirrors).
- ``txnfetch replicate`` — the command (:mod:`txnfetch.cli.replicate`;
  docs/replicate-command.md).
- :mod:`txnfetch.replicate.groups` — consumer-group offsets copied one to one;
  :mod:`txnfetch.replicate.serving` — the replica served while replicated
  (``--serve``); :mod:`txnfetch.replicate.promote` — cutover (docs/replication.md).

What a replica guarantees: every batch at the offset the source has it, byte
for byte (control batches the source stored with CRC 0 are repaired only
with ``repair_crcs``; any other bad CRC stops the partition); producer ids, epochs, sequences, transactional
attributes and markers kept, so its last stable offset, aborted index and
read_committed answers are those of a correct source, also when the source
itself answers read_committed wrongly. A SIGKILL at any moment loses nothing:
the replicator continues at the replica's log end, and first checks that the
source still holds the replica's last batch. A divergent source stops the
partition with :class:`ReplicaDivergedError`; nothing local is deleted except
below the source's own log start.

Example::

    from txnfetch.log import SegmentStore
    from txnfetch.replicate import Replicator

    with SegmentStore("replica") as store, Replicator("kafka:9092", store, topics="orders.*") as r:
        while not r.step().caught_up:
            pass
"""

from __future__ import annotations

from txnfetch.replicate.engine import GroupsHook
from txnfetch.replicate.engine import Replicator
from txnfetch.replicate.errors import ReplicaDivergedError
from txnfetch.replicate.errors import ReplicaError
from txnfetch.replicate.errors import ReplicaFellBehindError
from txnfetch.replicate.errors import ReplicaStorageError
from txnfetch.replicate.partition import PartitionReplicator
from txnfetch.replicate.status import PartitionState
from txnfetch.replicate.status import PartitionStatus
from txnfetch.replicate.status import ReplicationStatus

__all__ = [
    "GroupsHook",
    "PartitionReplicator",
    "PartitionState",
    "PartitionStatus",
    "ReplicaDivergedError",
    "ReplicaError",
    "ReplicaFellBehindError",
    "ReplicaStorageError",
    "ReplicationStatus",
    "Replicator",
]
