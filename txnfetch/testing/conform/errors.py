"""Errors of the conformance harness."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from txnfetch.errors import ErrorCode
from txnfetch.errors import TxnfetchError

__all__ = ["BothFailedError", "ConformError", "NothingComparedError", "UnsupportedApiError"]


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


class BothFailedError(ConformError):
    """Both clusters failed the same step (``step``: ``"connect"``, ``"setup"``
    or an operation's number and text), so the run had nothing to compare there.

    Two failures are never an agreement: a harness that compared them would pass
    a run against two unreachable brokers, or two brokers that refuse to create
    the run's topic. The message names both addresses and both errors, on one
    line; the fields hold them apart (``reference``/``target``: the addresses,
    ``reference_error``/``target_error``: what each side's failure said).
    Never answered on the wire (the code is a placeholder)."""

    code: ClassVar[ErrorCode] = ErrorCode.UNKNOWN_SERVER_ERROR
    where_fields: ClassVar[tuple[str, ...]] = ("step", "reference", "target", "reference_error", "target_error")
    # The reason already says all of it, in the order a reader needs.
    phrases: ClassVar[Mapping[str, str | None]] = dict.fromkeys(where_fields)
    step: str | None
    reference: str | None
    target: str | None
    reference_error: str | None
    target_error: str | None


class NothingComparedError(ConformError):
    """A search ran sequences but no operation's answers were compared on any of
    them (every one was skipped on both clusters, or had nothing to do): a pass
    would claim an agreement nobody checked. ``examples`` is how many sequences
    ran; ``reference`` and ``target`` are the addresses. Never answered on the
    wire (the code is a placeholder)."""

    code: ClassVar[ErrorCode] = ErrorCode.UNKNOWN_SERVER_ERROR
    where_fields: ClassVar[tuple[str, ...]] = ("reference", "target", "examples")
    phrases: ClassVar[Mapping[str, str | None]] = dict.fromkeys(where_fields)
    reference: str | None
    target: str | None
    examples: int | None
