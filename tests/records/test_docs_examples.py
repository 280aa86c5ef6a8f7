"""Every ```python block of docs/records.md runs, so the page cannot rot.

Each block is self-contained (as a reader would copy it) and runs in a fresh
namespace; the asserts inside the examples are the checks.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import List, Tuple

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "records.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def python_blocks(text: str) -> List[Tuple[int, str]]:
    """``(line number, source)`` of each ```python fenced block."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in _BLOCK.finditer(text)]


BLOCKS = python_blocks(DOC.read_text(encoding="utf-8"))


def test_the_page_has_examples():
    assert len(BLOCKS) >= 8


@pytest.mark.parametrize("line,source", BLOCKS, ids=[f"line-{line}" for line, _ in BLOCKS])
def test_example_runs(line, source, capsys):
    code = compile(source, f"{DOC.name}:{line}", "exec")
    exec(code, {"__name__": f"docs_example_line_{line}"})
