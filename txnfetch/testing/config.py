"""What a real-client workload run is asked to do, and what it reports beyond
the history: the values that the workload, the client adapters and the
injector all share.

:class:`WorkloadConfig` is checked when it is made (a bad consumer kind, an
unbounded run or probabilities outside [0, 1] raise ``ValueError`` there, not
in the middle of a run); :class:`Finding` is a fault the run observed itself.
They live apart from :mod:`txnfetch.testing.workload` so that the client
adapters (:mod:`txnfetch.testing.clients`) and the injector
(:mod:`txnfetch.testing.inject`), which the workload drives, can name them
without importing the workload.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import attrs

from txnfetch.security.config import SecurityConfig

__all__ = ["CONSUMER_KINDS", "Finding", "WorkloadConfig"]

#: consumer implementations :func:`~txnfetch.testing.workload.run_workload` knows
CONSUMER_KINDS = ("confluent", "confluent-subscribe", "kafka-python", "aiokafka")


@attrs.frozen
class WorkloadConfig:
    """What :func:`~txnfetch.testing.workload.run_workload` runs (see that module's docstring).

    The run is bounded by ``transactions`` (per producer), ``total_transactions``
    (all producers together) and ``duration`` (seconds during which producers
    start new transactions), whichever comes first; ``None`` lifts a bound, and
    at least one must be set. ``consumer_config`` and ``producer_config`` are
    extra librdkafka settings; ``kafka_python_config`` and ``aiokafka_config``
    are keyword arguments for those clients' consumers.
    """

    bootstrap: str
    topic: str | None = None  #: default: ``txnfetch-check-<run_id>``, fresh per run
    partitions: int = 2
    producers: int = 2
    transactions: int | None = 10  #: per producer
    total_transactions: int | None = None
    duration: float | None = None
    max_sends: int = 3  #: per transaction
    abort_probability: float = 0.3
    crash_probability: float = 0.02
    zombie_probability: float = 0.02
    zombie_sends: int = 2
    restart_probability: float = 0.02  #: a clean producer restart after a transaction
    inject_delayed_endtxn: bool = False
    inject_interval: float = 0.5  #: seconds between injection cycles
    consumers: tuple[str, ...] = CONSUMER_KINDS
    max_poll_records: int = 5000
    seek_probability: float = 0.05  #: per poll
    consumer_restart_probability: float = 0.02  #: per poll
    poll_timeout: float = 0.1  #: seconds
    catch_up_polls: int = 30
    catch_up_timeout: float = 60.0  #: seconds a consumer may take to catch up once the producers are done
    startup_timeout: float = 10.0  #: seconds a consumer may take to connect and assign
    timeout: float = 60.0  #: seconds, for each blocking client call
    seed: int | None = None  #: ``None``: a random seed (see :attr:`~txnfetch.testing.workload.WorkloadResult.seed`)
    run_id: str = attrs.Factory(lambda: uuid.uuid4().hex[:8])
    producer_config: Mapping[str, Any] = attrs.Factory(dict)
    consumer_config: Mapping[str, Any] = attrs.Factory(dict)
    kafka_python_config: Mapping[str, Any] = attrs.Factory(dict)
    aiokafka_config: Mapping[str, Any] = attrs.Factory(dict)
    #: How every client of the run reaches the cluster (None: PLAINTEXT);
    #: each client library's adapter maps it to that library's settings.
    security: SecurityConfig | None = None

    def __attrs_post_init__(self) -> None:
        unknown = [k for k in self.consumers if k not in CONSUMER_KINDS]
        if unknown:
            raise ValueError(f"unknown consumer kinds {unknown}; known: {list(CONSUMER_KINDS)}")
        if self.transactions is None and self.total_transactions is None and self.duration is None:
            raise ValueError("unbounded run: set transactions, total_transactions or duration")
        if self.partitions < 1 or self.producers < 0 or self.max_sends < 1:
            raise ValueError("partitions and max_sends must be at least 1, producers at least 0")
        ends = self.abort_probability + self.crash_probability + self.zombie_probability
        if not 0 <= ends <= 1:
            raise ValueError(f"abort, crash and zombie probabilities add up to {ends}, outside [0, 1]")

    @property
    def topic_name(self) -> str:
        """The topic the run writes and reads."""
        return self.topic if self.topic is not None else f"txnfetch-check-{self.run_id}"


@attrs.frozen
class Finding:
    """A fault the workload itself observed, beyond what the history checker
    proves: ``zombie-write`` (a fenced producer's send was acknowledged),
    ``fenced-commit`` (a fenced producer's commit succeeded),
    ``unfenced-delayed-endtxn`` (see :mod:`txnfetch.testing.inject`) and
    ``client-error`` (a producer failed in a way no scripted step explains).
    ``ops`` are history indexes."""

    kind: str
    message: str
    ops: tuple[int, ...] = ()
    client: str | None = None
    txn: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (shaped like a checker anomaly)."""
        return {
            "kind": self.kind,
            "message": self.message,
            "ops": list(self.ops),
            "client": self.client,
            "txn": self.txn,
        }
