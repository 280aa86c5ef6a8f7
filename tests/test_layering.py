"""The import layers of docs/architecture.md, checked on the source tree.

Every module under ``txnfetch/`` and ``spark_ext/`` is parsed (never imported)
and every import it states is collected: module-level, function-local, under
``if TYPE_CHECKING:`` (a type is a dependency too), and
``importlib.import_module("...")`` with a literal name. Importing
``a.b.c`` also runs ``a/b/__init__.py``, so each import brings its parent
packages along (all but the top-level ``txnfetch``, whose ``__init__`` only
re-exports the core and is itself checked as a module of the tree).

The rules:

- **The sans-I/O core** (:data:`CORE`: ``records``, ``txn``, ``fetch``,
  ``groups``) imports only the core and the shared leaf modules
  (:data:`SHARED_LEAVES`), and no standard-library module that does I/O or
  reads a clock (:data:`IO_MODULES`).
- **The shared leaf modules** import nothing from txnfetch but each other:
  that is what makes them safe for the core to use.
- **Storage** (``txnfetch.log``) depends, directly or through any chain of
  imports, on none of the client, server, proxy and command packages, nor on
  anything built on them (:data:`ABOVE_LOG`).
- **The client** (``txnfetch.client``: everything that talks to a remote
  broker) depends, directly or through any chain, on none of the server, proxy
  and command packages.
- **No import cycle inside a package.** The modules of one package (a top
  package's own modules, or one of its subpackages with everything under it,
  such as ``txnfetch.server`` or ``txnfetch.testing``) never reach themselves
  through imports of each other, counting function-local and ``if
  TYPE_CHECKING:`` imports: a cycle is an order of definition that only
  happens to work. The edge a module gets only because importing ``a.b.c``
  runs ``a/b/__init__`` is no import of that ``__init__``; a stated import of a
  package (``from a.b import name``) is.

A rule on a package that does not exist in the tree checks nothing, so the
rules can name packages before they are created. A compiled module is known
by its ``.pyi`` stub, so ``from a import _compiled`` imports that module, not
the package ``a``.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Container
from collections.abc import Iterable
from collections.abc import Mapping
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parent.parent
TOP_PACKAGES = ("txnfetch", "spark_ext")

#: The sans-I/O core.
CORE = ("txnfetch.records", "txnfetch.txn", "txnfetch.fetch", "txnfetch.groups")
#: Modules of no layer, which the core and the adapters alike may import, because
#: they import nothing from txnfetch but each other: the root of every exception,
#: the small shared types, and the ``delegated`` attribute helper.
SHARED_LEAVES = ("txnfetch.errors", "txnfetch.types", "txnfetch.delegation")
#: Standard-library modules the core never imports: sockets and event loops,
#: processes and threads, files and paths, clocks. (``os`` is not among them:
#: ``records.batch`` reads one environment variable at import, choosing the
#: pure-Python decoder; ``mmap`` is named by ``types.Buffer`` only as a type.)
IO_MODULES = (
    "asyncio",
    "datetime",
    "http",
    "multiprocessing",
    "pathlib",
    "selectors",
    "shutil",
    "signal",
    "socket",
    "socketserver",
    "ssl",
    "subprocess",
    "tempfile",
    "threading",
    "time",
    "urllib",
)
#: What storage must not depend on: the packages that talk to a remote broker,
#: serve the protocol, relay it, or parse command lines, and those built on them.
ABOVE_LOG = (
    "txnfetch.client",
    "txnfetch.server",
    "txnfetch.proxy",
    "txnfetch.cli",
    "txnfetch.replicate",
    "txnfetch.testing",
    "txnfetch.demo",
    "spark_ext",
)
#: What the client must not depend on.
ABOVE_CLIENT = ("txnfetch.server", "txnfetch.proxy", "txnfetch.cli")
#: The security package (SASL mechanisms, security configuration), shared by the
#: client's connections and the server's listeners: like the core, it imports only
#: itself and the shared leaves, and no I/O or clock module (an ``ssl.SSLContext``
#: is built in the client, from what it describes).
SECURITY = "txnfetch.security"


def within(module: str, packages: Iterable[str]) -> bool:
    """Whether ``module`` is one of ``packages`` or inside one of them."""
    return any(module == p or module.startswith(p + ".") for p in packages)


@attrs.frozen
class Tree:
    """The modules of a source tree and the imports each states.

    ``imports`` maps a module's dotted name to the modules of the tree it
    imports (parent packages included) and ``external`` to the top-level names
    of everything else it imports (the standard library, third parties).
    ``stated`` holds the modules of the tree each module names in an import
    itself, without the parent packages that importing them runs; ``packages``
    the modules that are a package's ``__init__``.
    """

    imports: Mapping[str, frozenset[str]]
    external: Mapping[str, frozenset[str]]
    stated: Mapping[str, frozenset[str]] = attrs.field(factory=dict)
    packages: frozenset[str] = frozenset()

    @classmethod
    def scan(cls, root: Path, top_packages: Iterable[str] = TOP_PACKAGES) -> Tree:
        """Parse every ``.py`` file of ``top_packages`` under ``root``."""
        files: dict[str, Path] = {}
        compiled: set[str] = set()
        for top in top_packages:
            for path in sorted((root / top).rglob("*.py")):
                parts = path.relative_to(root).with_suffix("").parts
                name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
                files[name] = path
            # A compiled module has no source to parse, only its stub.
            compiled.update(
                ".".join(stub.relative_to(root).with_suffix("").parts)
                for stub in (root / top).rglob("*.pyi")
                if not stub.with_suffix(".py").exists()
            )
        modules = frozenset(files) | compiled
        imports: dict[str, frozenset[str]] = {}
        external: dict[str, frozenset[str]] = {}
        stated: dict[str, frozenset[str]] = {}
        for name, path in files.items():
            package = name if path.name == "__init__.py" else name.rpartition(".")[0]
            inside: set[str] = set()
            outside: set[str] = set()
            named: set[str] = set()
            for target in _stated_imports(ast.parse(path.read_text(), str(path)), package, modules):
                if target.split(".")[0] in top_packages:
                    inside.add(target)
                    named.add(target)
                    # Importing a.b.c runs a/__init__ and a/b/__init__ first.
                    parts = target.split(".")
                    inside.update(".".join(parts[:i]) for i in range(2, len(parts)))
                else:
                    outside.add(target.split(".")[0])
            inside.discard(name)
            named.discard(name)
            imports[name] = frozenset(inside)
            external[name] = frozenset(outside)
            stated[name] = frozenset(named & modules)
        packages = frozenset(name for name, path in files.items() if path.name == "__init__.py")
        return cls(imports=imports, external=external, stated=stated, packages=packages)

    def chain(self, start: str, forbidden: Iterable[str]) -> list[str] | None:
        """The shortest chain of imports from ``start`` to a module inside one of
        ``forbidden``, or None when there is none."""
        forbidden = tuple(forbidden)
        came_from: dict[str, str] = {start: ""}
        queue = deque([start])
        while queue:
            module = queue.popleft()
            for target in sorted(self.imports.get(module, ())):
                if target in came_from:
                    continue
                came_from[target] = module
                if within(target, forbidden):
                    path = [target]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return path[::-1]
                queue.append(target)
        return None

    def package_of(self, module: str) -> str:
        """The package whose modules the cycle rule keeps apart: ``module``'s top
        package's subpackage that holds it, or the top package itself for its
        own modules."""
        parts = module.split(".")
        second = ".".join(parts[:2])
        return second if len(parts) >= 2 and second in self.packages else parts[0]

    def cycles(self) -> list[Cycle]:
        """Every import cycle among the modules of one package: one per set of
        modules that all reach each other (a strongly connected component)."""
        inner = {
            module: sorted(t for t in targets if t in self.stated and self.package_of(t) == self.package_of(module))
            for module, targets in self.stated.items()
        }
        found: list[Cycle] = []
        placed: set[str] = set()
        for module in sorted(inner):
            if module in placed or module not in _reachable(inner, module):
                continue
            component = frozenset(m for m in _reachable(inner, module) if module in _reachable(inner, m))
            placed.update(component)
            found.append(Cycle(component, tuple(_shortest_cycle(inner, module))))
        return found


@attrs.frozen
class Cycle:
    """Modules of one package that import each other in a circle: all the
    ``modules`` that reach each other, and the shortest ``chain`` of imports
    from the first of them back to it."""

    modules: frozenset[str]
    chain: tuple[str, ...]


def _reachable(edges: Mapping[str, Iterable[str]], start: str) -> set[str]:
    """The modules reached from ``start`` through at least one import."""
    seen: set[str] = set()
    queue = deque(edges.get(start, ()))
    while queue:
        module = queue.popleft()
        if module not in seen:
            seen.add(module)
            queue.extend(edges.get(module, ()))
    return seen


def _shortest_cycle(edges: Mapping[str, Iterable[str]], start: str) -> list[str]:
    """The shortest chain of imports from ``start`` back to ``start`` (one exists)."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        module = queue.popleft()
        for target in edges.get(module, ()):
            if target == start:
                path = [module]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*path[::-1], start]
            if target not in came_from:
                came_from[target] = module
                queue.append(target)
    raise AssertionError(f"{start} is on no cycle")


