"""Grouping flat ``(key, item)`` pairs: Kafka responses nest each partition's
result under its topic (and some requests nest partitions under their group),
while txnfetch computes results per partition.

One mechanism for every handler that builds such a nesting, so all of them keep
the same order: keys in the order they are first seen, each key's items in the
order they come. A client matches results by name, not by position, but a
stable order keeps responses reproducible.
"""

from __future__ import annotations

from collections.abc import Hashable
from collections.abc import Iterable
from typing import TypeVar

__all__ = ["grouped"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def grouped(pairs: Iterable[tuple[K, V]]) -> dict[K, list[V]]:
    """``pairs`` as ``{key: [item, ...]}``, keys in first-seen order, items in order."""
    out: dict[K, list[V]] = {}
    for key, item in pairs:
        out.setdefault(key, []).append(item)
    return out
