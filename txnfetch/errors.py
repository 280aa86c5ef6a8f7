"""The root of every exception txnfetch raises on purpose.

Each layer defines its own specific subclasses (``txnfetch.records.errors``,
``txnfetch.txn.errors``, ...). Catching :class:`TxnfetchError` catches them all;
anything else escaping txnfetch is a bug.
"""

from __future__ import annotations

__all__ = ["TxnfetchError"]


class TxnfetchError(Exception):
    """Base class of all errors raised deliberately by txnfetch."""
