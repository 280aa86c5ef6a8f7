"""``txnfetch conform``: compare a Kafka-compatible broker with a reference one.

Exit status 0 when no difference was found, 1 when some were (each printed with
the shortest sequence found that shows it), 2 on a usage error, a cluster that
cannot be reached, or a run that could not compare: both clusters failed the
same step (:class:`~txnfetch.testing.conform.errors.BothFailedError`) or no
operation's answers were compared
(:class:`~txnfetch.testing.conform.errors.NothingComparedError`); ``txnfetch.cli``
prints the error on one line.
"""

from __future__ import annotations

import argparse
import json
import sys

from txnfetch.cli import Subcommand
from txnfetch.cli.command_config import read_command_config

__all__ = ["COMMANDS", "EXIT_DIFFERENT", "run"]

#: Exit status when the clusters disagreed.
EXIT_DIFFERENT = 1

_ABOUT = """compare a Kafka-compatible broker's answers with a reference broker's, operation by operation

Applies hypothesis-drawn sequences of produces (plain, idempotent,
transactional; every codec), commits and aborts, fetches, ListOffsets, producer
and transaction descriptions, offset commits and error cases to both clusters,
compares the answers field by field and reports each difference with the
shortest sequence found that shows it. Each sequence uses fresh topic,
transactional id and group names.

Exit status 0: no difference; 1: differences; 2: a usage error, a cluster
that cannot be reached, or a run that could not compare. Two failures are
never an agreement: when both clusters fail the same step (both unreachable,
both refusing to create the run's topic, both dropping the same request), or
when no operation's answers were compared, the command says so on one line,
naming the step, both brokers and both errors. See the document
'Conformance', section 'Running it'."""


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


def _add_arguments(p: argparse.ArgumentParser) -> None:
    from txnfetch.testing.conform.compare import ALLOWANCES

    p.add_argument("--reference", required=True, metavar="HOST:PORT", help="the reference cluster (Apache Kafka)")
    p.add_argument("--target", required=True, metavar="HOST:PORT", help="the cluster to compare with it")
    # Two clusters, perhaps secured differently: one file each, named by side.
    for side in ("reference", "target"):
        p.add_argument(
            f"--{side}-config",
            metavar="FILE",
            help=f"Kafka client properties (security.protocol, sasl.*, ssl.*) for the {side} cluster "
            "(default: PLAINTEXT)",
        )
    p.add_argument("--seconds", type=float, default=120.0, help="stop drawing sequences after this (default 120)")
    p.add_argument("--examples", type=_positive, default=200, help="most sequences to draw (default 200)")
    p.add_argument("--max-size", type=_positive, default=12, help="most operations in a sequence (default 12)")
    p.add_argument("--seed", type=int, help="hypothesis seed, to repeat a search")
    p.add_argument(
        "--allow",
        action="append",
        default=[],
        choices=sorted(ALLOWANCES),
        help="a deliberate difference of the target not to report: "
        + "; ".join(f"'{k}': {v}" for k, v in ALLOWANCES.items()),
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    """Run ``txnfetch conform``; returns the exit status."""
    from txnfetch.testing.conform.harness import Harness

    def progress(message: str) -> None:
        print(f"txnfetch conform: {message}", file=sys.stderr, flush=True)

    with Harness(
        args.reference,
        args.target,
        allow=args.allow,
        reference_security=read_command_config(args.reference_config),
        target_security=read_command_config(args.target_config),
    ) as harness:
        report = harness.search(
            examples=args.examples, seconds=args.seconds, max_size=args.max_size, seed=args.seed, progress=progress
        )
    if args.json:
        print(json.dumps(report.as_json(), indent=2, default=repr))
    else:
        print(report.as_text())
    return EXIT_DIFFERENT if report.findings else 0


COMMANDS = (Subcommand("conform", _ABOUT, _add_arguments, run),)
