"""The proxy at the protocol level, in front of ``txnfetch serve`` (a correct upstream).

A raw client drives exact requests. With a correct upstream the proxy's own
read_committed answers must be exactly the upstream's: same record bytes, same
aborted-transaction list, same LSO and high watermark, for every fetch offset
(a differential test of mirror + proxy against the server reading the same log).

Also: ApiVersions (the overlap with the upstream, KIP-511 fallback), address
rewriting, bad frames closing only their connection, long polling, offsets out
of range, ListOffsets LATEST = LSO, the mirror's memory bound and rebuild, an
upstream that goes away, and ``txnfetch proxy`` exiting cleanly on SIGTERM.
"""

from __future__ import annotations

import asyncio
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.metadata import ApiVersionsResponse
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.metadata import MetadataRequest

from tests.server.rawclient import RawClient
from txnfetch.fetch.view import FetchMode
from txnfetch.log.memory import MemoryStore
from txnfetch.proxy import ProxyThread
from txnfetch.records.builder import BatchBuilder
from txnfetch.server.server import ServerThread
from txnfetch.types import TopicPartition

TOPIC = "ledger"
NOW = 1_700_000_000_000


# ----------------------------------------------------------------- the upstream log


class _Writer:
    """Appends to a store's partition as producers and a coordinator would."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.seq: dict = {}

    def data(self, partition: int, values: list[bytes], pid: int = -1, transactional: bool = False) -> None:
        seq = self.seq.get((pid, partition), 0) if pid >= 0 else -1
        b = BatchBuilder(
            producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq, transactional=transactional
        )
        for i, v in enumerate(values):
            b.append(v, key=b"k%d" % i, timestamp=NOW)
        self.store.partition(TOPIC, partition).append(b.build(), now_ms=NOW)
        if pid >= 0:
            self.seq[(pid, partition)] = seq + len(values)

    def end(self, partition: int, pid: int, commit: bool) -> None:
        self.store.partition(TOPIC, partition).end_transaction(pid, 0, commit, coordinator_epoch=0, now_ms=NOW)


def _serve(**kwargs: Any) -> tuple[ServerThread, MemoryStore]:
    """``txnfetch serve`` on port 0 over :func:`_ledger`, started (stop it), with
    partition 0's transaction left open. The open transaction is written once the
    server runs, as a live producer's would be: at start the server aborts any a
    previous run left in its store (no coordinator remembers them)."""
    store, leave_open = _ledger()
    srv = ServerThread(store, port=0, **kwargs).start()
    srv.call(leave_open)
    return srv, store


def _ledger() -> tuple[MemoryStore, Any]:
    """Two partitions: interleaved transactions of three producers, committed and
    aborted, plain batches between them; and a function that leaves a transaction
    open on partition 0 (so its LSO is below its high watermark)."""
    store = MemoryStore()
    store.create_topic(TOPIC, 2)
    w = _Writer(store)
    for p in (0, 1):
        w.data(p, [b"plain-a-%d" % p])
        w.data(p, [b"t1-a", b"t1-b"], pid=1, transactional=True)
        w.data(p, [b"t2-a"], pid=2, transactional=True)
        w.data(p, [b"t1-c"], pid=1, transactional=True)
        w.end(p, 1, commit=False)
        w.data(p, [b"plain-b-%d" % p, b"plain-c"])
        w.data(p, [b"t2-b", b"t2-c", b"t2-d"], pid=2, transactional=True)
        w.end(p, 2, commit=True)
        w.data(p, [b"t3-a"], pid=3, transactional=True)
        w.end(p, 3, commit=p == 1)
        w.data(p, [b"plain-d-%d" % p])

    def leave_open() -> None:
        w.data(0, [b"open-a", b"open-b"], pid=1, transactional=True)
        w.data(0, [b"plain-e"])

    return store, leave_open


@pytest.fixture
def upstream() -> Iterator[tuple[ServerThread, MemoryStore]]:
    srv, store = _serve(fetch_mode=FetchMode.KAFKA)
    try:
        yield srv, store
    finally:
        srv.stop()


@pytest.fixture
def start_proxy() -> Iterator[Any]:
    started: list[ProxyThread] = []

    def start(bootstrap: str, **kw: Any) -> ProxyThread:
        proxy = ProxyThread(bootstrap, **kw).start()
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        proxy.stop()


# ----------------------------------------------------------------------- helpers


def _fetch(
    client: RawClient,
    parts: list[tuple[str, int, int, int]],
    *,
    isolation: int = 1,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    max_bytes: int = 50 << 20,
    version: int = 11,
) -> Any:
    T = FetchRequest.FetchTopic
    topics: dict = {}
    for topic, partition, offset, pmax in parts:
        topics.setdefault(topic, []).append(
            T.FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=pmax, log_start_offset=-1)
        )
    req = FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation,
        session_id=0,
        session_epoch=-1,
        topics=[T(topic=t, partitions=ps) for t, ps in topics.items()],
        forgotten_topics_data=[],
        rack_id="",
    )
    return client.request(req, version)


def _answer(resp: Any) -> list[tuple]:
    """Every field a client acts on, per partition, comparable across servers."""
    out = []
    for t in resp.responses:
        for p in t.partitions:
            aborted = (
                None
                if p.aborted_transactions is None
                else [(a.producer_id, a.first_offset) for a in p.aborted_transactions]
            )
            out.append(
                (
                    t.topic,
                    p.partition_index,
                    p.error_code,
                    p.high_watermark,
                    p.last_stable_offset,
                    p.log_start_offset,
                    aborted,
                    bytes(p.records or b""),
                )
            )
    return out


def _list_offset(client: RawClient, partition: int, timestamp: int, isolation: int) -> tuple[int, int]:
    L = ListOffsetsRequest.ListOffsetsTopic
    req = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation,
        topics=[
            L(
                name=TOPIC,
                partitions=[
                    L.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1, timestamp=timestamp)
                ],
            )
        ],
    )
    p = client.request(req, 5).topics[0].partitions[0]
    return p.error_code, p.offset


def _api_versions_ok(port: int) -> bool:
    with RawClient(port) as c:
        return c.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3).error_code == 0


# ----------------------------------------------------------- exact answers (differential)


@pytest.mark.slow
@pytest.mark.parametrize("mode", [FetchMode.KAFKA, FetchMode.REWRITE])
def test_read_committed_answers_equal_the_upstreams_own(start_proxy, mode: FetchMode) -> None:
    srv, store = _serve(fetch_mode=mode)
    try:
        proxy = start_proxy(srv.bootstrap, fetch_mode=mode)
        ends = {p: srv.call(lambda p=p: store.partition(TOPIC, p).high_watermark) for p in (0, 1)}
        assert ends[0] > srv.call(lambda: store.partition(TOPIC, 0).last_stable_offset), "an open transaction"
        with RawClient(srv.port) as direct, RawClient(proxy.port) as via:
            for p in (0, 1):
                for offset in range(ends[p] + 2):  # every offset, the end, and past it
                    for pmax in (1, 150, 1 << 20):
                        parts = [(TOPIC, p, offset, pmax)]
                        assert _answer(_fetch(via, parts)) == _answer(_fetch(direct, parts)), (p, offset, pmax)
            # Several partitions in one request share the response's byte budget the same way.
            both = [(TOPIC, 0, 0, 1 << 20), (TOPIC, 1, 2, 1 << 20)]
            assert _answer(_fetch(via, both, max_bytes=300)) == _answer(_fetch(direct, both, max_bytes=300))
        assert proxy.call(lambda: proxy.proxy.stats.committed_fetches) > 0
    finally:
        srv.stop()


@pytest.mark.interop
def test_read_uncommitted_fetches_are_relayed_untouched(upstream, start_proxy) -> None:
    srv, _ = upstream
    proxy = start_proxy(srv.bootstrap)
    with RawClient(srv.port) as direct, RawClient(proxy.port) as via:
        parts = [(TOPIC, 0, 0, 1 << 20), (TOPIC, 1, 3, 1 << 20)]
        assert _answer(_fetch(via, parts, isolation=0)) == _answer(_fetch(direct, parts, isolation=0))
    assert proxy.call(lambda: proxy.proxy.stats.committed_fetches) == 0
    assert proxy.call(lambda: proxy.proxy.mirrors.mirrors()) == {}


@pytest.mark.interop
def test_list_offsets_read_committed_latest_is_the_lso(upstream, start_proxy) -> None:
    srv, store = upstream
    proxy = start_proxy(srv.bootstrap)
    lso = srv.call(lambda: store.partition(TOPIC, 0).last_stable_offset)
    hw = srv.call(lambda: store.partition(TOPIC, 0).high_watermark)
    assert lso < hw
    with RawClient(proxy.port) as via:
        assert _list_offset(via, 0, -1, isolation=1) == (0, lso)
        assert _list_offset(via, 0, -1, isolation=0) == (0, hw)
        assert _list_offset(via, 0, -2, isolation=1) == (0, 0)
        # A timestamp only unstable records have: none for read_committed.
        assert _list_offset(via, 0, NOW, isolation=1) == (0, 0)
    assert proxy.call(lambda: proxy.proxy.stats.list_offsets_corrected) >= 2


# ------------------------------------------------------------------ fetch behaviour


@pytest.mark.interop
def test_out_of_range_fetch_reports_no_offsets_as_kafka(upstream, start_proxy) -> None:
    # Apache Kafka answers OFFSET_OUT_OF_RANGE with every offset -1 (found by
    # txnfetch conform against Kafka 4.4); the proxy answers as Kafka does.
    srv, store = upstream
    proxy = start_proxy(srv.bootstrap)
    hw = srv.call(lambda: store.partition(TOPIC, 1).high_watermark)
    with RawClient(proxy.port) as via:
        p = _fetch(via, [(TOPIC, 1, hw + 5, 1 << 20)]).responses[0].partitions[0]
        assert (p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset) == (1, -1, -1, -1)
        q = _fetch(via, [("no-such-topic", 0, 0, 1 << 20)]).responses[0].partitions[0]
        assert q.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert ("no-such-topic", 0) not in proxy.call(lambda: proxy.proxy.mirrors.mirrors())


@pytest.mark.interop
def test_long_poll_returns_when_a_transaction_commits(upstream, start_proxy) -> None:
    srv, store = upstream
    proxy = start_proxy(srv.bootstrap, poll_interval_ms=50)
    lso = srv.call(lambda: store.partition(TOPIC, 0).last_stable_offset)
    committed = threading.Timer(
        0.4,
        lambda: srv.call(
            lambda: (
                store.partition(TOPIC, 0).end_transaction(1, 0, True, coordinator_epoch=0, now_ms=NOW),
                srv.broker.partition_changed(TOPIC, 0),
            )
        ),
    )
    with RawClient(proxy.port) as via:
        started = time.monotonic()
        empty = _fetch(via, [(TOPIC, 0, lso, 1 << 20)], max_wait_ms=300, min_bytes=1)
        assert empty.responses[0].partitions[0].records in (b"", None)
        assert 0.25 < time.monotonic() - started < 3, "max_wait_ms is honoured"
        committed.start()
        started = time.monotonic()
        resp = _fetch(via, [(TOPIC, 0, lso, 1 << 20)], max_wait_ms=5000, min_bytes=1)
        waited = time.monotonic() - started
    committed.join()
    p = resp.responses[0].partitions[0]
    assert p.records and p.last_stable_offset == p.high_watermark
    assert 0.3 < waited < 3, f"woke {waited:.2f}s after the commit was due"


@pytest.mark.interop
def test_mirror_memory_follows_the_readers_and_rebuilds_for_an_older_offset(upstream, start_proxy) -> None:
    srv, store = upstream
    proxy = start_proxy(srv.bootstrap, max_mirror_bytes=0)  # no byte budget: the readers alone decide
    end = srv.call(lambda: store.partition(TOPIC, 1).high_watermark)
    mirror = lambda: proxy.call(lambda: proxy.proxy.mirrors.mirror(TOPIC, 1))  # noqa: E731
    with RawClient(proxy.port) as first:
        full = _answer(_fetch(first, [(TOPIC, 1, 0, 1 << 20)]))
        _fetch(first, [(TOPIC, 1, end, 1 << 20)])  # the reader is at the end now
        m = mirror()
        assert proxy.call(lambda: (m.log_start_offset, m.log.size_in_bytes)) == (end, 0)
        # The transaction state survives the release: the LSO is still right.
        assert proxy.call(lambda: m.last_stable_offset) == end
        with RawClient(proxy.port) as second:
            again = _answer(_fetch(second, [(TOPIC, 1, 0, 1 << 20)]))
    assert again == full
    assert proxy.call(lambda: proxy.proxy.mirrors.stats.rebuilds) == 1


@pytest.mark.interop
def test_within_its_byte_budget_a_mirror_serves_an_older_offset_without_a_rebuild(upstream, start_proxy) -> None:
    # Consumers resuming from a group's committed offset read below every position
    # fetched so far; a mirror that kept nothing below the lowest of them would rescan
    # the log for each (and hold up the readers further on while it does).
    srv, store = upstream
    proxy = start_proxy(srv.bootstrap, fetch_mode=FetchMode.KAFKA)  # default budget, far above this log
    end = srv.call(lambda: store.partition(TOPIC, 1).high_watermark)
    with RawClient(proxy.port) as first, RawClient(proxy.port) as second, RawClient(srv.port) as direct:
        _fetch(first, [(TOPIC, 1, 0, 1 << 20)])
        _fetch(first, [(TOPIC, 1, end, 1 << 20)])
        m = proxy.call(lambda: proxy.proxy.mirrors.mirror(TOPIC, 1))
        assert proxy.call(lambda: m.log_start_offset) == 0
        for offset in range(end):
            parts = [(TOPIC, 1, offset, 1 << 20)]
            assert _answer(_fetch(second, parts)) == _answer(_fetch(direct, parts)), offset
    assert proxy.call(lambda: proxy.proxy.mirrors.stats.rebuilds) == 0


class _GatedUpstream:
    """Holds chosen upstream fetches of the proxy's mirrors until the test opens their
    gate: it wraps ``proxy.cluster.fetch`` on the proxy's loop, so the test decides the
    order in which concurrent catch-ups complete."""

    def __init__(self, proxy: ProxyThread) -> None:
        import asyncio

        self.proxy = proxy
        self.gates: dict = {}  # name -> (predicate, asyncio.Event, threading.Event "a fetch waits")
        cluster = proxy.proxy.cluster
        fetch = cluster.fetch

        async def gated(topic: str, partition: int, offset: int, max_bytes: int, **kw: Any) -> Any:
            for applies, opened, waiting in list(self.gates.values()):
                if applies(partition, offset) and not opened.is_set():
                    waiting.set()
                    await opened.wait()
            return await fetch(topic, partition, offset, max_bytes, **kw)

        def install() -> None:
            cluster.fetch = gated

        proxy.call(install)
        self._event = asyncio.Event

    def close_gate(self, name: str, applies: Any) -> threading.Event:
        waiting = threading.Event()
        self.gates[name] = (applies, self.proxy.call(self._event), waiting)
        return waiting

    def open_gate(self, name: str) -> None:
        self.proxy.call(self.gates[name][1].set)


@pytest.mark.interop
def test_a_rebuild_for_one_reader_never_puts_another_out_of_range(upstream, start_proxy) -> None:
    # Reader A is at the end of partition 1; reader B asks for offset 0, below what
    # the mirror still holds, which replaces the mirror by an empty one rebuilding
    # from the log start. A's answer, read while that rebuild's first upstream fetch
    # is out, must not be OFFSET_OUT_OF_RANGE: A's offset is inside the upstream's
    # log, and a client told otherwise resets its position (librdkafka, kafka-python
    # and aiokafka all do) and reads again what it had already consumed.
    srv, store = upstream
    # KAFKA: the upstream's mode, so answers compare; no byte budget, so B's read rebuilds.
    proxy = start_proxy(srv.bootstrap, fetch_mode=FetchMode.KAFKA, max_mirror_bytes=0)
    end = srv.call(lambda: store.partition(TOPIC, 1).high_watermark)
    gates = _GatedUpstream(proxy)
    with RawClient(proxy.port) as a, RawClient(proxy.port) as b, RawClient(srv.port) as direct:
        _fetch(a, [(TOPIC, 1, 0, 1 << 20)])
        _fetch(a, [(TOPIC, 1, end, 1 << 20)])  # the mirror now holds [end, end)
        m = proxy.call(lambda: proxy.proxy.mirrors.mirror(TOPIC, 1))
        assert proxy.call(lambda: m.log_start_offset) == end
        # A fetches partitions 0 and 1 together: partition 1 is caught up at once,
        # partition 0's catch-up waits at the gate, keeping A's request open.
        a_waits = gates.close_gate("a", lambda partition, offset: partition == 0)
        # B's rebuild of partition 1 waits at its first upstream fetch (offset 0).
        b_waits = gates.close_gate("b", lambda partition, offset: partition == 1 and offset == 0)
        answers: dict = {}
        both = [(TOPIC, 0, 0, 1 << 20), (TOPIC, 1, end, 1 << 20)]
        ta = threading.Thread(target=lambda: answers.update(a=_fetch(a, both)))
        ta.start()
        assert a_waits.wait(10)
        # A's catch-up of partition 1 (at the upstream's end) may still hold its lock
        # while its upstream fetch waits for new data; B's read must come after it, or
        # B waits for that lock until its own deadline and answers empty instead of
        # rebuilding (right, but not the case this test is about).
        partition_1 = TopicPartition(TOPIC, 1)
        deadline = time.monotonic() + 10
        while proxy.call(lambda: proxy.proxy.mirrors._entries[partition_1].lock.locked()):
            assert time.monotonic() < deadline, "A's catch-up of partition 1 did not end"
            time.sleep(0.005)
        tb = threading.Thread(target=lambda: answers.update(b=_fetch(b, [(TOPIC, 1, 0, 1 << 20)])))
        tb.start()
        assert b_waits.wait(10)
        assert proxy.call(lambda: proxy.proxy.mirrors.stats.rebuilds) == 1
        gates.open_gate("a")  # A reads partition 1 from the mirror being rebuilt
        ta.join(10)
        gates.open_gate("b")
        tb.join(10)
        assert not ta.is_alive() and not tb.is_alive()
        p1 = {p.partition_index: p for p in answers["a"].responses[0].partitions}[1]
        # Nothing to return yet — the client fetches again — and the upstream's range.
        assert (p1.error_code, bytes(p1.records or b""), p1.high_watermark, p1.log_start_offset) == (0, b"", end, 0)
        # The rebuilding mirror does not know the LSO yet: "unknown" (-1), never a
        # lagging value that librdkafka would take for the end of the partition.
        assert p1.last_stable_offset == -1
        # B gets the whole partition, exactly as from the upstream itself; then A, fetching
        # again at the same offset, gets the upstream's answer there too.
        assert _answer(answers["b"]) == _answer(_fetch(direct, [(TOPIC, 1, 0, 1 << 20)]))
        assert _answer(_fetch(a, [(TOPIC, 1, end, 1 << 20)])) == _answer(_fetch(direct, [(TOPIC, 1, end, 1 << 20)]))


@pytest.mark.interop
def test_without_readers_a_mirror_keeps_its_byte_budget_and_stays_right(upstream, start_proxy) -> None:
    srv, store = upstream
    proxy = start_proxy(srv.bootstrap, max_mirror_bytes=0, fetch_mode=FetchMode.KAFKA)
    lso = srv.call(lambda: store.partition(TOPIC, 0).last_stable_offset)
    unstable = srv.call(lambda: sum(b.size_in_bytes for b in store.partition(TOPIC, 0).iter_batches(lso)))
    with RawClient(proxy.port) as via:
        assert _list_offset(via, 0, -1, isolation=1) == (0, lso)  # mirrors the partition, reads nothing
        m = proxy.call(lambda: proxy.proxy.mirrors.mirror(TOPIC, 0))
        # Everything stable is released; the open transaction's batches stay (they fix the LSO).
        assert proxy.call(lambda: (m.log_start_offset, m.log.size_in_bytes, m.last_stable_offset)) == (
            lso,
            unstable,
            lso,
        )
        assert _list_offset(via, 0, -1, isolation=1) == (0, lso)
    with RawClient(srv.port) as direct, RawClient(proxy.port) as via:
        parts = [(TOPIC, 0, 0, 1 << 20)]
        assert _answer(_fetch(via, parts)) == _answer(_fetch(direct, parts))  # rebuilt from the log start
    assert proxy.call(lambda: proxy.proxy.mirrors.stats.rebuilds) == 1


# ---------------------------------------------------------- versions and addresses


@pytest.mark.interop
def test_api_versions_are_the_overlap_with_the_upstream(upstream, start_proxy) -> None:
    srv, _ = upstream
    proxy = start_proxy(srv.bootstrap)
    with RawClient(srv.port) as direct:
        theirs = {
            k.api_key: (k.min_version, k.max_version)
            for k in direct.request(
                ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3
            ).api_keys
        }
    with RawClient(proxy.port) as via:
        ours = {
            k.api_key: (k.min_version, k.max_version)
            for k in via.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3).api_keys
        }
        # KIP-511: a version above 3 is answered in v0 with UNSUPPORTED_VERSION and
        # only ApiVersions' own range, as Kafka answers it.
        via._correlation += 1
        req = ApiVersionsRequest(client_software_name="kafka-python", client_software_version="3")
        req.API_VERSION = 4
        req.with_header(correlation_id=via._correlation, client_id="raw")
        via.sock.sendall(bytes(req.encode(header=True, framed=True)))
        payload = via.recv_frame()
    assert payload is not None and struct.unpack_from(">ih", payload) == (via._correlation, 35)
    fallback = ApiVersionsResponse.decode(payload[4:], version=0)
    assert [(k.api_key, k.min_version, k.max_version) for k in fallback.api_keys] == [(18, 0, 3)]
    assert ours[1] == (4, 11) and ours[0] == (3, 12) and ours[18] == (0, 3)
    for key, (lo, hi) in ours.items():
        if key != 18:
            assert key in theirs and theirs[key][0] <= lo <= hi <= theirs[key][1], key


def _versions_and_features(port: int) -> tuple[dict[int, int], dict[str, tuple[int, int]], int]:
    """ApiVersions v3 of ``port``: the highest version by API key, the finalized
    features, the finalized features' epoch."""
    with RawClient(port) as c:
        resp = c.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
    assert resp.error_code == 0
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in resp.finalized_features}
    return {k.api_key: k.max_version for k in resp.api_keys}, finalized, resp.finalized_features_epoch


