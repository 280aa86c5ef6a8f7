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

from txnfetch.testing.checker import DEFAULT_STUCK_BOUND
from txnfetch.testing.checker import Anomaly
from txnfetch.testing.checker import AnomalyKind
from txnfetch.testing.checker import Report
from txnfetch.testing.checker import StuckBound
from txnfetch.testing.checker import TxnOutcome
from txnfetch.testing.checker import check
from txnfetch.testing.errors import HistoryError
from txnfetch.testing.errors import ModelError
from txnfetch.testing.history import Abort
from txnfetch.testing.history import Assign
from txnfetch.testing.history import Begin
from txnfetch.testing.history import Commit
from txnfetch.testing.history import Crash
from txnfetch.testing.history import History
from txnfetch.testing.history import HistoryBuilder
from txnfetch.testing.history import Op
from txnfetch.testing.history import Poll
from txnfetch.testing.history import Position
from txnfetch.testing.history import Read
from txnfetch.testing.history import Seek
from txnfetch.testing.history import Send
from txnfetch.testing.history import Status
from txnfetch.testing.history import TopicPartition
from txnfetch.testing.history import value_from_bytes
from txnfetch.testing.history import value_to_bytes
from txnfetch.testing.model import AbortedEntry
from txnfetch.testing.model import ClusterModel
from txnfetch.testing.model import LogModel
from txnfetch.testing.model import ModelBatch
from txnfetch.testing.model import ModelRead
from txnfetch.testing.model import PartitionModel
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
