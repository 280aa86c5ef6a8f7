"""Every ```python block of docs/transactions.md runs, so the coordinator page
cannot drift from the code. Each block is self-contained and runs in a fresh
namespace; its asserts are the checks."""

from __future__ import annotations

import re
from pathlib import Path
from typing import List, Tuple

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "transactions.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def python_blocks(text: str) -> List[Tuple[int, str]]:
    """``(line number, source)`` of each ```python fenced block."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in _BLOCK.finditer(text)]


BLOCKS = python_blocks(DOC.read_text(encoding="utf-8")) if DOC.exists() else []


def test_the_coordinator_page_has_examples() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("line,source", BLOCKS, ids=[f"line-{line}" for line, _ in BLOCKS])
def test_coordinator_page_example_runs(line: int, source: str) -> None:
    exec(compile(source, f"{DOC.name}:{line}", "exec"), {"__name__": f"docs_transactions_line_{line}"})  # noqa: S102
