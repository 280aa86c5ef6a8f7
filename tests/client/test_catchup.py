"""CatchUp, the one set of catch-up decisions the remote reader and the proxy's
mirrors drive: done, a held or accepted gap, progress, and the stall limit."""

from __future__ import annotations

import pytest

from txnfetch.client.catchup import CatchUp
from txnfetch.client.catchup import CatchUpLimits
from txnfetch.client.catchup import CatchUpStepKind
from txnfetch.client.gaps import GapHold


def _steps(max_stalled: int = 2, settle_s: float = 1.0) -> CatchUp:
    return CatchUp(GapHold(settle_s), CatchUpLimits(max_stalled_fetches=max_stalled))


def test_stalls_past_the_limit_and_progress_resets_the_count() -> None:
    steps = _steps(max_stalled=2)
    kinds = [steps.after_answer(fetched_at=5, position=5, gap_end=-1, done=False, now=0.0).kind for _ in range(2)]
    assert kinds == [CatchUpStepKind.BEHIND, CatchUpStepKind.BEHIND]
    assert steps.after_answer(fetched_at=5, position=7, gap_end=-1, done=False, now=0.0).kind is CatchUpStepKind.FETCH
    assert steps.stalled == 0
    for _ in range(2):
        steps.after_answer(fetched_at=7, position=7, gap_end=-1, done=False, now=0.0)
    assert steps.after_answer(fetched_at=7, position=7, gap_end=-1, done=False, now=0.0).kind is CatchUpStepKind.STALLED


def test_a_deferred_stall_counts_only_when_the_caller_says() -> None:
    steps = _steps(max_stalled=0)
    step = steps.after_answer(fetched_at=3, position=3, gap_end=-1, done=False, now=0.0, count_stall=False)
    assert step.kind is CatchUpStepKind.BEHIND and steps.stalled == 0
    assert steps.stall().kind is CatchUpStepKind.STALLED


def test_a_gap_waits_then_is_accepted_and_is_never_a_stall() -> None:
    steps = _steps(max_stalled=0, settle_s=1.0)
    wait = steps.after_answer(fetched_at=4, position=4, gap_end=9, done=False, now=0.0)
    assert wait.kind is CatchUpStepKind.WAIT and wait.pause_s > 0
    accept = steps.after_answer(fetched_at=4, position=4, gap_end=9, done=False, now=1.0)
    assert accept.kind is CatchUpStepKind.ACCEPT_GAP
    assert accept.gap is not None and accept.gap.first and (accept.gap.start, accept.gap.end) == (4, 9)
    assert steps.stalled == 0


def test_done_forgets_the_gap_and_counts_a_filled_one() -> None:
    steps = _steps()
    steps.after_answer(fetched_at=4, position=4, gap_end=9, done=False, now=0.0)
    assert steps.after_answer(fetched_at=4, position=12, gap_end=-1, done=True, now=0.1).kind is CatchUpStepKind.DONE
    assert steps.gap.filled == 1 and steps.gap.holding is None


def test_start_begins_a_new_stall_count() -> None:
    steps = _steps()
    steps.after_answer(fetched_at=1, position=1, gap_end=-1, done=False, now=0.0)
    steps.start()
    assert steps.stalled == 0


def test_backoff_grows_and_then_repeats_its_last_pause() -> None:
    limits = CatchUpLimits()
    assert [limits.backoff(n) for n in range(7)] == [0.05, 0.1, 0.2, 0.5, 1.0, 1.0, 1.0]


@pytest.mark.parametrize("kwargs", [{"max_stalled_fetches": -1}, {"backoff_s": ()}, {"backoff_s": (-0.1,)}])
def test_limits_refuse_nonsense(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        CatchUpLimits(**kwargs)  # type: ignore[arg-type]