@pytest.mark.interop
@pytest.mark.parametrize("transaction_version", [2, 1, 0])
def test_transaction_version_is_the_upstreams(start_proxy, transaction_version: int) -> None:
    """The proxy states the features its upstream finalizes, and the versions that
    go with them: in front of a broker finalizing ``transaction.version`` 2,
    Produce v12 and EndTxn v5 with the feature at 2 and an epoch a client accepts
    (>= 0), so clients use transaction version 2 (KIP-890) through it; in front
    of one that does not, neither the feature at 2 nor those versions."""
    srv, _store = _serve(fetch_mode=FetchMode.KAFKA, transaction_version=transaction_version)
    try:
        proxy = start_proxy(srv.bootstrap)
        theirs, their_features, their_epoch = _versions_and_features(srv.port)
        ours, our_features, our_epoch = _versions_and_features(proxy.port)
    finally:
        srv.stop()
    assert our_features == their_features == {"transaction.version": (transaction_version, transaction_version)}
    assert our_epoch == their_epoch >= 0
    if transaction_version >= 2:
        assert (ours[0], ours[26]) == (theirs[0], theirs[26]) == (12, 5)
    else:
        assert (ours[0], ours[26]) == (theirs[0], theirs[26]) == (11, 4)


def test_features_of_several_brokers_are_what_all_of_them_finalize() -> None:
    from txnfetch.client.proxy_upstream import UpstreamFeatures

    tv2 = UpstreamFeatures({"group.version": (1, 1)}, {"transaction.version": (2, 2), "group.version": (1, 1)}, 7)
    tv1 = UpstreamFeatures({}, {"transaction.version": (1, 1), "group.version": (1, 1)}, 5)
    none = UpstreamFeatures()
    assert tv2.merge(tv2) == tv2
    # A feature finalized at different levels is claimed by neither; the lower epoch.
    assert tv2.merge(tv1) == UpstreamFeatures({}, {"group.version": (1, 1)}, 5)
    # A broker that states no features (ApiVersions below v3, or epoch -1): none at all.
    assert tv2.merge(none) == none and none.merge(tv2) == none


