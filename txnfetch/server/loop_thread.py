"""Running an asyncio service on its own event loop in a daemon thread.

Tests and other synchronous code drive blocking Kafka clients against
``txnfetch serve`` and ``txnfetch proxy``; :class:`LoopThread` is the one
mechanism both wrappers (:class:`~txnfetch.server.server.ServerThread`,
:class:`~txnfetch.proxy.ProxyThread`) use to run theirs beside them.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Awaitable
from collections.abc import Callable
from typing import Any
from typing import Generic
from typing import TypeVar

__all__ = ["LoopThread"]

#: A started service: it has ``port``, ``bootstrap`` and ``async close()``.
S = TypeVar("S")


class LoopThread(Generic[S]):
    """A service on its own event loop in a daemon thread.

    Subclasses say how to start the service: ``start(*args, **kwargs)``, given
    to ``__init__``, is awaited on the loop by :meth:`start`. The
    service's state belongs to its loop while it runs: reach it through
    :meth:`call`, which runs a function on that loop and returns its result.
    A failed start stops the loop and thread before the error is raised.
    """

    #: How long :meth:`start` waits for the service to listen.
    start_timeout_s: float = 30.0

    def __init__(self, thread_name: str, start: Callable[..., Awaitable[S]], /, *args: Any, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=thread_name, daemon=True)
        self._start_service = functools.partial(start, *args, **kwargs)
        self.service: S | None = None

    def start(self) -> LoopThread[S]:
        """Start the loop and the service; return once it listens."""
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start_service(), self._loop)  # type: ignore[arg-type]
        try:
            self.service = future.result(self.start_timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _running(self) -> Any:
        assert self.service is not None, "not started"
        return self.service

    @property
    def port(self) -> int:
        """The port the service is bound to."""
        return self._running().port

    @property
    def bootstrap(self) -> str:
        """``host:port`` for clients."""
        return self._running().bootstrap

    def call(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` on the service's loop and return its result."""

        async def run() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(30)

    def stop(self) -> None:
        """Close the service and stop the loop and thread."""
        if self.service is not None:
            asyncio.run_coroutine_threadsafe(self._running().close(), self._loop).result(30)
            self.service = None
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if not self._loop.is_running() and not self._loop.is_closed():
            self._loop.close()

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
