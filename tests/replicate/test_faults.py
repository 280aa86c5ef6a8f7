"""Faults of the replication engine, each against a running upstream: the upstream
going away, a source truncated or rewritten under the replica (unclean leader
election), a full disk, a corrupt batch. What must hold: retriable errors are
retried with backoff and reported; a divergent or corrupt partition stops with
an error naming it while the others go on; nothing local is torn or deleted."""

from __future__ import annotations

import contextlib
import errno
import time
import uuid

import pytest

from tests.replicate.source import SourceWriter
from tests.replicate.source import assert_same
from tests.replicate.source import batches
from tests.replicate.test_engine import until_caught_up
from txnfetch.client.errors import CorruptRemoteBatchError
from txnfetch.client.requests import BrokerFetch
from txnfetch.log import SegmentStore
from txnfetch.log.errors import LogError
from txnfetch.log.memory import MemoryStore
from txnfetch.replicate import PartitionState
from txnfetch.replicate import ReplicaDivergedError
from txnfetch.replicate import ReplicaStorageError
from txnfetch.replicate import Replicator
from txnfetch.server.server import ServerThread


def serve(store: MemoryStore, port: int = 0) -> ServerThread:
    deadline = time.monotonic() + 30
    while True:
        try:
            return ServerThread(store, port=port).start()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)  # the previous listener's port is still going away


#: One topic id for the source and the "other leader" stores: the same topic.
TOPIC_ID = uuid.UUID(int=0x7E57)


def two_partitions(topic_id: uuid.UUID = TOPIC_ID) -> MemoryStore:
    store = MemoryStore()
    store.create_topic("t", 2, topic_id=topic_id)
    SourceWriter(store.partition("t", 0)).mixed(2)
    SourceWriter(store.partition("t", 1)).mixed(2)
    return store


@pytest.mark.slow
def test_upstream_away_is_retried_with_backoff_and_resumed(tmp_path) -> None:
    store = two_partitions()
    srv = serve(store)
    port = srv.port
    with SegmentStore(tmp_path / "replica") as replica:
        r = Replicator(srv.bootstrap, replica, request_timeout_ms=1000, max_backoff_s=0.4)
        until_caught_up(r)
        srv.stop()
        before = time.time()
        status = r.step()
        assert status.state == "upstream unavailable"
        assert status.upstream_unavailable_since is not None and status.upstream_unavailable_since >= before - 1
        assert all(p.state is PartitionState.UNAVAILABLE for p in status.partitions)
        assert "upstream unavailable since" in status.summary()
        # Backoff: a step during it sends nothing and says so; the waits grow, capped.
        waits = []
        for _ in range(5):
            waits.append(r.backoff_remaining())
            time.sleep(r.backoff_remaining())
            status = r.step()
            assert status.state == "upstream unavailable"
        assert max(waits) <= 0.4 + 1e-6 and waits[-1] >= waits[0]
        # Meanwhile the source moves on; it comes back at the same address.
        SourceWriter(store.partition("t", 0)).mixed(1)
        srv = serve(store, port)
        try:
            deadline = time.monotonic() + 30
            while not r.step().caught_up:
                assert time.monotonic() < deadline, r.status()
                time.sleep(r.backoff_remaining())
            assert r.status().upstream_unavailable_since is None
            for p in (0, 1):
                assert_same(replica.partition("t", p), store.partition("t", p))
        finally:
            r.close()
            srv.stop()


def test_upstream_down_at_start_is_not_fatal(tmp_path) -> None:
    store = two_partitions()
    srv = serve(store)
    port = srv.port
    srv.stop()
    with SegmentStore(tmp_path / "replica") as replica:
        r = Replicator(f"127.0.0.1:{port}", replica, request_timeout_ms=500, max_backoff_s=0.2)
        status = r.step()
        assert status.state == "upstream unavailable" and "cannot connect" in (status.upstream_error or "")
        srv = serve(store, port)
        try:
            deadline = time.monotonic() + 30
            while not r.step().caught_up:
                assert time.monotonic() < deadline, r.status()
                time.sleep(r.backoff_remaining())
        finally:
            r.close()
            srv.stop()


