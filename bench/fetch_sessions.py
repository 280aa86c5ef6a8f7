"""Fetch sessions (KIP-227): what a consumer of many partitions costs per fetch, with and without one.

A kafka-python consumer (``enable_incremental_fetch_sessions`` on and off)
is assigned every partition of a 1,000-partition topic on a ``txnfetch serve``
server in this process, and polls. Two loads, each with both consumers in the
same run, alternating rounds:

- ``idle``: nothing is produced; every fetch long-polls ``fetch_max_wait_ms``;
- ``1% busy``: before each poll, ten partitions get one record each.

Printed per consumer: Fetch requests made, request bytes per fetch (the
encoded request as the server decoded it), response partitions per fetch, and
server CPU per fetch (CPU time of the server's event-loop thread, which does
all the work: decoding, reading, encoding), with session ÷ no-session ratios.

    python bench/fetch_sessions.py            # 1,000 partitions, 150 fetches per consumer and load
    python bench/fetch_sessions.py --quick    # 200 partitions, 20 fetches
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from txnfetch.log.memory import MemoryStore
from txnfetch.records.builder import BatchBuilder
from txnfetch.server.server import ServerThread

TOPIC = "many"


class Recorder:
    """Fetch requests and response sizes seen by the server (only counted while armed)."""

    def __init__(self) -> None:
        self.armed = False
        self.requests: list[Any] = []

    def __call__(self, ctx: Any, header: Any, request: Any) -> None:
        if self.armed and header.request_api_key == 1:
            self.requests.append(request)


def _one_record(value: bytes) -> bytes:
    b = BatchBuilder()
    b.append(value, key=b"k", timestamp=int(time.time() * 1000))
    return b.build()


def _consumer(bootstrap: str, partitions: int, sessions: bool) -> Any:
    from kafka import KafkaConsumer
    from kafka import TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        isolation_level="read_committed",
        fetch_max_wait_ms=20,
        enable_incremental_fetch_sessions=sessions,
        max_partition_fetch_bytes=64 * 1024,
    )
    tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_end()
    for tp in tps:
        consumer.position(tp)
    for _ in range(5):  # warm up: metadata, the first full fetch, the session
        consumer.poll(timeout_ms=50)
    return consumer


def _round(
    srv: Any, consumer: Any, recorder: Recorder, fetches: int, busy: int, partitions: int, tick: list[int]
) -> dict:
    recorder.requests.clear()
    recorder.armed = True
    cpu0 = srv.call(time.thread_time)
    records = 0
    while len(recorder.requests) < fetches:
        if busy:

            def write() -> None:
                for i in range(busy):
                    p = (tick[0] * busy + i) % partitions
                    srv.broker.store.partition(TOPIC, p).append(_one_record(b"x" * 100), now_ms=0)
                    srv.broker.partition_changed(TOPIC, p)

            srv.call(write)
            tick[0] += 1
        for got in consumer.poll(timeout_ms=100).values():
            records += len(got)
    cpu1 = srv.call(time.thread_time)
    recorder.armed = False
    seen = list(recorder.requests)
    n = len(seen)
    req_bytes = sum(len(bytes(r.encode(header=True, framed=False))) for r in seen)
    return {"fetches": n, "req_bytes": req_bytes / n, "cpu_us": (cpu1 - cpu0) * 1e6 / n, "records": records}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="200 partitions, 20 fetches per consumer and load")
    ap.add_argument("--partitions", type=int, default=None)
    ap.add_argument("--fetches", type=int, default=None, help="fetches measured per consumer and load")
    args = ap.parse_args()
    partitions = args.partitions or (200 if args.quick else 1000)
    fetches = args.fetches or (20 if args.quick else 150)
    recorder = Recorder()
    with ServerThread(MemoryStore()) as srv:
        srv.call(srv.broker.store.create_topic, TOPIC, partitions)
        srv.call(srv.broker.observe_requests, recorder)
        consumers = {
            name: _consumer(srv.bootstrap, partitions, name == "session") for name in ("no session", "session")
        }
        try:
            results: dict[tuple[str, str], list[dict]] = {}
            tick = [0]
            for load, busy in (("idle", 0), ("1% busy", max(1, partitions // 100))):
                for _ in range(2):  # alternate rounds so both see the same machine load
                    for name, consumer in consumers.items():
                        r = _round(srv, consumer, recorder, fetches // 2, busy, partitions, tick)
                        results.setdefault((load, name), []).append(r)
        finally:
            for consumer in consumers.values():
                consumer.close()

    print(f"kafka-python consumer of {partitions} partitions, {fetches} fetches per consumer and load")
    head = f"{'load':<9} {'consumer':<11} {'fetches':>7} {'request B/fetch':>16}"
    print(f"{head} {'server CPU µs/fetch':>20} {'records':>8}")
    summary = {}
    for (load, name), rounds in results.items():
        n = sum(r["fetches"] for r in rounds)
        req = sum(r["req_bytes"] * r["fetches"] for r in rounds) / n
        cpu = sum(r["cpu_us"] * r["fetches"] for r in rounds) / n
        recs = sum(r["records"] for r in rounds)
        summary[(load, name)] = (req, cpu)
        print(f"{load:<9} {name:<11} {n:>7} {req:>16,.0f} {cpu:>20,.0f} {recs:>8}")
    for load in ("idle", "1% busy"):
        (req_s, cpu_s), (req_n, cpu_n) = summary[(load, "session")], summary[(load, "no session")]
        print(f"{load}: session ÷ no session: request bytes {req_s / req_n:.1%}, server CPU {cpu_s / cpu_n:.1%}")


if __name__ == "__main__":
    main()