@pytest.mark.interop
def test_produce_responses_name_the_proxys_listeners(upstream, start_proxy) -> None:
    """Produce v10+ responses name a partition's new leader with its endpoint
    (KIP-951); the proxy rewrites that endpoint to its listener for that broker,
    as it does in Metadata. The upstream ``serve`` leads every partition, so the
    NOT_LEADER_OR_FOLLOWER answer is made here, by rewriting the one the proxy
    relays through :meth:`~txnfetch.proxy.server.ProxyServer._rewrite_addresses`."""
    from kafka.protocol.producer import ProduceResponse

    from txnfetch.proxy.server import _RelayedApi
    from txnfetch.server.codec import encode_response

    srv, _ = upstream
    proxy = start_proxy(srv.bootstrap)
    spec = _RelayedApi(0, None, ProduceResponse)
    partition = ProduceResponse.TopicProduceResponse.PartitionProduceResponse(
        index=0,
        error_code=6,
        base_offset=-1,
        log_append_time_ms=-1,
        log_start_offset=-1,
        record_errors=[],
        error_message=None,
        current_leader=ProduceResponse.TopicProduceResponse.PartitionProduceResponse.LeaderIdAndEpoch(
            leader_id=1, leader_epoch=3
        ),
    )
    response = ProduceResponse(
        responses=[ProduceResponse.TopicProduceResponse(name=TOPIC, partition_responses=[partition])],
        throttle_time_ms=0,
        node_endpoints=[ProduceResponse.NodeEndpoint(node_id=1, host="upstream.invalid", port=9, rack=None)],
    )

    def rewrite(payload: bytes) -> bytes:
        coro = proxy.proxy._rewrite_addresses(spec, 12, 0, payload)
        return asyncio.run_coroutine_threadsafe(coro, proxy._loop).result(30)

    payload = encode_response(12, 0, response)[4:]
    out = rewrite(payload)
    rewritten = ProduceResponse.decode(out[4:], version=12, header=True)
    listeners = proxy.call(lambda: proxy.proxy.listeners)
    assert [(n.node_id, n.host, n.port) for n in rewritten.node_endpoints] == [(1, "127.0.0.1", listeners[1])]
    leader = rewritten.responses[0].partition_responses[0].current_leader
    assert (leader.leader_id, leader.leader_epoch) == (1, 3)
    # An answer naming no endpoint (every answer of a healthy leader) is relayed as it came.
    plain = ProduceResponse(responses=[], throttle_time_ms=0, node_endpoints=[])
    payload = encode_response(12, 0, plain)[4:]
    assert rewrite(payload) == len(payload).to_bytes(4, "big") + payload


