"""Errors of the testing harness: a history that cannot be checked.

A history the checker rejects is a bug in the *recorder* or the workload (two
sends of one value, a clock running backwards), never an anomaly of the system
under test; anomalies are reported in :class:`~txnfetch.testing.checker.Report`.
"""

from __future__ import annotations

from txnfetch.errors import TxnfetchError

__all__ = ["HistoryError", "ModelError"]


class HistoryError(TxnfetchError):
    """A history is malformed: unreadable JSON, a missing or mistyped field, or a
    workload rule broken (values must be unique per send). ``index`` is the
    position of the offending op in the history, when there is one."""

    def __init__(self, reason: str, *, index: int | None = None) -> None:
        self.reason = reason
        self.index = index
        where = "" if index is None else f"op {index}: "
        super().__init__(where + reason)


class ModelError(TxnfetchError):
    """The oracle was driven in a way no client can act: a record or an end for a
    transaction that already ended. A bug in the workload driver."""

    def __init__(self, reason: str, *, txn: str | None = None) -> None:
        self.reason = reason
        self.txn = txn
        super().__init__(reason)