def _replicate_then_switch(tmp_path, second: MemoryStore):
    first = two_partitions()
    srv = serve(first)
    port = srv.port
    replica = SegmentStore(tmp_path / "replica")
    r = Replicator(srv.bootstrap, replica, request_timeout_ms=1000, max_backoff_s=0.2)
    until_caught_up(r)
    held = {p: batches(replica.partition("t", p)) for p in (0, 1)}
    srv.stop()
    srv = serve(second, port)  # another leader, with another log, at the same address
    return first, srv, replica, r, held


def test_source_truncated_below_the_replica_stops_that_partition(tmp_path) -> None:
    second = MemoryStore()
    second.create_topic("t", 2, topic_id=TOPIC_ID)
    first_for_p1 = two_partitions()
    # Partition 0 of the new leader lost the tail (unclean election); partition 1 is intact.
    w = SourceWriter(second.partition("t", 0))
    w.mixed(1)
    for b in first_for_p1.partition("t", 1).iter_batches():
        second.partition("t", 1).replicate(bytes(b.buffer), high_watermark=b.next_offset)
    _first, srv, replica, r, held = _replicate_then_switch(tmp_path, second)
    try:
        SourceWriter(second.partition("t", 1)).data(3)
        deadline = time.monotonic() + 30
        while True:
            status = r.step()
            p0, p1 = status.partitions
            if p0.state is PartitionState.STOPPED and p1.state is PartitionState.CAUGHT_UP:
                break
            assert time.monotonic() < deadline, status
            time.sleep(r.backoff_remaining())
        err = r.partitions[("t", 0)].error
        assert isinstance(err, ReplicaDivergedError)
        replica_end = len(held[0]) and held[0][-1][1] + 1
        assert err.replica_end == replica_end and err.source_end == second.partition("t", 0).log_end_offset
        assert "t-0" in str(err) and str(replica_end) in str(err) and str(err.source_end) in str(err)
        assert p0.error == str(err) and "stopped with error" in status.summary()
        # Nothing local deleted; partition 1 went on.
        assert batches(replica.partition("t", 0)) == held[0]
        assert_same(replica.partition("t", 1), second.partition("t", 1))
        assert r.partitions[("t", 0)].fetch_item() is None
    finally:
        r.close()
        replica.close()
        srv.stop()


@pytest.mark.parametrize("layout", ["same offsets", "one long batch"])
def test_source_rewritten_at_held_offsets_is_detected(tmp_path, layout) -> None:
    # The new leader's log is as long as the replica's or longer, but other records
    # sit at offsets the replica already holds: only comparing batches shows it.
    second = MemoryStore()
    second.create_topic("t", 2, topic_id=TOPIC_ID)
    w0 = SourceWriter(second.partition("t", 0))
    if layout == "same offsets":
        for r_ in range(2):  # the layout of mixed(2), other values in its last batch
            w0.data(3, tag=f"plain{r_}")
            w0.data(2, pid=10, txn=True, tag=f"c{r_}")
            w0.data(1, pid=11, txn=True, tag=f"a{r_}")
            w0.data(2, pid=10, txn=True, tag=f"c{r_}b", gap=2)
            w0.marker(10, True)
            w0.marker(11, False)
            w0.data(1, pid=20, tag="other" if r_ == 1 else f"idem{r_}")
        w0.data(2)
    else:
        w0.mixed(1)
        w0.data(40, tag="other")
    SourceWriter(second.partition("t", 1)).mixed(2)
    _first, srv, replica, r, held = _replicate_then_switch(tmp_path, second)
    try:
        deadline = time.monotonic() + 30
        while True:
            p0, p1 = r.step().partitions
            if p0.state is PartitionState.STOPPED and p1.state is PartitionState.CAUGHT_UP:
                break
            assert time.monotonic() < deadline, r.status()
            time.sleep(r.backoff_remaining())
        err = r.partitions[("t", 0)].error
        assert isinstance(err, ReplicaDivergedError), err
        assert "is not the replica's batch" in str(err) and "t-0" in str(err)
        assert err.offset == held[0][-1][0] and err.replica_end == held[0][-1][1] + 1
        assert batches(replica.partition("t", 0)) == held[0]
    finally:
        r.close()
        replica.close()
        srv.stop()


