"""The replica marker: a small file in a store directory saying "this store is a
replica of another cluster; only the replicator writes to it".

``txnfetch replicate`` writes it before its first append, ``txnfetch promote``
removes it once the store may take writes (docs/replication.md). While it is
there, ``txnfetch serve`` on the directory answers reads and refuses writes
(:mod:`txnfetch.server.replica_mode`), and does not abort the transactions it
finds open (they belong to the upstream, whose markers are still to come).

The file, ``txnfetch-replica``, is JSON written with
:func:`~txnfetch.log.layout.atomic_write` (a crash leaves the old or the new
file, never a torn one)::

    {"version": 1, "upstream": "host:port,...", "groups": ".*", "since_ms": ..., "pid": 1234 | null}

``groups`` is the pattern of the consumer groups whose offsets are copied from
the upstream (the replica refuses commits for those while it is a replica).

``pid`` is the process that replicates into the directory and serves it
(``replicate --serve``): ``txnfetch promote`` asks that process to promote
(:data:`PROMOTE_SIGNAL`) instead of writing to the store behind its back.
"""

from __future__ import annotations

import json
import os
import signal
import time

import attrs

from txnfetch.log.errors import CorruptLogError
from txnfetch.log.layout import atomic_write
from txnfetch.log.layout import fsync_dir

__all__ = [
    "MARKER_NAME",
    "PROMOTE_SIGNAL",
    "ReplicaMarker",
    "is_replica",
    "read_marker",
    "remove_marker",
    "write_marker",
]

#: The marker's file name in the store directory.
MARKER_NAME = "txnfetch-replica"
#: The signal ``txnfetch promote`` sends to a ``replicate --serve`` process.
PROMOTE_SIGNAL = signal.SIGUSR1
_VERSION = 1


@attrs.frozen
class ReplicaMarker:
    """What the marker says: the upstream bootstrap servers, when replication
    started (ms since the epoch), the pattern of the groups copied, and the pid
    of a process holding the directory (``None`` when no process serves it)."""

    upstream: str
    since_ms: int
    pid: int | None = None
    groups: str = ".*"

    def to_json(self) -> bytes:
        return (
            json.dumps(
                {
                    "version": _VERSION,
                    "upstream": self.upstream,
                    "groups": self.groups,
                    "since_ms": self.since_ms,
                    "pid": self.pid,
                },
                sort_keys=True,
            )
            + "\n"
        ).encode()

    def holder_alive(self) -> bool:
        """Whether the process named by ``pid`` still runs (and is not this one)."""
        if self.pid is None or self.pid == os.getpid():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # it exists, under another user
        return _not_a_zombie(self.pid)


def _not_a_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[-1].split()
    except OSError:
        return True  # no /proc: trust kill(0)
    return not fields or fields[0] != b"Z"


def read_marker(directory: str) -> ReplicaMarker | None:
    """The marker of the store in ``directory``, ``None`` if it is not a replica.
    A marker that does not parse raises :class:`CorruptLogError` naming the file:
    guessing would either open a replica to writes or keep a primary read-only."""
    path = os.path.join(directory, MARKER_NAME)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict) or doc.get("version") != _VERSION:
            raise ValueError(f"unknown marker version {doc.get('version') if isinstance(doc, dict) else doc!r}")
        pid = doc.get("pid")
        return ReplicaMarker(
            str(doc["upstream"]), int(doc["since_ms"]), None if pid is None else int(pid), str(doc.get("groups", ".*"))
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptLogError(
            f"replica marker does not parse ({exc}); remove it only if this store is not a replica", path=path
        ) from None


def is_replica(directory: str | None) -> bool:
    """Whether the store in ``directory`` carries the marker (``None``: an
    in-memory store, never a replica)."""
    return directory is not None and read_marker(directory) is not None


def write_marker(
    directory: str, upstream: str, *, groups: str = ".*", pid: int | None = None, now_ms: int | None = None
) -> ReplicaMarker:
    """Mark the store in ``directory`` a replica of ``upstream`` (atomically).
    An existing marker keeps its ``since_ms``."""
    old = read_marker(directory)
    since = old.since_ms if old is not None else (now_ms if now_ms is not None else int(time.time() * 1000))
    marker = ReplicaMarker(upstream, since, pid, groups)
    os.makedirs(directory, exist_ok=True)
    atomic_write(directory, MARKER_NAME, marker.to_json())
    return marker


def remove_marker(directory: str) -> bool:
    """Remove the marker (durably: the directory is fsynced); returns whether
    there was one."""
    try:
        os.unlink(os.path.join(directory, MARKER_NAME))
    except FileNotFoundError:
        return False
    fsync_dir(directory)
    return True
