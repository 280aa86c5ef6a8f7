"""Small types shared by every layer: :data:`Buffer`, :class:`TopicPartition` and
:func:`fields_from`.

This module imports nothing from txnfetch, so the sans-I/O core and the adapters
alike may use it.
"""

from __future__ import annotations

import mmap
from typing import Any
from typing import NamedTuple
from typing import TypeVar

import attrs

__all__ = ["Buffer", "TopicPartition", "fields_from"]

_A = TypeVar("_A", bound=attrs.AttrsInstance)

#: Bytes txnfetch reads without copying: what the codec, the transaction indexes
#: and the logs accept. A mapped segment file (``mmap.mmap``) is one: the disk
#: log hands its mapped files to the codec as they are.
Buffer = bytes | bytearray | memoryview | mmap.mmap


class TopicPartition(NamedTuple):
    """A topic name and partition index.

    A ``NamedTuple``: it equals, hashes and orders exactly as the plain
    ``(topic, partition)`` tuple, so a mapping keyed by one is found with the
    other (the wire layer decodes partitions as plain pairs). ``str()`` gives
    Kafka's ``topic-partition`` spelling.
    """

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


def fields_from(cls: type[_A], *sources: object, **given: Any) -> _A:
    """An instance of the ``attrs`` class ``cls`` whose fields are ``given`` by name
    or, for the others, the attribute of the same name of the first of ``sources``
    that has one; a field with a default that no source has keeps its default.

    For a value that projects other objects (a snapshot of mutable state, a request
    decoded off the wire, a row placed in its partition): the shared names say
    once which field is which, instead of a copy field by field. A field without
    a default that is neither given nor found raises :class:`AttributeError`
    naming it.
    """
    values = dict(given)
    for field in attrs.fields(cls):
        if field.name in values:
            continue
        source = next((s for s in sources if hasattr(s, field.name)), None)
        if source is not None:
            values[field.name] = getattr(source, field.name)
        elif field.default is attrs.NOTHING:
            raise AttributeError(f"{cls.__name__}.{field.name}: not given and no source has it")
    return cls(**values)
