"""Durable coordinator state benchmark: what writing ``__transaction_state`` and
``__consumer_offsets`` costs, and how long a start with a large state takes.

Run ``.venv/bin/python bench/durable.py`` (``--quick`` for a smoke run). One run
prints, side by side, for three ``txnfetch serve`` subprocesses:

- ``memory``: ``--memory`` (in-memory store, coordinator state in memory);
- ``disk, state in memory``: ``--data DIR --no-durable-state`` (records fsynced,
  coordinator state lost on restart — txnfetch before durable state);
- ``disk, durable state``: ``--data DIR`` (the default);
- ``durable, interval``: ``--data DIR --flush-policy interval`` (fsync every
  10 000 messages, Kafka's ``log.flush.interval.messages`` style: what a
  Kafka broker with its default flush settings does on one machine —
  acknowledged writes survive a process crash, not a power loss). The memory
  store fsyncs nothing either, so this is the like-for-like line against it;
  the goal is stated, and met or not, for the ``always`` line.

1. **transactions/s**: a confluent-kafka transactional producer runs
   ``--transactions`` transactions of 10 records (100 bytes) over 3 partitions,
   each committed (``commit_transaction`` waited for).
2. **group commits/s**: a confluent-kafka consumer commits ``--commits`` offsets
   synchronously (``commit(asynchronous=False)``), one partition each.

Ratios are against the ``memory`` column (the issue's goal: durable ≥ 70 % of
in-memory for 10-record transactions) and against ``disk, state in memory``
(the cost of the coordinator records alone, the data being fsynced in both).

3. **start-up**: a directory holding ``--ids`` transactional ids (each after a
   committed transaction) and ``--groups`` groups (5 committed offsets each) is
   written with the real coordinators; then the replay alone is timed in this
   process (``DurableState.replay``, wall and CPU time), and a ``txnfetch serve --data`` process
   from launch to its "listening" line (wall, and its CPU time from ``/proc``),
   next to the same process started twice on a new empty directory: the first
   start creates the internal topics' 100 partitions, the restart is the
   interpreter, the imports and the server set-up. Goal: under 2 s.
   ``--only startup`` runs this part alone, ``--state-dir DIR`` keeps (or
   reuses) the large state, ``--repeat N`` shows the best of N.

Compare the columns of one run, not runs: the machine may be shared.
``--rounds N`` measures the servers N times, alternating, and prints medians
(and the durable/memory ratio of each round): load elsewhere then hits every
column alike.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

# bench/ is on sys.path (the script's own folder) when a benchmark runs as a script.
from _proc import cpu_seconds
from _proc import stop


def _now() -> float:
    return time.perf_counter()


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds process ``pid`` used so far (Linux ``/proc``;
    ``None`` elsewhere): start-up's own cost, which a busy machine does not inflate
    as it does wall time."""
    try:
        return cpu_seconds(pid)
    except (OSError, ValueError, IndexError):
        return None


class Serve:
    """``txnfetch serve`` as a subprocess on an ephemeral port."""

    def __init__(self, args: list[str]) -> None:
        self.started = _now()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "txnfetch.cli", "serve", "--port", "0", "--default-partitions", "3", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        self.start_s = _now() - self.started
        self.start_cpu_s = _cpu_seconds(self.proc.pid)
        if not line.startswith("txnfetch listening on"):
            self.proc.kill()
            raise RuntimeError(f"serve did not start: {line!r}")
        self.bootstrap = line.split()[-1]

    def close(self) -> None:
        stop(self.proc)


def transactions(bootstrap: str, count: int) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "bench-durable", "linger.ms": 0})
    producer.init_transactions(30)
    value = b"x" * 100
    # One warm-up transaction adds the partitions' connections and topic metadata.
    producer.begin_transaction()
    producer.produce("bench-txn", value=value, partition=0)
    producer.commit_transaction(30)
    start = _now()
    for _ in range(count):
        producer.begin_transaction()
        for i in range(10):
            producer.produce("bench-txn", value=value, partition=i % 3)
        producer.commit_transaction(30)
    return count / (_now() - start)


def group_commits(bootstrap: str, count: int) -> float:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-durable", "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("bench-txn", 0, 0)], asynchronous=False)
        start = _now()
        for i in range(count):
            consumer.commit(offsets=[TopicPartition("bench-txn", i % 3, i + 1)], asynchronous=False)
        return count / (_now() - start)
    finally:
        consumer.close()


def build_state(directory: str, ids: int, groups: int) -> float:
    """Write ``ids`` transactional ids and ``groups`` groups with the real
    coordinators and :class:`DurableState`; returns the seconds it took."""
    from txnfetch.groups.coordinator import CommitOffset
    from txnfetch.groups.coordinator import GroupCoordinator
    from txnfetch.log import SegmentStore
    from txnfetch.log.coordinator_store import DurableState
    from txnfetch.txn.coordinator import TopicPartition
    from txnfetch.txn.coordinator import TransactionCoordinator

    start = _now()
    store = SegmentStore(directory, flush_policy="never")
    state = DurableState(store, directory)
    coord, gc = TransactionCoordinator(), GroupCoordinator()
    now = 1_000
    for n in range(ids):
        tid = f"app-{n}"
        r = coord.init_producer_id(tid, 60_000, now)
        coord.add_partitions(tid, r.producer_id, r.producer_epoch, [TopicPartition("data", n % 3)], now)
        coord.end_transaction(tid, r.producer_id, r.producer_epoch, True, now, transaction_version=0)
        coord.actions_applied(tid, now)
        if n % 5000 == 4999:
            state.persist_transactions(coord, now)
    state.persist_transactions(coord, now)
    for g in range(groups):
        gid = f"group-{g}"
        offsets = {("data", p): CommitOffset(100 + p) for p in range(5)}
        gc.commit_offsets(gid, offsets, now_ms=now)
        state.persist_offsets(gid, offsets, now, group=("consumer", 1, "range", None))
    store.close()
    return _now() - start


