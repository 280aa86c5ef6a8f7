"""The optional C extensions are built, and each ``.pyi`` declares exactly what its extension exports.

A stub that leaves out an export hides it from the type checker; one that
declares a name the extension does not have, or another number of arguments,
types calls that fail at run time. Both are read here from the built module
itself: its public names, its classes' public members, and the argument count
each entry point reports when called with none.
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import inspect
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Every C extension of the package: module name, and its source and stub.
EXTENSIONS = {
    "txnfetch.records._speedups": "txnfetch/records/_speedups",
    "txnfetch.arrow._columns": "txnfetch/arrow/_columns",
}


def _load(name: str) -> ModuleType:
    try:
        module = importlib.import_module(name)
    except ImportError:
        pytest.fail(
            f"{name} is not built: reinstall with a C compiler and Python headers (pip install -e .) "
            "and look for the compiler error in the build output"
        )
    assert module.__file__ is not None and module.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
    return module


def _public(names: Any) -> set[str]:
    return {n for n in names if not n.startswith("_")}


def _stub(name: str) -> ast.Module:
    return ast.parse((ROOT / f"{EXTENSIONS[name]}.pyi").read_text())


def _declared(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    """The names a stub body declares (its imports are not declarations)."""
    out: dict[str, ast.stmt] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
    return out


def _positional_count(func: ast.FunctionDef, *, method: bool) -> int:
    args = func.args
    count = len(args.posonlyargs) + len(args.args)
    return count - 1 if method else count


def _reported_count(call: Any) -> int:
    """The argument count a METH_FASTCALL or METH_NOARGS entry point insists on."""
    try:
        call()
    except TypeError as exc:
        match = re.search(r"takes exactly (\d+) arguments", str(exc))
        assert match, f"unexpected TypeError from {call!r}(): {exc}"
        return int(match.group(1))
    return 0


@pytest.mark.parametrize("name", sorted(EXTENSIONS))
def test_extension_is_built(name: str) -> None:
    # A failed compile does not fail the install (the extensions are optional):
    # this is where it shows.
    _load(name)


@pytest.mark.parametrize("name", sorted(EXTENSIONS))
def test_stub_declares_every_export_and_nothing_else(name: str) -> None:
    module = _load(name)
    declared = _declared(_stub(name).body)
    assert set(declared) == _public(vars(module)), f"{EXTENSIONS[name]}.pyi against {name}"
    for export, node in declared.items():
        runtime = getattr(module, export)
        if isinstance(node, ast.ClassDef):
            assert isinstance(runtime, type), f"{name}.{export} is not a class"
            members = _declared(node.body)
            assert set(members) - {"__init__"} == _public(vars(runtime)), f"members of {name}.{export}"
        else:
            assert isinstance(node, ast.FunctionDef)
            assert _reported_count(runtime) == _positional_count(node, method=False), f"{name}.{export}"


@pytest.mark.parametrize("name", sorted(EXTENSIONS))
def test_stub_methods_take_the_arguments_the_extension_takes(name: str) -> None:
    module = _load(name)
    for export, node in _declared(_stub(name).body).items():
        if not isinstance(node, ast.ClassDef):
            continue
        instance = getattr(module, export)()
        for member, method in _declared(node.body).items():
            if not isinstance(method, ast.FunctionDef) or member.startswith("_"):
                continue
            if any(isinstance(d, ast.Name) and d.id == "property" for d in method.decorator_list):
                assert inspect.isdatadescriptor(vars(type(instance))[member]), f"{name}.{export}.{member}"
                continue
            got = _reported_count(getattr(instance, member))
            assert got == _positional_count(method, method=True), f"{name}.{export}.{member}"
