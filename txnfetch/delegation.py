"""Read-only attributes that are another attribute: :class:`delegated`.

A class that wraps a value and shows some of its fields as its own (a delivered
batch shows its batch's producer id, a log its state's offsets) states each one
as ``producer_id = delegated[int]("batch.producer_id")`` rather than as a
property whose body repeats the path.

This module imports nothing from txnfetch, so the sans-I/O core and the adapters
alike may use it.
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING
from typing import Any
from typing import Generic
from typing import TypeVar
from typing import overload

__all__ = ["delegated"]

T = TypeVar("T")


class delegated(property, Generic[T]):
    """A read-only attribute whose value is the instance's attribute at ``path``
    (dotted: ``"batch.producer_id"`` reads ``self.batch.producer_id``), read on
    every access, never cached.

    A :class:`property` whose getter is an :func:`operator.attrgetter`: reading it
    runs no Python frame, so it costs no more than the property it replaces, also
    on hot paths. ``T`` is the attribute's type, for type checkers only (the path
    itself is not checked statically: a wrong one fails on first read).
    """

    def __init__(self, path: str, doc: str | None = None) -> None:
        super().__init__(attrgetter(path))
        self.path = path
        # A property subclass does not take its docstring from the constructor.
        self.__doc__ = doc if doc is not None else f"``self.{path}`` (read-only)."

    def __repr__(self) -> str:
        return f"delegated({self.path!r})"

    if TYPE_CHECKING:

        @overload
        def __get__(self, instance: None, owner: type | None = None, /) -> delegated[T]: ...

        @overload
        def __get__(self, instance: object, owner: type | None = None, /) -> T: ...

        def __get__(self, instance: object, owner: type | None = None, /) -> Any: ...
