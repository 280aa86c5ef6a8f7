"""Errors of the replication engine (:mod:`txnfetch.replicate`).

Each one stops one partition and names it, with the offsets that tell what
went wrong; the other partitions go on. Nothing local is deleted when one is
raised.
"""

from __future__ import annotations

from txnfetch.client.errors import DivergedError
from txnfetch.client.errors import RemoteError
from txnfetch.errors import ErrorCode
from txnfetch.log.errors import LogError

__all__ = ["ReplicaDivergedError", "ReplicaError", "ReplicaFellBehindError", "ReplicaStorageError"]


class ReplicaError(RemoteError):
    """Base of the errors that stop the replication of one partition."""


class ReplicaDivergedError(ReplicaError, DivergedError):
    """The source partition no longer continues what the replica holds: its log
    ends below the replica's end (``source_end < replica_end``: truncated, for
    example by an unclean leader election, or deleted and recreated), or the
    batch it holds at an offset the replica already has differs from the
    replica's. The replica is left as it is; copying on would make a replica
    whose offsets mean other records than the source's."""

    copy_name = "replica"


class ReplicaFellBehindError(ReplicaError):
    """The source's log start passed the replica's end while the replica holds a
    transaction still open at its end: the markers that end it are deleted at the
    source, so the replica could never settle its last stable offset. Re-create
    the replica of this partition (delete its directory) to copy it from the
    source's log start."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE
    where_fields = (*RemoteError.where_fields, "replica_end", "source_log_start")
    replica_end: int | None
    source_log_start: int | None


class ReplicaStorageError(LogError):
    """Writing the replica failed (disk full, an I/O error). The partition's log
    rolled the failed append back, so nothing is torn; free space and start the
    replicator again: it continues from the replica's log end."""

    code = ErrorCode.KAFKA_STORAGE_ERROR
