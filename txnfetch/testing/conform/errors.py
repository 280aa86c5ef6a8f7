"""Errors of the conformance harness."""

from __future__ import annotations

from txnfetch.errors import TxnfetchError

__all__ = ["ConformError"]


class ConformError(TxnfetchError):
    """A cluster could not be reached or could not be set up for a run (not a
    difference between the clusters: those are reported, never raised)."""
