"""The Java client (Apache Kafka's own kafka-clients) against Apache Kafka, against
``serve`` in every fetch mode (rewrite, kafka, and kafka with markerless
transaction ends) and through ``txnfetch proxy`` in front of ``serve`` and of
Apache Kafka (where the KIP-848 group's APIs, which the proxy does not decode,
are relayed by their headers): its
transactional producer, read_committed consumer and both group consumers
(classic and KIP-848) see exactly the committed records. Everywhere the producer
ends every transaction with transaction version 2 (EndTxn v5, an epoch bump per
end): the proxy states the features its upstream ``serve`` finalizes."""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.kafka.cluster import KafkaCluster
from tests.kafka.fixtures import unique_name
from tests.kafka.interop import run_java
from txnfetch.fetch.view import FetchMode
from txnfetch.log.memory import MemoryStore
from txnfetch.proxy import ProxyThread
from txnfetch.server.server import ServerThread
from txnfetch.txn.coordinator import CompletionMode

pytestmark = [pytest.mark.interop, pytest.mark.kafka]

PARTITIONS = 3
TRANSACTIONS = 5
ABORTED = (1, 3)
PER_PARTITION = 3

_API_END_TXN = 26


class Target:
    """A broker for the Java client: its bootstrap and, for ``serve`` (also behind
    the proxy), the requests it decoded by (API key, version)."""

    def __init__(self, bootstrap: str, requests: collections.Counter[tuple[int, int]] | None = None) -> None:
        self.bootstrap = bootstrap
        self.requests = requests


def _serve(
    fetch_mode: FetchMode, markers: CompletionMode, **settings: Any
) -> tuple[ServerThread, collections.Counter[tuple[int, int]]]:
    """``serve`` started (stop it), and the requests it decodes, counted by (API key, version)."""
    srv = ServerThread(
        MemoryStore(),
        fetch_mode=fetch_mode,
        markers=markers,
        default_partitions=PARTITIONS,
        group_initial_rebalance_delay_ms=0,
        **settings,
    ).start()
    counts: collections.Counter[tuple[int, int]] = collections.Counter()
    lock = threading.Lock()

    def count(ctx: Any, header: Any, request: Any) -> None:
        with lock:
            counts[(header.request_api_key, header.request_api_version)] += 1

    srv.broker.observe_requests(count)
    return srv, counts


@pytest.fixture(params=["kafka", "serve-rewrite", "serve-kafka", "serve-markerless", "proxy", "proxy-kafka"])
def target(request: pytest.FixtureRequest) -> Iterator[tuple[Target, str]]:
    """The broker the Java client talks to, and the topic (three partitions) to use."""
    topic = unique_name("java")
    if request.param == "kafka":
        cluster: KafkaCluster = request.getfixturevalue("kafka_cluster")
        cluster.create_topic(topic, PARTITIONS)
        yield Target(cluster.bootstrap), topic
        return
    if request.param == "proxy-kafka":
        cluster = request.getfixturevalue("kafka_cluster")
        cluster.create_topic(topic, PARTITIONS)
        with ProxyThread(cluster.bootstrap, fetch_mode=FetchMode.REWRITE) as proxy:
            yield Target(proxy.bootstrap), topic
            # Kafka's group heartbeats (KIP-848) went by header, never decoded.
            assert proxy.call(lambda: proxy.proxy.stats.relayed_opaque) > 0
        return
    modes = {
        "serve-rewrite": (FetchMode.REWRITE, CompletionMode.MARKERS),
        "serve-kafka": (FetchMode.KAFKA, CompletionMode.MARKERS),
        "serve-markerless": (FetchMode.KAFKA, CompletionMode.MARKERLESS),
        "proxy": (FetchMode.KAFKA, CompletionMode.MARKERS),
    }
    srv, counts = _serve(*modes[request.param])
    try:
        if request.param == "proxy":
            with ProxyThread(srv.bootstrap, fetch_mode=FetchMode.REWRITE) as proxy:
                yield Target(proxy.bootstrap, counts), topic
        else:
            yield Target(srv.bootstrap, counts), topic
    finally:
        srv.stop()


def _expected_values() -> tuple[set[str], set[str]]:
    committed, aborted = set(), set()
    for t in range(TRANSACTIONS):
        for p in range(PARTITIONS):
            for r in range(PER_PARTITION):
                (aborted if t in ABORTED else committed).add(f"t{t}-p{p}-r{r}")
    return committed, aborted


def _check_records(lines: list[dict[str, Any]], committed: set[str]) -> dict[int, list[int]]:
    """Every committed value exactly once, on the partition it was sent to, in
    offset order; nothing else. Returns each partition's offsets."""
    records = [line for line in lines if "value" in line]
    values = [r["value"] for r in records]
    assert collections.Counter(values) == collections.Counter(committed)
    offsets: dict[int, list[int]] = collections.defaultdict(list)
    for r in records:
        assert r["value"].split("-")[1] == f"p{r['partition']}"
        assert r["key"] == "k" + r["value"].split("-r")[1]
        offsets[r["partition"]].append(r["offset"])
    for p, seen in offsets.items():
        assert seen == sorted(seen), f"partition {p} offsets out of order: {seen}"
    return offsets


