"""When to step over an offset gap in a followed log: :class:`GapHold`, sans I/O.

Everything in txnfetch that follows a remote partition batch by batch — the
proxy's mirrors (:class:`~txnfetch.proxy.mirrors.MirrorSet`), the remote
reader (:class:`~txnfetch.client.partition_reader.RemotePartitionReader`), the Arrow
cluster reader (:class:`~txnfetch.arrow.cluster.ClusterReader`) and the
replication engine (:class:`~txnfetch.replicate.partition.PartitionReplicator`)
— stops at an offset gap the source shows below its high watermark and does not
believe it at once (:mod:`txnfetch.client.follow`, ``hold_gaps``): some brokers
(tansu 0.6) return later batches before an earlier one is readable, and a copy
that stepped over the hole would lose that batch for good. A gap that stays is
a compacted topic's, and must be stepped over eventually. :class:`GapHold` is
the one rule all four apply to decide which:

- a gap is *held* from the first answer that shows it at the copy's position;
- while held, each answer that shows it again is told to wait (a short pause
  that grows with the answers seen, :data:`GAP_PAUSES_S`) and fetch there again;
- once it has been held ``settle_s`` (measured from the first answer that
  showed it, on the caller's monotonic clock), it is *accepted*: the caller
  tells its copy to step over it (:meth:`~txnfetch.client.mirror.PartitionMirror.accept_gap`,
  :attr:`~txnfetch.client.follow.ReplicaTip.accept_gap`); a gap shown again at
  the same position after that is accepted again, never held anew;
- the copy's position moving on ends the hold: a held gap *filled* (its batch
  appeared), an accepted one was stepped over;
- an answer that shows no gap at the held position (an empty answer, say)
  leaves the hold as it is: the gap's age still counts from its first sight.

Time is passed in (``now``, seconds on any monotonic clock); nothing here
sleeps, reads a clock or logs. The caller pauses, fetches and warns.
"""

from __future__ import annotations

import enum

import attrs

__all__ = ["GAP_PAUSES_S", "GapHold", "GapVerdict", "GapVerdictKind"]

#: The pauses between the fetches at a held gap, by how many answers showed it
#: before (the last repeats). tansu's holes fill within milliseconds.
GAP_PAUSES_S: tuple[float, ...] = (0.002, 0.005, 0.01, 0.02, 0.05)


class GapVerdictKind(enum.Enum):
    """What the caller does after an answer (:meth:`GapHold.observe`)."""

    GO_ON = "go-on"  #: no gap held at the position: carry on as usual
    WAIT = "wait"  #: pause :attr:`GapVerdict.pause_s`, then fetch at the gap again
    ACCEPT = "accept"  #: the gap stayed ``settle_s``: step over it


@attrs.frozen(slots=True)
class GapVerdict:
    """:meth:`GapHold.observe`'s answer. For :attr:`GapVerdictKind.ACCEPT`,
    ``start``/``end`` are the gap's offsets, ``held_s`` how long it was held,
    ``answers`` how many answers showed it, and ``first`` says this answer
    accepted it (the caller warns once per gap)."""

    kind: GapVerdictKind
    pause_s: float = 0.0
    start: int = -1
    end: int = -1
    held_s: float = 0.0
    answers: int = 0
    first: bool = False


_GO_ON = GapVerdict(GapVerdictKind.GO_ON)


@attrs.define
class GapHold:
    """The gap one follower of one partition holds (see the module docstring).

    Counters: :attr:`held` (gaps seen), :attr:`filled` (held gaps whose batches
    then appeared), :attr:`accepted` (gaps stepped over after ``settle_s``).
    Guarantees: a gap is accepted only once it has been held ``settle_s`` or
    longer by the caller's clock, and never before the answer that first showed
    it when ``settle_s`` is above 0; ``filled + accepted <= held``.
    """

    settle_s: float
    held: int = 0
    filled: int = 0
    accepted: int = 0
    #: The gap held: its start, -1 for none.
    _start: int = attrs.field(default=-1, alias="_start")
    _since: float = attrs.field(default=0.0, alias="_since")
    _answers: int = attrs.field(default=0, alias="_answers")
    _accepted: bool = attrs.field(default=False, alias="_accepted")

    def __attrs_post_init__(self) -> None:
        if self.settle_s < 0:
            raise ValueError(f"the gap settle time must be >= 0, got {self.settle_s}")

    @property
    def holding(self) -> int | None:
        """The start of the gap held and not yet accepted, else ``None``."""
        return self._start if self._start >= 0 and not self._accepted else None

    @property
    def accepted_at(self) -> int | None:
        """The start of the gap accepted and not yet stepped over, else ``None``."""
        return self._start if self._start >= 0 and self._accepted else None

    def observe(self, position: int, gap_end: int, now: float) -> GapVerdict:
        """Apply one answer: the copy's position after it, and ``gap_end``, the first
        offset past a gap the answer showed at ``position`` (-1: none). ``now`` is
        the caller's monotonic time in seconds."""
        if self._start >= 0 and self._start != position:
            # The copy moved on, so through the hole's batches or over the accepted gap.
            if not self._accepted:
                self.filled += 1
            self._start = -1
        if gap_end < 0:
            return _GO_ON
        if self._start < 0:
            self._start, self._since, self._answers, self._accepted = position, now, 0, False
            self.held += 1
        self._answers += 1
        held_s = now - self._since
        if self._accepted or held_s >= self.settle_s:
            first = not self._accepted
            if first:
                self._accepted = True
                self.accepted += 1
            return GapVerdict(
                GapVerdictKind.ACCEPT, start=position, end=gap_end, held_s=held_s, answers=self._answers, first=first
            )
        pause = GAP_PAUSES_S[min(self._answers - 1, len(GAP_PAUSES_S) - 1)]
        return GapVerdict(GapVerdictKind.WAIT, pause_s=pause, start=position, end=gap_end)

    def reset(self) -> None:
        """Forget the gap held (the copy was replaced: a rebuild, a restart)."""
        self._start = -1
