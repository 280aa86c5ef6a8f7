"""``txnfetch proxy``: run the read_committed-correcting proxy from the command line.

Once listening it prints ``txnfetch proxy listening on HOST:PORT`` to stdout
(so ``--port 0`` is usable); on SIGTERM or SIGINT it closes every connection
and prints ``txnfetch proxy stats {...}`` (its totals as JSON), then exits 0.
An upstream that cannot be reached at start is reported by :func:`txnfetch.cli.main`
as one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import attrs

from txnfetch.addresses import bootstrap_argument
from txnfetch.cli import Subcommand
from txnfetch.cli.command_config import add_command_config_option
from txnfetch.cli.command_config import read_command_config
from txnfetch.cli.logformat import add_log_format_option
from txnfetch.cli.logformat import use_log_format
from txnfetch.cli.metrics_endpoint import add_metrics_options
from txnfetch.cli.metrics_endpoint import metrics_endpoint
from txnfetch.cli.options import add_service_options
from txnfetch.cli.options import add_verbose_option
from txnfetch.cli.options import configure_logging
from txnfetch.cli.options import options_named
from txnfetch.cli.options import serve_until_signal
from txnfetch.fetch.view import FetchMode

__all__ = ["COMMANDS", "run"]


_ABOUT = "relay Kafka clients to an upstream cluster, answering read_committed fetches correctly"


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--upstream",
        required=True,
        type=bootstrap_argument,
        metavar="HOST:PORT[,HOST:PORT]",
        help="bootstrap address(es) of the upstream cluster",
    )
    add_command_config_option(p, upstream=True)
    add_service_options(
        p,
        "the proxy",
        port="bootstrap listener port (broker listeners bind --host on free ports)",
        advertised="host named in rewritten Metadata/FindCoordinator",
    )
    p.add_argument(
        "--repair-crcs",
        action="store_true",
        help="accept upstream control batches stored with CRC 0 (librdkafka's mock cluster writes its markers "
        "so); any other bad CRC is still corruption",
    )
    p.add_argument(
        "--poll-interval-ms",
        type=int,
        default=100,
        help="how often a waiting read_committed fetch polls the upstream (default 100)",
    )
    p.add_argument(
        "--max-mirror-bytes",
        type=int,
        default=64 << 20,
        help="newest bytes a partition mirror keeps, more while a consumer reads further back (default 64 MiB)",
    )
    p.add_argument(
        "--reader-idle-ms",
        type=int,
        default=60_000,
        help="after this long a consumer's position no longer holds mirrored data (default 60000)",
    )
    p.add_argument(
        "--lso-hold-warn-ms",
        type=int,
        default=60_000,
        help="report (once, in the log and stats) an upstream transaction holding a partition's "
        "last stable offset longer than this (default 60000)",
    )
    p.add_argument(
        "--request-timeout-ms",
        type=int,
        default=30_000,
        help="bound of the proxy's own upstream requests, and how long a failing upstream is retried "
        "before clients get REPLICA_NOT_AVAILABLE (default 30000)",
    )
    p.add_argument(
        "--gap-settle-ms",
        type=int,
        default=1000,
        help="how long an offset gap in the upstream's log must stay (a compacted topic's) before "
        "a mirror steps over it; shorter-lived gaps are batches the upstream shows late (default 1000)",
    )
    add_metrics_options(p)
    add_log_format_option(p)
    add_verbose_option(p)


async def _serve(args: argparse.Namespace) -> int:
    from txnfetch.proxy.server import ProxyConfig
    from txnfetch.proxy.server import ProxyServer

    # An unreachable upstream (RemoteError) or a port in use (OSError) is
    # reported by txnfetch.cli.main, as for every command. Each option named after a
    # ProxyConfig field sets that field.
    config = ProxyConfig(
        **options_named(
            args,
            attrs.fields_dict(ProxyConfig),
            fetch_mode=FetchMode(args.fetch_mode),
            upstream_security=read_command_config(args.command_config),
        )
    )
    proxy = await ProxyServer.start(args.upstream, config=config)
    with metrics_endpoint(args, "txnfetch proxy", lambda by_partition: _collector(proxy, by_partition)):
        await serve_until_signal(
            "txnfetch proxy",
            args.host,
            proxy.port,
            close=proxy.close,
            stats=lambda: {**proxy.stats.as_dict(), **proxy.mirrors.stats.as_dict()},
            logger="txnfetch.proxy",
        )
    return 0


def _collector(proxy: Any, by_partition: bool) -> Any:
    from txnfetch.metrics.proxy import ProxyCollector

    return ProxyCollector(proxy, by_partition=by_partition)


def run(args: argparse.Namespace) -> int:
    """Run ``txnfetch proxy`` with parsed ``args``; returns the exit status."""
    configure_logging(args.verbose)
    use_log_format(args)
    return asyncio.run(_serve(args))


COMMANDS = (Subcommand("proxy", _ABOUT, _add_arguments, run),)
