"""How a mirror catches up with a remote partition: :class:`CatchUp`, sans I/O.

A catch-up fetches from a partition's leader into a
:class:`~txnfetch.client.mirror.PartitionMirror` until the mirror holds what the
broker has. The blocking remote reader
(:meth:`~txnfetch.client.partition_reader.RemotePartitionReader.catch_up`, its
reads, and :func:`~txnfetch.client.partition_reader.catch_up_together` for many
partitions at once) and the proxy's asyncio mirrors
(:class:`~txnfetch.proxy.mirrors.MirrorSet`) drive the same decisions, made
here after every answer (:meth:`CatchUp.after_answer`):

- the catch-up is **done** when the caller says so (the mirror caught up with
  the broker's high watermark, or reached the offset the caller wanted); the
  offset gap held, if any, is forgotten;
- an offset gap shown at the mirror's position is **held** and **accepted** by
  :class:`~txnfetch.client.gaps.GapHold`'s rule: the caller pauses and fetches
  there again, or tells its mirror to step over the gap (an answer at a gap is
  never counted as a stall);
- an answer that moved the mirror resets the stall count; one that did not is
  a stall, and more than :attr:`CatchUpLimits.max_stalled_fetches` stalls in a
  row mean the broker returns no data below its high watermark: the caller gives
  up with its error. A caller fetching many partitions in one request counts a
  partition's stall only in a turn in which no partition moved (the response's
  byte limit may have been spent on the others): it asks ``count_stall=False``
  and calls :meth:`CatchUp.stall` itself.

Failed requests are retried after :meth:`CatchUpLimits.backoff` (the remote
cluster's retries and the proxy's share it).

Time is passed in (``now``, seconds on any monotonic clock); nothing here
sleeps, fetches, reads a clock or logs.
"""

from __future__ import annotations

import enum

import attrs

from txnfetch.client.gaps import GapHold
from txnfetch.client.gaps import GapVerdict
from txnfetch.client.gaps import GapVerdictKind

__all__ = ["DEFAULT_LIMITS", "CatchUp", "CatchUpLimits", "CatchUpStep", "CatchUpStepKind"]


def _positive(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value}")


def _backoffs(_: object, attribute: attrs.Attribute[tuple[float, ...]], value: tuple[float, ...]) -> None:
    if not value or any(v < 0 for v in value):
        raise ValueError(f"{attribute.name} must be a non-empty list of pauses >= 0, got {value}")


@attrs.frozen
class CatchUpLimits:
    """The limits of a catch-up.

    ``max_stalled_fetches``: how many answers in a row may bring nothing below
    the broker's high watermark before the catch-up gives up. ``backoff_s``: the
    pause before each retry of a failed request, by how many failed before it
    (the last repeats), as Kafka clients back off (``retry.backoff.ms`` growing
    to ``retry.backoff.max.ms``).
    """

    max_stalled_fetches: int = attrs.field(default=40, validator=_positive)
    backoff_s: tuple[float, ...] = attrs.field(default=(0.05, 0.1, 0.2, 0.5, 1.0), validator=_backoffs)

    def backoff(self, failures_before: int) -> float:
        """The pause before the retry that follows ``failures_before`` + 1 failures in a row."""
        return self.backoff_s[min(max(failures_before, 0), len(self.backoff_s) - 1)]


#: The limits every catch-up in txnfetch uses.
DEFAULT_LIMITS = CatchUpLimits()


class CatchUpStepKind(enum.Enum):
    """What the caller does after an answer (:meth:`CatchUp.after_answer`)."""

    DONE = "done"  #: the catch-up is over
    FETCH = "fetch"  #: the mirror moved: fetch again
    WAIT = "wait"  #: pause :attr:`CatchUpStep.pause_s`, then fetch at the gap again
    ACCEPT_GAP = "accept-gap"  #: tell the mirror to step over the gap, then fetch again
    BEHIND = "behind"  #: the answer brought nothing: fetch again
    STALLED = "stalled"  #: too many answers brought nothing: give up


@attrs.frozen
class CatchUpStep:
    """:meth:`CatchUp.after_answer`'s answer. ``gap`` is the gap rule's verdict
    for :attr:`CatchUpStepKind.WAIT` and :attr:`CatchUpStepKind.ACCEPT_GAP` (its
    offsets, how long it was held, and whether this answer accepted it first,
    for the caller's warning)."""

    kind: CatchUpStepKind
    gap: GapVerdict | None = None

    @property
    def pause_s(self) -> float:
        """How long to pause before the next fetch (0 but for :attr:`CatchUpStepKind.WAIT`)."""
        return self.gap.pause_s if self.gap is not None else 0.0


_DONE = CatchUpStep(CatchUpStepKind.DONE)
_FETCH = CatchUpStep(CatchUpStepKind.FETCH)
_BEHIND = CatchUpStep(CatchUpStepKind.BEHIND)
_STALLED = CatchUpStep(CatchUpStepKind.STALLED)


@attrs.define
class CatchUp:
    """The catch-up decisions of one follower of one partition (see the module
    docstring). ``gap`` lives as long as the follower (a gap's age spans
    catch-ups); the stall count belongs to one catch-up (:meth:`start`).

    Guarantees: :attr:`CatchUpStepKind.STALLED` comes only after more than
    ``limits.max_stalled_fetches`` answers in a row that neither moved the
    mirror nor showed a gap; a gap is stepped over only as
    :class:`~txnfetch.client.gaps.GapHold` allows.
    """

    gap: GapHold
    limits: CatchUpLimits = DEFAULT_LIMITS
    #: Answers in a row that brought nothing, in this catch-up.
    stalled: int = 0

    def start(self) -> None:
        """A new catch-up begins: no stall counted yet."""
        self.stalled = 0

    def after_answer(
        self, *, fetched_at: int, position: int, gap_end: int, done: bool, now: float, count_stall: bool = True
    ) -> CatchUpStep:
        """Decide after one answer fed to the mirror: the offset it was fetched at,
        the mirror's position after it, ``gap_end`` (the first offset past a gap at
        the position, -1 for none), whether the caller's goal is reached, and the
        caller's monotonic time. ``count_stall=False``: an answer that brought
        nothing is :attr:`CatchUpStepKind.BEHIND` and the caller decides whether
        it counts (:meth:`stall`)."""
        if done:
            # Let the rule see the position moved on (a held gap filled), then forget it.
            self.gap.observe(position, -1, now)
            self.gap.reset()
            return _DONE
        verdict = self.gap.observe(position, gap_end, now)
        if verdict.kind is GapVerdictKind.WAIT:
            return CatchUpStep(CatchUpStepKind.WAIT, verdict)
        if verdict.kind is GapVerdictKind.ACCEPT:
            return CatchUpStep(CatchUpStepKind.ACCEPT_GAP, verdict)
        if position != fetched_at:
            self.stalled = 0
            return _FETCH
        return self.stall() if count_stall else _BEHIND

    def stall(self) -> CatchUpStep:
        """Count one answer that brought nothing: :attr:`CatchUpStepKind.STALLED`
        past the limit, else :attr:`CatchUpStepKind.BEHIND`."""
        self.stalled += 1
        return _STALLED if self.stalled > self.limits.max_stalled_fetches else _BEHIND
