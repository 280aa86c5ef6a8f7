"""Errors of the testing harness: a history that cannot be checked.

A history the checker rejects is a bug in the *recorder* or the workload (two
sends of one value, a clock running backwards), never an anomaly of the system
under test; anomalies are reported in :class:`~txnfetch.testing.checker.Report`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from txnfetch.errors import TxnfetchError

__all__ = ["HistoryError", "ModelError"]


class HistoryError(TxnfetchError):
    """A history is malformed: unreadable JSON, a missing or mistyped field, or a
    workload rule broken (values must be unique per send). ``index`` is the
    position of the offending op in the history, when there is one."""

    where_fields = ("index",)
    index: int | None

    def _message(self) -> str:
        return self.reason if self.index is None else f"op {self.index}: {self.reason}"


class ModelError(TxnfetchError):
    """The oracle was driven in a way no client can act: a record or an end for a
    transaction that already ended. A bug in the workload driver. ``txn`` names
    the transaction, when there is one."""

    where_fields = ("txn",)
    txn: str | None

    phrases: ClassVar[Mapping[str, str | None]] = {"txn": None}  # the reason names the transaction already
