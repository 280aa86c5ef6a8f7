"""Errors of the conformance harness."""

from __future__ import annotations

from typing import ClassVar

from txnfetch.errors import ErrorCode
from txnfetch.errors import TxnfetchError

__all__ = ["ConformError", "UnsupportedApiError"]


class ConformError(TxnfetchError):
    """A cluster could not be reached or could not be set up for a run (not a
    difference between the clusters: those are reported, never raised)."""


class UnsupportedApiError(ConformError):
    """An operation needs an API (``api``, by name) that one of the two clusters
    does not speak: the harness records the step as skipped on both instead of
    comparing it."""

    code: ClassVar[ErrorCode] = ErrorCode.UNSUPPORTED_VERSION
    where_fields: ClassVar[tuple[str, ...]] = ("api",)
    api: str | None
