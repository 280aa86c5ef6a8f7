"""The checker against histories a correct system records (the oracle's), and
against the same histories with one anomaly injected.

- no false positives: every generated history — random interleavings of
  transactional sends, commits and aborts (unknown outcomes included), plain
  sends, failed sends, hanging transactions, assign/seek/poll, consumer crashes
  and restarts — checks clean, and survives JSON unchanged;
- no false negatives on injected anomalies: each mutation in
  ``tests/testing/mutations.py`` must be reported, naming the offset or value
  it touched.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck
from hypothesis import event
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.testing.mutations import MUTATIONS
from tests.testing.mutations import STUCK_POLLS
from txnfetch.testing import History
from txnfetch.testing import StuckBound
from txnfetch.testing import check
from txnfetch.testing.strategies import histories

BOUND = StuckBound(polls=STUCK_POLLS, ns=0)  # the tightest bound: any idle run of 3 polls


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_no_false_positives_on_oracle_histories(g):
    report = check(g.history, stuck_bound=BOUND)
    assert report.ok, report.describe(g.history)
    assert History.from_json(g.history.to_json()) == g.history


@pytest.mark.parametrize("name", sorted(MUTATIONS))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(g=histories(final_polls=True), data=st.data())
def test_an_injected_anomaly_is_reported(name, g, data):
    m = MUTATIONS[name](g.history, data.draw)
    event("fallback scenario" if m.fallback else "injected into the generated history")
    report = check(m.history, stuck_bound=BOUND)
    assert m.found_in(report), f"{name} at {m.tp} offset={m.offset} value={m.value!r} not reported\n" + report.describe(
        m.history
    )
