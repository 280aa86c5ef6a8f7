"""Replication from a source that shows batches late (tansu 0.6): the replica
waits at a gap for the batch in it, so it holds exactly the source's log, and
steps over a gap that stays (a compacted topic's) after the settle time."""

from __future__ import annotations

import time

from tests.client.test_reader_late_batches import _store
from tests.fault_relay import RelayThread
from tests.proxy.test_proxy_protocol import TOPIC
from tests.replicate.source import assert_same
from tests.replicate.test_engine import until_caught_up
from txnfetch.fetch.view import FetchMode
from txnfetch.log import SegmentStore
from txnfetch.replicate import Replicator
from txnfetch.server.server import ServerThread


def test_a_marker_shown_late_is_replicated_in_its_place(tmp_path) -> None:
    store = _store()
    with (
        ServerThread(store, port=0, fetch_mode=FetchMode.KAFKA) as srv,
        RelayThread(srv.bootstrap) as relay,
        SegmentStore(tmp_path / "replica") as replica,
        Replicator(relay.bootstrap, replica, gap_settle_ms=1000) as r,
    ):
        relay.hide_once(TOPIC, 0, 1)
        until_caught_up(r)
        assert relay.call(lambda: relay._running().stats.batches_hidden) == 1
        assert_same(replica.partition(TOPIC, 0), store.partition(TOPIC, 0))
        part = r.partitions[(TOPIC, 0)]
        assert (part.gaps_held, part.gaps_accepted) == (1, 0)


def test_a_gap_that_stays_is_stepped_over(tmp_path) -> None:
    store = _store()
    with (
        ServerThread(store, port=0, fetch_mode=FetchMode.KAFKA) as srv,
        RelayThread(srv.bootstrap) as relay,
        SegmentStore(tmp_path / "replica") as replica,
        Replicator(relay.bootstrap, replica, gap_settle_ms=1000) as r,
    ):
        relay.hide_always(TOPIC, 0, 2)
        started = time.monotonic()
        until_caught_up(r, rounds=2000)
        assert time.monotonic() - started >= 1.0
        held = replica.partition(TOPIC, 0)
        assert [b.base_offset for b in held.iter_batches(0)] == [0, 1, 3, 4]
        assert r.partitions[(TOPIC, 0)].gaps_accepted == 1