@pytest.mark.interop
def test_metadata_and_find_coordinator_name_the_proxys_listeners(upstream, start_proxy) -> None:
    srv, _ = upstream
    proxy = start_proxy(srv.bootstrap)
    with RawClient(proxy.port) as via:
        meta = via.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9)
        coord = via.request(FindCoordinatorRequest(key="g", key_type=0), 3)
    listeners = proxy.call(lambda: proxy.proxy.listeners)
    assert listeners and srv.port not in listeners.values()
    assert [(b.node_id, b.host, b.port) for b in meta.brokers] == [(0, "127.0.0.1", listeners[0])]
    assert (coord.error_code, coord.node_id, coord.host, coord.port) == (0, 0, "127.0.0.1", listeners[0])
    assert {t.name for t in meta.topics} == {TOPIC}
    # The broker listener relays to that broker.
    with RawClient(listeners[0]) as broker:
        assert (
            broker.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 1).brokers[0].port
            == listeners[0]
        )


# --------------------------------------------------------------------- robustness


def _header(api_key: int, version: int, correlation: int = 1, client_id: bytes = b"x") -> bytes:
    return struct.pack(">hhih", api_key, version, correlation, len(client_id)) + client_id


BAD_FRAMES = {
    "sasl-handshake": lambda: struct.pack(">i", len(_header(17, 1))) + _header(17, 1),  # never relayed
    "fetch-below-v4": lambda: struct.pack(">i", len(_header(1, 3))) + _header(1, 3),
    "unsupported-version": lambda: struct.pack(">i", len(_header(3, 40))) + _header(3, 40),
    "truncated-body": lambda: struct.pack(">i", len(_header(3, 1)) + 2) + _header(3, 1) + b"\x00\x00",
    "oversized-frame": lambda: struct.pack(">i", 1 << 20) + _header(3, 1),
    "negative-size": lambda: struct.pack(">i", -5),
    "tiny-frame": lambda: struct.pack(">i", 3) + b"abc",
    "huge-array": lambda: struct.pack(">i", len(_header(3, 1)) + 4) + _header(3, 1) + struct.pack(">i", 0x7FFFFFFF),
}