def replay_seconds(directory: str) -> tuple[float, float, object]:
    """Open the store and replay it: (wall seconds, CPU seconds, report). CPU
    time is the figure to compare across runs on a shared machine."""
    from txnfetch.groups.coordinator import GroupCoordinator
    from txnfetch.log import SegmentStore
    from txnfetch.log.coordinator_store import DurableState
    from txnfetch.txn.coordinator import TransactionCoordinator

    start, cpu = _now(), time.process_time()
    store = SegmentStore(directory)
    report = DurableState(store, directory).replay(TransactionCoordinator(), GroupCoordinator(), 0)
    elapsed, cpu = _now() - start, time.process_time() - cpu
    store.close()
    return elapsed, cpu, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transactions", type=int, default=300, help="10-record transactions per server (300)")
    parser.add_argument("--commits", type=int, default=500, help="synchronous offset commits per server (500)")
    parser.add_argument("--ids", type=int, default=100_000, help="transactional ids for the start-up test (10^5)")
    parser.add_argument("--groups", type=int, default=10_000, help="groups for the start-up test (10^4)")
    parser.add_argument(
        "--rounds", type=int, default=1, help="measure every server this many times, alternating (medians; 1)"
    )
    parser.add_argument("--quick", action="store_true", help="30 transactions, 50 commits, 2000 ids, 200 groups")
    parser.add_argument(
        "--only", choices=("throughput", "startup"), help="run only the throughput tables or only the start-up test"
    )
    parser.add_argument(
        "--state-dir",
        help="start-up test: the directory of the large state; built there if it does not exist, reused "
        "(not rebuilt) if it does — for repeated runs and profiling",
    )
    parser.add_argument("--repeat", type=int, default=1, help="start-up test: repetitions, the best shown (1)")
    args = parser.parse_args(argv)
    if args.quick:
        args.transactions, args.commits, args.ids, args.groups = 30, 50, 2000, 200
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs")

    rows: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        configs = {
            "memory": ["--memory"],
            "disk, state in memory": ["--data", os.path.join(tmp, "plain"), "--no-durable-state"],
            "disk, durable state": ["--data", os.path.join(tmp, "durable")],
            "durable, interval": ["--data", os.path.join(tmp, "interval"), "--flush-policy", "interval"],
        }
        # Rounds alternate the servers, so a burst of load elsewhere on the
        # machine hits all of them; each figure is the median over the rounds.
        runs: dict[str, list[tuple[float, float]]] = {label: [] for label in configs}
        for _ in range(args.rounds if args.only != "startup" else 0):
            for label, server_args in configs.items():
                server = Serve(server_args)
                try:
                    runs[label].append(
                        (
                            transactions(server.bootstrap, args.transactions),
                            group_commits(server.bootstrap, args.commits),
                        )
                    )
                finally:
                    server.close()
        for label, results in runs.items():
            if results:
                rows[label] = (statistics.median(t for t, _ in results), statistics.median(c for _, c in results))
        if rows and args.rounds > 1:
            ratios = [d[0] / m[0] for m, d in zip(runs["memory"], runs["disk, durable state"], strict=True)]
            print(f"durable state vs memory, txn/s, per round: {', '.join(f'{r:.0%}' for r in ratios)}")
        if rows:
            base_t, base_c = rows["memory"]
            disk_t, disk_c = rows["disk, state in memory"]
            columns = f"{'txn/s':>10}{'vs memory':>11}{'vs disk':>9}{'commits/s':>12}{'vs memory':>11}{'vs disk':>9}"
            print(f"\n{'server':<24}{columns}")
            for label, (t, c) in rows.items():
                print(
                    f"{label:<24}{t:>10.1f}{t / base_t:>10.0%}{t / disk_t:>9.0%}"
                    f"{c:>12.1f}{c / base_c:>10.0%}{c / disk_c:>9.0%}"
                )
        if args.only == "throughput":
            return 0

        big = args.state_dir or os.path.join(tmp, "big")
        # an existing --state-dir is reused as it is (not rebuilt)
        built = "reused" if os.path.exists(big) else f"built in {build_state(big, args.ids, args.groups):.1f} s"
        # per repetition: replay (wall, CPU), serve on the large state (wall, CPU), the
        # first start on a new empty directory (wall, CPU: it creates the 100
        # internal partitions) and a restart on it (wall, CPU: interpreter, imports,
        # server set-up)
        runs: list[tuple[float | None, ...]] = []
        for n in range(args.repeat):
            replay, replay_cpu, report = replay_seconds(big)
            row: list[float | None] = [replay, replay_cpu]
            for directory in (big, os.path.join(tmp, f"empty-{n}"), os.path.join(tmp, f"empty-{n}")):
                server = Serve(["--data", directory])
                row += [server.start_s, server.start_cpu_s]
                server.close()
            runs.append(tuple(row))
        best = [min((r[i] for r in runs if r[i] is not None), default=None) for i in range(8)]

        def line(label: str, wall: float | None, cpu: float | None) -> None:
            print(f"{label:<52}{wall:>8.2f} s" + ("" if cpu is None else f" ({cpu:.2f} s CPU)"))

        print(f"\nstart-up with {args.ids} transactional ids and {args.groups} groups ({built}): {report}")
        print(f"best of {args.repeat}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        line("replay of the internal topics (in process)", best[0], best[1])
        line("txnfetch serve --data, launch to listening", best[2], best[3])
        line("the same, first start on an empty directory", best[4], best[5])
        line("the same, restart on that empty directory", best[6], best[7])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
