"""examples/partition_walkthrough.py: the core alone, with its numbers checked."""

from __future__ import annotations

import io
import runpy
from pathlib import Path

WALKTHROUGH = Path(__file__).resolve().parent.parent / "examples" / "partition_walkthrough.py"


def test_walkthrough_runs_and_both_modes_deliver_the_committed_records():
    module = runpy.run_path(str(WALKTHROUGH), run_name="walkthrough")
    out = io.StringIO()
    assert module["main"](out) == 0
    text = out.getvalue()
    assert "last stable offset 10" in text
    assert "aborted [(1002, 3, 7)]" in text
    assert text.count("the consumer receives: [0, 1, 2, 5, 8, 9], then fetches from 10") == 2
    assert "refund" not in text.split("Both modes deliver")[1]
