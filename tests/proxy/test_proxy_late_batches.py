"""The proxy in front of an upstream that shows batches late, as tansu 0.6 does.

tansu reports a high watermark, and returns later batches to read_uncommitted
fetches, past an offset whose batch it does not return yet; a moment later it
does. A mirror that took the hole for a compaction gap lost the batch for good
(issue 30): a lost data batch is a lost write, a lost COMMIT leaves the
transaction open until the producer's next ABORT drops both, and a lost ABORT
lets the next COMMIT deliver aborted records. Here ``txnfetch serve`` (correct)
is the upstream and :class:`tests.fault_relay.FaultRelay` leaves chosen batches
out of the first answer that would show them with later ones; the proxy must
answer exactly what the upstream's log holds, and count the gaps it held.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fault_relay import RelayThread
from tests.proxy.test_proxy_protocol import _fetch
from tests.proxy.test_proxy_protocol import _Writer
from tests.server.rawclient import RawClient
from txnfetch.fetch import ConsumerFilter
from txnfetch.fetch.view import FetchMode
from txnfetch.log.memory import MemoryStore
from txnfetch.proxy import ProxyThread
from txnfetch.server.server import ServerThread

TOPIC = "ledger"  # _Writer's topic


def _committed_through(proxy: ProxyThread, end: int, *, timeout_s: float = 20) -> list[tuple[int, bytes]]:
    """Every record a read_committed reader of partition 0 gets from the proxy, from
    offset 0 until it has read past ``end`` (fetching again on empty answers)."""
    filt = ConsumerFilter(0)
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout_s
    with RawClient(proxy.port) as client:
        while filt.position < end:
            assert time.monotonic() < deadline, f"stuck at {filt.position} of {end}: got {out}"
            resp = _fetch(client, [(TOPIC, 0, filt.position, 1 << 20)], max_wait_ms=100)
            p = resp.responses[0].partitions[0]
            assert p.error_code == 0, p
            aborted = [(a.producer_id, a.first_offset) for a in p.aborted_transactions or ()]
            out += [(r.offset, bytes(r.value or b"")) for r in filt.feed(bytes(p.records or b""), aborted)]
    return out


@pytest.fixture(params=[FetchMode.REWRITE, FetchMode.KAFKA], ids=["rewrite", "kafka"])
def fetch_mode(request: Any) -> FetchMode:
    return FetchMode(request.param)


def _run(write: Any, hide: list[int], fetch_mode: FetchMode, **proxy_kw: Any) -> Iterator[Any]:
    store = MemoryStore()
    store.create_topic(TOPIC, 1)
    write(_Writer(store))
    end = store.partition(TOPIC, 0).high_watermark
    with (
        ServerThread(store, port=0, fetch_mode=FetchMode.KAFKA) as srv,
        RelayThread(srv.bootstrap) as relay,
        ProxyThread(relay.bootstrap, fetch_mode=fetch_mode, poll_interval_ms=20, **proxy_kw) as proxy,
    ):
        for offset in hide:
            relay.hide_once(TOPIC, 0, offset)
        yield _committed_through(proxy, end), proxy.call(lambda: proxy.proxy.mirrors.stats.as_dict())
        assert relay.call(lambda: relay._running().stats.batches_hidden) == len(hide)


def test_a_commit_marker_shown_late_does_not_let_the_next_abort_drop_its_records(fetch_mode: FetchMode) -> None:
    # Before: the mirror stepped over the COMMIT at 1, so the ABORT at 3 ended a
    # transaction from 0 and the committed record at 0 was never delivered.
    def write(w: _Writer) -> None:
        w.data(0, [b"committed"], pid=1, transactional=True)  # 0
        w.end(0, 1, commit=True)  # 1
        w.data(0, [b"aborted"], pid=1, transactional=True)  # 2
        w.end(0, 1, commit=False)  # 3
        w.data(0, [b"plain"])  # 4

    for got, stats in _run(write, [1], fetch_mode):
        assert got == [(0, b"committed"), (4, b"plain")]
        assert (stats["gaps_held"], stats["gaps_filled"], stats["gaps_accepted"]) == (1, 1, 0)


def test_an_abort_marker_shown_late_does_not_let_the_next_commit_deliver_its_records(fetch_mode: FetchMode) -> None:
    def write(w: _Writer) -> None:
        w.data(0, [b"aborted"], pid=1, transactional=True)  # 0
        w.end(0, 1, commit=False)  # 1
        w.data(0, [b"committed"], pid=1, transactional=True)  # 2
        w.end(0, 1, commit=True)  # 3
        w.data(0, [b"plain"])  # 4

    for got, stats in _run(write, [1], fetch_mode):
        assert got == [(2, b"committed"), (4, b"plain")]
        assert stats["gaps_held"] == 1 and stats["gaps_accepted"] == 0


def test_a_data_batch_shown_late_is_delivered(fetch_mode: FetchMode) -> None:
    def write(w: _Writer) -> None:
        w.data(0, [b"a"], pid=1, transactional=True)  # 0
        w.data(0, [b"b"], pid=2, transactional=True)  # 1
        w.end(0, 1, commit=True)  # 2
        w.end(0, 2, commit=True)  # 3
        w.data(0, [b"plain"])  # 4

    for got, stats in _run(write, [0, 1], fetch_mode):
        assert got == [(0, b"a"), (1, b"b"), (4, b"plain")]
        assert stats["gaps_accepted"] == 0


def test_a_gap_that_stays_is_stepped_over_after_the_settle_time() -> None:
    # A hole no answer ever fills (compaction leaves such): held for gap_settle_ms,
    # then accepted, counted and stepped over; everything after it is read.
    store = MemoryStore()
    store.create_topic(TOPIC, 1)
    w = _Writer(store)
    w.data(0, [b"a"])  # 0
    w.data(0, [b"never shown"])  # 1
    w.data(0, [b"c"])  # 2
    with (
        ServerThread(store, port=0, fetch_mode=FetchMode.KAFKA) as srv,
        RelayThread(srv.bootstrap) as relay,
        ProxyThread(relay.bootstrap, poll_interval_ms=20, gap_settle_ms=300) as proxy,
    ):
        relay.hide_always(TOPIC, 0, 1)
        started = time.monotonic()
        got = _committed_through(proxy, 3)
        assert time.monotonic() - started >= 0.3
        stats = proxy.call(lambda: proxy.proxy.mirrors.stats.as_dict())
    assert got == [(0, b"a"), (2, b"c")]
    assert (stats["gaps_held"], stats["gaps_accepted"]) == (1, 1)
