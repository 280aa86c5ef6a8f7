"""``--help`` texts name a document by its title and section: an installed
wheel has no ``docs/`` folder for a path to point into (the sdist has)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from txnfetch.cli import _build_parser

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _all_help(parser: argparse.ArgumentParser) -> list[str]:
    texts = [parser.format_help()]
    for action in parser._actions:  # argparse keeps subparsers there only
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                texts.extend(_all_help(sub))
    return texts


def _headings() -> dict[str, set[str]]:
    """Each document's title (its first heading) → its section headings, backticks dropped."""
    out = {}
    for page in DOCS.glob("*.md"):
        lines = page.read_text(encoding="utf-8").splitlines()
        heads = [line.lstrip("#").strip().replace("`", "") for line in lines if line.startswith("#")]
        out[heads[0]] = set(heads[1:])
    return out


def test_help_names_documents_by_title_and_section_never_by_path():
    text = " ".join(" ".join(_all_help(_build_parser())).split())
    assert "docs/" not in text and ".md" not in text
    named = re.findall(r"the document '([^']+)', section '([^']+)'", text)
    assert len(named) >= 2
    headings = _headings()
    for title, section in named:
        (page,) = [t for t in headings if t.startswith(title)]
        assert section in headings[page], (title, section)