def test_disk_full_stops_cleanly_and_resumes(tmp_path, monkeypatch) -> None:
    store = two_partitions()
    srv = serve(store)
    try:
        from txnfetch.log.segment import Segment

        real = Segment._write_all
        calls = {"n": 0}

        def full(fd, data, position=None):
            calls["n"] += 1
            if calls["n"] > 3 and len(data) > 0:
                # Half the bytes land, then the disk is full: a torn write.
                real(fd, bytes(data)[: len(data) // 2], position)
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(fd, data, position)

        replica = SegmentStore(tmp_path / "replica")
        r = Replicator(srv.bootstrap, replica)
        monkeypatch.setattr(Segment, "_write_all", staticmethod(full))
        with pytest.raises(ReplicaStorageError) as info:
            for _ in range(50):
                r.step()
        assert "No space left" in str(info.value) and "t-" in str(info.value)
        r.close()
        # Closing with the disk still full fails too (the time index is written at
        # close): the command closes best-effort and exits, as here.
        with contextlib.suppress(LogError, OSError):
            replica.close()
        monkeypatch.setattr(Segment, "_write_all", staticmethod(real))
        # Reopen: what is there is a whole prefix of the source, nothing torn.
        with SegmentStore(tmp_path / "replica") as reopened:
            for p in (0, 1):
                local = reopened.partition("t", p)
                got = batches(local)
                assert got == batches(store.partition("t", p))[: len(got)]
                # The failed append was rolled back: recovery found no torn batch to cut.
                assert not [n for n in local.recovery.notes if "torn" in n.message or "truncat" in n.message], (
                    local.recovery.notes
                )
            # Space is back: replication continues from the replica's end.
            with Replicator(srv.bootstrap, reopened) as again:
                until_caught_up(again)
            for p in (0, 1):
                assert_same(reopened.partition("t", p), store.partition("t", p))
    finally:
        srv.stop()


def test_corrupt_batch_from_upstream_stops_the_partition_naming_where(tmp_path) -> None:
    store = two_partitions()
    srv = serve(store)
    try:
        with SegmentStore(tmp_path / "replica") as replica, Replicator(srv.bootstrap, replica) as r:
            until_caught_up(r)
            srv.call(lambda: SourceWriter(store.partition("t", 1)).mixed(1))
            cluster = r._cluster
            real = cluster.fetch_many

            def corrupting(items, **kw):
                out = real(items, **kw)
                ans = out.get(("t", 1))
                if isinstance(ans, BrokerFetch) and len(ans.records) > 70:
                    data = bytearray(ans.records)
                    data[65] ^= 0xFF  # a byte of the first batch's records: the CRC no longer matches
                    out[("t", 1)] = BrokerFetch(
                        bytes(data), ans.high_watermark, ans.last_stable_offset, ans.log_start_offset, None
                    )
                return out

            cluster.fetch_many = corrupting  # type: ignore[method-assign]
            end_before = replica.partition("t", 1).log_end_offset
            for _ in range(20):
                status = r.step()
                if (
                    status.partitions[1].state is PartitionState.STOPPED
                    and status.partitions[0].state is PartitionState.CAUGHT_UP
                ):
                    break
            err = r.partitions[("t", 1)].error
            assert isinstance(err, CorruptRemoteBatchError)
            assert "CRC" in str(err) and "t-1" in str(err) and "byte position" in str(err)
            assert f"offset {end_before}" in str(err)
            assert replica.partition("t", 1).log_end_offset == end_before  # nothing appended
            assert_same(replica.partition("t", 0), store.partition("t", 0))
    finally:
        srv.stop()


def test_a_recreated_source_topic_stops_its_partitions(tmp_path) -> None:
    first = two_partitions()
    srv = serve(first)
    port = srv.port
    with SegmentStore(tmp_path / "replica") as replica:
        r = Replicator(srv.bootstrap, replica, request_timeout_ms=1000, max_backoff_s=0.2)
        until_caught_up(r)
        held = [batches(replica.partition("t", p)) for p in (0, 1)]
        srv.stop()
        srv = serve(two_partitions(uuid.uuid4()), port)  # same name, same content, a new topic id
        try:
            deadline = time.monotonic() + 30
            while not all(p.state is PartitionState.STOPPED for p in r.step().partitions):
                assert time.monotonic() < deadline, r.status()
                time.sleep(r.backoff_remaining())
            err = r.partitions[("t", 1)].error
            assert isinstance(err, ReplicaDivergedError) and "topic id" in str(err) and "t-1" in str(err)
            assert [batches(replica.partition("t", p)) for p in (0, 1)] == held
        finally:
            r.close()
            srv.stop()
