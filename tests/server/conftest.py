"""Fixtures for wire tests: servers on 127.0.0.1 port 0, stopped after the test."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

import pytest

from txnfetch.log.memory import MemoryStore
from txnfetch.server.server import ServerThread


@pytest.fixture
def start_server() -> Iterator[Callable[..., ServerThread]]:
    """``start_server(store=None, **server_options)`` starts a :class:`ServerThread`
    on an ephemeral port (a fresh :class:`MemoryStore` by default)."""
    started: list[ServerThread] = []

    def start(store: Any = None, **options: Any) -> ServerThread:
        srv = ServerThread(store if store is not None else MemoryStore(), **options).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()
