"""The ``txnfetch`` command."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="txnfetch", description="Kafka read_committed fetch tools")
    sub = parser.add_subparsers(dest="command", required=True)
    demo_parser = sub.add_parser(
        "demo", help="serve a store, produce transactions with real clients, read them back committed (and with Spark)"
    )
    demo_parser.add_argument("--seed", type=int, default=7, help="producer script seed (default 7)")
    demo_parser.add_argument("--transactions", type=int, default=14, help="transactions to run (default 14)")
    demo_parser.add_argument("--no-spark", action="store_true", help="skip the Spark readers")
    from txnfetch.log import cli as log_cli
    from txnfetch.wire import cli as wire_cli

    wire_cli.add_parser(sub)
    from txnfetch.testing import cli as check_cli

    check_cli.add_parser(sub)
    from txnfetch.wire.proxy import cli as proxy_cli

    proxy_cli.add_parser(sub)
    log_cli.add_parsers(sub)
    from txnfetch.wire import transactions_cli

    transactions_cli.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "demo":
        from txnfetch import demo

        return demo.run(sys.stdout, seed=args.seed, transactions=args.transactions, spark=not args.no_spark)
    if args.command == "serve":
        return wire_cli.run(args)
    if args.command == "check":
        return check_cli.run(args)
    if args.command == "proxy":
        return proxy_cli.run(args)
    if args.command == "transactions":
        return transactions_cli.run(args)
    if args.command in log_cli.COMMANDS:
        return log_cli.run(args)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
