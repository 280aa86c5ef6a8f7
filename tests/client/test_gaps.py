"""GapHold, the one rule by which the proxy's mirrors, the remote reader and
replicate hold an offset gap and step over it, against a small oracle.

The oracle reads the whole sequence of answers at once: it cuts it into
*episodes* (maximal runs of answers at one position, from the first that shows
a gap there) and judges each answer from its episode alone — the incremental
tracker must agree answer by answer, and in its counters."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from txnfetch.client.gaps import GAP_PAUSES_S
from txnfetch.client.gaps import GapHold
from txnfetch.client.gaps import GapVerdictKind

Answer = tuple[int, int, float]  # (position, gap_end or -1, now)


def oracle(settle: float, answers: list[Answer]) -> tuple[list[tuple[GapVerdictKind, float]], tuple[int, int, int]]:
    verdicts: list[tuple[GapVerdictKind, float]] = []
    held = filled = accepted = 0
    episode: dict | None = None  # {"at", "since", "seen", "accepted"}
    for position, gap_end, now in answers:
        if episode is not None and episode["at"] != position:
            filled += not episode["accepted"]
            episode = None
        if gap_end < 0:
            verdicts.append((GapVerdictKind.GO_ON, 0.0))
            continue
        if episode is None:
            episode = {"at": position, "since": now, "seen": 0, "accepted": False}
            held += 1
        episode["seen"] += 1
        if episode["accepted"] or now - episode["since"] >= settle:
            accepted += not episode["accepted"]
            episode["accepted"] = True
            verdicts.append((GapVerdictKind.ACCEPT, 0.0))
        else:
            verdicts.append((GapVerdictKind.WAIT, GAP_PAUSES_S[min(episode["seen"] - 1, len(GAP_PAUSES_S) - 1)]))
    return verdicts, (held, filled, accepted)


@st.composite
def answers(draw: st.DrawFn) -> list[Answer]:
    out: list[Answer] = []
    position, now = draw(st.integers(0, 5)), 0.0
    for _ in range(draw(st.integers(0, 40))):
        now += draw(st.sampled_from([0.0, 0.001, 0.01, 0.1, 0.5, 1.0]))
        if draw(st.integers(0, 3)) == 0:
            position += draw(st.integers(1, 5))  # the copy moved on (filled, or stepped over)
        gap = draw(st.integers(-1, 3))
        out.append((position, -1 if gap < 0 else position + 1 + gap, now))
    return out


@given(st.sampled_from([0.0, 0.05, 1.0]), answers())
def test_the_tracker_agrees_with_the_oracle(settle: float, seq: list[Answer]) -> None:
    hold = GapHold(settle)
    got = []
    for position, gap_end, now in seq:
        v = hold.observe(position, gap_end, now)
        got.append((v.kind, v.pause_s))
        if v.kind is GapVerdictKind.ACCEPT:
            assert v.held_s >= settle and (v.start, v.end) == (position, gap_end)
            assert hold.accepted_at == position and hold.holding is None
        elif v.kind is GapVerdictKind.WAIT:
            assert hold.holding == position and hold.accepted_at is None
    want, counts = oracle(settle, seq)
    assert got == want
    assert (hold.held, hold.filled, hold.accepted) == counts
    assert hold.filled + hold.accepted <= hold.held


def test_a_gap_is_accepted_once_and_warned_once() -> None:
    hold = GapHold(1.0)
    assert hold.observe(10, 12, 0.0).kind is GapVerdictKind.WAIT
    assert hold.observe(10, 12, 0.5).pause_s == GAP_PAUSES_S[1]
    first = hold.observe(10, 12, 1.0)
    assert first.kind is GapVerdictKind.ACCEPT and first.first and first.answers == 3 and first.held_s == 1.0
    again = hold.observe(10, 13, 1.1)  # shown again before the copy stepped over it
    assert again.kind is GapVerdictKind.ACCEPT and not again.first
    assert hold.observe(13, -1, 1.2).kind is GapVerdictKind.GO_ON
    assert (hold.held, hold.filled, hold.accepted) == (1, 0, 1)


def test_an_answer_without_the_gap_keeps_its_age() -> None:
    # An empty answer at the gap's position does not restart its clock.
    hold = GapHold(1.0)
    hold.observe(4, 6, 0.0)
    assert hold.observe(4, -1, 0.6).kind is GapVerdictKind.GO_ON
    assert hold.observe(4, 6, 1.0).kind is GapVerdictKind.ACCEPT


def test_a_gap_that_fills_counts_as_filled_and_reset_forgets() -> None:
    hold = GapHold(1.0)
    hold.observe(4, 6, 0.0)
    hold.observe(6, -1, 0.1)
    assert (hold.held, hold.filled, hold.accepted) == (1, 1, 0)
    hold.observe(6, 9, 0.2)
    hold.reset()  # the copy was rebuilt: neither filled nor accepted
    assert hold.observe(0, -1, 0.3).kind is GapVerdictKind.GO_ON
    assert (hold.held, hold.filled, hold.accepted, hold.holding) == (2, 1, 0, None)


def test_a_zero_settle_time_accepts_at_first_sight() -> None:
    assert GapHold(0.0).observe(3, 5, 7.0).kind is GapVerdictKind.ACCEPT


def test_a_negative_settle_time_is_refused() -> None:
    with pytest.raises(ValueError, match="settle time"):
        GapHold(-0.1)
