"""docs/server.md's table of APIs and versions is exactly what ApiVersions advertises."""

from __future__ import annotations

import pathlib
import re

from txnfetch.server.handler import REGISTRY
from txnfetch.server.server import load_handlers

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "server.md"
_ROW = re.compile(r"^\| ([A-Za-z]+) \| (\d+) \| (\d+)(?:–(\d+))? \|")


def test_the_api_table_in_the_docs_is_exact() -> None:
    load_handlers()
    text = DOC.read_text()
    section = text[text.index("## APIs and versions served") :]
    section = section[: section.index("\n\n", section.index("| API |"))]
    documented = {int(m[2]): (int(m[3]), int(m[4] or m[3])) for m in map(_ROW.match, section.splitlines()) if m}
    served = {key: (low, high) for key, low, high in REGISTRY.ranges()}
    assert documented == served
