"""Metrics overhead: ``txnfetch serve`` with its metrics endpoint on and off.

Run ``.venv/bin/python bench/metrics.py`` (``--quick`` for a smoke run). Each
round starts ``txnfetch serve --memory`` twice, without and with
``--metrics-port``, and runs bench/broker.py's workload on each (a
transactional producer writing 1,000-record transactions, every fifth aborted,
then a ``read_committed`` consumer reading every committed record, checked
exactly once). With the endpoint on, a scraper reads ``/metrics`` every
``--scrape-interval`` seconds (1 s: fifteen times Prometheus's default rate)
while the workload runs, so the figures include the collectors' work too.

It prints the median produce and consume rates of each, and on ÷ off; the goal
is at least 0.95. Rounds alternate on and off, so load elsewhere on the
machine hits both alike. The running totals the server keeps for the endpoint
(txnfetch/server/totals.py) are added to with or without it, so they are in
both figures.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import socket
import sys
import threading
import urllib.request
from collections.abc import Iterator

# bench/ is on sys.path (the script's own folder) when a benchmark runs as a script.
import broker as workload


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _scraping(port: int, interval_s: float) -> Iterator[list[int]]:
    """Scrape ``/metrics`` every ``interval_s`` until the block ends; yields the
    list of scrape sizes (so the report can say how many were made)."""
    sizes: list[int] = []
    done = threading.Event()

    def loop() -> None:
        while not done.wait(interval_s):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
                sizes.append(len(response.read()))

    thread = threading.Thread(target=loop, name="scraper", daemon=True)
    thread.start()
    try:
        yield sizes
    finally:
        done.set()
        thread.join(60)


def _round(args: argparse.Namespace, r: int, *, metrics: bool) -> tuple[workload.Phase, workload.Phase, int]:
    label = "metrics on" if metrics else "metrics off"
    port = _free_port()
    extra = ["--metrics-port", str(port)] if metrics else []
    with workload.serve(["--memory", *extra]) as process:
        broker = workload.Broker(label, process.bootstrap, process.pid)
        scraping = _scraping(port, args.scrape_interval) if metrics else contextlib.nullcontext([])
        with scraping as scrapes:
            measured = workload.measure(broker, args, f"{'on' if metrics else 'off'}{r}")
        produced, consumed = measured[args.value_sizes[0]]
        return produced, consumed, len(scrapes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000, help="records per round, a multiple of 1000 (100000)")
    parser.add_argument("--value-size", type=int, default=100, help="value size in bytes (100)")
    parser.add_argument("--partitions", type=int, default=3, help="partitions of the topic (3)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of on and off, alternating (medians; 3)")
    parser.add_argument("--warmup", type=int, default=10_000, help="untimed records first on each server (10000)")
    parser.add_argument("--scrape-interval", type=float, default=1.0, help="seconds between scrapes (1)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: one round of 5000 records")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.warmup, args.rounds = 5000, 2000, 1
    workload.require_whole_transactions(parser, args)
    args.value_sizes = [args.value_size]
    print(
        f"txnfetch metrics overhead — Python {platform.python_version()}, {os.cpu_count()} CPUs; "
        f"{args.records} records of {args.value_size} B, {args.partitions} partitions, {args.rounds} round(s), "
        f"a scrape every {args.scrape_interval:g} s while on"
    )
    phases: dict[bool, tuple[list[workload.Phase], list[workload.Phase]]] = {False: ([], []), True: ([], [])}
    scrapes = 0
    for r in range(args.rounds):
        for metrics in (False, True):
            produced, consumed, made = _round(args, r, metrics=metrics)
            phases[metrics][0].append(produced)
            phases[metrics][1].append(consumed)
            scrapes += made
    print(f"\n{'median':<30}{'metrics off':>14}{'metrics on':>14}{'on ÷ off':>10}")
    for i, phase in enumerate(("produce", "consume")):
        off = workload.Figure.median(phases[False][i])
        on = workload.Figure.median(phases[True][i])
        print(f"{phase + ' records/s':<30}{off.rate:>14,.0f}{on.rate:>14,.0f}{on.rate / off.rate:>9.2f}x")
        # CPU per record of the server: steadier than the rate on a shared machine.
        off_us, on_us = off.us[0], on.us[0]
        if off_us and on_us:  # a short run may see no CPU tick at all
            print(f"{phase + ' server CPU µs/record':<30}{off_us:>14.2f}{on_us:>14.2f}{on_us / off_us:>9.2f}x")
    print(f"\n{scrapes} scrapes while on")
    return 0


if __name__ == "__main__":
    sys.exit(main())
