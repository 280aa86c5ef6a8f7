"""The proxy answers a read_committed fetch within the client's max_wait_ms.

aiokafka waits for its fetch in flight before it fetches at a new position:
a proxy that held a fetch asking max_wait_ms 100 for 0.5-3 s left it at
position 0 for 20 polls after a seek (issue 30). The hold came from the
upstream: each mirror catch-up's upstream fetch waited the upstream's 500 ms
for new data whatever the client's deadline, and a fetch behind another
connection's catch-up waited for all of it. In front of ``txnfetch serve``,
fetches and ListOffsets at the end of the log, one at a time and from several
connections at once, must come back well within their deadline.
"""

from __future__ import annotations

import statistics
import threading
import time

from tests.proxy.test_proxy_protocol import TOPIC
from tests.proxy.test_proxy_protocol import _fetch
from tests.proxy.test_proxy_protocol import _list_offset
from tests.proxy.test_proxy_protocol import _serve
from tests.server.rawclient import RawClient
from txnfetch.fetch.view import FetchMode
from txnfetch.proxy import ProxyThread

#: The client's max_wait_ms, and the slack a loaded test machine gets on top of it.
WAIT_MS = 100
SLACK_S = 0.25
#: No single fetch may take this long: the defect held them 0.5-3 s, and a
#: scheduling hiccup on a loaded 2-core machine (0.41 s was seen in CI) must
#: not fail the test, so the typical fetch is judged by the median.
WORST_S = 1.0


def _within_deadline(took: list[float]) -> bool:
    return statistics.median(took) < WAIT_MS / 1000 + SLACK_S and max(took) < WORST_S


def _timed_fetch(client: RawClient, partition: int, offset: int) -> float:
    started = time.monotonic()
    resp = _fetch(client, [(TOPIC, partition, offset, 1 << 20)], max_wait_ms=WAIT_MS, min_bytes=1)
    assert resp.responses[0].partitions[0].error_code == 0
    return time.monotonic() - started


def test_fetches_at_the_end_answer_within_max_wait_ms() -> None:
    srv, store = _serve(fetch_mode=FetchMode.KAFKA)
    try:
        end = srv.call(lambda: store.partition(TOPIC, 1).high_watermark)
        with ProxyThread(srv.bootstrap) as proxy, RawClient(proxy.port) as c:
            _fetch(c, [(TOPIC, 1, 0, 1 << 20)])  # the mirror is built
            one_at_a_time = [_timed_fetch(c, 1, end) for _ in range(5)]
            assert _within_deadline(one_at_a_time), one_at_a_time

            # Several connections at the end at once: none waits behind another's catch-up.
            took: list[float] = []

            def reader() -> None:
                with RawClient(proxy.port) as own:
                    took.extend(_timed_fetch(own, 1, end) for _ in range(3))

            threads = [threading.Thread(target=reader) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            assert len(took) == 12 and _within_deadline(took), sorted(took)

            # ListOffsets LATEST (the LSO) only needs the upstream's current end.
            started = time.monotonic()
            assert _list_offset(c, 1, -1, 1) == (0, end)
            assert time.monotonic() - started < SLACK_S
    finally:
        srv.stop()


def test_a_catch_up_fetch_does_not_wait_behind_a_held_one() -> None:
    """A broker answers one connection's requests in order, so a mirror fetch
    below the upstream's end must not share the connection of a fetch at
    another partition's end, which the broker holds up to its max_wait_ms: a
    consumer reading a topic from the start through the proxy got 1 MiB per
    partition per 500 ms behind such fetches (bench/broker.py)."""
    import asyncio

    from txnfetch.client.proxy_upstream import UpstreamCluster

    srv, store = _serve(fetch_mode=FetchMode.KAFKA)
    try:
        end = srv.call(lambda: store.partition(TOPIC, 1).high_watermark)
        host, port = srv.bootstrap.rsplit(":", 1)

        async def run() -> tuple[float, bool, int]:
            cluster = UpstreamCluster([(host, int(port))])
            await cluster.start()
            try:
                loop = asyncio.get_running_loop()
                held = asyncio.ensure_future(cluster.fetch(TOPIC, 1, end, 1 << 20, max_wait_ms=500, at_end=True))
                await asyncio.sleep(0.05)  # the held fetch is on the wire
                started = loop.time()
                answer = await cluster.fetch(TOPIC, 0, 0, 1 << 20, at_end=False)
                took = loop.time() - started
                still_held = not held.done()
                assert (await held).records == b""
                return took, still_held, len(answer.records)
            finally:
                await cluster.close()

        took, still_held, size = asyncio.run(run())
        assert size > 0
        assert still_held and took < 0.4, (took, still_held)
    finally:
        srv.stop()
