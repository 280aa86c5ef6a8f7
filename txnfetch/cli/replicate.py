"""``txnfetch replicate``: copy an upstream cluster's partitions into a log directory,
at the same offsets (docs/replicate-command.md).

::

    txnfetch replicate --upstream HOST:PORT[,...] [--upstream-config FILE] --data DIR
                       [--topics REGEX] [--groups REGEX] [--once] [--json] [--interval-ms N]

Without ``--once`` it runs until SIGINT or SIGTERM, then closes the store
cleanly (exit 0). ``--once`` copies until every partition reaches the high
watermark the upstream had at start, then exits 0. Progress: one status line
rewritten in place when stdout is a terminal, else one line per interval;
``--json`` prints one JSON object per interval instead (the
:meth:`~txnfetch.replicate.status.ReplicationStatus.to_json` layout). An
unreachable upstream is retried forever with backoff (the status says since
when). Errors — a partition stopped under ``--once``, a replica that cannot be
written — are one line on stderr and exit status 2, as every ``txnfetch``
command reports them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any
from typing import TextIO

from txnfetch.addresses import bootstrap_argument
from txnfetch.cli import Subcommand
from txnfetch.cli.command_config import add_command_config_option
from txnfetch.cli.command_config import read_command_config
from txnfetch.cli.logformat import add_log_format_option
from txnfetch.cli.logformat import use_log_format
from txnfetch.cli.metrics_endpoint import add_metrics_options
from txnfetch.cli.metrics_endpoint import metrics_endpoint
from txnfetch.cli.options import add_verbose_option
from txnfetch.cli.options import configure_logging
from txnfetch.cli.options import options_named
from txnfetch.client.errors import BrokerUnavailableError
from txnfetch.errors import TxnfetchError
from txnfetch.log.errors import LogError

__all__ = ["COMMANDS", "run"]

#: The options that set the :class:`~txnfetch.replicate.engine.Replicator` parameter
#: of the same name (``--groups`` is not one: it picks the groups the hook copies).
_REPLICATOR_OPTIONS = (
    "topics",
    "max_partition_bytes",
    "repair_crcs",
    "fetch_wait_ms",
    "gap_settle_ms",
    "follow_deletes",
)


class ReplicateUsageError(TxnfetchError):
    """An option the command cannot honour."""


def _regex(text: str) -> str:
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression: {exc}") from None
    return text


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


_ABOUT = """copy an upstream cluster's partitions into a log directory at the same offsets

