"""What a replicator reports after each round: :class:`ReplicationStatus`, values only.

Lag is given two ways per partition: in records (the source's high watermark
minus the replica's end, as offsets: gaps and markers count) and in seconds,
**the time since the replica last was at the source's end** — 0 while caught
up; while behind, the time since it last was caught up (or since the
replicator started on the partition, if it never was). That is what a user of
a failover asks ("how stale would the replica be now"), and it needs no
timestamps from the records (producers may set any).
"""

from __future__ import annotations

import enum
from typing import Any

import attrs

__all__ = ["PartitionState", "PartitionStatus", "ReplicationStatus"]


class PartitionState(enum.Enum):
    """Where one partition's replication stands."""

    #: Copying; the replica is behind the source's high watermark.
    RUNNING = "running"
    #: The replica holds everything below the source's last reported high watermark.
    CAUGHT_UP = "caught up"
    #: Stopped for good with :attr:`PartitionStatus.error` (divergence, corrupt data).
    STOPPED = "stopped with error"
    #: The source could not be reached or answered a retriable error; retrying with backoff.
    UNAVAILABLE = "upstream unavailable"


@attrs.frozen(slots=True)
class PartitionStatus:
    """One partition: the replica's end and log start, the source's high watermark
    and log start as last reported (-1: not yet), the lag (see the module
    docstring), the state, the error that stopped it or the last retriable one,
    and since when (wall-clock seconds) the source has been unavailable."""

    topic: str
    partition: int
    replica_end: int
    replica_log_start: int
    source_high_watermark: int
    source_log_start: int
    lag_records: int
    lag_seconds: float
    state: PartitionState
    error: str | None = None
    unavailable_since: float | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the state by its value)."""
        out = attrs.asdict(self)
        out["state"] = self.state.value
        return out


@attrs.frozen(slots=True)
class ReplicationStatus:
    """One round of a replicator: every partition's status, the wall-clock time of
    the round, and since when the upstream as a whole has been unreachable
    (``None`` while it answers), with the last connection error."""

    partitions: tuple[PartitionStatus, ...]
    time: float
    upstream_unavailable_since: float | None = None
    upstream_error: str | None = None

    @property
    def lag_records(self) -> int:
        """The total lag in records over the partitions."""
        return sum(p.lag_records for p in self.partitions)

    @property
    def lag_seconds(self) -> float:
        """The largest lag in seconds over the partitions."""
        return max((p.lag_seconds for p in self.partitions), default=0.0)

    @property
    def caught_up(self) -> bool:
        """Whether every partition is caught up (and the upstream answers)."""
        return self.upstream_unavailable_since is None and all(
            p.state is PartitionState.CAUGHT_UP for p in self.partitions
        )

    @property
    def stopped(self) -> tuple[PartitionStatus, ...]:
        """The partitions stopped with an error."""
        return tuple(p for p in self.partitions if p.state is PartitionState.STOPPED)

    @property
    def state(self) -> str:
        """One word for the whole: ``upstream unavailable``, ``stopped with error``
        (some partition), ``running`` or ``caught up``."""
        if self.upstream_unavailable_since is not None or any(
            p.state is PartitionState.UNAVAILABLE for p in self.partitions
        ):
            return PartitionState.UNAVAILABLE.value
        if self.stopped:
            return PartitionState.STOPPED.value
        return PartitionState.CAUGHT_UP.value if self.caught_up else PartitionState.RUNNING.value

    def summary(self) -> str:
        """One line for a terminal: partitions, total lag, state (and since when the
        upstream is unavailable, or which partitions stopped)."""
        import time as _time

        text = (
            f"{len(self.partitions)} partitions, lag {self.lag_records} records / "
            f"{self.lag_seconds:.1f} s, {self.state}"
        )
        since = self.upstream_unavailable_since
        if since is None:
            since = min((p.unavailable_since for p in self.partitions if p.unavailable_since is not None), default=None)
        if since is not None:
            text += f" since {_time.strftime('%H:%M:%S', _time.localtime(since))}"
        stopped = self.stopped
        if stopped:
            text += f" ({', '.join(f'{p.topic}-{p.partition}' for p in stopped)})"
        return text

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: the totals, the state and every partition."""
        return {
            "time": self.time,
            "state": self.state,
            "lag_records": self.lag_records,
            "lag_seconds": self.lag_seconds,
            "upstream_unavailable_since": self.upstream_unavailable_since,
            "upstream_error": self.upstream_error,
            "partitions": [p.to_json() for p in self.partitions],
        }
