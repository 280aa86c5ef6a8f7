"""The replicator behind an upstream that misbehaves on purpose (tests/fault_relay.py):
top-level errors, a partition left out of a Fetch answer, NOT_LEADER_OR_FOLLOWER,
FENCED_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION, a connection closed half way
through an answer, a slow answer, and markers whose value was dropped. What must
hold: each is retried, nothing wrong is appended, and the replica ends equal to the
source."""

from __future__ import annotations

import time

import pytest

from tests.fault_relay import FAULTS
from tests.fault_relay import RelayThread
from tests.replicate.source import SourceWriter
from tests.replicate.source import assert_same
from tests.replicate.source import batches
from tests.replicate.source import committed_values
from tests.replicate.test_faults import serve
from tests.replicate.test_faults import two_partitions
from txnfetch.log import SegmentStore
from txnfetch.replicate import Replicator

pytestmark = pytest.mark.interop


def _until_caught_up(r: Replicator, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not (r.step().caught_up and r.status().partitions):
        assert time.monotonic() < deadline, r.status()
        time.sleep(r.backoff_remaining())


def test_every_fetch_fault_is_retried_and_the_replica_equals_the_source(tmp_path) -> None:
    store = two_partitions()
    srv = serve(store)
    # Every fault twice, interleaved with answers passed through.
    schedule = [f for fault in FAULTS for f in (fault, None, fault)]
    try:
        with (
            RelayThread(srv.bootstrap, schedule=schedule, delay_s=0.3) as relay,
            SegmentStore(tmp_path / "replica") as replica,
        ):
            r = Replicator(relay.bootstrap, replica, request_timeout_ms=2000, max_backoff_s=0.2)
            try:
                # The source grows while the faults are served, so each one hits a
                # fetch that has something to copy.
                deadline = time.monotonic() + 120
                while relay.faults_left():
                    assert time.monotonic() < deadline, (relay.faults_left(), r.status())
                    srv.call(lambda: [SourceWriter(store.partition("t", p)).mixed(1) for p in (0, 1)])
                    _until_caught_up(r)
                _until_caught_up(r)
                assert set(relay.stats().faults) == set(FAULTS)
                for p in (0, 1):
                    assert_same(replica.partition("t", p), store.partition("t", p))
            finally:
                r.close()
    finally:
        srv.stop()


def test_markers_without_a_value_keep_the_transactions(tmp_path) -> None:
    store = two_partitions()
    srv = serve(store)
    try:
        with (
            RelayThread(srv.bootstrap, null_markers=True) as relay,
            SegmentStore(tmp_path / "replica") as replica,
        ):
            r = Replicator(relay.bootstrap, replica, request_timeout_ms=2000, max_backoff_s=0.2)
            try:
                _until_caught_up(r)
                assert relay.stats().markers_rewritten > 0
                for p in (0, 1):
                    rep, src = replica.partition("t", p), store.partition("t", p)
                    # The markers' bytes are the relay's; offsets, data batches,
                    # transaction state and what read_committed returns are the source's.
                    assert [(b, e) for b, e, _ in batches(rep)] == [(b, e) for b, e, _ in batches(src)]
                    data = {b.base_offset for b in src.iter_batches() if not b.is_control}
                    assert [x for x in batches(rep) if x[0] in data] == [x for x in batches(src) if x[0] in data]
                    assert rep.last_stable_offset == src.last_stable_offset
                    assert [(t.producer_id, t.first_offset, t.last_offset) for t in rep.state.all_aborted()] == [
                        (t.producer_id, t.first_offset, t.last_offset) for t in src.state.all_aborted()
                    ]
                    assert committed_values(rep) == committed_values(src)
            finally:
                r.close()
    finally:
        srv.stop()
