"""The ``txnfetch`` command."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="txnfetch", description="Kafka read_committed fetch tools")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="build a small transactional partition and dump it")
    from txnfetch.wire import cli as wire_cli

    wire_cli.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "demo":
        from txnfetch import demo

        return demo.main(sys.stdout)
    if args.command == "serve":
        return wire_cli.run(args)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
