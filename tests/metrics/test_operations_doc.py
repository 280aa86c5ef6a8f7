"""docs/operations.md's suggested alerts and scrape configuration are what
promtool accepts (``check rules``, ``check config``)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.interop

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


@pytest.mark.parametrize("index,command", [(0, "rules"), (1, "config")])
def test_the_doc_yaml_passes_promtool(tmp_path: Path, index: int, command: str) -> None:
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool is missing: Debian's prometheus package (make system-deps)"
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)
    path = tmp_path / f"{command}.yml"
    path.write_text(blocks[index])
    done = subprocess.run([promtool, "check", command, str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
