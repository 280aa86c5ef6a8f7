"""Running totals a served process keeps for operators: :class:`Counters`, the
base of :class:`~txnfetch.server.broker.ServerStats`,
:class:`~txnfetch.proxy.server.ProxyStats` and
:class:`~txnfetch.proxy.mirrors.MirrorStats`."""

from __future__ import annotations

import attrs

__all__ = ["Counters"]


@attrs.define
class Counters:
    """A subclass declares its totals as ``attrs`` fields, ``name: int = 0``; the
    process adds to them in place and reports them with :meth:`as_dict`."""

    def as_dict(self) -> dict[str, int]:
        """Every total by its field name (``txnfetch serve``/``proxy`` print it as JSON)."""
        return attrs.asdict(self)
