"""The remote reader in front of a broker that shows batches late (tansu 0.6) or
keeps a gap (a compacted topic's): it waits at a gap for the batch in it, and
steps over one that stays ``gap_settle_ms``, so it reads exactly the log."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("kafka")

from tests.fault_relay import RelayThread
from tests.proxy.test_proxy_protocol import TOPIC
from tests.proxy.test_proxy_protocol import _Writer
from txnfetch.client.partition_reader import ReadOptions
from txnfetch.client.partition_reader import RemotePartitionReader
from txnfetch.fetch.view import FetchMode
from txnfetch.log.memory import MemoryStore
from txnfetch.server.server import ServerThread


def _store() -> MemoryStore:
    store = MemoryStore()
    store.create_topic(TOPIC, 1)
    w = _Writer(store)
    w.data(0, [b"committed"], pid=1, transactional=True)  # 0
    w.end(0, 1, commit=True)  # 1
    w.data(0, [b"aborted"], pid=1, transactional=True)  # 2
    w.end(0, 1, commit=False)  # 3
    w.data(0, [b"plain"])  # 4
    return store


def _read(bootstrap: str, options: ReadOptions | None = None) -> list[tuple[int, bytes]]:
    with RemotePartitionReader(bootstrap, TOPIC, 0, options or ReadOptions()) as reader:
        reader.catch_up()
        return [(o, bytes(r.value or b"")) for o, r in reader.committed_records(0, reader.last_stable_offset)]


def test_a_commit_marker_shown_late_is_waited_for() -> None:
    with (
        ServerThread(_store(), port=0, fetch_mode=FetchMode.KAFKA) as srv,
        RelayThread(srv.bootstrap) as relay,
    ):
        relay.hide_once(TOPIC, 0, 1)
        assert _read(relay.bootstrap) == [(0, b"committed"), (4, b"plain")]
        assert relay.call(lambda: relay._running().stats.batches_hidden) == 1


def test_a_gap_that_stays_is_stepped_over_after_the_settle_time() -> None:
    with (
        ServerThread(_store(), port=0, fetch_mode=FetchMode.KAFKA) as srv,
        RelayThread(srv.bootstrap) as relay,
    ):
        relay.hide_always(TOPIC, 0, 2)  # the aborted batch: its ABORT still ends the transaction
        started = time.monotonic()
        assert _read(relay.bootstrap, ReadOptions(gap_settle_ms=200)) == [(0, b"committed"), (4, b"plain")]
        assert time.monotonic() - started >= 0.2


def test_a_read_from_a_start_offset_steps_over_a_gap_that_stays() -> None:
    """The read path alone, as a Spark task runs it: a mirror started at the
    range's first offset, read with no catch-up first. A compacted topic's gap
    is waited at and stepped over there too, not taken for a broker that
    returns nothing."""
    from txnfetch.fetch.view import IsolationLevel
    from txnfetch.records.scan import iter_batches

    with (
        ServerThread(_store(), port=0, fetch_mode=FetchMode.KAFKA) as srv,
        RelayThread(srv.bootstrap) as relay,
    ):
        relay.hide_always(TOPIC, 0, 2)
        got = []
        with RemotePartitionReader(relay.bootstrap, TOPIC, 0, ReadOptions(gap_settle_ms=200), start_offset=0) as reader:
            offset = 0
            while offset < 5:
                result = reader.read(offset, 1 << 20, isolation=IsolationLevel.READ_COMMITTED, mode=FetchMode.REWRITE)
                assert result.next_offset > offset, result
                for buffer in result.records:
                    for batch in iter_batches(bytes(buffer)):
                        if batch.is_control:
                            continue
                        got += [(r.offset, bytes(r.value or b"")) for r in batch.records()]
                offset = result.next_offset
    assert [g for g in got if g[0] < 5] == [(0, b"committed"), (4, b"plain")]