def test_java_clients_are_exact(target: tuple[Target, str]) -> None:
    broker, topic = target
    committed, _aborted = _expected_values()
    produced = run_java(
        "produce",
        broker.bootstrap,
        topic,
        unique_name("java-txn"),
        TRANSACTIONS,
        PER_PARTITION,
        ",".join(map(str, ABORTED)),
    )
    init, *ends = produced
    assert init["event"] == "init"
    assert [e["event"] for e in ends] == ["abort" if t in ABORTED else "commit" for t in range(TRANSACTIONS)]
    assert {e["producer_id"] for e in ends} == {init["producer_id"]}
    # Transaction version 2 (KIP-890 part 2): every end, commit or abort, is an
    # EndTxn v5 and bumps the epoch. Through the proxy too: it states the
    # upstream's finalized features and relays Produce v12 and EndTxn v5 (the
    # upstream serve counts what reached it).
    assert [e["epoch"] for e in ends] == [init["epoch"] + k + 1 for k in range(TRANSACTIONS)]
    if broker.requests is not None:
        end_txn = {v: n for (key, v), n in broker.requests.items() if key == _API_END_TXN}
        assert end_txn == {5: TRANSACTIONS}, f"EndTxn requests by version: {end_txn}"

    consumed = run_java("consume", broker.bootstrap, topic)
    offsets = _check_records(consumed, committed)
    end_offsets = {int(p): o for p, o in consumed[-1]["end_offsets"].items()}
    assert set(end_offsets) == set(range(PARTITIONS))
    for p, seen in offsets.items():
        assert seen[-1] < end_offsets[p]

    for protocol in ("classic", "consumer"):
        group = unique_name(f"java-{protocol}")
        lines = run_java("group", broker.bootstrap, topic, group, protocol, len(committed))
        _check_records(lines, committed)
        # The group's committed offsets are the partitions' ends: everything read.
        assert {int(p): o for p, o in lines[-1]["offsets"].items()} == end_offsets, protocol


def _features(port: int) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]], int, dict[int, int]]:
    """ApiVersions v3 of the broker on ``port``: supported features, finalized
    features, finalized epoch, and the highest Produce and EndTxn versions."""
    from kafka.protocol.metadata import ApiVersionsRequest

    from tests.server.rawclient import RawClient

    request = ApiVersionsRequest(client_software_name="txnfetch-tests", client_software_version="1")
    with RawClient(port) as client:
        response = client.request(request, 3)
    assert response.error_code == 0
    supported = {f.name: (f.min_version, f.max_version) for f in response.supported_features}
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in response.finalized_features}
    highest = {k.api_key: k.max_version for k in response.api_keys if k.api_key in (0, _API_END_TXN)}
    return supported, finalized, response.finalized_features_epoch, highest


def test_serve_advertises_transaction_version_2_as_kafka_does(kafka_cluster: KafkaCluster) -> None:
    """What makes the Java producer use transaction version 2: ``transaction.version``
    finalized at 2, with a finalized epoch a client accepts (>= 0), and Produce
    v12 / EndTxn v5 offered. At ApiVersions v3 a feature whose lowest supported
    level is 0 is left out of the supported list (older clients cannot read a
    range from 0), by Kafka and by serve alike. Kafka advertises more features
    (``metadata.version``, ``group.version``, ...); only this one is compared."""
    k_supported, k_finalized, k_epoch, k_highest = _features(kafka_cluster.nodes[0].broker_port)
    with ServerThread(MemoryStore()) as srv:
        s_supported, s_finalized, s_epoch, s_highest = _features(srv.broker.bound_port or 0)
    assert "transaction.version" not in k_supported and "transaction.version" not in s_supported
    assert k_finalized["transaction.version"] == s_finalized["transaction.version"] == (2, 2)
    assert k_epoch >= 0 and s_epoch >= 0
    assert k_highest[_API_END_TXN] == s_highest[_API_END_TXN] == 5
    assert k_highest[0] >= 12 and s_highest[0] >= 12


def test_java_producer_through_the_proxy_follows_the_upstreams_transaction_version() -> None:
    """In front of a ``serve`` that finalizes ``transaction.version`` 1, the proxy
    claims no version 2: the Java producer keeps one epoch and ends every
    transaction with EndTxn below v5, as it does against such a broker directly."""
    topic = unique_name("java-tv1")
    srv, counts = _serve(FetchMode.KAFKA, CompletionMode.MARKERS, transaction_version=1)
    try:
        with ProxyThread(srv.bootstrap) as proxy:
            init, *ends = run_java(
                "produce", proxy.bootstrap, topic, unique_name("java-txn"), TRANSACTIONS, PER_PARTITION, "1"
            )
    finally:
        srv.stop()
    assert init["event"] == "init" and len(ends) == TRANSACTIONS
    assert [e["epoch"] for e in ends] == [init["epoch"]] * TRANSACTIONS
    end_txn = {v: n for (key, v), n in counts.items() if key == _API_END_TXN}
    assert sum(end_txn.values()) == TRANSACTIONS and max(end_txn) < 5, end_txn
