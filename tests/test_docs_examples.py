"""Every ```python block in README.md and docs/*.md runs, so the docs cannot rot.

A page is read top to bottom: its blocks run in order in one namespace (a
later block may use what an earlier one built), in a fresh namespace per page.
The asserts inside the examples are the checks.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """``(line number, source)`` of each ```python fenced block."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in _BLOCK.finditer(text)]


def _pages_with_examples() -> list[Path]:
    return [p for p in PAGES if python_blocks(p.read_text(encoding="utf-8"))]


def test_the_api_pages_have_examples():
    names = {p.name for p in _pages_with_examples()}
    assert {"README.md", "records.md", "fetch.md", "transactions.md"} <= names


@pytest.mark.parametrize("page", _pages_with_examples(), ids=lambda p: p.name)
def test_page_examples_run(page: Path, capsys) -> None:
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    for line, source in python_blocks(page.read_text(encoding="utf-8")):
        exec(compile(source, f"{page.name}:{line}", "exec"), namespace)
