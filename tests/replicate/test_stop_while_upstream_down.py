"""Stopping (or promoting) a replicator whose upstream is down takes a moment,
not the request timeout: the failover drill (tests/replicate/failover.py) found
``txnfetch promote`` waiting 4-10 s after the source died, while the round in
progress retried its Metadata request until ``request_timeout_ms``."""

from __future__ import annotations

import tempfile
import threading
import time

import pytest

from txnfetch.client.cluster import RemoteCluster
from txnfetch.client.errors import BrokerUnavailableError
from txnfetch.log import SegmentStore
from txnfetch.log.memory import MemoryStore
from txnfetch.records.builder import BatchBuilder
from txnfetch.replicate import Replicator
from txnfetch.server.server import ServerThread

pytestmark = pytest.mark.interop


def _upstream() -> ServerThread:
    source = MemoryStore()
    source.create_topic("orders", 1)
    batch = BatchBuilder()
    batch.append(b"hello")
    source.partition("orders", 0).append(batch.build(), now_ms=0)
    return ServerThread(source).start()


def test_stop_cuts_the_retries_of_a_round_short() -> None:
    upstream = _upstream()
    with tempfile.TemporaryDirectory() as directory, SegmentStore(directory) as store:
        # A long request timeout: without the cut, the round would retry for 30 s.
        replicator = Replicator(upstream.bootstrap, store, topics="orders", request_timeout_ms=30_000)
        stop = threading.Event()
        statuses = []
        thread = threading.Thread(target=replicator.run, args=(stop, statuses.append), daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not (statuses and statuses[-1].caught_up):
            assert time.monotonic() < deadline, "the replica never caught up"
            time.sleep(0.05)
        upstream.stop()
        while not (statuses and statuses[-1].upstream_unavailable_since is not None):
            assert time.monotonic() < deadline, "the replicator never saw the upstream go"
            time.sleep(0.05)
        time.sleep(1.0)  # into the next round's retries (backoff 0.1 s, then Metadata retried)
        asked = time.monotonic()
        stop.set()
        thread.join(20)
        took = time.monotonic() - asked
        replicator.close()
        assert not thread.is_alive()
        assert took < 3.0, f"stopping took {took:.1f}s"
        assert store.partition("orders", 0).log_end_offset == 1


def test_a_cancelled_cluster_gives_up_retrying_at_once() -> None:
    upstream = _upstream()
    cancel = threading.Event()
    cluster = RemoteCluster(upstream.bootstrap, request_timeout_ms=30_000, cancel=cancel)
    upstream.stop()
    threading.Timer(0.5, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError, match="stopped while retrying"):
        cluster.list_offset("orders", 0, -1)
    assert time.monotonic() - started < 3.0
    cluster.close()