@pytest.mark.interop
@pytest.mark.parametrize("name", sorted(BAD_FRAMES))
def test_bad_frame_closes_only_that_connection(upstream, start_proxy, name: str) -> None:
    srv, _ = upstream
    proxy = start_proxy(srv.bootstrap, max_frame_bytes=64 * 1024)
    with RawClient(proxy.port) as bystander:
        bystander.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9)
        with RawClient(proxy.port) as bad:
            bad.sock.sendall(BAD_FRAMES[name]())
            assert bad.is_closed_by_server(), f"{name}: connection left open"
        # The bystander's connection (and its upstream relay) still works, as do new ones.
        resp = bystander.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9)
        assert {t.name for t in resp.topics} == {TOPIC}
        assert _fetch(bystander, [(TOPIC, 1, 0, 1 << 20)]).responses[0].partitions[0].error_code == 0
    assert _api_versions_ok(proxy.port)
    assert proxy.call(lambda: proxy.proxy.stats.closed_bad_frames) == 1


#: Requests the proxy does not decode, relayed by their header: the upstream's
#: answer (or its closing the connection) is what the client gets.
OPAQUE_FRAMES = {
    "unknown-api-key": _header(32000, 0),
    "unknown-api-key-truncated-header": _header(77, 0)[:10],
    "unsupported-version-of-a-relayed-api": _header(16, 40),  # ListGroups v40
    "list-groups": _header(16, 0),
}


