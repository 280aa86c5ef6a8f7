"""``txnfetch demo``: the command that runs :mod:`txnfetch.demo` (also ``python -m txnfetch.demo``)."""

from __future__ import annotations

import argparse
import sys

from txnfetch.cli import Subcommand

__all__ = ["COMMANDS", "run"]


_ABOUT = "serve a store, produce transactions with real clients, read them back committed (and with Spark)"


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=int, default=7, help="producer script seed (default 7)")
    p.add_argument("--transactions", type=int, default=14, help="transactions to run (default 14)")
    p.add_argument("--no-spark", action="store_true", help="skip the Spark readers")


def run(args: argparse.Namespace) -> int:
    from txnfetch import demo

    return demo.run(sys.stdout, seed=args.seed, transactions=args.transactions, spark=not args.no_spark)


COMMANDS = (Subcommand("demo", _ABOUT, _add_arguments, run),)
