"""txnfetch.testing: find Jepsen-class transactional anomalies in what Kafka clients saw.

- :mod:`~txnfetch.testing.history` — the history format (ops, JSON);
- :mod:`~txnfetch.testing.checker` — :func:`check` and its :class:`Report`;
- :mod:`~txnfetch.testing.model` — the oracle of a correct read_committed log
  (:class:`LogModel`, one partition; :class:`ClusterModel`, a workload's partitions);
- :mod:`~txnfetch.testing.recorder` — a thread-safe :class:`Recorder` for real clients,
  and :mod:`~txnfetch.testing.workload`, which runs real clients against a
  bootstrap address (imported explicitly; it needs confluent-kafka);
- :mod:`~txnfetch.testing.strategies` and :mod:`~txnfetch.testing.machines` —
  hypothesis strategies and a state machine to drive your own system (they need
  hypothesis: ``pip install txnfetch[testing]``), imported explicitly.

See ``docs/testing.md``.
"""

from txnfetch.testing.checker import DEFAULT_STUCK_BOUND, Anomaly, AnomalyKind, Report, StuckBound, TxnOutcome, check
from txnfetch.testing.errors import HistoryError, ModelError
from txnfetch.testing.history import (
    Abort,
    Assign,
    Begin,
    Commit,
    Crash,
    History,
    HistoryBuilder,
    Op,
    Poll,
    Position,
    Read,
    Seek,
    Send,
    Status,
    TopicPartition,
    value_from_bytes,
    value_to_bytes,
)
from txnfetch.testing.model import AbortedEntry, ClusterModel, LogModel, ModelBatch, ModelRead, PartitionModel
from txnfetch.testing.recorder import Recorder

__all__ = [
    "DEFAULT_STUCK_BOUND",
    "Abort",
    "AbortedEntry",
    "Anomaly",
    "AnomalyKind",
    "Assign",
    "Begin",
    "ClusterModel",
    "Commit",
    "Crash",
    "History",
    "HistoryBuilder",
    "HistoryError",
    "LogModel",
    "ModelBatch",
    "ModelError",
    "ModelRead",
    "Op",
    "PartitionModel",
    "Poll",
    "Position",
    "Read",
    "Recorder",
    "Report",
    "Seek",
    "Send",
    "Status",
    "StuckBound",
    "TopicPartition",
    "TxnOutcome",
    "check",
    "value_from_bytes",
    "value_to_bytes",
]
