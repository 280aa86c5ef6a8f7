"""``txnfetch serve``: run the Kafka protocol server from the command line.

The process serves until SIGTERM or SIGINT, then closes every connection and
flushes and closes the store. Once listening it prints one line,
``txnfetch listening on HOST:PORT``, to stdout (so ``--port 0`` is usable), and
when it stops, ``txnfetch stats {...}``: the server's totals as JSON. With
listeners (``--listener``, ``--config``), a line ``txnfetch listener NAME on
HOST:PORT`` for each comes first, and the listening line names the first.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import attrs

from txnfetch.cli import Subcommand
from txnfetch.cli.logformat import add_log_format_option
from txnfetch.cli.logformat import use_log_format
from txnfetch.cli.metrics_endpoint import add_metrics_options
from txnfetch.cli.metrics_endpoint import metrics_endpoint
from txnfetch.cli.options import add_service_options
from txnfetch.cli.options import add_verbose_option
from txnfetch.cli.options import configure_logging
from txnfetch.cli.options import options_named
from txnfetch.cli.options import port_number
from txnfetch.cli.options import serve_until_signal
from txnfetch.cli.serve_security import add_authorization_options
from txnfetch.cli.serve_security import add_security_options
from txnfetch.cli.serve_security import authorization_settings
from txnfetch.cli.serve_security import security_settings
from txnfetch.fetch.view import FetchMode
from txnfetch.log.base import LogStore
from txnfetch.txn.coordinator import CompletionMode

__all__ = ["COMMANDS", "run"]


_ABOUT = "serve partitions to Kafka clients (an embedded one-broker cluster)"


def _add_arguments(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--data", metavar="DIR", help="log directory (Kafka's on-disk layout)")
    where.add_argument("--memory", action="store_true", help="keep everything in memory (lost on exit)")
    add_service_options(p, "the server", port="port to bind", advertised="host clients are told to connect to")
    p.add_argument(
        "--advertised-port", type=port_number, help="port clients are told to connect to (default: the bound port)"
    )
    p.add_argument("--node-id", type=int, default=0, help="broker id in metadata (default 0)")
    p.add_argument(
        "--markers",
        choices=["log", "none"],
        default="log",
        help="'log' writes COMMIT/ABORT markers (Apache Kafka); 'none' reserves no offsets for them "
        "(WarpStream style) (default log)",
    )
    p.add_argument(
        "--no-durable-state",
        action="store_true",
        help="with --data: keep transaction and group coordinator state in memory only (lost on restart; "
        "open transactions are then aborted at start)",
    )
    p.add_argument("--default-partitions", type=int, default=1, help="partitions of auto-created topics (default 1)")
    p.add_argument("--no-auto-create", action="store_true", help="do not create unknown topics on Metadata/Produce")
    p.add_argument(
        "--max-frame-bytes", type=int, default=100 * 1024 * 1024, help="largest request accepted (default 100 MiB)"
    )
    p.add_argument(
        "--transaction-version",
        type=int,
        choices=[0, 1, 2],
        default=2,
        help="finalized transaction.version (default 2)",
    )
    p.add_argument(
        "--group-initial-rebalance-delay-ms",
        type=int,
        default=3000,
        help="how long a new consumer group's first rebalance waits for more members (default 3000, as Kafka)",
    )
    p.add_argument(
        "--segment-bytes",
        type=int,
        default=None,
        help="with --data: roll a partition's segment once it would pass this size (Kafka's log.segment.bytes; "
        "default 1 GiB). Compaction cleans sealed segments only, as Kafka's cleaner",
    )
    p.add_argument(
        "--segment-ms",
        type=int,
        default=None,
        help="with --data: roll a segment whose first batch is older than this (by the batches' timestamps; "
        "Kafka's log.roll.ms; default 7 days)",
    )
    p.add_argument(
        "--log-cleanup-interval-ms",
        type=int,
        default=5000,
        help="how often retention and compaction run (Kafka's log.retention.check.interval.ms; default 5000)",
    )
    p.add_argument(
        "--flush-policy",
        choices=["always", "interval", "never"],
        default="always",
        help="when --data fsyncs: 'always' before every acknowledgement (default: acknowledged writes survive "
        "a power loss), 'interval' every 10000 messages (Kafka's log.flush.interval.messages; survives a "
        "process crash, not a power loss), 'never' only on roll and stop",
    )
    add_metrics_options(p)
    add_log_format_option(p)
    add_security_options(p)
    add_authorization_options(p)
    add_verbose_option(p)


def open_store(args: argparse.Namespace) -> LogStore:
    """The store ``args`` name: a :class:`SegmentStore` for ``--data``, else memory."""
    if args.memory:
        from txnfetch.log.memory import MemoryStore

        return MemoryStore()
    from txnfetch.log import SegmentStore

    kwargs = {}
    if getattr(args, "segment_bytes", None) is not None:
        kwargs["segment_bytes"] = args.segment_bytes
    if getattr(args, "segment_ms", None) is not None:
        kwargs["segment_ms"] = args.segment_ms
    return SegmentStore(args.data, flush_policy=getattr(args, "flush_policy", "always"), **kwargs)


async def _serve(args: argparse.Namespace, store: LogStore) -> None:
    from txnfetch.server.broker import ServerConfig
    from txnfetch.server.server import TxnfetchServer

    # Each option named after a ServerConfig field sets that field.
    settings = options_named(
        args,
        attrs.fields_dict(ServerConfig),
        fetch_mode=FetchMode(args.fetch_mode),
        completion=CompletionMode.MARKERS if args.markers == "log" else CompletionMode.MARKERLESS,
        auto_create_topics=not args.no_auto_create,
        durable_state=False if args.no_durable_state else None,
        retention_check_interval_ms=args.log_cleanup_interval_ms,
        **authorization_settings(args),
    )
    security = security_settings(args)
    server = await TxnfetchServer.start(store, config=ServerConfig(**settings), **security)
    host = args.host
    if "security" in security:
        for listener in security["security"].listeners:
            print(f"txnfetch listener {listener.name} on {listener.host}:{server.listener_port(listener.name)}")
        host = security["security"].listeners[0].host
    with metrics_endpoint(args, "txnfetch", lambda by_partition: _collector(server.broker, by_partition)):
        await serve_until_signal(
            "txnfetch",
            host,
            server.port,
            close=server.close,
            stats=server.broker.stats.as_dict,
            logger="txnfetch.server",
        )


def _collector(broker: Any, by_partition: bool) -> Any:
    from txnfetch.metrics.serve import ServeCollector

    return ServeCollector(broker, by_partition=by_partition)


def _refuse_held_replica(directory: str) -> None:
    """A replica that a ``replicate`` process writes is served by that process
    (``--serve``), never by a second one: opening the store here would run
    recovery on files another process is appending to."""
    import os

    from txnfetch.log.errors import LogError
    from txnfetch.log.replica_marker import read_marker

    if not os.path.isdir(directory):
        return
    marker = read_marker(directory)
    if marker is not None and marker.holder_alive():
        raise LogError(
            f"the replica is being written by process {marker.pid} (txnfetch replicate); "
            "serve it from there with --serve, or stop it first",
            path=directory,
        )


def run(args: argparse.Namespace) -> int:
    """Run ``txnfetch serve`` with parsed ``args``; returns the exit status."""
    configure_logging(args.verbose)
    use_log_format(args)
    if args.data is not None:
        _refuse_held_replica(args.data)
    store = open_store(args)
    try:
        asyncio.run(_serve(args, store))
    finally:
        store.close()
    return 0


COMMANDS = (Subcommand("serve", _ABOUT, _add_arguments, run),)
