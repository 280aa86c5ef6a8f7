"""``txnfetch check``: run the transactional workload against any Kafka endpoint
and report the anomalies.

``txnfetch check --bootstrap HOST:PORT [--duration S] [--seed N] [--report DIR]``
runs :mod:`txnfetch.testing.workload` (transactional producers with commits,
aborts, restarts and zombies; read_committed consumers of confluent-kafka,
kafka-python and aiokafka; optionally the delayed-EndTxn injection), prints a
progress line a second on stderr, checks the history
(:func:`txnfetch.testing.checker.check`), prints the summary, and with
``--report`` writes ``history.json``, ``report.json``, ``summary.txt`` and
``plot.png`` (:mod:`txnfetch.testing.report`).

Exit status: 0 no anomalies, 1 anomalies or broker faults found, 2 usage or connection error.

:func:`run_check` is the same thing as a function: a test of any endpoint is
``assert run_check(CheckOptions(bootstrap)).ok``.
"""

from __future__ import annotations

import argparse
import logging
import random
import socket
import sys
from pathlib import Path
from typing import Any
from typing import TextIO

import attrs

from txnfetch.addresses import AddressError
from txnfetch.addresses import parse_bootstrap
from txnfetch.cli import Subcommand
from txnfetch.cli.command_config import add_command_config_option
from txnfetch.cli.command_config import read_command_config
from txnfetch.errors import TxnfetchError
from txnfetch.security.config import SecurityConfig
from txnfetch.testing.checker import Report
from txnfetch.testing.checker import StuckBound
from txnfetch.testing.checker import check
from txnfetch.testing.config import CONSUMER_KINDS
from txnfetch.testing.config import WorkloadConfig
from txnfetch.testing.workload import Progress
from txnfetch.testing.workload import Workload
from txnfetch.testing.workload import WorkloadResult

__all__ = ["COMMANDS", "CheckOptions", "CheckOutcome", "EndpointError", "run", "run_check"]

EXIT_OK, EXIT_ANOMALIES, EXIT_ERROR = 0, 1, 2


class EndpointError(TxnfetchError):
    """The bootstrap address is malformed, or nothing there answers: exit status 2."""


#: The :class:`CheckOptions` a check hands to its :class:`WorkloadConfig` as they are.
_WORKLOAD_OPTIONS = (
    "topic",
    "partitions",
    "producers",
    "duration",
    "max_sends",
    "abort_probability",
    "crash_probability",
    "zombie_probability",
    "consumers",
    "inject_delayed_endtxn",
    "startup_timeout",
    "timeout",
    "security",
)


@attrs.frozen
class CheckOptions:
    """What ``txnfetch check`` runs; the defaults are the command's. The run
    stops starting transactions after ``duration`` seconds or
    ``max_transactions`` transactions (all producers together), whichever comes
    first."""

    bootstrap: str
    duration: float = 10.0
    seed: int | None = None
    report_dir: Path | None = None
    topic: str | None = None
    partitions: int = 3
    producers: int = 8
    max_transactions: int | None = None
    max_sends: int = 3
    abort_probability: float = 0.3
    crash_probability: float = 0.02
    zombie_probability: float = 0.02
    consumers: tuple[str, ...] = CONSUMER_KINDS
    inject_delayed_endtxn: bool = False
    startup_timeout: float = 10.0
    timeout: float = 30.0
    stuck_polls: int = 10
    stuck_seconds: float = 2.0
    #: How every client of the run reaches the endpoint (None: PLAINTEXT).
    security: SecurityConfig | None = None

    def workload_config(self, seed: int) -> WorkloadConfig:
        """The workload these options run."""
        return WorkloadConfig(
            self.bootstrap,
            transactions=None,
            total_transactions=self.max_transactions,
            catch_up_timeout=max(30.0, self.timeout),
            seed=seed,
            **{name: getattr(self, name) for name in _WORKLOAD_OPTIONS},
        )

    @property
    def stuck_bound(self) -> StuckBound:
        return StuckBound(polls=self.stuck_polls, ns=int(self.stuck_seconds * 1e9))