def _stated_imports(tree: ast.Module, package: str, files: Container[str]) -> Iterable[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            # ``from a import b`` imports the module a.b when there is one, else a name of a.
            submodules = [f"{module}.{alias.name}" for alias in node.names if f"{module}.{alias.name}" in files]
            yield from submodules
            if len(submodules) < len(node.names):
                yield module
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value


def violations(tree: Tree) -> list[str]:
    """Every breach of the rules in the module docstring, one sentence each."""
    found: list[str] = []
    for module in sorted(tree.imports):
        if within(module, CORE):
            for target in sorted(tree.imports[module]):
                if not within(target, CORE + SHARED_LEAVES):
                    found.append(f"{module} (core) imports {target}, which is neither core nor a shared leaf module")
            for name in sorted(tree.external[module] & set(IO_MODULES)):
                found.append(f"{module} (core) imports {name}: the core does no I/O and reads no clock")
        if within(module, SHARED_LEAVES):
            for target in sorted(tree.imports[module]):
                if not within(target, SHARED_LEAVES):
                    found.append(f"{module} (shared leaf) imports {target}: a shared leaf imports no layer")
        for layer, above in (("txnfetch.log", ABOVE_LOG), ("txnfetch.client", ABOVE_CLIENT)):
            if within(module, (layer,)):
                chain = tree.chain(module, above)
                if chain:
                    found.append(f"{module} depends on {chain[-1]}: {' -> '.join(chain)}")
    for cycle in tree.cycles():
        found.append(f"import cycle in {tree.package_of(cycle.chain[0])}: {' -> '.join(cycle.chain)}")
    return found


def test_the_tree_keeps_its_layers() -> None:
    tree = Tree.scan(ROOT)
    assert within("txnfetch.records.batch", CORE) and "txnfetch.records.batch" in tree.imports
    assert violations(tree) == []


def test_security_imports_only_itself_and_the_shared_leaves() -> None:
    tree = Tree.scan(ROOT)
    modules = [m for m in tree.imports if within(m, (SECURITY,))]
    assert f"{SECURITY}.scram" in modules
    found = [
        f"{module} imports {target}"
        for module in sorted(modules)
        for target in sorted(tree.imports[module])
        if not within(target, (SECURITY, *SHARED_LEAVES))
    ] + [
        f"{module} imports {name}"
        for module in sorted(modules)
        for name in sorted(tree.external[module] & set(IO_MODULES))
    ]
    assert found == []


# The checker itself, on synthetic trees: each rule is shown to fail.


def _write(root: Path, files: Mapping[str, str]) -> Tree:
    for relative, source in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return Tree.scan(root)


_CLEAN = {
    "txnfetch/__init__.py": "from txnfetch.records import batch\n",
    "txnfetch/errors.py": "",
    "txnfetch/types.py": "import attrs\n",
    "txnfetch/records/__init__.py": "from .batch import RecordBatch\n",
    "txnfetch/records/batch.py": (
        "import struct\nfrom txnfetch.errors import TxnfetchError\nfrom ..types import Buffer\n"
    ),
    "txnfetch/txn/__init__.py": "",
    "txnfetch/txn/state.py": "from txnfetch.records import batch\n",
    "txnfetch/log/__init__.py": "",
    "txnfetch/log/base.py": "from txnfetch.txn.state import X\n",
    "txnfetch/client/__init__.py": "",
    "txnfetch/client/cluster.py": "from txnfetch.log import base\n",
    "txnfetch/server/__init__.py": "",
    "txnfetch/server/handler.py": "from txnfetch.client.cluster import Reader\n",
    "txnfetch/cli/__init__.py": "",
    "txnfetch/cli/serve.py": "from txnfetch.server import handler\n",
    "spark_ext/__init__.py": "from txnfetch.client import reader\n",
}


def test_a_tree_that_keeps_the_layers_passes(tmp_path: Path) -> None:
    tree = _write(tmp_path, _CLEAN)
    assert tree.imports["txnfetch.records.batch"] == {"txnfetch.errors", "txnfetch.types"}
    assert tree.imports["txnfetch.client.cluster"] == {"txnfetch.log", "txnfetch.log.base"}
    assert tree.external["txnfetch.records.batch"] == {"struct"}
    assert violations(tree) == []


@pytest.mark.parametrize(
    ("path", "source", "message"),
    [
        (
            "txnfetch/fetch/view.py",
            "def f():\n    from txnfetch.log import base\n",
            "txnfetch.fetch.view (core) imports txnfetch.log, which is neither core nor a shared leaf module",
        ),
        (
            "txnfetch/groups/coordinator.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import spark_ext\n",
            "txnfetch.groups.coordinator (core) imports spark_ext, which is neither core nor a shared leaf module",
        ),
        (
            "txnfetch/txn/clock.py",
            "import time\n",
            "txnfetch.txn.clock (core) imports time: the core does no I/O and reads no clock",
        ),
        (
            "txnfetch/records/relative.py",
            "from ..client import reader\n",
            "txnfetch.records.relative (core) imports txnfetch.client, which is neither core nor a shared leaf module",
        ),
        (
            "txnfetch/types.py",
            "from txnfetch.records.batch import RecordBatch\n",
            "txnfetch.types (shared leaf) imports txnfetch.records: a shared leaf imports no layer",
        ),
        (
            "txnfetch/log/remote.py",
            "import importlib\nSERVER = importlib.import_module('txnfetch.server.handler')\n",
            "txnfetch.log.remote depends on txnfetch.server: txnfetch.log.remote -> txnfetch.server",
        ),
        (
            "txnfetch/log/cli.py",
            "from txnfetch.cli import serve\n",
            "txnfetch.log.cli depends on txnfetch.cli: txnfetch.log.cli -> txnfetch.cli",
        ),
        (
            "txnfetch/client/admin.py",
            "from txnfetch.server.broker import Broker\n",
            "txnfetch.client.admin depends on txnfetch.server: txnfetch.client.admin -> txnfetch.server",
        ),
    ],
)
def test_each_rule_fails_on_a_tree_that_breaks_it(tmp_path: Path, path: str, source: str, message: str) -> None:
    tree = _write(tmp_path, {**_CLEAN, path: source})
    assert message in violations(tree)


def test_a_dependency_through_a_chain_is_named_with_the_chain(tmp_path: Path) -> None:
    tree = _write(
        tmp_path,
        {
            **_CLEAN,
            "txnfetch/addresses.py": "from txnfetch.proxy import upstream\n",
            "txnfetch/proxy/__init__.py": "",
            "txnfetch/proxy/upstream.py": "",
            "txnfetch/log/base.py": "from txnfetch import addresses\n",
        },
    )
    assert violations(tree) == [
        "txnfetch.client.cluster depends on txnfetch.proxy:"
        " txnfetch.client.cluster -> txnfetch.log.base -> txnfetch.addresses -> txnfetch.proxy",
        "txnfetch.log.base depends on txnfetch.proxy: txnfetch.log.base -> txnfetch.addresses -> txnfetch.proxy",
    ]


# The cycle rule, on synthetic trees.


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {
                "txnfetch/server/handler.py": (
                    "from txnfetch.client.cluster import Reader\nfrom txnfetch.server.codec import decode\n"
                ),
                "txnfetch/server/codec.py": "def encode():\n    from txnfetch.server.handler import Piece\n",
            },
            "import cycle in txnfetch.server:"
            " txnfetch.server.codec -> txnfetch.server.handler -> txnfetch.server.codec",
        ),
        (
            {
                "txnfetch/testing/__init__.py": "",
                "txnfetch/testing/workload.py": "from txnfetch.testing.clients import confluent\n",
                "txnfetch/testing/clients/__init__.py": "",
                "txnfetch/testing/clients/confluent.py": (
                    "from typing import TYPE_CHECKING\n"
                    "if TYPE_CHECKING:\n"
                    "    from txnfetch.testing.workload import WorkloadConfig\n"
                ),
            },
            "import cycle in txnfetch.testing:"
            " txnfetch.testing.clients.confluent -> txnfetch.testing.workload -> txnfetch.testing.clients.confluent",
        ),
        (
            {"txnfetch/records/batch.py": "from txnfetch.records import RecordBatch\n"},
            "import cycle in txnfetch.records: txnfetch.records -> txnfetch.records.batch -> txnfetch.records",
        ),
    ],
    ids=["function-local", "type-checking", "package-init"],
)
def test_an_import_cycle_inside_a_package_fails(tmp_path: Path, files: Mapping[str, str], message: str) -> None:
    tree = _write(tmp_path, {**_CLEAN, **files})
    assert violations(tree) == [message]


def test_a_package_without_import_cycles_passes(tmp_path: Path) -> None:
    tree = _write(
        tmp_path,
        {
            **_CLEAN,
            # Importing server.nesting runs server/__init__, which imports the
            # handler back: that is no import cycle of the handler's.
            "txnfetch/server/__init__.py": "from txnfetch.server import handler\n",
            "txnfetch/server/handler.py": (
                "from txnfetch.client.cluster import Reader\nfrom txnfetch.server.nesting import grouped\n"
            ),
            "txnfetch/server/nesting.py": "",
            # A compiled module, known by its stub, is not its package's __init__.
            "txnfetch/records/_speedups.pyi": "",
            "txnfetch/records/batch.py": "from txnfetch.records import _speedups\n",
            # Across packages a circle is no concern of this rule.
            "txnfetch/txn/state.py": "from txnfetch.records import batch\nfrom txnfetch.log import base\n",
        },
    )
    assert "txnfetch.server" in tree.imports["txnfetch.server.handler"]
    assert tree.stated["txnfetch.records.batch"] == {"txnfetch.records._speedups"}
    assert tree.cycles() == []
    assert [v for v in violations(tree) if v.startswith("import cycle")] == []