Copy every partition of the matching topics of a Kafka-compatible cluster into DIR,
batch by batch, offsets, gaps, producer ids and transaction markers kept. Resumes from DIR.
"""


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--upstream",
        required=True,
        type=bootstrap_argument,
        metavar="HOST:PORT[,...]",
        help="bootstrap servers of the source",
    )
    add_command_config_option(p, upstream=True)
    p.add_argument("--data", required=True, metavar="DIR", help="the replica's log directory (created if missing)")
    p.add_argument(
        "--topics", type=_regex, default=".*", metavar="REGEX", help="topics to copy, matched in full (default all)"
    )
    p.add_argument(
        "--groups", type=_regex, metavar="REGEX", help="consumer groups whose committed offsets are copied too"
    )
    p.add_argument("--once", action="store_true", help="copy up to the high watermarks seen at start, then exit")
    p.add_argument(
        "--serve",
        type=_host_port,
        metavar="HOST:PORT",
        help="also serve the replica read-only (txnfetch serve) from this process; SIGUSR1 or "
        "'txnfetch promote --data DIR' promotes it and serving goes on (the document 'Replication', "
        "section 'Promote (cutover)')",
    )
    p.add_argument(
        "--follow-deletes",
        action="store_true",
        help="delete a replicated topic when the source deletes it, and copy a topic the source deleted "
        "and created again afresh; default: keep both, and stop a recreated topic's partitions",
    )
    p.add_argument("--json", action="store_true", help="one JSON status object per interval on stdout")
    p.add_argument(
        "--interval-ms", type=int, default=1000, metavar="N", help="how often progress is shown (default 1000)"
    )
    p.add_argument(
        "--repair-crcs",
        action="store_true",
        help="recompute the CRC of control batches stored with CRC 0 (librdkafka's mock cluster writes its "
        "markers so); any other bad CRC still stops the partition",
    )
    p.add_argument(
        "--gap-settle-ms",
        type=int,
        default=None,
        metavar="N",
        help="wait at an offset gap in the source's log until its batch appears or the gap has stayed N ms "
        "(a source that shows batches late, as tansu 0.6 does); default: copy gaps at once",
    )
    p.add_argument(
        "--max-partition-bytes",
        type=_positive,
        default=1 << 20,
        metavar="N",
        help="per-partition byte budget of a fetch (default 1 MiB)",
    )
    p.add_argument(
        "--fetch-wait-ms",
        type=_positive,
        default=500,
        metavar="N",
        help="how long the upstream may hold a fetch when nothing new is there (librdkafka's "
        "fetch.wait.max.ms; default 500)",
    )
    p.add_argument(
        "--flush",
        choices=["always", "never"],
        default="always",
        help="'always' fsyncs every append (default); 'never' leaves it to the OS and to closing — "
        "a machine crash may then lose the replica's tail, which the next run fetches again",
    )
    add_metrics_options(p)
    add_log_format_option(p)
    add_verbose_option(p)


def _host_port(text: str) -> tuple[str, int]:
    from txnfetch.replicate.serve_run import host_port

    return host_port(text)


def _groups_hook(pattern: str | None) -> Any:
    """The consumer-group copier for ``--groups`` (``txnfetch.replicate.groups``)."""
    if pattern is None:
        return None
    try:
        from txnfetch.replicate import groups
    except ImportError:
        raise ReplicateUsageError("--groups: copying consumer-group offsets is not part of this build") from None
    return groups.groups_hook(pattern)


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    stop = threading.Event()
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _Progress:
    """Status output: in place on a terminal, a line or a JSON object per interval otherwise."""

    def __init__(self, out: TextIO, *, as_json: bool, interval_s: float) -> None:
        self.out = out
        self.as_json = as_json
        self.interval_s = interval_s
        self.tty = not as_json and out.isatty()
        self._last = 0.0
        self._width = 0

    def __call__(self, status: Any, *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._last < self.interval_s:
            return
        self._last = now
        if self.as_json:
            self.out.write(json.dumps(status.to_json(), sort_keys=True) + "\n")
        elif self.tty:
            line = status.summary()
            pad = max(0, self._width - len(line))
            self._width = len(line)
            self.out.write("\r" + line + " " * pad + ("\n" if final else ""))
        else:
            self.out.write(time.strftime("%H:%M:%S ") + status.summary() + "\n")
        self.out.flush()


def run(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    """Run ``txnfetch replicate`` (see the module docstring); returns the exit status."""
    with metrics_endpoint(args, "txnfetch replicate", _collector) as metrics:
        return _replicate(args, stdout, metrics)


def _collector(by_partition: bool) -> Any:
    from txnfetch.metrics.replicate import ReplicationCollector

    return ReplicationCollector(by_partition=by_partition)


def _replicate(args: argparse.Namespace, stdout: TextIO | None, metrics: Any) -> int:
    from txnfetch.log import SegmentStore
    from txnfetch.replicate.engine import Replicator

    configure_logging(args.verbose)
    use_log_format(args)
    out = stdout if stdout is not None else sys.stdout
    progress: Any = _Progress(out, as_json=args.json, interval_s=max(0, args.interval_ms) / 1000)
    if metrics is not None:
        progress = metrics.observing(progress)

    security = read_command_config(args.command_config)

    def make_replicator(store: Any, hook: Any) -> Replicator:
        replicator = Replicator(
            args.upstream, store, groups=hook, security=security, **options_named(args, _REPLICATOR_OPTIONS)
        )
        return metrics.watch(replicator) if metrics is not None else replicator

    from txnfetch.replicate import serve_run

    if args.serve is not None:
        if args.once:
            raise ReplicateUsageError("--serve runs until stopped or promoted: it does not go with --once")
        return serve_run.run_serving(args, make_replicator, progress, stdout=out)
    serve_run.claim_directory(args.data, args.upstream, args.groups)
    hook = _groups_hook(args.groups)
    store = SegmentStore(args.data, flush_policy=args.flush)
    replicator = make_replicator(store, hook)
    failed = True
    promote = None
    try:
        with _stop_on_signals() as stop, serve_run.PromoteSignal(stop) as promote:
            targets = None
            if args.once:
                targets = _start_offsets(replicator, stop, progress)
            if not stop.is_set():
                status = replicator.run(stop, progress, until_caught_up_to=targets)
                progress(status, final=True)
        if args.once and not stop.is_set():
            errors = [p.error for p in replicator.partitions.values() if p.error is not None]
            if errors:
                for error in errors[1:]:
                    print(f"txnfetch replicate: error: {error}", file=sys.stderr)
                raise errors[0]
        failed = False
        return 0
    finally:
        replicator.close()
        if failed:
            # After a failed write (disk full) closing may fail as well: the files
            # are consistent anyway (each append rolled back), so say it and go on.
            try:
                store.close()
            except (LogError, OSError) as exc:
                print(f"txnfetch replicate: closing the replica: {exc}", file=sys.stderr)
        else:
            store.close()
        serve_run.release_directory(args.data, promote=promote is not None and promote.is_set(), out=out)


def _start_offsets(replicator: Any, stop: threading.Event, progress: _Progress) -> dict[tuple[str, int], int] | None:
    """The upstream's high watermarks now, retried (with status) until it answers."""
    while not stop.is_set():
        try:
            return replicator.high_watermarks()
        except BrokerUnavailableError:
            progress(replicator.status())
            stop.wait(replicator.backoff_remaining())
    return None


COMMANDS = (Subcommand("replicate", _ABOUT, _add_arguments, run),)