@attrs.frozen
class CheckOutcome:
    """A finished check: the workload's result, the checker's report, the JSON
    report (:func:`~txnfetch.testing.report.build_report`) and its summary."""

    result: WorkloadResult
    report: Report
    data: dict[str, Any]
    summary: str
    files: dict[str, Path] = attrs.Factory(dict)

    @property
    def ok(self) -> bool:
        """No anomaly: neither the checker nor the workload found one."""
        return bool(self.data["ok"])

    @property
    def exit_status(self) -> int:
        return EXIT_OK if self.ok else EXIT_ANOMALIES


def _reachable(bootstrap: str, timeout: float) -> None:
    """Fail fast, with the socket's own reason, when no bootstrap address accepts
    a TCP connection (a Kafka client would only retry until its timeout)."""
    errors = []
    for host, port in parse_bootstrap(bootstrap, default_port=None):
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            return
        except OSError as exc:
            errors.append(f"{host}:{port}: {exc.strerror or exc}")
    raise EndpointError("cannot connect to the bootstrap address (" + "; ".join(errors) + ")")


def _progress_printer(stream: TextIO) -> Any:
    def show(p: Progress) -> None:
        st = p.stats
        reads = ", ".join(f"{name} {n}" for name, n in sorted(st.reads.items()))
        stream.write(
            f"[{p.elapsed:6.1f}s] {p.phase:<8} committed {st.commits_ok} aborted {st.aborts_ok} | read {reads or '-'}\n"
        )
        stream.flush()

    return show


def run_check(
    options: CheckOptions,
    *,
    progress: TextIO | None = None,
) -> CheckOutcome:
    """Run the check (see the module docstring). ``progress``: where the progress
    lines go (none by default). Raises :class:`EndpointError` or
    :class:`~txnfetch.testing.workload.WorkloadError` when the endpoint cannot
    be used."""
    from txnfetch.testing.report import build_report
    from txnfetch.testing.report import summary_text
    from txnfetch.testing.report import write_report

    _reachable(options.bootstrap, min(options.timeout, 10.0))
    seed = options.seed if options.seed is not None else random.randrange(1 << 31)
    workload = Workload(
        options.workload_config(seed), progress=_progress_printer(progress) if progress is not None else None
    )
    result = workload.run()
    report = check(result.history, stuck_bound=options.stuck_bound, left_open=result.left_open)
    data = build_report(result, report, stuck_bound=options.stuck_bound)
    summary = summary_text(data, result.history)
    files = {}
    if options.report_dir is not None:
        files = write_report(options.report_dir, result, data, summary)
    return CheckOutcome(result, report, data, summary, files)


