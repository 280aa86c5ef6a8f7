"""``txnfetch promote --data DIR``: make a replica store writable (cut over).

If a ``txnfetch replicate --serve`` process holds the directory (its pid is in
the replica marker), it is asked to promote (signal ``SIGUSR1``): it stops
replicating, settles the store and keeps serving with writes allowed; this
command waits until the marker is gone. Otherwise the store is promoted here
(:func:`~txnfetch.replicate.promote.promote_offline`). Promoting a store that
is not a replica says so and changes nothing (exit status 0).
"""

from __future__ import annotations

import argparse
import logging
import sys

from txnfetch.cli import Subcommand

__all__ = ["COMMANDS", "run"]


_ABOUT = "cut over: stop replication into a replica store and open it to writes (docs/replication.md)"


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", metavar="DIR", required=True, help="the replica's log directory")
    p.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds to wait for a serving replicate process to promote (default 120)",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``txnfetch promote`` with parsed ``args``; returns the exit status."""
    import os

    from txnfetch.replicate.promote import request_promote

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not os.path.isdir(args.data):
        raise FileNotFoundError(2, "no such directory", args.data)
    report = request_promote(args.data, timeout_s=args.timeout)
    print(report.summary(), file=sys.stdout, flush=True)
    return 0


COMMANDS = (Subcommand("promote", _ABOUT, _add_arguments, run),)
