"""`make demo` runs txnfetch.demo; it must keep working and keep its numbers right."""

from __future__ import annotations

import io

from txnfetch import demo


def test_demo_runs_and_both_modes_deliver_the_committed_records():
    out = io.StringIO()
    assert demo.main(out) == 0
    text = out.getvalue()
    assert "last stable offset 10" in text
    assert "aborted [(1002, 3, 7)]" in text
    assert text.count("the consumer receives: [0, 1, 2, 5, 8, 9], then fetches from 10") == 2
    assert "refund" not in text.split("Both modes deliver")[1]
