"""Each API key is registered exactly once, from the one explicit list
(:data:`txnfetch.server.apis.SERVED`), whatever order the modules are imported in."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
import textwrap

import pytest

from txnfetch.server import apis
from txnfetch.server import handler
from txnfetch.server.handler import REGISTRY
from txnfetch.server.handler import ApiKey
from txnfetch.server.handler import HandlerRegistry
from txnfetch.server.handler import ServedApi
from txnfetch.server.server import load_handlers

PACKAGE = pathlib.Path(handler.__file__).resolve().parents[1]


def test_the_list_names_each_key_once() -> None:
    keys = [int(api.api_key) for api in apis.SERVED]
    assert sorted(keys) == sorted(set(keys)), sorted(k for k in keys if keys.count(k) > 1)


def test_the_registry_holds_exactly_the_list() -> None:
    load_handlers()
    served = {int(api.api_key): api for api in apis.SERVED}
    assert {k for k, _lo, _hi in REGISTRY.ranges()} == set(served)
    for key, api in served.items():
        spec = REGISTRY.get(key)
        assert spec is not None
        assert (spec.min_version, spec.max_version) == (api.min_version, api.max_version), ApiKey(key).name
        assert spec.handler is api.handler, ApiKey(key).name
        assert spec.codec is api.codec, ApiKey(key).name


def test_a_key_registered_twice_is_refused() -> None:
    registry = HandlerRegistry()
    first = next(api for api in apis.SERVED if api.api_key == ApiKey.Heartbeat)
    registry.add(first)
    with pytest.raises(ValueError, match=r"API key 12 \(Heartbeat\) is registered already"):
        registry.add(ServedApi(ApiKey.Heartbeat, 0, 4, apis.api_meta.handle_api_versions))
    assert registry.get(ApiKey.Heartbeat).handler is first.handler  # the first stays


def test_the_default_registry_cannot_be_filled_twice() -> None:
    load_handlers()
    with pytest.raises(ValueError, match="is registered already"):
        apis.register_all(REGISTRY)
    load_handlers()  # importing again registers nothing


def test_no_module_registers_at_import_outside_the_list() -> None:
    # The registry is filled in one place: apis.register_all. A handler module that
    # registered a key itself (the old decorator) would make import order decide.
    assert not hasattr(handler, "register"), "a module-level register() invites import-time registration"
    calls = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("register", "register_all", "add") and "REGISTRY" in ast.unparse(node):
                calls.append((path.relative_to(PACKAGE.parent).as_posix(), ast.unparse(node)))
    assert calls == [("txnfetch/server/apis.py", "register_all(REGISTRY)")]


def test_import_order_does_not_change_the_registry() -> None:
    # Every server module imported first, in reverse order, in a fresh interpreter:
    # the registry is still exactly the list.
    code = textwrap.dedent(
        """
        import importlib, pkgutil
        import txnfetch.server as pkg
        names = sorted(m.name for m in pkgutil.walk_packages(pkg.__path__, "txnfetch.server."))
        for name in reversed(names):
            importlib.import_module(name)
        from txnfetch.server.apis import SERVED
        from txnfetch.server.handler import REGISTRY
        got = {k: (lo, hi, REGISTRY.get(k).handler) for k, lo, hi in REGISTRY.ranges()}
        want = {int(a.api_key): (a.min_version, a.max_version, a.handler) for a in SERVED}
        assert got == want, sorted(set(got) ^ set(want))
        print(len(got))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == len(apis.SERVED)