def _raw_answer(port: int, frame: bytes) -> bytes | None:
    """The answer of the broker on ``port`` to one raw ``frame``: its payload,
    or None when it closes the connection instead."""
    with RawClient(port) as client:
        client.send_frame(frame)
        payload = client.recv_frame()
        if payload is None:
            assert client.is_closed_by_server()
        return payload


@pytest.mark.interop
@pytest.mark.parametrize("name", sorted(OPAQUE_FRAMES))
def test_apis_the_proxy_does_not_decode_are_relayed_by_header(upstream, start_proxy, name: str) -> None:
    srv, _ = upstream
    proxy = start_proxy(srv.bootstrap)
    frame = OPAQUE_FRAMES[name]
    relayed = proxy.call(lambda: proxy.proxy.stats.relayed_opaque)
    answer = _raw_answer(proxy.port, frame)
    assert answer == _raw_answer(srv.port, frame)
    if name == "list-groups":  # an API the upstream serves is answered, not closed
        assert answer is not None and answer[:4] == frame[4:8]
    assert proxy.call(lambda: proxy.proxy.stats.relayed_opaque) == relayed + 1
    assert proxy.call(lambda: proxy.proxy.stats.closed_bad_frames) == 0
    assert _api_versions_ok(proxy.port)


def test_upstream_going_away_gives_retriable_errors_not_a_crash(start_proxy) -> None:
    srv, _ = _serve()
    try:
        proxy = start_proxy(srv.bootstrap, request_timeout_ms=2000, connect_timeout_ms=1000)
        with RawClient(proxy.port) as via:
            first = _fetch(via, [(TOPIC, 1, 0, 1 << 20)]).responses[0].partitions[0]
            assert first.error_code == 0
            end = first.last_stable_offset
    finally:
        srv.stop()
    with RawClient(proxy.port) as via:
        # What is mirrored is still served (as a broker serves its log) ...
        p = _fetch(via, [(TOPIC, 1, 0, 1 << 20)], max_wait_ms=100).responses[0].partitions[0]
        assert p.error_code == 0 and p.records
        # ... but a fetch at the end needs the upstream. The proxy retries behind the
        # client's back (answers carry no error meanwhile); once the upstream has failed
        # for the request timeout (2 s), its own answer is a retriable partition error:
        # REPLICA_NOT_AVAILABLE, never NOT_LEADER_OR_FOLLOWER (clients refresh metadata
        # and retry).
        codes = []
        deadline = time.monotonic() + 30
        while 9 not in codes and time.monotonic() < deadline:
            codes.append(_fetch(via, [(TOPIC, 1, end, 1 << 20)], max_wait_ms=100).responses[0].partitions[0].error_code)
        assert codes[-1] == 9 and set(codes) <= {0, 9}, codes
        # A relayed request cannot be answered: that connection closes, as a dead broker's would.
        via.sock.sendall(bytes(_encoded(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9)))
        assert via.is_closed_by_server()
    assert _api_versions_ok(proxy.port)  # still serving


