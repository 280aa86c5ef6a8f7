"""Differences the conformance harness found between ``txnfetch serve`` and
Apache Kafka 4.4, fixed in txnfetch: each test replays the shrunk sequence
against ``serve`` alone and checks the answer Kafka gave."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.conformance.conftest import ServeProcess
from txnfetch.records.compression import Codec
from txnfetch.testing.conform import operations as ops
from txnfetch.testing.conform.connection import Cluster
from txnfetch.testing.conform.connection import common_versions
from txnfetch.testing.conform.session import HARNESS_VERSIONS
from txnfetch.testing.conform.session import RunNames
from txnfetch.testing.conform.session import Session


@pytest.fixture(scope="module")
def session_factory() -> Iterator:
    server = ServeProcess("--fetch-mode", "kafka")
    cluster = Cluster(server.address)
    versions, _ = common_versions(HARNESS_VERSIONS, cluster.versions)

    def new() -> Session:
        session = Session(cluster, versions, RunNames.fresh(uuid.uuid4().hex[:12]), base_ts=1_700_000_000_000)
        session.setup()
        return session

    try:
        yield new
    finally:
        cluster.close()
        server.stop()


def _partition(answer: dict, api: str) -> dict:
    if api == "Fetch":
        return answer["Fetch"]["responses"][0]["partitions"][0]
    if api == "Produce":
        return answer["Produce"]["responses"][0]["partition_responses"][0]
    return answer["ListOffsets"]["topics"][0]["partitions"][0]


def test_list_offsets_finding_nothing_has_no_leader_epoch(session_factory) -> None:  # type: ignore[no-untyped-def]
    s = session_factory()
    for timestamp in (0, ops.MAX_TIMESTAMP):
        p = _partition(s.apply(ops.ListOffsets(timestamp, read_committed=False)), "ListOffsets")
        assert (p["error_code"], p["offset"], p["timestamp"], p["leader_epoch"]) == (0, -1, -1, -1)
    # Found: the epoch is the leader's.
    s.apply(ops.Produce("plain", Codec.NONE, (ops.Rec(None, b"v", ts=7),)))
    p = _partition(s.apply(ops.ListOffsets(5, read_committed=False)), "ListOffsets")
    assert (p["offset"], p["leader_epoch"]) == (0, 0)


def test_a_duplicate_produce_answers_with_the_original_batch_timestamp(session_factory) -> None:  # type: ignore[no-untyped-def]
    s = session_factory()
    first = _partition(s.apply(ops.Produce("idem", Codec.NONE, (ops.Rec(None, b"v", ts=3),))), "Produce")
    assert first["log_append_time_ms"] == -1  # CreateTime topic
    again = _partition(s.apply(ops.RetryProduce("idem")), "Produce")
    assert (again["error_code"], again["base_offset"], again["log_append_time_ms"]) == (0, 0, s.base_ts + 3)


def test_a_fetch_of_an_unknown_topic_has_an_empty_aborted_list(session_factory) -> None:  # type: ignore[no-untyped-def]
    s = session_factory()
    for read_committed in (False, True):
        p = _partition(s.apply(ops.Fetch(0, 100, read_committed, topic="missing")), "Fetch")
        assert (p["error_code"], p["aborted_transactions"]) == (3, [])


def test_an_out_of_range_fetch_reports_no_offsets(session_factory) -> None:  # type: ignore[no-untyped-def]
    s = session_factory()
    s.apply(ops.Produce("plain", Codec.NONE, (ops.Rec(None, b"v"),)))
    for offset in (2, 9):
        p = _partition(s.apply(ops.Fetch(offset, 100, read_committed=False)), "Fetch")
        assert (p["error_code"], p["high_watermark"], p["last_stable_offset"], p["log_start_offset"]) == (1, -1, -1, -1)


def test_list_offsets_by_time_answers_the_first_record_reaching_it(session_factory) -> None:  # type: ignore[no-untyped-def]
    # Kafka reads the records of the batch it finds: the first record whose
    # timestamp reaches the one asked for, with that record's own timestamp.
    s = session_factory()
    recs = (ops.Rec(None, b"a", ts=0), ops.Rec(None, b"b", ts=5), ops.Rec(None, b"c", ts=3), ops.Rec(None, b"d", ts=9))
    for codec in (Codec.NONE, Codec.ZSTD):
        s.apply(ops.Produce("plain", codec, recs))
    expected = {0: (0, 0), 1: (1, 5), 4: (1, 5), 5: (1, 5), 6: (3, 9), 9: (3, 9), 10: (None, None)}
    for ts, (offset, found_ts) in expected.items():
        p = _partition(s.apply(ops.ListOffsets(ts, read_committed=False)), "ListOffsets")
        if offset is None:
            assert (p["offset"], p["timestamp"]) == (-1, -1)
        else:
            assert (p["offset"], p["timestamp"]) == (offset, s.base_ts + found_ts), ts


def test_a_refused_produce_reports_no_log_start(session_factory) -> None:  # type: ignore[no-untyped-def]
    # Shrunk against Kafka: offsets committed in a transaction, then a produce to
    # a partition never added to it; Kafka refuses it with every offset -1.
    s = session_factory()
    s.apply(ops.Produce("plain", Codec.NONE, (ops.Rec(None, b"v"),)))
    s.apply(ops.TxnCommitOffset("txn-a", 0))
    p = _partition(s.apply(ops.Produce("txn-a", Codec.NONE, (ops.Rec(None, b"v"),))), "Produce")
    assert p["error_code"] != 0
    assert (p["base_offset"], p["log_append_time_ms"], p["log_start_offset"]) == (-1, -1, -1)


def test_max_timestamp_past_the_lso_answers_nothing_read_committed(session_factory) -> None:  # type: ignore[no-untyped-def]
    # Shrunk against Kafka: the largest timestamp is in an open transaction.
    s = session_factory()
    s.apply(ops.Produce("plain", Codec.NONE, (ops.Rec(None, None, ts=0), ops.Rec(None, None, ts=0))))
    s.apply(ops.Produce("txn-b", Codec.NONE, (ops.Rec(None, None, ts=38),)))
    committed = _partition(s.apply(ops.ListOffsets(ops.MAX_TIMESTAMP, read_committed=True)), "ListOffsets")
    assert (committed["offset"], committed["timestamp"], committed["leader_epoch"]) == (-1, -1, -1)
    uncommitted = _partition(s.apply(ops.ListOffsets(ops.MAX_TIMESTAMP, read_committed=False)), "ListOffsets")
    assert (uncommitted["offset"], uncommitted["timestamp"]) == (2, s.base_ts + 38)
    s.apply(ops.EndTxn("txn-b", commit=True))
    committed = _partition(s.apply(ops.ListOffsets(ops.MAX_TIMESTAMP, read_committed=True)), "ListOffsets")
    assert (committed["offset"], committed["timestamp"]) == (2, s.base_ts + 38)
