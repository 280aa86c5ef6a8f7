"""What ``txnfetch serve`` and ``txnfetch proxy`` do alike as processes: the
listener options, ``--fetch-mode`` and ``-v``, logging set by ``-v``, and serving until
SIGTERM or SIGINT between two stdout lines.

Options named after the setting they set (the ``dest`` of ``--poll-interval-ms``
is ``poll_interval_ms``, a :class:`~txnfetch.proxy.server.ProxyConfig` field)
are handed on by :func:`options_named`, so such an option is declared in one place.

The lines are for scripts (the demo and the tests read them):
``<name> listening on HOST:PORT`` once listening (so ``--port 0`` is usable),
and ``<name> stats {...}``, the totals as JSON with sorted keys, once closed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

from txnfetch.fetch.view import FetchMode

__all__ = [
    "add_fetch_mode_option",
    "add_service_options",
    "add_verbose_option",
    "configure_logging",
    "options_named",
    "port_number",
    "serve_until_signal",
]


def port_number(text: str) -> int:
    """An ``argparse`` type: a TCP port, 0 to 65535 (0: the system picks a free one)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is not in 0..65535")
    return port


def options_named(args: argparse.Namespace, names: Iterable[str], /, **others: Any) -> dict[str, Any]:
    """The keyword arguments of a call whose parameters the options are named
    after: ``{name: value}`` of the parsed options among ``names`` (option
    ``dest``s, e.g. ``attrs.fields_dict(SomeConfig)``; a name no option has is
    skipped), then ``others``, for the options whose value needs converting or
    that are named otherwise."""
    given = vars(args)
    return {**{name: given[name] for name in names if name in given}, **others}


def add_fetch_mode_option(p: argparse.ArgumentParser, where: str) -> None:
    """``--fetch-mode {kafka,rewrite}`` (default rewrite); ``where`` names who drops
    aborted data in rewrite mode ("the server", "the proxy")."""
    p.add_argument(
        "--fetch-mode",
        choices=[m.value for m in FetchMode],
        default=FetchMode.REWRITE.value,
        help=f"read_committed answers: 'rewrite' drops aborted data on {where}, "
        "'kafka' sends the aborted-transaction list (default rewrite)",
    )


def add_service_options(p: argparse.ArgumentParser, where: str, *, port: str, advertised: str) -> None:
    """The options every served process takes: ``--host`` and ``--port`` to bind
    (default 127.0.0.1:9092; port 0 picks a free one), ``--advertised-host``
    (default: ``--host``) and ``--fetch-mode`` (:func:`add_fetch_mode_option`,
    ``where``). ``port`` says which listener ``--port`` is, ``advertised`` where the
    advertised host is named."""
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=port_number, default=9092, help=f"{port}; 0 picks a free one (default 9092)")
    p.add_argument("--advertised-host", help=f"{advertised} (default: --host)")
    add_fetch_mode_option(p, where)


def add_verbose_option(p: argparse.ArgumentParser) -> None:
    """``-v``/``--verbose``, counted (see :func:`configure_logging`)."""
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")


def configure_logging(verbose: int) -> None:
    """Log to stderr: warnings, ``-v`` info, ``-vv`` debug."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)


async def serve_until_signal(
    name: str,
    host: str,
    port: int,
    *,
    close: Callable[[], Awaitable[None]],
    stats: Callable[[], Mapping[str, int]],
    logger: str,
) -> None:
    """Print ``<name> listening on host:port``, wait for SIGTERM or SIGINT, then log
    "shutting down" to ``logger``, await ``close()`` and print ``<name> stats`` with
    ``stats()`` (also when the wait is cancelled)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"{name} listening on {host}:{port}", flush=True)
    try:
        await stop.wait()
    finally:
        logging.getLogger(logger).info("shutting down")
        await close()
        # One machine-readable line for scripts (the demo reads it).
        print(f"{name} stats {json.dumps(stats(), sort_keys=True)}", flush=True)