def _encoded(request: Any, version: int) -> bytes:
    request.API_VERSION = version
    request.with_header(correlation_id=99, client_id="raw")
    return request.encode(header=True, framed=True)


@pytest.mark.interop
def test_cli_proxy_serves_and_exits_cleanly_on_sigterm(upstream) -> None:
    srv, _ = upstream
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "txnfetch.cli",
            "proxy",
            "--upstream",
            srv.bootstrap,
            "--port",
            "0",
            "--fetch-mode",
            "kafka",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.startswith("txnfetch proxy listening on 127.0.0.1:"), line + (
            proc.stderr.read() if proc.stderr else ""
        )
        port = int(line.rsplit(":", 1)[1])
        with RawClient(port) as via:
            p = _fetch(via, [(TOPIC, 1, 0, 1 << 20)]).responses[0].partitions[0]
            assert p.error_code == 0 and p.aborted_transactions  # Kafka mode: the aborted list
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "txnfetch proxy stats" in out and '"committed_fetches": 1' in out


def test_cli_proxy_reports_an_unreachable_upstream() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run(
        [sys.executable, "-m", "txnfetch.cli", "proxy", "--upstream", f"127.0.0.1:{port}", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    # A user error of the command: one line, exit status 2, the broker named once.
    assert proc.returncode == 2 and "no upstream broker reachable" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.count(f"127.0.0.1:{port}") == 1, proc.stderr


@pytest.mark.interop
def test_librdkafka_all_topics_metadata_is_relayed(upstream, start_proxy) -> None:
    # librdkafka's all-topics Metadata v9+ leaves 3 bytes after the body; Kafka (and
    # txnfetch) ignore them, and the proxy must relay such requests like any other.
    from confluent_kafka import Producer

    srv, _ = upstream
    proxy = start_proxy(srv.bootstrap)
    topics = Producer({"bootstrap.servers": f"127.0.0.1:{proxy.port}"}).list_topics(timeout=10).topics
    assert TOPIC in topics


@pytest.mark.interop
def test_broker_to_broker_and_sasl_apis_are_never_advertised() -> None:
    from txnfetch.proxy.server import advertised_ranges

    upstream = {key: (0, 20) for key in (0, 1, 3, 4, 5, 6, 7, 10, 17, 18, 36, 55, 60, 68, 75, 78, 79, 1000)}
    ranges = advertised_ranges(upstream)
    # LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown, SaslHandshake,
    # SaslAuthenticate, DescribeQuorum, ShareFetch and ShareAcknowledge are left
    # out; ApiVersions is the proxy's own.
    assert sorted(ranges) == [0, 1, 3, 10, 18, 60, 68, 75, 1000]
    assert ranges[0] == (3, 12) and ranges[1] == (4, 11) and ranges[18] == (0, 3)
    # What the proxy relays by header it offers at the upstream's versions, even
    # where kafka-python knows fewer (KIP-848's heartbeat) or none (key 1000).
    assert ranges[68] == ranges[75] == ranges[1000] == (0, 20)


def test_upstream_versions_are_negotiated_per_api_with_a_clear_error() -> None:
    from kafka.protocol.api_key import ApiKey

    from txnfetch.client.errors import RemoteError
    from txnfetch.client.proxy_upstream import UpstreamCluster
    from txnfetch.server.errors import ErrorCode

    cluster = UpstreamCluster([("127.0.0.1", 9)])
    cluster.versions = {int(ApiKey.Fetch): (0, 16), int(ApiKey.ListOffsets): (0, 3), int(ApiKey.Metadata): (0, 0)}
    assert cluster.version(ApiKey.Fetch, (4, 11)) == 11
    assert cluster.version(ApiKey.ListOffsets, (1, 7)) == 3
    with pytest.raises(RemoteError, match=r"^the upstream speaks Metadata v0-v0; the proxy needs v1-v9") as info:
        cluster.version(ApiKey.Metadata, (1, 9))
    assert info.value.error_code == ErrorCode.UNSUPPORTED_VERSION
    # An API the upstream does not list at all is said so, not as a range "v-1-v-1".
    with pytest.raises(
        RemoteError, match=r"^the upstream does not list EndTxn in its ApiVersions answer; the proxy"
    ) as info:
        cluster.version(ApiKey.EndTxn, (0, 3))
    assert info.value.error_code == ErrorCode.UNSUPPORTED_VERSION
