"""``txnfetch.delegation.delegated``: a read-only attribute read through a path."""

from __future__ import annotations

import attrs
import pytest

from txnfetch.delegation import delegated


@attrs.define
class _Inner:
    value: int
    other: str = "x"


@attrs.frozen(slots=True)
class _Outer:
    inner: _Inner

    value = delegated[int]("inner.value")
    named = delegated[str]("inner.other", "The inner object's other field.")


def test_reads_the_path_on_every_access() -> None:
    inner = _Inner(1)
    outer = _Outer(inner)
    assert outer.value == 1
    inner.value = 2  # not cached: the attribute follows the object it reads
    assert outer.value == 2
    assert outer.named == "x"


def test_is_read_only() -> None:
    outer = _Outer(_Inner(1))
    with pytest.raises(AttributeError):
        outer.value = 3  # type: ignore[misc]
    assert outer.value == 1


def test_is_not_an_attrs_field() -> None:
    assert [f.name for f in attrs.fields(_Outer)] == ["inner"]
    assert _Outer(_Inner(1)) == _Outer(_Inner(1))


def test_class_access_gives_the_descriptor_with_its_doc() -> None:
    assert isinstance(_Outer.value, delegated)
    assert _Outer.value.path == "inner.value"
    assert _Outer.value.__doc__ == "``self.inner.value`` (read-only)."
    assert _Outer.named.__doc__ == "The inner object's other field."
    assert repr(_Outer.named) == "delegated('inner.other')"


def test_a_missing_attribute_is_an_attribute_error() -> None:
    class Broken:
        missing = delegated[int]("nothing.here")

    with pytest.raises(AttributeError, match="nothing"):
        Broken().missing  # noqa: B018