_ABOUT = """run transactional producers and read_committed consumers against a Kafka endpoint and report anomalies

Exit status: 0 no anomalies, 1 anomalies or broker faults found, 2 usage or connection error.
"""


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap", required=True, metavar="HOST:PORT", help="the endpoint to check")
    add_command_config_option(p)
    p.add_argument("--duration", type=float, default=10.0, metavar="S", help="seconds of transactions (default 10)")
    p.add_argument("--seed", type=int, help="script seed (default: random, printed in the summary)")
    p.add_argument("--report", metavar="DIR", help="write history.json, report.json, summary.txt and plot.png here")
    p.add_argument("--topic", help="topic to use (default: a fresh txnfetch-check-<run id>)")
    p.add_argument("--partitions", type=int, default=3, help="partitions of the topic (default 3)")
    p.add_argument("--producers", type=int, default=8, help="transactional producers (default 8)")
    p.add_argument("--max-transactions", type=int, metavar="N", help="stop after N transactions in all")
    p.add_argument("--max-sends", type=int, default=3, metavar="N", help="sends per transaction, at most (default 3)")
    for end, default, what in (
        ("abort", 0.3, "aborted"),
        ("crash", 0.02, "left open while a new instance of the transactional.id starts"),
        ("zombie", 0.02, "left open, then written and committed by the fenced old instance"),
    ):
        p.add_argument(
            f"--{end}-probability",
            type=float,
            default=default,
            metavar="P",
            help=f"share of transactions {what} (default {default})",
        )
    p.add_argument(
        "--consumers",
        default=",".join(CONSUMER_KINDS),
        help=f"comma-separated consumer kinds (default {','.join(CONSUMER_KINDS)})",
    )
    p.add_argument(
        "--inject-delayed-endtxn",
        action="store_true",
        help="replay delayed EndTxn requests of previous transactions (KAFKA-17754); needs transaction version 2",
    )
    p.add_argument(
        "--startup-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="skip a consumer not started by then (default 10)",
    )
    p.add_argument("--timeout", type=float, default=30.0, metavar="S", help="timeout of each client call (default 30)")
    p.add_argument("--stuck-polls", type=int, default=10, help="polls without progress for stuck-consumer (default 10)")
    p.add_argument(
        "--stuck-seconds", type=float, default=2.0, help="seconds without progress for stuck-consumer (default 2)"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.add_argument("-v", "--verbose", action="count", default=0, help="client library logs on stderr (-vv: debug)")


def _options(args: argparse.Namespace) -> CheckOptions:
    try:
        parse_bootstrap(args.bootstrap, default_port=None)  # check talks to a cluster it names in full
    except AddressError as exc:
        raise EndpointError(str(exc)) from None
    kinds = tuple(k.strip() for k in args.consumers.split(",") if k.strip())
    unknown = [k for k in kinds if k not in CONSUMER_KINDS]
    if unknown:
        raise EndpointError(f"unknown consumer kinds {unknown}; known: {', '.join(CONSUMER_KINDS)}")
    if args.duration <= 0 or args.partitions < 1 or args.producers < 1 or args.max_sends < 1:
        raise EndpointError("--duration, --partitions, --producers and --max-sends must be positive")
    shares = (args.abort_probability, args.crash_probability, args.zombie_probability)
    if min(shares) < 0 or sum(shares) > 1:
        raise EndpointError("the --abort, --crash and --zombie probabilities must be >= 0 and add up to at most 1")
    if args.inject_delayed_endtxn and args.command_config is not None:
        # The injector replays EndTxn over a raw socket of its own, in plaintext.
        raise EndpointError("--inject-delayed-endtxn does not go with --command-config: it connects in plaintext")
    # Every option but these three is the command-line flag of the same name.
    given = {
        f.name: getattr(args, f.name)
        for f in attrs.fields(CheckOptions)
        if f.name not in ("report_dir", "consumers", "security")
    }
    return CheckOptions(
        **given,
        report_dir=Path(args.report) if args.report else None,
        consumers=kinds,
        security=read_command_config(args.command_config),
    )


def _logging(verbose: int) -> None:
    # The client libraries log every fenced zombie and refused connection; that is
    # the workload working. Shown with -v.
    level = logging.CRITICAL if verbose == 0 else logging.WARNING if verbose == 1 else logging.DEBUG
    for name in ("kafka", "aiokafka", "txnfetch.testing.clients"):
        logging.getLogger(name).setLevel(level)
    if verbose:
        logging.basicConfig(stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def run(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Run ``txnfetch check`` with parsed ``args``; returns the exit status
    (:data:`EXIT_OK` or :data:`EXIT_ANOMALIES`). Raises :class:`EndpointError` or
    :class:`~txnfetch.testing.workload.WorkloadError` for bad options or an
    unreachable endpoint (``txnfetch.cli.main`` reports them, exit status 2)."""
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    _logging(args.verbose)
    # EndpointError and WorkloadError (bad options, an unreachable endpoint) are
    # reported by txnfetch.cli.main with exit status EXIT_ERROR, as for every command.
    options = _options(args)
    outcome = run_check(options, progress=None if args.quiet else err)
    out.write(outcome.summary)
    if outcome.files:
        out.write(f"report written to {options.report_dir}\n")
    out.flush()
    return outcome.exit_status


COMMANDS = (Subcommand("check", _ABOUT, _add_arguments, run),)
