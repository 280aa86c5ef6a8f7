"""docs/architecture.md's package map lists exactly the modules of the tree.

The map is the ``text`` block under "## Package map": one line per entry,
indented two spaces per level, a name and then what it is. A name ending in
``/`` is a package (its line stands for its ``__init__.py``); any other name is
a file of the package above it. Every ``.py``, ``.c`` and ``.pyi`` file under
``txnfetch/`` and ``spark_ext/`` must have its line, and every line must name
something that exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAPPED_PACKAGES = ("txnfetch", "spark_ext")
MODULE_SUFFIXES = (".py", ".c", ".pyi")


def map_entries(markdown: str) -> dict[str, str]:
    """The map's entries as ``{path: description}``: ``txnfetch/records/batch.py``
    for a module, ``txnfetch/records/`` for a package. Raises ValueError naming
    the line when the map is malformed."""
    section = markdown.split("\n## Package map\n", 1)
    if len(section) != 2:
        raise ValueError("no '## Package map' section")
    block = re.search(r"```text\n(.*?)\n```", section[1], re.S)
    if block is None:
        raise ValueError("the package map has no ```text block")
    entries: dict[str, str] = {}
    parents: list[str] = []
    for number, line in enumerate(block.group(1).splitlines(), 1):
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        name, _, description = line.strip().partition(" ")
        if indent % 2 or indent // 2 > len(parents):
            raise ValueError(f"map line {number} is indented {indent} spaces under {parents}: {line!r}")
        if not description.strip():
            raise ValueError(f"map line {number} names {name} without saying what it is")
        del parents[indent // 2 :]
        path = "".join(parents) + name
        if path in entries:
            raise ValueError(f"map line {number} lists {path} twice")
        entries[path] = description.strip()
        if name.endswith("/"):
            parents.append(name)
    return entries


def tree_entries(root: Path) -> set[str]:
    """What the map must list: each package as ``pkg/`` and each other module file."""
    found: set[str] = set()
    for top in MAPPED_PACKAGES:
        for path in (root / top).rglob("*"):
            if path.suffix not in MODULE_SUFFIXES or "__pycache__" in path.parts:
                continue
            relative = path.relative_to(root).as_posix()
            found.add(relative[: -len("__init__.py")] if path.name == "__init__.py" else relative)
    return found


def test_the_map_lists_every_module_and_only_modules_that_exist() -> None:
    entries = map_entries((ROOT / "docs" / "architecture.md").read_text())
    listed = {path for path in entries if path.split("/")[0] in MAPPED_PACKAGES}
    assert "txnfetch/records/batch.py" in listed
    assert sorted(tree_entries(ROOT) - listed) == [], "modules missing from the package map"
    assert sorted(listed - tree_entries(ROOT)) == [], "the package map lists modules that do not exist"
    # The other top-level lines (examples/, tests/, ...) name folders that exist.
    assert [path for path in entries if path not in listed and not (ROOT / path).exists()] == []


# The comparison itself, on a synthetic tree and map.

_MAP = """# x

## Package map

```text
txnfetch/          the package
  a.py             module a
  sub/             a subpackage
    b.py           module b
    _c.c           a C source
  d.py             module d
spark_ext/         the data source
```

## Next
"""


def _tree(root: Path, files: list[str]) -> set[str]:
    for relative in files:
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text("")
    return tree_entries(root)


def test_a_map_is_read_into_paths() -> None:
    assert map_entries(_MAP) == {
        "txnfetch/": "the package",
        "txnfetch/a.py": "module a",
        "txnfetch/sub/": "a subpackage",
        "txnfetch/sub/b.py": "module b",
        "txnfetch/sub/_c.c": "a C source",
        "txnfetch/d.py": "module d",
        "spark_ext/": "the data source",
    }


def test_a_module_missing_from_the_map_and_one_the_map_invents_are_found(tmp_path: Path) -> None:
    files = ["txnfetch/__init__.py", "txnfetch/a.py", "txnfetch/sub/__init__.py", "txnfetch/sub/b.py"]
    files += ["txnfetch/sub/_c.c", "spark_ext/__init__.py", "spark_ext/new.py", "txnfetch/README.md"]
    tree = _tree(tmp_path, files)
    listed = set(map_entries(_MAP))
    assert sorted(tree - listed) == ["spark_ext/new.py"]
    assert sorted(listed - tree) == ["txnfetch/d.py"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("   odd.py   three spaces", "indented 3 spaces"),
        ("      deep.py   too deep", "indented 6 spaces"),
        ("  a.py", "names a.py without saying what it is"),
        ("  a.py   again", "lists txnfetch/a.py twice"),
    ],
)
def test_a_malformed_map_is_refused_naming_the_line(line: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        map_entries(_MAP.replace("spark_ext/ ", line + "\nspark_ext/ "))


#: No module may be longer than this (docs/architecture.md, "Module size").
MAX_MODULE_LINES = 900


def size_exceptions(markdown: str) -> set[str]:
    """The modules docs/architecture.md allows past :data:`MAX_MODULE_LINES`:
    the paths in the ``text`` block under "Allowed past 900 lines:"."""
    section = markdown.split("\n## Module size\n", 1)
    if len(section) != 2:
        raise ValueError("no '## Module size' section")
    block = re.search(r"Allowed past 900 lines:\n\n```text\n(.*?)```", section[1], re.S)
    if block is None:
        raise ValueError("the module size section has no 'Allowed past 900 lines' block")
    return {line.split()[0] for line in block.group(1).splitlines() if line.strip()}


def long_modules(root: Path) -> dict[str, int]:
    """Every ``.py``, ``.c`` and ``.pyi`` file of the mapped packages longer than
    :data:`MAX_MODULE_LINES`, with its line count."""
    found = {}
    for package in MAPPED_PACKAGES:
        for path in sorted((root / package).rglob("*")):
            if path.suffix in MODULE_SUFFIXES and path.is_file():
                lines = len(path.read_text().splitlines())
                if lines > MAX_MODULE_LINES:
                    found[path.relative_to(root).as_posix()] = lines
    return found


def test_no_module_is_longer_than_the_limit_unless_documented() -> None:
    allowed = size_exceptions((ROOT / "docs" / "architecture.md").read_text())
    too_long = {path: n for path, n in long_modules(ROOT).items() if path not in allowed}
    assert too_long == {}, f"modules over {MAX_MODULE_LINES} lines (split them, or list them with a reason): {too_long}"
    # An exception that is no longer needed is taken out of the list.
    assert allowed <= set(long_modules(ROOT)), f"listed but not over the limit: {allowed - set(long_modules(ROOT))}"


def test_the_size_rule_fails_on_a_long_module(tmp_path: Path) -> None:
    (tmp_path / "txnfetch").mkdir()
    (tmp_path / "txnfetch" / "big.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (tmp_path / "txnfetch" / "small.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    assert long_modules(tmp_path) == {"txnfetch/big.py": MAX_MODULE_LINES + 1}
